"""HTTPS and TCP edges (/edges/https, /edges/tcp) carrying traffic: routes, route modules,
backends (tunnel group of SDK labeled tunnels, failover, weighted, HTTP response) through the
public listeners; changes through the API in force on the next request."""

import socket
import time

from tests.edge.conftest import BASE_DOMAIN, tcp_round_trip
from tests.edge.test_edge_sdk import _bound, _credential, _wait


def _post(account, path, body):
    resp = account.admin.post(path, body)
    assert resp.status == 201, resp
    return resp.json


def _https_edge(account, host, routes):
    edge = _post(account, "/edges/https", {"hostports": [f"{host}:443"]})
    for route in routes:
        _post(account, f"/edges/https/{edge['id']}/routes", route)
    return edge


def test_http_response_backend_is_served_with_no_agent_at_all(edge, account):
    host = f"fixed-{time.time_ns()}.{BASE_DOMAIN}"
    backend = _post(
        account,
        "/backends/http_response",
        {"status_code": 203, "body": "from the edge", "headers": {"x-fixed": "1"}},
    )
    _https_edge(
        account,
        host,
        [{"match_type": "path_prefix", "match": "/", "backend": {"backend_id": backend["id"]}}],
    )
    resp = edge.http("GET", host, "/anything")
    assert resp.status_code == 203 and resp.text == "from the edge"
    assert resp.headers["x-fixed"] == "1"
    done = edge.curl_https(host, "/x")
    assert done.stdout.rsplit("\n", 1) == ["from the edge", "203"], done.stderr


def test_an_http_response_backend_is_answered_on_the_cores_path(edge, account):
    """Once Python served a request of an HTTPS edge whose route answers from an
    http_response backend, the name is a route of the compiled core: each request routed and
    its answer made in Python (the route's response headers on it), written by the core,
    nothing handed over. A request's body is read and dropped first: read whole (up to
    1 MiB) the connection is kept, past that the answer closes it."""
    from tests.edge.support import carried_by_the_core, core_counts, settled
    from tests.edge.test_core_decided import _read_all

    host = f"corefixed-{time.time_ns()}.{BASE_DOMAIN}"
    backend = _post(
        account,
        "/backends/http_response",
        {"status_code": 203, "body": "fixed", "headers": {"x-fixed": "1"}},
    )
    _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/",
                "backend": {"backend_id": backend["id"]},
                "response_headers": {"add": {"x-route-resp": "1"}},
            }
        ],
    )

    def counts():
        return core_counts(edge)

    def carried():
        return carried_by_the_core(edge, lambda: edge.http("GET", host, "/").status_code == 203)

    assert _wait(carried, timeout=15), "the core never carried the edge's requests"
    served, handed = settled(counts)
    drain = 1 << 20
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(
            f"POST /a HTTP/1.1\r\nHost: {host}\r\nContent-Length: {drain}\r\n\r\n".encode()
            + b"x" * drain
            + f"HEAD /b HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            + f"GET /c HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        got = _read_all(raw)
    answers = got.split(b"HTTP/1.1 ")[1:]
    assert [a.split(b" ", 1)[0] for a in answers] == [b"203"] * 3, got
    first = answers[0].lower()
    assert first.endswith(b"\r\n\r\nfixed") and b"x-fixed: 1\r\n" in first, got
    assert b"x-route-resp: 1\r\n" in first and b"connection: close" not in first, got
    assert answers[1].endswith(b"\r\n\r\n"), "no body to a HEAD"
    assert settled(counts) == (served + 3, handed)
    # a byte past the bound: the answer closes the connection
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as raw:
        raw.sendall(
            f"POST /d HTTP/1.1\r\nHost: {host}\r\nContent-Length: {drain + 1}\r\n\r\n".encode()
            + b"x" * (drain + 1)
        )
        got = _read_all(raw)
    assert got.startswith(b"HTTP/1.1 203 ") and got.endswith(b"fixed"), got
    assert b"\r\nconnection: close\r\n" in got.lower(), got
    assert settled(counts) == (served + 4, handed)


def test_routes_match_exact_before_longest_prefix_and_unmatched_is_404(edge, account):
    host = f"routes-{time.time_ns()}.{BASE_DOMAIN}"
    ids = {}
    for name in ("exact", "short", "long"):
        ids[name] = _post(account, "/backends/http_response", {"body": name})["id"]
    _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/api",
                "backend": {"backend_id": ids["short"]},
            },
            {
                "match_type": "path_prefix",
                "match": "/api/v2",
                "backend": {"backend_id": ids["long"]},
            },
            {
                "match_type": "exact_path",
                "match": "/api/v2/x",
                "backend": {"backend_id": ids["exact"]},
            },
        ],
    )
    assert edge.http("GET", host, "/api/v2/x").text == "exact"
    assert edge.http("GET", host, "/api/v2/y").text == "long"
    assert edge.http("GET", host, "/api/v1").text == "short"
    missing = edge.http("GET", host, "/other")
    assert missing.status_code == 404 and missing.json()["status_code"] == 404


