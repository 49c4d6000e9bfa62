"""The HTTPS route modules whose rule is a policy action or an agent option here
(chalicelib.core.route_modules) changing what an HTTPS edge's route does, through the public
listeners: compression, circuit_breaker, webhook_verification, oidc (a real identity provider:
tests/edge/oidc_provider.py), oauth, websocket_tcp_converter (the SDK's labeled listener to a
TCP echo); each put and removed through the API."""

import gzip
import hashlib
import hmac
import json
import time

from edge import wstcp
from tests.edge.conftest import BASE_DOMAIN, CLIENT_ID, CLIENT_SECRET
from tests.edge.support import carried_by_the_core, core_counts, settled
from tests.edge.test_edge_sdk import _bound, _credential, _wait
from tests.edge.test_websocket_tcp import _client_frame, _read_frame, _upgrade


def _post(account, path, body):
    resp = account.admin.post(path, body)
    assert resp.status == 201, resp
    return resp.json


def _route(account, prefix, backend_body=None, backend_id=None, **modules):
    """An HTTPS edge on a fresh name with one route "/" to a backend; (host, module path)."""
    host = f"{prefix}-{time.time_ns()}.{BASE_DOMAIN}"
    if backend_id is None:
        backend_id = _post(account, "/backends/http_response", backend_body or {"body": "ok"})[
            "id"
        ]
    edge = _post(account, "/edges/https", {"hostports": [f"{host}:443"]})
    route = _post(
        account,
        f"/edges/https/{edge['id']}/routes",
        {
            "match_type": "path_prefix",
            "match": "/",
            "backend": {"backend_id": backend_id},
            **modules,
        },
    )
    return host, f"/edges/https/{edge['id']}/routes/{route['id']}"


def test_compression(edge, account):
    text = "compress me " * 500
    host, path = _route(account, "gz", {"body": text, "headers": {"content-type": "text/plain"}})
    plain = edge.http("GET", host, "/", headers={"Accept-Encoding": "gzip"}, stream=True)
    assert "content-encoding" not in plain.headers
    assert account.admin.put(f"{path}/compression", {"enabled": True}).status == 200

    def compressed():
        resp = edge.http("GET", host, "/", headers={"Accept-Encoding": "gzip"}, stream=True)
        if resp.headers.get("content-encoding") != "gzip":
            return None
        return gzip.decompress(resp.raw.read())

    assert _wait(lambda: compressed() == text.encode(), timeout=5)
    assert account.admin.delete(f"{path}/compression").status == 204
    assert _wait(
        lambda: "content-encoding"
        not in edge.http("GET", host, "/", headers={"Accept-Encoding": "gzip"}).headers,
        timeout=5,
    )


def test_circuit_breaker(edge, account, agents):
    """The route's upstream (a labeled tunnel whose upstream is dead: the SDK answers 502)
    trips the breaker after volume_threshold failures: 503 ERR_NGROK_3202 from the edge."""
    label = f"cb{time.time_ns()}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"cb": label}})["id"]
    host, path = _route(
        account,
        "cb",
        backend_id=group,
        circuit_breaker={"error_threshold_percentage": 0.5, "volume_threshold": 5},
    )
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "labeled", "labels": {"cb": label}, "upstream": "dead"}],
    )
    _bound(agent.start())
    assert _wait(lambda: edge.http("GET", host, "/").status_code == 502, timeout=10)
    statuses = [edge.http("GET", host, "/").status_code for _ in range(8)]
    assert 502 in statuses and statuses[-1] == 503, statuses
    tripped = edge.http("GET", host, "/")
    assert tripped.status_code == 503
    assert tripped.headers.get("ngrok-error-code") == "ERR_NGROK_3202"
    # removed: the upstream's own answer again
    assert account.admin.delete(f"{path}/circuit_breaker").status == 204
    assert _wait(lambda: edge.http("GET", host, "/").status_code == 502, timeout=5)


def test_webhook_verification(edge, account):
    secret = "route-hook-secret"
    host, path = _route(
        account, "hook", webhook_verification={"provider": "GITHUB", "secret": secret}
    )
    body = json.dumps({"action": "opened"}).encode()
    signed = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    ok = edge.http("POST", host, "/hook", data=body, headers={"x-hub-signature-256": signed})
    assert ok.status_code == 200 and ok.text == "ok"
    assert edge.http("POST", host, "/hook", data=body).status_code == 403
    assert account.admin.delete(f"{path}/webhook_verification").status == 204
    assert _wait(lambda: edge.http("POST", host, "/hook", data=body).status_code == 200, 5)


def test_oidc_sends_a_visitor_to_the_identity_provider(edge, account, idp):
    host, path = _route(
        account,
        "oidc",
        oidc={"issuer": idp, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
    )
    resp = edge.http("GET", host, "/page", allow_redirects=False)
    assert resp.status_code == 302, resp.text
    assert resp.headers["location"].startswith(idp + "/authorize?")
    assert "ngrok_login_oidc=" in resp.headers.get("set-cookie", "")


def test_oauth_sends_a_visitor_to_the_provider(edge, account):
    host, path = _route(
        account,
        "oauth",
        oauth={"provider": {"google": {"client_id": "cid", "client_secret": "csecret"}}},
    )
    resp = edge.http("GET", host, "/", allow_redirects=False)
    assert resp.status_code == 302, resp.text
    assert resp.headers["location"].startswith("https://accounts.google.com/")
    assert "client_id=cid" in resp.headers["location"]
    assert account.admin.delete(f"{path}/oauth").status == 204
    assert _wait(
        lambda: edge.http("GET", host, "/", allow_redirects=False).text == "ok", timeout=5
    )


def test_websocket_tcp_converter(edge, account, agents):
    label = f"ws{time.time_ns()}"
    group = _post(account, "/backends/tunnel_group", {"labels": {"ws": label}})["id"]
    host, path = _route(account, "ws", backend_id=group, websocket_tcp_converter={})
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "labeled", "labels": {"ws": label}, "upstream": "tcp"}],
    )
    _bound(agent.start())

    def echoed():
        sock, head, accept = _upgrade(edge, host)
        with sock:
            if not head.startswith("HTTP/1.1 101"):
                return None
            sock.sendall(_client_frame(wstcp.BINARY, b"through a route"))
            got, rest = b"", b""
            while len(got) < len(b"through a route"):
                _, payload, rest = _read_frame(sock, rest)
                got += payload
            return got

    assert _wait(lambda: echoed() == b"through a route", timeout=10), edge.log()[-3000:]
    plain = edge.http("GET", host, "/")
    assert plain.status_code == 400  # not a WebSocket upgrade: refused, as the agent option

    # once Python served the name, the core carries it: the route matched and decided in
    # Python, the upgrade answered and converted by the core, nothing handed over
    def carried():
        return carried_by_the_core(edge, lambda: echoed() == b"through a route")

    assert _wait(carried, timeout=15), "the core never converted the route's WebSockets"
    before = settled(lambda: core_counts(edge))
    assert echoed() == b"through a route" and edge.http("GET", host, "/").status_code == 400
    after = settled(lambda: core_counts(edge))
    assert (after[0] - before[0], after[1]) == (2, before[1])
