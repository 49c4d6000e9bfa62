"""An agent session's rules (edge_core/src/mux.rs, through edge/session.py's MuxSession),
against a peer on a real socket pair: flow control, write batching, how streams end, the
stream caps and the bounds before authentication. edge_core/tests/mux.rs pins each rule in
the core itself; these pin them again as the edge's Python sees them.

The test plays the agent: it writes muxado frames on one end of a connected socket pair and
reads what the core's session (``Carrier.attach``) writes on the other.

Timing: what a test expects to arrive it waits for, until it arrives (bound WAIT, 5 s, far
above the milliseconds it takes on a quiet machine, so that a loaded CI worker is not a
failure); a short quiet window (0.1-0.3 s) is used only to show that something does *not*
arrive, where a slow machine can only make the test pass, never fail.
"""

import asyncio
import socket

import pytest

from edge import carrier, session
from stacks import muxado


class Peer:
    """The agent's end: raw frames out, parsed frames in."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.parser = muxado.FrameParser()
        self.frames = []

    def send(self, frame: bytes) -> None:
        self.writer.write(frame)

    async def collect(self, seconds: float = 0.2, until=None) -> list:
        """Frames that arrive within ``seconds``, the list of each recv() call's frames; with
        ``until`` (a test on the frames so far, as ``_frames`` gives them), as soon as it
        holds, waiting up to WAIT for it."""
        batches = []
        loop = asyncio.get_running_loop()
        end = loop.time() + (WAIT if until else seconds)
        while True:
            if until is not None and until(_frames(batches)):
                return batches
            left = end - loop.time()
            if left <= 0:
                return batches
            try:
                chunk = await asyncio.wait_for(self.reader.read(1 << 20), left)
            except asyncio.TimeoutError:
                return batches
            if not chunk:
                return batches
            batches.append(self.parser.feed(chunk))


WAIT = 5.0


async def eventually(condition, seconds: float = WAIT) -> None:
    """Returns once ``condition()`` holds; fails after ``seconds``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not condition():
        assert loop.time() < end, "the condition did not hold within the wait"
        await asyncio.sleep(0.01)


def has(frame):
    return lambda frames: frame in frames


def attach(sock: socket.socket) -> session.MuxSession:
    """A session run by a core of its own over ``sock`` (one end of a socket pair)."""
    core = carrier.Carrier(1)
    core.start(asyncio.get_running_loop())
    return core.attach(sock, name="test")


async def agent_pair(on_stream, authenticated=True):
    """A session run by the core (``on_stream`` its handler of the agent's streams), its
    ``run`` task and the :class:`Peer` that plays the agent."""
    left, right = socket.socketpair()
    peer_reader, peer_writer = await asyncio.open_connection(sock=right)
    mux = attach(left)
    mux.on_stream = on_stream
    if authenticated:
        mux.authenticate()
    task = asyncio.ensure_future(mux.run())
    return mux, task, Peer(peer_reader, peer_writer)


def _wndincs(batches, stream_id):
    return [
        f.increment
        for batch in batches
        for f in batch
        if f.type == muxado.WNDINC and f.stream_id == stream_id
    ]


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize(
    "consumed, credited",
    [
        (session.CREDIT_BATCH - 1, []),  # below: no frame yet
        (session.CREDIT_BATCH, [session.CREDIT_BATCH]),  # at the batch: one
        (2 * session.CREDIT_BATCH - 1, [session.CREDIT_BATCH]),  # the rest is held
        (2 * session.CREDIT_BATCH, [session.CREDIT_BATCH] * 2),  # two batches, two
    ],
)
def test_credit_is_returned_once_a_batch_of_bytes_is_consumed(consumed, credited):
    async def main():
        read_all = asyncio.Event()

        async def on_stream(stream):
            # all of it first (the core reads the peer while the handler runs): the reads of
            # 4096 bytes then line up with the batch, as the expected increments assume
            await eventually(lambda: stream.buffered == consumed)
            got = 0
            while got < consumed:
                got += len(await stream.read(4096))
            read_all.set()
            await asyncio.sleep(5)

        mux, task, peer = await agent_pair(on_stream)
        payload = b"x" * consumed
        peer.send(muxado.data(1, payload[:1000], syn=True))
        for at in range(1000, consumed, 32 * 1024):
            peer.send(muxado.data(1, payload[at : at + 32 * 1024]))
        await asyncio.wait_for(read_all.wait(), WAIT)
        batches = await peer.collect(until=lambda f: _count(f, muxado.WNDINC) >= len(credited))
        batches += await peer.collect(0.2)  # and no more than those
        increments = _wndincs(batches, 1)
        await mux.close()
        task.cancel()
        return increments

    assert _run(main()) == credited


