"""edge/fast_path.py's rules: which hosts the compiled core may serve by itself (a plain
route), on each listener. Each rule is broken one at a time on an otherwise plain endpoint;
the candidate must then be None (the host is Python's), and a plain one must not be."""

import asyncio
import json
import time
import types

import pytest

from chalicelib.core.policy import compile_policy
from edge import fast_path, tls_spec
from edge.decided import DECIDED, RESTRICTED
from edge.edges import CACHE_SECONDS
from edge.fast_path import FastPath
from edge.observe import hub_of
from edge.registry import Registry, Tunnel

HOST = "plain.tunnels.localhost"
RESPONSE_PHASE = {  # events rewritten beside a response body's read: the Python path's
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
REQUEST_PHASE = {
    "on_http_request": [{"actions": [{"type": "add-headers", "config": {"headers": {"a": "1"}}}]}]
}


class _Tls:
    def __init__(self):
        self.by_host = {}

    def spec_for(self, name):
        return self.by_host.get(name, tls_spec.DEFAULT)


async def _settle() -> None:
    """What the calls before started has run: 10 ms, then 100 turns of the loop. A fixed
    sleep alone is not that: on a loaded machine the loop may be preempted past it, and the
    sleep's timer then comes due before the push's next step (each ``await`` that suspends is
    one more turn), so the assertion after ran first."""
    await asyncio.sleep(0.01)
    for _ in range(100):
        await asyncio.sleep(0)


def _edge():
    return types.SimpleNamespace(
        cluster=None,
        banned=set(),
        registry=Registry(),
        tls=_Tls(),
        settings=types.SimpleNamespace(instance_id="edge", host="127.0.0.1"),
        http_port=8080,
        https_port=8443,
    )


def _tunnel(mux, proto="https", **changes):
    session = types.SimpleNamespace(mux=mux, grant=types.SimpleNamespace(account_id="ac_1"))
    tunnel = Tunnel(
        id="tn_1",
        session=session,
        proto=proto,
        url=f"{proto}://{HOST}",
        hostname=HOST,
        endpoint_id="ep_1",
    )
    for name, value in changes.items():
        setattr(tunnel, name, value)
    return tunnel


def _candidate(edge, tunnel, scheme="http", loop=None):
    async def run():
        if tunnel is not None:
            edge.registry.by_host[HOST] = tunnel
        return FastPath(edge).candidate(HOST, scheme)

    if loop is None:
        mux = getattr(getattr(tunnel, "session", None), "mux", None)
        loop = getattr(mux, "loop", None)
    if loop is None:
        return asyncio.run(run())
    return loop.run_until_complete(run())


def test_a_plain_endpoint_is_a_candidate_on_both_listeners(core):
    tunnel = _tunnel(core)
    assert _candidate(_edge(), tunnel, "http") is tunnel
    assert _candidate(_edge(), tunnel, "https") is tunnel


@pytest.mark.parametrize(
    "change",
    [
        # a policy (or an option made a rule) that is not decidable: edge/decided.py
        {"enforcement": types.SimpleNamespace(policy=compile_policy(RESPONSE_PHASE))},
        {"internal": True},
        {"proto": "tls"},
        {"proto": "tcp"},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values())))[:12],
)
def test_an_endpoint_that_needs_python_per_request_is_not(core, change):
    assert _candidate(_edge(), _tunnel(core, **change)) is None
    assert _candidate(_edge(), _tunnel(core, **change), "https") is None


def test_an_endpoint_that_speaks_http2_is_a_candidate_with_its_upstreams_scheme(core):
    """``app_protocol`` http2: the core speaks HTTP/2 on its streams (edge_core/src/h2up.rs),
    ``:scheme`` its upstream's; an HTTP/1.1 endpoint gets none."""
    from edge.decided import h2_scheme_of

    tunnel = _tunnel(core, forwards_proto="http2", forwards_to="https://127.0.0.1:9")
    assert _candidate(_edge(), tunnel) is tunnel
    assert h2_scheme_of(tunnel) == "https"
    tunnel.forwards_to = "http://127.0.0.1:9"
    assert h2_scheme_of(tunnel) == "http"
    assert h2_scheme_of(_tunnel(core)) is None


def test_an_endpoint_that_asked_for_a_proxy_protocol_header_gets_it_from_the_core(core):
    """The core writes the PROXY header itself (edge_core/src/proxyproto.rs): the route carries
    the version and the listener's address, as open_proxy names it."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()

    async def run():
        edge.registry.by_host[HOST] = _tunnel(core, proto="http", proxy_proto=2)
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()

    core.loop.run_until_complete(run())
    assert edge.carrier.set == [("http", HOST, 1)]
    assert edge.carrier.proxy == (2, "127.0.0.1:8080")


def test_a_converting_endpoint_with_no_policy_is_pushed_for_the_core_to_convert(core):
    """The WebSocket-TCP converter is the core's (edge_core/src/wstcp.rs): a converting
    endpoint with no policy is a route pushed ``ws_tcp``, and so is one with a decidable
    policy (each upgrade decided first); with a policy the core cannot decide, or speaking
    HTTP/2, it stays Python's (which hands the core the conversion after its upgrade)."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()

    async def run():
        edge.registry.by_host[HOST] = _tunnel(core, ws_tcp=True)
        FastPath(edge).sync(HOST)
        await _settle()

    core.loop.run_until_complete(run())
    assert edge.carrier.set == [("http", HOST, 1)] and edge.carrier.ws_tcp is True
    tunnel = _tunnel(core, ws_tcp=True)
    assert _candidate(_edge(), tunnel, "https") is tunnel
    decided = types.SimpleNamespace(policy=compile_policy(REQUEST_PHASE))
    assert _candidate(_edge(), _tunnel(core, ws_tcp=True, enforcement=decided)) is not None
    framing = {"type": "remove-headers", "config": {"headers": ["content-length"]}}
    undecidable = types.SimpleNamespace(
        policy=compile_policy({"on_http_request": [{"actions": [framing]}]})
    )
    assert _candidate(_edge(), _tunnel(core, ws_tcp=True, enforcement=undecidable)) is None
    assert _candidate(_edge(), _tunnel(core, ws_tcp=True, forwards_proto="http2")) is None
    assert _candidate(_edge(), _tunnel(core, ws_tcp=False, forwards_proto="http2")) is not None


def test_an_endpoint_with_a_decidable_policy_is_a_candidate(core):
    """Its route is decided (edge/decided.py): the core carries, the policy runs per head."""
    tunnel = _tunnel(core, enforcement=types.SimpleNamespace(policy=compile_policy(REQUEST_PHASE)))
    assert _candidate(_edge(), tunnel, "http") is tunnel
    assert _candidate(_edge(), tunnel, "https") is tunnel


