"""A pool across edge instances (edge/pools.py ``carry``, edge/cluster.py): three instances
behind HAProxy as processes (the cluster of tests/edge/test_cluster.py), a pooled cloud
endpoint made with ``ngrok-api``, and JavaScript SDK agents with pooling enabled connected to
two different instances. Connections landing on any instance reach every member: the agent of
another instance by relay, the cloud member where they land."""

import json
import time
from collections import Counter

import ngrok

from edge.pools import CLOUD_CACHE_SECONDS
from tests.edge.test_cloud_endpoints_on_the_wire import _answer
from stacks.cluster import Target
from tests.edge.test_cluster import api  # noqa: F401 (a fixture)
from tests.edge.test_edge_sdk import _credential, _host

REQUESTS = 30


def _who(resp):
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    return resp.text if resp.text.startswith("cloud-") else json.loads(resp.text)["agent"]


def test_a_pool_spans_instances(cluster, api, node_agents):  # noqa: F811 (api)
    account = api.new_account()
    domain = f"xpool-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": domain}).status == 201
    client = ngrok.Client(account.admin.token, base_url=api.base_url)
    cloud = client.endpoints.create(
        url=f"https://{domain}",
        type="cloud",
        traffic_policy=_answer("cloud-a"),
        pooling_enabled=True,
    )
    token = _credential(account)["token"]
    procs = []
    try:
        for index in (0, 1):  # one agent on instance 0, one on instance 1
            target = Target(cluster.agent_target(index).server_addr, cluster.ca)
            proc = node_agents(
                target, token, domain=domain, pooling_enabled=True, name=f"agent-{index}"
            )
            out = proc.out
            procs.append(proc)
            assert _host(out.get("url", "")) == domain, out
        time.sleep(CLOUD_CACHE_SECONDS + 1)
        for index in (2, 0, -1):  # an instance with no agent, one with an agent, HAProxy
            seen = Counter(
                _who(cluster.get(domain, f"/r{i}", index=index)) for i in range(REQUESTS)
            )
            print(f"instance {index}:", dict(seen))
            assert set(seen) == {"cloud-a", "agent-0", "agent-1"}, (index, seen)
        # the agent of instance 1 leaves: instance 2 reaches the rest
        procs.pop().stop()
        time.sleep(CLOUD_CACHE_SECONDS + 1)
        seen = Counter(_who(cluster.get(domain, f"/s{i}", index=2)) for i in range(REQUESTS))
        assert set(seen) == {"cloud-a", "agent-0"}, seen
    finally:
        for proc in procs:
            proc.stop()
        client.endpoints.delete(cloud.id)