def test_a_peer_that_keeps_within_the_credit_it_got_is_never_refused():
    """Three windows' worth through one stream: the batched credit keeps the peer going and
    the session never sees more than the window in flight (no GOAWAY)."""

    async def main():
        total = 3 * muxado.DEFAULT_WINDOW
        received = bytearray()
        done = asyncio.Event()

        async def on_stream(stream):
            while len(received) < total:
                chunk = await stream.read()
                if not chunk:
                    break
                received.extend(chunk)
            done.set()

        mux, task, peer = await agent_pair(on_stream)
        credit, sent, first = muxado.DEFAULT_WINDOW, 0, True
        while sent < total:
            size = min(16 * 1024, credit, total - sent)
            if size == 0:  # out of credit: wait for the WNDINC the reads give back
                batches = await peer.collect(0.5)
                assert not any(f.type == muxado.GOAWAY for b in batches for f in b)
                credit += sum(_wndincs(batches, 1))
                continue
            peer.send(muxado.data(1, b"y" * size, syn=first))
            first = False
            credit -= size
            sent += size
        await asyncio.wait_for(done.wait(), 5)
        closed = mux.closed
        await mux.close()
        task.cancel()
        return len(received), closed

    assert _run(main()) == (3 * muxado.DEFAULT_WINDOW, False)


def test_frames_written_in_one_turn_leave_in_one_write():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        for stream in [mux.open_stream() for _ in range(3)]:
            await stream.write(b"x")  # queued: the session is flushed at the turn's end
        batches = await peer.collect(until=lambda f: _count(f, muxado.DATA) == 3)
        await mux.close()
        task.cancel()
        return [[f.stream_id for f in batch] for batch in batches]

    assert _run(main()) == [[2, 4, 6]]


def test_frames_queued_before_close_are_still_sent():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"x")
        stream.reset()  # FIN and RST queued, not flushed yet
        await mux.close()
        batches = await peer.collect(until=lambda f: _count(f, muxado.RST) == 1)
        task.cancel()
        return [(f.type, f.stream_id) for batch in batches for f in batch]

    assert _run(main()) == [(muxado.DATA, 2), (muxado.DATA, 2), (muxado.RST, 2)]


def test_a_write_on_a_session_whose_connection_was_lost_raises():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"before")  # a live connection takes it
        peer.writer.close()  # lost
        await eventually(lambda: mux.closed)
        with pytest.raises(session.StreamReset):
            await asyncio.wait_for(stream.write(b"after"), 1)
        await task
        return mux.close_reason

    reason = _run(main())  # the read side or the write side may notice first
    assert reason == "peer closed the connection" or reason.startswith("connection lost:")


def test_go_away_returns_once_its_goaway_is_written():
    """An edge that stops right after ending its sessions still tells each agent why: go_away
    returns once the core wrote the GOAWAY and closed the connection."""

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(5))
        peer.send(muxado.data(3, b"x", syn=True))
        await eventually(lambda: mux.remote_open == 1)
        await mux.go_away(muxado.E_NONE, "the edge is shutting down")
        disconnected = mux.disconnected
        batches = await peer.collect(until=lambda f: _count(f, muxado.GOAWAY) >= 1)
        goaway = [f for batch in batches for f in batch if f.type == muxado.GOAWAY]
        eof = await asyncio.wait_for(peer.reader.read(), WAIT) == b""
        await task
        return disconnected, [(f.last_stream_id, f.error_code, f.message) for f in goaway], eof

    assert _run(main()) == (True, [(3, muxado.E_NONE, b"the edge is shutting down")], True)