def test_tunnel_group_backend_routes_to_labeled_tunnels_with_route_modules(edge, account, agents):
    label = f"g{time.time_ns()}"
    host = f"group-{time.time_ns()}.{BASE_DOMAIN}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"app": label}})
    _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/",
                "backend": {"backend_id": group["id"]},
                "request_headers": {"add": {"x-from-route": "yes"}},
                "response_headers": {"add": {"x-route-resp": "1"}},
                "user_agent_filter": {"deny": ["(?i)badbot.*"]},
            }
        ],
    )
    offline = edge.http("GET", host, "/echo")
    assert offline.status_code == 502 and offline.json()["error_code"] == "ERR_NGROK_724"
    agent = agents(
        edge, _credential(account)["token"], [{"proto": "labeled", "labels": {"app": label}}]
    )
    _bound(agent.start())
    resp = _wait(
        lambda: (lambda r: r if r.status_code == 200 else None)(edge.http("GET", host, "/echo")),
        timeout=10,
    )
    assert resp, "the labeled tunnel never served"
    seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
    assert seen["x-from-route"] == "yes" and resp.headers["x-route-resp"] == "1"
    assert edge.http("GET", host, "/echo", headers={"User-Agent": "BadBot/1"}).status_code == 403


def test_failover_uses_the_next_backend_when_the_group_is_offline(edge, account):
    host = f"failover-{time.time_ns()}.{BASE_DOMAIN}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"nobody": "online"}})
    fallback = _post(account, "/backends/http_response", {"body": "fallback"})
    failover = _post(account, "/backends/failover", {"backends": [group["id"], fallback["id"]]})
    _https_edge(
        account,
        host,
        [{"match_type": "path_prefix", "match": "/", "backend": {"backend_id": failover["id"]}}],
    )
    assert edge.http("GET", host, "/").text == "fallback"


def test_ip_restriction_route_module_and_a_change_taking_effect(edge, account):
    host = f"ipr-{time.time_ns()}.{BASE_DOMAIN}"
    backend = _post(account, "/backends/http_response", {"body": "ok"})
    policy = _post(account, "/ip_policies", {})
    rule = _post(
        account,
        "/ip_policy_rules",
        {"ip_policy_id": policy["id"], "cidr": "127.0.0.0/8", "action": "deny"},
    )
    edge_obj = _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/",
                "backend": {"backend_id": backend["id"]},
                "ip_restriction": {"ip_policy_ids": [policy["id"]]},
            }
        ],
    )
    assert edge.http("GET", host, "/").status_code == 403
    assert account.admin.patch(f"/ip_policy_rules/{rule['id']}", {"action": "allow"}).status == 200
    assert _wait(lambda: edge.http("GET", host, "/").status_code == 200, timeout=3)
    assert edge_obj["id"]


def test_tcp_edge_carries_bytes_to_a_labeled_tunnel(edge, account, agents):
    label = f"t{time.time_ns()}"
    addr = _post(account, "/reserved_addrs", {})["addr"]
    group = _post(account, "/backends/tunnel_group", {"labels": {"tcp": label}})
    _post(account, "/edges/tcp", {"hostports": [addr], "backend": {"backend_id": group["id"]}})
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "labeled", "labels": {"tcp": label}, "upstream": "tcp"}],
    )
    _bound(agent.start())
    port = int(addr.rsplit(":", 1)[1])

    # the edge listens on a newly reserved port at its next read of the reservations
    # (EDGE_CHECK_SECONDS=1); a loaded machine (a suite of 5,000-connection tests before this
    # one) has been seen to need more than 10 s, so the wait is generous
    assert _wait(
        lambda: tcp_round_trip(port, b"through a tcp edge") == b"through a tcp edge", timeout=30
    ), edge.log()[-3000:]


