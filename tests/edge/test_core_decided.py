"""Decided routes (edge/decided.py, edge_core/src/decide.rs), through the official Python SDK as
a process: an endpoint whose traffic policy needs only the request's head has its requests
carried by the compiled core, each decided by the policy's request phase in Python first; what
the policy changed reaches the agent, what it answers reaches the client, and each request is
counted as the core's and recorded as the Python path records it."""

import json
import socket
import ssl
import time
import uuid

import pytest
import requests

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, settled, wait

HEADERS = {
    "on_http_request": [
        {
            "name": f"r{i}",
            "expressions": [
                f"req.url.path.startsWith('/echo') && !('x-block-{i}' in req.headers)"
            ],
            "actions": [
                {
                    "type": "add-headers",
                    "config": {"headers": {f"x-rule-{i}": "${conn.client_ip}"}},
                }
            ],
        }
        for i in range(5)
    ]
    + [
        {
            "expressions": ["req.url.path == '/fixed'"],
            "actions": [
                {
                    "type": "custom-response",
                    "config": {
                        "status_code": 418,
                        "body": "tea ${req.method}",
                        "headers": {"x-fixed": "1"},
                    },
                }
            ],
        },
        {"expressions": ["req.url.path == '/deny'"], "actions": [{"type": "deny"}]},
        {"expressions": ["req.url.path == '/close'"], "actions": [{"type": "close-connection"}]},
        {
            "expressions": ["req.url.path.startsWith('/old/')"],
            "actions": [
                {"type": "url-rewrite", "config": {"from": "/old/(.*)", "to": "/echo/$1"}}
            ],
        },
        {
            "expressions": ["req.url.path == '/broken'"],
            "actions": [{"type": "remove-headers", "config": {"headers": ["host"]}}],
        },
        {
            "expressions": ["req.url.path == '/tls'"],
            "actions": [
                {
                    "type": "custom-response",
                    "config": {"status_code": 200, "body": "${conn.tls.version} ${conn.tls.sni}"},
                }
            ],
        },
    ]
}
RESPONSES = {
    "on_http_request": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"x-asked": "1"}}}]}
    ],
    "on_http_response": [
        {
            "expressions": ["res.status_code == 200"],
            "actions": [
                {"type": "add-headers", "config": {"headers": {"x-answered": "${req.url.path}"}}},
                {"type": "remove-headers", "config": {"headers": ["content-type"]}},
            ],
        },
        {
            "expressions": ["res.status_code == 404"],
            "actions": [
                {"type": "custom-response", "config": {"status_code": 410, "body": "gone"}}
            ],
        },
    ],
}
AUTH = {
    "on_http_request": [
        {"actions": [{"type": "basic-auth", "config": {"credentials": ["ann:pass-word-1"]}}]}
    ]
}


def _counts(edge):
    """(requests the core served, connections it handed over, requests decided: by Python,
    or by a decision Python made for an earlier request with the same facts, held)."""
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
        metric(text, "edge_core_http_decided_total") + metric(text, "edge_core_http_held_total"),
    )


def _settled(edge):
    """The counts once the last exchange is counted."""
    return settled(lambda: _counts(edge))


@pytest.fixture(scope="module")
def decided(edge, api):
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [
            {"proto": "http", "options": {"traffic_policy": [json.dumps(HEADERS)]}},
            {"proto": "http", "options": {"traffic_policy": [json.dumps(AUTH)]}},
            {"proto": "http", "options": {"traffic_policy": [json.dumps(RESPONSES)]}},
        ],
    )
    urls = bound(agent.start())
    hosts = [host_of(u["url"]) for u in urls]
    assert wait(lambda: metric(edge.metrics(), "edge_core_http_routes") >= 3)
    yield hosts
    agent.stop()


