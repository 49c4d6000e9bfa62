"""An agent's heartbeats (edge/agents.py, edge_core/src/heartbeat.rs): once the edge has read
a stream's type as Heartbeat, the core echoes each 4-byte id and keeps the time of the last
one; the periodic check reaps a session whose last beat is older than the interval and
tolerance the agent asked for plus HEARTBEAT_GRACE, and leaves one that beats alone. The agent
is played over a real socket pair; the edge around the session is the Auth deadline tests'
recorder (no store)."""

import asyncio
import json

from edge import agents, protocol
from stacks import muxado
from tests.unit.test_edge_auth_deadline import SlowEdge, _answer, _session

SECOND = 10**9  # Auth's heartbeat timers are in nanoseconds


def _auth(interval: int, tolerance: int) -> bytes:
    body = {
        "Version": ["3", "2"],
        "ClientId": "",
        "Extra": {
            "AuthToken": "tok",
            "HeartbeatInterval": interval,
            "HeartbeatTolerance": tolerance,
        },
    }
    return muxado.data(
        1, protocol.stream_type(protocol.AUTH) + json.dumps(body).encode(), syn=True, fin=True
    )


async def _echoes(reader, parser, want: int, seconds: float = 5.0) -> bytes:
    """The bytes the edge wrote on the heartbeat stream (3) until ``want`` of them came."""
    got = b""
    async with asyncio.timeout(seconds):
        while len(got) < want:
            chunk = await reader.read(65536)
            assert chunk, "the session ended"
            for frame in parser.feed(chunk):
                if frame.type == muxado.DATA and frame.stream_id == 3:
                    got += frame.payload
    return got


def test_the_core_echoes_each_beat_and_a_session_that_beats_is_kept(monkeypatch):
    monkeypatch.setattr(agents, "HEARTBEAT_GRACE", 0.0)  # reaped past 1 s + 1 s

    async def run():
        session, task, reader, writer = await _session(SlowEdge(delay=0.0))
        writer.write(_auth(SECOND, SECOND))
        assert (await _answer(reader, 5))[0] == "reply"
        assert session.heartbeat == (1.0, 1.0)
        parser = muxado.FrameParser()
        writer.write(muxado.data(3, protocol.stream_type(protocol.HEARTBEAT) + b"id", syn=True))
        writer.write(muxado.data(3, b"01"))  # an id split over two frames is one beat
        assert await _echoes(reader, parser, 4) == b"id01"
        for n in range(5):  # 1.5 s of beats, checked between them: kept
            await asyncio.sleep(0.3)
            writer.write(muxado.data(3, b"id%02d" % (n + 2)))
            assert await _echoes(reader, parser, 4) == b"id%02d" % (n + 2)
            await session.check(None)
            assert not session.ended
        assert session.mux.beats == 6
        await asyncio.sleep(0.8)  # silent, but within interval + tolerance of the last beat
        await session.check(None)
        assert not session.ended
        while session.mux.since_beat <= 2.0:
            await asyncio.sleep(0.05)
        await session.check(None)  # past it: reaped
        assert session.ended
        assert await _answer(reader, 3) == ("goaway", "heartbeats stopped")
        task.cancel()

    asyncio.run(run())


def test_a_session_that_never_beats_is_reaped_from_its_start(monkeypatch):
    monkeypatch.setattr(agents, "HEARTBEAT_GRACE", 0.0)

    async def run():
        session, task, reader, writer = await _session(SlowEdge(delay=0.0))
        writer.write(_auth(SECOND, SECOND))
        assert (await _answer(reader, 5))[0] == "reply"
        assert session.mux.beats == 0
        while session.mux.since_beat <= 2.0:
            await asyncio.sleep(0.05)
        await session.check(None)
        assert session.ended
        task.cancel()

    asyncio.run(run())
