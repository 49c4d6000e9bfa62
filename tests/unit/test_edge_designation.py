"""HTTPS edges in a cluster (edge/group_spread.py, edge/designation.py): an edge with a
rate-limited route is served by one designated instance (the designation wins over the
tunnel-group spread), chosen among the instances holding its labeled tunnels; an HTTP/2
connection is spread before any request is read, to an instance that can serve every route.
"""

import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from chalicelib.core import instances, online
from edge import cluster, designation
from edge.group_spread import GroupSpread, pick_covering

LIMITED = json.dumps(
    {"on_http_request": [{"actions": [{"type": "rate-limit", "config": {"capacity": 5}}]}]}
)
ANSWERED = json.dumps({"on_http_request": [{"actions": [{"type": "deny"}]}]})


def _serving(*ids, state="serving"):
    return [
        {"instance_id": i, "address": f"127.0.0.1:{n}", "state": state}
        for n, i in enumerate(ids, 7000)
    ]


class Router:
    def __init__(self, edges, sets):
        self.edges, self.sets = edges, sets  # host -> (edge, routes); host -> label sets

    async def https_edge_for(self, host):
        return self.edges.get(host)

    async def group_labels(self, host, target):
        return "acct", self.sets.get(host, [])


class Edge:
    """A cluster instance ``me`` whose store holds ``tunnels`` (labels -> online tunnels)
    and the registry ``live``."""

    def __init__(self, me, edges, sets, tunnels, live):
        self.settings = SimpleNamespace(instance_id=me, head_timeout=30.0, tcp_host="t")
        self.router = Router(edges, sets)
        self.tunnels, self.live = tunnels, live
        self.registry = SimpleNamespace(http_tunnel=lambda *a: None, by_port={})
        self.sessions, self.connections = set(), set()

    async def call(self, func, *args):
        if func is online.online_tunnels:
            return self.tunnels.get(tuple(sorted(args[1].items())), [])
        if func is instances.live_instances:
            return self.live
        if func is instances.address_of:
            return {i["instance_id"]: i["address"] for i in self.live}.get(args[0])
        if func is instances.lease_of:
            found = [i for i in self.live if i["instance_id"] == args[0]]
            return (found[0]["address"], found[0].get("renewed_at", 0.0)) if found else None
        raise AssertionError(func)


def _route(policy=None, enabled=True):
    route = {"id": "rt_1", "match_type": "path_prefix", "match": "/"}
    if policy is not None:
        route["traffic_policy"] = {"enabled": enabled, "value": policy}
    return route


def _tunnel(n, instance):
    return {"tunnel_id": f"tn_{n}", "instance_id": instance}


APP = {"app": "a"}
DB = {"app": "db"}


def test_an_edge_without_a_rate_limited_route_is_not_designated():
    live = _serving("edge_a", "edge_b")
    for routes in ([_route()], [_route(ANSWERED)], [_route(LIMITED, enabled=False)]):
        edge = Edge("edge_a", {"h": ({"id": "edghts_1"}, routes)}, {}, {}, live)
        assert asyncio.run(GroupSpread(edge, "edge_a").designated("h")) == (False, None)
    edge = Edge("edge_a", {}, {}, {}, live)  # no edge at all (an agent endpoint's name)
    assert asyncio.run(GroupSpread(edge, "edge_a").designated("h")) == (False, None)


def test_every_instance_designates_the_same_one_for_every_hostname_of_an_edge():
    live = _serving("edge_a", "edge_b", "edge_c")
    edges = {
        f"h{n}": ({"id": f"edghts_{e}"}, [_route(ANSWERED), _route(LIMITED)])
        for n, e in enumerate([1, 1, 1, 2, 3, 4, 5, 6, 7, 8])
    }
    answers = {}
    for me in ("edge_a", "edge_b", "edge_c"):
        for host, (edge, _) in edges.items():
            got = asyncio.run(GroupSpread(Edge(me, edges, {}, {}, live), me).designated(host))
            chosen = designation.designate(edge["id"], live)
            assert got == (True, None if chosen["instance_id"] == me else chosen["address"])
            answers.setdefault(host, set()).add(chosen["instance_id"])
    assert all(len(ids) == 1 for ids in answers.values())
    assert answers["h0"] == answers["h1"] == answers["h2"]  # one edge: one instance
    assert len(set().union(*answers.values())) == 3  # edges spread over the instances


def test_the_designated_instance_holds_the_edges_labeled_tunnels():
    live = _serving("edge_a", "edge_b", "edge_c")
    edges = {f"h{n}": ({"id": f"edghts_{n}"}, [_route(LIMITED)]) for n in range(40)}
    sets = {host: [APP] for host in edges}
    tunnels = {(("app", "a"),): [_tunnel(1, "edge_c")]}
    for host in edges:
        got = asyncio.run(
            GroupSpread(Edge("edge_a", edges, sets, tunnels, live), "edge_a").designated(host)
        )
        assert got == (True, "127.0.0.1:7002")  # edge_c's, whatever the hash prefers
    tunnels = {}  # none online: every serving instance is a candidate (all answer 502)
    seen = {
        asyncio.run(
            GroupSpread(Edge("edge_a", edges, sets, tunnels, live), "edge_a").designated(host)
        )[1]
        for host in edges
    }
    assert seen == {None, "127.0.0.1:7001", "127.0.0.1:7002"}


