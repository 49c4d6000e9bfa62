"""Endpoint pooling (edge/pools.py) with the official JavaScript SDK (``pooling_enabled``) as
processes: agents on one URL share its traffic; every member must enable pooling; the URL
stays online while one member is left."""

import time

import pytest

from tests.edge.test_edge_sdk import _bound, _credential, _host


@pytest.fixture
def domain(account):
    name = f"pool-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


def test_pooled_agents_share_one_url(node_agents, edge, account, domain):
    token = _credential(account)["token"]
    procs = []
    try:
        for name in ("a", "b", "c"):
            proc = node_agents(edge, token, domain=domain, pooling_enabled=True, name=name)
            out = proc.out
            procs.append(proc)
            assert _host(out["url"]) == domain, out
        seen = [edge.http("GET", domain, "/").json()["agent"] for _ in range(30)]
        assert set(seen) == {"a", "b", "c"}
        assert min(seen.count(x) for x in "abc") >= 5  # round robin: spread evenly
        endpoints = [
            e
            for e in account.admin.get("/endpoints").json["endpoints"]
            if _host(e["public_url"]) == domain
        ]
        assert len(endpoints) == 3 and all(e["pooling_enabled"] for e in endpoints)
        procs.pop(0).stop()  # the first member (the claim's holder) leaves
        time.sleep(1)
        seen = {edge.http("GET", domain, "/").json()["agent"] for _ in range(10)}
        assert seen == {"b", "c"}
        listed = account.admin.get("/endpoints").json["endpoints"]
        assert len([e for e in listed if _host(e["public_url"]) == domain]) == 2
        procs.pop(0).stop()
        assert {edge.http("GET", domain, "/").json()["agent"] for _ in range(5)} == {"c"}
    finally:
        for proc in procs:
            proc.stop()
    deadline = time.time() + 10
    while time.time() < deadline and edge.http("GET", domain, "/").status_code == 200:
        time.sleep(0.2)
    assert edge.http("GET", domain, "/").status_code == 404


def test_pooling_must_be_enabled_by_every_member(node_agents, edge, account, domain):
    token = _credential(account)["token"]
    first = node_agents(edge, token, domain=domain, pooling_enabled=True, name="a")
    assert _host(first.out["url"]) == domain, first.out
    try:
        second = node_agents(edge, token, domain=domain, name="b")
        refused = second.out
        second.stop()
        assert refused["code"] == "ERR_NGROK_334" and "enable pooling" in refused["error"]
    finally:
        first.stop()
    plain = node_agents(edge, token, domain=domain, name="a")
    try:
        pooled = node_agents(edge, token, domain=domain, pooling_enabled=True, name="b")
        refused = pooled.out
        pooled.stop()
        assert refused["code"] == "ERR_NGROK_334" and "without pooling" in refused["error"]
    finally:
        plain.stop()


def test_python_sdk_without_pooling_still_conflicts(edge, account, agents, domain):
    token = _credential(account)["token"]
    first = agents(edge, token, [{"proto": "http", "domain": domain}])
    _bound(first.start())
    second = agents(edge, token, [{"proto": "http", "domain": domain}])
    events = second.start()
    assert any("ERR_NGROK_334" in " ".join(e.get("args", [])) for e in events), events
