"""The CEL environment of traffic policy: variables, macros, compile, evaluate.

The library is cel-expr-python (Google's cel-cpp runtime), chosen by ``bench/bench_cel.py``:
it type-checks at compile time with qualified variable names, so ``req.url`` is a string and
``req.url.path`` another variable exactly as the hosted service declares them, and an unknown
variable, member or function is a compile error (a 400 at creation), not a runtime surprise.

Variables come from the hosted service's reference ("Variables": conn, endpoint, req, res,
time, vars, action result variables). Each phase has its own environment: ``req.*`` does not
exist in ``on_tcp_connect``, ``res.*`` only in ``on_http_response``. Variables the hosted
service has and this service cannot compute (the geo variables finer than a country and the
AS number: ipintel.py's database is country-level; the edge's own certificate
(conn.tls.server.*), Kubernetes identity, req.ts.body_received) are not declared: a policy naming them is refused at creation
rather than silently seeing empty values. Values absent from a
request read as the zero value of their type (``req.content_length`` 0, ``req.url.port`` 0,
``res.location`` "").

Macros that read the request or response (``getReqHeader`` …) read the traffic being
evaluated through a thread-local set right before evaluation (evaluation is synchronous, so
no other request can interleave).
"""

import base64
import datetime
import hashlib
import ipaddress
import json
import random
import re
import threading
import zlib
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from cel_expr_python import cel

from chalicelib.core.policy import ipintel, tlsclient, useragent

T = cel.Type
STR, INT, BOOL, DYN, TS = T.STRING, T.INT, T.BOOL, T.DYN, T.TIMESTAMP
STR_LIST = T.List(STR)
MULTI = T.Map(STR, STR_LIST)
STR_MAP = T.Map(STR, STR)
DYN_MAP = T.Map(STR, DYN)

PHASES = ("on_tcp_connect", "on_http_request", "on_http_response", "on_event_stream_message")
HTTP_PHASES = PHASES[1:]
SSE_PHASE = "on_event_stream_message"  # per message of a text/event-stream response

_current = threading.local()


class Traffic:
    """What one evaluation sees: the connection, request, response, and the phase's state."""

    __slots__ = ("conn", "req", "res", "vars", "action_vars", "cache")

    def __init__(self, conn, req=None, res=None, vars=None, action_vars=None):
        self.conn = conn
        self.req = req
        self.res = res
        self.vars = vars if vars is not None else {}
        self.action_vars = action_vars if action_vars is not None else {}
        self.cache: Dict[str, Any] = {}

    def invalidate(self, headers_only: bool = False) -> None:
        """The request or response changed: derived values are recomputed. ``headers_only``
        (add-headers, remove-headers): the values no header alters stay (HEADER_FREE: the
        connection's, the endpoint's, the URL's; a policy of several add-headers rules
        matching on the path computed it once per rule before, bench/edge_bench's 5-rule case)."""
        if not headers_only:
            self.cache.clear()
            return
        cache = self.cache
        for name in [name for name in cache if name not in HEADER_FREE]:
            del cache[name]


def _media(values: List[str]) -> Tuple[str, Dict[str, str], str]:
    raw = values[0] if values else ""
    media, *params = raw.split(";")
    parameters = {}
    for param in params:
        key, _, value = param.strip().partition("=")
        if key:
            parameters[key.lower()] = value.strip().strip('"')
    return media.strip().lower(), parameters, raw


def _encodings(values: List[str]) -> List[str]:
    return [part.strip().lower() for value in values for part in value.split(",") if part.strip()]


def _req_ua(t: Traffic, member: str):
    if "_ua" not in t.cache:
        values = t.req.get_header("user-agent")
        t.cache["_ua"] = useragent.parse(values[0] if values else "")
    return t.cache["_ua"][member]


def _port(t: Traffic) -> int:
    try:
        return t.req.split().port or 0
    except ValueError:
        return 0


def _authority(t: Traffic) -> str:
    return t.req.split().netloc.rpartition("@")[2]


def _user_password(t: Traffic) -> str:
    netloc = t.req.split().netloc
    return netloc.rpartition("@")[0] if "@" in netloc else ""


def _raw_path(t: Traffic) -> str:
    return t.req.split().path or "/"