def test_an_endpoint_with_a_circuit_breaker_is_a_decided_candidate_never_held(core):
    """Its own breaker (the Bind option), with no policy or with one the core could hold
    decisions of: decided (each request asks whether it is tripped), its answers all
    counted (never quiet), nothing held; the circuit-breaker action likewise."""
    from edge import breaker, decided, fast_path

    found = breaker.of_option({"error_threshold": 0.5})
    for policy in (None, compile_policy(REQUEST_PHASE)):
        tunnel = _tunnel(core, breaker=found, enforcement=types.SimpleNamespace(policy=policy))
        assert _candidate(_edge(), tunnel) is tunnel
        assert decided.route_mode(tunnel) == decided.DECIDED
        assert decided.counts_answers(tunnel, policy)
        assert fast_path.holds_for(tunnel) is None
    action = compile_policy(
        {"on_http_request": [{"actions": [{"type": "circuit-breaker", "config": {}}]}]}
    )
    tunnel = _tunnel(core, enforcement=types.SimpleNamespace(policy=action))
    assert decided.route_mode(tunnel) == decided.DECIDED
    assert decided.counts_answers(tunnel, action) and fast_path.holds_for(tunnel) is None
    plain = _tunnel(core)
    assert decided.route_mode(plain) == decided.PLAIN
    assert not decided.counts_answers(plain, None)


def test_a_banned_name_or_no_endpoint_is_not(core):
    edge = _edge()
    edge.banned.add(HOST)
    assert _candidate(edge, _tunnel(core)) is None
    assert _candidate(_edge(), None) is None


def test_in_a_cluster_an_endpoint_this_instance_holds_is(core):
    """The endpoint the registry routes the host to is this instance's: the holder serves
    it, so its route is the core's as on a single edge (docs/CLUSTER.md)."""
    edge = _edge()
    edge.cluster = object()
    tunnel = _tunnel(core)
    assert _candidate(edge, tunnel) is tunnel


def test_a_name_whose_tls_settings_require_more_is_the_cores_on_https_alone(core):
    """What the core's TLS can ask (a version range of TLS 1.2 and 1.3, client certificates
    from CAs that parse) makes the name a candidate on HTTPS; never on plain HTTP (Python
    answers it 421 there); a mutual spec whose CAs do not parse, or a range the core has
    not, is Python's on both."""
    from edge.fast_path import core_requires

    edge = _edge()
    for spec in (
        tls_spec.spec_of("1.3", None),
        tls_spec.spec_of(None, None, "1.2"),
        tls_spec.spec_of(None, [_ca_pem()]),
    ):
        edge.tls.by_host[HOST] = spec
        assert core_requires(spec)
        assert _candidate(edge, _tunnel(core), "https") is not None
        assert _candidate(edge, _tunnel(core), "http") is None  # Python answers it 421
    for spec in (
        tls_spec.TlsSpec(cadata="no certificate here", ca_digest="pem:x"),
        tls_spec.spec_of("1.3", None, "1.2"),
    ):
        edge.tls.by_host[HOST] = spec
        assert not core_requires(spec)
        assert _candidate(edge, _tunnel(core), "https") is None


def _ca_pem():
    from stacks.certs import make_ca, pem

    return pem(make_ca("test CA")[1])


def test_the_ca_certificates_of_a_spec_are_read_from_pem_or_der_end_to_end():
    """tls_spec.ca_ders: what the core's TLS is given of a name's CAs, from PEM text (an
    edge's module, the SDKs' option) or DER certificates end to end (the Go SDK's option);
    nothing from bytes that are not whole certificates."""
    import ssl

    pems = [_ca_pem(), _ca_pem()]
    ders = [ssl.PEM_cert_to_DER_cert(p) for p in pems]
    spec = tls_spec.spec_of(None, pems)
    assert sorted(tls_spec.ca_ders(spec)) == sorted(ders)
    joined = tls_spec.TlsSpec(cadata=b"".join(ders), ca_digest="bind:x")
    assert tls_spec.ca_ders(joined) == ders
    for broken in (ders[0][:-1], ders[0] + b"\x30", b"\x31" + ders[0][1:]):
        assert tls_spec.ca_ders(tls_spec.TlsSpec(cadata=broken, ca_digest="bind:y")) == []


def test_an_endpoint_whose_session_is_not_the_cores_or_ended_is_not(core):
    other = types.SimpleNamespace(closed=False)  # OpenSSH's, or a static backend's
    assert _candidate(_edge(), _tunnel(other)) is None
    core.loop.run_until_complete(core.close())
    assert _candidate(_edge(), _tunnel(core)) is None


def test_a_scheme_only_endpoint_is_a_candidate_on_its_own_listener_only(core):
    tunnel = _tunnel(core, proto="http", scheme_only=True)
    assert _candidate(_edge(), tunnel, "http") is tunnel
    assert _candidate(_edge(), tunnel, "https") is None


def test_an_endpoint_whose_bodies_the_inspector_captures_is_pushed_keeping_them(core):
    """Its route keeps each body's first BODY_BYTES + 1 bytes for the records (one more
    tells a cut one); the setting turned off, the refresh that sees it drops the route and
    pushes it again keeping none."""
    from chalicelib.core import inspector as layout

    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.router.kept = []
    capture = hub_of(edge).inspector.capture
    capture[("ac_1", "ep_1")] = (True, float("inf"))
    policy = compile_policy(REQUEST_PHASE)  # held when not captured
    tunnel = _tunnel(core, enforcement=types.SimpleNamespace(policy=policy))

    async def run():
        edge.registry.by_host[HOST] = tunnel
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        pushed = (edge.carrier.set[-1], edge.carrier.capture, edge.carrier.decided_holds)
        capture[("ac_1", "ep_1")] = (False, float("inf"))
        paths.refresh()
        await _settle()
        again = (edge.carrier.set[-1], edge.carrier.capture, edge.carrier.decided_holds)
        return pushed, again, list(edge.carrier.dropped)

    pushed, again, dropped = core.loop.run_until_complete(run())
    holds = (True, fast_path.holds_for(tunnel))  # held only while quiet: no record then
    assert pushed == (("http", HOST, 1), layout.BODY_BYTES + 1, holds)
    assert ("http", HOST) in dropped
    assert again[1:] == (0, (True, fast_path.holds_for(tunnel)))
    assert again[2][1] is not None and again[0][2] == 2  # a new key: held decisions anew


