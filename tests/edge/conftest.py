"""The edge tests: the real stack as processes (store + API by scripts/serve.py, the edge by
``python -m edge``: tests.support.fixtures' ``edge_stack``), agents built on the official Python
SDK as processes (tests/edge/sdk_agent.py run with the device agent's virtualenv, where ``ngrok``
is installed: the SDK and the ``ngrok-api`` client share the ``ngrok`` package name, so they
cannot share a venv), and real HTTP/TLS/TCP clients. Servers start once per session."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from stacks.paths import BASE_DOMAIN, PROJECT_DIR, SDK_PYTHON  # noqa: F401 (imported from here)
from stacks.ports import free_port
from tests.support.fixtures import (  # noqa: F401 (fixtures)
    another_edge,
    cli_agents,
    cluster,
    edge_stack,
    go_agents,
    make_run,
    moto_server,
    node_agents,
    sdk_agents,
)


def tcp_round_trip(port: int, data: bytes) -> bytes:
    """Send ``data`` to a TCP endpoint on the edge and read back as many bytes (an echo
    upstream); b"" when the edge closed or reset the connection first (a refusal)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(data)
            got = b""
            while len(got) < len(data):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
            return got
    except OSError:
        return b""


@pytest.fixture(scope="session")
def stack(edge_stack):  # noqa: F811
    """The edge stack's API and store (stacks.api.ApiProcess)."""
    return edge_stack.api


@pytest.fixture(scope="session")
def edge(edge_stack):  # noqa: F811
    """The edge stack's edge (stacks.edge.EdgeProcess)."""
    return edge_stack.edge


@pytest.fixture(scope="session")
def api(stack):
    from tests.support.api import HttpApi

    return HttpApi(stack)


@pytest.fixture
def account(api):
    return api.new_account()


@pytest.fixture
def agents(sdk_agents):  # noqa: F811
    """Start SDK agents with ``agents(edge, token, binds)``; all stopped after the test."""
    return sdk_agents


# ---- a real identity provider (the sign-in tests) ----------------------------------------
PROVIDER = os.path.join(os.path.dirname(__file__), "oidc_provider.py")
CLIENT_ID, CLIENT_SECRET = "edge-client", "edge-secret-123"


@pytest.fixture(scope="module")
def idp():
    """tests/edge/oidc_provider.py as a process (authlib), with one client for the edge."""
    port = free_port()
    cfg = {
        "port": port,
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [f"http://*.{BASE_DOMAIN}:*/ngrok/callback"],
            }
        ],
    }
    process = subprocess.Popen(
        [sys.executable, PROVIDER, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            requests.get(url + "/jwks", timeout=5)
            break
        except requests.ConnectionError:
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)
