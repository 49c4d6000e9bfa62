"""Which hosts the compiled core serves by itself on the public HTTP and HTTPS listeners (its
fast path, edge_core/src/public.rs and https.rs), and the records of what it served.

The core carries, Python decides: this module decides, for each hostname of the registry,
whether its requests need nothing of Python per request, and pushes such a host to the core
as a *plain route* (the agent session and the tunnel id its proxy streams carry). A host is
plain when all of these hold (docs/DATA_PLANE.md, "The public listener's fast path"):

- the endpoint the listener routes it to (``Registry.http_tunnel(host, scheme)``) is an
  agent endpoint of this instance whose session the core runs (not OpenSSH's, not a static
  backend); in a cluster, that makes the host this instance's to serve, as edge/cluster.py's
  own check (``Registry.http_tunnel``) decides for a connection it would otherwise relay;
- its name is not banned;
- it has no traffic policy and no Bind option enforced per request (no
  ``tunnel.enforcement.policy``, which edge/http_policy.py would run: basic or OAuth/OIDC
  auth, IP restrictions, header changes, compression, the WAF, the modules), or one that
  needs only the request's head (``decided.decidable``: the route is then *decided*, each
  request's policy run by edge/decided.py on the head the core read; a circuit breaker of its
  own makes it decided too); with a WebSocket-TCP converter too (the core answers its
  upgrades and converts, after the policy's decision when it has one: ``ws_tcp``,
  edge_core/src/wstcp.rs; a PROXY protocol
  header the core writes itself: ``proxy_proto``; an ``app_protocol`` http2 endpoint is spoken to in HTTP/2
  by the core: ``h2_scheme_of``, not a pool's member);
- an account with ``endpoints`` IP restrictions (the router's cache) has its routes decided,
  each request's client checked first (edge/decided.py ``RESTRICTED``); an endpoint whose
  bodies the inspector captures (its cache) is pushed ``CAPTURED``: the core keeps each
  body's first bytes for its records;
- on the plain-HTTP listener, its name requires nothing of a TLS handshake
  (``edge.tls.spec_for``: no minimum version above TLS 1.2, no client certificate; Python
  answers such a name 421 there); on HTTPS, whatever it requires the core's TLS can ask
  (:func:`core_requires`: TLS 1.3 only, TLS 1.2 only, a client certificate from its CAs).

Such a name's certificate is pushed with what it requires (``Carrier.set_cert``, the spec
numbered here: :meth:`FastPath.spec_numbered`), and the core serves its requests only on
connections whose handshake was made for the same spec (another's go to Python, which answers
them 421 as edge/tls.py's ``misdirected`` says; a name that requires nothing is served on any).

An **endpoint pool** (edge/pools.py) is pushed as one route of several members
(``Carrier.set_pool``), the core giving each request to the next member in turn as
``Registry.http_tunnel`` does, when every member is an agent endpoint of this instance that
the rules above make a route of the core (plain, or decided with its own policy) and the
store's pool has no cloud member and no other instance's agent (``pools.served_here``). Each
member's requests are recorded under its own key (its endpoint's). The store's pool is read
again at each refresh of a used pool route (through the pool's cache), so a cloud member or
another instance's agent that joins takes its turns within ``REFRESH_SECONDS`` and
``pools.CLOUD_CACHE_SECONDS`` (1.5 s; the Python path: the cache's 1 s); an agent member of
this instance that joins or leaves changes the route at once.

On the HTTPS listener the route also carries the certificate the name is served with
(``edge.certs``: the store's for the name, else the local CA's or the fixed one, as edge/tls.py
picks it), pushed once per distinct pair (``Carrier.set_cert``); the core terminates TLS for
the name with it, over HTTP/1.1 or HTTP/2 (edge_core/src/h2front.rs: each stream served as an
HTTP/1.1 request of the same route). A ClientHello without a server name (a client given an address) gets the
certificate edge/tls.py gives it (the base domain's) and its requests are routed by Host
alone, as edge/tls.py's listener routes them.

Everything else about a request the core checks itself (edge_core/src/http.rs ``carriable``:
HTTP/1.1, one Host, a known method, no body or a Content-Length one, not an ACME HTTP-01
validation; an upgrade without a body is carried too: ``carriable_upgrade``); any other
request goes to Python with the connection.

When routes change: at once when the registry adds or removes a host, when a tunnel's traffic
policy changes (``sync``); the conditions read from caches and watchers (bans, IP
restrictions, the inspector's capture setting) every ``REFRESH_SECONDS``. A route the core
holds expires after ``ROUTE_TTL`` unless renewed, so what it was decided on is never much
older than what the Python path reads.
"""

import asyncio
import functools
import itertools
import logging
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from chalicelib.core import inspector as layout
from chalicelib.core import route_modules
from chalicelib.core.policy import actions as tp_actions
from edge import ip_restrictions, pools, tls_spec
from edge.decided import (
    CAPTURED,
    DECIDED,
    PLAIN,
    REFUSED,
    RESPONSES,
    RESTRICTED,
    Decider,
    Pushed,
    core_mux,
    counts_answers,
    forwards_to,
    decidable,
    h2_scheme_of,
    holds_of,
    EdgeName,
    hop_of,
    is_cloud,
    is_edge,
    listener_addr,
    policy_of,
    route_mode,
)
from edge.http_policy import record_upstream
from edge.edges import CACHE_SECONDS, Hop, Routed
from edge.events import Counted
from edge.observe import hub_of
from edge.session import MuxSession

log = logging.getLogger("edge.fast_path")

