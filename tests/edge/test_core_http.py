"""The public plain-HTTP listener's fast path in the compiled core (edge/fast_path.py,
edge_core/src/public.rs), through the official Python SDK as a process: a plain route's
requests are served by the core and recorded; a route with a traffic policy, and requests the
core does not carry, go to Python as before; a route's end is answered as Python answers it."""

import base64
import hashlib
import json
import os
import socket
import time

import pytest
import requests

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, settled, wait


def _served(edge) -> float:
    """Requests the core served, once the last exchange is counted."""
    return settled(lambda: metric(edge.metrics(), "edge_core_http_requests_total"))


def _handed(edge) -> float:
    return metric(edge.metrics(), "edge_core_http_handed_over_total")


def _get(edge, host, path, **kwargs):
    headers = {"Host": host, **kwargs.pop("headers", {})}
    return requests.request(
        kwargs.pop("method", "GET"),
        f"http://127.0.0.1:{edge.http_port}{path}",
        headers=headers,
        timeout=10,
        **kwargs,
    )


@pytest.fixture(scope="module")
def plain(edge, api):
    """An endpoint with no policy or options: a plain route once the core has it."""
    agent = SdkAgent(edge, credential(api.new_account())["token"], [{"proto": "http"}])
    host = host_of(bound(agent.start())[0]["url"])
    assert wait(lambda: metric(edge.metrics(), "edge_core_http_routes") >= 1)
    yield host
    agent.stop()


def _until_core_serves(edge, host):
    """The route is pushed a moment after the bind: wait until a request is the core's."""

    def served_one():
        before = _served(edge)
        assert _get(edge, host, "/echo").status_code == 200
        return _served(edge) > before

    assert wait(served_one)


def test_a_plain_routes_requests_are_served_by_the_core_with_forwarded_headers(edge, plain):
    _until_core_serves(edge, plain)
    served, handed = _served(edge), _handed(edge)
    with requests.Session() as session:
        for i in range(10):
            resp = session.get(
                f"http://127.0.0.1:{edge.http_port}/echo?i={i}",
                headers={"Host": plain, "X-Forwarded-For": "203.0.113.9"},
                timeout=10,
            )
            assert resp.status_code == 200
            seen = resp.json()
            assert seen["path"] == f"/echo?i={i}"
            headers = {k.lower(): v for k, v in seen["headers"].items()}
            assert headers["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
            assert headers["x-forwarded-proto"] == "http"
            assert headers["x-forwarded-host"] == plain
    # all ten the core's, none handed to Python (both in one message: a miscount says which)
    assert (_served(edge) - served, _handed(edge) - handed) == (10, 0)


def test_the_cores_requests_are_recorded_in_the_request_metrics(edge, plain):
    _until_core_serves(edge, plain)

    def ok_agent_requests():
        return metric(
            edge.metrics(), "edge_http_requests_total", status_class="2xx", endpoint_kind="agent"
        )

    before = ok_agent_requests()
    for _ in range(5):
        assert _get(edge, plain, "/echo").status_code == 200
    assert wait(lambda: ok_agent_requests() - before >= 5)


def test_a_route_nothing_is_wanted_of_is_quiet_and_every_request_still_counted(edge, api):
    """Past the inspector's window (120 a minute per endpoint) and with no subscription, a
    route's requests are counted by the core (a quiet route: no row, no wake-up per
    request) and taken each second: the request metrics count every one, and the
    inspector's drops every one it refused."""
    agent = SdkAgent(edge, credential(api.new_account())["token"], [{"proto": "http"}])
    host = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, host)

        def counted():
            text = edge.metrics()
            return (
                metric(text, "edge_http_requests_total", endpoint_kind="agent"),
                metric(text, "edge_inspector_dropped_total", reason="rate"),
            )

        time.sleep(1.5)  # the first request's record and counts are in
        requests_before, dropped_before = counted()
        n, quiet_seen = 400, 0.0
        with requests.Session() as session:
            for i in range(n):
                resp = session.get(
                    f"http://127.0.0.1:{edge.http_port}/echo", headers={"Host": host}, timeout=10
                )
                assert resp.status_code == 200
                if i % 50 == 49:
                    quiet_seen = max(quiet_seen, metric(edge.metrics(), "edge_core_quiet_routes"))
        assert quiet_seen >= 1, "the route was never quiet"
        assert wait(lambda: counted()[0] - requests_before == n)
        time.sleep(1.5)  # nothing more comes
        requests_after, dropped_after = counted()
        assert requests_after - requests_before == n
        # the window had room for 120, less the few requests that found the route the core's
        # (each admitted), or up to 120 more if a minute turned over
        assert n - 240 <= dropped_after - dropped_before <= n - 120 + 10
    finally:
        agent.stop()


def test_bodies_both_ways_through_the_core(edge, plain):
    _until_core_serves(edge, plain)
    before = _served(edge)
    body = bytes(range(256)) * 4096  # 1 MiB: past the fresh-stream bound, many windows
    resp = _get(edge, plain, "/upload", method="POST", data=body)
    assert resp.status_code == 200, resp.text
    streamed = _get(edge, plain, "/stream")  # a chunked response, written in pieces
    assert streamed.status_code == 200 and streamed.content
    head = _get(edge, plain, "/echo", method="HEAD")
    assert head.status_code == 200 and head.content == b""
    assert _served(edge) - before == 3