# name -> (type, phases, getter)
_V = Tuple[Any, Tuple[str, ...], Callable[[Traffic], Any]]
VARIABLES: Dict[str, _V] = {
    "conn.client_ip": (STR, PHASES, lambda t: t.conn.client_ip),
    "conn.client_port": (INT, PHASES, lambda t: int(t.conn.client_port)),
    "conn.server_ip": (STR, PHASES, lambda t: t.conn.server_ip),
    "conn.server_port": (INT, PHASES, lambda t: int(t.conn.server_port)),
    "conn.server_region": (STR, PHASES, lambda t: t.conn.server_region),
    "conn.bytes_in": (INT, PHASES, lambda t: int(t.conn.bytes_in)),
    "conn.bytes_out": (INT, PHASES, lambda t: int(t.conn.bytes_out)),
    "conn.ts.start": (TS, PHASES, lambda t: t.conn.ts_start),
    "conn.tls.version": (STR, PHASES, lambda t: t.conn.tls_version.replace("TLSv", "")),
    "conn.tls.cipher_suite": (STR, PHASES, lambda t: t.conn.tls_cipher_suite),
    "conn.tls.sni": (STR, PHASES, lambda t: t.conn.tls_sni),
    "conn.tls.negotiated_alpn": (STR, PHASES, lambda t: t.conn.tls_alpn),
    "conn.tls.session_resumed": (BOOL, PHASES, lambda t: False),
    "endpoint.id": (STR, PHASES, lambda t: t.conn.endpoint.id),
    "endpoint.url": (STR, PHASES, lambda t: t.conn.endpoint.url),
    "endpoint.host": (STR, PHASES, lambda t: t.conn.endpoint.host),
    "endpoint.addr": (STR, PHASES, lambda t: t.conn.endpoint.addr),
    "endpoint.port": (INT, PHASES, lambda t: int(t.conn.endpoint.port)),
    "endpoint.protocol": (STR, PHASES, lambda t: t.conn.endpoint.protocol),
    # geo and IP intelligence (chalicelib/core/policy/ipintel.py: a country-level database
    # and the operator's category lists)
    "conn.geo.country_code": (STR, PHASES, lambda t: ipintel.geo(t.conn.client_ip)[0]),
    "conn.geo.country": (STR, PHASES, lambda t: ipintel.geo(t.conn.client_ip)[1]),
    "conn.client_ip.as.organization": (STR, PHASES, lambda t: ipintel.geo(t.conn.client_ip)[2]),
    "conn.client_ip.categories": (
        STR_LIST,
        PHASES,
        lambda t: list(ipintel.categories(t.conn.client_ip)),
    ),
    "conn.client_ip.is_tor_node": (
        BOOL,
        PHASES,
        lambda t: ipintel.TOR in ipintel.categories(t.conn.client_ip),
    ),
    "conn.client_ip.is_on_blocklist": (
        BOOL,
        PHASES,
        lambda t: any(
            c.startswith(ipintel.BLOCKLIST_PREFIX) for c in ipintel.categories(t.conn.client_ip)
        ),
    ),
    "time.now": (
        STR,
        PHASES,
        lambda t: datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    ),
    "vars": (DYN_MAP, PHASES, lambda t: t.vars),
    "req.method": (STR, HTTP_PHASES, lambda t: t.req.method),
    "req.version": (STR, HTTP_PHASES, lambda t: t.req.version),
    "req.host": (STR, HTTP_PHASES, lambda t: t.req.host),
    "req.location": (STR, HTTP_PHASES, lambda t: (t.req.get_header("location") or [""])[0]),
    "req.headers": (MULTI, HTTP_PHASES, lambda t: t.req.header_map()),
    "req.trailers": (MULTI, HTTP_PHASES, lambda t: {}),
    "req.cookies": (T.Map(STR, T.List(STR_MAP)), HTTP_PHASES, lambda t: t.req.cookies()),
    "req.content_length": (INT, HTTP_PHASES, lambda t: int(t.req.content_length or 0)),
    "req.content_encoding": (
        STR_LIST,
        HTTP_PHASES,
        lambda t: _encodings(t.req.get_header("content-encoding")),
    ),
    "req.content_type": (STR, HTTP_PHASES, lambda t: _media(t.req.get_header("content-type"))[0]),
    "req.content_type.parameters": (
        STR_MAP,
        HTTP_PHASES,
        lambda t: _media(t.req.get_header("content-type"))[1],
    ),
    "req.content_type.raw": (
        STR,
        HTTP_PHASES,
        lambda t: _media(t.req.get_header("content-type"))[2],
    ),
    "req.ts.header_received": (TS, HTTP_PHASES, lambda t: t.req.ts_header_received),
    "req.url": (STR, HTTP_PHASES, lambda t: t.req.url),
    "req.url.raw": (STR, HTTP_PHASES, lambda t: t.req.url),
    "req.url.authority": (STR, HTTP_PHASES, _authority),
    "req.url.host": (STR, HTTP_PHASES, lambda t: t.req.split().hostname or ""),
    "req.url.path": (STR, HTTP_PHASES, lambda t: unquote(t.req.path)),
    "req.url.raw_path": (STR, HTTP_PHASES, _raw_path),
    "req.url.port": (INT, HTTP_PHASES, _port),
    "req.url.query": (STR, HTTP_PHASES, lambda t: t.req.query),
    "req.url.query_params": (MULTI, HTTP_PHASES, lambda t: t.req.query_params()),
    "req.url.scheme": (STR, HTTP_PHASES, lambda t: t.req.split().scheme),
    "req.url.uri": (STR, HTTP_PHASES, lambda t: t.req.target),
    "req.url.user_password": (STR, HTTP_PHASES, _user_password),
    "req.user_agent": (STR, HTTP_PHASES, lambda t: _req_ua(t, "raw")),
    "res.status_code": (INT, ("on_http_response",), lambda t: int(t.res.status_code)),
    "res.headers": (MULTI, ("on_http_response",), lambda t: t.res.header_map()),
    "res.trailers": (MULTI, ("on_http_response",), lambda t: {}),
    "res.cookies": (T.Map(STR, T.List(DYN_MAP)), ("on_http_response",), lambda t: t.res.cookies()),
    "res.location": (
        STR,
        ("on_http_response",),
        lambda t: (t.res.get_header("location") or [""])[0],
    ),
    "res.content_length": (
        INT,
        ("on_http_response",),
        lambda t: int((t.res.get_header("content-length") or ["0"])[0])
        if (t.res.get_header("content-length") or ["0"])[0].isdigit()
        else 0,
    ),
    "res.content_encoding": (
        STR_LIST,
        ("on_http_response",),
        lambda t: _encodings(t.res.get_header("content-encoding")),
    ),
    "res.content_type": (
        STR,
        ("on_http_response",),
        lambda t: _media(t.res.get_header("content-type"))[0],
    ),
    "res.content_type.parameters": (
        STR_MAP,
        ("on_http_response",),
        lambda t: _media(t.res.get_header("content-type"))[1],
    ),
    "res.content_type.raw": (
        STR,
        ("on_http_response",),
        lambda t: _media(t.res.get_header("content-type"))[2],
    ),
}
for _member in ("name", "version", "os", "os_version", "device", "url"):
    VARIABLES[f"req.user_agent.{_member}"] = (
        STR,
        HTTP_PHASES,
        (lambda m: lambda t: _req_ua(t, m))(_member),
    )
