"""The Auth deadline of an agent session (edge/agents.py): the request must *arrive* within
AUTH_TIMEOUT; once it has, a slow store does not cut the session before its answer (it has
until AUTH_ANSWER_TIMEOUT); a session that ends while its Auth reads the store registers
nothing (ending cancels its streams' handlers); the periodic check leaves a session alone
until its online item is written (a heartbeat before that found no item and ended it). The agent is played over a real socket pair; the edge around the session is a
recorder whose store calls take the time the test gives them."""

import asyncio
import socket
import time
from types import SimpleNamespace

import pytest

from chalicelib.core import binding, online
from edge import agents, protocol, quotas
from stacks import muxado
from tests.unit.test_edge_session import attach


class SlowEdge:
    """What AgentSession asks of the edge, with store calls that each take ``delay``."""

    def __init__(self, delay):
        self.delay = delay
        self.registry = SimpleNamespace(sessions={}, by_id={})
        self.settings = SimpleNamespace(
            limits=quotas.Limits(), instance_id="edge_test", region="local"
        )
        self.auth_throttle = quotas.AuthThrottle(20)
        self.cluster = None  # one instance
        self.started_sessions = []
        self.router = SimpleNamespace(ip_restrictions=_no_ip_restrictions)  # edge.ip_restrictions

    async def call(self, fn, *args, **kwargs):
        await asyncio.sleep(self.delay)
        if fn is binding.authenticate:
            return binding.Grant("acct_1", "cr_1", "usr_1", "user")
        if fn is online.session_started:
            self.started_sessions.append(kwargs["session_id"])
        return 0

    def authenticated(self, session):
        pass

    @property
    def binds(self):
        return self

    async def drop_tunnel(self, tunnel, remember=False):
        pass


async def _session(edge):
    left, right = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=right)
    session = agents.AgentSession(edge, attach(left), ("127.0.0.1", 50000))
    task = asyncio.ensure_future(session.run())
    return session, task, reader, writer


def _auth_frames():
    body = (
        protocol.U32.pack(protocol.AUTH) + b'{"Version": ["3", "2"], "ClientId": "", '
        b'"Extra": {"AuthToken": "tok"}}'
    )
    return muxado.data(1, body, syn=True, fin=True)


async def _answer(reader, seconds):
    """The Auth reply's JSON, or the GOAWAY that ended the session, within ``seconds``."""
    parser = muxado.FrameParser()
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
        except asyncio.TimeoutError:
            break
        if not chunk:
            return ("closed", None)
        for frame in parser.feed(chunk):
            if frame.type == muxado.GOAWAY:
                return ("goaway", frame.message.decode())
            if frame.type == muxado.DATA and frame.stream_id == 1:
                data += frame.payload
                if frame.fin:
                    return ("reply", data)
    return ("nothing", data)


@pytest.fixture
def short_deadlines(monkeypatch):
    monkeypatch.setattr(agents, "AUTH_TIMEOUT", 0.5)
    monkeypatch.setattr(agents, "AUTH_ANSWER_TIMEOUT", 5.0)


def test_an_auth_that_arrived_in_time_is_answered_however_slow_the_store(short_deadlines):
    async def run():
        edge = SlowEdge(delay=0.4)  # three reads before the answer: 1.2 s > AUTH_TIMEOUT
        session, task, reader, writer = await _session(edge)
        await asyncio.sleep(0.2)
        writer.write(_auth_frames())
        kind, body = await _answer(reader, 5)
        assert kind == "reply", (kind, body)
        assert b'"ClientId"' in body and session.grant is not None
        assert edge.started_sessions == [session.id]
        await session.end("test over")
        task.cancel()

    asyncio.run(run())


def test_no_auth_by_the_deadline_ends_the_session(short_deadlines):
    async def run():
        edge = SlowEdge(delay=0.0)
        session, task, reader, writer = await _session(edge)
        kind, message = await _answer(reader, 3)
        assert (kind, message) == ("goaway", "no Auth in time")
        assert session.grant is None and edge.registry.sessions == {}
        task.cancel()

    asyncio.run(run())


def test_a_session_ended_while_its_auth_reads_the_store_registers_nothing(short_deadlines):
    async def run():
        edge = SlowEdge(delay=0.3)
        session, task, reader, writer = await _session(edge)
        writer.write(_auth_frames())
        await asyncio.sleep(0.45)  # the first store read is done, not the others
        await session.end("operator stop")
        await asyncio.sleep(1.2)  # the Auth's reads finish after the end
        assert edge.registry.sessions == {} and edge.started_sessions == []
        assert session.grant is None
        task.cancel()

    asyncio.run(run())


def test_an_arrived_auth_still_unanswered_at_the_answer_deadline_ends_the_session(short_deadlines):
    async def run():
        edge = SlowEdge(delay=10.0)  # a store that does not answer
        session, task, reader, writer = await _session(edge)
        writer.write(_auth_frames())
        await asyncio.sleep(0.8)  # past AUTH_TIMEOUT: still waiting, not cut
        assert not session.ended
        session.started -= agents.AUTH_ANSWER_TIMEOUT  # as if the answer deadline passed
        await session.check(None)
        assert session.ended
        kind, message = await _answer(reader, 3)
        assert (kind, message) == ("goaway", "Auth not answered in time")
        task.cancel()

    asyncio.run(run())


def test_a_check_while_the_online_item_is_being_written_leaves_the_session(short_deadlines):
    async def run():
        edge = SlowEdge(delay=0.3)
        session, task, reader, writer = await _session(edge)
        writer.write(_auth_frames())
        await asyncio.sleep(1.05)  # three reads done (0.9 s), session_started under way
        assert session.grant is not None and edge.started_sessions == []
        await session.check(None)  # the edge's periodic check, this moment
        assert not session.ended
        kind, body = await _answer(reader, 5)
        assert kind == "reply", (kind, body)
        await session.check(None)  # from now on its lease keeps the item live
        assert not session.ended
        await session.end("test over")
        task.cancel()

    asyncio.run(run())


async def _no_ip_restrictions(account_id):
    return []  # the account has no /ip_restrictions