def _read_all(sock):
    """What ``sock`` reads until the edge closes it."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def _url(edge, path):
    return f"http://127.0.0.1:{edge.http_port}{path}"


def _until_decided(edge, host):
    def decided_one():
        before = _settled(edge)[2]
        assert requests.get(_url(edge, "/echo"), headers={"Host": host}, timeout=10).ok
        return _settled(edge)[2] > before

    assert wait(decided_one)


def test_a_decided_routes_requests_are_carried_by_the_core_with_the_policys_headers(edge, decided):
    host = decided[0]
    _until_decided(edge, host)
    served, handed, made = _settled(edge)
    with requests.Session() as session:
        for i in range(10):
            resp = session.get(
                _url(edge, f"/echo?i={i}"),
                headers={"Host": host, "X-Forwarded-For": "203.0.113.9", "x-block-3": "y"},
                timeout=10,
            )
            assert resp.status_code == 200
            seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
            assert resp.json()["path"] == f"/echo?i={i}"
            assert [seen.get(f"x-rule-{r}") for r in range(5)] == ["127.0.0.1"] * 3 + [
                None,
                "127.0.0.1",
            ]
            assert seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
            assert (seen["x-forwarded-proto"], seen["x-forwarded-host"]) == ("http", host)
    # all ten carried by the core and decided by Python, none handed over
    after = _settled(edge)
    assert (after[0] - served, after[1] - handed, after[2] - made) == (10, 0, 10)


def test_a_rewritten_target_reaches_the_agent(edge, decided):
    resp = requests.get(_url(edge, "/old/a/b?q=1"), headers={"Host": decided[0]}, timeout=10)
    assert resp.status_code == 200 and resp.json()["path"] == "/echo/a/b?q=1"


def test_the_policys_answers_are_the_cores_and_keep_the_connection(edge, decided):
    host = decided[0]
    _until_decided(edge, host)
    served, handed, _ = _settled(edge)
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(
            f"GET /fixed HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"HEAD /fixed HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"GET /deny HTTP/1.1\r\nHost: {host}\r\n\r\n"
            f"GET /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        got = _read_all(raw)
    answers = got.split(b"HTTP/1.1 ")[1:]
    assert [a.split(b" ", 1)[0] for a in answers] == [b"418", b"418", b"403", b"200"], got
    assert answers[0].endswith(b"\r\n\r\ntea GET") and b"x-fixed: 1\r\n" in answers[0].lower()
    assert answers[1].endswith(b"\r\n\r\n"), "no body to a HEAD"
    assert _settled(edge)[:2] == (served + 4, handed)


def test_an_answer_to_a_request_with_a_body_closes_the_connection(edge, decided):
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(
            f"POST /deny HTTP/1.1\r\nHost: {decided[0]}\r\nContent-Length: 5\r\n\r\nhello".encode()
        )
        got = _read_all(raw)
    assert got.startswith(b"HTTP/1.1 403 ") and b"\r\nconnection: close\r\n" in got.lower()


def test_close_connection_closes_without_an_answer(edge, decided):
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(f"GET /close HTTP/1.1\r\nHost: {decided[0]}\r\n\r\n".encode())
        assert raw.recv(65536) == b""


def test_a_request_the_policy_made_invalid_is_answered_err_ngrok_2300(edge, decided):
    resp = requests.get(_url(edge, "/broken"), headers={"Host": decided[0]}, timeout=10)
    assert resp.status_code == 502 and resp.json()["error_code"] == "ERR_NGROK_2300"


def test_basic_auth_is_decided_per_request(edge, decided):
    host = decided[1]
    _until_decided_auth = lambda: requests.get(  # noqa: E731
        _url(edge, "/echo"), headers={"Host": host}, auth=("ann", "pass-word-1"), timeout=10
    ).ok
    assert wait(_until_decided_auth)
    made = _settled(edge)[2]
    refused = requests.get(_url(edge, "/echo"), headers={"Host": host}, timeout=10)
    assert refused.status_code == 401 and "basic" in refused.headers["www-authenticate"].lower()
    wrong = requests.get(
        _url(edge, "/echo"), headers={"Host": host}, auth=("ann", "nope"), timeout=10
    )
    assert wrong.status_code == 401
    ok = requests.get(
        _url(edge, "/echo"), headers={"Host": host}, auth=("ann", "pass-word-1"), timeout=10
    )
    assert ok.status_code == 200 and ok.json()["path"] == "/echo"
    assert _settled(edge)[2] - made == 3


def test_the_decided_requests_are_in_the_request_metrics_and_policy_decisions(edge, decided):
    def counted():
        text = edge.metrics()
        return (
            metric(text, "edge_http_requests_total", status_class="4xx", endpoint_kind="agent"),
            metric(text, "edge_policy_decisions_total"),
        )

    before = counted()
    for _ in range(3):
        assert (
            requests.get(_url(edge, "/deny"), headers={"Host": decided[0]}, timeout=10).status_code
            == 403
        )
    assert wait(lambda: counted()[0] - before[0] >= 3)


def test_tls_facts_reach_the_policy_on_the_https_listener(edge, decided):
    host = decided[0]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])

    def ask():
        with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(
                    f"GET /tls HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
                )
                return _read_all(tls)

    assert wait(lambda: ask().endswith(f"\r\n\r\n1.3 {host}".encode()))
    made = _settled(edge)[2]
    assert ask().endswith(f"\r\n\r\n1.3 {host}".encode())
    assert _settled(edge)[2] - made == 1  # decided: the core terminated the TLS


def test_a_response_phase_rewrites_the_head_the_core_relays(edge, decided):
    host = decided[2]
    _until_decided(edge, host)
    served, handed, made = _settled(edge)
    with requests.Session() as session:
        for i in range(3):
            resp = session.get(_url(edge, f"/echo?i={i}"), headers={"Host": host}, timeout=10)
            assert resp.status_code == 200 and resp.headers["x-answered"] == "/echo"
            assert "content-type" not in resp.headers  # removed by the response phase
            seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
            assert seen["x-asked"] == "1"  # the request phase's change reached the agent
    after = _settled(edge)
    assert (after[0] - served, after[1] - handed, after[2] - made) == (3, 0, 3)


def test_a_response_phase_answer_replaces_the_agents_and_closes(edge, decided):
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(f"GET /status/404 HTTP/1.1\r\nHost: {decided[2]}\r\n\r\n".encode())
        got = _read_all(raw)
    assert got.startswith(b"HTTP/1.1 410 ") and got.endswith(b"\r\n\r\ngone"), got
    assert b"connection: close\r\n" in got.lower()


HELD = {
    "on_http_request": [
        {"expressions": ["req.url.path == '/deny'"], "actions": [{"type": "deny"}]},
        {
            "expressions": ["!('x-skip' in req.headers)"],
            "actions": [
                {"type": "restrict-ips", "config": {"allow": ["127.0.0.0/8"]}},
                {"type": "add-headers", "config": {"headers": {"x-path": "${req.url.path}"}}},
            ],
        },
    ]
}
# (path, headers, what the agent sees as x-path or the status the policy answers)
VARIANTS = [
    ("/echo", {}, "/echo"),
    ("/echo/2", {"x-other": "not read"}, "/echo/2"),
    ("/deny", {}, 403),
    ("/echo", {"x-skip": "1"}, None),
]


def test_a_quiet_routes_decisions_are_held_for_the_facts_its_policy_reads(edge, api):
    """Past the inspector's window a route is quiet (no record wanted of its requests) and
    the core holds the decisions Python made with the facts the policy reads (the path, the
    x-skip field, the client's address): each request still gets the decision of its own
    facts, most without asking Python, and every request's policy decisions are counted."""
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(HELD)]}}],
    )
    host = host_of(bound(agent.start())[0]["url"])
    try:
        _until_decided(edge, host)

        def counted():
            text = edge.metrics()
            return (
                metric(text, "edge_core_http_held_total"),
                metric(text, "edge_policy_decisions_total", action="restrict_ips"),
                metric(text, "edge_core_http_decided_total"),
            )

        time.sleep(1.5)  # the first requests' counts are in
        held_before, restricted_before, decided_before = counted()
        rounds, seen_held = 100, 0.0
        with requests.Session() as session:
            for i in range(rounds):
                for path, headers, want in VARIANTS:
                    resp = session.get(
                        _url(edge, path), headers={"Host": host, **headers}, timeout=10
                    )
                    if want == 403:
                        assert resp.status_code == 403, (i, path)
                        continue
                    assert resp.status_code == 200, (i, path, resp.text)
                    seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
                    assert seen.get("x-path") == want, (i, path, headers, seen)
                if i % 25 == 24:
                    seen_held = max(seen_held, counted()[0] - held_before)
        assert seen_held > 0, "no decision was held"

        def settled():
            held, restricted, decided = counted()
            return (held - held_before) + (decided - decided_before) == rounds * len(VARIANTS)

        assert wait(settled), counted()
        time.sleep(1.5)  # the quiet route's last tally is taken
        held, restricted, decided = counted()
        # how many were held depends on the machine's pace (the inspector's window first,
        # then each key asked about again once a second): some were, and none twice counted
        assert held - held_before > 0
        # restrict-ips ran for the two /echo variants of each round, held or not
        assert restricted - restricted_before == 2 * rounds
    finally:
        agent.stop()