class _Carrier:
    """The core's route table as FastPath drives it: what was set and dropped."""

    def __init__(self):
        self.set, self.dropped = [], []

    def set_route(
        self,
        host,
        key,
        mux,
        tunnel_id,
        ttl,
        scheme,
        cert,
        decided=False,
        responses=False,
        holds=None,
        h2_scheme=None,
        proxy_proto=0,
        proxy_dest="",
        capture=0,
        ws_tcp=False,
    ):
        self.set.append((scheme, host, key))
        self.capture = capture
        self.ws_tcp = ws_tcp
        self.mux = mux
        self.proxy = (proxy_proto, proxy_dest)
        self.decided_holds = (decided, holds)
        self.holds = holds

    def set_pool(self, host, members, ttl, scheme, cert, proxy_dest=""):
        self.set.append((scheme, host, [(m[0], m[2]) for m in members]))
        self.pool_modes = [(m[3], m[4]) for m in members]
        self.pool_captures = [m[6] for m in members]

    def drop_route(self, host, scheme):
        self.dropped.append((scheme, host))

    def set_nameless_cert(self, number):
        pass

    def set_relay(self, host, scheme, address, line, ttl, cert=0):
        self.relays = getattr(self, "relays", {})
        self.relays[(scheme, host)] = (address, line, ttl, cert)

    def drop_relay(self, host, scheme):
        return getattr(self, "relays", {}).pop((scheme, host), None) is not None


def test_a_relay_route_is_pushed_where_the_cores_tls_would_do_and_dropped_by_a_sync(core):
    """A cluster's relay route (FastPath.relay): on the plain listener as given; on HTTPS
    with the name's certificate, but not for a name whose TLS settings require more of a
    handshake (Python's TLS checks them); any change of the host in the registry drops it
    on both listeners (the endpoint may be this instance's now)."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    edge.tls.loaded.set()
    edge.serves_name = lambda name: True
    paths = FastPath(edge)
    paths.cert_number = lambda host: 7  # the certificate's number in the core

    async def run():
        paths.relay(HOST, "http", "127.0.0.1:9", b"NGRELAY1 s http " + HOST.encode(), 2.0)
        paths.relay(HOST, "https", "127.0.0.1:9", b"NGRELAY1 s https " + HOST.encode(), 2.0)
        pushed = dict(edge.carrier.relays)
        edge.tls.by_host["mtls.tunnels.localhost"] = tls_spec.spec_of("1.3", None)
        paths.relay("mtls.tunnels.localhost", "https", "127.0.0.1:9", b"NGRELAY1", 2.0)
        refused = ("https", "mtls.tunnels.localhost") not in edge.carrier.relays
        paths.sync(HOST)
        after = dict(edge.carrier.relays)
        edge.registry.by_host[HOST] = _tunnel(core, proto="http")  # bound here meanwhile
        paths.relay(HOST, "http", "127.0.0.1:9", b"NGRELAY1 s http " + HOST.encode(), 2.0)
        return pushed, refused, after, dict(edge.carrier.relays)

    pushed, refused, after, held_here = core.loop.run_until_complete(run())
    assert held_here == {}
    assert pushed[("http", HOST)] == ("127.0.0.1:9", b"NGRELAY1 s http " + HOST.encode(), 2.0, 0)
    assert pushed[("https", HOST)][3] == 7
    assert refused
    assert ("http", HOST) not in after and ("https", HOST) not in after


class _Router:
    """The router's cache of the account's IP restrictions: ``kept`` is what it holds now
    (None: it would have to read them), ``loads`` counts the reads."""

    def __init__(self):
        self.kept, self.loads = None, 0

    def ip_restrictions_now(self, account_id):
        return self.kept

    async def ip_restrictions(self, account_id):
        self.loads += 1
        self.kept = self.kept if self.kept is not None else []
        return self.kept


def test_a_used_route_is_checked_at_each_refresh_and_renewed_in_the_core_at_half_its_ttl(core):
    """A refresh checks a route that served through what the caches keep, without a task or
    a wait; the core's copy is set again only once half its ROUTE_TTL has passed; a rule that
    now fails drops it at once; facts the caches no longer keep send it the whole way again."""
    from edge import fast_path

    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()  # no certificates yet: the HTTPS listener's route waits
    where = ("http", HOST)

    async def run():
        edge.registry.by_host[HOST] = _tunnel(core, proto="http")
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        assert edge.carrier.set == [("http", HOST, 1)] and edge.router.loads >= 1
        loads = edge.router.loads
        for _ in range(5):
            paths.refresh()
        assert edge.carrier.set == [("http", HOST, 1)] and not paths._pending
        key, tunnel, until, cert, decided, policy = paths.routes[where]
        aged = until - fast_path.ROUTE_TTL / 2 - 0.01  # half the TTL has passed
        paths.routes[where] = (key, tunnel, aged, cert, decided, policy)
        paths.refresh()
        assert edge.carrier.set == [("http", HOST, 1)] * 2 and paths.routes[where][2] > aged
        paths.refresh()
        assert len(edge.carrier.set) == 2  # renewed: not again at the next refresh
        edge.router.kept = None  # the cache let the restrictions go: read, then checked again
        paths.refresh()
        paths.refresh()  # while they are read: no second read, no push
        await _settle()
        assert edge.router.loads == loads + 1 and len(edge.carrier.set) == 2
        assert not paths._pending and where in paths.routes
        edge.router.kept = [{"type": "endpoints", "ip_policy_ids": ["ipp_1"]}]
        paths.refresh()  # the account restricted now: dropped at once, without a wait
        assert where not in paths.routes and edge.carrier.dropped[-1] == where
        await _settle()  # then pushed again: each request's client checked first
        assert paths.routes[where][4] == fast_path.DECIDED | fast_path.RESTRICTED
        assert edge.carrier.decided_holds == (True, None)  # decided, nothing held

    core.loop.run_until_complete(run())


def test_an_accounts_routes_wait_for_one_read_of_its_restrictions_then_are_checked(core):
    """Every used route of an account whose IP restrictions the cache let go waits for one
    read of them (not a push each: an account's thousand routes made a thousand pushes each
    time its cache expired); once read, each is checked again: kept, or dropped when a rule
    now fails."""
    edge, hosts = _three_routes_edge("h")

    async def run():
        paths = await _three_routes(core, edge, hosts)
        assert len(edge.carrier.set) == 3
        loads = edge.router.loads
        edge.router.kept = None
        paths.refresh()
        assert not paths._pending, "no route is pushed for the read"
        await _settle()
        assert edge.router.loads == loads + 1 and len(edge.carrier.set) == 3
        assert sorted(h for _, h in paths.routes) == hosts
        edge.router.kept = None
        edge.router.ip_restrictions = _failing_read(edge.router)
        paths.refresh()
        await _settle()
        assert sorted(edge.carrier.dropped[-3:]) == [("http", host) for host in hosts]
        assert sorted(paths.routes) == [("http", host) for host in hosts]  # restricted now
        assert {held[4] for held in paths.routes.values()} == {DECIDED | RESTRICTED}

    core.loop.run_until_complete(run())


def _three_routes_edge(prefix):
    """An edge with the fakes a push reads through, and three hosts' names."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    return edge, [f"{prefix}{n}.tunnels.localhost" for n in range(3)]


