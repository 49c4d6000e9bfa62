"""The bounds of edge/cluster.py that the process tests cannot wait for (docs/CLUSTER.md):
a connection waits for a moving endpoint at most HOLD_SECONDS; a drain asks every agent to
move within DRAIN_SECONDS even when a session never goes idle; an instance's lease is live
for LEASE_SECONDS; the relay settings; the Host of a request head."""

import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from chalicelib.core import instances, online, pooling
from edge import cluster
from stacks import muxado
from tests.unit.test_edge_session import agent_pair, eventually


class FakeEdge:
    def __init__(self):
        self.settings = SimpleNamespace(
            instance_id="edge_me", head_timeout=30.0, tcp_host="tunnels.localhost"
        )
        self.sessions = set()
        self.connections = set()
        self.registry = SimpleNamespace(http_tunnel=lambda *a: None, by_port={})

    async def call(self, func, *args, **kwargs):
        return None


def _cluster(edge=None):
    settings = cluster.ClusterSettings(
        secret="s" * 16, relay_host="127.0.0.1", relay_port=0, advertise="127.0.0.1"
    )
    return cluster.Cluster(edge or FakeEdge(), settings)


def test_a_moving_endpoint_is_waited_on_at_most_hold_seconds(monkeypatch):
    monkeypatch.setattr(cluster, "HOLD_SECONDS", 0.6)
    monkeypatch.setattr(cluster, "HOLD_POLL", 0.05)
    c = _cluster()
    looked = []

    async def moving(name):
        looked.append(name)
        return "moving", None

    c._lookup = moving
    start = time.monotonic()
    assert asyncio.run(c.holder_address("a.tunnels.localhost", lambda: False)) is None
    took = time.monotonic() - start
    assert 0.6 <= took < 3.0
    assert len(looked) <= 0.6 / 0.05 + 2  # one store read per HOLD_POLL


def test_a_wait_ends_when_the_endpoint_is_bound_here(monkeypatch):
    monkeypatch.setattr(cluster, "HOLD_POLL", 0.05)
    c = _cluster()
    calls = []

    async def moving(name):
        calls.append(name)
        return "moving", None

    c._lookup = moving
    start = time.monotonic()
    assert asyncio.run(c.holder_address("a.tunnels.localhost", lambda: len(calls) >= 3)) is None
    assert time.monotonic() - start < cluster.HOLD_SECONDS / 2


class ClaimEdge(FakeEdge):
    """An edge whose store says ``claims[name]`` holds each name, at ``addresses``, with
    ``clouds[name]`` the cloud endpoint a claim carries and ``live`` the registry."""

    def __init__(self, claims, addresses, clouds=None, live=(), renewed=None):
        super().__init__()
        self.claims, self.addresses = claims, addresses
        self.clouds, self.live = clouds or {}, list(live)
        self.renewed = renewed or {}  # instance id -> its lease's last renewal (epoch)

    async def call(self, func, *args, **kwargs):
        if func is online.claim_instance:
            return self.claims.get(args[0])
        if func is instances.address_of:
            return self.addresses.get(args[0])
        if func is instances.lease_of:
            address = self.addresses.get(args[0])
            return (address, self.renewed.get(args[0], 0.0)) if address else None
        if func is online.cloud_endpoint_for:
            return self.clouds.get(args[0])
        if func is instances.live_instances:
            return self.live
        raise AssertionError(func)


