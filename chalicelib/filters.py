"""``filter`` on list routes: the hosted service's API filtering language, a subset of CEL.

The hosted docs ("API Filtering") define the language as a CEL subset evaluated against one
resource at a time, exposed as ``obj``::

    GET /credentials?filter=obj.description == "ci" && obj.created_at > timestamp("2025-01-01T00:00:00Z")

What is supported (the docs' list, all of it):

- logical ``!``, ``&&``, ``||``; comparisons ``<  <=  ==  !=  >=  >``; parentheses;
- list membership ``x in [a, b]`` (also ``"v" in obj.<list field>`` and a key ``in`` a map);
- string checks ``s.startsWith(t)``, ``s.contains(t)``, ``s.endsWith(t)``;
- length/emptiness ``size(x)`` / ``x.size()``, ``== ""``, ``== null``;
- time ``timestamp("<RFC 3339>")``, ``timestamp(time.now)``, ``.subtract("<duration>")`` and
  ``.add("<duration>")`` with durations such as ``"7d"``, ``"1h30m"``, ``"90s"``, ``"250ms"``.
- literals: strings (``"…"`` or ``'…'``, with ``\\`` escapes), integers, decimals, ``true``,
  ``false``, ``null``, lists ``[…]``.

``obj.<field>`` (and ``obj.<field>.<sub>``, ``obj.<field>[i]``) reads the resource exactly as
the API returns it; a ``created_at`` string compared with a timestamp is read as one.

How it is run (chalicelib.rest's list view): :func:`compile_filter` parses the expression once
per request into Python closures; the list then reads the collection page by page (each one
DynamoDB Query) and keeps the items the filter accepts, stopping at ``limit`` matches or after
:data:`SCAN_LIMIT` items read, whichever comes first. ``next_page_uri`` then continues after
the last item *read* (not returned), so a filtered page may hold fewer than ``limit`` items
(even none) and still have a next page; the last page has ``next_page_uri: null``.

Errors (400, ``ERR_NGROK_250``, the message names the problem and its position): a syntax
error, an unknown function or method, a name other than ``obj`` / ``time.now``, a bad
timestamp or duration literal, an expression over :data:`MAX_LENGTH` bytes or nested deeper
than :data:`MAX_DEPTH`; while evaluating: a field the resource does not have, or operands a
comparison does not accept (``obj.description > 3``). Deviation from CEL: an ordering
comparison (``<`` …) with ``null`` on one side is false rather than an error, so a filter on
an optional field skips the items where it is unset.
"""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

from chalicelib.core import errors

MAX_LENGTH = 4096  # bytes of UTF-8
MAX_DEPTH = 32  # nesting of parentheses, lists, calls and operators
SCAN_LIMIT = 500  # items one filtered page reads at most (5 Queries of 100)

Env = Dict[str, Any]  # {"obj": <rendered resource>, "now": datetime}
Node = Callable[[Env], Any]

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<float>\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!().,\[\]-])
""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "/": "/"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|ns|d|h|m|s)")
_DURATION_UNITS = {
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "ns": 1e-9,
}
_METHODS = {"startsWith": 1, "endsWith": 1, "contains": 1, "size": 0, "subtract": 1, "add": 1}
_FUNCTIONS = {"size": 1, "timestamp": 1}


class FilterError(errors.InvalidFilter):
    pass


def _fail(msg: str, pos: Optional[int] = None) -> FilterError:
    where = f" at position {pos}" if pos is not None else ""
    return FilterError(f"Invalid filter{where}: {msg}", details={"parameter": "filter"})


@dataclass
class _Tok:
    kind: str  # float int str ident op end
    text: str
    pos: int


def _tokens(text: str) -> List[_Tok]:
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise _fail(f"unexpected character {text[pos]!r}", pos)
        if match.lastgroup != "ws":
            out.append(_Tok(match.lastgroup, match.group(), pos))
        pos = match.end()
    out.append(_Tok("end", "", len(text)))
    return out


def _unquote(tok: _Tok) -> str:
    body, out, i = tok.text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
                continue
            raise _fail(f"unknown escape '\\{nxt}' in string", tok.pos + 1 + i)
        out.append(ch)
        i += 1
    return "".join(out)


# ---- values --------------------------------------------------------------------------------
class _Now:
    """``time.now``: only meaningful as the argument of timestamp()."""


