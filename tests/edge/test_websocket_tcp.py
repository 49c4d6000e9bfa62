"""The WebSocket-to-TCP converter (edge/wstcp.py answers the upgrade, edge_core/src/wstcp.rs
converts): the Python SDK's ``websocket_tcp_conversion()`` as a process, its upstream a plain
TCP echo; a WebSocket client (written here from RFC 6455, masking its frames) exchanges
messages with it through the edge."""

import base64
import hashlib
import json
import os
import socket
import ssl
import struct

import pytest

from edge import wstcp
from tests.edge.support import metric, settled, wait
from tests.edge.test_edge_sdk import _bound, _credential, _host


def _client_frame(opcode, payload):
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x80 | opcode])
    if size < 126:
        head += bytes([0x80 | size])
    elif size < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", size)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_frame(sock, buf=b""):
    def need(n):
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk

    need(2)
    opcode, size, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
    if size == 126:
        need(4)
        size, at = struct.unpack(">H", buf[2:4])[0], 4
    elif size == 127:
        need(10)
        size, at = struct.unpack(">Q", buf[2:10])[0], 10
    need(at + size)
    return opcode, buf[at : at + size], buf[at + size :]


def _upgrade(edge, host, tls=False, extra=""):
    """An upgraded WebSocket to ``host`` (over TLS with ``tls``; ``extra`` fields in the
    request): (socket, head, accept)."""
    if tls:
        raw = socket.create_connection(("127.0.0.1", edge.https_port), timeout=10)
        context = ssl.create_default_context(cafile=edge.ca_path)
        sock = context.wrap_socket(raw, server_hostname=host)
    else:
        sock = socket.create_connection(("127.0.0.1", edge.http_port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    accept = base64.b64encode(hashlib.sha1(key.encode() + wstcp.GUID).digest()).decode()
    return sock, head.decode(), accept


def _converting_endpoint(edge, account, agents, policy=None):
    """The host of an SDK endpoint that converts WebSockets to its TCP echo upstream (with
    the traffic ``policy``, if given)."""
    options = {"websocket_tcp_conversion": []}
    if policy is not None:
        options["traffic_policy"] = [json.dumps(policy)]
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "upstream": "tcp", "options": options}],
    )
    return _host(_bound(agent.start())[0]["url"])


def _converted(edge) -> float:
    """Connections the core carried to their end (a conversion is counted as one)."""
    return metric(edge.metrics(), "edge_core_carried_connections_ended_total")


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_websocket_messages_reach_a_tcp_upstream(edge, account, agents, tls):
    host = _converting_endpoint(edge, account, agents)
    before = _converted(edge)
    sock, head, accept = _upgrade(edge, host, tls)
    with sock:
        assert head.startswith("HTTP/1.1 101")
        assert f"sec-websocket-accept: {accept.lower()}" in head.lower()
        sock.sendall(_client_frame(wstcp.BINARY, b"hello over ws"))
        got, rest = b"", b""
        while len(got) < len(b"hello over ws"):
            opcode, payload, rest = _read_frame(sock, rest)
            assert opcode == wstcp.BINARY
            got += payload
        assert got == b"hello over ws"
        big = os.urandom(200_000)  # several frames each way
        sock.sendall(_client_frame(wstcp.BINARY, big))
        got = b""
        while len(got) < len(big):
            opcode, payload, rest = _read_frame(sock, rest)
            got += payload
        assert got == big
        sock.sendall(_client_frame(wstcp.PING, b"p"))
        opcode, payload, rest = _read_frame(sock, rest)
        assert (opcode, payload) == (wstcp.PONG, b"p")
        sock.sendall(_client_frame(wstcp.CLOSE, struct.pack(">H", 1000)))
        opcode, _, rest = _read_frame(sock, rest)
        assert opcode == wstcp.CLOSE
    # the core converted the connection, to its end (the echo upstream closes on EOF)
    assert wait(lambda: _converted(edge) >= before + 1, timeout=10)


def _served(edge) -> float:
    return settled(lambda: metric(edge.metrics(), "edge_core_http_requests_total"))


def _handed(edge) -> float:
    return metric(edge.metrics(), "edge_core_http_handed_over_total")


def test_the_core_answers_and_converts_with_no_python_per_connection(edge, account, agents):
    """A converting endpoint with no policy is a route of the core: the upgrade is answered
    101 by the core and converted there, a plain request answered 400 there, and neither
    connection is handed to Python (edge/fast_path.py, edge_core/src/public.rs)."""
    host = _converting_endpoint(edge, account, agents)

    def converted_by_the_core():
        handed, served = _handed(edge), _served(edge)
        sock, head, accept = _upgrade(edge, host)
        with sock:
            assert head.startswith("HTTP/1.1 101") and accept in head
            sock.sendall(_client_frame(wstcp.BINARY, b"core"))
            opcode, payload, _ = _read_frame(sock)
            assert (opcode, payload) == (wstcp.BINARY, b"core")
        return _handed(edge) == handed and _served(edge) == served + 1

    assert wait(converted_by_the_core, timeout=10)  # once the route is pushed
    handed, served = _handed(edge), _served(edge)
    resp = edge.http("GET", host, "/")
    assert resp.status_code == 400 and "ERR_NGROK_3002" in resp.text
    assert (_handed(edge), _served(edge)) == (handed, served + 1)