def test_a_refused_holder_is_held_until_its_lease_is_renewed(monkeypatch):
    """A relay refused (kill -9): the holder's connections wait (HOLD_SECONDS) while the
    claim's instance has not renewed its lease since the refusal; one that has (started again
    on the same address: a fixed EDGE_RELAY_PORT) is relayed to at once; past HOLD_SECONDS,
    the refusal is forgotten. The same rule as a designation's (``not_refused``)."""
    import socket

    monkeypatch.setattr(cluster, "HOLD_SECONDS", 0.5)
    monkeypatch.setattr(cluster, "HOLD_POLL", 0.05)
    closed = socket.socket()  # bound, never listening: a connect to it is refused
    closed.bind(("127.0.0.1", 0))
    address = "127.0.0.1:%d" % closed.getsockname()[1]
    name = "x.tunnels.localhost"
    edge = ClaimEdge({name: "edge_b"}, {"edge_b": address}, renewed={"edge_b": time.time()})
    c = _cluster(edge)

    def holder():
        c._holders.clear()
        start = time.monotonic()
        got = asyncio.run(c.holder_address(name, lambda: False))
        return got, time.monotonic() - start

    try:
        assert holder()[0] == address
        assert asyncio.run(c.relay(address, "http", "x", ("127.0.0.1", 1), None, None)) is False
        got, took = holder()  # its last renewal is older than the refusal: held HOLD_SECONDS
        assert took >= 0.5
        assert asyncio.run(c.relay(address, "http", "x", ("127.0.0.1", 1), None, None)) is False
        edge.renewed["edge_b"] = time.time() + 0.01  # renewed since: started again
        got, took = holder()
        assert got == address and took < 0.25
        edge.renewed["edge_b"] = 0.0
        c._dead[address] -= 0.5  # the refusal is HOLD_SECONDS old
        got, took = holder()
        assert got == address and took < 0.25
    finally:
        closed.close()


LIMITED = {"on_http_request": [{"actions": [{"type": "rate-limit", "config": {}}]}]}
ANSWERED = {"on_http_request": [{"actions": [{"type": "custom-response", "config": {}}]}]}


def _serving(*ids):
    return [
        {"instance_id": i, "address": f"127.0.0.1:{n}", "state": "serving"}
        for n, i in enumerate(ids, 7000)
    ]


def test_a_cloud_endpoint_is_served_where_its_connection_lands_without_a_wait(monkeypatch):
    monkeypatch.setattr(cluster, "HOLD_POLL", 0.05)
    edge = ClaimEdge(
        {
            "cloud.tunnels.localhost": pooling.API_INSTANCE,
            "there.tunnels.localhost": "edge_b",
            "gone.tunnels.localhost": "edge_dead",
        },
        {"edge_b": "127.0.0.1:7001"},
        clouds={"cloud.tunnels.localhost": {"traffic_policy": json.dumps(ANSWERED)}},
        live=_serving("edge_me", "edge_b"),
    )
    c = _cluster(edge)
    assert asyncio.run(c._lookup("cloud.tunnels.localhost")) == ("local", None)
    assert asyncio.run(c._lookup("free.tunnels.localhost")) == ("local", None)
    assert asyncio.run(c._lookup("there.tunnels.localhost")) == ("relay", "127.0.0.1:7001")
    assert asyncio.run(c._lookup("gone.tunnels.localhost")) == ("moving", None)
    start = time.monotonic()
    assert asyncio.run(c.holder_address("cloud.tunnels.localhost", lambda: False)) is None
    assert time.monotonic() - start < cluster.HOLD_SECONDS / 2


def test_a_rate_limited_cloud_endpoint_is_served_by_its_designated_instance():
    live = _serving("edge_me", "edge_b", "edge_c")
    names = [f"n{i}.example.com" for i in range(60)]
    clouds = {name: {"traffic_policy": json.dumps(LIMITED)} for name in names}
    claims = {name: pooling.API_INSTANCE for name in names}
    here, relayed = 0, 0
    for name in names:
        c = _cluster(ClaimEdge(claims, {}, clouds=clouds, live=live))
        chosen = cluster.designate(name, live)
        got = asyncio.run(c._lookup(name))
        if chosen["instance_id"] == "edge_me":
            assert got == ("local", None)
            here += 1
        else:
            assert got == ("relay", chosen["address"])
            assert name in c._cloud_names  # relayed as a cloud kind the holder accepts
            relayed += 1
    assert here and relayed  # the names spread over the instances