# ---- how streams end (the agents count a stream open until their side is done) -------------
def _frames(batches):
    return [
        (f.type, f.stream_id, f.flags, f.error_code if f.type == muxado.RST else None)
        for batch in batches
        for f in batch
    ]


def _count(frames, kind):
    return sum(1 for f in frames if f[0] == kind)


FIN_FRAME = lambda sid: (muxado.DATA, sid, muxado.FIN, None)  # noqa: E731
RST_FRAME = lambda sid, code: (muxado.RST, sid, 0, code)  # noqa: E731


def test_a_finished_stream_sends_fin_and_stays_until_the_peers_fin():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"request")
        stream.finish()
        sent = _frames(await peer.collect(until=has(FIN_FRAME(2))))
        held = (mux.open_streams, mux.local_open, mux.lingering)
        peer.send(muxado.data(stream.id, b"", fin=True))
        await eventually(lambda: mux.open_streams == 0)
        after = (mux.open_streams, mux.local_open, mux.lingering)
        await mux.close()
        task.cancel()
        return sent, held, after

    sent, held, after = _run(main())
    assert sent == [(muxado.DATA, 2, muxado.SYN, None), FIN_FRAME(2)]
    assert held == (1, 1, 1)
    assert after == (0, 0, 0)


def test_data_after_finish_is_refused_with_rst_and_the_stream_leaves():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"request")
        peer.send(muxado.data(stream.id, b"part of a response"))
        await eventually(lambda: stream.buffered)  # the edge holds it, unread
        stream.finish()  # unread bytes are dropped, not an error
        peer.send(muxado.data(stream.id, b"more"))
        sent = _frames(await peer.collect(until=has(RST_FRAME(2, muxado.E_STREAM_CLOSED))))
        table = mux.open_streams
        await mux.close()
        task.cancel()
        return sent, table

    sent, table = _run(main())
    assert sent[-2:] == [FIN_FRAME(2), RST_FRAME(2, muxado.E_STREAM_CLOSED)]
    assert table == 0


def test_a_finished_stream_without_the_peers_fin_is_reset_after_the_linger(monkeypatch):
    monkeypatch.setattr(session, "LINGER_SECONDS", 1.0)  # far above the FIN's way out

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"request")
        stream.finish()
        early = (_frames(await peer.collect(until=has(FIN_FRAME(2)))), mux.open_streams)
        reset = RST_FRAME(2, muxado.E_STREAM_CANCELLED)
        late = (_frames(await peer.collect(until=has(reset))), mux.open_streams)
        await mux.close()
        task.cancel()
        return early, late

    early, late = _run(main())
    assert early == ([(muxado.DATA, 2, muxado.SYN, None), FIN_FRAME(2)], 1)
    assert late == ([RST_FRAME(2, muxado.E_STREAM_CANCELLED)], 0)


def test_reset_sends_fin_before_rst():
    """ngrok-rust drops a FIN that arrives after an RST, and never ends a stream it only got
    an RST on while its upstream is idle: the FIN must come first."""

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"request")
        stream.reset()
        sent = _frames(await peer.collect(until=lambda f: _count(f, muxado.RST) == 1))
        table = mux.open_streams
        await mux.close()
        task.cancel()
        return sent, table

    sent, table = _run(main())
    assert sent == [
        (muxado.DATA, 2, muxado.SYN, None),
        FIN_FRAME(2),
        RST_FRAME(2, muxado.E_STREAM_CANCELLED),
    ]
    assert table == 0


@pytest.mark.parametrize("end", ["finish", "reset"])
def test_a_stream_the_peer_never_heard_of_ends_without_a_frame(end):
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        getattr(stream, end)()
        sent = _frames(await peer.collect())
        table = mux.open_streams
        await mux.close()
        task.cancel()
        return sent, table

    assert _run(main()) == ([], 0)


