"""edge/decided.py: which traffic policies a decided route may run (each rule broken at its
boundary), and the decisions made of a head the core read, against a recording carrier."""

import asyncio
import types

import pytest

from chalicelib.core.policy import compile_policy, compress
from chalicelib.core.policy.actions import MAX_FIND_REPLACE_BODY, RewriteTooLarge
from chalicelib.core.policy.waf import BODY_LIMIT as WAF_BODY_LIMIT
from edge import decided
from edge.decided import Decider, decidable, mode_of, policy_of
from edge.events import decisions_of


def _req(*actions, expressions=()):
    return {"on_http_request": [{"expressions": list(expressions), "actions": list(actions)}]}


DECIDABLE = {
    "add-headers": {"type": "add-headers", "config": {"headers": {"x-a": "1"}}},
    "remove-headers": {"type": "remove-headers", "config": {"headers": ["x-a"]}},
    "custom-response": {"type": "custom-response", "config": {"status_code": 200, "body": "hi"}},
    "deny": {"type": "deny", "config": {"status_code": 403}},
    "close-connection": {"type": "close-connection"},
    "redirect": {"type": "redirect", "config": {"from": "/a", "to": "/b"}},
    "url-rewrite": {"type": "url-rewrite", "config": {"from": "/a", "to": "/b"}},
    "restrict-ips": {"type": "restrict-ips", "config": {"allow": ["10.0.0.0/8"]}},
    "rate-limit": {
        "type": "rate-limit",
        "config": {
            "name": "r",
            "algorithm": "sliding_window",
            "capacity": 10,
            "rate": "60s",
            "bucket_key": ["conn.client_ip"],
        },
    },
    "basic-auth": {"type": "basic-auth", "config": {"credentials": ["user:password1"]}},
    # read through caches that may wait: decided in a task (below)
    "restrict-ips with ip_policies": {
        "type": "restrict-ips",
        "config": {"ip_policies": ["ipp_0000000000000000000000001"]},
    },
    "a vault secret": {
        "type": "add-headers",
        "config": {"headers": {"x-a": "${secrets.get('vault', 'name')}"}},
    },
    "set-vars": {"type": "set-vars", "config": {"vars": [{"a": "1"}]}},
    "log": {"type": "log", "config": {"metadata": {"a": "1"}}},
    # tripped or not on the head; its answers counted from the records (edge/fast_path.py)
    "circuit-breaker": {"type": "circuit-breaker", "config": {"error_threshold": 0.5}},
    # what waits (the call, the sign-in's steps) is awaited in a task, the run resumed
    "http-request": {"type": "http-request", "config": {"url": "https://lookup.internal/"}},
    "openid-connect": {
        "type": "openid-connect",
        "config": {"issuer_url": "https://i", "client_id": "c", "client_secret": "s"},
    },
    # its target found (an agent endpoint of this edge at once, else in a task) and run
    "forward-internal": {"type": "forward-internal", "config": {"url": "https://a.internal"}},
    # the request's body read by the core first (decide_body), the run resumed on it
    "request-body-find-replace": {
        "type": "request-body-find-replace",
        "config": {"replacements": [{"from": "a", "to": "b"}]},
    },
    "owasp-crs-request": {"type": "owasp-crs-request", "config": {}},
    "verify-webhook": {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}},
    "jwt-validation": {
        "type": "jwt-validation",
        "config": {
            "issuer": {"allow_list": [{"value": "https://issuer.example"}]},
            "http": {"tokens": [{"type": "jwt", "method": "body", "name": "token"}]},
            "jws": {
                "allowed_algorithms": ["RS256"],
                "keys": {"sources": {"additional_jkus": ["https://issuer.example/jwks"]}},
            },
        },
    },
}
NOT_DECIDABLE = {
    "add-headers Content-Length": {
        "type": "add-headers",
        "config": {"headers": {"Content-Length": "1"}},
    },
    "add-headers transfer-encoding": {
        "type": "add-headers",
        "config": {"headers": {"transfer-encoding": "chunked"}},
    },
    "remove-headers content-length": {
        "type": "remove-headers",
        "config": {"headers": ["x-a", "Content-Length"]},
    },
    "remove-headers Transfer-Encoding": {
        "type": "remove-headers",
        "config": {"headers": ["Transfer-Encoding"]},
    },
}


@pytest.mark.parametrize("name", sorted(DECIDABLE))
def test_a_head_or_body_action_is_decidable(name):
    assert decidable(compile_policy(_req(DECIDABLE["add-headers"], DECIDABLE[name])))


@pytest.mark.parametrize("name", sorted(NOT_DECIDABLE))
def test_an_action_that_needs_more_than_the_head_is_not(name):
    assert not decidable(compile_policy(_req(DECIDABLE["add-headers"], NOT_DECIDABLE[name])))


def test_a_sign_in_route_asks_for_its_response_heads():
    """A refreshed session's cookie goes on the agent's response (edge/identity.py
    with_cookies): a route whose policy signs in is RESPONSES even without a response phase;
    an outbound call alone does not make it so."""
    signs_in = compile_policy(_req(DECIDABLE["openid-connect"]))
    calls = compile_policy(_req(DECIDABLE["http-request"]))
    assert decided.mode_of(signs_in) == decided.RESPONSES
    assert decided.mode_of(calls) == decided.DECIDED


CONNECT = {
    "deny": {"type": "deny"},
    "close-connection": {"type": "close-connection"},
    "restrict-ips": {"type": "restrict-ips", "config": {"deny": ["10.0.0.0/8"]}},
    "set-vars": {"type": "set-vars", "config": {"vars": [{"a": "b"}]}},
    "log": {"type": "log", "config": {"metadata": {"k": "v"}}},
}


@pytest.mark.parametrize("name", sorted(CONNECT))
def test_an_on_tcp_connect_rule_is_decided_and_never_held(name):
    """Its rules run on the connection's first request asked about the route (the row's
    ``fresh``): decidable, its decisions never held (a held one would skip them on a new
    connection); a forward-internal there (refused when a policy is made now) is not."""
    from chalicelib.core.policy.holding import request_reads

    doc = {**_req(DECIDABLE["add-headers"]), "on_tcp_connect": [{"actions": [CONNECT[name]]}]}
    made = compile_policy(doc)
    assert decidable(made) and request_reads(made) is None
    assert request_reads(compile_policy(_req(DECIDABLE["add-headers"]))) is not None
    forward = {"type": "forward-internal", "config": {"url": "tcp://a.internal:1"}}
    assert not decidable(compile_policy({**doc, "on_tcp_connect": [{"actions": [forward]}]}))


def _connect_decider(kind):
    return _decider(
        {
            "on_tcp_connect": [
                {"actions": [{"type": "restrict-ips", "config": {kind: ["198.51.100.0/24"]}}]}
            ],
            **_req(DECIDABLE["add-headers"]),
        }
    )


def test_a_fresh_row_refused_on_connect_is_closed_and_the_request_phase_never_runs():
    made, carrier, _, _ = _connect_decider("deny")
    _decide(made, [_row(1, fresh=True)])
    assert [call[:2] for call in carrier.calls] == [("close", 1)]


def test_a_row_not_fresh_skips_the_connect_rules():
    """The connection's later requests: checked at its first only (the denied address
    passes here because the connection was allowed when it began)."""
    made, carrier, _, _ = _connect_decider("deny")
    _decide(made, [_row(1, fresh=False)])
    assert carrier.calls[0][0] == "append", carrier.calls


def test_a_fresh_row_allowed_on_connect_runs_its_request_phase():
    made, carrier, _, _ = _connect_decider("allow")
    _decide(made, [_row(1, fresh=True)])
    assert carrier.calls[0][0] == "append", carrier.calls


# (compress-response: the core compresses with the algorithm Python negotiated; the body
# actions: the core reads the body for them first)
RESPONSE_ONLY = {
    "compress-response": {"type": "compress-response"},
    "response-body-find-replace": {
        "type": "response-body-find-replace",
        "config": {"replacements": [{"from": "a", "to": "b"}]},
    },
    "owasp-crs-response": {"type": "owasp-crs-response", "config": {}},
    "http-request": DECIDABLE["http-request"],  # awaited in a task (Decider._response_calls)
}
RESPONSE_DECIDABLE = [
    "add-headers",
    "remove-headers",
    "custom-response",
    "set-vars",
    "log",
] + list(RESPONSE_ONLY)
RESPONSE_NOT = {
    "http-request past the budget": {
        "type": "http-request",
        "config": {"url": "https://lookup.internal/", "timeout": "25s"},
    },
    "add-headers Content-Length": NOT_DECIDABLE["add-headers Content-Length"],
    "remove-headers transfer-encoding": NOT_DECIDABLE["remove-headers Transfer-Encoding"],
}


def _res(action):
    return {**_req(DECIDABLE["add-headers"]), "on_http_response": [{"actions": [action]}]}


@pytest.mark.parametrize("name", RESPONSE_DECIDABLE)
def test_a_response_phase_that_changes_or_answers_on_the_head_is_decidable(name):
    policy = compile_policy(_res(DECIDABLE.get(name) or RESPONSE_ONLY[name]))
    assert decidable(policy) and mode_of(policy) == decided.RESPONSES


def test_a_compression_the_core_cannot_make_is_not_decidable(monkeypatch):
    """compress-response may negotiate br only where the brotli module is installed (the
    Python path's compressor): the core compresses with gzip and deflate alone, so a policy
    that could negotiate br keeps its route on the Python path."""
    for algorithms, core in (
        (["gzip"], True),
        (["deflate", "gzip"], True),
        (["br", "gzip"], False),
    ):
        assert decided.compresses_in_core(types.SimpleNamespace(algorithms=algorithms)) is core
    monkeypatch.setattr(compress, "AVAILABLE", ["gzip", "deflate", "br"])  # brotli installed
    doc = _res({"type": "compress-response", "config": {"algorithms": ["br", "gzip"]}})
    doc["on_http_response"][0]["name"] = "with brotli"  # a document of this test's alone
    policy = compile_policy(doc)
    assert not decidable(policy) and mode_of(policy) is None
    only_gzip = _res({"type": "compress-response", "config": {"algorithms": ["gzip"]}})
    assert decidable(compile_policy(only_gzip))


