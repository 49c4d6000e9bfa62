"""The official JavaScript SDK (@ngrok/ngrok, newer than the Python SDK here: it sends
``Domain`` where 1.4.0 sends ``Hostname``) against the same edge. Skipped with the reason
when Node.js or npm is not installed; `npm ci`-style install of the pinned version otherwise."""
import json
import os
import shutil
import subprocess

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
    cfg = {"authtoken": token, "server_addr": edge.server_addr, "root_cas": edge.ca_path,
           **extra}
    proc = subprocess.Popen(["node", "agent.js", json.dumps(cfg)], cwd=node_sdk,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def test_javascript_sdk_serves_through_the_edge_with_its_policy(node_sdk, edge, account):
    policy = {"on_http_request": [{"expressions": ["req.url.path == '/hi'"], "actions": [
        {"type": "custom-response", "config": {"status_code": 200, "body": "policy hi"}}]}]}
    proc, out = _run(node_sdk, edge, _credential(account)["token"],
                     traffic_policy=json.dumps(policy))
    try:
        host = _host(out["url"])
        assert edge.http("GET", host, "/hi").text == "policy hi"
        assert edge.http("GET", host, "/other").json()["sdk"] == "node"
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_javascript_sdk_gets_the_refusal_code(node_sdk, edge, account):
    proc, out = _run(node_sdk, edge, _credential(account)["token"],
                     domain="not-reserved.example.org")
    proc.stdin.close()
    proc.wait(timeout=10)
    assert out["code"] == "ERR_NGROK_7117", out