def test_a_cloud_endpoints_designation_skips_an_instance_that_refused_the_relay():
    """Instead of holding its connections until the killed instance's lease ends."""
    live = _serving("edge_me", "edge_b", "edge_c")
    names = [f"d{i}.example.com" for i in range(40)]
    clouds = {name: {"traffic_policy": json.dumps(LIMITED)} for name in names}
    claims = {name: pooling.API_INSTANCE for name in names}
    for name in names:
        chosen = cluster.designate(name, live)
        if chosen["instance_id"] == "edge_me":
            continue
        c = _cluster(ClaimEdge(claims, {}, clouds=clouds, live=live))
        c._dead = {chosen["address"]: time.monotonic()}
        after = cluster.designate(name, [i for i in live if i is not chosen])
        expected = (
            ("local", None)
            if after["instance_id"] == "edge_me"
            else (
                "relay",
                after["address"],
            )
        )
        assert asyncio.run(c._lookup(name)) == expected


def test_every_instance_designates_the_same_one_and_a_departure_moves_only_its_names():
    live = _serving("edge_a", "edge_b", "edge_c")
    names = [f"n{i}.example.com" for i in range(300)]
    before = {name: cluster.designate(name, live)["instance_id"] for name in names}
    assert before == {name: cluster.designate(name, live[::-1])["instance_id"] for name in names}
    assert set(before.values()) == {"edge_a", "edge_b", "edge_c"}
    after = {name: cluster.designate(name, live[:2])["instance_id"] for name in names}
    moved = [name for name in names if before[name] != after[name]]
    assert moved and all(before[name] == "edge_c" for name in moved)
    draining = [dict(live[0], state="draining")] + live[1:]
    assert all(cluster.designate(name, draining)["instance_id"] != "edge_a" for name in names)
    assert cluster.designate("x", []) is None
    assert cluster.designate("x", [dict(live[0], address=None)]) is None


@pytest.mark.parametrize(
    "policy, limited",
    [
        (json.dumps(LIMITED), True),
        (LIMITED, True),
        ("on_http_request:\n  - actions:\n      - type: rate-limit\n", True),
        (json.dumps(ANSWERED), False),
        ({"on_http_response": [{"actions": [{"type": "rate-limit"}]}]}, True),
        ({"on_http_request": [{"actions": "rate-limit"}]}, False),
        ("", False),
        (None, False),
        ("[1, 2]", False),
        ("{not: [valid", False),
        ("x" * 70_000, False),
    ],
)
def test_whether_a_policy_has_a_rate_limit(policy, limited):
    assert cluster.rate_limited(policy) is limited


def test_the_holder_accepts_a_designated_cloud_endpoints_connection():
    c = _cluster()
    for kind in cluster.CLOUD_KINDS:
        assert c._holds(kind, "cloud.example.com")
    assert not c._holds("http", "cloud.example.com")  # no agent endpoint of that name here


class BusySession:
    """An agent session (a real one, run by the core over a socket pair whose other end
    plays the agent) with a proxy stream of the edge's in flight until ``finish``."""

    def __init__(self, mux, peer):
        self.mux, self.peer, self.ended = mux, peer, None
        self.stream = mux.open_stream()  # what a request the core serves holds, as well

    def finish(self):
        self.stream.finish()
        self.peer.send(muxado.data(self.stream.id, b"", fin=True))  # the agent's FIN

    async def end(self, reason):
        self.ended = (reason, asyncio.get_running_loop().time())


async def _busy() -> BusySession:
    mux, _, peer = await agent_pair(lambda stream: asyncio.sleep(0))
    return BusySession(mux, peer)


