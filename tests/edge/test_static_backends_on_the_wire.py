"""Static backends (/backends/static): the edge forwards an HTTPS edge route's requests, and a
TCP edge's bytes, to the address itself (edge/static.py), with no agent; an address outside the
global ranges (and the operator's EDGE_STATIC_BACKEND_ALLOW, 127.0.0.0/8 in the tests) is never
connected to: 502."""

import http.server
import socket
import threading
import time

import pytest

from tests.edge.conftest import BASE_DOMAIN, tcp_round_trip
from tests.edge.test_edge_sdk import _wait


def _post(account, path, body):
    resp = account.admin.post(path, body)
    assert resp.status == 201, resp
    return resp.json


class _Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the http.server API)
        body = f"origin saw {self.path} for {self.headers.get('host')}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-origin", "static")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def origin():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _https_edge_to(account, backend_id, prefix):
    host = f"{prefix}-{time.time_ns()}.{BASE_DOMAIN}"
    edge = _post(account, "/edges/https", {"hostports": [f"{host}:443"]})
    _post(
        account,
        f"/edges/https/{edge['id']}/routes",
        {"match_type": "path_prefix", "match": "/", "backend": {"backend_id": backend_id}},
    )
    return host


def test_an_https_edge_route_forwards_to_a_static_backend(edge, account, origin):
    backend = _post(account, "/backends/static", {"address": f"127.0.0.1:{origin}"})
    host = _https_edge_to(account, backend["id"], "static")
    resp = edge.http("GET", host, "/some/path?q=1")
    assert resp.status_code == 200, resp.text
    assert resp.text == f"origin saw /some/path?q=1 for {host}"
    assert resp.headers["x-origin"] == "static"
    assert edge.curl_https(host, "/over-tls").stdout.startswith("origin saw /over-tls")


def test_a_static_backend_outside_the_allowed_ranges_is_never_reached(edge, account):
    backend = _post(account, "/backends/static", {"address": "10.255.255.1:80"})
    host = _https_edge_to(account, backend["id"], "private")
    started = time.monotonic()
    resp = edge.http("GET", host, "/")
    assert resp.status_code == 502
    assert time.monotonic() - started < 5  # refused before any connection attempt


def test_a_tcp_edge_carries_bytes_to_a_static_backend(edge, account):
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(4)

    def answer(conn):
        with conn:  # one connection that sends nothing never holds up the next ones
            conn.settimeout(10)
            try:
                conn.sendall(conn.recv(4096))
            except OSError:
                pass

    def serve():
        while True:
            try:
                conn, _ = echo.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        addr = _post(account, "/reserved_addrs", {})["addr"]
        backend = _post(
            account, "/backends/static", {"address": f"127.0.0.1:{echo.getsockname()[1]}"}
        )
        _post(
            account, "/edges/tcp", {"hostports": [addr], "backend": {"backend_id": backend["id"]}}
        )
        port = int(addr.rsplit(":", 1)[1])
        assert _wait(
            lambda: tcp_round_trip(port, b"to a static address") == b"to a static address",
            timeout=30,
        ), edge.log()[-3000:]
    finally:
        echo.close()
