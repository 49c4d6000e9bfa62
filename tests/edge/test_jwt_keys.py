"""jwt-validation's keys by URL are fetched off the edge's event loop (edge/http_request.py
``fetch_keys``): a tenant whose JWKS URL hangs delays only its own requests, never another
tenant's decisions, and a URL that failed is not fetched again for
``JWKS.FAILED_TTL``. Through the official Python SDK as a process; the JWKS server is a
socket that accepts and never answers (each connection counted)."""

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of


class _Silent:
    """A TCP server that accepts and never answers: a JWKS URL that hangs."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.accepted = 0
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/jwks.json"

    def close(self):
        self.sock.close()
        for conn in self.conns:
            conn.close()


def _policy(doc):
    return [{"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}]


@pytest.fixture(scope="module")
def silent():
    server = _Silent()
    yield server
    server.close()


@pytest.fixture(scope="module")
def hosts(edge, api, silent):
    """(a tenant whose jwt-validation names the silent URL, another tenant's endpoint whose
    policy Python decides per request)"""
    jwt = {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "jwt-validation",
                        "config": {
                            "issuer": {"allow_list": [{"value": "https://issuer.example"}]},
                            "http": {
                                "tokens": [
                                    {
                                        "type": "jwt",
                                        "method": "header",
                                        "name": "Authorization",
                                        "prefix": "Bearer ",
                                    }
                                ]
                            },
                            "jws": {
                                "allowed_algorithms": ["RS256"],
                                "keys": {"sources": {"additional_jkus": [silent.url]}},
                            },
                        },
                    }
                ]
            }
        ]
    }
    other = {
        "on_http_request": [
            {
                "expressions": ["req.url.path.startsWith('/')"],
                "actions": [{"type": "add-headers", "config": {"headers": {"x-other": "1"}}}],
            }
        ]
    }
    agents = [
        SdkAgent(edge, credential(api.new_account())["token"], _policy(doc))
        for doc in (jwt, other)
    ]
    names = [host_of(bound(agent.start())[0]["url"]) for agent in agents]
    yield names
    for agent in agents:
        agent.stop()


def test_a_hanging_jwks_url_delays_only_its_own_tenant(edge, hosts, silent):
    jwt_host, other_host = hosts
    # the other tenant's route answers (pushed, decided) before the hanging fetch starts
    assert edge.http("GET", other_host, "/echo").status_code == 200
    token = {"Authorization": "Bearer a.b.c"}
    with ThreadPoolExecutor(2) as pool:
        hanging = pool.submit(edge.http, "GET", jwt_host, "/echo", headers=token)
        deadline = time.time() + 10
        while silent.accepted == 0 and time.time() < deadline:
            time.sleep(0.02)
        assert silent.accepted == 1, "the edge fetches the keys"
        # while that fetch hangs (3 s), the other tenant's requests are decided and answered
        for _ in range(5):
            got = edge.http("GET", other_host, "/echo")
            assert (
                got.status_code == 200
                and {k.lower(): v for k, v in got.json()["headers"].items()}.get("x-other") == "1"
            )
        assert not hanging.done(), "answered while its keys' fetch still hung"
        refused = hanging.result(timeout=30)
    assert refused.status_code == 401  # the keys unavailable
    # the failure is kept: refused at once, no second fetch
    assert edge.http("GET", jwt_host, "/echo", headers=token).status_code == 401
    assert silent.accepted == 1