# The routes that serve are checked again every REFRESH_SECONDS through the same caches the
# Python path reads (the account's IP restrictions: the router's, CACHE_SECONDS), and dropped
# at once when a check fails: a route's facts are never older in the core than in Python by
# more than REFRESH_SECONDS. A route the core holds expires after ROUTE_TTL unless renewed by
# such a check (a refresh that stalls cannot leave it serving); ROUTE_TTL is well above a
# check's own wait, so a slow store does not expire a busy route (whose connections would
# then go to Python).
ROUTE_TTL = 5 * CACHE_SECONDS
REFRESH_SECONDS = CACHE_SECONDS / 2
# A route that served within ROUTE_KEEP is renewed (its checks read through the caches, as the
# Python path's requests would); one idle longer expires. Its next request goes to Python, and
# so does the rest of that connection: a connection the core handed over stays Python's.
ROUTE_KEEP = 60.0
SPECS_KEPT = 1024  # spec numbers remembered with no certificate made for them (their specs too)
SCHEMES = ("http", "https")
# A route whose requests Python wants no record of (the inspector's window is full or it is
# off, and its account's subscriptions want none) is made *quiet*: the core counts its
# requests instead of handing over a row and waking Python for each. Every QUIET_SECONDS its
# numbers are taken and it is made loud again, so its next request is asked about once more
# (the inspector's next minute, a subscription made since: at most this late).
QUIET_SECONDS = 1.0
# Cloud endpoints read for routes (their claim and compiled policy): past this many, those
# with no route are let go (those with one are bounded by the routes).
MAX_CLOUDS = 10_000
# A cloud endpoint's route lives this long unless pushed again: it is read again (through the
# router's cache, as the Python path reads it for each request) at each refresh while it
# served within NAMED_KEEP; one idle longer is dropped by the refresh that finds its claim
# gone from the cache, so an idle name costs at most NAMED_KEEP / CACHE_SECONDS store reads
# after its last request (its next request is Python's, which pushes it again). NAMED_KEEP
# spares a name served every few seconds (a health check, a webhook) a hand-over to Python
# and a push for each request: at 1 s, a name idle for one second lost its route.
CLOUD_TTL = REFRESH_SECONDS + CACHE_SECONDS
NAMED_KEEP = 10.0


class Pool(tuple):
    """The members of an endpoint pool a route spreads its requests over (each a tunnel a
    plain route could serve), in the registry's order."""

    __slots__ = ()


def _same(a: Any, b: Any) -> bool:
    """The same tunnel (or policy), or a pool of the same members (or of their policies),
    or the same cloud endpoint with the same compiled policy."""
    if type(a) is Pool and type(b) is Pool:
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    if type(a) is Routed and type(b) is Routed:
        return (a.endpoint_id, a.url) == (b.endpoint_id, b.url) and policy_of(a) is policy_of(b)
    return a is b


def _same_claim(a: Optional[Dict[str, Any]], b: Dict[str, Any]) -> bool:
    """The cloud endpoint ``a`` (a claim's copy as the router reads it) is ``b`` as it was
    read for a route: the same endpoint, URL and policy text."""
    return a is not None and all(a.get(f) == b.get(f) for f in ("id", "url", "traffic_policy"))


@functools.lru_cache(maxsize=1024)
def core_requires(spec: tls_spec.TlsSpec) -> bool:
    """Whether the core's TLS asks of a handshake what ``spec`` requires: a version range it
    has (TLS 1.2 and 1.3: a lower minimum already means TLS 1.2 here), and client
    certificates from CAs that parse (a mutual spec with none left refuses every client:
    Python's)."""
    if spec.min_version > spec.max_version:
        return False
    return not spec.mutual or bool(tls_spec.ca_ders(spec))


def _account(tunnel: Any) -> str:
    """The account of a route's tunnel (a pool's members are one account's)."""
    return (tunnel[0] if type(tunnel) is Pool else tunnel).account_id


def _plain_of(restrictions: List[Dict[str, Any]]) -> bool:
    """No ``endpoints`` IP restriction with IP policies among the account's restrictions."""
    return not any(
        r.get("type") == ip_restrictions.ENDPOINTS and r.get("ip_policy_ids") for r in restrictions
    )


class _Request:
    """What a served request's record reads of its head (events.http_record): read from the
    core's ``Exchange`` when a record is made (most requests are only counted)."""

    __slots__ = ("_exchange",)
    http_version = b"1.1"

    def __init__(self, exchange: Any):
        self._exchange = exchange

    @property
    def method(self) -> bytes:
        return self._exchange.method

    @property
    def target(self) -> bytes:
        return self._exchange.target

    @property
    def headers(self) -> List[Tuple[bytes, bytes]]:
        return self._exchange.request_fields


class _Response:
    __slots__ = ("status_code", "_exchange")

    def __init__(self, status_code: int, exchange: Any):
        self.status_code, self._exchange = status_code, exchange

    @property
    def headers(self) -> List[Tuple[bytes, bytes]]:
        return self._exchange.response_fields  # names in lower case


class _Address:
    """The client's or the listener's (host, port), read from the core's ``Exchange`` when a
    record is made."""

    __slots__ = ("_exchange", "_local")

    def __init__(self, exchange: Any, local: bool):
        self._exchange, self._local = exchange, local

    def __getitem__(self, index: int) -> Any:
        return (self._exchange.local if self._local else self._exchange.peer)[index]


