"""Stop/restart asked through the API, between the API's side (chalicelib.core.online: the
command, its deadline, the wait for the answer) and the edge's (edge/server.py: the command
loop, apart from the check loop), against moto's in-process DynamoDB. The edge is the real
``edge.server.Edge`` (its listeners not started): only its command loop runs. The agent's side
(a real SDK accepting or refusing) is tests/edge/test_remote_commands.py."""

import asyncio
import threading
import time

import pytest

from chalicelib.core import online
from edge import agents, config, server

ACCT = "acct_1"
INSTANCE = "edge_cmd"


@pytest.fixture
def queries(store_env):
    """The Queries of the command partition of INSTANCE, as the store client sends them."""
    seen = []

    def count(model=None, params=None, **kwargs):
        values = (params or {}).get("ExpressionAttributeValues", {})
        if getattr(model, "name", "") == "Query" and values.get(":p", {}).get("S") == (
            online.COMMAND_PK + INSTANCE
        ):
            seen.append(time.monotonic())

    client = online.raw_client()
    client.meta.events.register("before-parameter-build.dynamodb.*", count)
    yield seen
    client.meta.events.unregister("before-parameter-build.dynamodb.*", count)


def _edge(tmp_path, **env):
    settings = config.load({"DATA_DIR": str(tmp_path), "EDGE_INSTANCE_ID": INSTANCE, **env})
    return server.Edge(settings)


def _session(instance_id=INSTANCE):
    sid = online.new_session_id()
    online.session_started(
        account_id=ACCT,
        session_id=sid,
        credential_id="cr_x",
        instance_id=instance_id,
        agent_version="1.4.0",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    return sid


def _run_loop(edge, seconds, during=None):
    """The edge's command loop for ``seconds``; ``during()`` runs meanwhile in a thread (as
    the API would, in its own process) and its result is returned."""
    out = {}

    async def main():
        loop = asyncio.ensure_future(edge._command_loop())
        worker = None
        if during is not None:
            worker = threading.Thread(target=lambda: out.update(value=during()))
            worker.start()
        await asyncio.sleep(seconds)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await asyncio.gather(*edge._commands, return_exceptions=True)
        if worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, worker.join)

    asyncio.run(main())
    edge.carrier.stop()
    return out.get("value")


def test_an_idle_edge_reads_its_commands_once_per_poll_second(tmp_path, queries):
    """The poll's whole cost: one Query a second (EDGE_COMMAND_POLL_SECONDS, default 1),
    whatever the number of sessions, and no write while nothing is asked.

    Timing: the cost is the bound pinned here (never two Queries less than 0.9 s apart, so at
    most 3 in 3.5 s); that the poll goes on is checked by a second Query within the 3.5 s,
    not by how late each came (a loaded machine delayed one past 1.5 s, in a run of the unit
    tests beside the whole suite)."""
    edge = _edge(tmp_path)
    assert edge.settings.command_poll_seconds == 1.0
    _run_loop(edge, 3.5)
    assert 2 <= len(queries) <= 3, queries
    gaps = [b - a for a, b in zip(queries, queries[1:])]
    assert all(gap >= 0.9 for gap in gaps), gaps


def test_a_command_for_a_session_the_edge_does_not_hold_is_answered_gone(tmp_path, store_env):
    """The API's stop of a session whose agent just left: the edge answers at once, the API
    stops waiting (404 in chalicelib/tunnel_sessions.py)."""
    edge = _edge(tmp_path, EDGE_COMMAND_POLL_SECONDS="0.2")
    sid = _session()
    command = online.request_stop(ACCT, sid)
    started = time.monotonic()
    answer = _run_loop(edge, 2.0, during=lambda: online.await_answer(command))
    assert answer == {"outcome": "gone", "error": ""}
    assert time.monotonic() - started < 2.5
    assert online.take_commands(INSTANCE) == []  # taken once