for _member in ("is_mobile", "is_tablet", "is_desktop", "is_bot"):
    VARIABLES[f"req.user_agent.{_member}"] = (
        BOOL,
        HTTP_PHASES,
        (lambda m: lambda t: _req_ua(t, m))(_member),
    )

# conn.tls.client.*: the client certificate the edge verified on a mutual-TLS handshake
# (chalicelib/core/policy/tlsclient.py; zero values without one)
_TLS_CLIENT_TYPES = {
    tlsclient.STRING: STR,
    tlsclient.STRINGS: STR_LIST,
    tlsclient.TIMESTAMP: TS,
    tlsclient.EXTENSIONS: T.List(DYN_MAP),
}
for _member, _tag in tlsclient.VARIABLES:
    VARIABLES[f"conn.tls.client.{_member}"] = (
        _TLS_CLIENT_TYPES[_tag],
        PHASES,
        (lambda m: lambda t: tlsclient.value(t.conn.tls_client_der, m))(_member),
    )

# Variables whose value no header change alters (derived from the connection, the endpoint,
# the request line and URL, or fields set once): Traffic.invalidate(headers_only=True) keeps them.
HEADER_FREE = frozenset(
    name
    for name in VARIABLES
    if name.startswith(("conn.", "endpoint.", "req.url"))
    or name in ("req.method", "req.version", "req.content_length", "req.ts.header_received")
)

# Result variables of the actions this engine runs (hosted docs, each action's "Action
# Variables"), with the phases of their action. Before the action ran they hold zero values.
_ERR = {"error.code": STR, "error.message": STR}
ACTION_VARIABLES: Dict[str, Tuple[Dict[str, Any], Tuple[str, ...]]] = {
    "add_headers": ({"headers_added": STR_MAP}, HTTP_PHASES),
    "remove_headers": ({"headers_removed": STR_LIST}, HTTP_PHASES),
    "redirect": ({"matches": STR_LIST, "url": STR, **_ERR}, ("on_http_request",)),
    "url_rewrite": ({"matches": STR_LIST, "url": STR, **_ERR}, ("on_http_request",)),
    "restrict_ips": ({"action": STR, "matched_cidr": STR, **_ERR}, PHASES),
    "rate_limit": ({"bucket_key": STR, "limited": BOOL, **_ERR}, ("on_http_request",)),
    "basic_auth": (
        {
            "credentials.presented": BOOL,
            "credentials.username": STR,
            "credentials.authorized": BOOL,
        },
        ("on_http_request",),
    ),
    "jwt_validation": (dict(_ERR), ("on_http_request",)),
    "verify_webhook": ({"verified": BOOL, **_ERR}, ("on_http_request",)),
    "compress": ({"already_compressed": BOOL, "negotiated_algorithm": STR}, ("on_http_response",)),
    "log": ({"metadata": DYN_MAP}, PHASES),
    # owasp-crs-request / owasp-crs-response (chalicelib.core.policy.waf)
    "owasp_crs_request": (
        {
            "decision": STR,
            "anomaly_score": INT,
            "anomaly_score_threshold": INT,
            "matched_rules": T.List(DYN_MAP),
            **_ERR,
        },
        ("on_http_request",),
    ),
    "owasp_crs_response": (
        {
            "decision": STR,
            "anomaly_score": INT,
            "anomaly_score_threshold": INT,
            "matched_rules": T.List(DYN_MAP),
            **_ERR,
        },
        ("on_http_response",),
    ),
    # http-request (chalicelib.core.policy.httpcall): req, res (with its body), attempts
    "http_request": (
        {"req": DYN_MAP, "res": DYN_MAP, "attempts": T.List(DYN_MAP), **_ERR},
        HTTP_PHASES,
    ),
    # openid-connect and oauth (chalicelib.core.policy.identity, edge/identity.py)
    "oidc": (
        {
            "identity.email": STR,
            "identity.name": STR,
            "identity.provider_user_id": STR,
            "identity.session_id": STR,
            **_ERR,
        },
        ("on_http_request",),
    ),
    "oauth": (
        {
            "identity.email": STR,
            "identity.name": STR,
            "identity.provider_user_id": STR,
            "identity.session_id": STR,
            **_ERR,
        },
        ("on_http_request",),
    ),
}
ZERO = {id(STR): "", id(INT): 0, id(BOOL): False}