def test_a_handler_that_returns_finishes_its_stream():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: stream.read())
        peer.send(muxado.data(1, b"x", syn=True))
        sent = _frames(await peer.collect(until=has(FIN_FRAME(1))))
        held = mux.open_streams
        peer.send(muxado.data(1, b"", fin=True))
        await eventually(lambda: mux.open_streams == 0)
        after = mux.open_streams
        await mux.close()
        task.cancel()
        return sent, held, after

    assert _run(main()) == ([FIN_FRAME(1)], 1, 0)


def test_opening_past_the_cap_waits_for_a_slot(monkeypatch):
    monkeypatch.setattr(session, "MAX_LOCAL_STREAMS", 3)

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        streams = [mux.open_stream() for _ in range(3)]
        for stream in streams:
            await stream.write(b"x")
        with pytest.raises(session.StreamsExhausted):
            mux.open_stream()
        with pytest.raises(session.StreamsExhausted):
            await mux.open_stream_when_free(0.1)
        waiter = asyncio.ensure_future(mux.open_stream_when_free(5))
        await asyncio.sleep(0.1)
        pending = not waiter.done()
        streams[0].finish()  # a finished stream still holds its slot
        await asyncio.sleep(0.1)
        still = not waiter.done()
        peer.send(muxado.data(streams[0].id, b"", fin=True))  # until the agent's FIN
        opened = await asyncio.wait_for(waiter, 2)
        await mux.close()
        task.cancel()
        return pending, still, opened.id, mux.local_open

    assert _run(main()) == (True, True, 8, 0)


def test_the_peers_stream_limit_counts_only_the_peers_streams(monkeypatch):
    monkeypatch.setattr(session, "MAX_STREAMS", 2)
    monkeypatch.setattr(session, "MAX_LOCAL_STREAMS", 2)

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(5))
        for _ in range(2):  # ours, at their own cap
            await mux.open_stream().write(b"x")
        for sid in (1, 3, 5):  # the peer's: two fit, the third is refused
            peer.send(muxado.data(sid, b"x", syn=True))
        sent = _frames(await peer.collect(until=lambda f: _count(f, muxado.RST) >= 1))
        sent += _frames(await peer.collect(0.2))  # and no second refusal
        counts = (mux.local_open, mux.remote_open)
        await mux.close()
        task.cancel()
        return [f for f in sent if f[0] == muxado.RST], counts

    assert _run(main()) == ([RST_FRAME(5, muxado.E_STREAMS_EXHAUSTED)], (2, 2))


def test_a_session_that_ends_releases_openers_waiting_for_a_slot(monkeypatch):
    monkeypatch.setattr(session, "MAX_LOCAL_STREAMS", 1)

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        await mux.open_stream().write(b"x")
        waiter = asyncio.ensure_future(mux.open_stream_when_free(5))
        await asyncio.sleep(0.05)
        await mux.close()
        task.cancel()
        with pytest.raises(session.StreamReset) as caught:
            await asyncio.wait_for(waiter, 1)
        return type(caught.value), mux.local_open

    assert _run(main()) == (session.StreamReset, 0)


# ---- before authentication: what a peer may make the edge hold ------------------------------
def _goaway(batches):
    return [
        (f.error_code, f.message.decode())
        for batch in batches
        for f in batch
        if f.type == muxado.GOAWAY
    ]


@pytest.mark.parametrize(
    "sent, refused",
    [
        (session.PRE_AUTH_BYTES, False),  # exactly the bound: held
        (session.PRE_AUTH_BYTES + 1, True),  # one byte more: the session ends
    ],
)
def test_bytes_before_authentication_are_bounded(sent, refused):
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(5), authenticated=False)
        chunk = 8 * 1024
        peer.send(muxado.data(1, b"a" * min(chunk, sent), syn=True))
        at = min(chunk, sent)
        while at < sent:
            size = min(chunk, sent - at)
            peer.send(muxado.data(1, b"a" * size))
            at += size
        if refused:
            batches = await peer.collect(until=lambda f: _count(f, muxado.GOAWAY) >= 1)
        else:  # a quiet window: on a slow machine this can only pass, never fail
            batches = await peer.collect(0.3)
        goaway = _goaway(batches)
        closed = mux.closed
        await mux.close()
        task.cancel()
        return goaway, closed

    goaway, closed = _run(main())
    assert closed is refused
    assert goaway == (
        [
            (
                muxado.E_ENHANCE_YOUR_CALM,
                f"protocol error: more than {session.PRE_AUTH_BYTES} bytes before authentication",
            )
        ]
        if refused
        else []
    )


