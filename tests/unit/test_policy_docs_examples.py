"""Policies from the hosted service's documentation validate here and do what the docs say,
on synthetic traffic through the engine's sans-IO interface (sources in data/)."""

import gzip

import pytest

from chalicelib.core.policy import (
    CLOSE,
    CONTINUE,
    FORWARD_INTERNAL,
    RESPOND,
    PolicyError,
    Response,
    compile_policy,
    ratelimit,
)
from tests.support.policy import conn, request
from tests.unit.data import policy_docs_examples as ex

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36"
)
EDGE = CHROME + " Edg/120.0.2210.91"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def run(example, req=None, c=None):
    p = compile_policy(example[1])
    req = req or request()
    return p.on_http_request(c or conn(), req, p.new_state()), req


def header(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


def test_remove_headers_example():
    out, req = run(ex.REMOVE_HEADERS, request(headers=[("X-Powered-By", "PHP"), ("A", "b")]))
    assert out.kind == CONTINUE and header(req.headers, "x-powered-by") == []


def test_deprecate_api_v2_example():
    out, _ = run(ex.DEPRECATE_V2, request(headers=[("X-Api-Version", "2")]))
    assert out.status_code == 400 and b"Version 2 of the API" in out.body
    assert header(out.headers, "content-type") == ["application/json"]
    assert run(ex.DEPRECATE_V2, request(headers=[("X-Api-Version", "3")]))[0].kind == CONTINUE


def test_compress_example():
    p = compile_policy(ex.COMPRESS_ALL[1])
    res = Response(200, [("Content-Type", "application/json")])
    out = p.on_http_response(
        conn(), request(headers=[("Accept-Encoding", "gzip")]), res, p.new_state()
    )
    assert header(res.headers, "content-encoding") == ["gzip"]
    assert gzip.decompress(out.compressor.feed(b"{}") + out.compressor.finish()) == b"{}"


@pytest.mark.parametrize("version, refused", [("TLSv1.2", True), ("TLSv1.3", False)])
def test_enforce_tls_example(version, refused):
    c = conn()
    c.tls_version = version
    out, _ = run(ex.ENFORCE_TLS, c=c)
    assert (out.status_code == 401) is refused


def test_rate_limit_example_limits_only_its_endpoint_at_30_a_minute():
    ratelimit.LIMITER.clear()
    outs = [
        run(ex.RATE_LIMIT_ENDPOINT, request("/api/specific_endpoint"))[0].kind for _ in range(31)
    ]
    assert outs == [CONTINUE] * 30 + [RESPOND]
    assert run(ex.RATE_LIMIT_ENDPOINT, request("/other"))[0].kind == CONTINUE


def test_rate_limit_tiers_example():
    ratelimit.LIMITER.clear()
    anonymous = [run(ex.RATE_LIMIT_TIERS, c=conn("10.1.1.1"))[0].kind for _ in range(11)]
    assert anonymous == [CONTINUE] * 10 + [RESPOND]
    authorized = [
        run(ex.RATE_LIMIT_TIERS, request(headers=[("Authorization", "x")]), c=conn("10.2.2.2"))[
            0
        ].kind
        for _ in range(100)
    ]
    assert authorized == [CONTINUE] * 100


def test_blog_rewrite_example():
    _, req = run(ex.BLOG_REWRITE, request("/blog/42/hello/"))
    assert req.target == "/blog/index.php?p=42&title=hello"


def test_user_agent_examples():
    assert (
        run(ex.EDGE_USERS, request(headers=[("User-Agent", EDGE)]))[0].body == b"Hello Edge User!"
    )
    assert run(ex.EDGE_USERS, request(headers=[("User-Agent", CHROME)]))[0].kind == CONTINUE
    assert run(ex.DENY_BOTS, request(headers=[("User-Agent", BOT)]))[0].status_code == 403
    assert run(ex.DENY_BOTS, request(headers=[("User-Agent", CHROME)]))[0].kind == CONTINUE


def test_ab_test_example_splits_between_two_internal_endpoints():
    urls = {run(ex.AB_TEST)[0].url for _ in range(200)}
    assert urls == {"https://a.internal", "https://b.internal"}


def test_robots_txt_example():
    out, _ = run(ex.ROBOTS, request("/robots.txt"))
    assert out.body == b"User-agent: ChatGPT-User\r\nDisallow: /"
    assert header(out.headers, "content-type") == ["text/plain"]


def test_block_unwanted_requests_examples():
    assert run(ex.ONLY_GET, request(method="POST"))[0].status_code == 403
    assert run(ex.ONLY_GET)[0].kind == CONTINUE
    assert run(ex.NEED_AUTHORIZATION)[0].status_code == 401
    assert (
        run(ex.NEED_AUTHORIZATION, request(headers=[("Authorization", "x")]))[0].kind == CONTINUE
    )
    big = request(method="PUT", content_length=1000)
    assert run(ex.LARGE_UPLOADS, big)[0].status_code == 400
    assert run(ex.LARGE_UPLOADS, request(method="PUT", content_length=999))[0].kind == CONTINUE


def test_routing_examples():
    out, _ = run(ex.SUBDOMAIN_ROUTING, request(host="shop.example.com"))
    assert (out.kind, out.url) == (FORWARD_INTERNAL, "https://shop.internal")
    for path, url in [
        ("/api/v1/x", "https://api-v1.internal"),
        ("/api/v2/x", "https://api-v2.internal"),
        ("/api/x", "https://api-v2.internal"),
    ]:
        assert run(ex.PATH_ROUTING, request(path))[0].url == url
    assert run(ex.PATH_ROUTING, request("/web"))[0].kind == CONTINUE


def test_basic_auth_credential_pairs_example():
    import base64

    good = "Basic " + base64.b64encode(b"user2:securepass456").decode()
    assert run(ex.BASIC_AUTH_PAIRS, request(headers=[("Authorization", good)]))[0].kind == CONTINUE
    assert run(ex.BASIC_AUTH_PAIRS)[0].status_code == 401


def test_how_it_works_examples():
    p = compile_policy(ex.PHASE_RULE_DENY[1])
    assert p.on_tcp_connect(conn("192.168.1.200")).kind == CLOSE
    assert p.on_tcp_connect(conn("192.168.1.201")).kind == CONTINUE
    out, _ = run(ex.REDIRECT_V1_V2, request("/api/v1/users"))
    assert out.status_code == 302
    assert header(out.headers, "location") == ["https://app.example.com/api/v2/users"]
    _, req = run(ex.INTERPOLATED_HEADERS, request("/p"), conn("198.51.100.1"))
    assert header(req.headers, "x-client-ip") == ["198.51.100.1"]
    assert header(req.headers, "x-request-path") == ["/p"]


def test_set_vars_example():
    out, _ = run(ex.SET_VARS_HELLO)
    assert out.body == b"Hello, World!"


def test_block_tor_example_with_the_operators_exit_list(tmp_path, monkeypatch):
    from chalicelib.core.policy import ipintel

    (tmp_path / "proxy.anonymous.tor.txt").write_text("185.220.101.0/24\n")
    monkeypatch.setenv("EDGE_IP_CATEGORIES_DIR", str(tmp_path))
    ipintel.reset()
    try:
        assert run(ex.BLOCK_TOR, c=conn("185.220.101.4"))[0].status_code == 403
        assert run(ex.BLOCK_TOR, c=conn("185.220.102.4"))[0].kind == CONTINUE
    finally:
        ipintel.reset()


@pytest.mark.parametrize("example", ex.REFUSED, ids=lambda e: e[2])
def test_documented_policies_this_service_cannot_honour_are_refused(example):
    _, text, path, words = example
    with pytest.raises(PolicyError) as info:
        compile_policy(text)
    assert info.value.path == path and words in info.value.message


def test_terminate_tls_example_asks_the_edge_for_its_handshake():
    p = compile_policy(ex.TERMINATE_TLS[1])
    state = p.new_state()
    out = p.on_tcp_connect(conn(), state)
    assert out.kind == "terminate_tls"  # the phase pauses for the handshake
    assert out.terminate_tls == {"min_version": "1.2", "max_version": "1.3"}
    made = conn()
    made.tls_version = "TLSv1.3"
    assert p.on_tcp_connect(made, state).kind == CONTINUE  # and resumes after it