BREAKER = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "circuit-breaker",
                    "config": {"volume_threshold": 4, "error_threshold": 0.5},
                }
            ]
        }
    ]
}


@pytest.mark.parametrize(
    "options",
    [{"traffic_policy": [json.dumps(BREAKER)]}, {"circuit_breaker": [0.5]}],
    ids=["action", "bind-option"],
)
def test_a_circuit_breaker_is_decided_and_counts_the_answers_the_core_relays(edge, api, options):
    """The circuit-breaker action, and the endpoint's own breaker (its Bind option): the route
    is decided (each request asks whether a breaker is tripped), the agent's 5xx answers the
    core relays trip it, and its 503 ERR_NGROK_3202 is then the core's answer: nothing
    handed to Python throughout."""
    agent = SdkAgent(
        edge, credential(api.new_account())["token"], [{"proto": "http", "options": options}]
    )
    host = host_of(bound(agent.start())[0]["url"])
    try:
        _until_decided(edge, host)
        served, handed, _ = _settled(edge)
        sent, answers = 0, []
        for _ in range(40):  # errors until it trips (the window: 10 s, volume 4 or 10)
            got = requests.get(_url(edge, "/status/500"), headers={"Host": host}, timeout=10)
            sent += 1
            answers.append(got.status_code)
            if got.status_code == 503:
                assert got.headers["ngrok-error-code"] == "ERR_NGROK_3202", got.text
                break
        assert answers[-1] == 503 and set(answers[:-1]) == {500}, answers
        tripped = requests.get(_url(edge, "/echo"), headers={"Host": host}, timeout=10)
        assert tripped.status_code == 503  # not forwarded while tripped
        after = _settled(edge)
        assert (after[0] - served, after[1] - handed) == (sent + 1, 0)
    finally:
        agent.stop()


