"""Pools of cloud and agent endpoints on one URL, with real processes: the official
``ngrok-api`` client creates pooled cloud endpoints (``pooling_enabled=True``), agents on the
official JavaScript SDK (``poolingEnabled(true)``) join the same URL, and the edge spreads
the URL's requests over all of them (edge/pools.py, chalicelib/core/pooling.py); each
mismatch is refused where it happens; members leave and the others keep serving."""

import json
import time
from collections import Counter

import ngrok
from ngrok.error import Error as ApiError
import pytest

from chalicelib.core import edge_errors, errors, pooling
from edge.pools import CLOUD_CACHE_SECONDS
from tests.edge.test_cloud_endpoints_on_the_wire import _answer
from tests.edge.test_edge_sdk import _credential, _host

REQUESTS = 40
SETTLE = CLOUD_CACHE_SECONDS + 1.0  # an API change is routed after the edge's cache expires


@pytest.fixture
def client(api, account):
    return ngrok.Client(account.admin.token, base_url=api.base_url)


@pytest.fixture
def domain(account):
    name = f"cpool-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


def _who(resp):
    """Who answered: a cloud endpoint's policy body ('cloud-…'), or the node agent's name."""
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    if resp.text.startswith("cloud-"):
        return resp.text
    return json.loads(resp.text)["agent"]


def _count(edge, domain, n=REQUESTS):
    return Counter(_who(edge.http("GET", domain, f"/r{i}")) for i in range(n))


def _pooled_cloud(client, domain, body):
    return client.endpoints.create(
        url=f"https://{domain}",
        type="cloud",
        traffic_policy=_answer(body),
        pooling_enabled=True,
    )


def _api_error(call):
    with pytest.raises(ApiError) as exc:
        call()
    return exc.value


def test_cloud_and_agent_endpoints_share_a_url(node_agents, edge, account, client, domain):
    cloud = _pooled_cloud(client, domain, "cloud-a")
    assert cloud.pooling_enabled is True
    token = _credential(account)["token"]
    procs = []
    try:
        for name in ("agent-1", "agent-2"):
            proc = node_agents(edge, token, domain=domain, pooling_enabled=True, name=name)
            out = proc.out
            procs.append(proc)
            assert _host(out.get("url", "")) == domain, out
        time.sleep(SETTLE)
        seen = _count(edge, domain)
        print("spread over 3 members:", dict(seen))
        assert set(seen) == {"cloud-a", "agent-1", "agent-2"}, seen
        assert min(seen.values()) >= REQUESTS // 3 - 2, seen  # round robin over 3 members
        listed = [e for e in client.endpoints.list() if e.host == domain]
        assert sorted(e.type for e in listed) == ["agent", "agent", "cloud"]
        assert all(e.pooling_enabled for e in listed)
        # a second cloud member
        second = _pooled_cloud(client, domain, "cloud-b")
        time.sleep(SETTLE)
        seen = _count(edge, domain)
        assert set(seen) == {"cloud-a", "cloud-b", "agent-1", "agent-2"}, seen
        # the first cloud member (the claim's holder) leaves: the rest keep serving
        client.endpoints.delete(cloud.id)
        time.sleep(SETTLE)
        seen = _count(edge, domain)
        assert set(seen) == {"cloud-b", "agent-1", "agent-2"}, seen
        # an agent leaves
        procs.pop(0).stop()
        time.sleep(SETTLE)
        seen = _count(edge, domain, 20)
        assert set(seen) == {"cloud-b", "agent-2"}, seen
        # the last cloud member leaves: the agent holds the URL alone
        client.endpoints.delete(second.id)
        time.sleep(SETTLE)
        assert set(_count(edge, domain, 10)) == {"agent-2"}
    finally:
        for proc in procs:
            proc.stop()
    deadline = time.time() + 10
    while time.time() < deadline and edge.http("GET", domain, "/").status_code == 200:
        time.sleep(0.2)
    assert edge.http("GET", domain, "/").status_code == 404
    # and the URL is free again: a cloud endpoint without pooling may take it
    alone = client.endpoints.create(
        url=f"https://{domain}", type="cloud", traffic_policy=_answer("cloud-c")
    )
    time.sleep(SETTLE)
    assert set(_count(edge, domain, 5)) == {"cloud-c"}
    client.endpoints.delete(alone.id)