class FastPath:
    """The plain routes of one edge process."""

    def __init__(self, edge: Any):
        self.edge = edge
        # (scheme, host) -> (route key, tunnel, until: the loop's time when the core's copy
        # expires, certificate number: 0 on the plain-HTTP listener, mode: plain, or decided by
        # its traffic policy first, edge/decided.py, and its response heads too; the policy it
        # was pushed with: a route whose policy changes is pushed anew, its held decisions gone)
        self.routes: Dict[Tuple[str, str], Tuple[int, Any, float, int, Any, Any]] = {}
        # account -> its routes' places (what an internal endpoint's change reads: not every
        # route of the edge), kept with ``routes`` by :meth:`_put` and :meth:`_drop`
        self.by_account: Dict[str, Set[Tuple[str, str]]] = {}
        self.hops: Dict[int, Hop] = {}  # route key -> its tunnel's Hop (what records name)
        self.where: Dict[int, Tuple[str, str]] = {}  # route key -> (scheme, host)
        # a pool's route key -> its members' keys (what its records name), and back
        self.members: Dict[int, List[int]] = {}
        self.owner: Dict[int, int] = {}
        # host -> (its cloud endpoint as read, edges.Routed: its compiled policy), for the
        # routes of cloud endpoints (no session: each request decided, edge/decided.py)
        self.clouds: Dict[str, Tuple[Dict[str, Any], Routed]] = {}
        # host -> (the HTTPS edge serving it as read, its EdgeName), for the routes of HTTPS
        # edges' hostnames (no session: each request routed by its path, edge/decided.py)
        self.edge_names: Dict[str, Tuple[Dict[str, Any], EdgeName, bool]] = {}
        # route key -> its records' kind, for the routes served without a session of their
        # own: "cloud" (a cloud endpoint's) or "edge" (an HTTPS edge's); "agent" otherwise
        self._kinds: Dict[int, str] = {}
        # route keys whose answers a forward-internal's target's breaker counts: never quiet
        self._counted: set = set()
        self.decider = Decider(edge, self.route_of, self._sync, self.mode_now, self._counting)
        self._keys = itertools.count(1)
        # the certificates pushed: what identifies a pair -> its number in the core
        self.certs: Dict[Tuple[Any, ...], int] = {}
        self._cert_numbers = itertools.count(1)
        self._nameless = 0  # the number of the nameless ClientHello's certificate
        # what names require of a handshake beyond the default, by the number the core
        # knows it by (0: the default), and the certificates pushed for each
        self._specs: Dict[int, tls_spec.TlsSpec] = {}
        self._spec_numbers: Dict[Tuple[Any, ...], int] = {}
        self._spec_of_cert: Dict[int, int] = {}
        self._spec_counter = itertools.count(1)
        self._pending: set = set()  # (scheme, host) whose async checks are running
        # account id -> the used routes whose renewal waits for its IP restrictions' read
        self._restrictions_wanted: Dict[str, set] = {}
        self._used: Dict[int, float] = {}  # route key -> the loop's time it last served
        self._retired: List[int] = []  # keys of routes dropped since the last refresh
        # quiet route key -> why the inspector refused its requests (counted as that drop for
        # each), None when it did not count a refusal
        self._quiet: Dict[int, Optional[str]] = {}
        self._task: Optional[asyncio.Task] = None
        self._quiet_task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._refresh_loop())
        self._quiet_task = asyncio.ensure_future(self._quiet_loop())

    def stop(self) -> None:
        for task in (self._task, self._quiet_task):
            if task is not None:
                task.cancel()
        self.edge.carrier.clear_routes()
        self.routes.clear()
        self.by_account.clear()
        self.hops.clear()
        self.where.clear()
        self.members.clear()
        self.owner.clear()
        self.clouds.clear()
        self.edge_names.clear()
        self._kinds.clear()

    # ---- the rules ----------------------------------------------------------------------------
    def candidate(self, host: str, scheme: str = "http") -> Any:
        """The tunnel a plain route of ``host`` on the listener of ``scheme`` would serve, or
        the :class:`Pool` of an endpoint pool's members, by the rules read without a wait;
        None when ``host`` needs Python per request."""
        edge = self.edge
        if not host or host in edge.banned:
            return None
        tunnel = edge.registry.by_host.get(host)
        if tunnel is None and host not in self.clouds and host not in self.edge_names:
            return None
        spec = edge.tls.spec_for(host)
        if spec.key != tls_spec.DEFAULT.key and (scheme != "https" or not core_requires(spec)):
            return None  # a Host that requires more of a handshake: Python says 421
        if tunnel is None:
            return self._cloud_kept(host) if host in self.clouds else self._edge_kept(host)
        if tunnel.pooled or tunnel.pool:
            members = [
                t for t in tunnel.pool or [tunnel] if t.proto == scheme or not t.scheme_only
            ]
            if members and all(self._carriable(t) for t in members):
                return Pool(members)
            return None
        tunnel = edge.registry.http_tunnel(host, scheme)
        return tunnel if tunnel is not None and self._carriable(tunnel, h2=True) else None

    def _carriable(self, tunnel: Any, h2: bool = False) -> bool:
        """The rules of one tunnel read without a wait (``h2``: one that speaks HTTP/2 may be:
        not a pool's member)."""
        if tunnel.proto not in ("http", "https") or tunnel.internal:
            return False
        mux = getattr(tunnel.session, "mux", None)
        if type(mux) is not MuxSession or mux.closed:
            return False
        mode = route_mode(tunnel)
        return not (
            mode is None
            or (tunnel.forwards_proto == "http2" and not h2)
            # a WebSocket-TCP endpoint's route: the core answers the upgrade and converts,
            # after the policy's decision when it has one (a request it forwards internally
            # is converted or not as its target says: decided.py)
            or (tunnel.ws_tcp and (not h2 or tunnel.forwards_proto == "http2"))
        )

    def _cloud_kept(self, host: str) -> Optional[Routed]:
        """The cloud endpoint a route of ``host`` serves, read without a wait: the one read
        for it (:meth:`_read_named`) unless the router's cache now has another answer for the
        name (gone, or changed: read again), when its policy lets the core carry it."""
        claim, routed = self.clouds[host]
        cached, now = self.edge.router.cloud_now(host)
        if cached and not _same_claim(now, claim):
            return None
        return routed if self._cloud_carriable(routed) else None

    def _cloud_carriable(self, routed: Routed) -> bool:
        """A cloud endpoint's rules read without a wait: a policy that compiled, decidable
        (edge/decided.py: it answers or forwards on the head alone); in a cluster, none that
        rate-limits (one designated instance serves it, its counters seeing every request:
        edge/cluster.py, which Python asks on each connection)."""
        policy = policy_of(routed)
        if routed.error is not None or policy is None or route_mode(routed) is None:
            return False
        return self.edge.cluster is None or not _rate_limits(policy)

    def _edge_kept(self, host: str) -> Optional[EdgeName]:
        """The HTTPS edge a route of ``host`` serves, read without a wait: the one read for
        it (:meth:`_read_named`) unless the router's cache now has another answer for the
        name (gone, or another edge: read again). None in a cluster: there an edge's tunnel
        groups are spread over the instances, and a rate-limited one has a designated
        instance (edge/group_spread.py), which Python asks on each connection."""
        found, name, carriable = self.edge_names[host]
        if self.edge.cluster is not None or not carriable:
            return None
        cached, now = self.edge.router.https_edge_now(host)
        if cached and (now is None or now[0].get("id") != found.get("id")):
            return None
        return name

    async def _read_named(self, host: str) -> None:
        """What the router serves ``host`` as, read (through its cache, as the Python path
        reads it for each request: edges.EdgeRouter.route_http) and kept for its routes: the
        cloud endpoint holding the name's claim, else the HTTPS edge serving it; an
        internal cloud endpoint is none, a pool's cloud member is the pool's turn (nothing
        kept)."""
        router = self.edge.router
        claim = await router.cloud(host) if "@" not in host else None
        if claim is not None and not claim.get("internal"):
            self.edge_names.pop(host, None)
            if claim.get("pooled"):
                self.clouds.pop(host, None)
                return
            kept = self.clouds.get(host)
            if kept is None or not _same_claim(claim, kept[0]):
                routed = await router.cloud_routed(claim)
                _bounded(self.clouds, self.routes)
                self.clouds[host] = (claim, routed)
            return
        self.clouds.pop(host, None)
        found = await router.https_edge_for(host) if "@" not in host else None
        if found is None:
            self.edge_names.pop(host, None)
            return
        edge = found[0]
        try:  # read again each time: a tunnel group's members come and go
            parts = await router.https_edge_parts(host)
        except Exception:  # a route's policy the engine refuses: Python answers it
            parts = None
        carriable = parts is not None and all(_edge_route_carriable(*part) for part in parts)
        held = self.edge_names.get(host)
        if held is None or held[0].get("id") != edge.get("id"):
            _bounded(self.edge_names, self.routes)
            name = EdgeName(edge["id"], edge["account_id"], f"https://{host}", host)
        else:
            name = held[1]
        self.edge_names[host] = (edge, name, carriable)

    def _named_cached(self, host: str) -> bool:
        """Whether the router's cache still holds what ``host`` was read as."""
        router = self.edge.router
        if host in self.clouds:
            return router.cloud_now(host)[0]
        return router.https_edge_now(host)[0]

    async def _plain(self, tunnel: Any, host: str) -> bool:
        """The rules read through a cache that may wait: the account's IP restrictions (read
        into the router's cache, which :meth:`mode_now` reads); a pool's members all this
        instance's agents in the store's pool."""
        await self.edge.router.ip_restrictions(_account(tunnel))
        return type(tunnel) is not Pool or await pools.served_here(self.edge, host)

    def restricted(self, account_id: str) -> bool:
        """Whether the account's ``endpoints`` IP restrictions apply to its requests, as the
        router's cache has them (not cached: assumed, so each request is checked)."""
        restrictions = self.edge.router.ip_restrictions_now(account_id)
        return restrictions is None or not _plain_of(restrictions)

    def mode_now(self, tunnel: Any) -> Any:
        """How a route of ``tunnel`` is pushed now (:func:`_mode`), each request of an
        account with ``endpoints`` IP restrictions decided (its client checked first), and
        CAPTURED on an endpoint whose bodies the inspector captures."""
        return self._moded(tunnel, self.restricted(_account(tunnel)))

    def _mode_known(self, tunnel: Any, pushed: Any) -> Any:
        """:meth:`mode_now`, the account's restrictions as the route was pushed when the
        router's cache no longer has them (the refresh reads them, then drops the route if
        they came or went; a decided row is checked meanwhile: Decider._one)."""
        restrictions = self.edge.router.ip_restrictions_now(_account(tunnel))
        if restrictions is None:
            return self._moded(tunnel, _restricted_of(pushed))
        return self._moded(tunnel, not _plain_of(restrictions))

    def _moded(self, tunnel: Any, restricted: bool) -> Any:
        """A route's mode (a pool's: its members'), RESTRICTED when ``restricted``, and
        CAPTURED for each endpoint whose bodies the inspector captures (as its cache has it
        now: a change drops the route and pushes it again)."""
        mode = _restricted_mode(_mode(tunnel), restricted)
        if mode is None:
            return None
        inspector = hub_of(self.edge).inspector

        def captured(endpoint: Any, m: int) -> int:  # (a tunnel's id, or a cloud's)
            endpoint_id = endpoint.endpoint_id or getattr(endpoint, "id", "")
            if inspector.captures_bodies(endpoint.account_id, endpoint_id):
                return m | CAPTURED
            return m

        if type(tunnel) is Pool:
            return tuple(captured(t, m) for t, m in zip(tunnel, mode))
        return captured(tunnel, mode)

    # ---- pushing ------------------------------------------------------------------------------
    def sync(self, host: str) -> None:
        """``host``'s routes (both listeners) as the rules say now: dropped at once when not
        plain (so a request racing the change goes to Python), pushed (again) once the cached
        checks agree when there is none, or an expired one."""
        for scheme in SCHEMES:
            self.edge.carrier.drop_relay(host, scheme)  # held here now, or held anew
            self._sync(host, scheme)

    def _sync(self, host: str, scheme: str) -> None:
        tunnel = self.candidate(host, scheme)
        where = (scheme, host)
        held = self.routes.get(where)
        if tunnel is None or (
            held is not None
            and (
                not _same(held[1], tunnel)
                or held[4] != self._mode_known(tunnel, held[4])
                or not _same(held[5], _policy(tunnel))  # the core may hold its decisions
            )
        ):
            self._drop(where)
            held = None
        if tunnel is None or where in self._pending:
            return
        if held is None or held[2] <= asyncio.get_running_loop().time():
            self._pending.add(where)
            asyncio.ensure_future(self._push(where))

    def relay(self, host: str, scheme: str, address: str, line: bytes, ttl: float) -> None:
        """A cluster's connections for ``host`` on the listener of ``scheme`` go to the
        instance at ``address`` (edge/cluster.py found it holds the endpoint): the core
        relays a new connection whose first request names the host for ``ttl`` seconds
        (``Carrier.set_relay``). Not on HTTPS for a name whose TLS settings require more
        of a handshake than the core's (Python's TLS checks them), nor a name not served."""
        edge = self.edge
        if edge.registry.http_tunnel(host, scheme) is not None:
            return  # bound here meanwhile (the relay waited on the holder's answer)
        cert = 0
        if scheme == "https":
            if (
                edge.tls.spec_for(host).key != tls_spec.DEFAULT.key
                or not edge.tls.loaded.is_set()
                or not edge.serves_name(host)
            ):
                return
            cert = self.cert_number(host)
        edge.carrier.set_relay(host, scheme, address, line, ttl, cert)

    def seen(self, host: str, scheme: str = "http", named: bool = False) -> None:
        """Python served a request for ``host`` on the listener of ``scheme`` (``named``: a
        name the router served from the store, a cloud endpoint's or an HTTPS edge's): the
        host is in use (its route is kept), and a route that expired is pushed again."""
        where = (scheme, host)
        held = self.routes.get(where)
        now = asyncio.get_running_loop().time()
        if held is not None:
            self._used[held[0]] = now
        if held is not None and held[2] > now:
            return
        if not named:
            self._sync(host, scheme)
        elif where not in self._pending and self._named_may_be(host):
            self._pending.add(where)
            asyncio.ensure_future(self._push(where))

    def _named_may_be(self, host: str) -> bool:
        """Whether a route of ``host``, a name the router serves, may be pushed, as far as is
        known without a wait: not when the router's cache has neither a cloud endpoint nor an
        HTTPS edge for it, or a pool's cloud endpoint, nor when the one read for it is the
        same and not carried (each of the host's requests would otherwise read it again)."""
        router = self.edge.router
        cached, claim = router.cloud_now(host)
        if not cached:
            return True
        if claim is not None and not claim.get("internal"):
            if claim.get("pooled"):
                return False
            kept = self.clouds.get(host)
            return kept is None or not _same_claim(claim, kept[0]) or bool(self._cloud_kept(host))
        cached, found = router.https_edge_now(host)
        if not cached:
            return True
        if found is None:
            return False
        held = self.edge_names.get(host)
        return (
            held is None
            or held[0].get("id") != found[0].get("id")
            or self._edge_kept(host) is not None
        )

    def cert_number(self, host: str) -> int:
        """The number in the core of the certificate the HTTPS listener serves ``host`` with
        (edge/tls.py's choice: the store's for the name, else the local CA's or the fixed
        pair) and what the name requires of a handshake, pushed when first needed."""
        certs = self.edge.certs
        spec = self.edge.tls.spec_for(host)
        stored = certs.stored_pair(host)
        if stored is not None:
            identity, pair = ("store", stored[0], spec.key), stored[1]
        else:
            identity, pair = ("issued", host, spec.key), None
        number = self.certs.get(identity)
        if number is None:
            chain, key = pair if pair is not None else certs.pair_for([host])
            number = next(self._cert_numbers)
            required = self._spec_number(spec)
            self.edge.carrier.set_cert(number, chain, key, required, spec if required else None)
            self.certs[identity] = number
            self._spec_of_cert[number] = required
        return number

    def _spec_number(self, spec: tls_spec.TlsSpec) -> int:
        """The number the core knows what ``spec`` requires by (0: the default)."""
        if spec.key == tls_spec.DEFAULT.key:
            return 0
        number = self._spec_numbers.get(spec.key)
        if number is None:  # a number is never given again (a connection may still hold it)
            number = self._spec_numbers[spec.key] = next(self._spec_counter)
            self._specs[number] = spec
        return number

    def spec_numbered(self, number: int) -> tls_spec.TlsSpec:
        """What the handshake of a connection the core terminated was made to require (its
        facts' ``spec``): the default for 0, or for a number no longer known (its name's
        settings changed since: a protected name's request on it is then misdirected)."""
        return self._specs.get(number, tls_spec.DEFAULT)

    async def _push(self, where: Tuple[str, str]) -> None:
        scheme, host = where
        try:
            if self.edge.registry.by_host.get(host) is None:  # a cloud endpoint's?
                await self._read_named(host)
            tunnel = self.candidate(host, scheme)
            if tunnel is None or not await self._plain(tunnel, host):
                self._drop(where)
                return
            if not _same(tunnel, self.candidate(host, scheme)):
                return  # changed while the checks waited
            cert = 0
            if scheme == "https":
                if not self.edge.tls.loaded.is_set() or not self.edge.serves_name(host):
                    self._drop(where)  # the listener's own name and certificate: Python's
                    return
                cert = self.cert_number(host)
                nameless = self.cert_number(self.edge.settings.base_domain)
                if nameless != self._nameless:
                    self.edge.carrier.set_nameless_cert(nameless)
                    self._nameless = nameless
            held = self.routes.get(where)
            now = asyncio.get_running_loop().time()
            policy = _policy(tunnel)
            if held is not None and _same(held[1], tunnel) and _same(held[5], policy):
                key = held[0]
            else:  # a new route counts as used: it is kept ROUTE_KEEP before any request
                key = next(self._keys)
                self._used[key] = now
            until = now + _ttl_of(tunnel)
            mode = self.mode_now(tunnel)
            if mode is None:  # its policy changed while the checks waited: not a route
                self._drop(where)
                return
            self._set(host, key, tunnel, scheme, cert, mode)
            self._put(where, (key, tunnel, until, cert, mode, policy))
            if type(tunnel) is not Pool:  # a pool's records name its members (_set)
                self.hops[key] = hop_of(tunnel)
            if _named(tunnel):
                self._kinds[key] = "cloud" if is_cloud(tunnel) else "edge"
            self.where[key] = where
        except Exception:
            log.exception("pushing the %s route of %s", scheme, host)
        finally:
            self._pending.discard(where)

    def _renewed(
        self, where: Tuple[str, str], held: tuple, tunnel: Any, now: float
    ) -> Optional[bool]:
        """A used route whose facts are all kept now (the same tunnel, its account's IP
        restrictions in the router's cache, on HTTPS the same certificates), checked without a
        wait: dropped if they no longer make it plain, renewed in the core once half its
        ROUTE_TTL has passed (not at every refresh). None when the account's IP restrictions
        must be read first (:meth:`_after_restrictions`: one read an account, then its routes
        are checked again). False when something changed: then :meth:`_push` decides, as for
        a new route."""
        key, was, until, cert, mode, policy = held
        if not _same(tunnel, was) or not _same(policy, _policy(tunnel)):
            return False
        restrictions = self.edge.router.ip_restrictions_now(_account(tunnel))
        if restrictions is None:
            return None
        if mode != self._moded(tunnel, not _plain_of(restrictions)):
            # its mode changed, or the account's restrictions came or went: dropped at once
            # (no request served unchecked meanwhile), then pushed again as they make it
            self._drop(where)
            return False
        if type(tunnel) is Pool or _named(tunnel):
            return False  # the store's pool or claim read again at each refresh (_push)
        scheme, host = where
        if scheme == "https" and (
            not self.edge.tls.loaded.is_set()
            or not self.edge.serves_name(host)
            or self.cert_number(host) != cert
            or self.cert_number(self.edge.settings.base_domain) != self._nameless
        ):
            return False
        if until - now < ROUTE_TTL / 2:
            self._set(host, key, tunnel, scheme, cert, mode)
            self._put(where, (key, tunnel, now + _ttl_of(tunnel), cert, mode, policy))
        return True

    def _after_restrictions(self, account_id: str, where: Tuple[str, str]) -> None:
        """Route ``where`` is checked again once its account's IP restrictions are read: one
        read (a task) an account, whatever the number of its routes that wait for it (an
        account's thousand routes were a thousand pushes each time its cache expired)."""
        waiting = self._restrictions_wanted.get(account_id)
        if waiting is None:
            waiting = self._restrictions_wanted[account_id] = set()
            asyncio.ensure_future(self._restrictions_read(account_id))
        waiting.add(where)

    async def _restrictions_read(self, account_id: str) -> None:
        try:
            await self.edge.router.ip_restrictions(account_id)
        except Exception as exc:  # its routes' pushes read again, and fail or drop them
            log.warning("reading the IP restrictions of %s: %r", account_id, exc)
        wheres = self._restrictions_wanted.pop(account_id, set())
        now = asyncio.get_running_loop().time()
        for where in wheres:
            held = self.routes.get(where)
            tunnel = self.candidate(where[1], where[0])
            if held is None or tunnel is None or where in self._pending:
                continue  # dropped, or changed meanwhile: the next refresh sees it
            if not self._renewed(where, held, tunnel, now):
                self._pending.add(where)
                asyncio.ensure_future(self._push(where))

    def _set(self, host: str, key: int, tunnel: Any, scheme: str, cert: int, mode: Any) -> None:
        if type(tunnel) is Pool:  # each member a route of its own key, spread in turn
            keys = self.members.get(key)
            if keys is None or len(keys) != len(tunnel):
                keys = self.members[key] = [next(self._keys) for _ in tunnel]
            for member_key, member in zip(keys, tunnel):
                self.hops[member_key] = Hop.of_tunnel(member)
                self.where[member_key] = (scheme, host)
                self.owner[member_key] = key
            self.edge.carrier.set_pool(
                host,
                [
                    (
                        k,
                        m.session.mux,
                        m.id,
                        mode[i] & ~CAPTURED,
                        _holds(m, mode[i]),
                        m.proxy_proto,
                        _capture_of(mode[i]),
                    )
                    for i, (k, m) in enumerate(zip(keys, tunnel))
                ],
                ROUTE_TTL,
                scheme,
                cert,
                listener_addr(self.edge, scheme),
            )
            return
        if _named(tunnel):  # no session: each request answered, or sent to its target
            self.edge.carrier.set_route(
                host,
                key,
                None,
                tunnel.endpoint_id,
                CLOUD_TTL,
                scheme,
                cert,
                decided=True,
                responses=mode & 3 == RESPONSES,
                holds=_holds(tunnel, mode),
                capture=_capture_of(mode),
            )
            return
        self.edge.carrier.set_route(
            host,
            key,
            tunnel.session.mux,
            tunnel.id,
            ROUTE_TTL,
            scheme,
            cert,
            decided=mode & ~CAPTURED != PLAIN,
            responses=mode & 3 == RESPONSES,
            holds=_holds(tunnel, mode),
            h2_scheme=h2_scheme_of(tunnel),
            proxy_proto=tunnel.proxy_proto,
            proxy_dest=listener_addr(self.edge, scheme),
            capture=_capture_of(mode),
            ws_tcp=tunnel.ws_tcp,
        )

    def _put(self, where: Tuple[str, str], held: Tuple[int, Any, float, int, Any, Any]) -> None:
        """The route at ``where`` is ``held`` now, indexed by its account."""
        old = self.routes.get(where)
        if old is not None:
            self._unindex(where, old[1])
        self.routes[where] = held
        self.by_account.setdefault(_account(held[1]), set()).add(where)

    def _unindex(self, where: Tuple[str, str], tunnel: Any) -> None:
        account = _account(tunnel)
        places = self.by_account.get(account)
        if places is not None:
            places.discard(where)
            if not places:
                del self.by_account[account]

    def _drop(self, where: Tuple[str, str]) -> None:
        held = self.routes.pop(where, None)
        self.edge.carrier.drop_route(where[1], where[0])
        if held is not None:
            self._unindex(where, held[1])
            self._retired.append(held[0])  # its last records may still come

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                self.refresh()
            except Exception:
                log.exception("refreshing the core's routes")

    def refresh(self) -> None:
        """Every route again: the rules read without a wait (bans, the registry, the
        inspector), and the routes that served within ROUTE_KEEP renewed through the cached
        checks; a route idle longer expires in the core (its next request is Python's, which
        pushes it again)."""
        if self._retired:
            live = {held[0] for held in self.routes.values()}
            for key in self._retired:
                if key not in live:
                    self.hops.pop(key, None)
                    self.where.pop(key, None)
                    self._kinds.pop(key, None)
                    self._counted.discard(key)
                    for member_key in self.members.pop(key, ()):
                        self.hops.pop(member_key, None)
                        self.where.pop(member_key, None)
                        self.owner.pop(member_key, None)
        self._retired = []
        now = asyncio.get_running_loop().time()
        used = self._used
        for key in [k for k, at in used.items() if at < now - ROUTE_KEEP]:
            del used[key]
        for where, held in list(self.routes.items()):
            key, until = held[0], held[2]
            tunnel = self.candidate(where[1], where[0])
            if tunnel is None:
                self._drop(where)
            elif key in used and (not _named(tunnel) or used[key] >= now - NAMED_KEEP):
                if where in self._pending:
                    continue
                try:
                    renewed = self._renewed(where, held, tunnel, now)
                except Exception:  # a certificate the core refused: Python's from now on,
                    log.exception("renewing the %s route of %s", *where)  # the rest renewed
                    self._drop(where)
                    continue
                if renewed is None:
                    self._after_restrictions(_account(tunnel), where)
                elif not renewed:
                    self._pending.add(where)
                    asyncio.ensure_future(self._push(where))
            elif until <= now or (_named(tunnel) and not self._named_cached(where[1])):
                # expired; or a name's that has not served within NAMED_KEEP, whose claim
                # the router's cache let go: not checked any more (no store read for an idle
                # name), so not served any more
                self._drop(where)
        # a certificate no route names any more (replaced, or its routes gone) is dropped
        named = {held[3] for held in self.routes.values()}
        if not any(where[0] == "https" for where in self.routes):
            self.edge.carrier.set_nameless_cert(0)
            self._nameless = 0
        named.add(self._nameless)
        for identity, number in list(self.certs.items()):
            if number not in named:
                del self.certs[identity]
                self._spec_of_cert.pop(number, None)
                self.edge.carrier.drop_cert(number)
        # A spec no certificate is made for is still what live connections' handshakes were
        # made for (a keep-alive connection outlives its idle route by up to the idle
        # timeout): its number is kept, and given again to the same key, so those connections
        # stay servable. Forgotten only past SPECS_KEPT, the oldest numbers first.
        over = len(self._spec_numbers) - SPECS_KEPT
        if over > 0:  # (each refresh: nothing to sort below the bound)
            in_use = set(self._spec_of_cert.values())
            unused = [(n, k) for k, n in self._spec_numbers.items() if n not in in_use]
            for spec_number, spec_key in sorted(unused)[:over]:
                del self._spec_numbers[spec_key]
                self._specs.pop(spec_number, None)

    def route_of(self, key: int) -> Optional[Pushed]:
        """Route ``key``'s (tunnel, scheme, host, mode and policy as pushed) while the core may
        serve it; None once it was dropped or replaced."""
        where = self.where.get(key)
        held = self.routes.get(where) if where is not None else None
        route = self.owner.get(key, key)  # a pool member's: its pool's route
        if held is None or held[0] != route or where is None:
            return None
        if route != key:  # the member the key names, its own mode and policy
            index = self.members[route].index(key)
            return held[1][index], where[0], where[1], held[4][index], held[5][index]
        return held[1], where[0], where[1], held[4], held[5]

    def decide(self, rows: List[tuple]) -> None:
        """A batch of decided routes' requests (edge/decided.py)."""
        self.decider.decide(rows)

    def decide_responses(self, rows: List[tuple]) -> None:
        """A batch of decided routes' response heads (edge/decided.py)."""
        self.decider.responses(rows)

    # ---- what the core served -----------------------------------------------------------------
    def served(self, rows: List[tuple]) -> None:
        """A batch of requests the core served, into the events hub: each counted at once
        (the request metrics, the inspector's window: ``Hub.count_http``, the tally written
        once per batch), and a tuple like edge/observe.py's queued for the events worker
        only for a request a record is made of (the inspector admits it, or its account's
        subscriptions want it or are not cached yet)."""
        hub = hub_of(self.edge)
        now_perf, now_wall = time.perf_counter(), time.time()
        now_loop, now_mono = asyncio.get_running_loop().time(), time.monotonic()
        hops, used, count, queue = self.hops, self._used, hub.count_http, hub.record
        owner, kinds = self.owner, self._kinds
        try:
            for key, status, stats, tls, exchange, ran, held in rows:
                hop = hops.get(key)
                if hop is None or ran is REFUSED:  # refused before any endpoint's: not its
                    continue
                bytes_in, bytes_out, started, duration = stats
                if held and ran is not None:  # Python made it for another request: counted
                    hub.count_decisions(ran.state)  # now, as it is when Python makes one
                used[owner.get(key, key)] = now_loop  # a pool member's: its route's
                # counted at once; a tuple only for a request a record is made of (``ran``: a
                # decided route's policy run, http_policy.Traffic, its decisions counted when
                # it ran)
                if ran is not None and status != 101:  # its circuit breakers count the
                    record_upstream(ran, status)  # answer (decided.py); a switch, never
                    # (the Python path's _switch counts none)
                kind = kinds.get(key, "agent")
                admitted = count(hop, kind, status, duration, bytes_in, bytes_out, now_mono)
                if admitted is None:
                    if key not in self._quiet and not self._counts(key):
                        # nothing wanted of its requests: counted by the core from now on
                        self._make_quiet(key, hop, hub)
                    continue
                ended = started + duration
                queue(
                    Counted(
                        (
                            _Address(exchange, False),
                            _Address(exchange, True),
                            "https" if tls else "http",
                            hop,
                            kind,
                            ran.state if ran is not None else None,
                            started,
                            now_perf - (now_wall - started),
                            now_perf - (now_wall - ended),
                            ended,
                            bytes_in,
                            bytes_out,
                            _Request(exchange),
                            _Response(status, exchange),
                            # the bodies' first bytes the core kept (the inspector captures)
                            ([exchange.request_body], [exchange.response_body])
                            if exchange.captured
                            else None,
                            exchange.request_ended,
                        ),
                        admitted,
                    )
                )
        finally:
            hub.flush_counts()

    # ---- quiet routes -------------------------------------------------------------------------
    def _counts(self, key: int) -> bool:
        """A route whose every answer a circuit breaker counts: never quiet."""
        if key in self._counted:
            return True
        pushed = self.route_of(key)
        return pushed is not None and counts_answers(pushed[0], pushed[4])

    def _counting(self, key: int) -> None:
        """A decision of route ``key`` went to a target whose breaker counts its answer: the
        route is never made quiet from now on (it turns loud again at the next take of the
        quiet routes, within QUIET_SECONDS)."""
        self._counted.add(key)  # (let go with the key: refresh)
        if key in self._quiet:  # loud now, not at the next take of the quiet routes
            self.edge.carrier.set_quiet(key, False)

    def internal_changed(self, account_id: str, hostname: str = "") -> None:
        """The internal endpoint ``hostname`` of ``account_id`` came, went or changed (the
        registry's): every route of the account that may hold a decision naming it (its
        decisions held, its policy forwarding there: a fixed URL of that name, or one made
        of a template) is dropped and pushed again under a new key, so no decision the core
        holds names a target gone or changed. Routes that hold nothing, or forward only to
        other names, are left as they are."""
        for where in list(self.by_account.get(account_id, ())):
            held = self.routes[where]
            tunnel, mode, policy = held[1], held[4], held[5]
            if type(tunnel) is Pool:
                members = list(zip(tunnel, mode, policy))
            else:
                members = [(tunnel, mode, policy)]
            if any(_holds(t, m) is not None and forwards_to(p, hostname) for t, m, p in members):
                self._drop(where)
                self._sync(where[1], where[0])

    def _make_quiet(self, key: int, hop: Hop, hub: Any) -> None:
        inspector = hub.inspector
        refused = inspector.refusal(hop.account_id, hop.endpoint_id) if inspector else None
        self._quiet[key] = refused
        self.edge.carrier.set_quiet(key, True)

    async def _quiet_loop(self) -> None:
        while True:
            await asyncio.sleep(QUIET_SECONDS)
            try:
                self.take_quiet()
            except Exception:
                log.exception("taking the quiet routes' numbers")

    def take_quiet(self) -> None:
        """Every quiet route made loud again (its next request is asked about), then what the
        core counted of them since the last time, into the events hub as their rows would
        have been counted."""
        carrier = self.edge.carrier
        quiet, self._quiet = self._quiet, {}
        for key in quiet:
            carrier.set_quiet(key, False)
        taken = carrier.take_tallies()
        if not taken:
            return
        hub = hub_of(self.edge)
        now = asyncio.get_running_loop().time()
        for key, statuses, durations, bytes_in, bytes_out, held in taken:
            if self.hops.get(key) is None:
                continue
            self._used[self.owner.get(key, key)] = now
            kind = self._kinds.get(key, "agent")
            hub.count_quiet(kind, statuses, durations, bytes_in, bytes_out, quiet.get(key))
            for ran, times in held:  # requests a held decision served: its run's decisions
                hub.count_decisions(ran.state, times)
        hub.flush_counts()


