"""What an agent that does not read can make the edge hold (edge_core/src/mux.rs, through
edge/session.py; edge_core/tests/mux.rs pins the rule in the core): frames the edge
answers with no wait of its own (an RST for each SYN past the peer's MAX_STREAMS, for data
on a finished stream, WNDINCs) pile up in the connection's write buffer while the agent
sends and never reads. Past UNSENT_PAUSE_AT unsent bytes the edge stops reading the agent
until they drain: what it holds stays bounded, and the session goes on once the agent
reads again. The test plays the agent on a real socket pair."""

import asyncio
import socket

from edge import session
from stacks import muxado
from tests.unit.test_edge_session import attach

UNSENT_PAUSE_AT = 1024 * 1024  # docs/SECURITY.md
READ_AT_ONCE = 16 * 1024  # the core reads at most this per call (edge_core: READ_CHUNK)
RST_SIZE = 12  # an RST frame: 8-byte header, 4-byte code
SYN_SIZE = 8  # an empty DATA frame with SYN


def test_an_agent_that_never_reads_cannot_grow_the_edges_write_buffer(monkeypatch):
    monkeypatch.setattr(session, "MAX_STREAMS", 1)

    async def main():
        left, right = socket.socketpair()
        peer_reader, peer_writer = await asyncio.open_connection(sock=right)
        mux = attach(left)
        mux.on_stream = lambda s: asyncio.sleep(60)
        mux.authenticate()
        task = asyncio.ensure_future(mux.run())
        syns = 250_000  # every one past the first is refused with an RST: 3 MB of them, three
        # times the bound (600,000 took 35 s of the in-process run for no stronger proof)
        last = 2 * syns - 1
        peer_writer.write(b"".join(muxado.data(sid, syn=True) for sid in range(1, last + 1, 2)))
        held = 0
        for _ in range(60):  # what the edge holds once it has handled what it could
            await asyncio.sleep(0.1)
            held = max(held, mux.unsent)
        bound = UNSENT_PAUSE_AT + READ_AT_ONCE // SYN_SIZE * RST_SIZE
        assert held <= bound, (held, bound)
        got = 0  # the agent reads again: the edge reads the rest, answering each SYN
        parser = muxado.FrameParser()
        while mux.last_remote_id < last:
            chunk = await asyncio.wait_for(peer_reader.read(1 << 20), 20)
            assert chunk, "the session ended"
            got += sum(1 for f in parser.feed(chunk) if f.type == muxado.RST)
        assert not mux.closed
        await mux.close()
        task.cancel()
        return held

    held = asyncio.run(asyncio.wait_for(main(), 120))
    print(f"write buffer held at most {held} bytes")
