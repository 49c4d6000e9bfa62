"""scripts/http_server.py on its own: timeouts, connection limits, TCP_NODELAY, graceful stop
(the framing cases run against the real stack in tests/integration/test_http_framing.py)."""

import json
import socket
import threading
import time

import pytest

from scripts import http_server
from tests.support.raw_http import RawConnection, request_bytes


def _until(condition, seconds=5.0):
    """Waits for what a test expects to have happened (bound 5 s: milliseconds on a quiet
    machine; a loaded one is not a failure); fails if it does not."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold within the wait"
        time.sleep(0.01)


def _held(server):
    with server.lock:
        return len(server._conns)


def _error(status, reason):
    return http_server.Response(
        status,
        [("Content-Type", "application/json")],
        json.dumps({"status": status, "reason": reason}).encode(),
    )


@pytest.fixture
def server():
    release = threading.Event()

    def app(req):
        if req.target == "/slow":
            release.wait(10)
        return http_server.Response(200, [("Content-Type", "text/plain")], b"echo:" + req.body)

    srv = http_server.HttpServer(
        "127.0.0.1",
        0,
        app,
        _error,
        max_body=1000,
        head_timeout=0.5,
        body_timeout=0.5,
        idle_timeout=0.5,
        max_connections=4,
    ).start()
    srv.release = release
    yield srv
    release.set()
    srv.stop(drain=1)


def test_a_head_not_finished_in_time_is_408_and_closed(server):
    with RawConnection(server.port) as conn:
        conn.send(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        resp = conn.read_response()
        assert resp.status == 408 and conn.is_closed()


def test_a_body_not_finished_in_time_is_408_and_closed(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("POST", "/", {"Content-Length": "10"}, b"12345"))
        resp = conn.read_response()
        assert resp.status == 408 and conn.is_closed()


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(server):
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/"))
        assert conn.read_response().status == 200
        assert conn.is_closed(wait=3)


def test_slow_clients_do_not_hold_the_server(server):
    """More half-sent requests than the connection limit: each is cut at the head timeout,
    after which the server answers again."""
    stalled = [RawConnection(server.port) for _ in range(8)]
    for conn in stalled:
        try:
            conn.send(b"GET / HTTP/1.1\r\n")
        except OSError:
            pass
    time.sleep(1.5)
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/", body=b""))
        assert conn.read_response().status == 200
    for conn in stalled:
        conn.close()


def test_connections_over_the_limit_get_503(server):
    held = [RawConnection(server.port) for _ in range(4)]
    _until(lambda: _held(server) == 4)  # all four accepted and counted
    with RawConnection(server.port) as conn:
        resp = conn.read_response()
        assert resp.status == 503 and conn.is_closed()
    for conn in held:
        conn.close()


def test_accepted_connections_have_tcp_nodelay(server):
    captured = {}
    with RawConnection(server.port) as conn:
        conn.send(request_bytes("GET", "/"))
        assert conn.read_response().status == 200
        with server.lock:
            conns = list(server._conns)
        for c in conns:
            captured[c] = c.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert captured and all(captured.values())


def test_stop_finishes_in_flight_requests_and_refuses_new_ones(server):
    results = {}

    def slow():
        with RawConnection(server.port) as conn:
            conn.send(request_bytes("GET", "/slow"))
            resp = conn.read_response()
            results["slow"] = (resp.status, resp.headers.get("connection"))

    thread = threading.Thread(target=slow)
    thread.start()
    _until(lambda: server.in_flight() == 1)  # the slow request is being served
    stopper = threading.Thread(target=server.stop, kwargs={"drain": 5})
    stopper.start()
    _until(lambda: server._listener.fileno() == -1)  # the listener is closed
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1)
    server.release.set()
    thread.join(5)
    stopper.join(5)
    assert results["slow"] == (200, "close")


def test_stop_gives_up_on_requests_after_the_drain_time(server):
    def slow():
        with RawConnection(server.port) as conn:
            conn.send(request_bytes("GET", "/slow"))
            try:
                conn.read_response()
            except ConnectionError:
                pass

    thread = threading.Thread(target=slow, daemon=True)
    thread.start()
    _until(lambda: server.in_flight() == 1)
    started = time.monotonic()
    server.stop(drain=0.5)
    assert time.monotonic() - started < 1.5
