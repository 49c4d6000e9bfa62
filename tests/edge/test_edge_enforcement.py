"""Bind options the SDKs send (modules, traffic policy) enforced by the edge, through the
official Python SDK as a process; options the edge cannot honour refuse the bind."""

import gzip
import json
import socket

import pytest

from tests.edge.test_edge_sdk import _bound, _credential, _host, _refusal

POLICY = {
    "on_http_request": [
        {
            "name": "block admin",
            "expressions": ["req.url.path.startsWith('/admin')"],
            "actions": [
                {
                    "type": "custom-response",
                    "config": {"status_code": 418, "body": "no admin for ${conn.client_ip}"},
                }
            ],
        },
        {
            "name": "tag",
            "actions": [{"type": "add-headers", "config": {"headers": {"x-policy": "applied"}}}],
        },
    ],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"x-served-by": "edge"}}}]},
    ],
}


def _serve(edge, account, agents, options, proto="http"):
    agent = agents(edge, _credential(account)["token"], [{"proto": proto, "options": options}])
    return agent.start()


def test_traffic_policy_sent_by_the_sdk_is_enforced_on_requests_and_responses(
    edge, account, agents
):
    url = _bound(_serve(edge, account, agents, {"traffic_policy": [json.dumps(POLICY)]}))[0]["url"]
    host = _host(url)
    denied = edge.http("GET", host, "/admin/x")
    assert denied.status_code == 418 and denied.text == "no admin for 127.0.0.1"
    ok = edge.http("GET", host, "/echo")
    assert ok.status_code == 200
    assert {k.lower(): v for k, v in ok.json()["headers"].items()}["x-policy"] == "applied"
    assert ok.headers["x-served-by"] == "edge"


def test_policy_answers_keep_the_connection_usable(edge, account, agents):
    import requests

    host = _host(
        _bound(_serve(edge, account, agents, {"traffic_policy": [json.dumps(POLICY)]}))[0]["url"]
    )
    with requests.Session() as session:
        for path, status in (("/admin", 418), ("/echo", 200), ("/admin/2", 418), ("/", 200)):
            resp = session.get(
                f"http://127.0.0.1:{edge.http_port}{path}", headers={"Host": host}, timeout=10
            )
            assert resp.status_code == status


def test_an_invalid_traffic_policy_refuses_the_bind_naming_the_element(edge, account, agents):
    bad = {"on_http_request": [{"actions": [{"type": "no-such-action"}]}]}
    events = _serve(edge, account, agents, {"traffic_policy": [json.dumps(bad)]})
    message = _refusal(events, "bind")
    assert "ERR_NGROK_2201" in message and "on_http_request[0].actions[0]" in message


def test_basic_auth_module_requires_the_credentials(edge, account, agents):
    host = _host(
        _bound(_serve(edge, account, agents, {"basic_auth": ["user", "s3cret-pass"]}))[0]["url"]
    )
    assert edge.http("GET", host, "/echo").status_code == 401
    assert edge.http("GET", host, "/echo", auth=("user", "wrong-pass")).status_code == 401
    assert edge.http("GET", host, "/echo", auth=("user", "s3cret-pass")).status_code == 200


def test_basic_auth_with_a_short_password_is_refused_with_the_hosted_error(edge, account, agents):
    """Not a traffic policy error (the user wrote none): the hosted service's own code."""
    message = _refusal(_serve(edge, account, agents, {"basic_auth": ["user", "short"]}), "bind")
    assert "ERR_NGROK_360" in message, message
    assert "Password must be between 8 and 128 characters, got 5" in message, message
    assert "traffic policy" not in message, message


def test_an_upstream_protocol_the_edge_does_not_speak_is_refused(edge, account, agents):
    """app_protocol="http3" was accepted and served as HTTP/1.1: now the hosted error."""
    message = _refusal(_serve(edge, account, agents, {"app_protocol": ["http3"]}), "bind")
    assert "ERR_NGROK_15003" in message and "Upstream protocol is invalid" in message, message


