"""Webhook verification (the SDKs' ``webhook_verification(provider, secret)``), enforced at
the edge through the Python SDK as a process: a request signed with the secret reaches the
upstream, an unsigned or wrongly signed one is refused there."""

import hashlib
import hmac
import json

from tests.edge.test_edge_sdk import _bound, _credential, _host

SECRET = "whsec-test-secret"


def _signed(body, secret=SECRET):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_github_signatures_are_checked_at_the_edge(edge, account, agents):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"webhook_verification": ["github", SECRET]}}],
    )
    host = _host(_bound(agent.start())[0]["url"])
    body = json.dumps({"action": "opened"}).encode()
    ok = edge.http(
        "POST", host, "/hook", data=body, headers={"x-hub-signature-256": _signed(body)}
    )
    assert ok.status_code == 200 and ok.json()["path"] == "/hook"
    assert edge.http("POST", host, "/hook", data=body).status_code == 403
    bad = edge.http(
        "POST",
        host,
        "/hook",
        data=body,
        headers={"x-hub-signature-256": _signed(body, "another-secret")},
    )
    assert bad.status_code == 403