async def _three_routes(core, edge, hosts):
    """A plain endpoint of one account on each of ``hosts``, their routes pushed."""
    for n, host in enumerate(hosts):
        edge.registry.by_host[host] = _tunnel(
            core, proto="http", id=f"tn_{n}", hostname=host, url=f"http://{host}"
        )
    paths = FastPath(edge)
    for host in hosts:
        paths.sync(host)
    await _settle()
    return paths


def _failing_read(router):
    """A read that finds an ``endpoints`` restriction with IP policies (not plain)."""

    async def read(account_id):
        router.loads += 1
        router.kept = [{"type": "endpoints", "ip_policy_ids": ["ipp_1"]}]
        return router.kept

    return read


def test_a_policy_changed_in_place_pushes_the_route_anew_with_its_facts(core):
    """The core holds a decided route's decisions (edge_core/src/held.rs) and Python sees
    none of the requests they serve: a policy changed under the same tunnel, even to one of
    the same mode, drops the route at once and pushes it under a new key (a new route in the
    core holds nothing), with the facts the new policy reads."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    where = ("http", HOST)
    by_path = {
        "on_http_request": [
            {"expressions": ["req.url.path == '/a'"], "actions": [{"type": "deny"}]}
        ]
    }
    by_method = {
        "on_http_request": [
            {"expressions": ["req.method == 'PUT'"], "actions": [{"type": "deny"}]}
        ]
    }

    async def run():
        tunnel = _tunnel(
            core, proto="http", enforcement=types.SimpleNamespace(policy=compile_policy(by_path))
        )
        edge.registry.by_host[HOST] = tunnel
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        assert edge.carrier.set == [("http", HOST, 1)] and edge.carrier.holds == ["target"]
        paths.sync(HOST)  # nothing changed: nothing pushed
        await _settle()
        assert len(edge.carrier.set) == 1 and where not in edge.carrier.dropped
        tunnel.enforcement = types.SimpleNamespace(policy=compile_policy(by_method))
        paths.sync(HOST)
        assert where in edge.carrier.dropped  # at once, before any wait
        await _settle()
        assert edge.carrier.set[-1] == ("http", HOST, 2) and edge.carrier.holds == ["method"]
        assert paths.route_of(1) is None and paths.route_of(2)[4] is tunnel.enforcement.policy

    core.loop.run_until_complete(run())


def _pooled(core, n, host=HOST, **changes):
    """``n`` pooled endpoints of one account on ``host``, the first the pool's holder."""
    members = [
        _tunnel(
            core,
            proto="http",
            id=f"tn_{i}",
            endpoint_id=f"ep_{i}",
            pooled=True,
            hostname=host,
            url=f"http://{host}",
        )
        for i in range(n)
    ]
    for name, value in changes.items():
        setattr(members[-1], name, value)
    if n > 1:
        for member in members:
            member.pool = members
    return members


def test_a_pool_of_plain_endpoints_is_a_candidate_of_its_members_in_order(core):
    """An endpoint pool is one route of its members (each request to the next in turn), the
    members of the listener's scheme (a scheme_only one of the other is not); a lone pooled
    endpoint is a pool of one (cloud members may share its URL)."""
    from edge.fast_path import Pool

    members = _pooled(core, 3)
    found = _candidate(_edge(), members[0])
    assert type(found) is Pool and list(found) == members
    members[1].scheme_only, members[1].proto = True, "https"
    assert list(_candidate(_edge(), members[0], "http")) == [members[0], members[2]]
    assert list(_candidate(_edge(), members[0], "https")) == members
    lone = _pooled(core, 1)[0]
    assert list(_candidate(_edge(), lone)) == [lone]


@pytest.mark.parametrize(
    "change",
    [
        {"enforcement": types.SimpleNamespace(policy=compile_policy(RESPONSE_PHASE))},
        {"ws_tcp": True},
        {"forwards_proto": "http2"},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values())))[:12],
)
def test_a_pool_with_a_member_python_alone_serves_is_pythons(core, change):
    """Every member must be a route of the core (plain or decided, HTTP/1.1): one that Python
    alone serves makes the whole pool Python's (its turns are one rotation)."""
    members = _pooled(core, 3, **change)
    assert _candidate(_edge(), members[0]) is None
    assert _candidate(_edge(), members[0], "https") is None


def test_a_pools_members_are_pushed_each_with_its_own_mode_and_decided_as_itself(core):
    """A member whose policy the core can carry is a decided member of the pool's route: its
    key's asks are decided with its own tunnel and policy (``route_of``), its decisions held
    for its own facts; a plain member stays plain."""
    from edge import decided

    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    policy = compile_policy(REQUEST_PHASE)
    host = "decided-pool.tunnels.localhost"  # the store's pool is cached by name (pools.py)
    members = _pooled(core, 2, host, enforcement=types.SimpleNamespace(policy=policy))

    async def call(fn, *args, **kwargs):
        return {"clouds": [], "agents": {"ep_0": "edge", "ep_1": "edge"}}

    edge.call = call

    async def run():
        edge.registry.by_host[host] = members[0]
        paths = FastPath(edge)
        paths.sync(host)
        await _settle()
        return paths

    paths = core.loop.run_until_complete(run())
    assert edge.carrier.set == [("http", host, [(2, "tn_0"), (3, "tn_1")])]
    assert edge.carrier.pool_modes == [(decided.PLAIN, None), (decided.DECIDED, [])]
    assert paths.route_of(2)[0] is members[0] and paths.route_of(2)[3] == decided.PLAIN
    assert paths.route_of(3)[0] is members[1] and paths.route_of(3)[4] is policy
    assert paths.route_of(1) is not None and paths.route_of(9) is None


def test_a_pool_is_pushed_when_the_store_has_only_this_instances_agents_in_it(core):
    """The store's pool is read before the push (pools.served_here): with a cloud member or
    another instance's agent, the name's requests are Python's (which spreads them there too);
    with only this instance's agents, one route of a key per member, the members' records
    naming their own endpoints; a member's departure pushes the pool anew at once."""
    from edge import pools

    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    store = {"clouds": [{"id": "ep_cloud"}], "agents": {"ep_0": "edge", "ep_1": "edge"}}

    async def call(fn, *args, **kwargs):
        return store

    edge.call = call
    members = _pooled(core, 2)
    where = ("http", HOST)

    async def run():
        edge.registry.by_host[HOST] = members[0]
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        assert edge.carrier.set == [] and where not in paths.routes  # a cloud member
        store["clouds"] = []
        store["agents"]["ep_9"] = "another-instance"
        await asyncio.sleep(pools.CLOUD_CACHE_SECONDS + 0.05)
        paths.sync(HOST)
        await _settle()
        assert edge.carrier.set == [] and where not in paths.routes  # another's agent
        del store["agents"]["ep_9"]
        await asyncio.sleep(pools.CLOUD_CACHE_SECONDS + 0.05)
        paths.sync(HOST)
        await _settle()
        assert edge.carrier.set == [("http", HOST, [(2, "tn_0"), (3, "tn_1")])]
        assert paths.routes[where][0] == 1
        assert {k: paths.hops[k].endpoint_id for k in (2, 3)} == {2: "ep_0", 3: "ep_1"}
        members[1].pool.remove(members[1])
        paths.sync(HOST)  # the registry's change: dropped at once, then pushed again
        assert where in edge.carrier.dropped
        await _settle()
        assert edge.carrier.set[-1] == ("http", HOST, [(5, "tn_0")])

    core.loop.run_until_complete(run())