@pytest.mark.parametrize(
    "holding, expected",
    [
        ([{"edge_b", "edge_c"}, {"edge_c"}], ["edge_c"]),  # one of every set
        ([{"edge_b"}, {"edge_c"}], ["edge_b", "edge_c"]),  # none has every set: any
        ([{"edge_d"}], ["edge_a", "edge_b", "edge_c"]),  # a draining one's: every serving
        ([set()], ["edge_a", "edge_b", "edge_c"]),
        ([], ["edge_a", "edge_b", "edge_c"]),  # no tunnel group at all
    ],
)
def test_the_candidates_of_a_designation(holding, expected):
    live = _serving("edge_a", "edge_b", "edge_c") + _serving("edge_d", state="draining")
    got = designation.candidates(live, holding)
    assert [i["instance_id"] for i in got] == expected


def test_an_http2_connection_goes_where_every_route_can_be_served():
    found = [
        [_tunnel(1, "edge_b"), _tunnel(2, "edge_c")],
        [_tunnel(3, "edge_c")],
    ]
    assert {pick_covering(found) for _ in range(50)} == {"edge_c"}
    found = [[_tunnel(1, "edge_b")], [_tunnel(3, "edge_c")]]  # none covers both: any
    assert {pick_covering(found) for _ in range(200)} == {"edge_b", "edge_c"}
    assert pick_covering([[], []]) is None
    assert pick_covering([]) is None
    many = [[_tunnel(n, "edge_b" if n < 3 else "edge_c") for n in range(4)]]
    picks = [pick_covering(many) for _ in range(4000)]  # in proportion to the tunnels
    assert 0.65 < picks.count("edge_b") / len(picks) < 0.85


def test_target_h2_reads_every_routes_labels_and_serves_here_when_picked_here():
    live = _serving("edge_a", "edge_b")
    sets = {"h": [APP, DB]}
    tunnels = {(("app", "a"),): [_tunnel(1, "edge_b")], (("app", "db"),): [_tunnel(2, "edge_b")]}
    edge = Edge("edge_a", {}, sets, tunnels, live)
    assert asyncio.run(GroupSpread(edge, "edge_a").target_h2("h")) == "127.0.0.1:7001"
    edge = Edge("edge_b", {}, sets, tunnels, live)
    assert asyncio.run(GroupSpread(edge, "edge_b").target_h2("h")) is None
    edge = Edge("edge_a", {}, {}, tunnels, live)  # no tunnel group: served here
    assert asyncio.run(GroupSpread(edge, "edge_a").target_h2("h")) is None


class Writer:
    def __init__(self, alpn):
        self.alpn = alpn
        self.server_name = "h"

    def get_extra_info(self, name, default=None):
        if name == "ssl_object":
            return SimpleNamespace(selected_alpn_protocol=lambda: self.alpn)
        return ("198.51.100.7", 5555) if name == "peername" else default


def _relaying(edge):
    settings = cluster.ClusterSettings(
        secret="s" * 16, relay_host="127.0.0.1", relay_port=0, advertise="127.0.0.1"
    )
    c = cluster.Cluster(edge, settings)
    sent = []

    async def relay(address, kind, arg, peer, reader, writer, first=b""):
        sent.append((address, kind, arg, first))
        return True

    async def no_pool(*args):
        return None

    async def no_claim(name, local):
        return None

    c.relay = relay
    c.holder_address = no_claim
    return c, sent, no_pool


async def _https(c, handle, alpn):
    await c.https(handle, asyncio.StreamReader(), Writer(alpn))


@pytest.mark.parametrize("alpn, kind", [("http/1.1", "ghttps"), ("h2", "gh2")])
def test_the_designation_wins_over_the_spread(monkeypatch, alpn, kind):
    """A rate-limited edge's connection goes to its designated instance, HTTP/1.1 or 2, even
    where a labeled tunnel of another instance would have been picked, with no request head
    read first."""
    live = _serving("edge_a", "edge_b", "edge_c")
    sets = {"h": [APP]}
    tunnels = {(("app", "a"),): [_tunnel(1, "edge_b"), _tunnel(2, "edge_c")]}
    edges = {"h": ({"id": "edghts_x"}, [_route(LIMITED)])}
    chosen = designation.designate(
        "edghts_x", designation.candidates(live, [{"edge_b", "edge_c"}])
    )
    c, sent, no_pool = _relaying(Edge("edge_a", edges, sets, tunnels, live))
    monkeypatch.setattr(cluster.pools, "carry", no_pool)
    served = []

    async def handle(reader, writer):
        served.append(1)

    for _ in range(10):
        asyncio.run(_https(c, handle, alpn))
    assert served == []
    assert sent == [(chosen["address"], kind, "h", b"")] * 10
    assert c.groups.designated_out == 10 and c.groups.spread_out == 0