def test_an_https_edges_requests_are_carried_by_the_core_routed_by_their_path(
    edge, account, agents
):
    """Once Python served a request of an HTTPS edge's hostname, the name is a route of the
    compiled core: each request routed by its path (the route's modules decided in Python:
    headers both ways, the user-agent filter) and carried to the labeled tunnel on the
    agent's session, nothing handed over."""
    from tests.edge.support import carried_by_the_core, core_counts, settled

    label = f"c{time.time_ns()}"
    host = f"coreedge-{time.time_ns()}.{BASE_DOMAIN}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"app": label}})
    _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/",
                "backend": {"backend_id": group["id"]},
                "request_headers": {"add": {"x-from-route": "yes"}},
                "response_headers": {"add": {"x-route-resp": "1"}},
                "user_agent_filter": {"deny": ["(?i)badbot.*"]},
            },
        ],
    )
    agent = agents(
        edge, _credential(account)["token"], [{"proto": "labeled", "labels": {"app": label}}]
    )
    _bound(agent.start())

    def counts():
        return core_counts(edge)

    def carried():
        return carried_by_the_core(
            edge, lambda: edge.http("GET", host, "/echo").status_code == 200
        )

    assert _wait(carried, timeout=15), "the core never carried the edge's requests"
    served, handed = settled(counts)
    for i in range(5):
        resp = edge.http("GET", host, f"/echo/{i}")
        assert resp.status_code == 200, resp.text
        seen = {k.lower(): v for k, v in resp.json()["headers"].items()}
        assert seen["x-from-route"] == "yes" and resp.headers["x-route-resp"] == "1"
    denied = edge.http("GET", host, "/echo", headers={"User-Agent": "BadBot/1"})
    assert denied.status_code == 403
    assert settled(counts) == (served + 6, handed)


def test_an_edge_routes_circuit_breaker_counts_every_answer_the_core_carries(
    edge, account, agents
):
    """The route of an edge the core carries is never quiet: its circuit breaker counts each
    answer from its record even once the inspector's window (120 records a minute) is full,
    which would otherwise make the core count the route's requests without their records."""
    label = f"cbq{time.time_ns()}"
    host = f"cbq-{time.time_ns()}.{BASE_DOMAIN}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"cbq": label}})
    _https_edge(
        account,
        host,
        [
            {
                "match_type": "path_prefix",
                "match": "/",
                "backend": {"backend_id": group["id"]},
                "circuit_breaker": {"error_threshold_percentage": 0.5, "volume_threshold": 5},
                "user_agent_filter": {"deny": ["(?i)badbot.*"]},
            }
        ],
    )
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "labeled", "labels": {"cbq": label}, "upstream": "dead"}],
    )
    _bound(agent.start())
    # the inspector's window used up by the route's own 403s (records of the edge)
    for _ in range(130):
        denied = edge.http("GET", host, "/", headers={"User-Agent": "BadBot/1"})
        assert denied.status_code == 403
    time.sleep(1.5)  # past the core's quiet check (QUIET_SECONDS)
    statuses = [edge.http("GET", host, "/").status_code for _ in range(30)]
    assert 503 in statuses, statuses  # the agent's 502s tripped it


def test_a_weighted_backends_shares_hold_on_an_edge(edge, account, agents):
    """Weighted 1:1 between a fixed answer and a tunnel group: each request drawn once, by
    the router in Python, and carried by the core whichever it drew (an edge the core cannot
    carry every pick of stays Python's, so no request is drawn twice)."""
    from tests.edge.support import metric, settled

    def handed():
        return metric(edge.metrics(), "edge_core_http_handed_over_total")

    label = f"wt{time.time_ns()}"
    host = f"wt-{time.time_ns()}.{BASE_DOMAIN}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"wt": label}})["id"]
    fixed = _post(account, "/backends/http_response", {"body": "fixed"})["id"]
    weighted = _post(account, "/backends/weighted", {"backends": {group: 1, fixed: 1}})["id"]
    _https_edge(
        account,
        host,
        [{"match_type": "path_prefix", "match": "/", "backend": {"backend_id": weighted}}],
    )
    agent = agents(
        edge, _credential(account)["token"], [{"proto": "labeled", "labels": {"wt": label}}]
    )
    _bound(agent.start())
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 200, timeout=10)

    def carried():
        before = settled(handed)
        texts = {edge.http("GET", host, "/echo").text == "fixed" for _ in range(10)}
        return texts == {True, False} and settled(handed) == before

    assert _wait(carried, timeout=15), "the core never carried the edge's requests"
    before = settled(handed)
    n = 300
    fixed_share = sum(edge.http("GET", host, "/echo").text == "fixed" for _ in range(n)) / n
    assert 0.35 < fixed_share < 0.65, fixed_share  # 50 %: 5 standard deviations either way
    assert settled(handed) == before, "a request handed to Python (drawn twice)"
