"""A session's end reaches the store even when the store fails at that moment (edge/agents.py):
with online state kept by instance leases, a session item the edge failed to remove stays
live as long as its instance renews its lease (its name claimed, listed by the API), not
ONLINE_STALE_SECONDS as when each session heartbeated its own item; so the removal is tried
again until it is done. The agent is played over a real socket pair; the edge around it is
a recorder whose first store calls at the end fail."""

import asyncio
import socket
import time

from chalicelib.core import online
from edge import agents, protocol
from stacks import muxado

from tests.unit.test_edge_auth_deadline import SlowEdge, _answer, _auth_frames, _session
from tests.unit.test_edge_session import attach


class FailingEndEdge(SlowEdge):
    def __init__(self, failures):
        super().__init__(delay=0.0)
        self.failures = failures
        self.ended = []
        self.tries = 0

    async def call(self, fn, *args, **kwargs):
        if fn is online.session_ended:
            self.tries += 1
            if self.tries <= self.failures:
                raise ConnectionError("the store is away")
            self.ended.append(args)
            return None
        return await super().call(fn, *args, **kwargs)


def test_a_session_end_the_store_refused_is_tried_again_until_done(monkeypatch):
    monkeypatch.setattr(agents, "AUTH_TIMEOUT", 5.0)
    monkeypatch.setattr(agents, "END_RETRY_SECONDS", 0.05)

    async def run():
        edge = FailingEndEdge(failures=3)
        session, task, reader, writer = await _session(edge)
        writer.write(_auth_frames())
        kind, body = await _answer(reader, 5)
        assert kind == "reply", (kind, body)
        writer.close()  # the agent goes away while the store is away
        await asyncio.wait_for(task, 5)
        assert edge.registry.sessions == {}
        for _ in range(200):
            if edge.ended:
                break
            await asyncio.sleep(0.05)
        assert edge.ended == [("acct_1", session.id, edge.settings.instance_id)]
        assert edge.tries == 4

    asyncio.run(run())


class RecordingEndEdge(SlowEdge):
    def __init__(self):
        super().__init__(delay=0.0)
        self.ended = []

    async def call(self, fn, *args, **kwargs):
        if fn is online.session_ended:
            self.ended.append(kwargs)
            return None
        return await super().call(fn, *args, **kwargs)


def _rpc_frame(stream_id, kind, body):
    return muxado.data(stream_id, protocol.U32.pack(kind) + body, syn=True, fin=True)


def test_a_session_with_nothing_under_it_ends_in_the_one_write(monkeypatch):
    """online.session_ended is told the credential (its one-write path) only for a session
    whose id the edge made at this Auth and on which no request came after it: a resumed id
    (ClientId) or any request past Auth (a Bind writes children under the session) takes
    the checked path."""
    monkeypatch.setattr(agents, "AUTH_TIMEOUT", 5.0)
    resumed = online.new_session_id()

    async def one(client_id, then=b""):
        edge = RecordingEndEdge()
        session, task, reader, writer = await _session(edge)
        writer.write(
            _rpc_frame(
                1,
                protocol.AUTH,
                b'{"Version": ["3"], "ClientId": "%s", "Extra": {"AuthToken": "t"}}'
                % client_id.encode(),
            )
        )
        kind, body = await _answer(reader, 5)
        assert kind == "reply", (kind, body)
        if then:
            writer.write(then)
            await asyncio.sleep(0.2)
        writer.close()
        await asyncio.wait_for(task, 5)
        assert len(edge.ended) == 1, edge.ended
        return edge.ended[0].get("unbound_credential")

    async def run():
        assert await one("") == "cr_1"
        assert await one(resumed) is None
        assert await one("", _rpc_frame(3, protocol.UNBIND, b'{"Id": "t_x"}')) is None

    asyncio.run(run())


class SlowStartEdge(SlowEdge):
    """The Auth's write of the session item takes 0.5 s in a worker thread (as the edge's
    store calls run: a cancelled caller does not stop the write), and the order in which the
    writes land is recorded."""

    def __init__(self):
        super().__init__(delay=0.0)
        self.landed = []

    async def call(self, fn, *args, **kwargs):
        if fn is online.session_started:

            def write():
                time.sleep(0.5)
                self.landed.append(("started", kwargs["session_id"]))

            return await asyncio.get_running_loop().run_in_executor(None, write)
        if fn is online.session_ended:
            self.landed.append(("ended", args[1]))
            return None
        return await super().call(fn, *args, **kwargs)


def test_a_session_that_ends_during_its_auths_write_is_removed_after_the_write(monkeypatch):
    """An agent gone while its Auth's session item is being written (the agent CLI closing the
    session it reconnected while it stops): the end's removal waits for that write, so no
    item is left that no session owns (listed by the API while the instance lives)."""
    monkeypatch.setattr(agents, "AUTH_TIMEOUT", 5.0)

    async def run():
        edge = SlowStartEdge()
        session, task, reader, writer = await _session(edge)
        writer.write(_auth_frames())
        await writer.drain()
        for _ in range(100):  # the Auth reached its write
            if session.id is not None:
                break
            await asyncio.sleep(0.01)
        assert session.id is not None
        writer.close()  # gone before the write lands
        await asyncio.wait_for(task, 5)
        for _ in range(100):
            if len(edge.landed) == 2:
                break
            await asyncio.sleep(0.05)
        assert edge.landed == [("started", session.id), ("ended", session.id)]

    asyncio.run(run())


def test_an_agent_gone_before_its_session_ran_leaves_nothing(monkeypatch):
    """The agent CLI stopping right after the reconnect that followed the edge's GOAWAY (its
    Auth sent, then gone): on a loaded edge the core hands the connection over and reports
    its Auth stream and its close in one batch (edge.carrier ``_take``), before the session's
    run() started, so the Auth's handler starts after the close and no close cancels it. The
    session ended with no id: its Auth registers nothing and writes no session item (one
    would stay listed while the instance lives; the edge's check loop no longer sees the
    session). tests/edge/test_cli_agent.py::test_stop_through_the_api_ends_the_cli failed so
    (the edge logged "session 127.0.0.1:<port> ends: peer went away", then the resumed id
    "authenticated", and nothing more of it)."""
    monkeypatch.setattr(agents, "AUTH_TIMEOUT", 5.0)

    async def run():
        edge = RecordingEndEdge()
        left, right = socket.socketpair()
        session = agents.AgentSession(edge, attach(left), ("127.0.0.1", 50000))
        right.sendall(_auth_frames())
        right.close()
        for _ in range(200):  # the core reported the Auth stream and the close: not run yet
            if session.mux.disconnected:
                break
            await asyncio.sleep(0.01)
        assert session.mux.disconnected
        await asyncio.wait_for(session.run(), 5)
        await asyncio.sleep(0.5)  # the Auth's handler (store calls take no time) is done
        assert edge.registry.sessions == {}
        assert edge.started_sessions == [] and edge.ended == []
        assert session.id is None

    asyncio.run(run())