def test_pooled_agents_keep_serving_when_the_cloud_member_is_the_first(
    node_agents,
    edge,
    account,
    client,
    domain,
):
    """Agents first, then a cloud member: the cloud takes the claim over; the agents leave
    and the cloud member serves alone."""
    token = _credential(account)["token"]
    proc = node_agents(edge, token, domain=domain, pooling_enabled=True, name="agent-1")
    out = proc.out
    try:
        assert _host(out.get("url", "")) == domain, out
        cloud = _pooled_cloud(client, domain, "cloud-a")
        time.sleep(SETTLE)
        assert set(_count(edge, domain, 20)) == {"cloud-a", "agent-1"}
        over_https = set()  # the HTTPS listener (HTTP/1.1 and HTTP/2 by ALPN) routes alike
        for i in range(10):
            done = edge.curl_https(domain, f"/s{i}", *(("--http2",) if i % 2 else ()))
            assert done.returncode == 0 and done.stdout.endswith("\n200"), done
            body = done.stdout.rsplit("\n", 1)[0]
            over_https.add(body if body.startswith("cloud-") else json.loads(body)["agent"])
        assert over_https == {"cloud-a", "agent-1"}
    finally:
        proc.stop()
    time.sleep(SETTLE)
    assert set(_count(edge, domain, 10)) == {"cloud-a"}
    client.endpoints.delete(cloud.id)


def test_each_pooling_mismatch_is_refused_where_it_happens(
    node_agents,
    edge,
    account,
    client,
    domain,
    agents,
):
    token = _credential(account)["token"]
    cloud = _pooled_cloud(client, domain, "cloud-a")
    # an agent without pooling where a pooled cloud endpoint lives: the JS SDK and the
    # Python SDK 1.4.0 (no pooling option) are both refused with ERR_NGROK_334
    plain = node_agents(edge, token, domain=domain, name="plain")
    refused = plain.out
    plain.stop()
    assert refused.get("code") == edge_errors.ENDPOINT_IN_USE, refused
    assert "enable pooling" in refused["error"], refused
    py = agents(edge, token, [{"proto": "http", "domain": domain}])
    events = py.start()
    assert any(edge_errors.ENDPOINT_IN_USE in " ".join(e.get("args", [])) for e in events)
    # a cloud endpoint without pooling on the pooled URL: ERR_NGROK_18017
    exc = _api_error(
        lambda: client.endpoints.create(
            url=f"https://{domain}", type="cloud", traffic_policy=_answer("x")
        )
    )
    assert (exc.http_status_code, exc.error_code) == (400, errors.POOLING_DISABLED_CONFLICT)
    # the pool's cloud member cannot turn pooling off while an agent shares the URL
    joined = node_agents(edge, token, domain=domain, pooling_enabled=True, name="a")
    out = joined.out
    try:
        assert _host(out.get("url", "")) == domain, out
        exc = _api_error(lambda: client.endpoints.update(cloud.id, pooling_enabled=False))
        assert exc.error_code == errors.POOLING_DISABLED_CONFLICT
    finally:
        joined.stop()
    client.endpoints.delete(cloud.id)
    # a non-pooled agent holds the URL: a pooled cloud endpoint is ERR_NGROK_18016, a
    # pooled agent ERR_NGROK_334
    holder = node_agents(edge, token, domain=domain, name="holder")
    out = holder.out
    try:
        assert _host(out.get("url", "")) == domain, out
        exc = _api_error(lambda: _pooled_cloud(client, domain, "cloud-b"))
        assert (exc.http_status_code, exc.error_code) == (400, errors.POOLING_ENABLED_CONFLICT)
        pooled = node_agents(edge, token, domain=domain, pooling_enabled=True, name="p")
        refused = pooled.out
        pooled.stop()
        assert refused.get("code") == edge_errors.ENDPOINT_IN_USE, refused
        assert "without pooling" in refused["error"], refused
    finally:
        holder.stop()


def test_a_full_pool_refuses_the_next_agent_with_the_hosted_code(
    node_agents,
    edge,
    account,
    client,
    domain,
):
    """The bound, measured at the edge: MAX_MEMBERS - 1 cloud members and one agent fill the
    pool; the next agent is refused with ERR_NGROK_18020 and so is the next cloud endpoint."""
    made = [_pooled_cloud(client, domain, f"cloud-{i}") for i in range(pooling.MAX_MEMBERS - 1)]
    token = _credential(account)["token"]
    first = node_agents(edge, token, domain=domain, pooling_enabled=True, name="last")
    out = first.out
    try:
        assert _host(out.get("url", "")) == domain, out
        extra = node_agents(edge, token, domain=domain, pooling_enabled=True, name="x")
        refused = extra.out
        extra.stop()
        assert refused.get("code") == edge_errors.POOL_FULL, refused
        exc = _api_error(lambda: _pooled_cloud(client, domain, "cloud-x"))
        assert (exc.http_status_code, exc.error_code) == (400, errors.POOL_FULL)
        time.sleep(SETTLE)
        seen = _count(edge, domain, pooling.MAX_MEMBERS * 2)
        assert len(seen) == pooling.MAX_MEMBERS, seen  # every member answered
    finally:
        first.stop()
    for ep in made:
        client.endpoints.delete(ep.id)
