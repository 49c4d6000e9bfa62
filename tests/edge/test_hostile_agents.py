"""Hostile agent connections against the edge as a process: what a connection that never
authenticates may make the edge hold, per-address caps, the Auth deadline, agent-chosen
heartbeat timers. Each attack is a bounded loop on the loopback; an official SDK endpoint (the
canary) must keep serving throughout.

Source addresses: the loopback is a /8, so distinct client addresses are 127.0.0.N.
"""

import asyncio
import collections
import json
import socket
import ssl
import time

import pytest

from edge import agents, protocol, server, session
from stacks import muxado
from tests.edge.test_edge_sdk import _bound, _credential, _host
from tests.edge.test_edge_streams import GET_CLOSE, _http, _status


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _connect(edge, source="127.0.0.1"):
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", edge.agent_port))
    return await asyncio.open_connection(sock=sock, ssl=ctx, server_hostname="localhost")


async def _closed_within(reader, seconds):
    """True when the edge ends the connection (EOF, reset, or a GOAWAY then EOF) in time."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def canary(edge, account, agents):
    agent = agents(edge, _credential(account)["token"], [{"proto": "http"}])
    host = _host(_bound(agent.start())[0]["url"])

    def serves_within(seconds=1.0):
        started = time.monotonic()
        ok = _status(_http(edge.http_port, host, GET_CLOSE)) == 200
        return ok and time.monotonic() - started < seconds

    assert serves_within(5)
    return serves_within


def test_unauthenticated_connections_hold_bounded_memory_and_are_closed_at_the_deadline(
    edge, canary
):
    """20 addresses x 16 connections (the per-address cap), each holding the most a
    connection may before Auth: two streams and PRE_AUTH_BYTES of an unfinished Auth. The
    edge's RSS grows by a bounded amount per connection, the canary serves meanwhile, and
    every one is closed at AUTH_TIMEOUT."""
    per_address = server.MAX_UNAUTHENTICATED_PER_ADDRESS
    sources = [f"127.0.0.{n}" for n in range(2, 22)]

    async def attack():
        before = _rss_kb(edge.process.pid)
        conns = []
        for source in sources:
            for _ in range(per_address):
                reader, writer = await _connect(edge, source)
                unfinished = b'{"Version":["3"],"Extra":{"Metadata":"' + b"m" * (
                    session.PRE_AUTH_BYTES - 4 - 1024 - 64
                )
                writer.write(
                    muxado.data(1, protocol.stream_type(protocol.AUTH) + unfinished, syn=True)
                )
                writer.write(
                    muxado.data(
                        3, protocol.stream_type(protocol.HEARTBEAT) + b"h" * 1024, syn=True
                    )
                )
                conns.append((reader, writer))
        for _, writer in conns:
            await writer.drain()
        await asyncio.sleep(1.0)
        held = _rss_kb(edge.process.pid) - before
        canary_ok = await asyncio.to_thread(canary)
        closed = await asyncio.gather(
            *(_closed_within(r, agents.AUTH_TIMEOUT + 5) for r, _ in conns)
        )
        for _, writer in conns:
            writer.close()
        return held, len(conns), canary_ok, closed

    held, count, canary_ok, closed = asyncio.run(attack())
    per_connection = held / count
    print(f"{count} unauthenticated connections: +{held} KiB RSS, {per_connection:.0f} KiB each")
    # docs/SECURITY.md: at most 200 KiB each (a fresh TLS connection alone is ~100 KiB here)
    assert per_connection < 200, per_connection
    assert canary_ok
    assert all(closed)


def test_connections_past_the_per_address_cap_are_closed_at_once(edge, canary):
    async def attack():
        held = [
            await _connect(edge, "127.0.0.30")
            for _ in range(server.MAX_UNAUTHENTICATED_PER_ADDRESS)
        ]
        await asyncio.sleep(0.3)
        reader, writer = await _connect(edge, "127.0.0.30")
        refused = await _closed_within(reader, 2)
        other_reader, _ = await _connect(edge, "127.0.0.31")  # another address is not
        other_open = not await _closed_within(other_reader, 1)
        for _, w in held + [(reader, writer)]:
            w.close()
        return refused, other_open

    assert asyncio.run(attack()) == (True, True)
    assert canary()


def test_a_third_stream_before_auth_ends_the_session(edge):
    async def attack():
        reader, writer = await _connect(edge, "127.0.0.32")
        for sid in (1, 3, 5):
            writer.write(muxado.data(sid, protocol.stream_type(protocol.HEARTBEAT), syn=True))
        await writer.drain()
        frames = []
        parser = muxado.FrameParser()
        try:
            async with asyncio.timeout(3):
                while chunk := await reader.read(65536):
                    frames += parser.feed(chunk)
        except (ConnectionError, TimeoutError, ssl.SSLError):
            pass
        writer.close()
        return [(f.error_code, f.message) for f in frames if f.type == muxado.GOAWAY]

    assert asyncio.run(attack()) == [
        (muxado.E_ENHANCE_YOUR_CALM, b"protocol error: more than 2 streams before authentication")
    ]


@pytest.mark.parametrize(
    "interval, tolerance, want",
    [
        (None, None, agents.DEFAULT_HEARTBEAT),
        (10**18, 10**18, (60.0, 60.0)),  # an agent that asks never to be reaped
        (1, 1, (1.0, 1.0)),  # one nanosecond: as often as the edge allows
        (30 * 10**9, 5 * 10**9, (30.0, 5.0)),  # within the ranges: as asked
        (0, 10**9, agents.DEFAULT_HEARTBEAT),
        (True, True, agents.DEFAULT_HEARTBEAT),
        ("10", "10", agents.DEFAULT_HEARTBEAT),
    ],
)
def test_heartbeat_timers_an_agent_asks_for_are_clamped(interval, tolerance, want):
    assert agents.heartbeat_of(interval, tolerance) == want


def test_a_silent_authenticated_agent_is_reaped(edge, account):
    """Auth asking for the longest timers the edge allows would still be reaped; here the
    shortest (1 s + 1 s): the session ends soon after the agent stops heartbeating."""
    token = _credential(account)["token"]

    async def silent():
        reader, writer = await _connect(edge, "127.0.0.33")
        auth = {
            "Version": ["3", "2"],
            "ClientId": "",
            "Extra": {"AuthToken": token, "HeartbeatInterval": 1, "HeartbeatTolerance": 1},
        }
        writer.write(
            muxado.data(
                1, protocol.stream_type(protocol.AUTH) + json.dumps(auth).encode(), syn=True
            )
        )
        await writer.drain()
        started = time.monotonic()
        reaped = await _closed_within(reader, 1 + 1 + 5 + 5 + 5)
        writer.close()
        return reaped, time.monotonic() - started

    reaped, took = asyncio.run(silent())
    assert reaped and took > 1 + 1, took


async def _rpc(reader, writer, parser, sid, typ, body):
    """One RPC on a raw session: stream ``sid`` of type ``typ`` with JSON ``body``; the reply."""
    writer.write(muxado.data(sid, protocol.stream_type(typ) + json.dumps(body).encode(), syn=True))
    await writer.drain()
    reply = protocol.JsonReader()
    said = ""  # the GOAWAY's message, when the edge ends the session
    async with asyncio.timeout(10):
        while True:
            data = await reader.read(65536)
            if not data:  # at EOF read() returns at once: without this the loop would spin
                raise ConnectionError(f"the edge closed the session before its reply: {said!r}")
            for frame in parser.feed(data):
                if frame.type == muxado.GOAWAY:
                    said = frame.message.decode(errors="replace")
                if frame.stream_id == sid and frame.type == muxado.DATA and frame.payload:
                    value = reply.feed(frame.payload)
                    if value is not None:
                        return value


def test_a_tunnel_id_of_another_account_is_never_given_out(edge, account, api, agents):
    """Another account re-binding an offline tunnel's id (to reach its endpoint id) gets a
    new id; the owner's own re-bind keeps it."""
    owner_token = _credential(account)["token"]
    agent = agents(edge, owner_token, [{"proto": "http"}])
    tunnel_id = _bound(agent.start())[0]["id"]
    agent.stop()  # offline: the id is in no edge's memory any more

    async def bind_with(token, source):
        reader, writer = await _connect(edge, source)
        parser = muxado.FrameParser()
        auth = await _rpc(
            reader,
            writer,
            parser,
            1,
            protocol.AUTH,
            {"Version": ["3", "2"], "ClientId": "", "Extra": {"AuthToken": token}},
        )
        assert auth.get("ClientId"), auth
        bound = await _rpc(
            reader,
            writer,
            parser,
            3,
            protocol.BIND,
            {"Id": tunnel_id, "Proto": "http", "Opts": {}, "Extra": {}},
        )
        writer.close()
        return bound.get("Id")

    intruder = _credential(api.new_account())["token"]
    assert asyncio.run(bind_with(intruder, "127.0.0.40")) not in (None, tunnel_id)
    assert asyncio.run(bind_with(owner_token, "127.0.0.41")) == tunnel_id


