"""An endpoint pool on the compiled core's fast path (edge/fast_path.py ``Pool``,
edge_core/src/public.rs ``Routes::set_pool``), with the official JavaScript SDK's pooled
agents as processes: the core spreads the pool's requests over its members in turn, on one
kept-alive connection too, records each under its own endpoint, follows a member that leaves
at once, and leaves a pool with a traffic policy to Python."""

import json
import time

import pytest
import requests

from tests.edge.support import metric, settled, wait
from tests.edge.test_edge_sdk import _credential, _host

WAIT = 30.0


def _served(edge) -> float:
    return settled(lambda: metric(edge.metrics(), "edge_core_http_requests_total"))


def _handed(edge) -> float:
    return metric(edge.metrics(), "edge_core_http_handed_over_total")


@pytest.fixture
def domain(account):
    name = f"corepool-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


def _pool(node_agents, edge, account, domain, names, **options):
    token = _credential(account)["token"]
    procs = []
    for name in names:
        proc = node_agents(edge, token, domain=domain, pooling_enabled=True, name=name, **options)
        assert _host(proc.out["url"]) == domain, proc.out
        procs.append(proc)
    return procs


def _agents(edge, domain, n):
    """The member that answered each of ``n`` requests on one kept-alive connection (an
    answer no member gave: its status and body, which no member's name equals)."""
    answered = []
    with requests.Session() as session:
        for i in range(n):
            got = session.get(
                f"http://127.0.0.1:{edge.http_port}/i={i}", headers={"Host": domain}, timeout=10
            )
            try:
                answered.append(got.json()["agent"])
            except (ValueError, KeyError):
                answered.append(f"{got.status_code} {got.text[:200]}")
    return answered


def _until_the_core_serves(edge, domain):
    def served_one():
        before = _served(edge)
        assert edge.http("GET", domain, "/").status_code == 200
        return _served(edge) > before

    assert wait(served_one, WAIT)


def test_the_core_spreads_a_pools_requests_in_turn_and_records_each_members(
    node_agents, edge, account, domain
):
    procs = _pool(node_agents, edge, account, domain, "abc")
    _until_the_core_serves(edge, domain)
    served, handed = _served(edge), _handed(edge)
    seen = _agents(edge, domain, 30)
    # all the core's, none handed to Python; each member in turn (round robin, as Python's)
    assert (_served(edge) - served, _handed(edge) - handed) == (30, 0)
    assert {name: seen.count(name) for name in "abc"} == {"a": 10, "b": 10, "c": 10}
    assert seen[:3] == seen[3:6], seen  # a turn, not a draw

    # each request recorded under the endpoint of the member that answered it
    listed = account.admin.get("/endpoints").json["endpoints"]
    endpoints = [e["id"] for e in listed if _host(e["public_url"]) == domain]
    assert len(endpoints) == 3

    def captured():
        found = {}
        for endpoint_id in endpoints:
            rows = account.admin.get(f"/endpoints/{endpoint_id}/captured_requests").json
            found[endpoint_id] = {
                r["target"] for r in rows["captured_requests"] if r["target"].startswith("/i=")
            }
        return found if sum(len(t) for t in found.values()) == 30 else None

    by_endpoint = wait(captured, WAIT)
    assert by_endpoint, "the core's records did not all reach the inspector"
    assert sorted(len(t) for t in by_endpoint.values()) == [10, 10, 10]
    for targets in by_endpoint.values():  # one member's: every third request
        turns = {int(t[3:]) % 3 for t in targets}
        assert len(turns) == 1, by_endpoint

    # a member that leaves takes no turn from then on; the last one serves alone
    procs[0].stop()
    assert wait(lambda: set(_agents(edge, domain, 6)) == {"b", "c"}, WAIT)
    procs[1].stop()
    assert wait(lambda: set(_agents(edge, domain, 4)) == {"c"}, WAIT)
    served = _served(edge)
    assert set(_agents(edge, domain, 4)) == {"c"}
    assert _served(edge) - served == 4


def _policy(*actions):
    return json.dumps({"on_http_response": [{"actions": list(actions)}]})


def test_a_pool_whose_members_have_traffic_policies_is_decided_member_by_member(
    node_agents, edge, account, domain
):
    """Members whose policies need only the heads: the core carries the pool, each request
    decided by Python with the policy of the member whose turn it is (the response phase's
    header says which one ran); a policy that is not decidable keeps the pool Python's."""
    header = {"type": "add-headers", "config": {"headers": {"x-ran": "${endpoint.id}"}}}
    _pool(node_agents, edge, account, domain, "ab", traffic_policy=_policy(header))
    _until_the_core_serves(edge, domain)
    served, handed = _served(edge), _handed(edge)
    ran = []
    with requests.Session() as session:
        for _ in range(6):
            resp = session.get(
                f"http://127.0.0.1:{edge.http_port}/", headers={"Host": domain}, timeout=10
            )
            assert resp.status_code == 200
            ran.append((resp.json()["agent"], resp.headers["x-ran"]))
    assert (_served(edge) - served, _handed(edge) - handed) == (6, 0)
    listed = account.admin.get("/endpoints").json["endpoints"]
    by_name = {}
    for agent, endpoint_id in ran:  # each member's answers ran that member's own policy
        by_name.setdefault(agent, set()).add(endpoint_id)
    assert sorted(by_name) == ["a", "b"] and all(len(ids) == 1 for ids in by_name.values())
    assert {i for ids in by_name.values() for i in ids} == {
        e["id"] for e in listed if _host(e["public_url"]) == domain
    }


def test_a_pool_with_an_event_rewriting_policy_is_pythons(node_agents, edge, account, domain):
    # (events rewritten beside a response body's read: not decidable, edge/decided.py)
    rewrite = {
        "on_http_response": [
            {
                "actions": [
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
    }
    _pool(node_agents, edge, account, domain, "ab", traffic_policy=json.dumps(rewrite))
    time.sleep(1.5)  # a route would have been pushed by now
    served = _served(edge)
    for _ in range(4):
        assert edge.http("GET", domain, "/").status_code == 200
    assert _served(edge) == served
