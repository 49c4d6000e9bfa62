"""Every traffic policy variable, as the hosted service names it, on synthetic traffic."""

import datetime

import pytest

from chalicelib.core.policy import Response, celenv
from tests.support.policy import conn, evaluate, request

UA_CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36"
)
UA_IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
)
UA_BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

REQ = request(
    "/a%20b/c?x=1&x=2&y=&z=%2F",
    method="POST",
    headers=[
        ("Content-Type", "application/json; charset=utf-8"),
        ("Content-Encoding", "gzip, br"),
        ("Cookie", 'sid=abc; theme="dark"; sid=def'),
        ("User-Agent", UA_CHROME),
        ("X-Multi", "1"),
        ("x-multi", "2"),
        ("Location", "/elsewhere"),
    ],
    content_length=42,
)
REQ_USERINFO = request("/p", host="app.example.com:8443")
REQ_USERINFO.url = "https://u:pw@app.example.com:8443/p?q"


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("req.method", "POST"),
        ("req.version", "HTTP/1.1"),
        ("req.host", "app.example.com"),
        ("req.location", "/elsewhere"),
        ("req.url", "https://app.example.com/a%20b/c?x=1&x=2&y=&z=%2F"),
        ("req.url.raw", "https://app.example.com/a%20b/c?x=1&x=2&y=&z=%2F"),
        ("req.url.path", "/a b/c"),
        ("req.url.raw_path", "/a%20b/c"),
        ("req.url.query", "x=1&x=2&y=&z=%2F"),
        ("req.url.query_params", {"x": ["1", "2"], "y": [""], "z": ["/"]}),
        ("req.url.scheme", "https"),
        ("req.url.host", "app.example.com"),
        ("req.url.authority", "app.example.com"),
        ("req.url.port", 0),
        ("req.url.uri", "/a%20b/c?x=1&x=2&y=&z=%2F"),
        ("req.url.user_password", ""),
        ("req.headers['x-multi']", ["1", "2"]),
        ("req.headers['content-type']", ["application/json; charset=utf-8"]),
        ("'host' in req.headers", True),
        ("req.trailers", {}),
        ("req.cookies['sid'][0].value", "abc"),
        ("req.cookies['sid'][1].value", "def"),
        ("req.cookies['theme'][0].name", "theme"),
        ("req.cookies['theme'][0].value", "dark"),
        ("req.content_length", 42),
        ("req.content_type", "application/json"),
        ("req.content_type.parameters", {"charset": "utf-8"}),
        ("req.content_type.raw", "application/json; charset=utf-8"),
        ("req.content_encoding", ["gzip", "br"]),
        ("req.user_agent", UA_CHROME),
        ("req.user_agent.name", "Chrome"),
        ("req.user_agent.version", "120.0.0.0"),
        ("req.user_agent.os", "Windows"),
        ("req.user_agent.os_version", "10.0"),
        ("req.user_agent.is_desktop", True),
        ("req.user_agent.is_mobile", False),
        ("req.user_agent.is_bot", False),
    ],
)
def test_request_variables(expression, expected):
    assert evaluate(expression, req=REQ) == expected


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("req.url.port", 8443),
        ("req.url.authority", "app.example.com:8443"),
        ("req.url.user_password", "u:pw"),
        ("req.url.query", "q"),
        ("req.content_length", 0),
        ("req.content_type", ""),
        ("req.user_agent", ""),
    ],
)
def test_request_variables_when_parts_are_present_or_absent(expression, expected):
    assert evaluate(expression, req=REQ_USERINFO) == expected


@pytest.mark.parametrize(
    "ua, member, expected",
    [
        (UA_IPHONE, "is_mobile", True),
        (UA_IPHONE, "os", "iOS"),
        (UA_IPHONE, "device", "iPhone"),
        (UA_IPHONE, "name", "Safari"),
        (UA_IPHONE, "is_desktop", False),
        (UA_BOT, "is_bot", True),
        (UA_BOT, "name", "Googlebot"),
        (UA_BOT, "url", "http://www.google.com/bot.html"),
        ("curl/8.5.0", "name", "curl"),
        ("curl/8.5.0", "version", "8.5.0"),
        ("Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X)", "is_tablet", True),
    ],
)
def test_user_agent_members(ua, member, expected):
    assert (
        evaluate(f"req.user_agent.{member}", req=request(headers=[("User-Agent", ua)])) == expected
    )


START = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("conn.client_ip", "198.51.100.9"),
        ("conn.client_port", 40000),
        ("conn.server_ip", "127.0.0.1"),
        ("conn.server_port", 8443),
        ("conn.server_region", "local"),
        ("conn.bytes_in", 0),
        ("conn.ts.start.getFullYear()", 2026),
        ("conn.ts.start.getHours()", 3),
        ("endpoint.id", "ep_test"),
        ("endpoint.url", "https://app.example.com"),
        ("endpoint.host", "app.example.com"),
        ("endpoint.port", 443),
        ("endpoint.addr", "app.example.com:443"),
        ("endpoint.protocol", "https"),
    ],
)
@pytest.mark.parametrize("phase", ["on_tcp_connect", "on_http_request", "on_http_response"])
def test_connection_and_endpoint_variables_in_every_phase(expression, expected, phase):
    c = conn("198.51.100.9", 40000)
    c.ts_start = START
    assert evaluate(expression, c=c, phase=phase) == expected


def test_time_now_is_rfc3339_utc():
    value = evaluate("time.now")
    parsed = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert abs((now - parsed).total_seconds()) < 5


RES = Response(
    503,
    [
        ("Content-Type", "text/html; charset=latin1"),
        ("Content-Length", "12"),
        ("Content-Encoding", "gzip"),
        ("Location", "/x"),
        ("Set-Cookie", "a=1; Path=/; HttpOnly; Secure; SameSite=Lax"),
        ("Set-Cookie", "a=2; Path=/long/path; Domain=example.com; Foo=bar"),
    ],
)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("res.status_code", 503),
        ("res.headers['content-type']", ["text/html; charset=latin1"]),
        ("res.content_type", "text/html"),
        ("res.content_type.parameters", {"charset": "latin1"}),
        ("res.content_type.raw", "text/html; charset=latin1"),
        ("res.content_length", 12),
        ("res.content_encoding", ["gzip"]),
        ("res.location", "/x"),
        ("res.trailers", {}),
        ("res.cookies['a'][0].value", "2"),  # longest path first
        ("res.cookies['a'][0].domain", "example.com"),
        ("res.cookies['a'][0].unparsed_attributes", {"Foo": "bar"}),
        ("res.cookies['a'][1].http_only", True),
        ("res.cookies['a'][1].secure", True),
        ("res.cookies['a'][1].same_site", "Lax"),
        ("req.url.path", "/"),  # the request stays visible
    ],
)
def test_response_variables(expression, expected):
    assert evaluate(expression, res=RES, phase="on_http_response") == expected


def test_every_declared_variable_evaluates_in_its_phases():
    """No declared variable lacks a value (a getter that raises would fail here)."""
    for name, (_, phases, _) in celenv.VARIABLES.items():
        for phase in phases:
            if phase in (celenv.SSE_PHASE, celenv.RETRY_PHASE):
                # no rule of these runs set-vars: the expression alone, on the same traffic
                program = celenv.compile_expression(name, phase, want_bool=False)
                program.evaluate(celenv.Traffic(conn(), REQ, RES))
            else:
                evaluate(name, req=REQ, res=RES, phase=phase)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("conn.tls.version", "1.3"),
        ("conn.tls.cipher_suite", "TLS_AES_128_GCM_SHA256"),
        ("conn.tls.sni", "app.example.com"),
        ("conn.tls.negotiated_alpn", "http/1.1"),
        ("conn.tls.session_resumed", False),
        ("conn.tls.version < '1.3'", False),
    ],
)
def test_tls_variables(expression, expected):
    c = conn()
    c.tls_version, c.tls_cipher_suite = "TLSv1.3", "TLS_AES_128_GCM_SHA256"
    c.tls_sni, c.tls_alpn = "app.example.com", "http/1.1"
    assert evaluate(expression, c=c) == expected


def test_tls_variables_are_empty_on_plain_connections():
    assert evaluate("conn.tls.version") == ""


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("req.headers['x-api-version']", ["2"]),
        ("req.headers['X-Api-Version']", ["2"]),
        ("'Authorization' in req.headers", True),
        ("'authorization' in req.headers", True),
        ("'X-API-VERSION' in req.headers", False),
    ],
)
def test_header_map_has_lower_case_and_canonical_names(expression, expected):
    req = request(headers=[("X-API-Version", "2"), ("authorization", "x")])
    assert evaluate(expression, req=req) == expected


@pytest.mark.parametrize(
    "target, path, query",
    [
        ("/a?b=1", "/a", "b=1"),
        ("http://other.example/x?y", "/x", "y"),
        ("*", "/", ""),
        ("http://other.example", "/", ""),
    ],
)
def test_request_targets_of_every_form(target, path, query):
    from chalicelib.core.policy import Request

    req = Request.from_target("GET", "https", "app.example.com", target, [])
    assert (req.path, req.query, req.url.startswith("https://app.example.com/")) == (
        path,
        query,
        True,
    )