def _zero(kind) -> Any:
    if kind == STR:
        return ""
    if kind == INT:
        return 0
    if kind == BOOL:
        return False
    if kind == STR_LIST or kind.name().startswith("LIST"):
        return []
    return {}


def _action_getter(name: str, kind) -> Callable[[Traffic], Any]:
    def get(t: Traffic) -> Any:
        value = t.action_vars.get(name)
        return _zero(kind) if value is None else value

    return get


for _action, (_members, _phases) in ACTION_VARIABLES.items():
    for _member, _kind in _members.items():
        _name = f"actions.ngrok.{_action}.{_member}"
        VARIABLES[_name] = (_kind, _phases, _action_getter(_name, _kind))

# on_event_stream_message sees what on_http_response sees (the request and the response
# head of the stream), and its own action's result.
for _name, (_kind, _phases, _getter) in list(VARIABLES.items()):
    if "on_http_response" in _phases and SSE_PHASE not in _phases:
        VARIABLES[_name] = (_kind, _phases + (SSE_PHASE,), _getter)
_SSE_VAR = "actions.ngrok.sse_find_replace.replacements"
VARIABLES[_SSE_VAR] = (T.List(DYN_MAP), (SSE_PHASE,), _action_getter(_SSE_VAR, T.List(DYN_MAP)))

# The http-request action's retry_condition has an environment of its own (hosted docs:
# ``attempts``, ``last_attempt.req``, ``last_attempt.res``, ``last_attempt.error``), a
# "phase" no rule runs in; its values come in ``Traffic.action_vars``.
RETRY_PHASE = "http_request.retry_condition"
for _name, _kind in (
    ("attempts", INT),
    ("last_attempt.req", DYN_MAP),
    ("last_attempt.res", DYN_MAP),
    ("last_attempt.error", STR),
):
    VARIABLES[_name] = (_kind, (RETRY_PHASE,), _action_getter(_name, _kind))


# ---- macros -----------------------------------------------------------------------------


def parse_ip(text: str):
    """The IP address ``text`` names (surrounding space allowed), or None."""
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def in_cidr_range(ip: str, cidr: str) -> bool:
    address = parse_ip(ip)
    try:
        return address is not None and address in ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return False  # documented: an invalid CIDR is false, not an error


def in_cidr_ranges(ip: str, cidrs: List[str]) -> bool:
    return any(in_cidr_range(ip, cidr) for cidr in cidrs)


_PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]


def _is_private(text: str) -> bool:
    address = parse_ip(text)
    return address is not None and address.version == 4 and any(address in n for n in _PRIVATE)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _is_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return bool(parts.scheme and parts.netloc)


def _is_query(text: str) -> bool:
    if not text or " " in text:
        return False
    try:
        parse_qs(text, strict_parsing=True, keep_blank_values=True)
        return True
    except ValueError:
        return False


def _decode_json(text: str) -> Any:
    return json.loads(text)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _qs_decode(text: str) -> Dict[str, List[str]]:
    return parse_qs(text, keep_blank_values=True)


def _qs_encode(params: Dict[str, Any]) -> str:
    return urlencode(params, doseq=True)


def _crc64(text: str) -> str:
    # ECMA-182 polynomial, as Go's hash/crc64 with crc64.ECMA
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in text.encode():
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xC96C5795D7870F42 if crc & 1 else 0)
    return format(crc ^ 0xFFFFFFFFFFFFFFFF, "x")


def _hashes() -> Dict[str, Callable[[str], str]]:
    def digest(name):
        return lambda s: hashlib.new(name, s.encode()).hexdigest()

    return {
        "md5": digest("md5"),
        "sha1": digest("sha1"),
        "sha256": digest("sha256"),
        "sha512": digest("sha512"),
        "crc32": lambda s: format(zlib.crc32(s.encode()) & 0xFFFFFFFF, "x"),
        "crc64": _crc64,
    }


def _traffic() -> Traffic:
    return _current.traffic


def _secret(vault: str, name: str) -> str:
    """``secrets.get(vault, name)``: a vault secret of the endpoint's account, through the
    run's resolver (chalicelib.core.policy.secrets); an error when none answers."""
    resolver = getattr(_traffic().conn, "secret_resolver", None)
    value = resolver(vault, name) if resolver is not None else None
    if value is None:
        raise ValueError(f"no secret '{name[:64]}' in vault '{vault[:64]}'")
    return value


def _req_header(name: str) -> List[str]:
    return list(_traffic().req.get_header(name))


def _res_header(name: str) -> List[str]:
    res = _traffic().res
    return list(res.get_header(name)) if res is not None else []


def _req_cookie(name: str) -> Dict[str, str]:
    cookies = _traffic().req.cookies().get(name)
    return cookies[0] if cookies else {}


