"""Traffic policy: validation, CEL compilation and application to HTTP traffic.

A policy is an object whose keys are phases, each a list of rules::

    {"on_http_request":  [{"name": "...", "expressions": ["<CEL>"], "actions": [...]}],
     "on_http_response": [...]}

A rule runs only when ALL its expressions evaluate to ``true`` (no expressions: always).
Actions run in order. Everything is checked at creation: unknown phases, rule keys,
action types, bad action config and CEL that does not compile (or names a variable the
phase does not offer) raise PolicyError, which the API turns into a 400.

LIMITATIONS compared with the ngrok cloud: only the phases and actions listed in
``ACTIONS`` exist; an expression that fails at run time (for instance a missing map key)
counts as false and is logged, instead of failing the request.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import celpy
import yaml
from celpy import celtypes
from multidict import CIMultiDict

from .errors import StartupError
from .validation import is_header_name, is_header_value

log = logging.getLogger(__name__)

REQUEST_PHASE = "on_http_request"
RESPONSE_PHASE = "on_http_response"
PHASES = (REQUEST_PHASE, RESPONSE_PHASE)

# Variables each phase offers to CEL (documented in README.md).
PHASE_VARIABLES = {
    REQUEST_PHASE: ("req", "conn"),
    RESPONSE_PHASE: ("req", "res", "conn"),
}

ACTIONS = {
    REQUEST_PHASE: ("add-headers", "remove-headers", "deny"),
    RESPONSE_PHASE: ("add-headers", "remove-headers"),
}

RULE_KEYS = ("name", "expressions", "actions")
ACTION_KEYS = ("type", "config")
MAX_RULES_PER_PHASE = 100
MAX_POLICY_BYTES = 64 * 1024
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")

_cel_env = celpy.Environment()


class PolicyError(ValueError):
    """A policy that cannot be accepted; ``path`` names the offending element."""

    def __init__(self, path: str, msg: str) -> None:
        super().__init__(f"{path}: {msg}")
        self.path = path
        self.msg = msg


class Denied(Exception):
    def __init__(self, status: int, rule: str) -> None:
        super().__init__(rule)
        self.status = status
        self.rule = rule


def _sample_activation(phase: str) -> dict[str, Any]:
    """Values of the right shape, used to find unknown variables at compile time."""
    sample: dict[str, Any] = {
        "req": {
            "method": "GET",
            "url": "http://example.localhost/",
            "path": "/",
            "query": "",
            "query_params": {},
            "host": "example.localhost",
            "headers": {},
        },
        "conn": {"client_ip": "127.0.0.1"},
        "res": {"status_code": 200, "headers": {}},
    }
    return {name: celpy.json_to_cel(sample[name]) for name in PHASE_VARIABLES[phase]}


def _compile_cel(source: Any, phase: str, path: str) -> celpy.Runner:
    if not isinstance(source, str) or not source.strip():
        raise PolicyError(path, "must be a non-empty CEL expression string")
    try:
        program = _cel_env.program(_cel_env.compile(source))
    except Exception as exc:  # celpy raises CELParseError and friends
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        where = f" (syntax error at line {line}, column {column})" if line else ""
        raise PolicyError(path, f"invalid CEL expression {source!r}{where}") from None
    try:
        program.evaluate(_sample_activation(phase))
    except celpy.CELEvalError as exc:
        text = str(exc.args[0]) if exc.args else ""
        match = re.match(r"undeclared reference to '([^']+)'", text)
        if match:
            allowed = ", ".join(PHASE_VARIABLES[phase])
            raise PolicyError(
                path,
                f"CEL expression {source!r} uses unknown variable {match.group(1)!r}; "
                f"{phase} offers: {allowed}",
            ) from None
    except Exception:  # a run-time error on sample data is not a compile error
        pass
    return program


@dataclass
class _HeaderValue:
    """A header value, possibly with ``${CEL}`` interpolations."""

    text: str
    parts: list[Any] = field(default_factory=list)  # str or compiled program

    def render(self, activation: dict[str, Any] | None) -> str:
        if not self.parts:
            return self.text
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            try:
                value = part.evaluate(activation or {})
            except Exception as exc:
                log.warning("header interpolation failed: %s", exc)
                value = ""
            out.append(_cel_to_text(value))
        return "".join(out)


def _cel_to_text(value: Any) -> str:
    if isinstance(value, celtypes.BoolType):
        return "true" if value else "false"
    if isinstance(value, (celtypes.ListType, celtypes.MapType)):
        return json.dumps(_cel_to_json(value))
    return str(value)


def _cel_to_json(value: Any) -> Any:
    if isinstance(value, celtypes.MapType):
        return {str(k): _cel_to_json(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [_cel_to_json(v) for v in value]
    return str(value)


def _compile_header_value(value: str, phase: str, path: str) -> _HeaderValue:
    if "${" not in value:
        return _HeaderValue(value)
    parts: list[Any] = []
    pos = 0
    for match in _INTERPOLATION.finditer(value):
        if match.start() > pos:
            parts.append(value[pos : match.start()])
        parts.append(_compile_cel(match.group(1), phase, path))
        pos = match.end()
    if pos < len(value):
        parts.append(value[pos:])
    return _HeaderValue(value, parts)


@dataclass
class _Action:
    type: str
    set_headers: list[tuple[str, _HeaderValue]] = field(default_factory=list)
    remove_headers: list[str] = field(default_factory=list)
    deny_status: int = 403


@dataclass
class _Rule:
    name: str
    programs: list[celpy.Runner]
    actions: list[_Action]
    needs_activation: bool

    def matches(self, activation: dict[str, Any] | None) -> bool:
        for program in self.programs:
            try:
                result = program.evaluate(activation or {})
            except Exception as exc:
                log.warning("rule %r: expression failed, treated as false: %s", self.name, exc)
                return False
            if not (isinstance(result, celtypes.BoolType) and bool(result)):
                return False
        return True


def _compile_action(raw: Any, phase: str, path: str) -> _Action:
    if not isinstance(raw, dict):
        raise PolicyError(path, "must be an object with 'type' and 'config'")
    unknown = sorted(set(raw) - set(ACTION_KEYS))
    if unknown:
        raise PolicyError(
            path, f"unknown key {unknown[0]!r}; accepted: {', '.join(ACTION_KEYS)}"
        )
    action_type = raw.get("type")
    allowed = ACTIONS[phase]
    if action_type not in allowed:
        raise PolicyError(
            f"{path}.type",
            f"unknown action type {action_type!r} for {phase}; accepted: {', '.join(allowed)}",
        )
    config = raw.get("config")
    if config is None and action_type == "deny":
        config = {}
    if not isinstance(config, dict):
        raise PolicyError(f"{path}.config", "must be an object")
    cpath = f"{path}.config"
    if action_type == "add-headers":
        _only_keys(config, ("headers",), cpath)
        headers = config.get("headers")
        if not isinstance(headers, dict) or not headers:
            raise PolicyError(f"{cpath}.headers", "must be a non-empty map of header name to value")
        pairs = []
        for name, value in headers.items():
            if not is_header_name(name):
                raise PolicyError(f"{cpath}.headers", f"{name!r} is not a valid header name")
            if not is_header_value(value):
                raise PolicyError(
                    f"{cpath}.headers.{name}",
                    "must be a string without CR, LF or NUL characters",
                )
            pairs.append((name, _compile_header_value(value, phase, f"{cpath}.headers.{name}")))
        return _Action(action_type, set_headers=pairs)
    if action_type == "remove-headers":
        _only_keys(config, ("headers",), cpath)
        names = config.get("headers")
        if not isinstance(names, list) or not names:
            raise PolicyError(f"{cpath}.headers", "must be a non-empty list of header names")
        for name in names:
            if not is_header_name(name):
                raise PolicyError(f"{cpath}.headers", f"{name!r} is not a valid header name")
        return _Action(action_type, remove_headers=list(names))
    # deny
    _only_keys(config, ("status_code",), cpath)
    status = config.get("status_code", 403)
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise PolicyError(f"{cpath}.status_code", "must be an integer between 400 and 599")
    return _Action(action_type, deny_status=status)


def _only_keys(obj: dict, accepted: Iterable[str], path: str) -> None:
    unknown = sorted(set(obj) - set(accepted))
    if unknown:
        raise PolicyError(path, f"unknown key {unknown[0]!r}; accepted: {', '.join(accepted)}")


class CompiledPolicy:
    """A validated policy, ready to apply. ``document`` is the policy as given."""

    def __init__(self, document: dict[str, Any], rules: dict[str, list[_Rule]]) -> None:
        self.document = document
        self._rules = rules

    def _run(
        self,
        phase: str,
        headers: CIMultiDict,
        activation_factory: Callable[[], dict[str, Any]],
    ) -> None:
        rules = self._rules.get(phase) or []
        activation = None
        for rule in rules:
            if rule.needs_activation and activation is None:
                activation = activation_factory()
            if not rule.matches(activation):
                continue
            for action in rule.actions:
                if action.type == "deny":
                    raise Denied(action.deny_status, rule.name)
                for name in action.remove_headers:
                    headers.popall(name, None)
                for name, value in action.set_headers:
                    headers[name] = value.render(activation)

    def apply_request(
        self, headers: CIMultiDict, activation_factory: Callable[[], dict[str, Any]]
    ) -> None:
        """Apply on_http_request rules to ``headers`` in place; raise Denied on ``deny``."""
        self._run(REQUEST_PHASE, headers, activation_factory)

    def apply_response(
        self, headers: CIMultiDict, activation_factory: Callable[[], dict[str, Any]]
    ) -> None:
        self._run(RESPONSE_PHASE, headers, activation_factory)

    @property
    def has_response_rules(self) -> bool:
        return bool(self._rules.get(RESPONSE_PHASE))


def compile_policy(document: Any, path: str = "policy") -> CompiledPolicy:
    """Validate and compile a policy document; raise PolicyError naming the bad element."""
    if not isinstance(document, dict):
        raise PolicyError(path, "must be an object with on_http_request and/or on_http_response")
    if len(json.dumps(document)) > MAX_POLICY_BYTES:
        raise PolicyError(path, f"must be at most {MAX_POLICY_BYTES} bytes as JSON")
    rules: dict[str, list[_Rule]] = {}
    for phase, raw_rules in document.items():
        if phase not in PHASES:
            raise PolicyError(
                path, f"unknown phase {phase!r}; accepted: {', '.join(PHASES)}"
            )
        ppath = f"{path}.{phase}"
        if raw_rules is None:
            raw_rules = []
        if not isinstance(raw_rules, list):
            raise PolicyError(ppath, "must be a list of rules")
        if len(raw_rules) > MAX_RULES_PER_PHASE:
            raise PolicyError(ppath, f"must hold at most {MAX_RULES_PER_PHASE} rules")
        compiled = []
        for index, raw in enumerate(raw_rules):
            rpath = f"{ppath}[{index}]"
            if not isinstance(raw, dict):
                raise PolicyError(rpath, "must be an object with name, expressions and actions")
            _only_keys(raw, RULE_KEYS, rpath)
            name = raw.get("name", "")
            if name is None:
                name = ""
            if not isinstance(name, str) or len(name) > 255:
                raise PolicyError(f"{rpath}.name", "must be a string of at most 255 characters")
            expressions = raw.get("expressions") or []
            if not isinstance(expressions, list):
                raise PolicyError(f"{rpath}.expressions", "must be a list of CEL expressions")
            programs = [
                _compile_cel(expr, phase, f"{rpath}.expressions[{i}]")
                for i, expr in enumerate(expressions)
            ]
            actions = raw.get("actions")
            if not isinstance(actions, list) or not actions:
                raise PolicyError(f"{rpath}.actions", "must be a non-empty list of actions")
            compiled_actions = [
                _compile_action(action, phase, f"{rpath}.actions[{i}]")
                for i, action in enumerate(actions)
            ]
            needs = bool(programs) or any(
                value.parts for a in compiled_actions for _, value in a.set_headers
            )
            compiled.append(_Rule(name or f"{phase}[{index}]", programs, compiled_actions, needs))
        rules[phase] = compiled
    return CompiledPolicy(document, rules)


EMPTY_POLICY: dict[str, Any] = {REQUEST_PHASE: [], RESPONSE_PHASE: []}


def load_default_policy(path: str | None) -> CompiledPolicy:
    """Read and compile the default policy file (JSON, or YAML for any other suffix).

    No path: a policy without rules. Any problem raises StartupError naming the file.
    """
    if not path:
        return compile_policy(dict(EMPTY_POLICY))
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StartupError(f"default policy file {str(file)!r} cannot be read: {exc}") from None
    try:
        if file.suffix.lower() == ".json":
            document = json.loads(text)
        else:
            document = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise StartupError(
            f"default policy file {str(file)!r} is not valid JSON/YAML: {exc}"
        ) from None
    try:
        return compile_policy(document, path="default policy")
    except PolicyError as exc:
        raise StartupError(f"default policy file {str(file)!r} is invalid: {exc}") from None


def build_activation(
    *,
    method: str,
    url: str,
    path: str,
    query: str,
    query_params: dict[str, list[str]],
    host: str,
    headers: Iterable[tuple[str, str]],
    client_ip: str,
    status_code: int | None = None,
    response_headers: Iterable[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """CEL variables for one request (and its response, once known)."""
    activation: dict[str, Any] = {
        "req": celpy.json_to_cel(
            {
                "method": method,
                "url": url,
                "path": path,
                "query": query,
                "query_params": query_params,
                "host": host,
                "headers": _header_map(headers),
            }
        ),
        "conn": celpy.json_to_cel({"client_ip": client_ip}),
    }
    if status_code is not None:
        activation["res"] = response_variables(status_code, response_headers or ())
    return activation


def response_variables(status_code: int, headers: Iterable[tuple[str, str]]) -> Any:
    """The CEL ``res`` variable."""
    return celpy.json_to_cel({"status_code": status_code, "headers": _header_map(headers)})


def _header_map(headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in headers:
        out.setdefault(name.lower(), []).append(value)
    return out