def test_session_churn_returns_its_memory(edge, account):
    """2,500 agent sessions that authenticate and drop, 8 at a time: once settled, the edge's
    RSS is within 5 MB of where it was after a warm-up round of 500 (docs/SECURITY.md): it
    catches anything kept past 2 KiB a session, as the 20 MB over 10,000 it held before did
    (a whole session kept is 100 KiB and more), at a quarter of the cost (it was 606 s of a
    2,893 s suite). No session of the 3,000 is cut before its Auth answer. The sessions use 100
    credentials, so none passes the authentications-per-credential quota (30 each, 120 a
    minute).

    Timing: each session's Auth must arrive within the edge's AUTH_TIMEOUT (10 s) of its
    handshake and is given 10 s for its answer (``_rpc``); with 8 at a time a session takes
    about 0.5 s here (15 to 18 a second on 2 cores, alone or in the whole suite; none of
    11,000 timed alone took over 2 s), so both bounds have 5x to spare. A cut session is
    reported with the edge's log lines about it (before Auth the edge names a session by the
    client's address and port)."""
    tokens = [_credential(account)["token"] for _ in range(100)]

    cut = []  # sessions the edge closed before answering: (client address, what it said)

    async def one(n):
        reader, writer = await _connect(edge, f"127.0.3.{n % 200 + 1}")
        local = "%s:%d" % writer.get_extra_info("sockname")[:2]
        parser = muxado.FrameParser()
        try:
            auth = await _rpc(
                reader,
                writer,
                parser,
                1,
                protocol.AUTH,
                {
                    "Version": ["3", "2"],
                    "ClientId": "",
                    "Extra": {"AuthToken": tokens[n % len(tokens)]},
                },
            )
        except ConnectionError as exc:
            # none may be: loaded runs showed sessions ended before their answer by the Auth
            # deadline counting the store's reads, and by a check that ran before the
            # session's online item was written (tests/unit/test_edge_auth_deadline.py)
            cut.append((local, str(exc)))
            writer.close()
            return
        assert auth.get("ClientId"), auth
        writer.close()

    async def churn(count, concurrency=8):  # 8 at once: a loaded machine kept 20 waiting
        # past the edge's 10 s authentication deadline
        queue = asyncio.Queue()
        for n in range(count):
            queue.put_nowait(n)

        async def worker():
            while not queue.empty():
                await one(queue.get_nowait())

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    def sessions():
        for line in edge.metrics().splitlines():
            if line.startswith("edge_agent_sessions "):
                return float(line.split()[1])
        return -1.0

    baseline = sessions()

    def settled_rss():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sessions() > baseline:  # all gone
            time.sleep(0.5)
        time.sleep(2)
        return _rss_kb(edge.process.pid)

    asyncio.run(churn(500))  # warm-up: caches, pools, allocator arenas
    before = settled_rss()
    started = time.monotonic()
    asyncio.run(churn(2_500))
    took = time.monotonic() - started
    after = settled_rss()
    reasons = collections.Counter(said for _, said in cut)
    print(
        f"2,500 sessions in {took:.0f} s: RSS {before // 1024} -> {after // 1024} MB, "
        f"{len(cut)} cut before their answer: {reasons.most_common(5)}"
    )
    assert after - before < 5 * 1024, (before, after)
    if cut:  # what the edge logged about each (the first 5)
        with open(edge.log_path, errors="replace") as handle:
            lines = handle.read().splitlines()
        told = {
            local: [x for x in lines if local + " " in x or local + ":" in x]
            for local, _ in cut[:5]
        }
        raise AssertionError(
            f"{len(cut)} of 3,000 sessions cut before their answer: {cut[:5]}; the edge: {told}"
        )