def _res_cookie(name: str) -> Dict[str, Any]:
    res = _traffic().res
    cookies = res.cookies().get(name) if res is not None else None
    return cookies[0] if cookies else {}


def _query_param(name: str) -> List[str]:
    return _traffic().req.query_params().get(name, [])


def _overload(fid: str, ret, params, impl, member=False):
    return cel.Overload(fid, ret, params, is_member=member, impl=impl)


def _functions(phase: str) -> List[Any]:
    decl = cel.FunctionDecl
    fns = [
        decl(
            "inCidrRange",
            [_overload("inCidrRange_string_string", BOOL, [STR, STR], in_cidr_range)],
        ),
        decl(
            "inCidrRanges",
            [_overload("inCidrRanges_string_list", BOOL, [STR, STR_LIST], in_cidr_ranges)],
        ),
        decl("lower", [_overload("string_lower", STR, [STR], str.lower, True)]),
        decl("upper", [_overload("string_upper", STR, [STR], str.upper, True)]),
        decl("isPrivateIp", [_overload("string_isPrivateIp", BOOL, [STR], _is_private, True)]),
        decl("isJson", [_overload("string_isJson", BOOL, [STR], _is_json, True)]),
        decl("isURL", [_overload("string_isURL", BOOL, [STR], _is_url, True)]),
        decl("isQueryString", [_overload("string_isQueryString", BOOL, [STR], _is_query, True)]),
        decl(
            "escapeUrl",
            [_overload("string_escapeUrl", STR, [STR], lambda s: quote(s, safe=""), True)],
        ),
        decl("unescapeUrl", [_overload("string_unescapeUrl", STR, [STR], unquote, True)]),
        decl(
            "url.escape", [_overload("url_escape_string", STR, [STR], lambda s: quote(s, safe=""))]
        ),
        decl("url.unescape", [_overload("url_unescape_string", STR, [STR], unquote)]),
        decl(
            "encodeBase64",
            [
                _overload(
                    "string_encodeBase64",
                    STR,
                    [STR],
                    lambda s: base64.b64encode(s.encode()).decode(),
                    True,
                )
            ],
        ),
        decl(
            "decodeBase64",
            [
                _overload(
                    "string_decodeBase64",
                    STR,
                    [STR],
                    lambda s: base64.b64decode(s).decode("utf-8", "replace"),
                    True,
                )
            ],
        ),
        decl("decodeJson", [_overload("string_decodeJson", DYN, [STR], _decode_json, True)]),
        decl("json.decode", [_overload("json_decode_string", DYN, [STR], _decode_json)]),
        decl(
            "json.encode",
            [
                _overload("json_encode_map", STR, [T.Map(DYN, DYN)], _json),
                _overload("json_encode_list", STR, [T.List(DYN)], _json),
            ],
        ),
        decl(
            "encodeJson",
            [
                _overload("map_encodeJson", STR, [T.Map(DYN, DYN)], _json, True),
                _overload("list_encodeJson", STR, [T.List(DYN)], _json, True),
            ],
        ),
        decl(
            "decodeQueryString",
            [_overload("string_decodeQueryString", MULTI, [STR], _qs_decode, True)],
        ),
        decl(
            "queryString.decode",
            [_overload("queryString_decode_string", MULTI, [STR], _qs_decode)],
        ),
        decl(
            "queryString.encode", [_overload("queryString_encode_map", STR, [DYN_MAP], _qs_encode)]
        ),
        decl(
            "basic_auth.encode",
            [
                _overload(
                    "basic_auth_encode_string_string",
                    STR,
                    [STR, STR],
                    lambda u, p: base64.b64encode(f"{u}:{p}".encode()).decode(),
                )
            ],
        ),
        decl("secrets.get", [_overload("secrets_get_string_string", STR, [STR, STR], _secret)]),
        decl("rand.double", [_overload("rand_double", T.DOUBLE, [], random.random)]),
        decl(
            "rand.int",
            [
                _overload(
                    "rand_int_int_int",
                    INT,
                    [INT, INT],
                    lambda a, b: random.randint(min(a, b), max(a, b)),
                )
            ],
        ),
    ]
    for name, impl in _hashes().items():
        fns.append(decl(name, [_overload(f"string_{name}", STR, [STR], impl, True)]))
        fns.append(decl(f"hash.{name}", [_overload(f"hash_{name}_string", STR, [STR], impl)]))
    if phase in HTTP_PHASES:
        fns += [
            decl("getReqHeader", [_overload("getReqHeader_string", STR_LIST, [STR], _req_header)]),
            decl(
                "hasReqHeader",
                [_overload("hasReqHeader_string", BOOL, [STR], lambda n: bool(_req_header(n)))],
            ),
            decl(
                "getQueryParam", [_overload("getQueryParam_string", STR_LIST, [STR], _query_param)]
            ),
            decl(
                "hasQueryParam",
                [_overload("hasQueryParam_string", BOOL, [STR], lambda n: bool(_query_param(n)))],
            ),
            decl("getReqCookie", [_overload("getReqCookie_string", STR_MAP, [STR], _req_cookie)]),
            decl(
                "hasReqCookie",
                [_overload("hasReqCookie_string", BOOL, [STR], lambda n: bool(_req_cookie(n)))],
            ),
        ]
    if phase in ("on_http_response", SSE_PHASE):
        fns += [
            decl("getResHeader", [_overload("getResHeader_string", STR_LIST, [STR], _res_header)]),
            decl(
                "hasResHeader",
                [_overload("hasResHeader_string", BOOL, [STR], lambda n: bool(_res_header(n)))],
            ),
            decl("getResCookie", [_overload("getResCookie_string", DYN_MAP, [STR], _res_cookie)]),
            decl(
                "hasResCookie",
                [_overload("hasResCookie_string", BOOL, [STR], lambda n: bool(_res_cookie(n)))],
            ),
        ]
    return fns