def test_a_route_whose_renewal_fails_is_dropped_and_the_others_are_renewed(core):
    """One route's renewal that raises (its certificate refused by the core, say) drops that
    route (its host is Python's) and does not stop the refresh of the others."""
    from edge import fast_path

    edge, hosts = _three_routes_edge("r")

    async def run():
        paths = await _three_routes(core, edge, hosts)
        for where, (key, tunnel, until, cert, mode, policy) in list(paths.routes.items()):
            aged = until - fast_path.ROUTE_TTL / 2 - 0.01  # each due for renewal
            paths.routes[where] = (key, tunnel, aged, cert, mode, policy)
        pushed = len(edge.carrier.set)
        refused = edge.carrier.set_route

        def set_route(host, *args, **kwargs):
            if host == hosts[0]:
                raise ValueError("refused by the core")
            return refused(host, *args, **kwargs)

        edge.carrier.set_route = set_route
        paths.refresh()
        return paths, pushed

    paths, pushed = core.loop.run_until_complete(run())
    assert ("http", hosts[0]) not in paths.routes and ("http", hosts[0]) in edge.carrier.dropped
    assert len(edge.carrier.set) == pushed + 2  # the two others renewed


class _Deciding(_Carrier):
    """A carrier that notes each decision (its kind and ticket)."""

    def __init__(self):
        super().__init__()
        self.decisions = []

    def __getattr__(self, name):
        if name.startswith("decide_") or name == "flush_decisions":
            return lambda *args, **kwargs: self.decisions.append((name,) + args[:1])
        raise AttributeError(name)


def _row(ticket, key, ip="192.0.2.7"):
    host = HOST.encode()
    fields = [(b"host", host)]
    return (
        ticket,
        key,
        (ip, 5),
        ("127.0.0.1", 8080),
        None,
        b"GET",
        b"/",
        fields,
        True,
        None,
        False,
        True,
    )


def test_a_decided_route_keeps_its_rows_when_the_restrictions_cache_lapses(core):
    """The router's cache lets an account's IP restrictions go every second: a decided route
    of an account without any keeps being decided by the core meanwhile (its rows checked
    against the restrictions read again, as the Python path would read them), not handed to
    Python with their connections and pushed anew under a new key (its held decisions lost)."""
    edge = _edge()
    edge.carrier, edge.router = _Deciding(), _Router()
    edge.tls.loaded = asyncio.Event()
    edge.settings.region = "local"
    where = ("http", HOST)

    async def run():
        policy = compile_policy(REQUEST_PHASE)
        edge.registry.by_host[HOST] = _tunnel(
            core, proto="http", enforcement=types.SimpleNamespace(policy=policy)
        )
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        key = paths.routes[where][0]
        edge.router.kept = None  # the cache's second is up
        paths.decide([_row(1, key)])
        paths.sync(HOST)  # a registry change of the host meanwhile: nothing to drop
        await _settle()
        return key, paths.routes[where][0]

    key, now = core.loop.run_until_complete(run())
    assert ("decide_python", 1) not in edge.carrier.decisions
    assert ("decide_append", 1) in edge.carrier.decisions  # checked, then decided
    assert now == key and where not in edge.carrier.dropped


def test_a_request_the_restrictions_refuse_is_no_record_of_the_endpoint(core):
    """edge/http_routing.py refuses the client before routing the request: no record names
    the endpoint (its inspector, metrics and events see none), on the core's path too."""
    from edge.decided import REFUSED

    edge = _edge()
    edge.carrier, edge.router = _Deciding(), _Router()
    edge.tls.loaded = asyncio.Event()
    queued = []

    async def run():
        edge.registry.by_host[HOST] = _tunnel(core, proto="http")
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        key = paths.routes[where][0] if (where := ("http", HOST)) in paths.routes else None
        hub = hub_of(edge)
        hub.record = queued.append
        hub.count_http = lambda *args: queued.append(args) or None
        paths.served([(key, 403, (0, 0, 0.0, 0.0), False, None, REFUSED, False)])

    core.loop.run_until_complete(run())
    assert queued == []


def test_a_switch_is_no_answer_its_breakers_count(core):
    """A 101 (a WebSocket the core switched) counts for no circuit breaker, as the Python
    path's ``_switch`` counts none; the answers that follow a request do."""
    edge = _edge()
    edge.carrier, edge.router = _Deciding(), _Router()
    edge.tls.loaded = asyncio.Event()
    edge.carrier.set_quiet = lambda key, quiet: None  # nothing wants a record of them
    counted = []
    recorder = types.SimpleNamespace(record=lambda status, *clock: counted.append(status))
    memo = types.SimpleNamespace(breakers=[(recorder, time.monotonic)], upstream_breaker=recorder)

    async def run():
        edge.registry.by_host[HOST] = _tunnel(core, proto="http")
        paths = FastPath(edge)
        paths.sync(HOST)
        await _settle()
        key = paths.routes[("http", HOST)][0]
        hub = hub_of(edge)
        hub.record = lambda *args: None
        hub.count_http = lambda *args: None
        stats = (0, 0, 0.0, 0.0)
        paths.served([(key, status, stats, False, None, memo, False) for status in (101, 500)])

    core.loop.run_until_complete(run())
    assert counted == [500, 500]  # the 500's, by the action's breaker and the endpoint's


def test_the_routes_by_account_follow_each_push_and_drop(core):
    """An internal endpoint's change reads its account's routes only (``by_account``): the
    index names each route under its tunnel's account, moves a place whose tunnel changed
    account, and forgets a dropped one (a change then finds nothing to drop, and no error)."""
    edge = _edge()
    edge.carrier, edge.router = _Carrier(), _Router()
    edge.tls.loaded = asyncio.Event()
    other = types.SimpleNamespace(mux=core, grant=types.SimpleNamespace(account_id="ac_2"))

    async def run():
        paths = FastPath(edge)
        edge.registry.by_host[HOST] = _tunnel(core)
        paths.sync(HOST)
        await _settle()
        first = {a: set(p) for a, p in paths.by_account.items()}
        edge.registry.by_host[HOST] = _tunnel(core, id="tn_2", session=other)
        paths.sync(HOST)
        await _settle()
        moved = {a: set(p) for a, p in paths.by_account.items()}
        edge.registry.by_host.pop(HOST)
        paths.sync(HOST)
        await _settle()
        paths.internal_changed("ac_2", "a.internal")  # nothing of it left: no error
        return first, moved, dict(paths.by_account)

    first, moved, last = core.loop.run_until_complete(run())
    assert first == {"ac_1": {("http", HOST)}}  # (HTTPS: once certificates are loaded)
    assert moved == {"ac_2": {("http", HOST)}}
    assert last == {}