def parse_timestamp(text: str) -> Optional[datetime]:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if value.tzinfo is None:
        return None
    return value


def parse_duration(text: str) -> Optional[timedelta]:
    """Go-style duration with a day unit: ``7d``, ``1h30m``, ``90s``, ``250ms``, ``-2h``."""
    sign, rest = (-1, text[1:]) if text.startswith("-") else (1, text)
    if not rest:
        return None
    total, pos = 0.0, 0
    for match in _DURATION.finditer(rest):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(rest):
        return None
    return timedelta(seconds=sign * total)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime):
        return "timestamp"
    if isinstance(value, timedelta):
        return "duration"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _coerce_pair(left: Any, right: Any) -> Tuple[Any, Any]:
    """A timestamp against an RFC 3339 string (``obj.created_at``) compares as timestamps."""
    if isinstance(left, datetime) and isinstance(right, str):
        parsed = parse_timestamp(right)
        if parsed is not None:
            return left, parsed
    if isinstance(right, datetime) and isinstance(left, str):
        parsed = parse_timestamp(left)
        if parsed is not None:
            return parsed, right
    return left, right


def _equal(left: Any, right: Any) -> bool:
    left, right = _coerce_pair(left, right)
    lk, rk = _kind(left), _kind(right)
    if lk != rk:
        return False
    if lk == "list":
        return len(left) == len(right) and all(_equal(a, b) for a, b in zip(left, right))
    if lk == "map":
        return left.keys() == right.keys() and all(_equal(left[k], right[k]) for k in left)
    return left == right


_ORDERED = {"number", "string", "timestamp", "duration"}


def _compare(op: str, left: Any, right: Any, pos: int) -> bool:
    left, right = _coerce_pair(left, right)
    if left is None or right is None:
        return False
    lk, rk = _kind(left), _kind(right)
    if lk != rk or lk not in _ORDERED:
        raise _fail(f"'{op}' cannot compare {lk} with {rk}", pos)
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


def _truth(value: Any, pos: int) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"expected a boolean, got {_kind(value)}", pos)
    return value


def _size(value: Any, pos: int) -> int:
    if isinstance(value, (str, list, dict)):
        return len(value)
    if value is None:
        return 0
    raise _fail(f"size() of {_kind(value)}", pos)


