"""The bench's floor (bench/edge_bench/floor_relay.py) carries what it is given: requests on several
client connections reach the upstream through the one TLS connection and come back whole, and a
client's close ends its upstream connection. (Its cost is measured by bench_peers, not here.)"""

import http.server
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from stacks.paths import PROJECT_DIR
from stacks.ports import free_port, wait_port

pytestmark = pytest.mark.processes  # the relay and its upstream: left out by make test-fast

RELAY = os.path.join(PROJECT_DIR, "bench", "edge_bench", "floor_relay.py")


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("floor")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        + ["-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-keyout", f"{tmp}/k.pem", "-out", f"{tmp}/c.pem"],
        check=True,
        capture_output=True,
    )
    opened, closed = [], []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            opened.append(self.client_address)

        def finish(self):
            super().finish()
            closed.append(self.client_address)

        def do_GET(self):
            body = self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Upstream(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            # a client the relay under test closed first (its answer written to a broken
            # pipe): what the test provokes, not an error to print; anything else is
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    upstream = Upstream(("127.0.0.1", 0), Handler)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    back_port, front_port, tls_port = free_port(), free_port(), free_port()
    up_port = str(upstream.server_address[1])
    procs = [
        subprocess.Popen(
            [sys.executable, RELAY, "back", str(back_port), up_port, f"{tmp}/c.pem"]
            + [f"{tmp}/k.pem"]
        )
    ]
    wait_port(back_port)
    procs.append(
        subprocess.Popen(
            [sys.executable, RELAY, "front", str(front_port), str(back_port), str(tls_port)]
            + [f"{tmp}/c.pem", f"{tmp}/k.pem"]
        )
    )
    wait_port(front_port)
    wait_port(tls_port)
    yield front_port, opened, closed, tls_port
    for proc in procs:
        proc.kill()
        proc.wait()
    upstream.shutdown()


def _get(sock: socket.socket, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while not data.endswith(path.encode()):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def test_requests_on_several_connections_come_back_whole(relay):
    port, opened, closed, _ = relay
    before = len(opened)
    conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    for round_ in range(3):
        for i, sock in enumerate(conns):
            path = f"/c{i}/r{round_}/" + "x" * (5000 * i)
            reply = _get(sock, path)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:40]
            assert reply.endswith(path.encode())
    # one upstream connection per client connection, kept for its requests
    assert len(opened) - before == 3
    ours = opened[before:]
    assert not set(ours) & set(closed)
    for sock in conns:
        sock.close()
    deadline = time.time() + 20
    while time.time() < deadline and not set(ours) <= set(closed):
        time.sleep(0.05)
    assert set(ours) <= set(closed)  # a client's close ends its upstream connection


def test_a_tls_client_is_relayed_too(relay):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", relay[3]), timeout=10)
    with context.wrap_socket(raw) as sock:
        reply = _get(sock, "/over-tls")
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"/over-tls")


def test_replies_for_clients_already_gone_are_dropped_and_the_relay_serves_on(relay):
    port = relay[0]
    for _ in range(20):  # each reply reaches the front after its client closed
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert _get(sock, "/after").endswith(b"/after")