def test_a_policys_decision_comes_before_the_cores_answer_and_conversion(edge, account, agents):
    """A converting endpoint with a traffic policy is a route of the core too, decided: the
    policy runs in Python on each upgrade (a deny answered by the core, the connection
    closed), and what it lets through is answered 101 and converted by the core; no
    connection is handed to Python."""
    policy = {
        "on_http_request": [
            {
                "expressions": ["'x-deny' in req.headers"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            },
            {"actions": [{"type": "add-headers", "config": {"headers": {"x-a": "1"}}}]},
        ]
    }
    host = _converting_endpoint(edge, account, agents, policy)

    def converted_by_the_core():
        handed, served = _handed(edge), _served(edge)
        sock, head, _ = _upgrade(edge, host)
        with sock:
            assert head.startswith("HTTP/1.1 101")
            sock.sendall(_client_frame(wstcp.BINARY, b"decided"))
            opcode, payload, _ = _read_frame(sock)
            assert (opcode, payload) == (wstcp.BINARY, b"decided")
        return _handed(edge) == handed and _served(edge) == served + 1

    assert wait(converted_by_the_core, timeout=10)  # once the route is pushed
    handed, served = _handed(edge), _served(edge)
    sock, head, _ = _upgrade(edge, host, extra="X-Deny: 1\r\n")
    with sock:  # an upgrade answered by anything but a 101 ends the connection
        assert head.startswith("HTTP/1.1 403") and "connection: close" in head.lower(), head
        sock.settimeout(5)
        while sock.recv(65536):
            pass
    assert (_handed(edge), _served(edge)) == (handed, served + 1)


def test_on_tls_python_terminated_the_core_still_converts(edge, account, agents):
    """An endpoint whose policy the core cannot decide (one that removes a framing field:
    edge/decided.py) is not a route of the core: its HTTPS connections are Python's from
    the handshake on (edge/tls.py). Python answers the upgrade and copies the plaintext to
    the core's converter over a socket pair (edge/wstcp.py ``_bridged``)."""
    framing = {"type": "remove-headers", "config": {"headers": ["content-length"]}}
    policy = {"on_http_request": [{"actions": [framing]}]}
    host = _converting_endpoint(edge, account, agents, policy)
    before, handed = _converted(edge), _handed(edge)
    sock, head, accept = _upgrade(edge, host, tls=True)
    with sock:
        assert head.startswith("HTTP/1.1 101") and accept in head
        big = os.urandom(100_000)
        sock.sendall(_client_frame(wstcp.BINARY, big) + _client_frame(wstcp.PING, b"p"))
        got, rest, pong = b"", b"", False
        while len(got) < len(big) or not pong:
            opcode, payload, rest = _read_frame(sock, rest)
            if opcode == wstcp.PONG:
                pong = payload == b"p"
            else:
                got += payload
        assert got == big
        sock.sendall(_client_frame(wstcp.CLOSE, struct.pack(">H", 1000)))
        opcode, _, rest = _read_frame(sock, rest)
        assert opcode == wstcp.CLOSE
    assert _handed(edge) > handed  # the connection was Python's
    assert wait(lambda: _converted(edge) >= before + 1, timeout=10)  # converted by the core
    sock, head, _ = _upgrade(edge, host, tls=True)
    with sock:  # the core's close 1009 ends the client's connection too, though it stays open
        assert head.startswith("HTTP/1.1 101")
        sock.sendall(bytes([0x82, 0x80 | 127]) + struct.pack(">Q", wstcp.MAX_FRAME + 1))
        opcode, payload, rest = _read_frame(sock)
        assert opcode == wstcp.CLOSE and struct.unpack(">H", payload)[0] == 1009
        sock.settimeout(5)
        assert rest == b"" and sock.recv(1) == b"", "closed after the close frame"


def test_a_plain_request_is_refused_and_bounds_hold(edge, account, agents):
    host = _converting_endpoint(edge, account, agents)
    resp = edge.http("GET", host, "/")
    assert resp.status_code == 400 and "ERR_NGROK_3002" in resp.text
    sock, head, _ = _upgrade(edge, host)
    with sock:  # an unmasked frame: close 1002
        sock.sendall(bytes([0x82, 2]) + b"no")
        opcode, payload, _ = _read_frame(sock)
        assert opcode == wstcp.CLOSE and struct.unpack(">H", payload)[0] == 1002
    sock, head, _ = _upgrade(edge, host)
    with sock:  # a frame announced above the bound: close 1009, nothing buffered
        sock.sendall(bytes([0x82, 0x80 | 127]) + struct.pack(">Q", wstcp.MAX_FRAME + 1))
        opcode, payload, _ = _read_frame(sock)
        assert opcode == wstcp.CLOSE and struct.unpack(">H", payload)[0] == 1009


def test_a_client_that_pings_and_never_reads_is_stopped_not_buffered(edge, account, agents):
    """Each ping is answered with a pong, and the edge waits for its pongs to drain before it
    reads more: a client that floods pings and reads nothing fills the socket buffers on the
    path and is stopped there (its sends block), after a few MiB, instead of the edge growing
    a buffer of pongs one byte for each byte sent (it took all 32 MiB before)."""
    host = _converting_endpoint(edge, account, agents)
    sock, head, _ = _upgrade(edge, host)
    with sock:
        assert head.startswith("HTTP/1.1 101")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        chunk = _client_frame(wstcp.PING, b"p" * 125) * 8000  # ~1 MiB of pings
        sock.settimeout(3)
        sent = 0
        try:
            while sent < 32 << 20:
                sock.sendall(chunk)
                sent += len(chunk)
        except socket.timeout:
            pass
        assert sent < 16 << 20, f"{sent} bytes of pings taken from a client reading no pong"
        sock.settimeout(10)
        opcode, payload, _ = _read_frame(sock)  # the pongs are there, in order
        assert (opcode, payload) == (wstcp.PONG, b"p" * 125)