def test_an_http2_connection_of_a_group_edge_is_spread(monkeypatch):
    live = _serving("edge_a", "edge_b")
    sets = {"h": [APP]}
    tunnels = {(("app", "a"),): [_tunnel(1, "edge_b")]}
    edges = {"h": ({"id": "edghts_x"}, [_route(ANSWERED)])}
    c, sent, no_pool = _relaying(Edge("edge_a", edges, sets, tunnels, live))
    monkeypatch.setattr(cluster.pools, "carry", no_pool)
    asyncio.run(_https(c, None, "h2"))
    assert sent == [("127.0.0.1:7001", "gh2", "h", b"")]
    assert c.groups.spread_out == 1


def test_the_receiver_serves_every_edge_kind():
    c, _, _ = _relaying(Edge("edge_a", {}, {}, {}, []))
    for kind in ("ghttp", "ghttps", "gh2"):
        assert c._holds(kind, "h")
    assert c._holds("gtcp", "20001") and not c._holds("gtcp", "h")


class TcpRouter(Router):
    async def tcp_group_labels(self, hostport):
        return "acct", self.sets.get(hostport, [])


def test_a_tcp_edges_connection_goes_to_a_labeled_tunnels_instance():
    """On a reserved address's port with no agent endpoint here, a TCP edge's connection is
    relayed (kind gtcp, the port) to the instance of a tunnel picked among its group's on
    every instance; picked here, or no group: served here."""
    live = _serving("edge_a", "edge_b")
    sets = {"t:20001": [APP]}
    tunnels = {(("app", "a"),): [_tunnel(1, "edge_b")]}
    edge = Edge("edge_a", {}, sets, tunnels, live)
    edge.router = TcpRouter({}, sets)
    c, sent, _ = _relaying(edge)
    reader = None

    async def run(port):
        return await c.tcp(port, reader, Writer("h2"))

    assert asyncio.run(run(20001)) is True
    assert sent == [("127.0.0.1:7001", "gtcp", "20001", b"")]
    assert asyncio.run(run(20002)) is False  # no TCP edge with a group there
    tunnels[(("app", "a"),)] = [_tunnel(2, "edge_a")]
    c.groups = GroupSpread(edge, "edge_a")  # past the 1 s cache
    assert asyncio.run(run(20001)) is False and len(sent) == 1
    relayed = Writer("h2")
    relayed.relayed = True  # a relayed connection is never relayed again
    assert asyncio.run(c.tcp(20001, reader, relayed)) is False


def test_an_instance_that_refused_the_relay_is_designated_no_more():
    """A killed instance stays in the registry until its lease ends (15 s); one whose relay
    listener refused a connection within HOLD_SECONDS is left out of every designation
    (HTTPS edges' and cloud endpoints'), so the next connection goes to the next instance."""
    live = _serving("edge_a", "edge_b", "edge_c")
    edges = {f"h{n}": ({"id": f"edghts_{n}"}, [_route(LIMITED)]) for n in range(30)}
    c, _, _ = _relaying(Edge("edge_a", edges, {}, {}, live))
    for host, (edge, _) in edges.items():
        chosen = designation.designate(edge["id"], live)
        if chosen["instance_id"] == "edge_a":
            continue
        c._dead = {chosen["address"]: time.monotonic()}
        got = asyncio.run(c.groups.designated(host, c.refused()))
        assert got[1] != chosen["address"]
        after = designation.designate(edge["id"], [i for i in live if i is not chosen])
        assert got == (True, None if after["instance_id"] == "edge_a" else after["address"])
    c._dead = {"127.0.0.1:7001": time.monotonic() - cluster.HOLD_SECONDS - 1}
    assert c.refused() == {}  # long ago: its lease has ended, or it is back


def test_an_instance_that_renewed_its_lease_after_refusing_is_designated_again():
    """Started again on the same address (the supervisor): its lease renewed after the refusal,
    so it is designated again at once, as every instance that saw no refusal designates it
    (otherwise instances disagree for HOLD_SECONDS and a rate-limited name meets two
    counters)."""
    live = _serving("edge_a", "edge_b", "edge_c")
    refused_at = 1_000.0
    for instance in live:
        instance["renewed_at"] = refused_at - 1  # killed: no renewal since the refusal
    refused = {live[1]["address"]: refused_at}
    assert [i["instance_id"] for i in designation.not_refused(live, refused)] == [
        "edge_a",
        "edge_c",
    ]
    live[1]["renewed_at"] = refused_at  # renewed at the very moment: not after it
    assert len(designation.not_refused(live, refused)) == 2
    live[1]["renewed_at"] = refused_at + 0.5  # started again, lease renewed since
    assert designation.not_refused(live, refused) == live
    assert designation.not_refused(live, {}) == live


def test_a_refusal_is_dated_in_the_leases_clock():
    c, _, _ = _relaying(Edge("edge_a", {}, {}, {}, _serving("edge_a")))
    before = time.time()
    c._dead = {"127.0.0.1:7001": time.monotonic() - 2.0}
    ((address, at),) = c.refused().items()
    assert address == "127.0.0.1:7001"
    assert before - 2.5 < at < time.time() - 1.5