@pytest.mark.parametrize("name", sorted(RESPONSE_NOT))
def test_a_response_phase_that_needs_more_is_not(name):
    policy = compile_policy(_res(RESPONSE_NOT[name]))
    assert not decidable(policy) and mode_of(policy) is None


def test_the_modes():
    assert mode_of(None) == decided.PLAIN
    assert mode_of(compile_policy(_req(DECIDABLE["deny"]))) == decided.DECIDED


def test_sse_rules_beside_a_request_phase_are_decided():
    doc = {
        **_req(DECIDABLE["add-headers"]),
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "a", "to": "b"}]},
                    }
                ]
            }
        ],
    }
    policy = compile_policy(doc)
    assert decidable(policy) and mode_of(policy) == decided.RESPONSES


# ---- decisions ---------------------------------------------------------------------------------
class _Carrier:
    def __init__(self):
        self.calls = []
        self.holds = []  # (ticket, whether the core may hold the decision)

    def decide_append(self, ticket, fields, memo=None, hold=False):
        self.calls.append(("append", ticket, fields, memo))
        self.holds.append((ticket, hold))

    def decide_forward(self, ticket, head, memo=None, body=None):
        self.calls.append(("forward", ticket, head, memo))
        self.bodies = getattr(self, "bodies", []) + [body]

    def decide_body(self, ticket, limit, memo=None):
        self.calls.append(("body", ticket, limit) + ((memo,) if memo is not None else ()))

    def decide_internal(self, ticket, head, mux, tunnel_id, memo=None, **how):
        self.calls.append(("internal", ticket, head, mux, tunnel_id, memo, how))

    def decide_respond(self, ticket, status, head, body, close, memo=None, hold=False):
        self.calls.append(("respond", ticket, status, head, body, close))
        self.memos = getattr(self, "memos", []) + [memo]
        self.holds.append((ticket, hold))

    def decide_rewrite(self, ticket, fields, memo=None, encode=None, body=None):
        self.calls.append(("rewrite", ticket, fields, memo) + ((encode,) if encode else ()))
        if body is not None:
            self.calls.append(("rewritten body", ticket, body))

    def decide_events(self, ticket, fields, memo=None, encode=None):
        self.calls.append(("events", ticket, fields, memo) + ((encode,) if encode else ()))

    def flush_decisions(self):
        self.calls.append(("flush",))

    def decide_close(self, ticket):
        self.calls.append(("close", ticket))

    def decide_python(self, ticket):
        self.calls.append(("python", ticket))


HOST = "d.tunnels.localhost"


class _Router:
    """The internal endpoints a forward-internal finds (edge/edges.py's EdgeRouter): an agent
    endpoint of this edge at once (``internal_here``), the others (a cloud one) only through
    the store (``internal_target``), each URL's read counted."""

    def __init__(self):
        self.here, self.stored, self.reads = {}, {}, []
        self.edge_routes = {}

    def internal_here(self, account_id, url, protocol="http"):
        return self.here.get(url)

    async def internal_target(self, account_id, url, protocol="http"):
        self.reads.append(url)
        return self.here.get(url) or self.stored.get(url)

    async def route_http(self, host, target, scheme, draw=True):  # an edge's route by path
        routed = self.edge_routes.get(target.split(b"?")[0]) if self.edge_routes else None
        if routed is not None and draw:
            self.draw(routed)
        return routed

    def draw(self, routed):  # (the routes are made drawn: counted only)
        self.draws = getattr(self, "draws", 0) + 1


def _decider(policy_doc):
    tunnel = types.SimpleNamespace(
        id="tn_1",
        endpoint_id="ep_1",
        url=f"https://{HOST}",
        hostname=HOST,
        account_id="ac_1",
        enforcement=types.SimpleNamespace(policy=compile_policy(policy_doc))
        if policy_doc is not None
        else None,
    )
    edge = types.SimpleNamespace(
        carrier=_Carrier(),
        settings=types.SimpleNamespace(region="eu", instance_id="edge", host="127.0.0.1"),
        router=_Router(),
        http_port=8080,
        https_port=8443,
    )
    changed = []
    policy = policy_of(tunnel)
    routes = {7: (tunnel, "http", HOST, mode_of(policy), policy)}
    made = Decider(edge, routes.get, lambda host, scheme: changed.append((scheme, host)))
    return made, edge.carrier, tunnel, changed


def _decide(made, rows):
    """``made.decide(rows)`` on an event loop, as the edge's loop runs it (the events hub's
    worker is started there)."""

    async def run():
        made.decide(rows)

    asyncio.run(run())


def _row(
    ticket=1,
    key=7,
    method=b"GET",
    target=b"/echo",
    fields=None,
    bodiless=True,
    tls=None,
    body=None,
    multiplexed=False,
    fresh=True,
):
    fields = fields if fields is not None else [(b"host", HOST.encode()), (b"accept", b"*/*")]
    return (
        ticket,
        key,
        ("198.51.100.7", 40000),
        ("127.0.0.1", 80),
        tls,
        method,
        target,
        fields,
        bodiless,
        body,
        multiplexed,
        fresh,
    )


def test_headers_only_appended_go_as_fields_the_core_writes_the_head_with():
    made, carrier, _, _ = _decider(
        _req({"type": "add-headers", "config": {"headers": {"X-IP": "${conn.client_ip}"}}})
    )
    _decide(made, [_row()])
    ((kind, ticket, fields, memo),) = carrier.calls
    assert (kind, ticket, fields) == ("append", 1, [(b"x-ip", b"198.51.100.7")])
    assert memo.state.action_vars["on_http_request"]  # the run rides with the record
    assert made.decided == 1 and made.handed == 0


def test_the_runs_decisions_are_counted_when_it_ran():
    """A quiet route's request makes no record: its policy's decisions count at once."""
    made, carrier, _, _ = _decider(
        _req({"type": "restrict-ips", "config": {"allow": ["198.51.100.0/24"]}})
    )
    counted = {}

    async def run():
        made.decide([_row(1), _row(2)])
        counted.update(made.edge._events_hub.tally.decisions)  # before its worker drains it

    asyncio.run(run())
    found = decisions_of(carrier.calls[0][3].state.action_vars)
    assert found and counted == {key: 2 for key in found}


def test_a_policy_that_appends_nothing_forwards_the_head_unchanged():
    made, carrier, _, _ = _decider(_req({"type": "set-vars", "config": {"vars": [{"a": "1"}]}}))
    _decide(made, [_row()])
    assert [c[:3] for c in carrier.calls] == [("append", 1, [])]


def test_a_forward_carries_the_head_as_the_policy_left_it():
    made, carrier, _, _ = _decider(
        _req(
            {"type": "url-rewrite", "config": {"from": "/echo", "to": "/other"}},
            {"type": "add-headers", "config": {"headers": {"x-ip": "${conn.client_ip}"}}},
        )
    )
    _decide(made, [_row(fields=[(b"host", HOST.encode()), (b"x-forwarded-for", b"203.0.113.9")])])
    ((kind, ticket, head, memo),) = carrier.calls
    assert (kind, ticket) == ("forward", 1)
    assert head == (
        b"GET /other HTTP/1.1\r\nhost: " + HOST.encode() + b"\r\nx-ip: 198.51.100.7\r\n"
        b"x-forwarded-for: 203.0.113.9, 198.51.100.7\r\nx-forwarded-proto: http\r\n"
        b"x-forwarded-host: " + HOST.encode() + b"\r\n\r\n"
    )


def test_an_answer_keeps_the_connection_only_without_a_body_or_a_close():
    made, carrier, _, _ = _decider(
        _req({"type": "custom-response", "config": {"status_code": 418, "body": "tea"}})
    )
    _decide(
        made,
        [
            _row(1),
            _row(2, bodiless=False),
            _row(3, fields=[(b"host", HOST.encode()), (b"connection", b"Close")]),
            _row(4, method=b"HEAD"),
        ],
    )
    kinds = [(c[0], c[1], c[2], c[4], c[5]) for c in carrier.calls]
    assert kinds == [
        ("respond", 1, 418, b"tea", False),
        ("respond", 2, 418, b"tea", True),
        ("respond", 3, 418, b"tea", True),
        ("respond", 4, 418, b"", False),  # no body to a HEAD, its head all the same
    ]
    first, second = carrier.calls[0][3], carrier.calls[1][3]
    assert first.startswith(b"HTTP/1.1 418 ") and b"content-length: 3\r\n" in first
    assert b"connection: close\r\n" not in first and b"connection: close\r\n" in second
    assert carrier.calls[3][3] == first


def test_close_connection_closes():
    made, carrier, _, _ = _decider(_req({"type": "close-connection"}))
    _decide(made, [_row(5)])
    assert carrier.calls == [("close", 5)]


def test_a_request_the_policy_broke_is_answered_502_err_ngrok_2300_and_closed():
    made, carrier, _, _ = _decider(
        _req({"type": "remove-headers", "config": {"headers": ["host"]}})
    )
    _decide(made, [_row(6)])
    ((kind, ticket, status, head, body, close),) = carrier.calls
    assert (kind, ticket, status, close) == ("respond", 6, 502, True)
    assert b"ERR_NGROK_2300" in body and b"connection: close\r\n" in head


@pytest.mark.parametrize(
    "change",
    ["dropped", "no policy", "not decidable", "another decidable policy"],
)
def test_a_route_that_changed_hands_the_connection_back_untouched(change):
    """Any other policy than the one the route was pushed with, even of the same mode: the
    core may hold decisions keyed by the facts the old one read."""
    made, carrier, tunnel, changed = _decider(_req(DECIDABLE["add-headers"]))
    key = 7
    if change == "dropped":
        key = 8
    elif change == "no policy":
        tunnel.enforcement = None
    elif change == "another decidable policy":
        tunnel.enforcement = types.SimpleNamespace(policy=compile_policy(_req(DECIDABLE["deny"])))
    else:
        tunnel.enforcement = types.SimpleNamespace(
            policy=compile_policy(_req(NOT_DECIDABLE["add-headers Content-Length"]))
        )
    _decide(made, [_row(9, key=key)])
    assert carrier.calls == [("python", 9)]
    assert (made.decided, made.handed) == (0, 1)
    assert changed == ([] if change == "dropped" else [("http", HOST)])


