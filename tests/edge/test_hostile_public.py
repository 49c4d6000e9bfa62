"""Hostile public clients against the edge as a process: slow heads, connection floods from
one address and from many. An official SDK endpoint (the canary) must keep serving within 1 s.

Two edges on the session's store: the shared one with the default bounds (3,000 slow clients
fit under them), and a tight one (EDGE_HEAD_TIMEOUT 2 s, 60 connections per address, 150 in
all) where the deadlines and caps are reached within a test's time.
"""

import asyncio
import os
import socket
import time

import pytest

from stacks.agents import SdkAgent
from tests.edge.test_edge_sdk import _bound, _credential, _host
from tests.edge.test_edge_streams import GET_CLOSE, _http, _recv_all, _status
from tests.edge.test_hostile_agents import _rss_kb

TIGHT = {
    "EDGE_HEAD_TIMEOUT": "2",
    "EDGE_MAX_CONNECTIONS_PER_ADDRESS": "60",
    "EDGE_MAX_CONNECTIONS": "150",
}


def _canary(edge, token):
    agent = SdkAgent(edge, token, [{"proto": "http"}, {"proto": "tcp"}])
    bound = _bound(agent.start())
    host, tcp = _host(bound[0]["url"]), int(bound[1]["url"].rsplit(":", 1)[1])

    def serves_within(seconds=1.0):
        started = time.monotonic()
        ok = _status(_http(edge.http_port, host, GET_CLOSE)) == 200
        return ok and time.monotonic() - started < seconds

    assert serves_within(5)
    return agent, serves_within, tcp


@pytest.fixture(scope="module")
def tight(another_edge, api):
    edge = another_edge(TIGHT)
    account = api.new_account()
    agent, serves_within, tcp = _canary(edge, _credential(account)["token"])
    yield edge, serves_within, tcp
    agent.stop()


async def _open(port, source):
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def _ended_within(reader, seconds):
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_3000_slow_clients_are_held_and_the_canary_still_serves(edge, account):
    """3,000 connections sending a request head a byte at a time, from 8 addresses: under
    the default caps all are held, each costs the edge little memory, and a request of
    another client is served within 1 s meanwhile."""
    agent, serves_within, _ = _canary(edge, _credential(account)["token"])
    try:

        async def attack():
            before = _rss_kb(edge.process.pid)
            conns = []
            for n in range(3000):
                conns.append(await _open(edge.http_port, f"127.0.1.{n % 8 + 1}"))
            head = b"GET / HTTP/1.1\r\nHost: slow.example\r\n"
            for at in range(4):  # a byte each, four rounds
                for _, writer in conns:
                    writer.write(head[at : at + 1])
                await asyncio.sleep(0.5)
            held = _rss_kb(edge.process.pid) - before
            canary_ok = await asyncio.to_thread(serves_within, 1.0)
            open_ = [not reader.at_eof() for reader, _ in conns]
            for _, writer in conns:
                writer.close()
            return held / len(conns), canary_ok, all(open_)

        per_connection, canary_ok, all_open = asyncio.run(attack())
        print(f"3000 slow clients: {per_connection:.1f} KiB of edge RSS each")
        assert canary_ok
        assert all_open
        assert per_connection < 32, per_connection  # docs/SECURITY.md
    finally:
        agent.stop()


def test_a_head_sent_a_byte_at_a_time_is_cut_off_at_the_head_deadline(tight):
    edge, serves_within, _ = tight

    async def slow():
        reader, writer = await _open(edge.http_port, "127.0.2.1")
        started = time.monotonic()
        head = b"GET / HTTP/1.1\r\nHost: x.example\r\nX-Slow: " + b"a" * 100
        for byte in head:  # a byte every 0.25 s: each read well within any per-read timer
            if reader.at_eof():
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.25)
            if reader.at_eof() or writer.transport.is_closing():
                break
        ended = await _ended_within(reader, 5)
        writer.close()
        return ended, time.monotonic() - started

    ended, took = asyncio.run(slow())
    assert ended and 1.5 < took < 4.5, took
    assert serves_within()


def test_a_new_connection_that_sends_nothing_is_closed_at_the_head_deadline(tight):
    edge, _, _ = tight

    async def silent():
        reader, writer = await _open(edge.http_port, "127.0.2.2")
        started = time.monotonic()
        ended = await _ended_within(reader, 6)
        writer.close()
        return ended, time.monotonic() - started

    ended, took = asyncio.run(silent())
    assert ended and 1.5 < took < 3.5, took


def test_at_the_per_address_cap_the_oldest_waiting_connection_makes_room(tight):
    edge, serves_within, _ = tight
    cap = int(TIGHT["EDGE_MAX_CONNECTIONS_PER_ADDRESS"])

    async def flood():
        conns = [await _open(edge.http_port, "127.0.2.3") for _ in range(cap)]
        await asyncio.sleep(0.3)
        newest = await asyncio.to_thread(
            lambda: _status(
                _http_from(
                    edge.http_port,
                    "127.0.2.3",
                    b"GET / HTTP/1.1\r\nHost: nobody.example\r\nConnection: close\r\n\r\n",
                )
            )
        )
        await asyncio.sleep(0.2)  # well within the 2 s head deadline of the others
        oldest_closed = conns[0][0].at_eof()  # EOF or reset reached the reader
        others_open = [not r.at_eof() for r, _ in conns[1:]]
        for _, writer in conns:
            writer.close()
        return newest, oldest_closed, all(others_open)

    newest, oldest_closed, others_open = asyncio.run(flood())
    assert newest == 404  # served (no endpoint there): the cap made room for it
    assert oldest_closed and others_open
    assert serves_within()


def test_busy_connections_are_never_evicted_and_one_more_is_refused(tight):
    """TCP endpoint connections are busy for their whole life: at the per-address cap the
    next connection from that address is closed at once, the busy ones keep working."""
    edge, serves_within, tcp_port = tight
    cap = int(TIGHT["EDGE_MAX_CONNECTIONS_PER_ADDRESS"])

    async def flood():
        conns = [await _open(tcp_port, "127.0.2.4") for _ in range(cap)]
        for reader, writer in conns:  # each one live through the agent
            writer.write(b"ping")
            await writer.drain()
            assert await reader.readexactly(4) == b"ping"
        reader, writer = await _open(tcp_port, "127.0.2.4")
        refused = await _ended_within(reader, 2)
        still = []
        for r, w in conns[:5]:
            w.write(b"more")
            still.append(await asyncio.wait_for(r.readexactly(4), 5) == b"more")
        for _, w in conns + [(reader, writer)]:
            w.close()
        return refused, all(still)

    assert asyncio.run(flood()) == (True, True)
    assert serves_within()


def _http_from(port, source, request):
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        return _recv_all(sock)


def test_the_edge_answers_its_operator_with_the_admission_counters(tight):
    edge, _, _ = tight
    metrics = edge.metrics()
    for name in (
        "edge_public_connections ",
        "edge_public_connections_evicted_total",
        "edge_public_connections_refused_total",
    ):
        assert name in metrics, name
    assert os.path.exists(edge.log_path)
