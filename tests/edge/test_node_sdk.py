"""The official JavaScript SDK (@ngrok/ngrok, newer than the Python SDK here: it sends
``Domain`` where 1.4.0 sends ``Hostname``) against the same edge, as processes
(tests.support.fixtures' ``node_agents``: skipped with the reason when Node.js or npm is not
installed)."""

import json
import time


from tests.edge.test_edge_sdk import _credential, _host


def test_javascript_sdk_serves_through_the_edge_with_its_policy(node_agents, edge, account):
    policy = {
        "on_http_request": [
            {
                "expressions": ["req.url.path == '/hi'"],
                "actions": [
                    {
                        "type": "custom-response",
                        "config": {"status_code": 200, "body": "policy hi"},
                    }
                ],
            }
        ]
    }
    agent = node_agents(edge, _credential(account)["token"], traffic_policy=json.dumps(policy))
    host = _host(agent.out["url"])
    assert edge.http("GET", host, "/hi").text == "policy hi"
    assert edge.http("GET", host, "/other").json()["sdk"] == "node"


def test_javascript_sdk_gets_the_refusal_code(node_agents, edge, account):
    agent = node_agents(edge, _credential(account)["token"], domain="not-reserved.example.org")
    assert agent.out["code"] == "ERR_NGROK_7117", agent.out


def test_javascript_sdk_session_serves_thousands_of_connections_without_dropping(
    node_agents, edge, account
):
    """Connections far beyond the SDK's 512 open streams, one after another and in parallel:
    every one answered, the session never lost (no status change), and the edge's stream
    table back to the heartbeat stream alone (tests/edge/test_edge_streams.py has every kind
    of connection through the Python SDK)."""
    from tests.edge.test_edge_streams import CONNECTIONS, GET_CLOSE, _http, _many, _status

    agent = node_agents(edge, _credential(account)["token"])
    host = _host(agent.out["url"])
    got = _many(lambda i: _status(_http(edge.http_port, host, GET_CLOSE)))
    assert got == [200] * CONNECTIONS
    session_id = account.admin.get("/tunnel_sessions").json["tunnel_sessions"][0]["id"]
    deadline = time.time() + 20
    while time.time() < deadline and edge.session_streams(session_id) != {
        "streams_open": 1,
        "edge_opened": 0,
        "agent_opened": 1,
        "lingering": 0,
    }:
        time.sleep(0.2)
    assert edge.session_streams(session_id)["edge_opened"] == 0
    assert agent.statuses == [], agent.statuses