class _CertCarrier:
    """The core's certificates as FastPath pushes them: number -> the spec number."""

    def __init__(self):
        self.certs = {}

    def set_cert(self, number, chain, key, spec=0, requires=None):
        self.certs[number] = spec

    def drop_cert(self, number):
        self.certs.pop(number, None)

    def set_nameless_cert(self, number):
        pass


def _mutual_edge(specs):
    """An edge whose names in ``specs`` require those TLS settings, its certificates fakes."""
    edge = _edge()
    edge.tls = types.SimpleNamespace(spec_for=lambda name: specs.get(name, tls_spec.DEFAULT))
    edge.certs = types.SimpleNamespace(
        stored_pair=lambda host: None, pair_for=lambda hosts: (b"", b"")
    )
    edge.carrier = _CertCarrier()
    edge.settings.base_domain = "tunnels.localhost"
    return edge


def test_a_live_connections_spec_number_outlives_its_idle_route():
    """A keep-alive connection the core terminated for a mutual-TLS name outlives the name's
    idle route (ROUTE_KEEP, then the certificate dropped at a refresh): its spec number is
    still known, and the route pushed again gets the same number, so the connection is
    served again rather than answered 421 for settings that did not change."""
    spec = tls_spec.spec_of(None, [_ca_pem()])
    edge = _mutual_edge({HOST: spec})

    async def run():
        paths = FastPath(edge)
        held = edge.carrier.certs[paths.cert_number(HOST)]  # the handshake's CoreTls.spec
        assert held != 0 and paths.spec_numbered(held).key == spec.key
        paths.refresh()  # no route names the certificate: dropped
        assert edge.carrier.certs == {}
        assert paths.spec_numbered(held).key == spec.key
        assert edge.carrier.certs[paths.cert_number(HOST)] == held

    asyncio.run(run())


def test_spec_numbers_no_certificate_is_made_for_are_kept_up_to_their_bound(monkeypatch):
    """At most SPECS_KEPT of them, the oldest forgotten first (a forgotten number reads as
    the default: a request on such a connection for a protected name is misdirected)."""
    monkeypatch.setattr(fast_path, "SPECS_KEPT", 2)
    hosts = [f"m{n}.tunnels.localhost" for n in range(4)]
    specs = {host: tls_spec.spec_of(None, [_ca_pem()]) for host in hosts}
    edge = _mutual_edge(specs)

    async def run():
        paths = FastPath(edge)
        numbers = [edge.carrier.certs[paths.cert_number(host)] for host in hosts]
        paths.refresh()
        return numbers, [paths.spec_numbered(n).key for n in numbers]

    numbers, keys = asyncio.run(run())
    assert keys == [tls_spec.DEFAULT.key] * 2 + [specs[h].key for h in hosts[2:]], numbers


CLOUD = "cloud.tunnels.localhost"


def _cloud_edge(claims, edges=None, backends=None):
    """An edge whose router (edges.EdgeRouter, its 1 s cache) reads the cloud endpoints of
    ``claims`` (name -> claim, changed by the test), the HTTPS edges of ``edges`` (hostport
    -> (edge, routes)) and no IP restrictions from the store."""
    from chalicelib.core import online, routing
    from edge.edges import EdgeRouter

    edges = edges if edges is not None else {}
    backends = backends if backends is not None else {}

    edge = _edge()
    edge.carrier = _Carrier()
    edge.tls.loaded = asyncio.Event()
    reads = []

    async def call(fn, *args, **kwargs):
        if fn is online.cloud_endpoint_for:
            reads.append(args[0])
            claim = claims.get(args[0])
            return dict(claim) if claim is not None else None
        if fn is routing.https_edge_for_hostport:
            reads.append(args[0])
            return edges.get(args[0])
        if fn is routing.resolve_backend:
            return backends.get(args[1])
        return []  # the account's IP restrictions: none

    edge.call = call
    edge.router = EdgeRouter(edge)
    return edge, reads


def _claim(policy, **changes):
    claim = {
        "id": "ep_cloud",
        "url": f"https://{CLOUD}",
        "host": CLOUD,
        "account_id": "ac_1",
        "traffic_policy": json.dumps(policy),
    }
    claim.update(changes)
    return claim


FORWARDS = {
    "on_http_request": [
        {"actions": [{"type": "forward-internal", "config": {"url": "https://a.internal"}}]}
    ]
}


def test_a_cloud_endpoint_python_served_is_pushed_as_a_decided_route_without_a_session():
    """Once Python served a request of a cloud endpoint whose policy is decidable, its route
    is pushed with no session (each request answered by its policy or sent to a target it
    names), its records naming the cloud endpoint; its claim gone from the store, the route
    is dropped at the refresh that reads it."""

    claims = {CLOUD: _claim(FORWARDS)}
    edge, reads = _cloud_edge(claims)

    async def run():
        paths = FastPath(edge)
        assert paths.candidate(CLOUD) is None  # never read for a route
        paths.seen(CLOUD, "http", named=True)
        await _settle()
        assert edge.carrier.set == [("http", CLOUD, 1)] and edge.carrier.mux is None
        assert edge.carrier.decided_holds == (True, [])  # a static forward: held, reading none
        assert paths.hops[1].endpoint_id == "ep_cloud" and paths.route_of(1)[0].cloud
        paths.seen(CLOUD, "http", named=True)  # its route is live: nothing more
        await _settle()
        assert len(edge.carrier.set) == 1
        del claims[CLOUD]
        await asyncio.sleep(CACHE_SECONDS + 0.05)
        paths.refresh()  # used: read again through the cache, and gone
        await _settle()
        assert ("http", CLOUD) in edge.carrier.dropped and ("http", CLOUD) not in paths.routes

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert [r for r in reads if r == CLOUD] == [
        CLOUD,
        CLOUD,
    ]  # (and the edge looked for once gone)


@pytest.mark.parametrize(
    "claim",
    [
        _claim(RESPONSE_PHASE),  # events rewritten: not decidable
        _claim(FORWARDS, internal=True),  # reached only by forward-internal
        _claim(FORWARDS, pooled=True),  # a pool's: each request's member is its turn
        _claim(None, traffic_policy=""),  # no policy: 6029 for each, Python's
        _claim(None, traffic_policy='{"on_http_request": [{"actions": [{"type": "x"}]}]}'),
    ],
    ids=["not decidable", "internal", "pooled", "no policy", "refused policy"],
)
def test_a_cloud_endpoint_the_core_cannot_carry_is_read_once_and_stays_pythons(claim):
    """Its next requests (Python's) read nothing more while its claim stays the same."""
    edge, reads = _cloud_edge({CLOUD: claim})

    async def run():
        paths = FastPath(edge)
        for _ in range(3):
            paths.seen(CLOUD, "http", named=True)
            await _settle()
        assert edge.carrier.set == [] and paths.candidate(CLOUD) is None

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert [r for r in reads if r == CLOUD] == [CLOUD] and len(
        reads
    ) <= 2  # (an edge for it: none)