def test_the_tls_facts_are_the_policys_conn_tls():
    """The core's handshake facts, the client certificate it verified among them (a name
    asking for one: ``conn.tls.client.*``; none: its variables' zero values)."""
    import ssl

    from stacks.certs import make_ca, make_client_cert

    made, carrier, _, _ = _decider(
        _req(
            {
                "type": "custom-response",
                "config": {
                    "body": "${conn.tls.version}|${conn.tls.sni}|${conn.tls.cipher_suite}|"
                    "${conn.tls.client.subject.common_name}"
                },
            }
        )
    )
    der = ssl.PEM_cert_to_DER_cert(make_client_cert(make_ca("decided"), "admin")[0].decode())
    facts = ("a.example", "TLSv1.3", "TLS_AES_128_GCM_SHA256", b"http/1.1")
    _decide(made, [_row(tls=facts + (3, der)), _row(tls=facts + (0, None))])
    assert carrier.calls[0][4] == b"1.3|a.example|TLS_AES_128_GCM_SHA256|admin"
    assert carrier.calls[1][4] == b"1.3|a.example|TLS_AES_128_GCM_SHA256|"


def test_a_policy_that_fails_closes_the_connection(monkeypatch):
    made, carrier, tunnel, _ = _decider(_req(DECIDABLE["add-headers"]))

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tunnel.enforcement.policy, "on_http_request", broken)
    _decide(made, [_row(3), _row(4)])
    assert carrier.calls == [("close", 3), ("close", 4)]  # one bad row never costs the batch


def test_framing_fields_are_named_once():
    assert decided.FRAMING_FIELDS == ("content-length", "transfer-encoding")


# ---- the response phase --------------------------------------------------------------------
def _forwarded(doc):
    """A decider of ``doc`` and the policy run of a request it forwarded (the memo)."""
    made, carrier, tunnel, _ = _decider(doc)
    _decide(made, [_row(1)])
    memo = carrier.calls[0][3]
    carrier.calls.clear()
    return made, carrier, memo


@pytest.mark.parametrize(
    "accepts, encode",
    [
        (b"gzip", "gzip"),
        (b"gzip, deflate", "deflate"),  # equal q-values: the action's list's order
        (b"deflate;q=0.5, gzip", "gzip"),
        (b"br", None),
        (None, None),
    ],
)
def test_a_negotiated_compression_is_the_cores_to_make(accepts, encode):
    """compress-response: the head as the action leaves it (its Content-Encoding and Vary,
    no Content-Length) and the algorithm it negotiated for the core to compress with; none
    negotiated, the head goes on as it came."""
    made, carrier, tunnel, _ = _decider(
        {"on_http_response": [{"actions": [{"type": "compress-response"}]}]}
    )
    asked = [(b"host", HOST.encode())] + ([(b"accept-encoding", accepts)] if accepts else [])
    _decide(made, [_row(1, fields=asked)])
    memo = carrier.calls[0][3]
    carrier.calls.clear()
    fields = [(b"Content-Type", b"text/html"), (b"Content-Length", b"5000")]
    made.responses([(2, 7, 200, fields, memo, None)])
    if encode is None:
        assert carrier.calls == [("rewrite", 2, [(n.lower(), v) for n, v in fields], memo)]
    else:
        assert carrier.calls == [
            (
                "rewrite",
                2,
                [
                    (b"content-type", b"text/html"),
                    (b"content-encoding", encode.encode()),
                    (b"vary", b"Accept-Encoding"),
                ],
                memo,
                encode,
            )
        ]


def test_a_response_head_goes_on_as_the_response_phase_left_it():
    made, carrier, memo = _forwarded(
        {
            "on_http_response": [
                {
                    "expressions": ["res.status_code == 200 && req.url.path == '/echo'"],
                    "actions": [
                        {
                            "type": "add-headers",
                            "config": {"headers": {"X-Seen": "${res.status_code}"}},
                        },
                        {"type": "remove-headers", "config": {"headers": ["server"]}},
                    ],
                }
            ]
        }
    )
    fields = [(b"Content-Type", b"text/plain"), (b"Server", b"up"), (b"Content-Length", b"2")]
    made.responses([(2, 7, 200, fields, memo, None), (3, 7, 404, fields, memo, None)])
    assert carrier.calls == [
        (
            "rewrite",
            2,
            [(b"content-type", b"text/plain"), (b"content-length", b"2"), (b"x-seen", b"200")],
            memo,
        ),
        # no rule matched: the head as it came (names in lower case, as the Python path's)
        ("rewrite", 3, [(n.lower(), v) for n, v in fields], memo),
    ]


def test_a_response_phase_answer_replaces_the_response_and_closes():
    made, carrier, memo = _forwarded(
        {
            "on_http_response": [
                {
                    "expressions": ["res.status_code >= 500"],
                    "actions": [
                        {
                            "type": "custom-response",
                            "config": {"status_code": 503, "body": "sorry"},
                        }
                    ],
                }
            ]
        }
    )
    made.responses([(4, 7, 502, [(b"content-length", b"0")], memo, None)])
    ((kind, ticket, status, head, body, close),) = carrier.calls
    assert (kind, ticket, status, body, close) == ("respond", 4, 503, b"sorry", True)
    assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close\r\n" in head


def test_a_response_head_without_its_run_or_a_failing_phase_closes(monkeypatch):
    made, carrier, memo = _forwarded(
        {
            "on_http_response": [
                {"actions": [{"type": "set-vars", "config": {"vars": [{"a": "1"}]}}]}
            ]
        }
    )

    def broken(*args):
        raise RuntimeError("a bug")

    made.responses([(5, 7, 200, [], None, None)])
    monkeypatch.setattr(memo.policy, "on_http_response", broken)
    made.responses([(6, 7, 200, [], memo, None)])
    assert carrier.calls == [("close", 5), ("close", 6)]


# ---- IP policies and vault secrets: decided once the caches have them ----------------------
def test_a_policy_naming_ip_policies_and_secrets_is_decided_once_they_are_read(monkeypatch):
    doc = _req(
        {"type": "restrict-ips", "config": {"ip_policies": ["ipp_1"]}},
        {"type": "add-headers", "config": {"headers": {"x-key": "${secrets.get('v', 'k')}"}}},
    )
    made, carrier, tunnel, _ = _decider(doc)
    read = []

    class _Router:
        async def ip_policy_resolver(self, account_id, policy):
            read.append(("ipp", account_id, policy.ip_policy_ids))
            await asyncio.sleep(0.01)  # a store read
            return lambda account, ident: [("allow", "198.51.100.0/24")]

    async def resolver(edge, account_id, policy):
        read.append(("secrets", account_id))
        return lambda vault, name: "sesame" if (vault, name) == ("v", "k") else None

    made.edge.router = _Router()
    monkeypatch.setattr(decided.secrets, "resolver", resolver)

    async def run():
        made.decide([_row(1), _row(2, fields=[(b"host", HOST.encode())])])
        assert [c for c in carrier.calls if c[0] != "flush"] == []  # nothing decided yet
        for _ in range(100):
            if len([c for c in carrier.calls if c[0] == "append"]) == 2:
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    appended = [c for c in carrier.calls if c[0] == "append"]
    assert [c[2] for c in appended] == [[(b"x-key", b"sesame")]] * 2
    assert carrier.calls.count(("flush",)) == 2  # each task sends its own decision
    assert read.count(("secrets", "ac_1")) == 2 and read[0] == ("ipp", "ac_1", ("ipp_1",))
    assert made.decided == 2


def test_an_ip_policy_that_denies_is_decided_as_the_python_path_decides_it():
    doc = _req({"type": "restrict-ips", "config": {"ip_policies": ["ipp_1"]}})
    made, carrier, _, _ = _decider(doc)

    class _Router:
        async def ip_policy_resolver(self, account_id, policy):
            return lambda account, ident: [("deny", "198.51.100.0/24")]

    made.edge.router = _Router()

    async def run():
        made.decide([_row(1)])
        for _ in range(100):
            if any(c[0] == "respond" for c in carrier.calls):
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    responded = [c for c in carrier.calls if c[0] == "respond"]
    assert [c[2] for c in responded] == [403]


def test_a_decision_is_held_only_when_the_policy_reads_nothing_but_the_row():
    """``hold`` goes with an append and with the policy's own answer of a route whose policy
    holding.py names facts for; never with an error of the edge's (a new operation id each
    time) nor for a policy with a per-request read."""
    made, carrier, _, _ = _decider(
        _req(
            {"type": "add-headers", "config": {"headers": {"x-a": "${req.url.path}"}}},
            expressions=["req.url.path == '/echo'"],
        )
    )
    _decide(made, [_row(1)])
    assert carrier.holds == [(1, True)]
    made, carrier, _, _ = _decider(_req(DECIDABLE["deny"]))
    _decide(made, [_row(2)])
    assert carrier.calls[0][:3] == ("respond", 2, 403) and carrier.holds == [(2, True)]
    made, carrier, _, _ = _decider(
        _req({"type": "add-headers", "config": {"headers": {"x-a": "${time.now}"}}})
    )
    _decide(made, [_row(3)])
    assert carrier.calls[0][0] == "append" and carrier.holds == [(3, False)]
    made, carrier, _, _ = _decider(  # the policy broke the request: the edge's error
        _req({"type": "remove-headers", "config": {"headers": ["host"]}})
    )
    _decide(made, [_row(4)])
    assert carrier.calls[0][:3] == ("respond", 4, 502) and carrier.holds == [(4, False)]


def _restricted(policy_doc, allows):
    """A decider whose route was pushed RESTRICTED (its account has ``endpoints`` IP
    restrictions), ``ip_restrictions.allows`` answering ``allows`` (an exception: raised)."""
    made, carrier, tunnel, changed = _decider(policy_doc)
    pushed = made.route_of(7)
    mode = (pushed[3] or decided.DECIDED) | decided.RESTRICTED
    routes = {7: pushed[:3] + (mode,) + pushed[4:]}
    made.route_of = routes.get
    made.mode_of = lambda tunnel: mode

    async def check(edge, account_id, kind, ip):
        if isinstance(allows, Exception):
            raise allows
        return allows

    return made, carrier, check