def holds_for(tunnel: Any) -> Optional[List[str]]:
    """The facts the core may hold a route's decisions for (edge/decided.py ``holds_of``);
    none for a route a circuit breaker counts the answers of (never quiet, and each request
    asks whether it is tripped)."""
    policy = policy_of(tunnel)
    return None if counts_answers(tunnel, policy) else holds_of(policy)


def _mode(tunnel: Any) -> Any:
    """How a route of ``tunnel`` is pushed: plain, decided, decided with its response heads
    (edge/decided.py ``route_mode``); a pool's, its members' (None when one cannot be)."""
    if type(tunnel) is Pool:
        modes = tuple(route_mode(m) for m in tunnel)
        return None if None in modes else modes
    return route_mode(tunnel)


def _restricted_mode(mode: Any, restricted: bool) -> Any:
    """``mode`` (a route's, or a pool's members') with each request decided and its client
    checked first when ``restricted`` (an account with ``endpoints`` IP restrictions:
    RESTRICTED set, a plain route decided)."""
    if mode is None or not restricted:
        return mode
    if isinstance(mode, tuple):
        return tuple(_restricted_mode(m, True) for m in mode)
    return (mode or DECIDED) | RESTRICTED


def _restricted_of(mode: Any) -> bool:
    """Whether a route was pushed with its requests' clients checked (RESTRICTED)."""
    if isinstance(mode, tuple):
        return any(m & RESTRICTED for m in mode)
    return mode is not None and bool(mode & RESTRICTED)


