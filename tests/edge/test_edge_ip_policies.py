"""restrict-ips ``ip_policies`` through the running stack with the official Python SDK: the
edge resolves the endpoint's account's IP policies from its cache, so a rule changed through
the API is in force within 2 s; a bind naming an IP policy the account does not have is
refused naming the element."""

import json
import time

from tests.edge.conftest import tcp_round_trip
from tests.edge.test_edge_sdk import _bound, _credential, _host, _refusal

FRESH_SECONDS = 2.0  # an API change to an IP policy rule is in force within this


def _policy_doc(*policy_ids):
    return json.dumps(
        {
            "on_http_request": [
                {
                    "name": "only listed addresses",
                    "actions": [
                        {"type": "restrict-ips", "config": {"ip_policies": list(policy_ids)}}
                    ],
                }
            ]
        }
    )


def _created(resp):
    assert resp.status == 201, resp
    return resp.json


def _within(seconds, predicate):
    """The first truthy value of ``predicate`` polled until ``seconds`` after the call (a
    poll starts only before the deadline), else None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return None


def _serve(edge, account, agents, doc):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"traffic_policy": [doc]}}],
    )
    return agent.start()


def test_ip_policy_rule_allows_then_a_change_to_deny_refuses_within_2_seconds(
    edge, account, agents
):
    admin = account.admin
    policy = _created(admin.post("/ip_policies", {}))
    rule = _created(
        admin.post(
            "/ip_policy_rules",
            {"ip_policy_id": policy["id"], "cidr": "127.0.0.1/32", "action": "allow"},
        )
    )
    host = _host(_bound(_serve(edge, account, agents, _policy_doc(policy["id"])))[0]["url"])
    assert edge.http("GET", host, "/echo").status_code == 200

    assert admin.patch(f"/ip_policy_rules/{rule['id']}", {"action": "deny"}).status == 200
    refused = _within(
        FRESH_SECONDS,
        lambda: [r for r in [edge.http("GET", host, "/echo")] if r.status_code == 403],
    )
    assert refused, "still served 2 s after the rule changed to deny"
    refused = refused[0]
    assert refused.headers["ngrok-error-code"] == "ERR_NGROK_3203"
    assert refused.json()["error_code"] == "ERR_NGROK_3203"

    # and back: allowed again, through the same cache
    assert admin.patch(f"/ip_policy_rules/{rule['id']}", {"action": "allow"}).status == 200
    assert _within(FRESH_SECONDS, lambda: edge.http("GET", host, "/echo").status_code == 200)


def test_bind_naming_another_accounts_ip_policy_is_refused_naming_the_element(
    edge, api, account, agents
):
    other = api.new_account()
    theirs = _created(other.admin.post("/ip_policies", {}))["id"]
    _created(
        other.admin.post(
            "/ip_policy_rules", {"ip_policy_id": theirs, "cidr": "0.0.0.0/0", "action": "allow"}
        )
    )
    mine = _created(account.admin.post("/ip_policies", {}))["id"]
    message = _refusal(_serve(edge, account, agents, _policy_doc(mine, theirs)), "bind")
    assert "ERR_NGROK_2201" in message and theirs in message
    assert "on_http_request[0].actions[0].config.ip_policies[1]" in message


def test_tcp_endpoint_ip_policy_closes_a_denied_connection_on_tcp_connect(edge, account, agents):
    admin = account.admin
    policy = _created(admin.post("/ip_policies", {}))
    rule = _created(
        admin.post(
            "/ip_policy_rules",
            {"ip_policy_id": policy["id"], "cidr": "127.0.0.0/8", "action": "deny"},
        )
    )
    doc = json.dumps(
        {
            "on_tcp_connect": [
                {"actions": [{"type": "restrict-ips", "config": {"ip_policies": [policy["id"]]}}]}
            ]
        }
    )
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "tcp", "options": {"traffic_policy": [doc]}}],
    )
    port = int(_bound(agent.start())[0]["url"].rsplit(":", 1)[1])

    def echoed():
        return tcp_round_trip(port, b"hello")  # b"": closed or reset, refused

    assert echoed() == b""  # closed without a byte of the upstream
    assert admin.patch(f"/ip_policy_rules/{rule['id']}", {"action": "allow"}).status == 200
    assert _within(FRESH_SECONDS, echoed) == b"hello"