def test_a_cloud_endpoint_whose_bodies_the_inspector_captures_keeps_them():
    from chalicelib.core import inspector as layout

    edge, _ = _cloud_edge({CLOUD: _claim(FORWARDS)})

    async def run():
        hub_of(edge).inspector.capture[("ac_1", "ep_cloud")] = (True, float("inf"))
        paths = FastPath(edge)
        paths.seen(CLOUD, "http", named=True)
        await _settle()
        assert edge.carrier.set == [("http", CLOUD, 1)]
        assert edge.carrier.capture == layout.BODY_BYTES + 1

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()


def test_the_cloud_endpoints_kept_for_routes_stay_within_their_bound(monkeypatch):
    """Past MAX_CLOUDS, the cloud endpoints read for routes that have none are let go."""
    names = [f"c{i}.tunnels.localhost" for i in range(5)]
    claims = {
        name: _claim(RESPONSE_PHASE, id=f"ep_{i}", host=name, url=f"https://{name}")
        for i, name in enumerate(names)
    }
    edge, _ = _cloud_edge(claims)
    monkeypatch.setattr(fast_path, "MAX_CLOUDS", 2)

    async def run():
        paths = FastPath(edge)
        sizes = []
        for name in names:
            paths.seen(name, "http", named=True)
            await _settle()
            sizes.append(len(paths.clouds))
        return sizes

    loop = asyncio.new_event_loop()
    try:
        sizes = loop.run_until_complete(run())
    finally:
        loop.close()
    assert max(sizes) <= 2 and sizes[-1] >= 1


RATE_LIMITED = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "rate-limit",
                    "config": {
                        "name": "r",
                        "algorithm": "sliding_window",
                        "capacity": 10,
                        "rate": "60s",
                        "bucket_key": ["conn.client_ip"],
                    },
                },
                {"type": "forward-internal", "config": {"url": "https://a.internal"}},
            ]
        }
    ]
}