def test_ip_restriction_module_denies_outside_the_allowed_cidrs(edge, account, agents):
    allowed = _host(
        _bound(_serve(edge, account, agents, {"allow_cidr": ["127.0.0.0/8"]}))[0]["url"]
    )
    denied = _host(
        _bound(_serve(edge, account, agents, {"deny_cidr": ["127.0.0.1/32"]}))[0]["url"]
    )
    assert edge.http("GET", allowed, "/echo").status_code == 200
    assert edge.http("GET", denied, "/echo").status_code == 403


def test_user_agent_filter_module(edge, account, agents):
    host = _host(
        _bound(_serve(edge, account, agents, {"deny_user_agent": ["(?i)curl.*"]}))[0]["url"]
    )
    assert edge.http("GET", host, "/echo", headers={"User-Agent": "curl/8"}).status_code == 403
    assert edge.http("GET", host, "/echo", headers={"User-Agent": "Mozilla/5"}).status_code == 200


def test_request_and_response_header_modules(edge, account, agents):
    host = _host(
        _bound(
            _serve(
                edge,
                account,
                agents,
                {
                    "request_header": ["X-Added", "yes"],
                    "remove_request_header": ["X-Secret"],
                    "response_header": ["X-Resp", "edge"],
                },
            )
        )[0]["url"]
    )
    resp = edge.http("GET", host, "/echo", headers={"X-Secret": "drop me"})
    seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
    assert seen["x-added"] == "yes" and "x-secret" not in seen
    assert resp.headers["x-resp"] == "edge"


def test_compression_module_gzips_the_response(edge, account, agents):
    host = _host(_bound(_serve(edge, account, agents, {"compression": []}))[0]["url"])
    resp = edge.http(
        "GET", host, "/stream?n=4&size=5000", headers={"Accept-Encoding": "gzip"}, stream=True
    )
    assert resp.headers["content-encoding"] == "gzip"
    raw = resp.raw.read(decode_content=False)
    assert len(gzip.decompress(raw)) == 20000


@pytest.mark.parametrize(
    "options, named",
    [
        # no client id and secret: the hosted service's managed OAuth applications (none here);
        # with them the option becomes the oauth action (tests/edge/test_identity.py)
        ({"oauth": ["google"]}, "OAuth"),
    ],
)
def test_options_the_edge_cannot_honour_refuse_the_bind(edge, account, agents, options, named):
    message = _refusal(_serve(edge, account, agents, options), "bind")
    assert "ERR_NGROK_1602" in message and named in message


def test_tcp_ip_restriction_closes_refused_connections(edge, account, agents):
    url = _bound(_serve(edge, account, agents, {"deny_cidr": ["127.0.0.0/8"]}, "tcp"))[0]["url"]
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"hello")
        try:
            assert sock.recv(100) == b""  # closed without a byte of the upstream
        except ConnectionResetError:
            pass  # or reset: "hello" was never read


def test_a_request_the_policy_made_invalid_is_a_502_err_ngrok_2300(edge, account, agents):
    """A policy that removes Host leaves no valid HTTP/1.1 request to send upstream: the edge
    answers in the contract's shape instead of dropping the connection."""
    policy = {
        "on_http_request": [
            {"actions": [{"type": "remove-headers", "config": {"headers": ["host"]}}]}
        ]
    }
    host = _host(
        _bound(_serve(edge, account, agents, {"traffic_policy": [json.dumps(policy)]}))[0]["url"]
    )
    resp = edge.http("GET", host, "/echo")
    assert resp.status_code == 502 and resp.json()["error_code"] == "ERR_NGROK_2300"


def test_policy_added_header_values_beyond_latin1_reach_the_upstream_as_utf8(
    edge, account, agents
):
    policy = {
        "on_http_request": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"x-price": "5 €"}}}]}
        ]
    }
    host = _host(
        _bound(_serve(edge, account, agents, {"traffic_policy": [json.dumps(policy)]}))[0]["url"]
    )
    resp = edge.http("GET", host, "/echo")
    assert resp.status_code == 200
    seen = {k.lower(): v for k, v in resp.json()["headers"].items()}["x-price"]
    assert seen == "5 €"  # the upstream (aiohttp) reads header bytes as UTF-8