@pytest.mark.parametrize("allows", [False, RuntimeError("the store is down")])
def test_a_client_the_accounts_restrictions_refuse_is_answered_403_and_closed(monkeypatch, allows):
    """As edge/http_routing.py refuses it (ERR_NGROK_3203), restrictions that cannot be read
    refusing too; nothing of the policy runs, nothing is held."""
    from edge import ip_restrictions

    made, carrier, check = _restricted(_req(DECIDABLE["add-headers"]), allows)
    monkeypatch.setattr(ip_restrictions, "allows", check)

    async def run():
        made.decide([_row(1)])
        await asyncio.sleep(0.01)

    asyncio.run(run())
    (respond,) = [c for c in carrier.calls if c[0] == "respond"]
    assert respond[:3] == ("respond", 1, 403) and respond[5] is True
    assert b"ERR_NGROK_3203" in respond[4] and carrier.holds == [(1, False)]


def test_an_allowed_client_is_decided_as_any_but_nothing_is_held(monkeypatch):
    """A decision made after a client check is never held (the next request's client would
    go unchecked), though the policy alone reads nothing but the row."""
    from edge import ip_restrictions

    made, carrier, check = _restricted(
        _req({"type": "add-headers", "config": {"headers": {"x-a": "${req.url.path}"}}}), True
    )
    monkeypatch.setattr(ip_restrictions, "allows", check)

    async def run():
        made.decide([_row(1)])
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert carrier.calls[0][:2] == ("append", 1) and carrier.holds == [(1, False)]


def test_a_refreshed_sessions_cookie_goes_on_the_agents_response():
    """edge/identity.py with_cookies: the set-cookie of a session whose last-seen moved on is
    added to the agent's response head before the response phase runs, once."""
    made, carrier, memo = _forwarded(_req(DECIDABLE["add-headers"]))
    memo.set_cookies = ["s=v; Path=/; HttpOnly"]
    fields = [(b"Content-Length", b"2")]
    made.responses([(2, 7, 200, fields, memo, None)])
    made.responses([(3, 7, 200, fields, memo, None)])
    assert carrier.calls[0] == (
        "rewrite",
        2,
        [(b"content-length", b"2"), (b"set-cookie", b"s=v; Path=/; HttpOnly")],
        memo,
    )
    assert carrier.calls[1] == ("rewrite", 3, [(b"content-length", b"2")], memo)


def test_outbound_calls_that_may_outlast_the_cores_wait_keep_the_route_pythons():
    """The core waits DECIDE_SECONDS for a ticket: a request phase whose calls' timeouts sum
    past AWAIT_BUDGET is the Python path's (it would be cut there, unanswered)."""
    call = {
        "type": "http-request",
        "config": {"url": "https://lookup.internal/", "timeout": "15s"},
    }
    assert decidable(compile_policy(_req(call)))
    assert not decidable(compile_policy(_req(call, call)))


def _deciding():
    """The tasks of a Decider's still running (not the events hub's worker)."""
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and t.get_coro().__qualname__.startswith("Decider.")
    ]


@pytest.mark.parametrize(
    "waits_on", ["restrictions", "caches", "call", "hop then call", "call then hop"]
)
def test_a_decision_that_waits_past_the_cores_wait_ends_its_task(monkeypatch, core, waits_on):
    """Each waiting task (an account's restrictions read, an IP policy or secret read, an
    outbound call, a forward-internal's target read then its own policy's call) ends at
    DECIDE_SECONDS after the row came, the core's own wait for the ticket, however many tasks
    decide it in turn: the ticket is closed (restrictions not read in time refuse, 403), and
    no task outlives it."""
    from edge import ip_restrictions

    async def forever(*args, **kwargs):
        await asyncio.sleep(3600)

    monkeypatch.setattr(decided, "DECIDE_SECONDS", 0.2)
    if waits_on == "restrictions":
        made, carrier, _ = _restricted(_req(DECIDABLE["add-headers"]), True)
        monkeypatch.setattr(ip_restrictions, "allows", forever)
    elif waits_on == "caches":
        doc = _req(
            {"type": "add-headers", "config": {"headers": {"x": "${secrets.get('v', 'k')}"}}}
        )
        made, carrier, _, _ = _decider(doc)
        monkeypatch.setattr(decided.secrets, "resolver", forever)
    elif waits_on == "call":
        call = {"type": "http-request", "config": {"url": "https://lookup.internal/"}}
        made, carrier, _, _ = _decider(_req(call))
        monkeypatch.setattr(decided.http_policy, "http_call", forever)
    elif waits_on == "call then hop":  # a call (0.15 s), then the target's read in another
        call = {"type": "http-request", "config": {"url": "https://lookup.internal/"}}
        made, carrier, _, _ = _decider(_req(call, FORWARD))

        async def slow_call(edge, account_id, traffic, phase, out, again):
            await asyncio.sleep(0.15)
            return again()

        made.edge.router.internal_target = forever
        monkeypatch.setattr(decided.http_policy, "http_call", slow_call)
    else:  # the target read in a task (0.15 s), then its policy's call in another
        made, carrier, _, _ = _decider(_req(FORWARD))
        call = {"type": "http-request", "config": {"url": "https://lookup.internal/"}}
        stored = _internal(core, _req(call))

        async def slow_read(account_id, url, protocol="http"):
            await asyncio.sleep(0.15)
            return stored

        made.edge.router.internal_target = slow_read
        monkeypatch.setattr(decided.http_policy, "http_call", forever)

    async def run():
        made.decide([_row(1)])
        await asyncio.sleep(0.1)
        assert [c for c in carrier.calls if c[0] != "flush"] == []  # still waiting
        await asyncio.sleep(0.15)  # 0.25 s: past the row's 0.2 s, not past any one task's
        return _deciding()

    left = asyncio.run(run())
    assert left == []
    ended = [c for c in carrier.calls if c[0] != "flush"]
    if waits_on == "restrictions":
        assert [c[:3] for c in ended] == [("respond", 1, 403)]
    else:
        assert ended == [("close", 1)]


# ---- forward-internal --------------------------------------------------------------------
INTERNAL = "https://a.internal"
FORWARD = {"type": "forward-internal", "config": {"url": INTERNAL}}


def _internal(mux, policy_doc=None, **changes):
    """An internal agent endpoint of this edge on ``mux``, as EdgeRouter.internal_here finds
    it (its own policy ``policy_doc``)."""
    from edge.edges import Routed
    from edge.registry import Tunnel

    session = types.SimpleNamespace(mux=mux, grant=types.SimpleNamespace(account_id="ac_1"))
    enforcement = types.SimpleNamespace(policy=compile_policy(policy_doc)) if policy_doc else None
    tunnel = Tunnel(
        id="tn_in",
        session=session,
        proto="https",
        url=INTERNAL,
        hostname="a.internal",
        endpoint_id="ep_in",
        internal=True,
        enforcement=enforcement,
    )
    for name, value in changes.items():
        setattr(tunnel, name, value)
    return Routed(
        endpoint_id="ep_in",
        url=INTERNAL,
        host="a.internal",
        account_id="ac_1",
        tunnel=tunnel,
        enforcement=enforcement,
    )


def test_a_forward_internal_to_an_agent_endpoint_here_goes_on_to_its_session(core):
    """The request as the forwarding policy left it to the internal endpoint's session and
    tunnel, spoken to as its route would be; no store read. A policy that only appended
    fields sends those (the core writes the head and the X-Forwarded ones), held when the
    route's decisions are (its policy reads only the row's facts); one that changed more
    sends the whole head, never held."""
    made, carrier, _, _ = _decider(
        _req({"type": "add-headers", "config": {"headers": {"x-a": "1"}}}, FORWARD)
    )
    made.edge.router.here[INTERNAL] = _internal(core, None, proxy_proto=2)
    _decide(made, [_row(1)])
    ((kind, ticket, head, mux, tunnel_id, memo, how),) = carrier.calls
    assert (kind, ticket, head, mux, tunnel_id) == ("internal", 1, None, core, "tn_in")
    assert how == {
        "fields": [(b"x-a", b"1")],
        "responses": False,
        "h2_scheme": None,
        "proxy_proto": 2,
        "proxy_dest": "127.0.0.1:8080",
        "hold": True,
    }
    assert memo.state is not None and made.edge.router.reads == []

    rewrite = {"type": "url-rewrite", "config": {"from": "/echo", "to": "/other"}}
    made, carrier, _, _ = _decider(_req(rewrite, FORWARD))
    made.edge.router.here[INTERNAL] = _internal(core)
    _decide(made, [_row(2)])
    ((kind, ticket, head, _, _, _, how),) = carrier.calls
    assert head == (
        b"GET /other HTTP/1.1\r\nhost: " + HOST.encode() + b"\r\naccept: */*\r\n"
        b"x-forwarded-for: 198.51.100.7\r\nx-forwarded-proto: http\r\n"
        b"x-forwarded-host: " + HOST.encode() + b"\r\n\r\n"
    )
    assert (how["fields"], how["hold"]) == ([], False)


def test_a_target_whose_breaker_counts_its_answers_is_never_held_and_its_route_never_quiet(core):
    from edge import breaker

    made, carrier, _, _ = _decider(_req(FORWARD))
    counted = []
    made.counting = counted.append
    made.edge.router.here[INTERNAL] = _internal(
        core, None, breaker=breaker.of_option({"error_threshold": 0.5})
    )
    _decide(made, [_row(1)])
    ((kind, _, head, _, _, memo, how),) = carrier.calls
    assert (kind, head, how["hold"], counted) == ("internal", None, False, [7])
    assert memo.upstream_breaker is not None  # its record counts the answer


