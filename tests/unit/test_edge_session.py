"""edge/session.py's flow control and write batching, against a peer on a real socket pair.

The test plays the agent: it writes muxado frames on one end of a connected socket pair and
reads what the edge's MuxSession writes on the other.
"""
import asyncio
import socket

import pytest

from edge import muxado, session
from edge.session import MuxSession


class Peer:
    """The agent's end: raw frames out, parsed frames in."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.parser = muxado.FrameParser()
        self.frames = []

    def send(self, frame: bytes) -> None:
        self.writer.write(frame)

    async def collect(self, seconds: float = 0.2) -> list:
        """Frames that arrive within ``seconds``; the list of each recv() call's frames."""
        batches = []
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
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


async def _pair(on_stream):
    left, right = socket.socketpair()
    edge_reader, edge_writer = await asyncio.open_connection(sock=left)
    peer_reader, peer_writer = await asyncio.open_connection(sock=right)
    mux = MuxSession(edge_reader, edge_writer, on_stream, name="test")
    task = asyncio.ensure_future(mux.run())
    return mux, task, Peer(peer_reader, peer_writer)


def _wndincs(batches, stream_id):
    return [f.increment for batch in batches for f in batch
            if f.type == muxado.WNDINC and f.stream_id == stream_id]


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("consumed, credited", [
    (session.CREDIT_BATCH - 1, []),                                   # below: no frame yet
    (session.CREDIT_BATCH, [session.CREDIT_BATCH]),                  # at the batch: one
    (2 * session.CREDIT_BATCH - 1, [session.CREDIT_BATCH]),          # the rest is held
    (2 * session.CREDIT_BATCH, [session.CREDIT_BATCH] * 2),          # two batches, two
])
def test_credit_is_returned_once_a_batch_of_bytes_is_consumed(consumed, credited):
    async def main():
        read_all = asyncio.Event()

        async def on_stream(stream):
            got = 0
            while got < consumed:
                got += len(await stream.read(4096))
            read_all.set()
            await asyncio.sleep(5)

        mux, task, peer = await _pair(on_stream)
        payload = b"x" * consumed
        peer.send(muxado.data(1, payload[:1000], syn=True))
        for at in range(1000, consumed, 32 * 1024):
            peer.send(muxado.data(1, payload[at:at + 32 * 1024]))
        await asyncio.wait_for(read_all.wait(), 5)
        increments = _wndincs(await peer.collect(), 1)
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

        mux, task, peer = await _pair(on_stream)
        credit, sent, first = muxado.DEFAULT_WINDOW, 0, True
        while sent < total:
            size = min(16 * 1024, credit, total - sent)
            if size == 0:   # out of credit: wait for the WNDINC the reads give back
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
        mux, task, peer = await _pair(lambda stream: asyncio.sleep(0))
        for sid in (2, 4, 6):
            mux.send_nowait(muxado.rst(sid, muxado.E_STREAM_CANCELLED))
        batches = await peer.collect()
        await mux.close()
        task.cancel()
        return [[f.stream_id for f in batch] for batch in batches]

    assert _run(main()) == [[2, 4, 6]]


def test_frames_queued_before_close_are_still_sent():
    async def main():
        mux, task, peer = await _pair(lambda stream: asyncio.sleep(0))
        mux.send_nowait(muxado.rst(2, muxado.E_STREAM_CANCELLED))
        await mux.close()
        batches = await peer.collect()
        task.cancel()
        return [(f.type, f.stream_id) for batch in batches for f in batch]

    assert _run(main()) == [(muxado.RST, 2)]


def test_a_write_on_a_session_whose_connection_is_closing_raises_at_once():
    async def main():
        mux, task, peer = await _pair(lambda stream: asyncio.sleep(0))
        stream = mux.open_stream()
        await stream.write(b"before")          # a live connection takes it
        mux._writer.transport.close()          # lost; the read loop has not noticed yet
        with pytest.raises(session.StreamReset):
            await asyncio.wait_for(stream.write(b"after"), 1)
        peer.writer.close()
        await task
    _run(main())
