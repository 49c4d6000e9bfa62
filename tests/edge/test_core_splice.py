"""Connections the compiled core carries once Python decided where they go
(edge_core/src/splice.rs, edge/http_io.py ``splice``): a TCP endpoint's bytes both ways through
the official Python SDK as a process, with half-closes, the bytes a client sends before the
decision, the end of the agent's session, and the memory a client that never reads can make
the edge hold."""

import hashlib
import socket
import threading
import time

import pytest

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, metric, wait

MiB = 1024 * 1024


def _carrying(edge) -> float:
    return metric(edge.metrics(), "edge_core_carried_connections")


def _ended(edge) -> float:
    return metric(edge.metrics(), "edge_core_carried_connections_ended_total")


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def tcp_port(edge, api):
    """A TCP endpoint of the SDK whose upstream echoes (and closes at the client's EOF)."""
    agent = SdkAgent(
        edge, credential(api.new_account())["token"], [{"proto": "tcp", "upstream": "tcp"}]
    )
    url = bound(agent.start())[0]["url"]
    yield int(url.rsplit(":", 1)[1])
    agent.stop()


def _echo_through(port: int, data: bytes) -> bytes:
    """``data`` sent by one thread while this one reads the echo, then the client's EOF; what
    came back up to the edge's EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:

        def send() -> None:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        got = bytearray()
        while chunk := sock.recv(256 * 1024):
            got += chunk
        sender.join(20)
    return bytes(got)


def test_a_tcp_endpoints_bytes_are_carried_by_the_core_both_ways(edge, tcp_port):
    ended = _ended(edge)
    data = bytes(range(256)) * (16 * MiB // 256)
    got = _echo_through(tcp_port, data)
    assert len(got) == len(data) and hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    # the client's EOF went to the agent as FIN, the agent's FIN came back as EOF: the core
    # carried the connection to its end
    assert wait(lambda: _ended(edge) == ended + 1)
    assert wait(lambda: _carrying(edge) == 0)


def test_bytes_sent_before_the_edge_decided_arrive_first_and_in_order(edge, tcp_port):
    """The client writes at once, before the endpoint is looked up and the stream opened:
    those bytes are held by Python's reader and handed to the core ahead of the rest."""
    with socket.create_connection(("127.0.0.1", tcp_port), timeout=10) as sock:
        sock.sendall(b"first.")
        time.sleep(0.3)  # past the decision: the core carries the rest
        sock.sendall(b"second.")
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(4096):
            got += chunk
    assert got == b"first.second."


def test_a_carried_connection_is_counted_while_it_lasts(edge, tcp_port):
    carrying = _carrying(edge)
    with socket.create_connection(("127.0.0.1", tcp_port), timeout=10) as sock:
        sock.sendall(b"x")
        assert sock.recv(1) == b"x"
        assert _carrying(edge) == carrying + 1
    assert wait(lambda: _carrying(edge) == carrying)


def test_the_agents_end_closes_the_connections_it_carried(edge, api):
    agent = SdkAgent(
        edge, credential(api.new_account())["token"], [{"proto": "tcp", "upstream": "tcp"}]
    )
    port = int(bound(agent.start())[0]["url"].rsplit(":", 1)[1])
    ended = _ended(edge)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(b"y")
        assert sock.recv(1) == b"y"
        agent.stop()  # the session ends: the stream with it
        sock.settimeout(15)
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass
    finally:
        sock.close()
    assert wait(lambda: _ended(edge) == ended + 1)


def _kernel_buffers() -> int:
    """The most the kernel may buffer on the path of a TCP endpoint's echo: the receiving
    sides (the edge's from the client, the echo's from the agent, the agent's from the
    echo) autotune up to tcp_rmem's maximum, the sending sides (the client's, the agent's,
    the echo's, the edge's to the client) up to tcp_wmem's."""
    with open("/proc/sys/net/ipv4/tcp_rmem") as rmem, open("/proc/sys/net/ipv4/tcp_wmem") as wmem:
        return 3 * int(rmem.read().split()[2]) + 4 * int(wmem.read().split()[2])


def test_a_client_that_sends_and_never_reads_makes_the_edge_hold_little(edge, tcp_port):
    """The echo's answer backs up: the client's socket, then the core's write, the stream's
    window (256 KiB), the agent, and so the core stops reading the client. The edge holds
    the core's two buffers (64 KiB each) and the stream's window, not what was sent: the
    client's sends stall once the kernel's buffers on the path are full (their size is the
    kernel's: this machine's tcp_rmem lets a receiving side grow to 32 MiB), and the edge's
    memory does not grow with them."""
    sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    bound = _kernel_buffers() + 4 * MiB  # + the windows, the agent's and the echo's buffers
    try:
        before = _rss_kb(edge.process.pid)
        sock.setblocking(False)
        chunk, sent, deadline = b"z" * 65536, 0, time.monotonic() + 30
        progressed = time.monotonic()
        while time.monotonic() - progressed < 1.0 and time.monotonic() < deadline:
            try:
                sent += sock.send(chunk)
                progressed = time.monotonic()
            except BlockingIOError:
                time.sleep(0.05)
            if sent > bound:
                break
        assert time.monotonic() - progressed >= 1.0, f"still sending after {sent} bytes"
        assert sent <= bound, f"{sent} bytes taken from a client that never reads"
        grown = _rss_kb(edge.process.pid) - before
        assert grown < 8 * 1024, f"the edge grew {grown} KiB"
    finally:
        sock.close()