def _on_its_loop(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_in_a_cluster_a_rate_limited_cloud_endpoint_stays_pythons_even_after_a_patch():
    """One designated instance serves a cloud endpoint whose policy rate-limits
    (edge/cluster.py asks on each connection), so its counters see every request: no
    instance's core carries it, even one that held its route before the patch; alone (no
    cluster), the core does."""
    claims = {CLOUD: _claim(FORWARDS)}
    edge, _ = _cloud_edge(claims)
    edge.cluster = types.SimpleNamespace(instance_id="edge-a")

    async def run():
        paths = FastPath(edge)
        paths.seen(CLOUD, "http", named=True)
        await _settle()
        assert ("http", CLOUD) in paths.routes  # not rate-limited: served by every instance
        claims[CLOUD] = _claim(RATE_LIMITED)
        await asyncio.sleep(CACHE_SECONDS + 0.05)
        paths.refresh()
        await _settle()
        return ("http", CLOUD) in paths.routes

    assert not _on_its_loop(run())
    alone, _ = _cloud_edge({CLOUD: _claim(RATE_LIMITED)})

    async def single():
        paths = FastPath(alone)
        paths.seen(CLOUD, "http", named=True)
        await _settle()
        return ("http", CLOUD) in paths.routes

    assert _on_its_loop(single())


def test_an_idle_cloud_route_is_kept_while_it_served_lately_then_read_no_more(monkeypatch):
    """A cloud route that served is read again (through the 1 s cache, as the Python path
    reads a claim for each request) at each refresh while it served within NAMED_KEEP: a
    name idle past the cache's second keeps its route (a request every few seconds is the
    core's, not a hand-over and a push each). Idle longer, it lives out its CLOUD_TTL once its
    claim leaves the cache and is gone, and its reads stop (its next request Python's)."""
    from edge import fast_path
    from edge.edges import CACHE_SECONDS
    from edge.fast_path import REFRESH_SECONDS

    monkeypatch.setattr(fast_path, "NAMED_KEEP", 3.0)
    edge, reads = _cloud_edge({CLOUD: _claim(FORWARDS)})

    async def run():
        paths = FastPath(edge)
        paths.seen(CLOUD, "http", named=True)  # one request, then none
        await _settle()
        kept = []
        for _ in range(12):  # 6 s of refreshes, no request
            await asyncio.sleep(REFRESH_SECONDS)
            paths.refresh()
            await _settle()
            kept.append(("http", CLOUD) in paths.routes)
        return kept

    kept = _on_its_loop(run())
    # 1.5 s idle, its claim read again once the cache let it go: still the core's
    assert kept[:3] == [True, True, True], kept
    assert not kept[-1], kept
    assert len(reads) <= fast_path.NAMED_KEEP / CACHE_SECONDS + 2, reads


EDGE_HOST = "edged.tunnels.localhost"


def test_an_https_edges_name_python_served_is_pushed_as_a_route_of_its_edge():
    """Once Python served a request of an HTTPS edge's hostname, its route is pushed with no
    session (each request routed by its path, decided: edge/decided.py), its records naming
    the edge; gone from the store, dropped; in a cluster (tunnel groups spread, designated
    instances), none."""
    edge_copy = {"id": "edghts_1", "account_id": "ac_1", "hostports": [f"{EDGE_HOST}:443"]}
    edges = {f"{EDGE_HOST}:443": (edge_copy, [])}
    edge, reads = _cloud_edge({}, edges)

    async def run():
        paths = FastPath(edge)
        paths.seen(EDGE_HOST, "http", named=True)
        await _settle()
        assert edge.carrier.set == [("http", EDGE_HOST, 1)] and edge.carrier.mux is None
        assert edge.carrier.decided_holds == (True, None)
        assert (
            paths.hops[1].endpoint_id == "edghts_1" and paths.hops[1].url == f"https://{EDGE_HOST}"
        )
        del edges[f"{EDGE_HOST}:443"]
        await asyncio.sleep(CACHE_SECONDS + 0.05)
        paths.refresh()
        await _settle()
        assert ("http", EDGE_HOST) in edge.carrier.dropped
        assert ("http", EDGE_HOST) not in paths.routes

    _on_its_loop(run())
    clustered, _ = _cloud_edge({}, {f"{EDGE_HOST}:443": (edge_copy, [])})
    clustered.cluster = types.SimpleNamespace(instance_id="edge-a")

    async def in_a_cluster():
        paths = FastPath(clustered)
        paths.seen(EDGE_HOST, "http", named=True)
        await _settle()
        return clustered.carrier.set

    assert _on_its_loop(in_a_cluster()) == []


@pytest.mark.parametrize(
    "shape",
    [
        "a tunnel group of the core's sessions",
        "no backend",
        "a fixed answer",
        "a member on OpenSSH",
        "failover",
        "weighted",
        "a static backend",
        "a static backend in a failover",
        "a member on OpenSSH in a weighted choice",
        "a converter",
        "a converter towards HTTP/2",
        "a converting member speaking HTTP/2",
        "IP policies",
        "connection rules",
    ],
)
def test_an_https_edge_is_a_route_only_when_the_core_carries_each_of_its_routes(core, shape):
    """Known before any request, so none is routed twice (a request handed to Python is
    routed again there, its backend drawn again): each route a tunnel group whose members'
    sessions the core runs, a fixed answer, a failover or weighted choice of those, or no
    backend (the edge's own 502), decidable modules naming no IP policy, no converter."""
    route = {"id": "edghtsrt_1", "match_type": "path_prefix", "match": "/"}
    backends = {"bkdtg_1": {"id": "bkdtg_1", "kind": "tunnel_group", "labels": {"app": "a"}}}
    member_mux = core
    if shape != "no backend":
        route["backend"] = {"enabled": True, "backend_id": "bkdtg_1"}
    if shape == "a fixed answer":
        backends["bkdtg_1"] = {"id": "bkdtg_1", "kind": "http_response", "body": "x"}
    elif shape == "failover":  # (the router's copy: its members read with it)
        fixed = {"id": "bkdhr_1", "kind": "http_response", "body": "x"}
        group = dict(backends["bkdtg_1"])
        backends["bkdtg_1"] = {"id": "bkdtg_1", "kind": "failover", "backends": [group, fixed]}
    elif shape == "weighted":
        fixed = {"id": "bkdhr_1", "kind": "http_response", "body": "x"}
        members = [{"backend": dict(backends["bkdtg_1"]), "weight": 1}]
        backends["bkdtg_1"] = {
            "id": "bkdtg_1",
            "kind": "weighted",
            "backends": members + [{"backend": fixed, "weight": 1}],
        }
    elif shape == "a static backend":
        backends["bkdtg_1"] = {"id": "bkdtg_1", "kind": "static", "address": "x.test:80"}
    elif shape == "a static backend in a failover":
        static = {"id": "bkdst_1", "kind": "static", "address": "x.test:80"}
        group = dict(backends["bkdtg_1"])
        backends["bkdtg_1"] = {"id": "bkdtg_1", "kind": "failover", "backends": [group, static]}
    elif shape == "a member on OpenSSH in a weighted choice":
        member_mux = types.SimpleNamespace(closed=False)
        group = {"backend": dict(backends["bkdtg_1"]), "weight": 1}
        backends["bkdtg_1"] = {"id": "bkdtg_1", "kind": "weighted", "backends": [group]}
    elif shape == "a member on OpenSSH":
        member_mux = types.SimpleNamespace(closed=False)  # not the core's session
    elif shape in ("a converter", "a converter towards HTTP/2"):
        route["websocket_tcp_converter"] = {"enabled": True}
    elif shape == "IP policies":
        route["ip_restriction"] = {"enabled": True, "ip_policy_ids": ["ipp_1"]}
    elif shape == "connection rules":  # (the Python path runs them per route of the edge)
        deny = {"on_tcp_connect": [{"actions": [{"type": "deny"}]}]}
        route["traffic_policy"] = {"enabled": True, "value": json.dumps(deny)}
    edge_copy = {"id": "edghts_1", "account_id": "ac_1", "hostports": [f"{EDGE_HOST}:443"]}
    edge, _ = _cloud_edge({}, {f"{EDGE_HOST}:443": (edge_copy, [route])}, backends)
    speaks = "http2" if "HTTP/2" in shape else "http1"
    converts = shape == "a converting member speaking HTTP/2"
    member = _tunnel(member_mux, labels={"app": "a"}, hostname="", url="", forwards_proto=speaks)
    member.ws_tcp = converts
    edge.registry.add(member)

    async def run():
        paths = FastPath(edge)
        paths.seen(EDGE_HOST, "http", named=True)
        await _settle()
        return edge.carrier.set

    carried = shape in (
        "a tunnel group of the core's sessions",
        "no backend",
        "a fixed answer",
        "failover",
        "weighted",
        "a converter",
    )
    assert core.loop.run_until_complete(run()) == ([("http", EDGE_HOST, 1)] if carried else [])


def test_an_https_edges_route_is_never_quiet():
    """Its routes' circuit breakers (modules, the labeled tunnels' own) count each answer
    from its record, which a quiet route's tally has no memo for."""
    from edge import decided

    name = decided.EdgeName("edghts_1", "ac_1", f"https://{EDGE_HOST}", EDGE_HOST)
    assert decided.counts_answers(name, None)


def test_an_accounts_internal_endpoint_changing_drops_its_forwarding_routes_held_decisions(core):
    """The registry tells of an internal endpoint that came, went or changed (its account);
    each route of that account whose policy may forward-internal is dropped and pushed again
    under a new key (the core's held decisions name targets: none may outlive one), and no
    other route is."""
    claims = {CLOUD: _claim(FORWARDS)}
    edge, _ = _cloud_edge(claims)
    other = "other.tunnels.localhost"
    claims[other] = _claim(FORWARDS, id="ep_other", host=other, url=f"https://{other}")
    claims[other]["account_id"] = "ac_2"
    told = []

    async def run():
        paths = FastPath(edge)
        edge.registry.on_internal = lambda account, name: (
            told.append((account, name)),
            paths.internal_changed(account, name),
        )
        for host in (CLOUD, other):
            paths.seen(host, "http", named=True)
        await _settle()
        keys = {host: paths.routes[("http", host)][0] for host in (CLOUD, other)}
        elsewhere = _tunnel(core, internal=True, hostname="b.internal", url="https://b.internal")
        edge.registry.add(elsewhere)  # another name its fixed URL does not name: kept
        await _settle()
        kept = paths.routes[("http", CLOUD)][0] == keys[CLOUD]
        internal = _tunnel(core, internal=True, hostname="a.internal", url="https://a.internal")
        edge.registry.add(internal)  # the internal endpoint its URL names comes
        await _settle()
        after = {host: paths.routes[("http", host)][0] for host in (CLOUD, other)}
        return keys, after, list(edge.carrier.dropped), kept

    keys, after, dropped, kept = core.loop.run_until_complete(run())
    assert told == [("ac_1", "b.internal"), ("ac_1", "a.internal")] and kept
    assert ("http", CLOUD) in dropped and after[CLOUD] != keys[CLOUD]
    assert ("http", "other.tunnels.localhost") not in dropped
    assert after["other.tunnels.localhost"] == keys["other.tunnels.localhost"]