def test_a_chunked_request_body_is_the_cores_too(edge, plain):
    _until_core_serves(edge, plain)
    served, handed = _served(edge), _handed(edge)
    pieces = [b"a" * 10, b"b" * 70000, b"c"]  # one piece past a read of the core's
    chunked = _get(edge, plain, "/upload", method="POST", data=iter(pieces))
    assert chunked.status_code == 200, chunked.text
    body = b"".join(pieces)
    assert chunked.json() == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    assert (_served(edge) - served, _handed(edge) - handed) == (1, 0)


def test_what_the_core_does_not_carry_goes_to_python(edge, plain):
    _until_core_serves(edge, plain)
    handed = _handed(edge)
    trace = _get(edge, plain, "/echo", method="TRACE")  # a method the core does not know
    assert trace.status_code != 0
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as sock:
        sock.sendall(b"GET /echo HTTP/1.0\r\nHost: " + plain.encode() + b"\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")  # HTTP/1.0: Python's
    assert _handed(edge) - handed >= 2


def test_an_upgrade_the_upstream_refuses_is_the_cores_and_ends_the_connection(edge, plain):
    """An upgrade is forwarded by the core (edge_core/src/public.rs); the upstream answers
    this one 200 (it does not speak h2c): relayed, then the connection ends, as Python's
    HTTP/1.1 ends it. Nothing goes to Python."""
    _until_core_serves(edge, plain)
    handed, served = _handed(edge), _served(edge)
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as sock:
        sock.sendall(
            b"GET /echo HTTP/1.1\r\nHost: " + plain.encode() + b"\r\nUpgrade: h2c\r\n"
            b"Connection: Upgrade\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):  # to the end: the edge closes it
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    assert b'"Upgrade": "h2c"' in answer  # forwarded as asked
    assert (_handed(edge), _served(edge)) == (handed, served + 1)


def test_a_websocket_is_switched_and_carried_by_the_core(edge, plain):
    """A WebSocket upgrade to the SDK's upstream (aiohttp's WebSocket echo): forwarded by the
    core, the 101 relayed and recorded, then the frames carried raw both ways by the core
    (counted as a carried connection); nothing goes to Python."""
    _until_core_serves(edge, plain)
    handed, served = _handed(edge), _served(edge)
    ended = metric(edge.metrics(), "edge_core_carried_connections_ended_total")
    key = base64.b64encode(os.urandom(16))
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as sock:
        sock.sendall(
            b"GET /ws HTTP/1.1\r\nHost: " + plain.encode() + b"\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: " + key + b"\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        payload, mask = b"over the core", os.urandom(4)
        sock.sendall(
            bytes([0x81, 0x80 | len(payload)])
            + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        )
        frame = head.split(b"\r\n\r\n", 1)[1]
        while len(frame) < 2 or len(frame) < 2 + frame[1]:
            frame += sock.recv(4096)
        assert frame[2 : 2 + frame[1]] == b"echo:over the core"
    assert (_handed(edge), _served(edge)) == (handed, served + 1)
    assert wait(
        lambda: metric(edge.metrics(), "edge_core_carried_connections_ended_total") > ended
    )


def test_a_bad_head_is_answered_by_python_as_before(edge, plain):
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: " + plain.encode() + b"\r\nBad Header\r\n\r\n")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"ERR_NGROK" in answer


def test_a_route_whose_traffic_policy_rewrites_events_goes_through_python(edge, api, plain):
    """A policy that rewrites server-sent events beside a response phase that reads the body
    (the events rewritten before the body is read) is not decidable (edge/decided.py): its
    route is the Python path's whole; one that needs only the heads and the bodies is the
    core's (tests/edge/test_core_decided.py)."""
    policy = {
        "on_http_response": [
            {
                "actions": [
                    {"type": "add-headers", "config": {"headers": {"x-policy": "ran"}}},
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    },
                ]
            }
        ],
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
    }
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}],
    )
    host = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, plain)  # the core serves plain routes meanwhile
        served = _served(edge)
        for _ in range(3):
            resp = _get(edge, host, "/echo")
            assert resp.status_code == 200
            assert resp.headers["x-policy"] == "ran"
        assert _served(edge) == served
    finally:
        agent.stop()


def test_a_removed_route_is_answered_as_python_answers_it(edge, api):
    agent = SdkAgent(edge, credential(api.new_account())["token"], [{"proto": "http"}])
    host = host_of(bound(agent.start())[0]["url"])
    _until_core_serves(edge, host)
    agent.stop()

    def offline():
        resp = _get(edge, host, "/echo")
        return resp.status_code in (404, 502) and resp.json()["error_code"] == "ERR_NGROK_3200"

    assert wait(offline)
    before = _served(edge)
    resp = _get(edge, host, "/echo")
    assert resp.json()["error_code"] == "ERR_NGROK_3200"
    assert _served(edge) == before  # no route left in the core


def test_an_idle_keep_alive_connection_the_core_holds_is_counted_and_released(edge, plain):
    _until_core_serves(edge, plain)
    held = metric(edge.metrics(), "edge_public_connections")
    sock = socket.create_connection(("127.0.0.1", edge.http_port), timeout=10)
    try:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: " + plain.encode() + b"\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert metric(edge.metrics(), "edge_public_connections") >= held + 1
    finally:
        sock.close()
    assert wait(lambda: metric(edge.metrics(), "edge_public_connections") <= held)