def test_a_forward_internal_is_carried_by_the_core_to_the_internal_agents_session(edge, api):
    """An endpoint whose policy forwards to an internal endpoint of another agent of its
    account: each request decided by both policies in Python (the forwarding one's header, the
    internal one's), then carried by the core on the internal agent's session; nothing handed
    over. With that agent gone, the forward finds nothing: 502 ERR_NGROK_3200, Python's
    decision. The forwarding agent's own upstream is dead: an answer of the echo came through
    the internal agent."""
    token = credential(api.new_account())["token"]
    name = f"svc-{uuid.uuid4().hex[:10]}.internal"
    inner = {
        "on_http_request": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"x-inner": "1"}}}]}
        ]
    }
    internal = SdkAgent(
        edge,
        token,
        [{"proto": "http", "domain": name, "options": {"traffic_policy": [json.dumps(inner)]}}],
    )
    assert host_of(bound(internal.start())[0]["url"]) == name
    outer = {
        "on_http_request": [
            {
                "actions": [
                    {"type": "add-headers", "config": {"headers": {"x-outer": "${req.url.path}"}}},
                    {"type": "forward-internal", "config": {"url": f"https://{name}"}},
                ]
            }
        ]
    }
    forwarding = SdkAgent(
        edge,
        token,
        [
            {
                "proto": "http",
                "upstream": "dead",  # its own agent would answer 502
                "options": {"traffic_policy": [json.dumps(outer)]},
            }
        ],
    )
    try:
        host = host_of(bound(forwarding.start())[0]["url"])
        _until_decided(edge, host)
        served, handed, made = _settled(edge)
        with requests.Session() as session:
            for i in range(5):
                got = session.get(_url(edge, f"/echo/{i}"), headers={"Host": host}, timeout=10)
                assert got.status_code == 200, got.text
                seen = {k.lower(): v for k, v in got.json()["headers"].items()}
                assert (seen["x-outer"], seen["x-inner"]) == (f"/echo/{i}", "1")
                assert seen["x-forwarded-host"] == host
        after = _settled(edge)
        assert (after[0] - served, after[1] - handed, after[2] - made) == (5, 0, 5)

        internal.stop()
        gone = []

        def offline_as_decided():
            # while the session is closing, a request Python routed to it can find it ended at
            # the core's open and be handed back (Python answers it): once the endpoint is out
            # of the registry, the forward finds nothing and the core answers, nothing handed
            before = _settled(edge)[1]
            got = requests.get(_url(edge, "/echo"), headers={"Host": host}, timeout=10)
            gone[:] = [got]
            return (
                got.status_code == 502
                and got.headers.get("ngrok-error-code") == "ERR_NGROK_3200"
                and _settled(edge)[1] == before
            )

        assert wait(offline_as_decided), (gone[0].status_code, gone[0].text)
        assert f"{name} is offline" in gone[0].text
    finally:
        forwarding.stop()
        internal.stop()
