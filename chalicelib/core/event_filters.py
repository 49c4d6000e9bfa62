"""Event sources' ``filter`` and ``fields``: which events a source delivers, and which of
their fields.

Both planes use this module: the API checks a source's ``filter`` and ``fields`` when a
subscription or source is created or changed (a 400 naming the field), the edge's delivery
(edge/events.py, in its delivery process) evaluates the filter on each event and trims it.

**filter** is a CEL expression (the traffic policy's runtime, cel-expr-python) that must
evaluate to a bool. Its variables:

- every event: ``event`` (the whole envelope: ``event_id``, ``event_type``,
  ``event_timestamp``, ``account_id``, ``object`` and, for API events, ``principal``);
- traffic events (``http_request_complete.v0``, ``tcp_connection_closed.v0``): the
  object's top-level groups by their hosted names, ``conn``, ``endpoint``, ``http``
  (HTTP only), ``traffic_policy``: ``conn.client_ip == "192.0.2.1"``,
  ``http.response.status_code >= 500``;
- API events (``*_created.v0`` …): ``object`` (the resource as the API returns it) and
  ``principal``: ``object.description.startsWith("prod")``.

An event for which the filter is false, or fails (a field the event does not have), is not
delivered by that source.

**Bounds** (a 400 ``filter`` names the reason): at most :data:`MAX_FILTER_BYTES` bytes, nesting
(parentheses, brackets, braces) at most :data:`MAX_FILTER_DEPTH` deep, at most
:data:`MAX_FILTER_TOKENS` tokens, and no comprehension macros (``all``, ``exists``,
``exists_one``, ``map``, ``filter``): with no loop, one evaluation does at most one step per
token, each on values no larger than the event (itself bounded: docs/EVENTS.md), so its cost
is linear in the expression and the event.

**fields** selects what the object keeps: dotted paths (``conn.client_ip``, ``http``: a
prefix keeps the whole group); the envelope (id, type, time, account, principal) is always
kept. At most :data:`MAX_FIELDS` distinct paths of at most :data:`MAX_FIELD_BYTES` bytes; for
traffic events each must be one of the type's fields (or a group of them), for API events a
field of the resource (one it lacks is left out). Empty: every field.
"""

import re
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from chalicelib.core import errors

MAX_FILTER_BYTES = 1024
MAX_FILTER_DEPTH = 16
MAX_FILTER_TOKENS = 256
MAX_FIELDS = 64
MAX_FIELD_BYTES = 128
MACROS = ("all", "exists", "exists_one", "map", "filter")

HTTP_REQUEST_COMPLETE = "http_request_complete.v0"
TCP_CONNECTION_CLOSED = "tcp_connection_closed.v0"

_CONN = (
    "conn.client_ip",
    "conn.client_port",
    "conn.server_ip",
    "conn.server_port",
    "conn.server_name",
    "conn.start_ts",
    "conn.end_ts",
    "conn.bytes_in",
    "conn.bytes_out",
)
_ENDPOINT = ("endpoint.id", "endpoint.url", "endpoint.host", "endpoint.proto", "endpoint.kind")
_POLICY = ("traffic_policy.logs", "traffic_policy.decisions")
# The fields of the traffic events (edge/events.py builds them; docs/EVENTS.md lists them).
TRAFFIC_FIELDS: Dict[str, Tuple[str, ...]] = {
    HTTP_REQUEST_COMPLETE: _CONN
    + _ENDPOINT
    + (
        "http.request.method",
        "http.request.version",
        "http.request.url.raw",
        "http.request.url.scheme",
        "http.request.url.host",
        "http.request.url.path",
        "http.request.url.query",
        "http.request.headers",
        "http.request.user_agent",
        "http.request.body_size",
        "http.response.status_code",
        "http.response.headers",
        "http.response.body_size",
        "http.duration_ms",
    )
    + _POLICY,
    TCP_CONNECTION_CLOSED: _CONN + ("conn.duration_ms",) + _ENDPOINT + _POLICY,
}