def test_the_internal_endpoints_own_policy_runs_next_as_its_endpoint(core):
    made, carrier, _, _ = _decider(_req(FORWARD))
    answer = {"type": "custom-response", "config": {"status_code": 200, "body": "${endpoint.id}"}}
    made.edge.router.here[INTERNAL] = _internal(core, _req(answer))
    _decide(made, [_row(1)])
    ((kind, ticket, status, _, body, close),) = carrier.calls
    assert (kind, ticket, status, body, close) == ("respond", 1, 200, b"ep_in", False)
    assert carrier.holds == [(1, False)]


def test_a_response_phase_at_the_internal_endpoint_asks_for_the_response_head(core):
    made, carrier, _, _ = _decider(_req(FORWARD))
    responses = {
        "on_http_response": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"x-r": "1"}}}]}
        ]
    }
    made.edge.router.here[INTERNAL] = _internal(core, responses)
    _decide(made, [_row(1)])
    assert carrier.calls[0][0] == "internal" and carrier.calls[0][6]["responses"] is True


def _decide_in_task(made, rows):
    """``made.decide(rows)`` for rows decided in a task each (the store's read of a target,
    an edge's route): the decisions once every task sent its own (flushed), flushes left
    out."""
    calls = made.edge.carrier.calls

    async def run():
        made.decide(rows)
        assert [c for c in calls if c[0] != "flush"] == []  # nothing decided yet
        for _ in range(100):
            if calls.count(("flush",)) >= len(rows):
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert calls.count(("flush",)) >= len(rows)
    return [c for c in calls if c[0] != "flush"]


def test_an_internal_endpoint_found_nowhere_is_offline_unless_the_rule_goes_on():
    made, carrier, _, _ = _decider(_req(FORWARD))
    ((kind, ticket, status, head, body, close),) = _decide_in_task(made, [_row(1)])
    assert (kind, ticket, status, close) == ("respond", 1, 502, True)
    assert b"ERR_NGROK_3200" in body and b"a.internal is offline" in body
    assert made.edge.router.reads == [INTERNAL]  # looked for in the store, in a task

    goes_on = {"type": "forward-internal", "config": {"url": INTERNAL, "on_error": "continue"}}
    made, carrier, _, _ = _decider(_req(goes_on, DECIDABLE["custom-response"]))
    assert [c[:3] for c in _decide_in_task(made, [_row(2)])] == [("respond", 2, 200)]


def test_a_cloud_endpoint_that_lets_the_request_through_is_the_hosted_502():
    made, carrier, _, _ = _decider(_req(FORWARD))
    from edge.edges import Routed

    cloud_policy = compile_policy(_req(DECIDABLE["add-headers"]))
    made.edge.router.stored[INTERNAL] = Routed(
        endpoint_id="ep_cloud",
        url=INTERNAL,
        host="a.internal",
        account_id="ac_1",
        cloud=True,
        enforcement=types.SimpleNamespace(policy=cloud_policy),
    )
    ((kind, _, status, _, body, close),) = _decide_in_task(made, [_row(1)])
    assert (kind, status, close) == ("respond", 502, True)
    assert b"ERR_NGROK_6029" in body and b"ep_cloud is non-terminating" in body


def test_a_loop_of_forwards_ends_after_max_forwards_hops(core):
    from edge.edges import MAX_FORWARDS

    made, carrier, _, _ = _decider(_req(FORWARD))
    made.edge.router.here[INTERNAL] = _internal(core, _req(FORWARD))  # forwards to itself
    _decide(made, [_row(1)])
    ((kind, _, status, _, body, close),) = carrier.calls
    assert (kind, status, close) == ("respond", 502, True)
    assert f"More than {MAX_FORWARDS} forward-internal hops".encode() in body


@pytest.mark.parametrize(
    "why", ["not decidable", "not the core's session", "ws-tcp towards HTTP/2"]
)
def test_what_the_core_cannot_carry_at_the_target_goes_to_python(core, why):
    made, carrier, _, _ = _decider(_req(FORWARD))
    if why == "not decidable":
        target = _internal(core, _req(NOT_DECIDABLE["add-headers Content-Length"]))
    elif why == "ws-tcp towards HTTP/2":
        target = _internal(core, None, ws_tcp=True, forwards_proto="http2")
    else:
        target = _internal(types.SimpleNamespace(closed=False), None)
    made.edge.router.here[INTERNAL] = target
    _decide(made, [_row(1)])
    assert carrier.calls == [("python", 1)]


def test_a_converting_target_is_converted_by_the_core_with_no_head_and_no_breaker(core):
    """A forward-internal's target that converts WebSockets: the request goes on to it with
    ``ws_tcp`` (the core answers the upgrade and converts: no head is made, the converter
    sending no HTTP request) and no breaker counts the converter's answers, as on the Python
    path (edge/wstcp.py)."""
    passed = {"type": "circuit-breaker", "config": {"error_threshold": 0.5}}
    made, carrier, _, _ = _decider(_req(passed, FORWARD))
    made.edge.router.here[INTERNAL] = _internal(core, None, ws_tcp=True)
    _decide(made, [_row(1)])
    ((kind, ticket, head, _, tunnel_id, memo, how),) = carrier.calls
    assert (kind, ticket, head, tunnel_id) == ("internal", 1, None, "tn_in")
    assert how["ws_tcp"] is True and how.get("fields", []) == []
    assert memo.breakers == [] and memo.upstream_breaker is None
    # a body the policy rewrote is nothing to the converter (it sends no body): still the
    # core's, not handed over
    asked, carrier = _with_body(
        _req(FIND_REPLACE, FORWARD),
        (b"a cat sat", True),
        setup=lambda made: made.edge.router.here.update(
            {INTERNAL: _internal(core, None, ws_tcp=True)}
        ),
    )
    internal = [c for c in carrier.calls if c[0] == "internal"]
    assert ("python", 1) not in carrier.calls and internal[0][6]["ws_tcp"] is True


def _cloud_decider(policy_doc):
    """A Decider whose route 7 serves a cloud endpoint (an edges.Routed: no session)."""
    from edge.edges import Routed

    made, carrier, _, changed = _decider(policy_doc)
    cloud = Routed(
        endpoint_id="ep_cloud",
        url=f"https://{HOST}",
        host=HOST,
        account_id="ac_1",
        cloud=True,
        enforcement=types.SimpleNamespace(policy=compile_policy(policy_doc)),
    )
    policy = policy_of(cloud)
    made.route_of = {7: (cloud, "http", HOST, mode_of(policy), policy)}.get
    return made, carrier


def test_a_cloud_endpoints_route_answers_forwards_or_is_non_terminating(core):
    """Its policy's answer is the answer (held like any route's); its forward-internal goes
    to the target's session; a request it lets through is the hosted 502 ERR_NGROK_6029,
    never sent to a session of its own (it has none)."""
    answers = _req(
        {"type": "custom-response", "config": {"status_code": 200, "body": "${endpoint.id}"}}
    )
    made, carrier = _cloud_decider(answers)
    _decide(made, [_row(1)])
    assert [c[:5] for c in carrier.calls] == [
        ("respond", 1, 200, carrier.calls[0][3], b"ep_cloud")
    ]
    assert carrier.holds == [(1, True)]

    made, carrier = _cloud_decider(_req(FORWARD))
    made.edge.router.here[INTERNAL] = _internal(core)
    _decide(made, [_row(2)])
    assert [(c[0], c[1], c[4]) for c in carrier.calls] == [("internal", 2, "tn_in")]

    made, carrier = _cloud_decider(_req(DECIDABLE["add-headers"]))
    _decide(made, [_row(3)])
    ((kind, _, status, _, body, close),) = carrier.calls
    assert (kind, status, close) == ("respond", 502, True)
    assert b"ERR_NGROK_6029" in body and b"ep_cloud is non-terminating" in body


def test_a_request_handed_to_python_at_its_target_counts_no_decision(core):
    """Python runs it again, and counts its decisions then."""
    from edge.observe import hub_of

    allow = {"type": "restrict-ips", "config": {"allow": ["198.51.100.0/24"]}}
    made, carrier, _, _ = _decider(_req(allow, FORWARD))
    made.edge.router.here[INTERNAL] = _internal(types.SimpleNamespace(closed=False))

    async def run():
        made.decide([_row(1)])
        return dict(hub_of(made.edge).tally.decisions)

    assert asyncio.run(run()) == {} and carrier.calls == [("python", 1)]


def test_a_tripped_target_breakers_503_is_counted_by_no_breaker(core):
    """As on the Python path: the edge's own answer counts in no circuit-breaker action."""
    from edge import breaker

    made, carrier, _, _ = _decider(_req(FORWARD))
    passed = _req({"type": "circuit-breaker", "config": {"error_threshold": 0.5}})
    target = _internal(core, passed, breaker=breaker.of_option({"error_threshold": 0.5}))
    target.tunnel.breaker.tripped_until = float("inf")
    made.edge.router.here[INTERNAL] = target
    _decide(made, [_row(1)])
    ((kind, _, status, _, body, close),) = carrier.calls
    assert (kind, status) == ("respond", 503) and b"ERR_NGROK_3202" in body
    assert list(carrier.memos[0].breakers) == [] and carrier.memos[0].upstream_breaker is None


def _edge_decider():
    """A Decider whose route 7 serves an HTTPS edge's hostname (decided.EdgeName)."""
    made, carrier, _, _ = _decider(None)
    name = decided.EdgeName("edghts_1", "ac_1", f"https://{HOST}", HOST)
    made.route_of = {7: (name, "http", HOST, decided.DECIDED, None)}.get
    made.mode_of = lambda tunnel: decided.DECIDED
    return made, carrier