def _holds(tunnel: Any, mode: int) -> Optional[List[str]]:
    """What a route's decisions are held for: none when its requests' clients are checked
    (a held decision would skip the check), else :func:`holds_for` (captured bodies or not:
    a held decision applies only while the route is quiet, when no record is made)."""
    return None if mode & RESTRICTED else holds_for(tunnel)


@functools.lru_cache(maxsize=1024)
def _rate_limits(policy: Any) -> bool:
    """Whether a compiled policy has a ``rate-limit`` action (per compiled policy: shared
    and immutable)."""
    return any(
        isinstance(action, tp_actions.RateLimit)
        for rules in policy.phases.values()
        for rule in rules or ()
        for action in rule.actions
    )


def _ttl_of(tunnel: Any) -> float:
    """How long a route of ``tunnel`` lives in the core unless pushed again."""
    return CLOUD_TTL if _named(tunnel) else ROUTE_TTL


def _edge_route_carriable(
    route: Dict[str, Any], backend: Optional[Dict[str, Any]], enforcement: Any, members: List[Any]
) -> bool:
    """Whether the core can carry every request an HTTPS edge's route serves, known before
    any request (so none is routed twice: a request handed to Python is routed again there,
    and its backend drawn again): its backend one whose every pick the core carries
    (:func:`_picks_carried`), each member of its tunnel groups on a session the core runs
    here (and none speaking HTTP/2 behind a WebSocket-TCP converter), or none (the edge's
    502); its modules a decidable policy naming no IP policy or vault secret."""
    if backend is not None and not _picks_carried(backend):
        return False
    if any(core_mux(member) is None for member in members):
        return False
    converter = route_modules.converts_websockets(route)
    if any(
        (converter or member.ws_tcp) and member.forwards_proto == "http2" for member in members
    ):
        return False  # (a converter towards an HTTP/2 upstream: Python's, Decider._onward)
    policy = enforcement.policy if enforcement is not None else None
    return policy is None or (
        decidable(policy)
        and not policy.ip_policy_ids
        and not policy.secret_refs
        and not policy.has("on_tcp_connect")  # (its connections' rules: Python's)
    )


