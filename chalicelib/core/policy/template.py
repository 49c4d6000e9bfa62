"""``${expression}`` interpolation in action configs (the hosted service's CEL interpolation).

A template is literal text with embedded CEL expressions. Rendering it evaluates each
expression and joins the text; a template that is exactly one ``${…}`` can also yield the
value with its CEL type (set-vars). An expression that fails on a request renders as the
empty string and is reported in the Outcome's ``errors``.
"""

from typing import Any, List, Optional, Tuple, Union

from chalicelib.core.policy import celenv
from chalicelib.core.policy.document import PolicyError


def _split(text: str, where: str) -> List[Union[str, Tuple[str]]]:
    parts: List[Union[str, Tuple[str]]] = []
    literal: List[str] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("${", i):
            depth, j, quote = 1, i + 2, None
            while j < n and depth:
                ch = text[j]
                if quote:
                    if ch == "\\":
                        j += 1
                    elif ch == quote:
                        quote = None
                elif ch in "'\"":
                    quote = ch
                elif ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                j += 1
            if depth:
                raise PolicyError(where, "has a '${' with no closing '}'")
            if literal:
                parts.append("".join(literal))
                literal = []
            expression = text[i + 2 : j - 1].strip()
            if not expression:
                raise PolicyError(where, "has an empty '${}'")
            parts.append((expression,))
            i = j
        else:
            literal.append(text[i])
            i += 1
    if literal:
        parts.append("".join(literal))
    return parts


class Template:
    __slots__ = ("parts", "static", "single")

    def __init__(self, text: str, phase: str, where: str) -> None:
        if not isinstance(text, str):
            raise PolicyError(where, "must be a string")
        compiled: List[Union[str, celenv.Program]] = []
        for part in _split(text, where):
            if isinstance(part, tuple):
                try:
                    compiled.append(celenv.compile_expression(part[0], phase, want_bool=False))
                except celenv.CelError as exc:
                    raise PolicyError(where, f"bad CEL in '${{{part[0]}}}': {exc}") from None
            else:
                compiled.append(part)
        self.parts = compiled
        self.static: Optional[str] = text if all(isinstance(p, str) for p in compiled) else None
        self.single = (
            compiled[0] if len(compiled) == 1 and not isinstance(compiled[0], str) else None
        )

    def render(self, traffic: celenv.Traffic, errors: List[str]) -> str:
        if self.static is not None:
            return self.static
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                try:
                    out.append(celenv.to_text(part.evaluate(traffic)))
                except celenv.EvalError as exc:
                    errors.append(f"${{{part.text}}}: {exc}")
        return "".join(out)

    def value(self, traffic: celenv.Traffic, errors: List[str]) -> Any:
        """The typed value when the template is exactly one ``${…}``, else the text."""
        if self.single is not None:
            try:
                return self.single.evaluate(traffic)
            except celenv.EvalError as exc:
                errors.append(f"${{{self.single.text}}}: {exc}")
                return None
        return self.render(traffic, errors)