def test_a_frame_larger_than_the_pre_authentication_bound_is_refused_at_its_header():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(5), authenticated=False)
        # only the header of a 64 KiB frame: refused before any of its payload is buffered
        peer.send(muxado.HEADER.pack((64 * 1024 << 8) | (muxado.DATA << 4) | muxado.SYN, 1))
        goaway = _goaway(await peer.collect(until=lambda f: _count(f, muxado.GOAWAY) >= 1))
        await mux.close()
        task.cancel()
        return goaway

    assert [code for code, _ in _run(main())] == [muxado.E_FLOW_CONTROL]


def test_streams_before_authentication_are_bounded():
    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(5), authenticated=False)
        for n in range(session.PRE_AUTH_STREAMS):
            peer.send(muxado.data(2 * n + 1, b"x", syn=True))
        await eventually(lambda: mux.remote_open == session.PRE_AUTH_STREAMS)
        early = (_goaway(await peer.collect(0.2)), mux.remote_open)
        peer.send(muxado.data(2 * session.PRE_AUTH_STREAMS + 1, b"x", syn=True))
        late = _goaway(await peer.collect(until=lambda f: _count(f, muxado.GOAWAY) >= 1))
        await mux.close()
        task.cancel()
        return early, late

    early, late = _run(main())
    assert early == ([], session.PRE_AUTH_STREAMS)
    assert late == [
        (
            muxado.E_ENHANCE_YOUR_CALM,
            f"protocol error: more than {session.PRE_AUTH_STREAMS} streams before authentication",
        )
    ]


def test_authentication_lifts_the_bounds():
    async def main():
        mux, task, peer = await agent_pair(
            lambda stream: stream.read(1 << 20), authenticated=False
        )
        mux.authenticate()
        for sid in (1, 3, 5):
            peer.send(muxado.data(sid, b"z" * (64 * 1024), syn=True))
        goaway = _goaway(await peer.collect(0.3))
        closed = mux.closed
        await mux.close()
        task.cancel()
        return goaway, closed

    assert _run(main()) == ([], False)


def test_a_slot_comes_back_slot_grace_after_the_agents_fin(monkeypatch):
    """ngrok-rust removes a stream from its table after its FIN, when its application drops
    it: a slot freed by the FIN is given back SLOT_GRACE later, so a burst never opens more
    streams than the agent still counts (its muxado ends the session on a SYN past 512)."""
    monkeypatch.setattr(session, "MAX_LOCAL_STREAMS", 2)
    monkeypatch.setattr(session, "SLOT_GRACE", 0.3)

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        loop = asyncio.get_running_loop()
        streams = [mux.open_stream() for _ in range(2)]
        for stream in streams:
            await stream.write(b"x")
        streams[0].finish()
        peer.send(muxado.data(streams[0].id, b"", fin=True))
        await eventually(lambda: mux.local_open == 1)
        table, cooling = mux.local_open, mux.cooling
        with pytest.raises(session.StreamsExhausted):
            mux.open_stream()  # left the table, still in its grace
        started = loop.time()
        opened = await mux.open_stream_when_free(5)
        waited = loop.time() - started
        await mux.close()
        task.cancel()
        return table, cooling, opened.id, waited >= 0.2

    assert _run(main()) == (1, 1, 6, True)


def test_a_stream_the_agent_never_heard_of_gives_its_slot_back_at_once(monkeypatch):
    monkeypatch.setattr(session, "MAX_LOCAL_STREAMS", 1)
    monkeypatch.setattr(session, "SLOT_GRACE", 30)

    async def main():
        mux, task, peer = await agent_pair(lambda stream: asyncio.sleep(0))
        mux.open_stream().finish()  # nothing sent: forgotten, no grace
        again = mux.open_stream()
        cooling = mux.cooling
        await mux.close()
        task.cancel()
        return again.id, cooling

    assert _run(main()) == (4, 0)