def test_an_https_edges_request_is_routed_by_its_path_then_decided(core):
    """Each request routed as the Python path routes it (the edge's route for its path, its
    modules' policy, its backend's labeled tunnel): what the policy lets through goes to the
    tunnel's session; a route with no modules sends it on as it came; no route for the name
    is 404; a fixed answer's backend is answered with it (its bodiless request's connection
    kept)."""
    from edge.edges import Routed

    made, carrier = _edge_decider()
    labeled = _internal(core).tunnel
    modules = types.SimpleNamespace(policy=compile_policy(_req(DECIDABLE["add-headers"])))

    def route(enforcement=None, fixed=None):
        return Routed(
            endpoint_id="edghts_1",
            url=f"https://{HOST}",
            host=HOST,
            account_id="ac_1",
            tunnel=None if fixed else labeled,
            fixed=fixed,
            enforcement=enforcement,
        )

    made.edge.router.edge_routes = {
        b"/modules": route(modules),
        b"/plain": route(),
        b"/fixed": route(fixed={"status_code": 200, "body": "x"}),
    }
    calls = _decide_in_task(
        made,
        [
            _row(1, target=b"/modules"),
            _row(2, target=b"/plain"),
            _row(3, target=b"/fixed"),
            _row(4, target=b"/none"),
        ],
    )
    by_ticket = {c[1]: c for c in calls}
    assert by_ticket[1][0] == "internal" and by_ticket[1][4] == "tn_in"
    assert by_ticket[1][2] is None and by_ticket[1][6]["fields"] == [(b"x-a", b"1")]
    assert by_ticket[2][0] == "internal" and by_ticket[2][6]["fields"] == []
    assert not by_ticket[1][6]["hold"] and not by_ticket[2][6]["hold"]  # an edge's: never
    assert by_ticket[3][:3] == ("respond", 3, 200) and by_ticket[3][4:] == (b"x", False)
    assert by_ticket[4][:3] == ("respond", 4, 404) and b"ERR_NGROK_3200" in by_ticket[4][4]


def test_an_http2_stream_whose_body_the_policy_reads_is_pythons_before_anything_runs(core):
    """The core hands an HTTP/2 stream asked for its request's body to Python, which serves
    the request from scratch: so such a stream (a body follows, an action reads it) is
    handed over before its policy runs (a rate limit counted once) and, on an HTTPS edge,
    before its backend is drawn (drawn once, there). A bodiless one, or one on HTTP/1.1,
    is decided here, drawn once."""
    from edge.edges import Routed

    webhook = {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}}
    made, carrier, _, _ = _decider(_req(webhook))
    _decide(made, [_row(1, method=b"POST", bodiless=False, multiplexed=True)])
    assert carrier.calls == [("python", 1)]

    made, carrier = _edge_decider()
    modules = types.SimpleNamespace(policy=compile_policy(_req(webhook)))
    made.edge.router.edge_routes = {
        b"/hook": Routed(
            endpoint_id="edghts_1",
            url=f"https://{HOST}",
            host=HOST,
            account_id="ac_1",
            tunnel=_internal(core).tunnel,
            enforcement=modules,
        )
    }
    routes = made.edge.router.edge_routes
    post = {"method": b"POST", "target": b"/hook", "bodiless": False}
    calls = _decide_in_task(made, [_row(1, multiplexed=True, **post)])
    assert calls == [("python", 1)] and getattr(made.edge.router, "draws", 0) == 0
    made, carrier = _edge_decider()
    made.edge.router.edge_routes = routes
    calls = _decide_in_task(made, [_row(2, **post)])
    assert calls[0][:2] == ("body", 2) and made.edge.router.draws == 1


def test_a_fixed_answer_on_an_http2_stream_reads_no_body_and_closes(core):
    """An HTTP/2 stream's body is never asked for (the core would hand the stream over): the
    fixed answer goes at once, its virtual connection closed after; on HTTP/1.1 the core
    reads the body first (at most 1 MiB)."""
    from edge.edges import Routed

    routes = {
        b"/": Routed(
            endpoint_id="edghts_1",
            url=f"https://{HOST}",
            host=HOST,
            account_id="ac_1",
            fixed={"status_code": 201, "body": "made"},
        )
    }
    made, carrier = _edge_decider()
    made.edge.router.edge_routes = routes
    post = {"method": b"POST", "target": b"/", "bodiless": False}
    calls = _decide_in_task(made, [_row(1, multiplexed=True, **post)])
    assert calls == [("respond", 1, 201, calls[0][3], b"made", True)]
    made, carrier = _edge_decider()
    made.edge.router.edge_routes = routes

    async def run():  # the core's read of the whole body answers the ask
        made.decide([_row(2, **post)])
        for _ in range(100):
            if ("body", 2, decided.http_policy.FIXED_BODY_DRAIN) in carrier.calls:
                break
            await asyncio.sleep(0.01)
        made.decide([_row(2, body=(b"abc", True), **post)])
        for _ in range(100):
            if any(c[0] == "respond" for c in carrier.calls):
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    answered = [c for c in carrier.calls if c[0] == "respond"]
    assert answered == [("respond", 2, 201, answered[0][3], b"made", False)]


def test_a_converting_endpoints_request_goes_on_as_it_came_counted_by_no_breaker(core):
    """A converting endpoint's decided request goes on with no head made (the converter
    sends no HTTP request; a head the policy broke is no 502, as edge/wstcp.py never makes
    one) and its memo names no breaker (the converter's own answers are counted by none, as
    on the Python path); a breaker-only one's has no memo."""
    breaks = {"type": "circuit-breaker", "config": {"error_threshold": 0.5}}
    removes_host = {"type": "remove-headers", "config": {"headers": ["host"]}}
    made, carrier, tunnel, _ = _decider(_req(breaks, removes_host))
    tunnel.ws_tcp = True
    _decide(made, [_row(1)])
    (call,) = carrier.calls
    assert call[:3] == ("append", 1, []), call
    assert call[3].breakers == [] and call[3].upstream_breaker is None
    made, carrier, tunnel, _ = _decider(_req(breaks))
    tunnel.ws_tcp, tunnel.breaker = True, types.SimpleNamespace(allow=lambda: True)
    made._breaker_only(_row(2), tunnel)
    assert carrier.calls[-1] == ("append", 2, [], None)


def test_a_request_routed_to_another_edge_than_the_names_pushed_one_is_pythons(core):
    """The name now routes to another edge (the pushed one deleted, another made for the
    name, within the caches' window): Python routes it, checks that edge's account's IP
    restrictions and records it under that edge, not the core under the pushed one's."""
    from edge.edges import Routed

    made, carrier = _edge_decider()
    made.edge.router.edge_routes = {
        b"/": Routed(
            endpoint_id="edghts_2",
            url=f"https://{HOST}",
            host=HOST,
            account_id="ac_2",
            tunnel=_internal(core).tunnel,
        )
    }
    assert _decide_in_task(made, [_row(1, target=b"/")]) == [("python", 1)]


# ---- the request's body, read by the core (decide_body) ---------------------------------------

FIND_REPLACE = {
    "type": "request-body-find-replace",
    "config": {"replacements": [{"from": "cat", "to": "dog"}]},
}


def _with_body(policy_doc, read, fields=None, method=b"POST", setup=None):
    """A bodied request of a route whose policy reads its body: the first row asks for it,
    the core's read (``read``: the row's last item) answers, the run decides. The calls the
    carrier got, and the carrier. ``setup(made)`` first, when given."""
    made, carrier, _, _ = _decider(policy_doc)
    if setup is not None:
        setup(made)
    fields = fields or [(b"host", HOST.encode()), (b"content-type", b"text/plain")]

    async def run():
        made.decide([_row(1, method=method, fields=fields, bodiless=False)])
        await asyncio.sleep(0.01)
        asked = [c for c in carrier.calls if c[0] == "body"]
        made.decide([_row(1, method=method, fields=fields, bodiless=False, body=read)])
        await asyncio.sleep(0.01)
        return asked

    return asyncio.run(run()), carrier


def test_a_body_reading_policy_asks_the_core_for_the_greediest_actions_bytes():
    """The body is asked for once, as much as the policy's greediest action reads
    (request-body-find-replace's 1 MiB beside owasp-crs-request's 4 KiB, the one asking)."""
    crs = {"type": "owasp-crs-request", "config": {"process_body": True}}
    asked, _ = _with_body(_req(crs), (b"a cat sat", True))
    assert asked == [("body", 1, 4096)]
    asked, _ = _with_body(_req(crs, FIND_REPLACE), (b"a cat sat", True))
    assert asked == [("body", 1, 1024 * 1024)]


def test_a_body_the_policy_rewrote_goes_on_in_place_of_the_clients():
    """Framed by its length (the action's Content-Length, no Transfer-Encoding)."""
    chunked = [(b"host", HOST.encode()), (b"transfer-encoding", b"chunked")]
    asked, carrier = _with_body(_req(FIND_REPLACE), (b"a cat sat", True), fields=chunked)
    assert asked == [("body", 1, 1024 * 1024)]
    forward = [c for c in carrier.calls if c[0] == "forward"]
    assert len(forward) == 1 and carrier.bodies == [b"a dog sat"]
    head = forward[0][2].lower()
    assert b"content-length: 9\r\n" in head and b"transfer-encoding" not in head


def test_a_body_left_alone_goes_on_as_the_client_sent_it():
    asked, carrier = _with_body(_req(FIND_REPLACE), (b"no match here", True))
    assert asked == [("body", 1, 1024 * 1024)]
    assert [c[0] for c in carrier.calls if c[0] in ("forward", "append")] == ["append"]
    assert getattr(carrier, "bodies", []) == []


def test_a_body_longer_than_the_read_is_answered_as_the_action_says():
    """request-body-find-replace cannot rewrite a body longer than it reads: 413; the
    connection then closes (the body was not read whole)."""
    _, carrier = _with_body(_req(FIND_REPLACE), (b"cat" * 10, False))
    respond = [c for c in carrier.calls if c[0] == "respond"]
    assert len(respond) == 1
    _, ticket, status, head, _, close = respond[0]
    assert (ticket, status, close) == (1, 413, True)


def test_an_answer_to_a_body_read_whole_keeps_the_connection():
    """verify-webhook refusing a body read whole: 403, the connection stays usable (as the
    Python path's "next"); unless the client asked it closed."""
    hook = {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}}
    _, carrier = _with_body(_req(hook), (b"{}", True))
    respond = [c for c in carrier.calls if c[0] == "respond"]
    assert len(respond) == 1 and respond[0][2] == 403 and respond[0][5] is False
    fields = [(b"host", HOST.encode()), (b"connection", b"close")]
    _, carrier = _with_body(_req(hook), (b"{}", True), fields=fields)
    respond = [c for c in carrier.calls if c[0] == "respond"]
    assert len(respond) == 1 and respond[0][5] is True


