"""Each action: its config schema (defaults, limits, refusals naming the element) and what
it does to synthetic traffic through the sans-IO interface."""

import base64
import gzip
import hashlib
import hmac
import json
import time
import uuid
import zlib

import pytest

from chalicelib.core import policy
from chalicelib.core.policy import (
    CLOSE,
    CONTINUE,
    FORWARD_INTERNAL,
    NEED_BODY,
    RESPOND,
    Endpoint,
    PolicyError,
    Response,
    actions,
    ratelimit,
)
from tests.support.policy import compile_doc, conn, on_request, request, rule


def req_doc(*acts, expressions=None):
    return {"on_http_request": [rule(*acts, expressions=expressions)]}


def res_doc(*acts):
    return {"on_http_response": [rule(*acts)]}


def refused(doc) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_doc(doc)
    return info.value


def header(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


# ---- config refusals, table-driven -----------------------------------------------------------

A0 = "on_http_request[0].actions[0].config"


@pytest.mark.parametrize(
    "action, path",
    [
        ({"type": "add-headers"}, f"{A0}.headers"),
        ({"type": "add-headers", "config": {"headers": {}}}, f"{A0}.headers"),
        (
            {"type": "add-headers", "config": {"headers": {f"h{i}": "v" for i in range(11)}}},
            f"{A0}.headers",
        ),
        (
            {"type": "add-headers", "config": {"headers": {"bad name": "v"}}},
            f"{A0}.headers.bad name",
        ),
        ({"type": "remove-headers", "config": {"headers": []}}, f"{A0}.headers"),
        (
            {"type": "remove-headers", "config": {"headers": [f"h{i}" for i in range(11)]}},
            f"{A0}.headers",
        ),
        ({"type": "remove-headers", "config": {"headers": [5]}}, f"{A0}.headers[0]"),
        ({"type": "custom-response", "config": {"status_code": 600}}, f"{A0}.status_code"),
        ({"type": "custom-response", "config": {"status_code": True}}, f"{A0}.status_code"),
        ({"type": "custom-response", "config": {"body": 5}}, f"{A0}.body"),
        ({"type": "deny", "config": {"status_code": 99}}, f"{A0}.status_code"),
        ({"type": "redirect", "config": {"from": "/a"}}, f"{A0}.to"),
        ({"type": "redirect", "config": {"to": "/b", "status_code": 200}}, f"{A0}.status_code"),
        ({"type": "redirect", "config": {"to": "/b", "from": "(unclosed"}}, f"{A0}.from"),
        ({"type": "url-rewrite", "config": {"from": "a"}}, f"{A0}.to"),
        ({"type": "url-rewrite", "config": {"from": "[", "to": "b"}}, f"{A0}.from"),
        ({"type": "restrict-ips", "config": {}}, A0),
        ({"type": "restrict-ips", "config": {"allow": ["10.0.0.0/33"]}}, f"{A0}.allow[0]"),
        ({"type": "restrict-ips", "config": {"deny": ["nope"]}}, f"{A0}.deny[0]"),
        ({"type": "restrict-ips", "config": {"ip_policies": ["x"]}}, f"{A0}.ip_policies[0]"),
        (
            {"type": "restrict-ips", "config": {"allow": ["1.1.1.1"], "enforce": "yes"}},
            f"{A0}.enforce",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.name",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "token_bucket",
                    "capacity": 1,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.algorithm",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 0,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.capacity",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 2_000_000_001,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.capacity",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "50s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.rate",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "65s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.rate",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "24h10s",
                    "bucket_key": ["conn.client_ip"],
                },
            },
            f"{A0}.rate",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "60s",
                    "bucket_key": ["req.nope"],
                },
            },
            f"{A0}.bucket_key[0]",
        ),
        (
            {
                "type": "rate-limit",
                "config": {
                    "name": "n",
                    "algorithm": "sliding_window",
                    "capacity": 1,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"] * 11,
                },
            },
            f"{A0}.bucket_key",
        ),
        (
            {"type": "basic-auth", "config": {"credentials": ["user:short"]}},
            f"{A0}.credentials[0]",
        ),
        (
            {"type": "basic-auth", "config": {"credentials": ["user:" + "p" * 129]}},
            f"{A0}.credentials[0]",
        ),
        (
            {"type": "basic-auth", "config": {"credentials": ["nocolon12345"]}},
            f"{A0}.credentials[0]",
        ),
        (
            {
                "type": "basic-auth",
                "config": {"credentials": [f"u{i}:password1" for i in range(11)]},
            },
            f"{A0}.credentials",
        ),
        (
            {"type": "basic-auth", "config": {"credentials": ["u:password1"], "realm": "r" * 129}},
            f"{A0}.realm",
        ),
        (
            {"type": "verify-webhook", "config": {"provider": "carrier-pigeon", "secret": "s"}},
            f"{A0}.provider",
        ),
        ({"type": "verify-webhook", "config": {"provider": "github"}}, f"{A0}.secret"),
        ({"type": "set-vars", "config": {"vars": [{"a": 1, "b": 2}]}}, f"{A0}.vars[0]"),
        ({"type": "set-vars", "config": {"vars": []}}, f"{A0}.vars"),
        ({"type": "set-vars", "config": {"vars": [{"bad-name": 1}]}}, f"{A0}.vars[0].bad-name"),
        ({"type": "log", "config": {}}, f"{A0}.metadata"),
        ({"type": "log", "config": {"metadata": {"m": "${req.nope}"}}}, f"{A0}.metadata.m"),
        ({"type": "forward-internal", "config": {}}, f"{A0}.url"),
        (
            {"type": "forward-internal", "config": {"url": "https://public.example.com"}},
            f"{A0}.url",
        ),
        (
            {"type": "forward-internal", "config": {"url": "https://a.internal", "on_error": "x"}},
            f"{A0}.on_error",
        ),
        ({"type": "close-connection", "config": {"x": 1}}, f"{A0}.x"),
        ({"type": "jwt-validation", "config": {}}, f"{A0}.issuer"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(action, path):
    assert refused(req_doc(action)).path == path


@pytest.mark.parametrize(
    "action, path",
    [
        (
            {"type": "compress-response", "config": {"algorithms": ["zstd"]}},
            "on_http_response[0].actions[0].config.algorithms[0]",
        ),
        (
            {"type": "compress-response", "config": {"algorithms": ["gzip", "gzip"]}},
            "on_http_response[0].actions[0].config.algorithms",
        ),
    ],
)
def test_bad_response_configs_are_refused(action, path):
    assert refused(res_doc(action)).path == path


def test_tcp_deny_takes_no_config():
    error = refused({"on_tcp_connect": [rule({"type": "deny", "config": {"status_code": 403}})]})
    assert error.path == "on_tcp_connect[0].actions[0].config.status_code"


@pytest.mark.parametrize("n, ok", [(10, True), (11, False)])
def test_header_count_limit_of_ten(n, ok):
    doc = req_doc({"type": "add-headers", "config": {"headers": {f"h{i}": "v" for i in range(n)}}})
    if ok:
        compile_doc(doc)
    else:
        refused(doc)


@pytest.mark.parametrize(
    "password, ok", [("p" * 8, True), ("p" * 7, False), ("p" * 128, True), ("p" * 129, False)]
)
def test_basic_auth_password_length_bounds(password, ok):
    doc = req_doc({"type": "basic-auth", "config": {"credentials": [f"user:{password}"]}})
    if ok:
        compile_doc(doc)
    else:
        refused(doc)


@pytest.mark.parametrize(
    "rate, ok",
    [
        ("60s", True),
        ("1m", True),
        ("90s", True),
        ("24h", True),
        ("59s", False),
        ("50s", False),
        ("24h10s", False),
        ("1h0m5s", False),
        ("x", False),
    ],
)
def test_rate_limit_rate_bounds(rate, ok):
    doc = req_doc(
        {
            "type": "rate-limit",
            "config": {
                "name": "n",
                "algorithm": "sliding_window",
                "capacity": 1,
                "rate": rate,
                "bucket_key": ["conn.client_ip"],
            },
        }
    )
    if ok:
        compile_doc(doc)
    else:
        refused(doc)


# ---- behaviour --------------------------------------------------------------------------------


def test_add_headers_appends_rendered_values_and_sets_action_variables():
    out, req = on_request(
        req_doc(
            {
                "type": "add-headers",
                "config": {
                    "headers": {"X-Client": "${conn.client_ip}", "X-Path": "p=${req.url.path}"}
                },
            },
            {
                "type": "custom-response",
                "config": {"body": "${actions.ngrok.add_headers.headers_added['X-Client']}"},
            },
        ),
        request("/here", headers=[("X-Client", "old")]),
    )
    assert header(req.headers, "x-client") == ["old", "203.0.113.7"]
    assert header(req.headers, "x-path") == ["p=/here"]
    assert out.kind == RESPOND and out.body == b"203.0.113.7"


def test_add_headers_on_the_response():
    p = compile_doc(
        res_doc({"type": "add-headers", "config": {"headers": {"x-status": "${res.status_code}"}}})
    )
    res = Response(201, [])
    out = p.on_http_response(conn(), request(), res, p.new_state())
    assert out.kind == CONTINUE and header(res.headers, "x-status") == ["201"]


def test_add_headers_drops_values_with_line_breaks():
    out, req = on_request(
        req_doc(
            {
                "type": "add-headers",
                "config": {"headers": {"x-q": "${req.url.query_params['v'][0]}"}},
            }
        ),
        request("/?v=a%0d%0aX-Evil:%201"),
    )
    assert header(req.headers, "x-q") == [] and header(req.headers, "x-evil") == []
    assert out.errors


def test_remove_headers_removes_every_value_case_insensitively():
    out, req = on_request(
        req_doc({"type": "remove-headers", "config": {"headers": ["X-Secret", "absent"]}}),
        request(headers=[("x-secret", "1"), ("X-SECRET", "2"), ("Keep", "k")]),
    )
    assert out.kind == CONTINUE
    assert header(req.headers, "x-secret") == [] and header(req.headers, "keep") == ["k"]


def test_remove_headers_on_the_response():
    p = compile_doc(res_doc({"type": "remove-headers", "config": {"headers": ["server"]}}))
    res = Response(200, [("Server", "x"), ("A", "b")])
    p.on_http_response(conn(), request(), res, p.new_state())
    assert res.headers == [("A", "b")]


@pytest.mark.parametrize(
    "body, content_type",
    [
        ('{"ok": true}', "application/json"),
        ("[1]", "application/json"),
        ("<h1>hi</h1>", "text/html"),
        ("plain", "text/plain"),
        ("{not json", "text/plain"),
        ("", "text/plain"),
    ],
)
def test_custom_response_infers_the_content_type(body, content_type):
    out, _ = on_request(req_doc({"type": "custom-response", "config": {"body": body}}))
    assert out.kind == RESPOND and out.status_code == 200
    assert header(out.headers, "content-type") == [content_type]
    assert header(out.headers, "content-length") == [str(len(body.encode()))]


def test_custom_response_uses_given_status_headers_and_interpolation():
    out, _ = on_request(
        req_doc(
            {
                "type": "custom-response",
                "config": {
                    "status_code": 418,
                    "body": "you are ${conn.client_ip} at ${req.url.path}",
                    "headers": {"content-type": "text/x-tea", "x-a": "${req.method}"},
                },
            }
        ),
        request("/pot"),
    )
    assert (out.status_code, out.body) == (418, b"you are 203.0.113.7 at /pot")
    assert header(out.headers, "content-type") == ["text/x-tea"]
    assert header(out.headers, "x-a") == ["GET"]


def test_custom_response_replaces_the_upstream_response():
    p = compile_doc(
        res_doc(
            {
                "type": "custom-response",
                "config": {"status_code": 503, "body": "was ${res.status_code}"},
            }
        )
    )
    out = p.on_http_response(conn(), request(), Response(500, []), p.new_state())
    assert (out.kind, out.status_code, out.body) == (RESPOND, 503, b"was 500")


def test_deny_defaults_to_403_without_body_and_stops_later_rules():
    doc = {
        "on_http_request": [
            rule({"type": "deny"}),
            rule({"type": "custom-response", "config": {"body": "x"}}),
        ]
    }
    out, _ = on_request(doc)
    assert (out.kind, out.status_code, out.body) == (RESPOND, 403, b"")


def test_deny_with_status_code():
    out, _ = on_request(req_doc({"type": "deny", "config": {"status_code": 404}}))
    assert out.status_code == 404


def test_deny_on_tcp_connect_closes():
    p = compile_doc(
        {"on_tcp_connect": [rule({"type": "deny"}, expressions=["conn.client_ip == '10.9.9.9'"])]}
    )
    assert p.on_tcp_connect(conn("10.9.9.9")).kind == CLOSE
    assert p.on_tcp_connect(conn("10.9.9.8")).kind == CONTINUE


def test_close_connection_in_both_phases():
    doc = {
        "on_tcp_connect": [
            rule({"type": "close-connection"}, expressions=["conn.client_port == 1"])
        ],
        "on_http_request": [rule({"type": "close-connection"})],
    }
    p = compile_doc(doc)
    assert p.on_tcp_connect(conn(port=1)).kind == CLOSE
    assert p.on_tcp_connect(conn(port=2)).kind == CONTINUE
    assert p.on_http_request(conn(), request(), p.new_state()).kind == CLOSE


@pytest.mark.parametrize(
    "config, target, status, location",
    [
        (
            {"from": "/api/v1/", "to": "/api/v2/"},
            "/api/v1/items?x=1",
            302,
            "https://app.example.com/api/v2/items?x=1",
        ),
        ({"from": "^http://(.*)$", "to": "https://$1", "status_code": 301}, "/x", 301, None),
        ({"to": "https://other.example.com/"}, "/anything", 302, "https://other.example.com/"),
        (
            {"from": "/(?P<name>[a-z]+)$", "to": "/hello-$name"},
            "/bob",
            302,
            "https://app.example.com/hello-bob",
        ),
        ({"from": "/old", "to": "/new", "status_code": 308}, "/unrelated", None, None),
    ],
)
def test_redirect(config, target, status, location):
    out, _ = on_request(req_doc({"type": "redirect", "config": config}), request(target))
    if status is None or location is None and config.get("status_code") == 301:
        assert out.kind == CONTINUE  # no match (https URL does not match ^http://)
    else:
        assert (out.kind, out.status_code) == (RESPOND, status)
        assert header(out.headers, "location") == [location]


def test_redirect_from_http_to_https_with_interpolation():
    doc = req_doc(
        {
            "type": "redirect",
            "config": {"to": "https://${req.host}${req.url.path}", "status_code": 301},
        },
        expressions=["req.url.scheme == 'http'"],
    )
    out, _ = on_request(doc, request("/p", scheme="http"))
    assert out.status_code == 301 and header(out.headers, "location") == [
        "https://app.example.com/p"
    ]
    out, _ = on_request(doc, request("/p", scheme="https"))
    assert out.kind == CONTINUE


def test_redirect_headers_and_action_variables():
    doc = {
        "on_http_request": [
            rule(
                {
                    "type": "redirect",
                    "config": {"from": "/a", "to": "/b", "headers": {"x-why": "moved"}},
                }
            )
        ]
    }
    out, _ = on_request(doc, request("/a"))
    assert header(out.headers, "x-why") == ["moved"]


def test_url_rewrite_replaces_every_match_and_keeps_going():
    doc = {
        "on_http_request": [
            rule({"type": "url-rewrite", "config": {"from": "/v1/", "to": "/v2/"}}),
            rule(
                {
                    "type": "add-headers",
                    "config": {
                        "headers": {
                            "x-url": "${req.url}",
                            "x-var": "${actions.ngrok.url_rewrite.url}",
                        }
                    },
                }
            ),
        ]
    }
    out, req = on_request(doc, request("/v1/a/v1/b?q=/v1/"))
    assert out.kind == CONTINUE
    assert req.target == "/v2/a/v2/b?q=/v2/"
    assert header(req.headers, "x-url") == ["https://app.example.com/v2/a/v2/b?q=/v2/"]
    assert header(req.headers, "x-var") == header(req.headers, "x-url")


def test_url_rewrite_with_groups_and_authority_anchor():
    doc = req_doc(
        {
            "type": "url-rewrite",
            "config": {
                "from": "^https://${req.url.authority}/products/([0-9]+)",
                "to": "https://${req.url.authority}/items?id=$1",
            },
        }
    )
    _, req = on_request(doc, request("/products/42"))
    assert req.target == "/items?id=42"


def test_url_rewrite_without_match_changes_nothing():
    _, req = on_request(
        req_doc({"type": "url-rewrite", "config": {"from": "/zzz", "to": "/"}}), request("/a?b")
    )
    assert req.target == "/a?b"


@pytest.mark.parametrize(
    "config, ip, allowed",
    [
        ({"allow": ["10.0.0.0/8"]}, "10.1.2.3", True),
        ({"allow": ["10.0.0.0/8"]}, "11.1.2.3", False),
        ({"deny": ["10.0.0.0/8"]}, "10.1.2.3", False),
        ({"deny": ["10.0.0.0/8"]}, "192.0.2.1", True),
        ({"allow": ["10.0.0.0/8"], "deny": ["10.9.0.0/16"]}, "10.9.1.1", False),
        ({"allow": ["10.0.0.0/8"], "deny": ["10.9.0.0/16"]}, "10.8.1.1", True),
        ({"allow": ["::/0"]}, "2001:db8::1", True),
        ({"allow": ["::/0"]}, "192.0.2.1", False),
        ({"allow": ["192.0.2.1"]}, "192.0.2.1", True),
        ({"allow": ["10.0.0.0/8"], "enforce": False}, "11.1.2.3", True),
    ],
)
def test_restrict_ips(config, ip, allowed):
    doc = req_doc(
        {"type": "restrict-ips", "config": config},
        {
            "type": "add-headers",
            "config": {"headers": {"x-action": "${actions.ngrok.restrict_ips.action}"}},
        },
    )
    out, req = on_request(doc, c=conn(ip))
    if allowed:
        assert out.kind == CONTINUE
    else:
        assert (out.kind, out.status_code) == (RESPOND, 403)
    if config.get("enforce") is False:
        assert header(req.headers, "x-action") == ["deny"]


def test_restrict_ips_on_tcp_connect_closes_and_on_response_answers_403():
    p = compile_doc(
        {
            "on_tcp_connect": [
                rule({"type": "restrict-ips", "config": {"allow": ["10.0.0.0/8"]}})
            ],
            "on_http_response": [
                rule({"type": "restrict-ips", "config": {"deny": ["10.0.0.0/8"]}})
            ],
        }
    )
    assert p.on_tcp_connect(conn("11.0.0.1")).kind == CLOSE
    assert p.on_tcp_connect(conn("10.0.0.1")).kind == CONTINUE
    out = p.on_http_response(conn("10.0.0.1"), request(), Response(200, []), p.new_state())
    assert out.status_code == 403


# ---- restrict-ips ip_policies: resolved per account through the run context ----------------

ACCOUNT, OTHER = "ac_owner", "ac_other"
RULES = {  # what the store holds: (account, policy id) -> rules
    (ACCOUNT, "ipp_mine"): [("allow", "127.0.0.1/32"), ("allow", "2001:db8::/32")],
    (ACCOUNT, "ipp_blocks"): [("deny", "10.0.0.0/8")],
    (ACCOUNT, "ipp_empty"): [],
    (OTHER, "ipp_theirs"): [("allow", "0.0.0.0/0"), ("allow", "::/0")],
}


def _resolver(account_id, policy_id):
    return RULES.get((account_id, policy_id))


def _ipp_conn(ip, account_id=ACCOUNT, resolver=_resolver):
    c = conn(ip)
    c.endpoint = Endpoint(
        id="ep_test",
        url="https://app.example.com",
        host="app.example.com",
        port=443,
        protocol="https",
        account_id=account_id,
    )
    c.ip_policy_resolver = resolver
    return c


def _ipp_doc(*ids, enforce=True, **config):
    return req_doc(
        {
            "type": "restrict-ips",
            "config": {"ip_policies": list(ids), "enforce": enforce, **config},
        },
        {
            "type": "add-headers",
            "config": {
                "headers": {
                    "x-action": "${actions.ngrok.restrict_ips.action}",
                    "x-error": "${actions.ngrok.restrict_ips.error.code}",
                }
            },
        },
    )


@pytest.mark.parametrize(
    "ids, config, ip, allowed",
    [
        (["ipp_mine"], {}, "127.0.0.1", True),  # the /32 itself
        (["ipp_mine"], {}, "127.0.0.2", False),  # one past it
        (["ipp_mine"], {}, "2001:db8::1", True),  # IPv6 rule
        (["ipp_mine"], {}, "2001:db9::1", False),
        (["ipp_blocks"], {}, "10.255.255.255", False),  # deny-only policy: denied inside
        (["ipp_blocks"], {}, "11.0.0.0", True),  # and allowed outside
        (["ipp_mine", "ipp_blocks"], {}, "10.0.0.1", False),  # rules of both policies combine
        (["ipp_mine"], {"deny": ["127.0.0.1/32"]}, "127.0.0.1", False),  # config deny wins
        (["ipp_blocks"], {"allow": ["10.1.0.0/16"]}, "10.1.0.1", False),  # policy deny wins
        (["ipp_mine"], {"allow": ["192.0.2.0/24"]}, "192.0.2.9", True),  # config allow adds
        (["ipp_empty"], {}, "127.0.0.1", False),  # no rules at all: nothing allowed
        (["ipp_empty"], {"deny": ["10.0.0.0/8"]}, "127.0.0.1", True),
    ],
)
def test_restrict_ips_combines_the_accounts_ip_policy_rules(ids, config, ip, allowed):
    out, req = on_request(_ipp_doc(*ids, **config), c=_ipp_conn(ip))
    if allowed:
        assert out.kind == CONTINUE and header(req.headers, "x-action") == ["allow"]
    else:
        assert (out.kind, out.status_code) == (RESPOND, 403)


def test_an_ip_denied_by_an_ip_policy_gets_403_with_the_hosted_error_code():
    out, _ = on_request(_ipp_doc("ipp_mine"), c=_ipp_conn("198.51.100.1"))
    assert out.status_code == 403
    assert header(out.headers, "ngrok-error-code") == [actions.BLOCKED[0]] == ["ERR_NGROK_3203"]
    body = json.loads(out.body)
    assert (body["error_code"], body["status_code"]) == ("ERR_NGROK_3203", 403)
    assert header(out.headers, "content-length") == [str(len(out.body))]


def test_another_accounts_ip_policy_does_not_apply():
    # ipp_theirs allows everyone, but for OTHER: on ACCOUNT's endpoint it resolves to nothing
    out, _ = on_request(_ipp_doc("ipp_theirs"), c=_ipp_conn("127.0.0.1"))
    assert out.status_code == 403
    # the same document on OTHER's endpoint: it applies
    assert on_request(_ipp_doc("ipp_theirs"), c=_ipp_conn("127.0.0.1", OTHER))[0].kind == CONTINUE


def test_the_resolver_is_asked_with_the_account_of_the_endpoint_whose_policy_runs():
    asked = []
    on_request(
        _ipp_doc("ipp_mine"),
        c=_ipp_conn(
            "127.0.0.1", resolver=lambda a, i: (asked.append((a, i)) or RULES.get((a, i)))
        ),
    )
    assert asked == [(ACCOUNT, "ipp_mine")]


@pytest.mark.parametrize(
    "ids, account_id, resolver",
    [
        (["ipp_unknown"], ACCOUNT, _resolver),  # no such policy in the account
        (["ipp_mine", "ipp_unknown"], ACCOUNT, _resolver),  # one known does not save an unknown
        (["ipp_mine"], ACCOUNT, None),  # no resolver in the run context
        (["ipp_mine"], "", _resolver),  # no account: nothing to resolve with
    ],
)
def test_an_unresolved_ip_policy_refuses_and_says_why(ids, account_id, resolver):
    c = _ipp_conn("127.0.0.1", account_id, resolver)
    assert on_request(_ipp_doc(*ids), c=c)[0].status_code == 403
    out, req = on_request(_ipp_doc(*ids, enforce=False), c=c)  # not enforced: variables only
    assert out.kind == CONTINUE
    assert header(req.headers, "x-action") == ["deny"]
    assert header(req.headers, "x-error") == ["ERR_NGROK_1801"]


def test_ip_policies_on_tcp_connect_close_a_refused_connection():
    p = compile_doc(
        {
            "on_tcp_connect": [
                rule({"type": "restrict-ips", "config": {"ip_policies": ["ipp_mine"]}})
            ]
        }
    )
    assert p.on_tcp_connect(_ipp_conn("127.0.0.1")).kind == CONTINUE
    assert p.on_tcp_connect(_ipp_conn("127.0.0.2")).kind == CLOSE


def test_a_compiled_policy_lists_the_ip_policies_it_names_with_their_place():
    p = compile_doc(
        {
            "on_tcp_connect": [
                rule({"type": "restrict-ips", "config": {"ip_policies": ["ipp_b", "ipp_a"]}})
            ],
            "on_http_request": [
                rule({"type": "restrict-ips", "config": {"ip_policies": ["ipp_a"]}})
            ],
        }
    )
    assert p.ip_policy_ids == ("ipp_a", "ipp_b")
    assert p.ip_policy_refs == [
        ("on_tcp_connect[0].actions[0].config.ip_policies[0]", "ipp_b"),
        ("on_tcp_connect[0].actions[0].config.ip_policies[1]", "ipp_a"),
        ("on_http_request[0].actions[0].config.ip_policies[0]", "ipp_a"),
    ]
    assert compile_doc(req_doc({"type": "deny"})).ip_policy_ids == ()


RATE = {
    "type": "rate-limit",
    "config": {
        "name": "per-ip",
        "algorithm": "sliding_window",
        "capacity": 3,
        "rate": "60s",
        "bucket_key": ["conn.client_ip"],
    },
}


def _limited_policy(rate=RATE, clock=None):
    p = compile_doc(
        req_doc(
            rate,
            {
                "type": "add-headers",
                "config": {
                    "headers": {
                        "x-key": "${actions.ngrok.rate_limit.bucket_key}",
                        "x-limited": "${actions.ngrok.rate_limit.limited}",
                    }
                },
            },
        )
    )
    ratelimit.LIMITER.clear()
    if clock is not None:
        p.clock = clock
    return p


def test_rate_limit_allows_capacity_then_answers_429_with_retry_after():
    now = [1_000_020.0]
    p = _limited_policy(clock=lambda: now[0])
    results = [p.on_http_request(conn("10.0.0.1"), request(), p.new_state()) for _ in range(4)]
    assert [o.kind for o in results] == [CONTINUE] * 3 + [RESPOND]
    assert results[3].status_code == 429
    retry = int(header(results[3].headers, "retry-after")[0])
    assert 1 <= retry <= 60
    # another key has its own bucket
    assert p.on_http_request(conn("10.0.0.2"), request(), p.new_state()).kind == CONTINUE
    # after the whole window and the next one, the bucket is empty again
    now[0] += 120
    assert p.on_http_request(conn("10.0.0.1"), request(), p.new_state()).kind == CONTINUE


def test_rate_limit_window_slides_with_the_previous_window_weighted():
    now = [600.0]  # the start of a 60 s window
    p = _limited_policy(clock=lambda: now[0])
    for _ in range(3):
        assert p.on_http_request(conn(), request(), p.new_state()).kind == CONTINUE
    now[0] = 660.0 + 30  # half-way through the next window: 3 × 0.5 = 1.5 still counted
    kinds = [p.on_http_request(conn(), request(), p.new_state()).kind for _ in range(3)]
    assert kinds == [CONTINUE, CONTINUE, RESPOND]  # 1.5 + 0 and 1.5 + 1 < 3; 1.5 + 2 ≥ 3


def test_rate_limit_not_enforced_sets_limited_and_continues():
    rate = json.loads(json.dumps(RATE))
    rate["config"].update(enforce=False, capacity=1)
    p = _limited_policy(rate)
    outs = []
    for _ in range(2):
        req = request()
        outs.append(
            (
                p.on_http_request(conn("10.5.5.5"), req, p.new_state()).kind,
                header(req.headers, "x-limited")[0],
                header(req.headers, "x-key")[0],
            )
        )
    assert outs == [(CONTINUE, "false", "10.5.5.5"), (CONTINUE, "true", "10.5.5.5")]


def test_rate_limit_buckets_by_each_combination_of_keys():
    rate = json.loads(json.dumps(RATE))
    rate["config"].update(capacity=1, bucket_key=["conn.client_ip", "getReqHeader('x-k')"])
    p = _limited_policy(rate)

    def kind(ip, k):
        return p.on_http_request(conn(ip), request(headers=[("x-k", k)]), p.new_state()).kind

    assert kind("10.0.0.1", "a") == CONTINUE
    assert kind("10.0.0.1", "b") == CONTINUE
    assert kind("10.0.0.2", "a") == CONTINUE
    assert kind("10.0.0.1", "a") == RESPOND


def _basic(user, password):
    return ("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())


BASIC = {
    "type": "basic-auth",
    "config": {"credentials": ["alice:password1", "bob:${'pass' + 'word2'}"]},
}


@pytest.mark.parametrize(
    "headers, ok",
    [
        ([_basic("alice", "password1")], True),
        ([_basic("bob", "password2")], True),
        ([_basic("alice", "password2")], False),
        ([_basic("mallory", "password1")], False),
        ([("Authorization", "Bearer x")], False),
        ([("Authorization", "Basic !!!")], False),
        ([], False),
    ],
)
def test_basic_auth(headers, ok):
    out, _ = on_request(req_doc(BASIC), request(headers=headers))
    if ok:
        assert out.kind == CONTINUE
    else:
        assert (out.kind, out.status_code) == (RESPOND, 401)
        assert header(out.headers, "www-authenticate") == ['Basic realm="ngrok"']


def test_basic_auth_realm_and_not_enforced_variables():
    doc = req_doc(
        {
            "type": "basic-auth",
            "config": {"credentials": ["alice:password1"], "realm": "inner", "enforce": False},
        },
        {
            "type": "add-headers",
            "config": {
                "headers": {
                    "x-p": "${actions.ngrok.basic_auth.credentials.presented}",
                    "x-u": "${actions.ngrok.basic_auth.credentials.username}",
                    "x-a": "${actions.ngrok.basic_auth.credentials.authorized}",
                }
            },
        },
    )
    out, req = on_request(doc, request(headers=[_basic("alice", "wrong-pass")]))
    assert out.kind == CONTINUE
    assert [header(req.headers, h)[0] for h in ("x-p", "x-u", "x-a")] == ["true", "alice", "false"]
    doc["on_http_request"][0]["actions"][0]["config"]["enforce"] = True
    out, _ = on_request(doc)
    assert header(out.headers, "www-authenticate") == ['Basic realm="inner"']


# ---- verify-webhook ---------------------------------------------------------------------------

SECRET = "whsec-test-secret"
BODY = b'{"event":"push"}'


def _sign(provider, body=BODY, secret=SECRET, ts=None):
    ts = str(int(time.time()) if ts is None else ts)
    mac = lambda data, key=secret.encode(): hmac.new(key, data, hashlib.sha256)  # noqa: E731
    if provider == "github":
        return [("X-Hub-Signature-256", "sha256=" + mac(body).hexdigest())]
    if provider == "generic_sha256":
        return [("X-Signature-256", "sha256=" + mac(body).hexdigest())]
    if provider == "linear":
        return [("Linear-Signature", mac(body).hexdigest())]
    if provider == "gitlab":
        return [("X-Gitlab-Token", secret)]
    if provider == "shopify":
        return [("X-Shopify-Hmac-Sha256", base64.b64encode(mac(body).digest()).decode())]
    if provider == "stripe":
        return [("Stripe-Signature", f"t={ts},v1={mac(ts.encode() + b'.' + body).hexdigest()}")]
    if provider == "slack":
        return [
            ("X-Slack-Request-Timestamp", ts),
            ("X-Slack-Signature", "v0=" + mac(b"v0:" + ts.encode() + b":" + body).hexdigest()),
        ]
    if provider in ("svix", "clerk"):
        key = base64.b64decode(secret[6:])
        sig = base64.b64encode(
            hmac.new(key, f"msg_1.{ts}.".encode() + body, hashlib.sha256).digest()
        ).decode()
        return [("svix-id", "msg_1"), ("svix-timestamp", ts), ("svix-signature", f"v1,{sig}")]
    raise AssertionError(provider)


def _secret(provider):
    return (
        "whsec_" + base64.b64encode(b"svix-key-bytes").decode()
        if provider in ("svix", "clerk")
        else SECRET
    )


PROVIDERS = [
    "github",
    "gitlab",
    "stripe",
    "slack",
    "shopify",
    "svix",
    "clerk",
    "linear",
    "generic_sha256",
]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_verify_webhook_accepts_a_correct_signature_and_refuses_a_tampered_body(provider):
    secret = _secret(provider)
    p = compile_doc(
        req_doc({"type": "verify-webhook", "config": {"provider": provider, "secret": secret}})
    )
    req = request("/hook", method="POST", headers=_sign(provider, secret=secret))
    state = p.new_state()
    out = p.on_http_request(conn(), req, state)
    assert (out.kind, out.max_body_bytes) == (NEED_BODY, actions.MAX_WEBHOOK_BODY)
    req.body = BODY
    assert p.on_http_request(conn(), req, state).kind == CONTINUE
    if provider != "gitlab":  # gitlab sends the secret itself, not a signature of the body
        tampered = request(
            "/hook", method="POST", headers=_sign(provider, secret=secret), body=BODY + b" "
        )
        out = p.on_http_request(conn(), tampered, p.new_state())
        assert (out.kind, out.status_code) == (RESPOND, 403)
    wrong = request(
        "/hook", method="POST", headers=_sign(provider, secret=secret[:-1] + "X"), body=BODY
    )
    assert p.on_http_request(conn(), wrong, p.new_state()).status_code == 403


@pytest.mark.parametrize("provider", ["stripe", "slack", "svix"])
def test_verify_webhook_refuses_stale_timestamps(provider):
    secret = _secret(provider)
    p = compile_doc(
        req_doc({"type": "verify-webhook", "config": {"provider": provider, "secret": secret}})
    )
    old = int(time.time()) - actions.TOLERANCE - 5
    req = request(method="POST", headers=_sign(provider, secret=secret, ts=old), body=BODY)
    assert p.on_http_request(conn(), req, p.new_state()).status_code == 403


def test_verify_webhook_refuses_a_body_larger_than_it_reads_and_can_be_not_enforced():
    doc = req_doc(
        {
            "type": "verify-webhook",
            "config": {"provider": "github", "secret": SECRET, "enforce": False},
        },
        {
            "type": "add-headers",
            "config": {
                "headers": {
                    "x-v": "${actions.ngrok.verify_webhook.verified}",
                    "x-e": "${actions.ngrok.verify_webhook.error.message}",
                }
            },
        },
    )
    req = request(method="POST", headers=_sign("github"), body=BODY, body_complete=False)
    out, req = on_request(doc, req)
    assert out.kind == CONTINUE and header(req.headers, "x-v") == ["false"]
    assert "larger" in header(req.headers, "x-e")[0]


def test_need_body_resumes_at_the_asking_action_without_rerunning_earlier_ones():
    now = [5000.0]
    rate = json.loads(json.dumps(RATE))
    rate["config"]["capacity"] = 1
    p = compile_doc(
        req_doc(
            rate, {"type": "verify-webhook", "config": {"provider": "github", "secret": SECRET}}
        )
    )
    p.clock = lambda: now[0]
    ratelimit.LIMITER.clear()
    req = request(method="POST", headers=_sign("github"))
    state = p.new_state()
    assert p.on_http_request(conn(), req, state).kind == NEED_BODY
    req.body = BODY
    assert p.on_http_request(conn(), req, state).kind == CONTINUE  # not counted twice
    assert p.request_body_limit == actions.MAX_WEBHOOK_BODY


# ---- jwt-validation ---------------------------------------------------------------------------


def _rsa_jwks():
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", alg="RS256", use="sig")
    return key, {"keys": [public]}


@pytest.fixture(scope="module")
def rsa_key():
    return _rsa_jwks()


def _jwt(key, **claims):
    import jwt

    body = {
        "iss": "https://issuer.example",
        "aud": "urn:api",
        "exp": int(time.time()) + 60,
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"})


def _jwt_doc(keys, method="header"):
    return req_doc(
        {
            "type": "jwt-validation",
            "config": {
                "issuer": {"allow_list": [{"value": "https://issuer.example"}]},
                "audience": {"allow_list": [{"value": "urn:api"}]},
                "http": {
                    "tokens": [
                        {
                            "type": "jwt",
                            "method": method,
                            "name": "Authorization" if method == "header" else "token",
                            "prefix": "Bearer " if method == "header" else None,
                        }
                    ]
                },
                "jws": {"allowed_algorithms": ["RS256"], "keys": keys},
            },
        }
    )


def test_jwt_validation_with_an_inline_jwks(rsa_key):
    key, jwks = rsa_key
    doc = _jwt_doc({"jwks": jwks})
    assert (
        on_request(doc, request(headers=[("Authorization", f"Bearer {_jwt(key)}")]))[0].kind
        == CONTINUE
    )
    for token in (
        _jwt(key, iss="https://evil.example"),
        _jwt(key, aud="urn:other"),
        _jwt(key, exp=int(time.time()) - 120),
        "not.a.jwt",
    ):
        out, _ = on_request(doc, request(headers=[("Authorization", f"Bearer {token}")]))
        assert (out.kind, out.status_code) == (RESPOND, 401), token
    out, _ = on_request(doc)
    assert out.status_code == 401


def test_jwt_validation_fetches_and_caches_the_jwks_from_a_url(rsa_key, monkeypatch):
    key, jwks = rsa_key
    fetched = []
    monkeypatch.setattr(
        policy.JWKS, "fetcher", lambda url: fetched.append(url) or json.dumps(jwks).encode()
    )
    policy.JWKS.cache.clear()
    doc = _jwt_doc({"sources": {"additional_jkus": ["http://127.0.0.1:9/jwks.json"]}})
    for _ in range(2):
        out, _ = on_request(doc, request(headers=[("Authorization", f"Bearer {_jwt(key)}")]))
        assert out.kind == CONTINUE
    assert fetched == ["http://127.0.0.1:9/jwks.json"]


def test_jwt_validation_from_a_form_body(rsa_key):
    key, jwks = rsa_key
    doc = _jwt_doc({"jwks": jwks}, method="body")
    req = request(
        method="POST",
        headers=[("Content-Type", "application/x-www-form-urlencoded")],
        body=f"token={_jwt(key)}".encode(),
    )
    assert on_request(doc, req)[0].kind == CONTINUE


def test_jwt_validation_refuses_bad_key_config():
    doc = _jwt_doc({"jwks": {"keys": [{"kty": "nope"}]}})
    assert refused(doc).path == "on_http_request[0].actions[0].config.jws.keys.jwks"
    doc = _jwt_doc({})
    assert refused(doc).path == "on_http_request[0].actions[0].config.jws.keys"


# ---- compress-response ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "accept, algorithms, chosen",
    [
        ("gzip", None, "gzip"),
        ("deflate", None, "deflate"),
        ("gzip;q=0.5, deflate;q=1.0", None, "deflate"),
        ("gzip;q=1.0, br; q=0.5, *;q=0", None, "gzip"),
        ("identity", None, ""),
        ("", None, ""),
        ("gzip", ["deflate"], ""),
        ("*", ["gzip"], "gzip"),
    ],
)
def test_compress_response_negotiates(accept, algorithms, chosen):
    config = {"algorithms": algorithms} if algorithms else {}
    p = compile_doc(res_doc({"type": "compress-response", "config": config}))
    res = Response(200, [("Content-Length", "100"), ("Content-Type", "application/json")])
    req = request(headers=[("Accept-Encoding", accept)] if accept else [])
    out = p.on_http_response(conn(), req, res, p.new_state())
    assert out.kind == CONTINUE
    if not chosen:
        assert out.compressor is None and header(res.headers, "content-length") == ["100"]
        return
    assert header(res.headers, "content-encoding") == [chosen]
    assert header(res.headers, "content-length") == []
    assert header(res.headers, "vary") == ["Accept-Encoding"]
    data = b"".join(out.compressor.feed(c) for c in (b'{"a":', b' "b"}')) + out.compressor.finish()
    plain = gzip.decompress(data) if chosen == "gzip" else zlib.decompress(data)
    assert plain == b'{"a": "b"}'


def test_compress_response_leaves_compressed_responses_alone():
    p = compile_doc(
        res_doc(
            {"type": "compress-response"},
            {
                "type": "add-headers",
                "config": {
                    "headers": {"x-already": "${actions.ngrok.compress.already_compressed}"}
                },
            },
        )
    )
    res = Response(200, [("Content-Encoding", "br")])
    out = p.on_http_response(
        conn(), request(headers=[("Accept-Encoding", "gzip")]), res, p.new_state()
    )
    assert out.compressor is None and header(res.headers, "x-already") == ["true"]


# ---- set-vars, log, forward-internal ----------------------------------------------------------


def test_set_vars_values_keep_their_type_and_feed_later_rules():
    doc = {
        "on_http_request": [
            rule(
                {
                    "type": "set-vars",
                    "config": {
                        "vars": [
                            {"endpoints": ["foo", "bar"]},
                            {"count": 2},
                            {"sub": "${req.host.split('.')[0]}"},
                            {"greeting": "hi ${vars.sub}"},
                            {"list": "${vars.endpoints}"},
                        ]
                    },
                }
            ),
            rule(
                {
                    "type": "custom-response",
                    "config": {"body": "${vars.greeting} ${vars.count} ${vars.list[1]}"},
                },
                expressions=["vars.count == 2", "'foo' in vars.endpoints"],
            ),
        ]
    }
    out, _ = on_request(doc)
    assert out.body == b"hi app 2 bar"


def test_vars_are_scoped_to_their_phase():
    doc = {
        "on_http_request": [rule({"type": "set-vars", "config": {"vars": [{"a": "x"}]}})],
        "on_http_response": [
            rule(
                {"type": "custom-response", "config": {"body": "seen"}},
                expressions=["'a' in vars"],
            )
        ],
    }
    p = compile_doc(doc)
    state = p.new_state()
    p.on_http_request(conn(), request(), state)
    assert p.on_http_response(conn(), request(), Response(200, []), state).kind == CONTINUE


def test_log_collects_rendered_metadata_in_the_outcome():
    p = compile_doc(
        {
            "on_tcp_connect": [
                rule(
                    {
                        "type": "log",
                        "config": {
                            "metadata": {
                                "ip": "${conn.client_ip}",
                                "nested": {"port": "${conn.client_port}"},
                                "n": 1,
                            }
                        },
                    }
                )
            ]
        }
    )
    out = p.on_tcp_connect(conn())
    assert out.logs == [{"metadata": {"ip": "203.0.113.7", "nested": {"port": 51515}, "n": 1}}]


def test_forward_internal_outcome_and_on_error_continue_resumes_after_it():
    doc = {
        "on_http_request": [
            rule(
                {
                    "type": "forward-internal",
                    "config": {
                        "url": "https://${req.url.path.split('/')[1]}.internal",
                        "on_error": "continue",
                    },
                },
                {"type": "custom-response", "config": {"status_code": 503, "body": "fallback"}},
            )
        ]
    }
    p = compile_doc(doc)
    state = p.new_state()
    out = p.on_http_request(conn(), request("/api/x"), state)
    assert (out.kind, out.url, out.on_error) == (
        FORWARD_INTERNAL,
        "https://api.internal",
        "continue",
    )
    again = p.on_http_request(conn(), request("/api/x"), state)  # the forward failed
    assert (again.kind, again.body) == (RESPOND, b"fallback")


def test_forward_internal_on_tcp_connect():
    p = compile_doc(
        {
            "on_tcp_connect": [
                rule({"type": "forward-internal", "config": {"url": "tcp://db.internal:5432"}})
            ]
        }
    )
    out = p.on_tcp_connect(conn())
    assert (out.kind, out.url, out.on_error) == (
        FORWARD_INTERNAL,
        "tcp://db.internal:5432",
        "halt",
    )


def test_failing_expressions_are_false_and_reported():
    doc = {
        "on_http_request": [
            rule({"type": "deny"}, expressions=["req.headers['absent'][0] == 'x'"])
        ]
    }
    out, _ = on_request(doc)
    assert out.kind == CONTINUE and out.errors and "absent" in out.errors[0]


def test_rules_without_expressions_always_match_and_rules_run_in_order():
    doc = {
        "on_http_request": [
            rule({"type": "add-headers", "config": {"headers": {"x-order": "1"}}}),
            rule(
                {"type": "add-headers", "config": {"headers": {"x-order": "2"}}},
                expressions=["req.method == 'POST'"],
            ),
            rule(
                {"type": "add-headers", "config": {"headers": {"x-order": "3"}}},
                expressions=["req.method == 'GET'", "req.url.path == '/'"],
            ),
        ]
    }
    _, req = on_request(doc)
    assert header(req.headers, "x-order") == ["1", "3"]


@pytest.mark.parametrize(
    "to, expected",
    [
        ("/x/$1", "/x/42"),
        ("/x/${1}", None),
        ("/x/$1x", "/x/"),
        ("/x/$9", "/x/"),
        ("/x/$$1", "/x/$1"),
        ("/x/$id", "/x/42"),
    ],
)
def test_url_rewrite_expands_groups_as_go_does(to, expected):
    if expected is None:  # ${1} is CEL interpolation: the integer 1
        expected = "/x/1"
    doc = req_doc({"type": "url-rewrite", "config": {"from": "/p/(?P<id>[0-9]+)", "to": to}})
    _, req = on_request(doc, request("/p/42"))
    assert req.path == expected


def test_jwt_validation_fetches_a_jwks_served_on_the_loopback(rsa_key):
    import http.server
    import threading

    key, jwks = rsa_key
    body = json.dumps(jwks).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/.well-known/jwks.json"
        policy.JWKS.cache.pop(url, None)
        doc = _jwt_doc({"sources": {"additional_jkus": [url]}})
        out, _ = on_request(doc, request(headers=[("Authorization", f"Bearer {_jwt(key)}")]))
        assert out.kind == CONTINUE
    finally:
        server.shutdown()
        server.server_close()


def test_jwt_validation_with_unreachable_keys_is_401(rsa_key):
    key, _ = rsa_key
    policy.JWKS.cache.pop("http://127.0.0.1:9/keys", None)
    doc = _jwt_doc({"sources": {"additional_jkus": ["http://127.0.0.1:9/keys"]}})
    out, _ = on_request(doc, request(headers=[("Authorization", f"Bearer {_jwt(key)}")]))
    assert (out.kind, out.status_code) == (RESPOND, 401)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://a.example/k", "not a url"])
def test_jwt_key_urls_must_be_http(url):
    error = refused(_jwt_doc({"sources": {"additional_jkus": [url]}}))
    assert error.path.endswith("jws.keys.sources.additional_jkus[0]")


def test_rate_limits_of_two_endpoints_with_the_same_policy_are_separate():
    from chalicelib.core.policy import Endpoint

    p = _limited_policy(
        json.loads(json.dumps({**RATE, "config": {**RATE["config"], "capacity": 1}}))
    )
    a, b = conn("10.0.0.1"), conn("10.0.0.1")
    a.endpoint = Endpoint(id="ep_a")
    b.endpoint = Endpoint(id="ep_b")
    assert p.on_http_request(a, request(), p.new_state()).kind == CONTINUE
    assert p.on_http_request(b, request(), p.new_state()).kind == CONTINUE
    assert p.on_http_request(a, request(), p.new_state()).kind == RESPOND


# ---- request-body-find-replace, response-body-find-replace ------------------------------------


def _find_replace(kind, *rules):
    return {"type": kind, "config": {"replacements": list(rules)}}


@pytest.mark.parametrize("kind", ["request-body-find-replace", "response-body-find-replace"])
@pytest.mark.parametrize(
    "config, path, words",
    [
        ({}, "replacements", "is required"),
        ({"replacements": []}, "replacements", "at least 1"),
        (
            {"replacements": [{"from": "a"}] * (actions.MAX_REPLACEMENTS + 1)},
            "replacements",
            f"the limit is {actions.MAX_REPLACEMENTS}",
        ),
        ({"replacements": ["a"]}, "replacements[0]", "mapping"),
        ({"replacements": [{"to": "b"}]}, "replacements[0].from", "is required"),
        ({"replacements": [{"from": ""}]}, "replacements[0].from", "must not be empty"),
        ({"replacements": [{"from": "(open"}]}, "replacements[0].from", "regular expression"),
        ({"replacements": [{"from": "a", "with": "b"}]}, "replacements[0].with", "unknown"),
        ({"replacements": [{"from": "a", "to": 5}]}, "replacements[0].to", "a string"),
    ],
)
def test_find_replace_configs_are_refused_at_the_element(kind, config, path, words):
    phase = "on_http_request" if kind.startswith("request") else "on_http_response"
    error = refused({phase: [rule({"type": kind, "config": config})]})
    assert error.path == f"{phase}[0].actions[0].config.{path}", error.path
    assert words in error.message


def test_find_replace_accepts_the_most_rules_it_allows():
    rules = [{"from": f"a{i}"} for i in range(actions.MAX_REPLACEMENTS)]
    compile_doc(req_doc(_find_replace("request-body-find-replace", *rules)))


def test_request_find_replace_asks_for_the_body_then_rewrites_it_with_its_length():
    doc = req_doc(
        _find_replace(
            "request-body-find-replace",
            {"from": "k=(\\w+)", "to": "k=<$1>"},
            {"from": "<(\\w)", "to": "[$1"},
            {"from": "drop"},
        )
    )
    p = compile_doc(doc)
    req = request("/x", "POST", headers=[("Transfer-Encoding", "chunked")], content_length=None)
    state = p.new_state()
    out = p.on_http_request(conn(), req, state)
    assert out.kind == NEED_BODY and out.max_body_bytes == actions.MAX_FIND_REPLACE_BODY
    req.body = b"k=abc drop k=d"
    out = p.on_http_request(conn(), req, state)
    assert out.kind == CONTINUE
    assert req.body == b"k=[abc>  k=[d>" and req.body_rewritten
    assert header(req.headers, "content-length") == [str(len(req.body))]
    assert header(req.headers, "transfer-encoding") == []


def test_request_find_replace_leaves_an_unmatched_body_alone():
    out, req = on_request(
        req_doc(_find_replace("request-body-find-replace", {"from": "zzz", "to": "y"})),
        request("/x", "POST", content_length=3),
    )
    assert out.kind == CONTINUE and not req.body_rewritten


def test_request_find_replace_refuses_a_body_past_its_bound():
    p = compile_doc(req_doc(_find_replace("request-body-find-replace", {"from": "a"})))
    req = request("/x", "POST")
    state = p.new_state()
    p.on_http_request(conn(), req, state)
    req.body, req.body_complete = b"a" * actions.MAX_FIND_REPLACE_BODY, False
    out = p.on_http_request(conn(), req, state)
    assert out.kind == RESPOND and out.status_code == 413
    assert header(out.headers, "ngrok-error-code") == ["ERR_NGROK_10088"]


def test_request_find_replace_skips_a_rule_whose_cel_pattern_is_not_re2():
    doc = req_doc(
        _find_replace(
            "request-body-find-replace",
            {"from": "${req.url.path}", "to": "x"},
            {"from": "b", "to": "c"},
        )
    )
    out, req = on_request(doc, request("/(", "POST", body=b"ab"))
    assert out.kind == CONTINUE and req.body == b"ac"
    assert any("rule skipped" in e for e in out.errors)


def test_response_find_replace_hands_the_edge_a_rewrite_of_the_whole_body():
    p = compile_doc(
        res_doc(_find_replace("response-body-find-replace", {"from": "(\\d)-(\\d)", "to": "$2$1"}))
    )
    state = p.new_state()
    res = Response(status_code=200, headers=[("content-type", "text/plain")])
    out = p.on_http_response(conn(), request(), res, state)
    assert [rewrite(b"1-2 3-4 $") for rewrite in out.rewrites] == [b"21 43 $"]
    for status, method in ((204, "GET"), (304, "GET"), (200, "HEAD")):
        out = p.on_http_response(
            conn(), request(method=method), Response(status_code=status), p.new_state()
        )
        assert out.rewrites == []


# ---- circuit-breaker -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, path, words",
    [
        ({"error_threshold": 1.01}, "error_threshold", "0.0 to 1.0"),
        ({"error_threshold": -0.01}, "error_threshold", "0.0 to 1.0"),
        ({"error_threshold": True}, "error_threshold", "0.0 to 1.0"),
        ({"error_threshold": "half"}, "error_threshold", "a number"),
        ({"volume_threshold": 0}, "volume_threshold", "from 1 to 2000000000"),
        ({"volume_threshold": 2_000_000_001}, "volume_threshold", "from 1 to 2000000000"),
        ({"window_duration": "0s"}, "window_duration", "from 1s to 2m"),
        ({"window_duration": "121s"}, "window_duration", "from 1s to 2m"),
        ({"tripped_duration": "3m"}, "tripped_duration", "from 1s to 2m"),
        ({"tripped_duration": "soon"}, "tripped_duration", "from 1s to 2m"),
        ({"num_buckets": 11}, "num_buckets", "fixed at 10"),
        ({"enforce": "no"}, "enforce", "a boolean"),
        ({"threshold": 0.5}, "threshold", "unknown field"),
    ],
)
def test_circuit_breaker_configs_are_refused_at_the_element(config, path, words):
    error = refused(req_doc({"type": "circuit-breaker", "config": config}))
    assert error.path == f"{A0}.{path}", error.path
    assert words in error.message


def test_circuit_breaker_accepts_its_bounds():
    for config in (
        {},
        {"error_threshold": 0, "volume_threshold": 1, "window_duration": "1s"},
        {"error_threshold": 1, "volume_threshold": 2_000_000_000, "tripped_duration": "2m"},
        {"num_buckets": 10, "enforce": False, "window_duration": "120s"},
    ):
        compile_doc(req_doc({"type": "circuit-breaker", "config": config}))


def _breaker_run(p, endpoint_id):
    c = conn()
    c.endpoint = Endpoint(
        id=endpoint_id,
        url="https://a.example.com",
        host="a.example.com",
        port=443,
        protocol="https",
    )
    return p.on_http_request(c, request(), p.new_state())


def test_circuit_breaker_trips_per_endpoint_and_recovers_after_its_tripped_time():
    now = [5000.0]
    p = compile_doc(
        req_doc(
            {
                "type": "circuit-breaker",
                "config": {
                    "volume_threshold": 4,
                    "error_threshold": 0.5,
                    "tripped_duration": "3s",
                },
            }
        )
    )
    p.clock = lambda: now[0]
    one, other = f"ep_{uuid.uuid4().hex}", f"ep_{uuid.uuid4().hex}"  # breakers of their own
    for status in (500, 200, 500, 200):  # 2 errors of 4: trips at the 4th
        out = _breaker_run(p, one)
        assert out.kind == CONTINUE and len(out.breakers) == 1
        found, clock = out.breakers[0]
        found.record(status, clock())
    refused_now = _breaker_run(p, one)
    assert refused_now.kind == RESPOND and refused_now.status_code == 503
    assert header(refused_now.headers, "ngrok-error-code") == ["ERR_NGROK_3202"]
    assert _breaker_run(p, other).kind == CONTINUE  # another endpoint's own breaker
    now[0] += 2.9
    assert _breaker_run(p, one).kind == RESPOND
    now[0] += 0.2
    assert _breaker_run(p, one).kind == CONTINUE


def test_circuit_breaker_not_enforced_counts_and_never_refuses():
    now = [9000.0]
    p = compile_doc(
        req_doc({"type": "circuit-breaker", "config": {"volume_threshold": 1, "enforce": False}})
    )
    p.clock = lambda: now[0]
    lenient = f"ep_{uuid.uuid4().hex}"
    for _ in range(5):
        out = _breaker_run(p, lenient)
        assert out.kind == CONTINUE
        found, clock = out.breakers[0]
        found.record(503, clock())
    assert not found.allow(now[0])  # it tripped, and still lets requests through


def test_the_action_breakers_are_bounded():
    from chalicelib.core.policy import breaker

    kept = breaker.Breakers(limit=3)
    made = [kept.get(i, lambda: breaker.Breaker(0.5)) for i in range(5)]
    assert len(kept) == 3
    assert kept.get(4, lambda: breaker.Breaker(0.5)) is made[4]
    assert kept.get(0, lambda: breaker.Breaker(0.5)) is not made[0]  # dropped, made anew


def test_a_request_body_a_rule_would_grow_past_4_mib_is_refused_with_413():
    grow = {
        "type": "request-body-find-replace",
        "config": {"replacements": [{"from": "(?s).+", "to": "$0$0$0$0"}]},
    }
    p = compile_doc(req_doc(grow))
    for copies, status in ((4, None), (5, 413)):
        grow["config"]["replacements"][0]["to"] = "$0" * copies
        p = compile_doc(req_doc(grow))
        state, req = p.new_state(), request(method="POST")
        assert p.on_http_request(conn(), req, state).kind == NEED_BODY
        req.body, req.body_complete = b"b" * (1 << 20), True
        out = p.on_http_request(conn(), req, state)
        if status is None:
            assert out.kind == CONTINUE and len(req.body) == 4 << 20
        else:
            assert out.kind == RESPOND and out.status_code == 413
            assert header(out.headers, "ngrok-error-code") == ["ERR_NGROK_10088"]


def test_jwt_keys_not_known_are_asked_for_and_never_fetched_inside_the_run(rsa_key, monkeypatch):
    """The run does not fetch (it may hang for seconds): it asks the edge with NEED_KEYS for
    the URLs not known, and resumes on what the edge fetched."""
    key, jwks = rsa_key
    fetched = []
    monkeypatch.setattr(
        policy.JWKS, "fetcher", lambda url: fetched.append(url) or json.dumps(jwks).encode()
    )
    url = "http://127.0.0.1:9/asked.json"
    policy.JWKS.cache.pop(url, None)
    policy.JWKS.failed.pop(url, None)
    p = compile_doc(_jwt_doc({"sources": {"additional_jkus": [url, url]}}))
    req = request(headers=[("Authorization", f"Bearer {_jwt(key)}")])
    state = p.new_state()
    out = p.on_http_request(conn(), req, state)
    assert (out.kind, out.urls, fetched) == (policy.NEED_KEYS, [url], [])
    policy.JWKS.fetch(url, time.time())
    assert p.on_http_request(conn(), req, state).kind == CONTINUE
    assert fetched == [url]


def test_a_jwks_fetch_that_failed_is_not_made_again_for_its_ttl(rsa_key, monkeypatch):
    key, _ = rsa_key
    tries = []

    def failing(url):
        tries.append(url)
        raise OSError("unreachable")

    monkeypatch.setattr(policy.JWKS, "fetcher", failing)
    url = "http://127.0.0.1:9/failing.json"
    policy.JWKS.cache.pop(url, None)
    policy.JWKS.failed.pop(url, None)
    doc = _jwt_doc({"sources": {"additional_jkus": [url]}})
    headers = [("Authorization", f"Bearer {_jwt(key)}")]
    for _ in range(3):  # one fetch, then refused from what was kept
        out, _ = on_request(doc, request(headers=headers))
        assert (out.kind, out.status_code) == (RESPOND, 401)
    assert tries == [url]
    now = time.time()
    assert policy.JWKS.missing([url], now + policy.JWKS.FAILED_TTL - 1) == []
    assert policy.JWKS.missing([url], now + policy.JWKS.FAILED_TTL + 1) == [url]


def test_the_jwks_kept_are_bounded_oldest_first(monkeypatch):
    monkeypatch.setattr(policy.JWKS, "fetcher", lambda url: b'{"keys": []}')
    most = policy.JWKS.MAX_URLS
    urls = [f"http://127.0.0.1:9/{i}.json" for i in range(most + 2)]
    now = time.time()
    for url in urls:
        policy.JWKS.fetch(url, now)
    assert len(policy.JWKS.cache) == most
    assert policy.JWKS.missing(urls[:2], now) == urls[:2]  # the two oldest let go
    assert policy.JWKS.missing(urls[2:], now) == []
    policy.JWKS.cache.clear()