# ---- parser: recursive descent, building closures ---------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self, text: Optional[str] = None, kind: Optional[str] = None) -> Optional[_Tok]:
        tok = self.tok
        if (text is not None and tok.text != text) or (kind is not None and tok.kind != kind):
            return None
        if text is not None and tok.kind not in ("op", "ident"):
            return None
        self.i += 1
        return tok

    def expect(self, text: str) -> _Tok:
        tok = self.take(text)
        if tok is None:
            raise _fail(f"expected '{text}', found {self._shown()}", self.tok.pos)
        return tok

    def _shown(self) -> str:
        return "the end of the expression" if self.tok.kind == "end" else repr(self.tok.text)

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _fail(f"nested deeper than {MAX_DEPTH} levels", self.tok.pos)

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise _fail("the expression is empty")
        node = self.or_()
        if self.tok.kind != "end":
            raise _fail(f"unexpected {self._shown()} after a complete expression", self.tok.pos)
        return node

    def or_(self) -> Node:
        node = self.and_()
        while (tok := self.take("||")) is not None:
            left, right, pos = node, self.and_(), tok.pos
            node = (lambda l, r, p: lambda env: _truth(l(env), p) or _truth(r(env), p))(
                left, right, pos
            )
        return node

    def and_(self) -> Node:
        node = self.relation()
        while (tok := self.take("&&")) is not None:
            left, right, pos = node, self.relation(), tok.pos
            node = (lambda l, r, p: lambda env: _truth(l(env), p) and _truth(r(env), p))(
                left, right, pos
            )
        return node

    def relation(self) -> Node:
        node = self.unary()
        tok = self.tok
        if tok.kind == "op" and tok.text in ("==", "!=", "<", "<=", ">", ">="):
            self.i += 1
            right = self.unary()
            return _relation(tok.text, node, right, tok.pos)
        if tok.kind == "ident" and tok.text == "in":
            self.i += 1
            right = self.unary()
            return _membership(node, right, tok.pos)
        return node

    def unary(self) -> Node:
        if (tok := self.take("!")) is not None:
            self.nest()
            inner = self.unary()
            self.depth -= 1
            return lambda env: not _truth(inner(env), tok.pos)
        if (tok := self.take("-")) is not None:
            self.nest()
            inner = self.unary()
            self.depth -= 1

            def negate(env: Env) -> Any:
                value = inner(env)
                if _kind(value) != "number":
                    raise _fail(f"cannot negate {_kind(value)}", tok.pos)
                return -value

            return negate
        return self.postfix()

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            if (dot := self.take(".")) is not None:
                name = self.take(kind="ident")
                if name is None:
                    raise _fail(f"expected a name after '.', found {self._shown()}", self.tok.pos)
                if self.take("(") is not None:
                    node = self.method(node, name)
                else:
                    node = _field(node, name.text, dot.pos)
            elif (bracket := self.take("[")) is not None:
                self.nest()
                index = self.or_()
                self.expect("]")
                self.depth -= 1
                node = _index(node, index, bracket.pos)
            else:
                return node

    def args(self) -> List[Node]:
        self.nest()
        out: List[Node] = []
        if self.take(")") is None:
            out.append(self.or_())
            while self.take(",") is not None:
                out.append(self.or_())
            self.expect(")")
        self.depth -= 1
        return out

    def method(self, target: Node, name: _Tok) -> Node:
        if name.text not in _METHODS:
            raise _fail(
                f"unknown method '{name.text}' (supported: {', '.join(sorted(_METHODS))})",
                name.pos,
            )
        args = self.args()
        if len(args) != _METHODS[name.text]:
            raise _fail(
                f"{name.text}() takes {_METHODS[name.text]} argument(s), got {len(args)}", name.pos
            )
        return _method(name.text, target, args, name.pos)

    def primary(self) -> Node:
        tok = self.tok
        if tok.kind == "int":
            self.i += 1
            value = int(tok.text)
            return lambda env: value
        if tok.kind == "float":
            self.i += 1
            fvalue = float(tok.text)
            return lambda env: fvalue
        if tok.kind == "str":
            self.i += 1
            svalue = _unquote(tok)
            return lambda env: svalue
        if self.take("(") is not None:
            self.nest()
            node = self.or_()
            self.expect(")")
            self.depth -= 1
            return node
        if self.take("[") is not None:
            self.nest()
            items: List[Node] = []
            if self.take("]") is None:
                items.append(self.or_())
                while self.take(",") is not None:
                    items.append(self.or_())
                self.expect("]")
            self.depth -= 1
            return lambda env: [item(env) for item in items]
        if tok.kind == "ident":
            self.i += 1
            return self.name(tok)
        raise _fail(f"expected a value, found {self._shown()}", tok.pos)

    def name(self, tok: _Tok) -> Node:
        text = tok.text
        if text in ("true", "false"):
            flag = text == "true"
            return lambda env: flag
        if text == "null":
            return lambda env: None
        if text == "obj":
            return lambda env: env["obj"]
        if text == "time":
            self.expect(".")
            now = self.take(kind="ident")
            if now is None or now.text != "now":
                raise _fail("the only name under 'time' is 'time.now'", tok.pos)
            return lambda env: _Now()
        if self.tok.text == "(" and self.tok.kind == "op":
            if text not in _FUNCTIONS:
                raise _fail(
                    f"unknown function '{text}' (supported: {', '.join(sorted(_FUNCTIONS))})",
                    tok.pos,
                )
            self.i += 1
            args = self.args()
            if len(args) != _FUNCTIONS[text]:
                raise _fail(
                    f"{text}() takes {_FUNCTIONS[text]} argument(s), got {len(args)}", tok.pos
                )
            return _function(text, args[0], tok.pos)
        raise _fail(f"unknown name '{text}': fields are read as 'obj.<field>'", tok.pos)


def _relation(op: str, left: Node, right: Node, pos: int) -> Node:
    if op == "==":
        return lambda env: _equal(left(env), right(env))
    if op == "!=":
        return lambda env: not _equal(left(env), right(env))
    return lambda env: _compare(op, left(env), right(env), pos)