def test_a_client_gone_before_its_body_leaves_nothing_waiting():
    """The core read nothing (the client ended): the run ends with no decision, and nothing is
    left waiting for that ticket."""
    made, carrier, _, _ = _decider(_req(FIND_REPLACE))

    async def run():
        made.decide([_row(1, method=b"POST", bodiless=False)])
        await asyncio.sleep(0.01)
        made.decide([_row(1, method=b"POST", bodiless=False, body=(None, False))])
        await asyncio.sleep(0.01)
        return [t for t in asyncio.all_tasks() if "Decider" in t.get_coro().__qualname__]

    assert asyncio.run(run()) == []  # no run left waiting
    decisions = {"forward", "append", "respond", "close", "python"}
    assert [c for c in carrier.calls if c[0] in decisions] == []


def test_a_body_read_is_never_held():
    """A policy reading the body decides each request anew (nothing held)."""
    doc = _req(
        {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}},
    )
    _, carrier = _with_body(doc, (b"{}", True))
    assert carrier.holds and all(not hold for _, hold in carrier.holds)


def test_a_bodiless_request_is_decided_on_its_empty_body_without_asking_the_core():
    hook = {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}}
    made, carrier, _, _ = _decider(_req(hook))

    async def run():
        made.decide([_row(1, method=b"GET")])
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert [c[0] for c in carrier.calls if c[0] != "flush"] == ["respond"]


def test_a_hop_whose_policy_reads_more_of_the_body_than_was_read_is_the_python_paths(core):
    """The route's run read 4 KiB (owasp-crs-request), the body is longer, and the internal
    endpoint's request-body-find-replace reads up to 1 MiB: the Python path serves it (its
    next run reads on, as far as it reads), not the hop on a body cut short."""
    crs = {"type": "owasp-crs-request", "config": {"process_body": True, "on_error": "continue"}}

    def setup(made):
        made.edge.router.here[INTERNAL] = _internal(core, _req(FIND_REPLACE))

    asked, carrier = _with_body(_req(crs, FORWARD), (b"x" * 4096, False), setup=setup)
    assert asked == [("body", 1, 4096)]
    assert [c for c in carrier.calls if c[0] != "flush"][-1] == ("python", 1)


def test_a_hop_after_the_body_was_rewritten_is_the_python_paths(core):
    """The Python path's next run sees the client's body, and the core would send the target
    the client's: handed to the Python path."""

    def setup(made):
        add = {"type": "add-headers", "config": {"headers": {"x-a": "1"}}}
        made.edge.router.here[INTERNAL] = _internal(core, _req(add))

    _, carrier = _with_body(_req(FIND_REPLACE, FORWARD), (b"a cat", True), setup=setup)
    assert [c for c in carrier.calls if c[0] != "flush"][-1] == ("python", 1)


def test_a_hop_gets_the_body_read_for_the_route(core):
    """The route's run read the whole body; the internal endpoint's verify-webhook decides on
    it without a second read (refused: no signature)."""
    hook = {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}}

    def setup(made):
        made.edge.router.here[INTERNAL] = _internal(core, _req(hook))

    check = {"type": "verify-webhook", "config": {"provider": "github", "secret": "s"}}
    doc = {
        "on_http_request": [
            {"expressions": ["req.method == 'GET'"], "actions": [check]},
            {"actions": [FIND_REPLACE, FORWARD]},
        ]
    }
    asked, carrier = _with_body(doc, (b"no match", True), setup=setup)
    assert asked == [("body", 1, 1024 * 1024)]  # once
    decisions = [c for c in carrier.calls if c[0] not in ("flush", "body")]
    assert [c[:3] for c in decisions] == [("respond", 1, 403)]


# ---- the response phase's body actions ---------------------------------------------------
RES_FIND_REPLACE = {
    "on_http_response": [
        {
            "actions": [
                {
                    "type": "response-body-find-replace",
                    "config": {"replacements": [{"from": "secret", "to": "[gone]"}]},
                }
            ]
        }
    ]
}
RES_WAF = {
    "on_http_response": [
        {"actions": [{"type": "owasp-crs-response", "config": {"process_body": True}}]}
    ]
}
TEXT = [(b"Content-Type", b"text/plain"), (b"Content-Length", b"20")]


def test_a_find_replace_has_the_core_read_the_whole_body_and_sends_the_new_one():
    """The head waits for the body (all of it: the core reads past MAX_FIND_REPLACE_BODY to
    say it is too large); the rewritten body goes in its place, the head as the phase left it (the core
    frames the new body by its size)."""
    made, carrier, memo = _forwarded(RES_FIND_REPLACE)
    made.responses([(2, 7, 200, TEXT, memo, None)])
    assert carrier.calls == [("body", 2, MAX_FIND_REPLACE_BODY, memo)]
    carrier.calls.clear()
    made.responses([(2, 7, 200, TEXT, memo, (b"the secret is out", True))])
    assert carrier.calls == [
        ("rewrite", 2, [(b"content-type", b"text/plain"), (b"content-length", b"20")], memo),
        ("rewritten body", 2, b"the [gone] is out"),
    ]


@pytest.mark.parametrize(
    "size, complete, rewritten",
    [
        (MAX_FIND_REPLACE_BODY, True, True),  # at the bound: rewritten
        (MAX_FIND_REPLACE_BODY + 1, True, False),  # a byte past it
        (MAX_FIND_REPLACE_BODY + 1, False, False),  # the core stopped reading there
        (10, False, False),  # (never so short and not whole: refused all the same)
    ],
)
def test_a_body_past_the_find_replace_bound_is_the_hosted_502(size, complete, rewritten):
    made, carrier, memo = _forwarded(RES_FIND_REPLACE)
    made.responses([(2, 7, 200, TEXT, memo, None)])
    carrier.calls.clear()
    made.responses([(2, 7, 200, TEXT, memo, (b"s" * size, complete))])
    if rewritten:
        assert [c[0] for c in carrier.calls] == ["rewrite", "rewritten body"]
        return
    ((kind, ticket, status, head, body, close),) = carrier.calls
    assert (kind, ticket, status, close) == ("respond", 2, 502, True)
    assert b"ERR_NGROK_3004" in head or b"ERR_NGROK_3004" in body
    assert f"larger than the {MAX_FIND_REPLACE_BODY} bytes".encode() in body


def test_a_find_replace_result_past_its_bound_is_the_hosted_502(monkeypatch):
    made, carrier, memo = _forwarded(RES_FIND_REPLACE)
    made.responses([(2, 7, 200, TEXT, memo, None)])
    carrier.calls.clear()

    def too_large(body):
        raise RewriteTooLarge("the result is larger than 1048576 bytes")

    monkeypatch.setattr(memo, "rewrites", [too_large])
    made.responses([(2, 7, 200, TEXT, memo, (b"secret", True))])
    ((kind, _, status, _, body, _),) = carrier.calls
    assert (kind, status) == ("respond", 502)
    assert b"response-body-find-replace: the result is larger" in body


def test_the_owasp_rules_read_the_first_bytes_and_answer_or_let_the_rest_go_on():
    """owasp-crs-response with process_body: the core reads the first BODY_LIMIT bytes; a
    match answers (closed), else the head goes on and what was read with the rest after it
    (no body of Python's)."""
    made, carrier, memo = _forwarded(RES_WAF)
    made.responses([(2, 7, 200, TEXT, memo, None)])
    # (the core reads until the body passes the ask: it ends once it has the 4 KiB)
    assert carrier.calls == [("body", 2, WAF_BODY_LIMIT - 1, memo)]
    carrier.calls.clear()
    made.responses([(2, 7, 200, TEXT, memo, (b"hello, world" * 400, False))])
    assert carrier.calls == [
        ("rewrite", 2, [(b"content-type", b"text/plain"), (b"content-length", b"20")], memo)
    ]
    made2, carrier2, memo2 = _forwarded(RES_WAF)
    made2.responses([(3, 7, 200, TEXT, memo2, None)])
    carrier2.calls.clear()
    leak = b"You have an error in your SQL syntax; check the manual that corresponds to your"
    made2.responses([(3, 7, 200, TEXT, memo2, (leak, True))])
    ((kind, ticket, status, head, body, close),) = carrier2.calls
    assert (kind, ticket, close) == ("respond", 3, True) and status >= 400


def test_a_bodiless_response_is_never_read_for_the_body_actions():
    """A 204's, a 304's or a HEAD's answer: nothing read, the head goes on as the phase left
    it (no body of Python's: find-replace has nothing to rewrite, the checks pass on none)."""
    both = {
        "on_http_response": [
            {
                "actions": RES_FIND_REPLACE["on_http_response"][0]["actions"]
                + RES_WAF["on_http_response"][0]["actions"]
            }
        ]
    }
    made, carrier, memo = _forwarded(both)
    made.responses([(2, 7, 204, [], memo, None)])
    made.responses([(3, 7, 304, [(b"etag", b"x")], memo, None)])
    assert carrier.calls == [("rewrite", 2, [], memo), ("rewrite", 3, [(b"etag", b"x")], memo)]
    made, carrier, _, _ = _decider(both)
    _decide(made, [_row(1, method=b"HEAD")])
    memo = carrier.calls[0][3]
    carrier.calls.clear()
    made.responses([(4, 7, 200, TEXT, memo, None)])
    assert carrier.calls == [("rewrite", 4, [(n.lower(), v) for n, v in TEXT], memo)]


class _Breaker:
    def __init__(self):
        self.statuses = []

    def record(self, status, *when):
        self.statuses.append(status)


