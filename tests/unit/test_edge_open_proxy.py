"""edge/agents.py ``open_proxy``: a stream opened for a public connection whose opener fails or
is cancelled (its client went away) before the header is written leaves nothing behind: it is
not held in the session's table, where it would take one of the MAX_LOCAL_STREAMS slots (and,
once the agent heard of it, its upstream connection) until the session ends."""

import asyncio
import types

import pytest

from stacks import muxado
from edge.agents import AgentSession
from edge.session import MuxStream
from tests.unit.test_edge_session import agent_pair, _run

TUNNEL = types.SimpleNamespace(id="tn_1", proxy_proto="")


async def _open_cut(monkeypatch, written_before_cut: int):
    """open_proxy on a real session whose header write is cut (CancelledError) after
    ``written_before_cut`` bytes went out; the session and the agent's end."""
    original = MuxStream.write

    async def cut(self, payload):
        if written_before_cut:
            await original(self, payload[:written_before_cut])
        raise asyncio.CancelledError()

    mux, task, peer = await agent_pair(lambda stream: None)
    monkeypatch.setattr(MuxStream, "write", cut)
    opener = types.SimpleNamespace(mux=mux)
    with pytest.raises(asyncio.CancelledError):
        await AgentSession.open_proxy(opener, TUNNEL, "203.0.113.1:5000", "http")
    return mux, task, peer


def test_a_stream_cut_before_anything_was_sent_leaves_the_table(monkeypatch):
    async def main():
        mux, task, peer = await _open_cut(monkeypatch, 0)
        assert mux.open_streams == 0
        assert await peer.collect() == []  # the agent never heard of it
        task.cancel()

    _run(main())


def test_a_stream_cut_after_its_syn_is_finished(monkeypatch):
    async def main():
        mux, task, peer = await _open_cut(monkeypatch, 1)
        assert mux.lingering == 1  # FIN sent, waiting for the agent's (LINGER_SECONDS)
        frames = [f for batch in await peer.collect() for f in batch]
        fins = [f for f in frames if f.type == muxado.DATA and f.fin]
        assert [f.stream_id for f in fins] == [2], frames
        task.cancel()

    _run(main())
