"""Stop and restart through the API tell the truth (chalicelib/tunnel_sessions.py): the API
waits for the agent's answer. Against the real stack (API, store, edge as processes) and the
official Python SDK as the agent (tests/edge/sdk_agent.py): an agent the program gave no stop
(restart) handler refuses, and the API answers the hosted service's 400 ERR_NGROK_805 (804)
with the SDK's reason while the session stays online under the same id, still serving; an
agent with a handler accepts, and the API's 204 comes after the edge ended the session. What
the command poll costs an idle edge: tests/unit/test_edge_commands.py."""

import time

import ngrok  # the ngrok-api client (the service's venv)
import pytest

from chalicelib.core import errors
from tests.edge.support import bound, credential, host, wait

# the API's answer comes once the edge took the command (EDGE_COMMAND_POLL_SECONDS, 1 s) and
# the agent answered: well under the API's bound (online.COMMAND_WAIT_SECONDS, 20 s)
ANSWERED_WITHIN = 6.0


def _online_session(account, agent, credential_id):
    url = bound(agent.start())[0]["url"]
    sessions = wait(
        lambda: [
            s
            for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
            if (s["credential"] or {}).get("id") == credential_id
        ]
    )
    assert len(sessions) == 1, sessions
    return sessions[0]["id"], host(url)


def _listed(account, session_id):
    return [
        s["id"]
        for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
        if s["id"] == session_id
    ]


def _timed(send):
    started = time.monotonic()
    resp = send()
    return resp, time.monotonic() - started


@pytest.mark.parametrize(
    "action, code, words",
    [
        ("stop", errors.AGENT_STOP_REFUSED, "remote stopping"),
        ("restart", errors.AGENT_RESTART_REFUSED, "remote restarting"),
    ],
)
def test_an_agent_without_a_handler_refuses_and_its_session_stays(
    edge, account, agents, action, code, words
):
    cred = credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}], stop_handler="none")
    sid, name = _online_session(account, agent, cred["id"])
    resp, took = _timed(lambda: account.admin.post(f"/tunnel_sessions/{sid}/{action}"))
    assert resp.status == 400, resp
    assert resp.json["error_code"] == code
    prefix = f"This ngrok agent does not support remote {words.split()[1]}: "
    assert resp.json["msg"].startswith(prefix) and resp.json["msg"].endswith(".")
    reason = resp.json["msg"][len(prefix) : -1]
    assert reason and "did not answer" not in reason, resp.json  # the SDK's own words
    assert took < ANSWERED_WITHIN, took
    # the edge kept the session: same id, never disconnected, still serving
    time.sleep(2)
    assert _listed(account, sid) == [sid]
    assert edge.http("GET", name, "/echo").status_code == 200
    assert not [e for e in agent.seen if e["event"] == "disconnected"]
    assert agent.process.poll() is None


def test_the_official_client_raises_its_api_error_with_the_agents_reason(
    stack, edge, account, agents
):
    cred = credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}], stop_handler="none")
    sid, _ = _online_session(account, agent, cred["id"])
    client = ngrok.Client(account.admin.token, base_url=stack.base_url)
    with pytest.raises(ngrok.Error) as refused:
        client.tunnel_sessions.stop(sid)
    assert refused.value.http_status_code == 400
    assert refused.value.error_code == errors.AGENT_STOP_REFUSED
    assert "does not support remote stopping" in str(refused.value)
    assert client.tunnel_sessions.get(sid).id == sid


@pytest.mark.parametrize("action", ["stop", "restart"])
def test_an_agent_with_a_handler_accepts_and_its_session_is_gone_at_the_204(
    edge, account, agents, action
):
    cred = credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}], **{f"{action}_handler": "exit"})
    sid, name = _online_session(account, agent, cred["id"])
    resp, took = _timed(lambda: account.admin.post(f"/tunnel_sessions/{sid}/{action}"))
    assert resp.status == 204 and resp.text == "", resp
    assert took < ANSWERED_WITHIN, took
    assert _listed(account, sid) == []  # ended by the edge before it answered
    agent.wait_for(f"{action}_command", timeout=5)
    assert agent.process.wait(timeout=10) == 0
    assert edge.http("GET", name, "/echo").status_code == 404
    assert _listed(account, sid) == []


def test_a_handler_that_refuses_gives_its_own_words(edge, account, agents):
    cred = credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}], restart_handler="refuse")
    sid, _ = _online_session(account, agent, cred["id"])
    resp = account.admin.post(f"/tunnel_sessions/{sid}/restart")
    assert resp.status == 400 and resp.json["error_code"] == errors.AGENT_RESTART_REFUSED
    assert "restart refused by the test agent" in resp.json["msg"], resp.json
    agent.wait_for("restart_command", timeout=5)
    assert _listed(account, sid) == [sid]


def test_a_session_that_ended_before_the_edge_sent_the_command_is_a_404(edge, account, agents):
    cred = credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    sid, _ = _online_session(account, agent, cred["id"])
    agent.command("exit")  # gone, and the store still lists it for a moment at most
    assert agent.process.wait(timeout=10) == 0
    resp = account.admin.post(f"/tunnel_sessions/{sid}/stop")
    assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND, resp