@pytest.mark.parametrize("doc, read", [("replace", (b"s" * 11, False)), ("waf", None)])
def test_an_answer_after_the_body_read_counts_the_agents_status_not_the_edges(doc, read):
    """edge/public.py counts the agent's status in the request's breakers when the head comes
    (before the body is held): an answer the edge makes after the body was read (the 502 for
    a body too large, the OWASP rules' 403) is counted as the agent's status, and its record
    counts in no breaker."""
    leak = b"You have an error in your SQL syntax; check the manual that corresponds to your"
    made, carrier, memo = _forwarded(RES_FIND_REPLACE if doc == "replace" else RES_WAF)
    action, endpoint = _Breaker(), _Breaker()
    memo.breakers, memo.upstream_breaker = [(action, lambda: 0.0)], endpoint
    made.responses([(2, 7, 200, TEXT, memo, None)])
    carrier.calls.clear()
    made.responses([(2, 7, 200, TEXT, memo, read or (leak, True))])
    ((kind, _, status, _, _, _),) = carrier.calls
    assert kind == "respond" and status in (403, 502)
    assert (action.statuses, endpoint.statuses) == ([200], [200])
    (answered,) = carrier.memos
    assert (answered.breakers, answered.upstream_breaker) == ([], None)


def test_a_route_that_reads_response_bodies_is_the_python_paths_on_an_http2_stream(
    monkeypatch,
):
    """Its streams would each hold a body while the caps count one connection: a request of
    such a route that came on an HTTP/2 stream is handed to the Python path before its policy
    runs (the Python path runs it: a rate limit is counted once); on HTTP/1.1, or with a
    response phase that reads only the head, it goes on."""
    for doc, multiplexed, kind in (
        (RES_FIND_REPLACE, True, "python"),
        (RES_WAF, True, "python"),
        (RES_FIND_REPLACE, False, "append"),
        (_res({"type": "compress-response"}), True, "append"),
    ):
        made, carrier, tunnel, _ = _decider(doc)

        def never(*args):
            raise AssertionError("the request phase ran")

        with monkeypatch.context() as patched:  # (a compiled policy is shared: undone after)
            if kind == "python":
                patched.setattr(policy_of(tunnel), "on_http_request", never)
            _decide(made, [_row(1, multiplexed=multiplexed)])
        assert carrier.calls[0][0] == kind, (doc, multiplexed)
        assert made.handed == (kind == "python")


def test_a_forward_internal_to_a_body_reading_endpoint_is_the_python_paths_on_http2(core):
    """The internal endpoint's policy reads the response's body: on an HTTP/2 stream the
    request goes to the Python path there (which runs it again); on HTTP/1.1 it goes on."""
    made, carrier, _, _ = _decider(_req(FORWARD))
    made.edge.router.here[INTERNAL] = _internal(core, RES_FIND_REPLACE)
    _decide(made, [_row(1, multiplexed=True), _row(2)])
    assert [c[:2] for c in carrier.calls] == [("python", 1), ("internal", 2)]
    assert carrier.calls[1][6]["responses"] is True


# ---- the response phase's outbound calls ---------------------------------------------------
CALLED = {
    "on_http_response": [
        {
            "actions": [
                {"type": "http-request", "config": {"url": "https://lookup.internal/"}},
                {
                    "type": "add-headers",
                    "config": {
                        "headers": {
                            "x-lookup": "${actions.ngrok.http_request.res.status_code}",
                        }
                    },
                },
            ]
        }
    ]
}


def _responses_in_task(made, rows):
    """``made.responses(rows)`` on an event loop, and the tasks it started run to their end:
    the decisions, flushes left out."""
    calls = made.edge.carrier.calls

    async def run():
        made.responses(rows)
        for _ in range(100):
            if not _deciding():
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    return [c for c in calls if c[0] != "flush"], calls.count(("flush",))


def test_a_response_phases_call_is_awaited_and_the_phase_goes_on_with_its_answer(monkeypatch):
    """http-request in the response phase: the call awaited in a task (as edge/http_policy.py's
    response_phase awaits it), the phase resumed with its answer, the head rewritten; the
    decision flushed by the task."""
    made, carrier, memo = _forwarded(CALLED)
    asked = []

    async def perform(edge, account_id, call):
        asked.append(call.url)
        return {"res": {"status_code": 204}}, False

    monkeypatch.setattr(decided.http_request, "perform", perform)
    decisions, flushes = _responses_in_task(made, [(2, 7, 200, TEXT, memo, None)])
    assert asked == ["https://lookup.internal/"] and flushes == 1
    assert decisions == [
        (
            "rewrite",
            2,
            [(b"content-type", b"text/plain"), (b"content-length", b"20"), (b"x-lookup", b"204")],
            memo,
        )
    ]


def test_a_response_phases_call_past_the_cores_wait_closes_its_ticket(monkeypatch):
    made, carrier, memo = _forwarded(CALLED)

    async def forever(*args, **kwargs):
        await asyncio.sleep(3600)

    monkeypatch.setattr(decided, "DECIDE_SECONDS", 0.2)
    monkeypatch.setattr(decided.http_request, "perform", forever)
    decisions, flushes = _responses_in_task(made, [(2, 7, 200, TEXT, memo, None)])
    assert decisions == [("close", 2)] and flushes == 1


# ---- server-sent events: on_event_stream_message --------------------------------------------
EVENTS = {
    "on_event_stream_message": [
        {
            "actions": [
                {
                    "type": "sse-find-replace",
                    "config": {
                        "replacements": [
                            {"field": "data", "from": "(\\d{4})-(\\d{4})", "to": "XXXX-$2"}
                        ]
                    },
                }
            ]
        }
    ]
}
STREAM = [(b"Content-Type", b"text/event-stream"), (b"Content-Length", b"60")]


def test_an_event_stream_policy_is_decided_with_its_response_heads():
    policy = compile_policy(EVENTS)
    assert decidable(policy) and mode_of(policy) == decided.RESPONSES
    with_body = {**EVENTS, **RES_FIND_REPLACE}  # (the events rewritten before the body read)
    assert not decidable(compile_policy(with_body))


def test_an_event_streams_messages_are_rewritten_piece_by_piece_as_they_complete():
    """The head goes on without its Content-Length (chunked: the messages change size); each
    piece the core hands back is answered with the messages it completed, rewritten (none
    yet: nothing); at the body's end, what the stream ended with, run as a message too."""
    made, carrier, memo = _forwarded(EVENTS)
    made.responses([(2, 7, 200, STREAM, memo, None)])
    assert carrier.calls == [("events", 2, [(b"content-type", b"text/event-stream")], memo)]
    carrier.calls.clear()
    for piece, complete in (
        (b"data: card 1234-", False),
        (b"5678\n\ndata: 9999-0000", False),
        (b"", True),
    ):
        made.responses([(2, 7, 200, [], memo, (piece, complete))])
    bodies = [c[2] for c in carrier.calls if c[0] == "rewritten body"]
    assert bodies == [b"", b"data: card XXXX-5678\n\n", b"data: XXXX-0000\n\n"]
    assert [c[:3] for c in carrier.calls if c[0] == "rewrite"] == [("rewrite", 2, [])] * 3
    assert memo.sse is None  # done with


def test_a_response_that_is_not_an_event_stream_goes_on_as_it_came():
    made, carrier, memo = _forwarded(EVENTS)
    made.responses([(2, 7, 200, TEXT, memo, None), (3, 7, 204, STREAM, memo, None)])
    assert [c[:3] for c in carrier.calls] == [
        ("rewrite", 2, [(n.lower(), v) for n, v in TEXT]),
        ("rewrite", 3, [(n.lower(), v) for n, v in STREAM]),  # no body: nothing to rewrite
    ]


@pytest.mark.parametrize("change", ["remove", "add"])
def test_an_event_stream_is_known_by_the_agents_head_whatever_the_phase_does(change):
    """As edge/http_policy.py's response_phase knows it: a phase that drops the Content-Type
    still has the events rewritten (never passed on unredacted), and one that sets it on
    another response has nothing rewritten."""
    header = (
        {"type": "remove-headers", "config": {"headers": ["content-type"]}}
        if change == "remove"
        else {"type": "add-headers", "config": {"headers": {"content-type": "text/event-stream"}}}
    )
    doc = {**EVENTS, "on_http_response": [{"actions": [header]}]}
    made, carrier, memo = _forwarded(doc)
    made.responses([(2, 7, 200, STREAM if change == "remove" else TEXT, memo, None)])
    ((kind, ticket, *_),) = carrier.calls
    assert (kind, ticket) == ("events" if change == "remove" else "rewrite", 2)
    assert (memo.sse is not None) is (change == "remove")


def test_a_message_past_its_bound_cuts_the_event_stream():
    from chalicelib.core.policy import sse

    made, carrier, memo = _forwarded(EVENTS)
    made.responses([(2, 7, 200, STREAM, memo, None)])
    carrier.calls.clear()
    past = b"data: " + b"s" * sse.MAX_EVENT  # no blank line yet, and already too long
    made.responses([(2, 7, 200, [], memo, (past, False))])
    assert carrier.calls == [("close", 2)] and memo.sse is None


def test_the_messages_of_one_piece_rewritten_past_their_bound_cut_the_stream(monkeypatch):
    """Each message is bounded (sse.MAX_EVENT), but one read may complete thousands of small
    ones, each grown by a rule: past sse.MAX_FED bytes rewritten, the response is cut (on the
    Python path too: the same rewriter), nothing of it sent; at the bound, it goes on. (The
    bound made 100 KB here: 4 MiB of RE2 rewriting takes most of a minute.)"""
    from chalicelib.core.policy import sse

    monkeypatch.setattr(sse, "MAX_FED", 100_000)
    grow = {
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "s", "to": "$0" * 100}]},
                    }
                ]
            }
        ]
    }
    message = b"data: " + b"s" * 100 + b"\n\n"  # 10,000 s and 8 bytes more once rewritten
    rewritten = 6 + 100 * 100 + 2
    fits = sse.MAX_FED // rewritten
    for count, cut in ((fits, False), (fits + 1, True)):
        made, carrier, memo = _forwarded(grow)
        made.responses([(2, 7, 200, STREAM, memo, None)])
        carrier.calls.clear()
        made.responses([(2, 7, 200, [], memo, (message * count, False))])
        if cut:
            assert carrier.calls == [("close", 2)] and memo.sse is None
        else:
            ((_, _, body),) = [c for c in carrier.calls if c[0] == "rewritten body"]
            assert len(body) == fits * rewritten <= sse.MAX_FED