def test_a_command_too_near_its_deadline_is_not_sent(tmp_path, store_env, monkeypatch):
    """Taken when the agent's answer (COMMAND_TIMEOUT) and the margin no longer fit before
    the API's deadline: not sent, answered "expired", so the API never says "not answered"
    about a command that then runs."""
    edge = _edge(tmp_path, EDGE_COMMAND_POLL_SECONDS="0.2")
    sid = _session()
    monkeypatch.setattr(
        online,
        "COMMAND_WAIT_SECONDS",
        agents.COMMAND_TIMEOUT + online.COMMAND_MARGIN_SECONDS - 0.5,
    )
    command = online.request_restart(ACCT, sid)
    answer = _run_loop(edge, 1.5, during=lambda: online.await_answer(command))
    assert answer == {"outcome": "expired", "error": ""}


def test_no_edge_no_answer_and_the_command_is_withdrawn(store_env, monkeypatch):
    """No edge takes it (the holding edge is down): the wait ends at the deadline with None
    and the command is removed, so an edge that comes back does not carry it out."""
    monkeypatch.setattr(online, "COMMAND_WAIT_SECONDS", 1.0)
    sid = _session()
    command = online.request_stop(ACCT, sid)
    started = time.monotonic()
    assert online.await_answer(command) is None
    took = time.monotonic() - started
    assert 0.9 <= took < 1.6, took  # 1 s after the command was written
    assert online.take_commands(INSTANCE) == []


def test_the_apis_bound_covers_the_edges_pick_up_and_the_agents_answer():
    """The numbers the docs give: the API waits 20 s, inside API Gateway's 29 s; the edge
    takes a command within EDGE_COMMAND_POLL_SECONDS (at most 5 s) and gives the agent 10 s,
    with 2 s for the store: 5 + 10 + 2 <= 20."""
    assert online.COMMAND_WAIT_SECONDS == 20.0
    assert agents.COMMAND_TIMEOUT == online.AGENT_COMMAND_TIMEOUT == 10.0
    assert (
        config.MAX_COMMAND_POLL_SECONDS + agents.COMMAND_TIMEOUT + online.COMMAND_MARGIN_SECONDS
        <= online.COMMAND_WAIT_SECONDS
        < 29
    )
    with pytest.raises(SystemExit, match="at most 5"):
        config.load({"EDGE_COMMAND_POLL_SECONDS": "6"})


def test_two_requests_for_one_session_are_two_commands(store_env):
    sid = _session()
    first = online.request_stop(ACCT, sid)
    second = online.request_restart(ACCT, sid)
    taken = online.take_commands(INSTANCE)
    assert [(c.command_id, c.command) for c in taken] == [
        (first.command_id, "stop"),
        (second.command_id, "restart"),
    ]
    assert all(c.session_id == sid and c.account_id == ACCT for c in taken)


def test_a_command_of_the_first_layout_is_still_taken_and_answered_by_nobody(store_env):
    """Written by an API of the first layout (one item per session, no id, no deadline) during
    an upgrade: the edge still takes and sends it; there is no caller to answer."""
    sid = _session()
    at = online.now()
    online.raw_client().put_item(
        TableName=online.raw_table(),
        Item=online.raw_item(
            online.COMMAND_PK + INSTANCE,
            sid,
            kind="edge_command",
            account_id=ACCT,
            data={"command": "stop"},
            instance_id=INSTANCE,
            heartbeat_at=at,
            expires_at=at + online.COMMAND_TTL_SECONDS,
        ),
    )
    [command] = online.take_commands(INSTANCE)
    assert command == online.Command(INSTANCE, ACCT, sid, "stop", None, None)
    online.answer_command(command, "accepted")  # nothing to write: nobody waits
    items = online.raw_client().scan(TableName=online.raw_table())["Items"]
    assert [i["pk"]["S"] for i in items if i["pk"]["S"].startswith("EDGE_COMMAND")] == []