# ---- environments and programs ----------------------------------------------------------

# The standard CEL extensions, enabled by name from the ones compiled into the runtime (cel.so)
# at the versions the library's ``cel_expr_python.ext`` modules select (ExtStrings: strings
# v4, ExtMath: math v2, ExtEncoders: encoders; tests/unit/test_policy_cel_extensions.py
# checks both ways declare the same). Those modules are separate shared objects of 4-7 MB
# each that carry another copy of cel-cpp; enabling the extensions by name keeps them out of
# the Lambda package (scripts/vendor_lambda.py leaves them out; `make bench` measures it).
EXTENSIONS = (
    "extensions:\n"
    "  - name: encoders\n"
    "  - name: math\n"
    "    version: 2\n"
    "  - name: strings\n"
    "    version: 4\n"
)

_envs: Dict[str, Any] = {}
_env_lock = threading.Lock()
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*")


def env_for(phase: str):
    env = _envs.get(phase)
    if env is None:
        with _env_lock:
            env = _envs.get(phase)
            if env is None:
                variables = {
                    name: kind for name, (kind, phases, _) in VARIABLES.items() if phase in phases
                }
                env = cel.NewEnv(
                    config=cel.NewEnvConfigFromYaml(EXTENSIONS),
                    variables=variables,
                    functions=_functions(phase),
                )
                _envs[phase] = env
    return env


class CelError(ValueError):
    """An expression that does not compile; ``str`` is the first line of the checker's text."""


def _referenced(text: str, phase: str) -> Tuple[str, ...]:
    """Every declared variable whose dotted name the text contains (a superset: the runtime
    needs each referenced variable bound, and binding an unused one costs only a little)."""
    names = set()
    for match in _IDENT.finditer(text):
        dotted = re.sub(r"\s+", "", match.group(0))
        parts = dotted.split(".")
        for end in range(1, len(parts) + 1):
            candidate = ".".join(parts[:end])
            entry = VARIABLES.get(candidate)
            if entry is not None and phase in entry[1]:
                names.add(candidate)
    return tuple(sorted(names))


