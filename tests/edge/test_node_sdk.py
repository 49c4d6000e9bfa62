"""The official JavaScript SDK (@ngrok/ngrok, newer than the Python SDK here: it sends
``Domain`` where 1.4.0 sends ``Hostname``) against the same edge. Skipped with the reason
when Node.js or npm is not installed; `npm ci`-style install of the pinned version otherwise."""

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from tests.edge.test_edge_sdk import _credential, _host

NODE_DIR = os.path.join(os.path.dirname(__file__), "node")


@pytest.fixture(scope="module")
def node_sdk():
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("Node.js/npm not installed: the JavaScript SDK cannot run here")
    from tests.functional.test_ts_client_compat import node_install

    problem = node_install(NODE_DIR, "@ngrok/ngrok")
    if problem:
        pytest.fail(f"the JavaScript SDK could not be installed: {problem}")
    return NODE_DIR


def _run(node_sdk, edge, token, **extra):
    cfg = {"authtoken": token, "server_addr": edge.server_addr, "root_cas": edge.ca_path, **extra}
    proc = subprocess.Popen(
        ["node", "agent.js", json.dumps(cfg)],
        cwd=node_sdk,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    while True:  # the first line that is not a status change ('connected' comes first)
        out = json.loads(proc.stdout.readline())
        if "status" not in out:
            return proc, out


def test_javascript_sdk_serves_through_the_edge_with_its_policy(node_sdk, edge, account):
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
    proc, out = _run(
        node_sdk, edge, _credential(account)["token"], traffic_policy=json.dumps(policy)
    )
    try:
        host = _host(out["url"])
        assert edge.http("GET", host, "/hi").text == "policy hi"
        assert edge.http("GET", host, "/other").json()["sdk"] == "node"
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_javascript_sdk_gets_the_refusal_code(node_sdk, edge, account):
    proc, out = _run(
        node_sdk, edge, _credential(account)["token"], domain="not-reserved.example.org"
    )
    proc.stdin.close()
    proc.wait(timeout=10)
    assert out["code"] == "ERR_NGROK_7117", out


def test_javascript_sdk_session_serves_thousands_of_connections_without_dropping(
    node_sdk, edge, account
):
    """Connections far beyond the SDK's 512 open streams, one after another and in parallel:
    every one answered, the session never lost (no status change), and the edge's stream
    table back to the heartbeat stream alone (tests/edge/test_edge_streams.py has every kind
    of connection through the Python SDK)."""
    from tests.edge.test_edge_streams import CONNECTIONS, GET_CLOSE, _http, _many, _status

    proc, out = _run(node_sdk, edge, _credential(account)["token"])
    statuses = []
    threading.Thread(target=lambda: statuses.extend(proc.stdout), daemon=True).start()
    try:
        host = _host(out["url"])
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
        assert statuses == [], statuses
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
