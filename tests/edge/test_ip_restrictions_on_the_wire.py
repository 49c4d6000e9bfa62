"""IP restrictions (/ip_restrictions) enforced by the edge (edge/ip_restrictions.py): ``endpoints``
on an HTTPS edge's traffic and an agent endpoint's, ``agent`` on an agent's Auth (the official
Python SDK), ``enforced: false`` letting through; changes in force within seconds."""

import time

from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_edge_sdk import _bound, _credential, _host, _wait
from tests.support.fixtures import ssh_agents  # noqa: F401 (a fixture)


def _post(account, path, body):
    resp = account.admin.post(path, body)
    assert resp.status == 201, resp
    return resp.json


def _deny_loopback(account):
    policy = _post(account, "/ip_policies", {})
    _post(
        account,
        "/ip_policy_rules",
        {"ip_policy_id": policy["id"], "cidr": "127.0.0.0/8", "action": "deny"},
    )
    return policy["id"]


def test_endpoints_restriction_refuses_edge_and_agent_endpoint_traffic(edge, account, agents):
    host = f"ipx-{time.time_ns()}.{BASE_DOMAIN}"
    backend = _post(account, "/backends/http_response", {"body": "served"})
    https_edge = _post(account, "/edges/https", {"hostports": [f"{host}:443"]})
    _post(
        account,
        f"/edges/https/{https_edge['id']}/routes",
        {"match_type": "path_prefix", "match": "/", "backend": {"backend_id": backend["id"]}},
    )
    agent = agents(edge, _credential(account)["token"], [{"proto": "http"}])
    agent_host = _host(_bound(agent.start())[0]["url"])
    assert edge.http("GET", host, "/").text == "served"
    assert edge.http("GET", agent_host, "/echo").status_code == 200
    restriction = _post(
        account,
        "/ip_restrictions",
        {"type": "endpoints", "enforced": False, "ip_policy_ids": [_deny_loopback(account)]},
    )
    time.sleep(1.5)
    assert edge.http("GET", host, "/").text == "served"  # not enforced: only logged
    path = f"/ip_restrictions/{restriction['id']}"
    assert account.admin.patch(path, {"enforced": True}).status == 200
    assert _wait(lambda: edge.http("GET", host, "/").status_code == 403, timeout=5)
    refused = edge.http("GET", agent_host, "/echo")
    assert refused.status_code == 403 and "ERR_NGROK_3203" in refused.text
    assert account.admin.delete(path).status == 204
    assert _wait(lambda: edge.http("GET", host, "/").status_code == 200, timeout=5)


def test_agent_restriction_refuses_the_agents_auth(edge, account, agents):
    token = _credential(account)["token"]
    _post(
        account,
        "/ip_restrictions",
        {"type": "agent", "enforced": True, "ip_policy_ids": [_deny_loopback(account)]},
    )
    time.sleep(1.5)
    events = agents(edge, token, [{"proto": "http"}]).start()
    text = " ".join(" ".join(e.get("args", [])) for e in events)
    assert "ERR_NGROK_9040" in text, events


def test_agent_restriction_refuses_ssh_gateway_sessions(edge, account, tmp_path, ssh_agents):  # noqa: F811
    """An ``agent`` restriction applies to ``ssh -R`` as to an SDK's Auth (docs/SSH.md): the
    key authenticates, then the address is refused with the agents' code as the banner."""
    from stacks.ssh import new_key
    from tests.edge.support import wait

    key, line = new_key(str(tmp_path / "ssh"))
    assert account.admin.post("/ssh_credentials", {"public_key": line}).status == 201
    allowed = ssh_agents(edge, key, "0:localhost:9", ["http"])
    assert allowed.url()  # no restriction yet: served
    allowed.stop()
    _post(
        account,
        "/ip_restrictions",
        {"type": "agent", "enforced": True, "ip_policy_ids": [_deny_loopback(account)]},
    )

    def refused():
        """One ssh: refused (its attempt), or still served while the edge's restrictions
        cache (at most 1 s old) has not seen the new one (stopped, False)."""
        attempt = ssh_agents(edge, key, "0:localhost:9", ["http"])
        wait(lambda: attempt.process.poll() is not None or "Forwarding" in attempt.out, 30)
        if attempt.process.poll() is None:
            attempt.stop()
            return False
        return attempt.wait() == 255 and "ERR_NGROK_9040" in attempt.err and attempt

    attempt = wait(refused, timeout=20)
    assert "from your IP address (127.0.0.1)" in attempt.err, attempt.printed()
    assert "Forwarding" not in attempt.out


def test_an_agent_endpoint_of_a_restricted_account_is_checked_by_the_core_per_request(
    edge, account, agents
):
    """An account with an ``endpoints`` restriction keeps its agent endpoints on the compiled
    core's path: each request decided (edge/decided.py RESTRICTED), its client checked first;
    refused (403 ERR_NGROK_3203) or let through (not enforced: logged), all carried by the
    core, none handed to Python; the restriction removed, the route is plain again."""
    from tests.edge import support

    def core(name):
        return support.metric(edge.metrics(), name)

    agent = agents(edge, _credential(account)["token"], [{"proto": "http"}])
    host = _host(_bound(agent.start())[0]["url"])
    restriction = _post(
        account,
        "/ip_restrictions",
        {"type": "endpoints", "enforced": False, "ip_policy_ids": [_deny_loopback(account)]},
    )
    path = f"/ip_restrictions/{restriction['id']}"

    def decided_by_the_core():
        before = core("edge_core_http_decided_total")
        assert edge.http("GET", host, "/echo").status_code == 200  # only logged
        time.sleep(0.2)
        return core("edge_core_http_decided_total") > before

    assert _wait(decided_by_the_core, timeout=15)
    assert account.admin.patch(path, {"enforced": True}).status == 200
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 403, timeout=10)

    def counts():  # once settled: the core counts a request just after writing its answer
        return support.settled(
            lambda: (
                core("edge_core_http_requests_total"),
                core("edge_core_http_handed_over_total"),
            )
        )

    served, handed = counts()
    for _ in range(3):
        refused = edge.http("GET", host, "/echo")
        assert refused.status_code == 403 and "ERR_NGROK_3203" in refused.text
    assert counts() == (served + 3, handed)
    assert account.admin.delete(path).status == 204
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 200, timeout=10)