_FIELD_RE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>[rRbB]{0,2}(?:'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"
        |'(?:[^'\\\n]|\\[^\n])*'|"(?:[^"\\\n]|\\[^\n])*"))
  | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?|0[xX][0-9a-fA-F]+[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<open>[(\[{])
  | (?P<close>[)\]}])
  | (?P<op>&&|\|\||==|!=|<=|>=|[<>!?:+\-*/%.,])
    """,
    re.VERBOSE | re.DOTALL,
)


def _bad(field: str, why: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}' {why}", details={"field": field})


def is_traffic(kind: str) -> bool:
    return kind in TRAFFIC_FIELDS


def variables(kind: str) -> Tuple[str, ...]:
    """The names a filter of event type ``kind`` may use."""
    if kind == HTTP_REQUEST_COMPLETE:
        return ("event", "conn", "endpoint", "http", "traffic_policy")
    if kind == TCP_CONNECTION_CLOSED:
        return ("event", "conn", "endpoint", "traffic_policy")
    return ("event", "object", "principal")


def scan(text: str) -> Tuple[int, int]:
    """(tokens, deepest nesting) of a filter; ValueError naming what it refuses (a character
    CEL does not have, an unterminated string, unbalanced brackets, a comprehension macro)."""
    tokens = depth = deepest = 0
    position = 0
    previous = ""
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"unexpected character {text[position]!r} at {position}")
        position = match.end()
        group = match.lastgroup
        if group == "ws":
            continue
        tokens += 1
        value = match.group(0)
        if group == "open":
            depth += 1
            deepest = max(deepest, depth)
            if value == "(" and previous in MACROS:
                raise ValueError(
                    f"the macro '{previous}' (a loop) is not offered in event filters; "
                    "use 'in', comparisons and string functions"
                )
        elif group == "close":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '{value}' at {match.start()}")
        previous = value if group == "ident" else ""
    if depth:
        raise ValueError("unbalanced brackets")
    return tokens, deepest


# ---- compiling and evaluating (cel-expr-python, imported on first use) ----------------------
_envs: Dict[Tuple[str, ...], Any] = {}
_programs: "OrderedDict[Tuple[str, str], Any]" = OrderedDict()
_lock = threading.Lock()
MAX_PROGRAMS = 1024  # compiled filters kept per process (LRU)


def _env(names: Tuple[str, ...]) -> Any:
    from cel_expr_python import cel

    env = _envs.get(names)
    if env is None:
        dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        env = _envs[names] = cel.NewEnv(variables={n: dyn_map for n in names})
    return env


def cached_programs() -> int:
    """How many compiled filters this process keeps (at most MAX_PROGRAMS)."""
    return len(_programs)


def compile_filter(kind: str, text: str) -> Any:
    """The compiled filter (cached); ValueError with the reason when it is refused."""
    key = (kind, text)
    with _lock:
        program = _programs.get(key)
        if program is not None:
            _programs.move_to_end(key)
            return program
    if len(text.encode("utf-8")) > MAX_FILTER_BYTES:
        raise ValueError(f"is longer than {MAX_FILTER_BYTES} bytes")
    tokens, deepest = scan(text)
    if tokens > MAX_FILTER_TOKENS:
        raise ValueError(f"has {tokens} tokens; at most {MAX_FILTER_TOKENS}")
    if deepest > MAX_FILTER_DEPTH:
        raise ValueError(f"nests {deepest} deep; at most {MAX_FILTER_DEPTH}")
    from cel_expr_python import cel

    try:
        program = _env(variables(kind)).compile(text)
    except RuntimeError as exc:
        line = (str(exc).splitlines() or ["invalid expression"])[0]
        raise ValueError(
            re.sub(r"^[A-Z_]+: ", "", line).replace("ERROR: <input>:", "at ")
        ) from None
    if program.return_type() not in (cel.Type.BOOL, cel.Type.DYN):
        raise ValueError("must evaluate to a bool")
    with _lock:
        _programs[key] = program
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
    return program


def _data(kind: str, event: Dict[str, Any]) -> Dict[str, Any]:
    obj = event.get("object") or {}
    data: Dict[str, Any] = {"event": event}
    for name in variables(kind):
        if name == "object":
            data[name] = obj
        elif name == "principal":
            data[name] = event.get("principal") or {}
        elif name != "event":
            data[name] = obj.get(name) or {}
    return data


def matches(kind: str, text: str, event: Dict[str, Any]) -> bool:
    """Whether the filter accepts the event (an empty filter accepts all; a failing one
    does not)."""
    if not text:
        return True
    program = compile_filter(kind, text)
    try:
        result = program.eval(data=_data(kind, event))
        return result.plain_value() is True
    except Exception:  # noqa: BLE001 - a filter that fails on this event: not delivered
        return False


def check_filter(field: str, kind: str, value: Any) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise _bad(field, "must be a string (a CEL expression)")
    try:
        compile_filter(kind, value)
    except ValueError as exc:
        raise _bad(field, f"is not a valid event filter: {exc}") from None
    return value


def check_fields(field: str, kind: str, value: Any) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(field, "must be an array of field names")
    if len(value) > MAX_FIELDS:
        raise _bad(field, f"has {len(value)} entries; at most {MAX_FIELDS}")
    known = TRAFFIC_FIELDS.get(kind)
    out: List[str] = []
    for index, name in enumerate(value):
        where = f"{field}[{index}]"
        if (
            not isinstance(name, str)
            or len(name.encode("utf-8")) > MAX_FIELD_BYTES
            or not _FIELD_RE.match(name)
        ):
            raise _bad(
                where,
                f"must be a dotted field name (e.g. conn.client_ip), at most "
                f"{MAX_FIELD_BYTES} bytes",
            )
        if known is not None and not any(k == name or k.startswith(name + ".") for k in known):
            raise _bad(where, f"is not a field of {kind}: {', '.join(known)}")
        if name in out:
            raise _bad(where, f"repeats '{name}'")
        out.append(name)
    return out


def project(event: Dict[str, Any], fields: Sequence[str]) -> Dict[str, Any]:
    """The event with only ``fields`` of its object (all of it when ``fields`` is empty)."""
    if not fields:
        return event
    obj = event.get("object") or {}
    kept: Dict[str, Any] = {}
    for name in fields:
        parts = name.split(".")
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            target = kept
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
    return {**event, "object": kept}


def selection(filter_text: str, fields: Sequence[str]) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """A source's (filter, fields), or None when it has neither (the whole event, always)."""
    if not filter_text and not fields:
        return None
    return (filter_text, tuple(fields))
