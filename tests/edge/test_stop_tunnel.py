"""StopTunnel (muxado stream type 9, edge to agent): ``DELETE /endpoints/{id}`` of a live agent
endpoint makes the edge holding its session stop serving it and send the agent a StopTunnel
for it. The official SDKs as processes: the Python SDK (ngrok-rust) ends that listener's
forwarding with "listener closed: <message>, <code>", the Go SDK closes that forwarder
(EndpointForwarder.Done) or returns the error with its code from Accept; the session and its other endpoint stay up and serving, the stopped
URL answers the offline error, the API no longer lists it."""

import time

from chalicelib.core import edge_errors
from tests.edge.support import bound, credential, host, wait

ANSWERED_WITHIN = 6.0  # the edge's command poll (1 s) and the stop itself


def _endpoint_id(account, url):
    found = wait(
        lambda: [e for e in account.admin.get("/endpoints").json["endpoints"] if e["url"] == url]
    )
    assert len(found) == 1, found
    return found[0]["id"], found[0]["tunnel_session"]["id"]


def _listed(account):
    return {e["id"] for e in account.admin.get("/endpoints").json["endpoints"]}


def _offline(edge, name):
    resp = edge.http("GET", name, "/echo")
    return resp.status_code == 404 and resp.json()["error_code"] == edge_errors.ENDPOINT_OFFLINE


def _stop(account, endpoint_id):
    started = time.monotonic()
    resp = account.admin.delete(f"/endpoints/{endpoint_id}")
    return resp, time.monotonic() - started


def test_the_python_sdk_closes_the_stopped_listener_and_keeps_the_other(edge, account, agents):
    agent = agents(edge, credential(account)["token"], [{"proto": "http"}, {"proto": "http"}])
    first, second = bound(agent.start())
    stopped, session_id = _endpoint_id(account, first["url"])
    kept, same_session = _endpoint_id(account, second["url"])
    assert session_id == same_session
    assert edge.http("GET", host(first["url"]), "/echo").status_code == 200
    resp, took = _stop(account, stopped)
    assert resp.status == 204, resp
    assert took < ANSWERED_WITHIN, took
    # the SDK: that listener's forwarding ended with the edge's message and code
    ended = agent.wait_for("forward_ended")
    assert ended["id"] == first["id"], ended
    said = " ".join(ended["error"] or [])
    assert f"endpoint {stopped} was stopped through the API" in said, ended
    assert edge_errors.ENDPOINT_STOPPED in said, ended
    # its URL is offline at once (the 204 came after the edge stopped serving it)
    assert _offline(edge, host(first["url"]))
    # the other endpoint of the same session still serves; the session never dropped
    assert edge.http("GET", host(second["url"]), "/echo").status_code == 200
    listed = _listed(account)
    assert stopped not in listed and kept in listed
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert session_id in {s["id"] for s in sessions}
    assert not [e for e in agent.seen if e["event"] in ("disconnected", "closed")]
    assert agent.process.poll() is None
    # stopped already: not found
    assert account.admin.delete(f"/endpoints/{stopped}").status == 404


def test_the_go_sdk_closes_the_stopped_forwarder_and_keeps_the_other(edge, account, go_agents):
    agent = go_agents(edge, credential(account)["token"], [{}, {}])
    first, second = bound(agent.start())
    stopped, session_id = _endpoint_id(account, first["url"])
    kept, _ = _endpoint_id(account, second["url"])
    assert edge.public("GET", first["url"], "/a").status == 200
    resp, took = _stop(account, kept)
    assert resp.status == 204, resp
    assert took < ANSWERED_WITHIN, took
    done = agent.wait_for("endpoint_done")
    assert (done["index"], done["url"]) == (1, second["url"]), done
    assert _offline(edge, host(second["url"]))
    assert edge.public("GET", first["url"], "/b").json["path"] == "/b"
    listed = _listed(account)
    assert kept not in listed and stopped in listed
    # one forwarder ended, the session never dropped
    assert [e["index"] for e in agent.seen if e["event"] == "endpoint_done"] == [1]
    assert [e for e in agent.seen if e["event"] == "disconnected"] == []
    assert session_id in {
        s["id"] for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    }


def test_the_go_sdk_listener_returns_the_message_and_code_from_accept(edge, account, go_agents):
    """Agent.Listen: the stopped listener's Accept returns the SDK's error with the edge's
    message and its code (ngrok.Error.Code()); the forwarder of the same session serves on."""
    agent = go_agents(edge, credential(account)["token"], [{"listen": True}, {}])
    listened, forwarded = bound(agent.start())
    stopped, _ = _endpoint_id(account, listened["url"])
    assert edge.public("GET", listened["url"], "/a").json["path"] == "/a"
    resp, took = _stop(account, stopped)
    assert resp.status == 204 and took < ANSWERED_WITHIN, (resp, took)
    error = agent.wait_for("error")
    assert (error["stage"], error["index"]) == ("accept", 0), error
    assert error["code"] == edge_errors.ENDPOINT_STOPPED, error
    assert f"endpoint {stopped} was stopped through the API" in error["args"][0], error
    assert _offline(edge, host(listened["url"]))
    assert edge.public("GET", forwarded["url"], "/b").json["path"] == "/b"
    assert [e for e in agent.seen if e["event"] == "disconnected"] == []