def _membership(needle: Node, haystack: Node, pos: int) -> Node:
    def run(env: Env) -> bool:
        value, container = needle(env), haystack(env)
        if isinstance(container, list):
            return any(_equal(value, item) for item in container)
        if isinstance(container, dict):
            return isinstance(value, str) and value in container
        if container is None:
            return False
        raise _fail(f"'in' needs a list or a map on its right, got {_kind(container)}", pos)

    return run


def _field(target: Node, name: str, pos: int) -> Node:
    def run(env: Env) -> Any:
        value = target(env)
        if isinstance(value, dict):
            if name not in value:
                raise _fail(f"no field '{name}'", pos + 1)
            return value[name]
        if value is None:
            return None  # obj.backend.id where backend is null: null, not an error
        if isinstance(value, _Now) and name:
            raise _fail("time.now has no fields", pos)
        raise _fail(f"'.{name}' on a {_kind(value)}", pos)

    return run


def _index(target: Node, index: Node, pos: int) -> Node:
    def run(env: Env) -> Any:
        value, key = target(env), index(env)
        if isinstance(value, list) and _kind(key) == "number" and int(key) == key:
            return value[int(key)] if -len(value) <= key < len(value) else None
        if isinstance(value, dict) and isinstance(key, str):
            return value.get(key)
        if value is None:
            return None
        raise _fail(f"cannot index {_kind(value)} with {_kind(key)}", pos)

    return run


def _method(name: str, target: Node, args: List[Node], pos: int) -> Node:
    if name == "size":
        return lambda env: _size(target(env), pos)
    if name in ("subtract", "add"):
        sign = -1 if name == "subtract" else 1
        duration = _literal_duration(args[0], pos)

        def shift(env: Env) -> Any:
            value = target(env)
            if isinstance(value, str):
                value = parse_timestamp(value) or value
            if not isinstance(value, datetime):
                raise _fail(f"{name}() applies to a timestamp, not {_kind(value)}", pos)
            return value + sign * duration

        return shift
    arg = args[0]

    def check(env: Env) -> Any:
        value, other = target(env), arg(env)
        if value is None:
            return False
        if not isinstance(value, str) or not isinstance(other, str):
            raise _fail(f"{name}() compares strings, got {_kind(value)} and {_kind(other)}", pos)
        if name == "startsWith":
            return value.startswith(other)
        if name == "endsWith":
            return value.endswith(other)
        return other in value

    return check


def _literal_duration(arg: Node, pos: int) -> timedelta:
    try:
        text = arg({"obj": None})
    except FilterError:
        text = None
    duration = parse_duration(text) if isinstance(text, str) else None
    if duration is None:
        raise _fail('the duration must be a string literal such as "7d", "1h30m" or "90s"', pos)
    return duration


def _function(name: str, arg: Node, pos: int) -> Node:
    if name == "size":
        return lambda env: _size(arg(env), pos)
    try:  # timestamp("<literal>") is checked once, at compile time
        literal = arg({"obj": None, "now": None})
    except FilterError:
        literal = None
    if isinstance(literal, str):
        stamp = parse_timestamp(literal)
        if stamp is None:
            raise _fail(f"timestamp() needs an RFC 3339 time with a zone, got {literal!r}", pos)
        return lambda env: stamp

    def run(env: Env) -> Any:
        value = arg(env)
        if isinstance(value, _Now):
            return env["now"]
        if isinstance(value, datetime):
            return value
        if isinstance(value, str) and parse_timestamp(value) is not None:
            return parse_timestamp(value)
        raise _fail(f"timestamp() of {_kind(value)}", pos)

    return run


# ---- the interface ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Filter:
    text: str
    node: Node
    now: datetime

    def matches(self, obj: Dict[str, Any]) -> bool:
        result = self.node({"obj": obj, "now": self.now})
        if not isinstance(result, bool):
            raise _fail(f"the filter must be a condition (true or false), it gave {_kind(result)}")
        return result


def compile_filter(text: str, now: Optional[datetime] = None) -> Filter:
    """Parse ``text`` once; ``now`` is ``time.now`` for the whole request. 400 when invalid."""
    if len(text.encode("utf-8")) > MAX_LENGTH:
        raise _fail(f"the expression is over {MAX_LENGTH} bytes")
    node = _Parser(text).parse()
    return Filter(text, node, now or datetime.now(timezone.utc))