_VAR = r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
_STR = r"(?:'([^'\\]*)'|\"([^\"\\]*)\")"
_FAST_IN = re.compile(rf"^\s*(!?)\s*\(?\s*{_STR}\s+in\s+{_VAR}\s*\)?\s*$")
_FAST = [
    ("cmp", re.compile(rf"^\s*{_VAR}\s*(==|!=)\s*{_STR}\s*$")),
    ("int", re.compile(rf"^\s*{_VAR}\s*(==|!=|<=|>=|<|>)\s*(-?[0-9]+)\s*$")),
    ("call", re.compile(rf"^\s*{_VAR}\.(startsWith|endsWith|contains)\(\s*{_STR}\s*\)\s*$")),
    ("in", _FAST_IN),
    ("var", re.compile(rf"^\s*{_VAR}\s*$")),
]
_INT_OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _conjuncts(text: str) -> Optional[List[str]]:
    """``text`` split at its top-level ``&&`` (outside parentheses and string literals), or
    None when it has a top-level ``||`` or ``?`` (other precedence) or a backslash."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            return None
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith("&&", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        elif depth == 0 and (text.startswith("||", i) or ch == "?"):
            return None
        i += 1
    if quote or depth:
        return None
    parts.append(text[start:])
    return parts


def _fast_path(text: str, phase: str) -> Optional[Callable[["Traffic"], Any]]:
    """A Python closure for the few expression shapes most rules are made of (a variable
    compared with a literal, startsWith/endsWith/contains of a literal, a literal ``in`` a
    map or list, a bare variable) and for ``&&`` of such shapes. Same result as CEL for
    these shapes (the expression already passed CEL's type checker, so the types are known
    and the operands of ``&&`` are booleans; :func:`_and` keeps CEL's commutative error
    rule); saves the runtime's per-call
    conversion, about 10 us an expression. Anything else goes to CEL."""
    parts = _conjuncts(text)
    if parts is None:
        return None
    if len(parts) > 1:
        found = [_fast_single(part, phase) for part in parts]
        closures = [c for c in found if c is not None]
        if len(closures) != len(found):
            return None
        return lambda t: _and(closures, t)
    return _fast_single(text, phase)


def _and(closures: List[Callable[["Traffic"], Any]], traffic: "Traffic") -> bool:
    """CEL's ``&&``: false if any operand is false, even one after an operand that failed;
    else the first failure; else true."""
    failure = None
    for closure in closures:
        try:
            if not closure(traffic):
                return False
        except Exception as exc:  # noqa: BLE001 - kept for CEL's commutative rule
            failure = failure or exc
    if failure is not None:
        raise failure
    return True


def _fast_single(text: str, phase: str) -> Optional[Callable[["Traffic"], Any]]:
    for kind, pattern in _FAST:
        match = pattern.match(text)
        if not match:
            continue
        groups = match.groups()
        if kind == "in":
            negate, literal, name = (
                groups[0] == "!",
                groups[1] if groups[1] is not None else groups[2],
                groups[3],
            )
        else:
            name = groups[0]
        entry = VARIABLES.get(name)
        if entry is None or phase not in entry[1]:
            return None
        getter = _cached(name, entry[2])
        kind_t = entry[0]
        if kind == "var":
            return getter
        if kind == "cmp" and kind_t == STR:
            literal = groups[2] if groups[2] is not None else groups[3]
            if groups[1] == "==":
                return lambda t: getter(t) == literal
            return lambda t: getter(t) != literal
        if kind == "int" and kind_t == INT:
            op, number = _INT_OPS[groups[1]], int(groups[2])
            return lambda t: op(getter(t), number)
        if kind == "call" and kind_t == STR:
            literal = groups[2] if groups[2] is not None else groups[3]
            method = {
                "startsWith": str.startswith,
                "endsWith": str.endswith,
                "contains": str.__contains__,
            }[groups[1]]
            return lambda t: method(getter(t), literal)
        if kind == "in" and kind_t in (MULTI, STR_MAP, DYN_MAP, STR_LIST):
            if negate:
                return lambda t: literal not in getter(t)
            return lambda t: literal in getter(t)
        return None
    return None


def _cached(name: str, getter: Callable[["Traffic"], Any]) -> Callable[["Traffic"], Any]:
    def get(traffic: "Traffic") -> Any:
        cache = traffic.cache
        value = cache.get(name, _MISSING)
        if value is _MISSING:
            value = cache[name] = getter(traffic)
        return value

    return get


# ---- what an expression reads of a request (chalicelib/core/policy/holding.py) ----------

# The facts of a request's head and connection a request-phase value is a function of (the
# rest is the endpoint's, the same for every request of a route). A held decision is keyed by
# exactly these (docs/DATA_PLANE.md, "Held decisions").
METHOD, TARGET, FIELDS, PEER_IP, PEER_PORT, LOCAL, TLS = (
    "method",
    "target",
    "fields",  # every field of the head
    "peer_ip",
    "peer_port",
    "local",  # the address the client reached: server ip and port
    "tls",  # SNI, version, cipher, ALPN
)
FIELD = "field:"  # + a lower-case name: that field's values


def field(name: str) -> str:
    return FIELD + name.lower()


# Request-phase variables -> the facts their value is a function of; None: a value that
# differs from request to request whatever the head (clocks, counters), or that the head
# alone does not give (the client certificate). Every variable of the phase is named here or
# under a prefix of READ_PREFIXES (tests/unit/test_policy_holding.py checks it).
VARIABLE_READS: Dict[str, Optional[Tuple[str, ...]]] = {
    "conn.client_ip": (PEER_IP,),
    "conn.client_port": (PEER_PORT,),
    "conn.server_ip": (LOCAL,),
    "conn.server_port": (LOCAL,),
    "conn.server_region": (),
    "conn.bytes_in": None,
    "conn.bytes_out": None,
    "conn.ts.start": None,
    "conn.tls.version": (TLS,),
    "conn.tls.cipher_suite": (TLS,),
    "conn.tls.sni": (TLS,),
    "conn.tls.negotiated_alpn": (TLS,),
    "conn.tls.session_resumed": (),
    "endpoint.id": (),
    "endpoint.url": (),
    "endpoint.host": (),
    "endpoint.protocol": (),
    "endpoint.addr": (LOCAL,),
    "endpoint.port": (LOCAL,),
    "conn.geo.country_code": (PEER_IP,),
    "conn.geo.country": (PEER_IP,),
    "conn.client_ip.as.organization": (PEER_IP,),
    "conn.client_ip.categories": (PEER_IP,),
    "conn.client_ip.is_tor_node": (PEER_IP,),
    "conn.client_ip.is_on_blocklist": (PEER_IP,),
    "time.now": None,
    "vars": (),  # set by the run's own set-vars actions
    "req.method": (METHOD,),
    "req.version": (),  # the core carries HTTP/1.1 only
    "req.host": (field("host"),),
    "req.location": (field("location"),),
    "req.headers": (FIELDS,),
    "req.trailers": (),
    "req.cookies": (field("cookie"),),
    "req.content_length": (field("content-length"),),
    "req.content_encoding": (field("content-encoding"),),
    "req.content_type": (field("content-type"),),
    "req.content_type.parameters": (field("content-type"),),
    "req.content_type.raw": (field("content-type"),),
    "req.ts.header_received": None,
    "req.url": (TARGET,),  # the scheme and host are the route's
}
READ_PREFIXES: Tuple[Tuple[str, Optional[Tuple[str, ...]]], ...] = (
    ("req.url.", (TARGET,)),
    ("req.user_agent", (field("user-agent"),)),
    ("conn.tls.client.", None),  # the core's TLS asks for no client certificate
    ("actions.ngrok.", ()),  # the run's own actions' results
)
# Functions that read the request (through the thread-local) or are not a function of
# their arguments.
FUNCTION_READS: Dict[str, Optional[Tuple[str, ...]]] = {
    "getReqHeader": (FIELDS,),
    "hasReqHeader": (FIELDS,),
    "getQueryParam": (TARGET,),
    "hasQueryParam": (TARGET,),
    "getReqCookie": (field("cookie"),),
    "hasReqCookie": (field("cookie"),),
    "secrets.get": None,  # the vault's value now
    "rand.double": None,
    "rand.int": None,
}


def variable_reads(name: str) -> Optional[Tuple[str, ...]]:
    """The facts request-phase variable ``name`` reads (VARIABLE_READS); None for one not
    classified (a variable added later is never held by mistake)."""
    if name in VARIABLE_READS:
        return VARIABLE_READS[name]
    for prefix, reads in READ_PREFIXES:
        if name.startswith(prefix):
            return reads
    return None


def expression_reads(text: str, phase: str) -> Optional[FrozenSet[str]]:
    """The facts a request-phase expression's value is a function of, or None when it is not
    a function of the request's head (a clock, randomness, a vault secret). A superset: every
    dotted name in the text counts, in string literals too. ``'name' in req.headers`` (a
    conjunct of that shape) reads only that field, not every field."""
    parts = _conjuncts(text) or [text]
    found: set = set()
    for part in parts:
        match = _FAST_IN.match(part)
        if match and match.group(4) == "req.headers":
            literal = match.group(2) if match.group(2) is not None else match.group(3)
            found.add(field(literal))
            continue
        for name in _referenced(part, phase):
            reads = variable_reads(name)
            if reads is None:
                return None
            found.update(reads)
        for ident in _IDENT.finditer(part):
            dotted = re.sub(r"\s+", "", ident.group(0))  # ``rand . int`` is rand.int
            if dotted in FUNCTION_READS:
                reads = FUNCTION_READS[dotted]
                if reads is None:
                    return None
                found.update(reads)
    return frozenset(found)


class Program:
    """One compiled expression and the variables it needs."""

    __slots__ = ("text", "expr", "needs", "kind", "fast")

    def __init__(self, text: str, phase: str) -> None:
        self.text = text
        try:
            self.expr = env_for(phase).compile(text)
        except RuntimeError as exc:
            raise CelError(_explain(text, phase, _clean(str(exc)))) from None
        self.kind = self.expr.return_type()
        self.needs = tuple((name, VARIABLES[name][2]) for name in _referenced(text, phase))
        ipintel.note_needs(name for name, _ in self.needs)
        self.fast = _fast_path(text, phase)

    def evaluate(self, traffic: Traffic) -> Any:
        """The value, or raises EvalError (the expression failed on this traffic)."""
        if self.fast is not None:
            return self.fast(traffic)
        cache = traffic.cache
        data = {}
        for name, getter in self.needs:
            value = cache.get(name, _MISSING)
            if value is _MISSING:
                value = cache[name] = getter(traffic)
            data[name] = value
        _current.traffic = traffic
        try:
            result = self.expr.eval(data=data)
        except RuntimeError as exc:
            raise EvalError(_clean(str(exc))) from None
        finally:
            _current.traffic = None
        if result.type() == T.ERROR:
            raise EvalError(str(result.value()))
        return result.plain_value()


_MISSING = object()


class EvalError(ValueError):
    pass


def _explain(text: str, phase: str, message: str) -> str:
    """Name the unknown member when the checker only says a string has no members
    (``conn.client_ip.categories``: IP intelligence, not offered here)."""
    if "cannot be the operand of a select" not in message:
        return message
    for match in _IDENT.finditer(text):
        dotted = re.sub(r"\s+", "", match.group(0))
        if text[match.end() :].lstrip().startswith("("):
            dotted = dotted.rpartition(".")[0]  # a method call, not a member
        parts = dotted.split(".")
        for end in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:end])
            entry = VARIABLES.get(prefix)
            if entry is not None and phase in entry[1]:
                if entry[0] in (STR, INT, BOOL, TS):
                    # the whole name when it is under a namespace of other variables
                    # (conn.client_ip.as.number beside conn.client_ip.as.organization)
                    known = ".".join(parts[: end + 1])
                    if any(n.startswith(known + ".") for n in VARIABLES):
                        known = dotted
                    return f"unknown variable or member '{known}' ({message})"
                break
    return message


def _clean(text: str) -> str:
    line = text.splitlines()[0] if text else "invalid expression"
    line = re.sub(r"^[A-Z_]+: ", "", line)
    line = line.replace("ERROR: <input>:", "at ")
    line = line.replace(" (in container '')", "")
    return re.sub(r"\s*\[[A-Z_]+\]$", "", line).strip()


def compile_expression(text: str, phase: str, want_bool: bool = True) -> Program:
    program = Program(text, phase)
    if want_bool and program.kind not in (BOOL, DYN):
        raise CelError(f"must evaluate to a bool, not {program.kind.name().lower()}")
    return program


def to_text(value: Any) -> str:
    """How an interpolated value reads inside a string (CEL's string conversion)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), default=str)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