def _picks_carried(backend: Dict[str, Any]) -> bool:
    """Whether whatever an edge route's ``backend`` picks for a request is the core's to
    carry: a tunnel group (the tunnel it draws), a fixed answer (http_response: Python makes
    it, the core writes it), or a failover or weighted choice of those, drawn once by the
    router in Python (a static backend, the edge's own connection to an address, is
    Python's)."""
    kind = backend.get("kind")
    if kind in ("tunnel_group", "http_response"):
        return True
    members = backend.get("backends") or []
    if kind == "failover":
        return all(_picks_carried(member) for member in members)
    if kind == "weighted":
        return all(_picks_carried(member.get("backend") or {}) for member in members)
    return False


def _bounded(kept: Dict[str, Any], routes: Dict[Tuple[str, str], Any]) -> None:
    """Past MAX_CLOUDS names read for routes, those with no route are let go."""
    if len(kept) >= MAX_CLOUDS:
        routed_hosts = {where[1] for where in routes}
        for name in [n for n in kept if n not in routed_hosts]:
            del kept[name]


def _named(tunnel: Any) -> bool:
    """A route of a name the router serves from the store (a cloud endpoint, an HTTPS
    edge's hostname), not an agent's tunnel: no session of its own."""
    return is_cloud(tunnel) or is_edge(tunnel)


def _capture_of(mode: int) -> int:
    """The data bytes of each body the core keeps for a route's records: an inspector's
    record's (BODY_BYTES) and one more, which tells it was cut, as edge/observe.py keeps
    them; 0 for a route whose bodies are not captured."""
    return layout.BODY_BYTES + 1 if mode & CAPTURED else 0


def _policy(tunnel: Any) -> Optional[Any]:
    """The traffic policy a route of ``tunnel`` was pushed with (a pool's: its members')."""
    if type(tunnel) is Pool:
        return Pool(policy_of(m) for m in tunnel)
    return policy_of(tunnel)