def test_in_flight_counts_the_streams_the_edge_opened_until_they_leave_its_table():
    async def main():
        session = await _busy()
        opened = cluster.in_flight(session)
        session.peer.send(muxado.data(1, b"x", syn=True))  # the agent's stream: not counted
        await eventually(lambda: session.mux.remote_open == 1)
        with_agents = cluster.in_flight(session)
        session.finish()
        await eventually(lambda: session.mux.local_open == 0)
        return opened, with_agents, cluster.in_flight(session)

    assert asyncio.run(main()) == (1, 1, 0)
    assert cluster.in_flight(SimpleNamespace(mux=None)) == 0  # an OpenSSH session's


def test_a_drain_waits_for_a_session_in_flight_then_asks_it_to_move(monkeypatch):
    monkeypatch.setattr(cluster, "DRAIN_SECONDS", 5.0)
    monkeypatch.setattr(cluster, "HOLDER_CACHE_SECONDS", 0.0)

    async def main():
        edge = FakeEdge()
        busy, idle = await _busy(), await _busy()
        idle.finish()
        edge.sessions = {busy, idle}
        loop = asyncio.get_running_loop()
        start = loop.time()
        # its request ends 1.5 s into the drain (which starts 0.5 s in: the holder caches)
        loop.call_later(2.0, busy.finish)
        await _cluster(edge).drain_sessions()
        return busy.ended[1] - start, idle.ended[1] - start

    busy_ended, idle_ended = asyncio.run(main())
    assert 2.0 <= busy_ended < 2.0 + 0.1 + 1.0  # ~0.1 s idle running after it, then GOAWAY
    assert idle_ended < 2.0  # asked to move at once (~0.6 s), not after the busy one


def test_a_drain_asks_every_agent_to_move_within_drain_seconds(monkeypatch):
    monkeypatch.setattr(cluster, "DRAIN_SECONDS", 0.5)
    monkeypatch.setattr(cluster, "HOLDER_CACHE_SECONDS", 0.0)

    async def main():
        edge = FakeEdge()
        busy = [await _busy() for _ in range(3)]  # never finished
        edge.sessions = set(busy)
        c = _cluster(edge)
        start = time.monotonic()
        await c.drain_sessions()
        return c, busy, time.monotonic() - start

    c, busy, took = asyncio.run(main())
    assert took < 0.5 + 0.5 + 1.0  # settle 0.5 s + drain bound + slack
    assert all(s.ended[0] == "the edge instance is restarting; reconnect" for s in busy)
    assert c.draining and c.keep_claims()


def test_the_lease_is_live_for_lease_seconds():
    now = 1_000_000.0
    raw = {"heartbeat_at": {"N": str(now - instances.LEASE_SECONDS + 0.5)}}
    assert instances._live(raw, now)
    raw = {"heartbeat_at": {"N": str(now - instances.LEASE_SECONDS - 0.5)}}
    assert not instances._live(raw, now)
    assert instances.RENEW_SECONDS * 3 <= instances.LEASE_SECONDS  # two renewals may fail


def test_cluster_settings():
    assert cluster.ClusterSettings.from_env({}) is None
    with pytest.raises(SystemExit):
        cluster.ClusterSettings.from_env({"EDGE_CLUSTER_SECRET": "short"})
    s = cluster.ClusterSettings.from_env(
        {
            "EDGE_CLUSTER_SECRET": "x" * 16,
            "EDGE_RELAY_PORT": "7443",
            "EDGE_RELAY_ADVERTISE": "10.0.0.5",
        }
    )
    assert (s.relay_host, s.relay_port, s.advertise) == ("127.0.0.1", 7443, "10.0.0.5")


def test_host_of_a_request_head():
    head = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST:  A.Example.COM:8080 \r\n\r\n"
    assert cluster.host_of(head) == "a.example.com"
    assert cluster.host_of(b"GET / HTTP/1.1\r\n\r\n") == ""
    assert cluster.host_of(b"GET / HTTP/1.1\r\nX-Host: evil\r\n\r\n") == ""
