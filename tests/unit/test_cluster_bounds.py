"""The bounds of edge/cluster.py that the process tests cannot wait for (docs/CLUSTER.md):
a connection waits for a moving endpoint at most HOLD_SECONDS; a drain asks every agent to
move within DRAIN_SECONDS even when a session never goes idle; an instance's lease is live
for LEASE_SECONDS; the relay settings; the Host of a request head."""

import asyncio
import time
from types import SimpleNamespace

import pytest

from chalicelib.core import instances, online, pooling
from edge import cluster


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
    """An edge whose store says ``claims[name]`` holds each name, at ``addresses``."""

    def __init__(self, claims, addresses):
        super().__init__()
        self.claims, self.addresses = claims, addresses

    async def call(self, func, *args, **kwargs):
        if func is online.claim_instance:
            return self.claims.get(args[0])
        if func is instances.address_of:
            return self.addresses.get(args[0])
        raise AssertionError(func)


def test_a_cloud_endpoint_is_served_where_its_connection_lands_without_a_wait(monkeypatch):
    monkeypatch.setattr(cluster, "HOLD_POLL", 0.05)
    edge = ClaimEdge(
        {
            "cloud.tunnels.localhost": pooling.API_INSTANCE,
            "there.tunnels.localhost": "edge_b",
            "gone.tunnels.localhost": "edge_dead",
        },
        {"edge_b": "127.0.0.1:7001"},
    )
    c = _cluster(edge)
    assert asyncio.run(c._lookup("cloud.tunnels.localhost")) == ("local", None)
    assert asyncio.run(c._lookup("free.tunnels.localhost")) == ("local", None)
    assert asyncio.run(c._lookup("there.tunnels.localhost")) == ("relay", "127.0.0.1:7001")
    assert asyncio.run(c._lookup("gone.tunnels.localhost")) == ("moving", None)
    start = time.monotonic()
    assert asyncio.run(c.holder_address("cloud.tunnels.localhost", lambda: False)) is None
    assert time.monotonic() - start < cluster.HOLD_SECONDS / 2


class BusySession:
    """A session with a proxy stream always in flight."""

    def __init__(self):
        self.ended = None
        self.mux = SimpleNamespace(_streams={1: SimpleNamespace(local=True, done=False)})

    async def end(self, reason):
        self.ended = reason


def test_a_drain_asks_every_agent_to_move_within_drain_seconds(monkeypatch):
    monkeypatch.setattr(cluster, "DRAIN_SECONDS", 0.5)
    monkeypatch.setattr(cluster, "HOLDER_CACHE_SECONDS", 0.0)
    edge = FakeEdge()
    busy = [BusySession() for _ in range(3)]
    edge.sessions = set(busy)
    c = _cluster(edge)
    start = time.monotonic()
    asyncio.run(c.drain_sessions())
    assert time.monotonic() - start < 0.5 + 0.5 + 1.0  # settle 0.5 s + drain bound + slack
    assert all(s.ended == "the edge instance is restarting; reconnect" for s in busy)
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
