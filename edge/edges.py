"""HTTPS and TCP edges (the API's ``/edges/https`` and ``/edges/tcp``) on the public listeners.

A request whose ``Host`` no agent endpoint serves is looked up as the HTTPS edge hostport
``<host>:443`` (the public port behind a load balancer, whatever port this edge listens on),
then routed: ``exact_path`` routes first, then ``path_prefix`` by longest prefix (the order
``chalicelib.core.routing.https_edge_for_hostport`` returns); no route matches: 404 in the contract's shape.
The route's modules run as traffic policy rules in the hosted order, through the same engine
as endpoints' (ip_restriction, user_agent_filter, request_headers, the route's traffic_policy;
response_headers on the response), then its ``backend``:

- ``http_response``: the edge answers with its status, headers and body (no agent needed);
- ``tunnel_group``: one of the account's online labeled tunnels carrying all the labels,
  spread round robin; none online: 502 ``ERR_NGROK_724`` (in a cluster a connection is first
  sent to the instance of a matching tunnel picked among every instance's:
  edge/group_spread.py, :meth:`EdgeRouter.group_labels`);
- ``failover``: the first member that can serve; ``weighted``: a member picked at random by
  weight among those that can serve.

A TCP connection on a reserved address's port reaches the TCP edge of ``<tcp host>:<port>``:
its ip_restriction and traffic_policy run ``on_tcp_connect``, then its tunnel group backend
carries the bytes.

A TLS connection whose SNI name a TLS edge serves (edge/passthrough.py) reaches
:meth:`EdgeRouter.route_tls_edge`: ip_restriction, tls_termination/mutual_tls (one
``terminate-tls`` action: :func:`terminate_tls_action`) and traffic_policy run
``on_tcp_connect``, then its tunnel group backend carries the connection.

Cloud endpoints (``POST /endpoints``, type ``cloud``) come before HTTPS edges: a request
whose ``Host`` no agent endpoint serves is looked up as a cloud endpoint's host (one GetItem
of the host's served-name claim, which carries the endpoint's url and traffic_policy:
chalicelib.core.online.cloud_endpoint_for). Its traffic policy runs with no agent; it must answer
(custom-response, redirect, deny, …) or ``forward-internal``; a request it lets through is
answered ``ERR_NGROK_6029`` (502: "the traffic policy configured for cloud endpoint … is
non-terminating"). Internal endpoints (``*.internal``: an agent's, bound on this edge, or a
cloud endpoint with the internal binding) are found only by :meth:`EdgeRouter.internal_target`,
for a ``forward-internal`` of an endpoint of the same account: their claims are namespaced by
account, so another account's internal name is simply not found (offline). A TCP connection on
a reserved address's port is looked up the same way (the cloud endpoint ``tcp://<address>``
first, then the TCP edge): its ``on_tcp_connect`` must forward-internal to an internal TCP
endpoint, or the connection is closed.

Changes through the API take effect within CACHE_SECONDS (1 s): lookups are cached that long
per hostport, so a busy hostport costs its store reads (1 GetItem + 1 Query for an HTTPS edge,
1 GetItem per backend, 1 Query for IP policy rules) once a second instead of per request.

IP policies are resolved here for every endpoint, not only edges: :meth:`EdgeRouter.
ip_policy_resolver` gives the engine the account's rules of the ``ip_policies`` a policy's
``restrict-ips`` actions name (an ``ip_restriction`` module becomes such an action), from the
same cache (per account and set of ids: 1 Query of the account's rules, plus 1 GetItem per
named policy without rules, once a second).
"""

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeGuard

from urllib.parse import urlsplit

from chalicelib.core import (
    abuse,
    certs,
    edge_errors,
    ip_rules,
    online,
    reservations,
    route_modules,
    routing,
)
from edge import enforce, static
from edge.registry import session_gone

CACHE_SECONDS = 1.0
MAX_FORWARDS = 8  # forward-internal hops of one request or connection (a loop ends)
NO_BACKEND = (
    edge_errors.NO_BACKEND,
    "No backend is available to serve requests for endpoint {url}.",
)


@dataclass(frozen=True)
class Hop:
    """The endpoint a request or a connection is at: the one it reached, or the internal one
    a ``forward-internal`` sent it to. Its policy sees it as ``endpoint.*``."""

    endpoint_id: str
    url: str
    host: str
    account_id: str

    @classmethod
    def of_tunnel(cls, tunnel: Any) -> "Hop":
        return cls(tunnel.endpoint_id or tunnel.id, tunnel.url, tunnel.hostname, tunnel.account_id)


def forward_refused(target: "Routed", forwards: int) -> Optional[Tuple[int, str, str]]:
    """Why the ``forwards``-th forward-internal hop (counted from 1) to ``target`` may not be
    taken, as (status, code, msg); None when it may. The one rule of both the HTTP and the TCP
    listeners: a target of another protocol is its own error, and no request or connection
    takes more than :data:`MAX_FORWARDS` hops."""
    if target.error is not None:
        return target.error
    if forwards > MAX_FORWARDS:
        return (
            502,
            edge_errors.ENDPOINT_OFFLINE,
            f"More than {MAX_FORWARDS} forward-internal hops for one request.",
        )
    return None


@dataclass
class Routed:
    """Where one request goes: a labeled ``tunnel``, or a ``fixed`` answer (http_response
    backend), with the ``enforcement`` of its route; or an ``error`` (status, code, msg)."""

    endpoint_id: str = ""
    url: str = ""
    host: str = ""
    account_id: str = ""
    cloud: bool = False  # a cloud endpoint: its policy must answer or forward
    tunnel: Any = None
    fixed: Optional[Dict[str, Any]] = None
    enforcement: Any = None
    error: Optional[Tuple[int, str, str]] = None
    ws_tcp: bool = False  # the route's websocket_tcp_converter (edge/wstcp.py)
    backend: Optional[Dict[str, Any]] = None  # an edge's route's, drawn from (draw)

    @property
    def hop(self) -> Hop:
        return Hop(self.endpoint_id, self.url, self.host, self.account_id)


_MISSING = object()


class TimedCache:
    """Values kept ``seconds`` from the start of their load, at most 10000 keys (the expired
    ones go first). A key's load is shared: the requests that want it while it loads wait for
    that one load (once a second, 20 connections arriving at an expired entry made 20 store
    reads before). The load runs as a task of its own, so a request that goes away does not
    cancel it for the others; a load that fails fails each of them, and the next request
    loads again."""

    def __init__(self, seconds: float, clock: Optional[Callable[[], float]] = None):
        self.seconds = seconds
        self._clock = clock
        self._values: Dict[Any, Tuple[float, Any]] = {}
        self._loading: Dict[Any, "asyncio.Task[Any]"] = {}

    async def get(self, key: Any, load) -> Any:
        kept = self.peek(key, _MISSING)
        if kept is not _MISSING:
            return kept
        task = self._loading.get(key)
        if task is None:
            task = self._loading[key] = asyncio.ensure_future(self._load(key, load))
            task.add_done_callback(_retrieved)
        return await asyncio.shield(task)

    async def _load(self, key: Any, load) -> Any:
        started = self.clock()
        try:
            value = await load()
        finally:
            del self._loading[key]
        self._values[key] = (started + self.seconds, value)
        if len(self._values) > 10000:
            now = self.clock()
            self._values = {k: v for k, v in self._values.items() if v[0] > now}
        return value

    def peek(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` while it is kept, else ``default`` (no load, no wait)."""
        hit = self._values.get(key)
        if hit is not None and hit[0] > self.clock():
            return hit[1]
        return default

    def loads_in_flight(self) -> int:
        return len(self._loading)

    def clock(self) -> float:
        """The given clock, else ``time.monotonic`` (looked up at each call)."""
        return self._clock() if self._clock is not None else time.monotonic()


def _retrieved(task: "asyncio.Task[Any]") -> None:
    """A failed load every waiter left: its exception is not logged as never retrieved."""
    if not task.cancelled():
        task.exception()


def _enabled(module: Optional[Dict[str, Any]]) -> TypeGuard[Dict[str, Any]]:
    return module is not None and bool(module) and module.get("enabled", True) is not False


def _internal_name(url: str) -> Optional[Tuple[str, Optional[int]]]:
    """A forward-internal URL's internal host name and explicit port; None for any other."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return None
    return (host, port) if host.endswith(online.INTERNAL_SUFFIX) else None


def _target_of(
    routed: Routed, theirs: str, url: str, port: Optional[int], protocol: str
) -> Optional[Routed]:
    """A forward-internal's target of protocol ``theirs`` for a hop of ``protocol``: a TCP
    endpoint named by another port is none (offline); one of another protocol is the hosted
    error ERR_NGROK_3502."""
    if theirs == "tcp" and port is not None and port != _port_of(routed.url):
        return None
    if theirs != protocol:
        routed.error = (
            502,
            edge_errors.FORWARD_INTERNAL_FAILED,
            "The forward-internal action can't forward "
            "between endpoints that use different "
            f"protocols. This endpoint uses {protocol}, "
            f"and {url} uses {theirs}.",
        )
    return routed


def _port_of(url: str) -> Optional[int]:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


class EdgeRouter:
    def __init__(self, edge: Any):
        self.edge = edge
        self._cache = TimedCache(CACHE_SECONDS)

    # ---- reads (cached) ---------------------------------------------------------------------
    async def _https_edge(self, hostport: str):
        return await self._cache.get(
            ("https", hostport), lambda: self.edge.call(routing.https_edge_for_hostport, hostport)
        )

    async def _tcp_edge(self, hostport: str):
        return await self._cache.get(
            ("tcp", hostport), lambda: self.edge.call(routing.tcp_edge_for_hostport, hostport)
        )

    async def _backend(self, account_id: str, backend_id: str):
        return await self._cache.get(
            ("backend", account_id, backend_id),
            lambda: self.edge.call(routing.resolve_backend, account_id, backend_id),
        )

    async def _ip_rules(self, account_id: str, policy_ids: List[str]):
        return await self._cache.get(
            ("ipp", account_id, tuple(policy_ids)),
            lambda: self.edge.call(ip_rules.rules_of, account_id, list(policy_ids)),
        )

    def ip_restrictions_now(self, account_id: str) -> Optional[List[Dict[str, Any]]]:
        """The account's IP restrictions as :meth:`ip_restrictions` has them kept now, None
        when it would have to read them."""
        return self._cache.peek(("ipx", account_id))

    async def ip_restrictions(self, account_id: str) -> List[Dict[str, Any]]:
        """The account's IP restrictions (edge/ip_restrictions.py), cached CACHE_SECONDS."""
        return await self._cache.get(
            ("ipx", account_id),
            lambda: self.edge.call(ip_rules.restrictions_of, account_id),
        )

    async def compiled(self, key: Any, phases: Dict[str, Any]) -> Any:
        """A compiled document, cached under ``key`` (its text: it does not change)."""
        return await self._cache.get(("policy",) + tuple(key), lambda: _compiled(phases))

    async def ip_policy_resolver(self, account_id: str, policy: Any) -> Any:
        """The engine's ``conn.ip_policy_resolver`` for one run of ``policy`` on an endpoint
        of ``account_id``: the account's rules of the IP policies the policy names, read
        through the cache (at most CACHE_SECONDS old; no store call on a hit). None when the
        policy names none. Another account's id, or one that no longer exists, resolves to
        None (the action refuses)."""
        wanted = policy.ip_policy_ids
        if not wanted:
            return None
        rules = await self._ip_rules(account_id, list(wanted)) if account_id else {}

        def resolve(account: str, policy_id: str) -> Optional[List[Tuple[str, str]]]:
            return rules.get(policy_id) if account == account_id else None

        return resolve

    # ---- modules as policy ------------------------------------------------------------------
    async def _enforcement(
        self, account_id: str, owner_id: str, modules: Dict[str, Any], kind: str
    ) -> Any:
        phases: Dict[str, List[Dict[str, Any]]] = {}
        request_phase = "on_http_request" if kind == "http" else "on_tcp_connect"
        ipr = modules.get("ip_restriction")
        if _enabled(ipr) and ipr.get("ip_policy_ids"):
            # Resolved per run like any restrict-ips ip_policies (ip_policy_resolver): the
            # compiled policy stays the same when a rule changes.
            phases.setdefault(request_phase, []).append(
                {
                    "name": "ip restriction",
                    "actions": [
                        {
                            "type": "restrict-ips",
                            "config": {"ip_policies": list(ipr["ip_policy_ids"])},
                        }
                    ],
                }
            )
        if kind == "tls":  # tls_termination and mutual_tls: one terminate-tls action
            termination = terminate_tls_action(modules)
            if termination is not None:
                phases.setdefault("on_tcp_connect", []).append(
                    {"name": "tls termination", "actions": [termination]}
                )
        if kind == "http":  # oauth, oidc, webhook_verification (chalicelib.core.route_modules)
            signed = route_modules.sign_in_rules(modules)
            if signed:
                phases.setdefault("on_http_request", []).extend(signed)
        ua = modules.get("user_agent_filter")
        if kind == "http" and _enabled(ua) and (ua.get("allow") or ua.get("deny")):
            phases.setdefault("on_http_request", []).append(enforce.ua_rule(ua))
        for name, phase in (
            ("request_headers", "on_http_request"),
            ("response_headers", "on_http_response"),
        ):
            module = modules.get(name)
            if kind == "http" and _enabled(module):
                actions = enforce.header_actions(module)
                if actions:
                    phases.setdefault(phase, []).append(
                        {"name": name.replace("_", " "), "actions": actions}
                    )
        if kind == "http":  # circuit_breaker last of the request's, compression after headers
            for phase, extra in (
                ("on_http_request", route_modules.breaker_rules(modules)),
                ("on_http_response", route_modules.response_rules(modules)),
            ):
                if extra:
                    phases.setdefault(phase, []).extend(extra)
        tp_module = modules.get("traffic_policy")
        if _enabled(tp_module) and tp_module.get("value"):
            for phase, rules in enforce.parse_document(tp_module["value"]).items():
                if isinstance(rules, list):
                    phases.setdefault(phase, []).extend(rules)
        if not phases:
            return None
        key = ("policy", owner_id, json.dumps(phases, sort_keys=True))
        return await self._cache.get(key, lambda: _compiled(phases))

    # ---- backends ---------------------------------------------------------------------------
    def _candidates(self, account_id: str, member: Dict[str, Any]) -> List[Any]:
        if member.get("kind") == "tunnel_group":
            return self.edge.registry.labeled(account_id, member.get("labels") or {})
        return []

    def _serve(
        self, account_id: str, backend: Optional[Dict[str, Any]]
    ) -> Tuple[Any, Optional[Dict[str, Any]]]:
        """(labeled tunnel, None) or (None, http_response backend) or (None, None)."""
        if backend is None:
            return None, None
        kind = backend.get("kind")
        if kind == "http_response":
            return None, backend
        if kind == "static":  # the edge forwards to the address itself (edge/static.py)
            return static.StaticTarget(self.edge, backend), None
        if kind == "tunnel_group":
            return self.edge.registry.pick(self._candidates(account_id, backend)), None
        if kind == "failover":
            for member in backend.get("backends") or []:
                tunnel, fixed = self._serve(account_id, member)
                if tunnel is not None or fixed is not None:
                    return tunnel, fixed
            return None, None
        if kind == "weighted":
            able = [
                (m["weight"], m["backend"])
                for m in backend.get("backends") or []
                if m.get("weight", 0) > 0
                and (
                    m["backend"].get("kind") in ("http_response", "static")
                    or self._candidates(account_id, m["backend"])
                )
            ]
            if not able:
                return None, None
            weights, members = zip(*able)
            return self._serve(account_id, random.choices(members, weights=weights)[0])
        return None, None

    # ---- cloud and internal endpoints -------------------------------------------------------
    async def _cloud(self, name: str) -> Optional[Dict[str, Any]]:
        return await self._cache.get(
            ("cloud", name), lambda: self.edge.call(online.cloud_endpoint_for, name)
        )

    async def _cloud_routed(self, cloud: Dict[str, Any]) -> Routed:
        routed = Routed(
            endpoint_id=cloud["id"],
            url=cloud["url"],
            host=cloud["host"],
            account_id=cloud["account_id"],
            cloud=True,
        )
        text = cloud.get("traffic_policy") or ""
        try:
            if text:
                phases = enforce.parse_document(text)
                routed.enforcement = await self._cache.get(
                    ("policy", cloud["id"], text), lambda: _compiled(phases)
                )
        except Exception as exc:  # a stored policy the engine now refuses: fail closed
            routed.error = (
                502,
                edge_errors.INVALID_TRAFFIC_POLICY,
                f"The endpoint's traffic policy cannot be applied: {str(exc)[:200]}",
            )
        return routed

    async def cloud(self, name: str) -> Optional[Dict[str, Any]]:
        """The cloud endpoint holding ``name``'s claim (its copy; cached CACHE_SECONDS), or
        None."""
        return await self._cloud(name)

    def https_edge_now(
        self, host: str
    ) -> Tuple[bool, Optional[Tuple[Dict[str, Any], List[Dict[str, Any]]]]]:
        """(whether :meth:`https_edge_for` has ``host``'s answer kept now, that answer): no
        load, no wait."""
        kept = self._cache.peek(("https", f"{host}:443"), _MISSING)
        return (False, None) if kept is _MISSING else (True, kept)

    def cloud_now(self, name: str) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """(whether :meth:`cloud` has ``name``'s answer kept now, that answer): no load, no
        wait."""
        kept = self._cache.peek(("cloud", name), _MISSING)
        return (False, None) if kept is _MISSING else (True, kept)

    async def cloud_routed(self, cloud: Dict[str, Any]) -> Routed:
        """Where a request to the cloud endpoint ``cloud`` (its claim's copy) goes: its
        compiled traffic policy (a pool's cloud member: edge.pools)."""
        return await self._cloud_routed(cloud)

    async def internal_target(
        self, account_id: str, url: str, protocol: str = "http"
    ) -> Optional[Routed]:
        """Where a ``forward-internal`` to ``url`` of an endpoint of ``account_id`` goes: the
        account's internal agent endpoint bound on this edge, else its internal cloud
        endpoint; None when there is none (offline), also for another account's. One of
        another protocol (``http`` for HTTP(S), ``tcp``) is a Routed with the hosted error
        ERR_NGROK_3502. A TCP endpoint is named by host and port: a URL whose explicit port
        is not the endpoint's finds nothing (offline)."""
        named = _internal_name(url)
        if named is None:
            return None
        host, port = named
        if (account_id, host) in self.edge.registry.internal:
            return self.internal_here(account_id, url, protocol)
        cloud = await self._cloud(online.claim_name(host, account_id))
        if cloud is None or cloud.get("account_id") != account_id or not cloud.get("internal"):
            return None
        routed = await self._cloud_routed(cloud)
        theirs = "tcp" if cloud.get("scheme") == "tcp" else "http"
        return _target_of(routed, theirs, url, port, protocol)

    def internal_here(self, account_id: str, url: str, protocol: str = "http") -> Optional[Routed]:
        """What :meth:`internal_target` finds without a wait: the account's internal agent
        endpoint bound on this edge; None when there is none here (or its port is not the
        URL's), or its session has ended (its agent gone before the registry dropped it: as a
        pool's member takes no turn then, the forward is offline rather than a stream that
        cannot open); only :meth:`internal_target` then says whether a cloud one is."""
        named = _internal_name(url)
        if named is None:
            return None
        host, port = named
        tunnel = self.edge.registry.internal.get((account_id, host))
        if tunnel is None or session_gone(tunnel.session):
            return None
        routed = Routed(
            endpoint_id=tunnel.endpoint_id or tunnel.id,
            url=tunnel.url,
            host=host,
            account_id=account_id,
            tunnel=tunnel,
            enforcement=tunnel.enforcement,
        )
        return _target_of(routed, "tcp" if tunnel.proto == "tcp" else "http", url, port, protocol)

    # ---- HTTPS edges ------------------------------------------------------------------------
    async def route_http(
        self, host: str, target: bytes, scheme: str, draw: bool = True
    ) -> Optional[Routed]:
        """Where a request of ``host`` for ``target`` goes: a cloud endpoint, or the route of
        the HTTPS edge serving the name, its modules' policy, and the tunnel or fixed answer
        its backend gives (drawn: a group's next member, a weighted choice); None when
        nothing serves the name. ``draw=False``: an edge's route is matched but its backend
        not drawn yet (:meth:`draw` draws it, once)."""
        if "@" not in host:  # an internal claim's name is never a public Host
            cloud = await self._cloud(host)
            if cloud is not None and not cloud.get("internal"):
                return await self._cloud_routed(cloud)
        found = await self._https_edge(f"{host}:443")
        if found is None:
            return None
        edge, routes = found
        url = f"https://{host}"
        path = target.split(b"?", 1)[0].decode("latin-1")
        route = match_route(routes, path)
        routed = Routed(endpoint_id=edge["id"], url=url, host=host, account_id=edge["account_id"])
        if route is None:
            routed.error = (
                404,
                edge_errors.ENDPOINT_OFFLINE,
                f"No route of the edge serving {url} matches {path[:200]}.",
            )
            return routed
        account_id = edge["account_id"]
        try:
            routed.enforcement = await self._enforcement(account_id, route["id"], route, "http")
        except Exception as exc:  # a stored policy the engine now refuses: fail closed
            routed.error = (
                502,
                edge_errors.INVALID_TRAFFIC_POLICY,
                f"The route's traffic policy cannot be applied: {str(exc)[:200]}",
            )
            return routed
        routed.ws_tcp = route_modules.converts_websockets(route)
        backend_module = route.get("backend")
        backend = None
        if _enabled(backend_module) and backend_module.get("backend_id"):
            backend = await self._backend(account_id, backend_module["backend_id"])
        routed.backend = backend
        if draw:
            self.draw(routed)
        return routed

    def draw(self, routed: Routed) -> None:
        """An edge's route's backend drawn for one request (:meth:`route_http`): its tunnel
        or fixed answer, or the edge's 502 when it has none now. Nothing for a cloud
        endpoint's answer or an error (no route, a policy refused), which have no backend."""
        if routed.cloud or routed.error is not None:
            return
        routed.tunnel, routed.fixed = self._serve(routed.account_id, routed.backend)
        if routed.tunnel is None and routed.fixed is None:
            code, msg = NO_BACKEND
            routed.error = (502, code, msg.format(url=routed.url))

    async def https_edge_for(
        self, host: str
    ) -> Optional[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
        """The HTTPS edge serving ``host`` and its routes (the cached read of
        :meth:`route_http`), or None (edge/group_spread.py: its designation)."""
        found = await self._https_edge(f"{host}:443")
        return found

    async def https_edge_parts(
        self, host: str
    ) -> Optional[List[Tuple[Dict[str, Any], Optional[Dict[str, Any]], Any, List[Any]]]]:
        """Each route of the HTTPS edge serving ``host`` as :meth:`route_http` reads it:
        (the route, its backend or None, its modules' compiled policy or None, the tunnels
        its backend may pick now: a failover's or weighted choice's groups' too); None when
        no edge serves the name. The same cached reads; a policy the engine refuses raises,
        as route_http fails on it."""
        found = await self._https_edge(f"{host}:443")
        if found is None:
            return None
        edge, routes = found
        account_id = edge["account_id"]
        parts = []
        for route in routes:
            enforcement = await self._enforcement(account_id, route["id"], route, "http")
            module = route.get("backend")
            backend = None
            if _enabled(module) and module.get("backend_id"):
                backend = await self._backend(account_id, module["backend_id"])
            members = [
                tunnel
                for labels in _group_labels(backend)
                for tunnel in self.edge.registry.labeled(account_id, labels)
            ]
            parts.append((route, backend, enforcement, members))
        return parts

    async def group_labels(
        self, host: str, target: Optional[bytes]
    ) -> Tuple[str, List[Dict[str, str]]]:
        """The account and the label sets of the tunnel-group backends that the route of the
        HTTPS edge serving ``host`` for request ``target`` may use (failover and weighted
        members included; ``target`` None: every route's), ("", []) when there are none.
        The same cached reads as :meth:`route_http` (edge/group_spread.py)."""
        found = await self._https_edge(f"{host}:443")
        if found is None:
            return "", []
        edge, routes = found
        account_id = edge["account_id"]
        if target is not None:
            route = match_route(routes, target.split(b"?", 1)[0].decode("latin-1"))
            routes = [route] if route is not None else []
        sets: List[Dict[str, str]] = []
        for route in routes:
            module = route.get("backend")
            if _enabled(module) and module.get("backend_id"):
                backend = await self._backend(account_id, module["backend_id"])
                sets.extend(_group_labels(backend))
        return account_id, sets

    # ---- TLS edges ---------------------------------------------------------------------------
    async def route_tls_edge(self, tls_edge: Dict[str, Any], name: str) -> Routed:
        """Where a connection whose SNI is ``name`` goes, on the TLS edge ``tls_edge`` (its
        copy, edge/tls.py): its modules as one on_tcp_connect policy (restrict-ips,
        terminate-tls, its traffic_policy's rules) and a labeled tunnel of its backend
        (``tunnel`` None: none online)."""
        account_id = tls_edge["account_id"]
        routed = Routed(
            endpoint_id=tls_edge["id"], url=f"tls://{name}", host=name, account_id=account_id
        )
        try:
            routed.enforcement = await self._enforcement(
                account_id, tls_edge["id"], tls_edge, "tls"
            )
        except Exception as exc:  # a stored policy the engine now refuses: fail closed
            routed.error = (
                502,
                edge_errors.INVALID_TRAFFIC_POLICY,
                f"The edge's traffic policy cannot be applied: {str(exc)[:200]}",
            )
            return routed
        routed.tunnel, _ = self._serve(account_id, await self._backend_of(account_id, tls_edge))
        return routed

    async def _backend_of(self, account_id: str, edge: Dict[str, Any]) -> Optional[Any]:
        """The backend a TCP or TLS edge's backend module names, or None (no module, or
        disabled)."""
        module = edge.get("backend")
        if not (_enabled(module) and module.get("backend_id")):
            return None
        return await self._backend(account_id, module["backend_id"])

    async def ca_pems(self, account_id: str, ca_ids: List[str]) -> Dict[str, str]:
        """CA id → PEM of the account's certificate authorities among ``ca_ids`` (cached
        CACHE_SECONDS: a deleted CA stops being trusted within that)."""
        return await self._cache.get(
            ("cas", account_id, tuple(sorted(ca_ids))),
            lambda: self.edge.call(certs.pems_by_id, account_id, sorted(ca_ids)),
        )

    # ---- TCP edges --------------------------------------------------------------------------
    async def tcp_group_labels(self, hostport: str) -> Tuple[str, List[Dict[str, str]]]:
        """The account and the label sets of the tunnel-group backends of the TCP edge on
        ``hostport`` (a reserved address), ("", []) when none, or when a cloud endpoint
        serves the address first (:meth:`route_tcp`'s order; edge/group_spread.py)."""
        cloud = await self._cloud(hostport)
        if cloud is not None and not cloud.get("internal"):
            return "", []
        edge = await self._tcp_edge(hostport)
        if edge is None:
            return "", []
        module = edge.get("backend")
        if not (_enabled(module) and module.get("backend_id")):
            return "", []
        backend = await self._backend(edge["account_id"], module["backend_id"])
        return edge["account_id"], _group_labels(backend)

    async def route_tcp(self, hostport: str) -> Optional[Routed]:
        cloud = await self._cloud(hostport)  # a cloud endpoint on the reserved address?
        if cloud is not None and not cloud.get("internal"):
            return await self._cloud_routed(cloud)
        edge = await self._tcp_edge(hostport)
        if edge is None:
            return None
        account_id = edge["account_id"]
        routed = Routed(
            endpoint_id=edge["id"], url=f"tcp://{hostport}", host=hostport, account_id=account_id
        )
        routed.enforcement = await self._enforcement(account_id, edge["id"], edge, "tcp")
        routed.tunnel, _ = self._serve(account_id, await self._backend_of(account_id, edge))
        return routed


def terminate_tls_action(modules: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The terminate-tls action a TLS edge's tls_termination (enabled, at the edge) and
    mutual_tls modules stand for, or None (passthrough). min_version "1.0" and "1.1" (which
    the API accepts, as the hosted one does) mean TLS 1.2, as on HTTPS edges."""
    termination = modules.get("tls_termination")
    if not _enabled(termination) or termination.get("terminate_at", "edge") != "edge":
        return None
    config: Dict[str, Any] = {}
    version = termination.get("min_version")
    if version:
        config["min_version"] = "1.3" if version == "1.3" else "1.2"
    mtls = modules.get("mutual_tls")
    if _enabled(mtls) and mtls.get("certificate_authority_ids"):
        config["mutual_tls_certificate_authorities"] = list(mtls["certificate_authority_ids"])
    return {"type": "terminate-tls", "config": config}


def match_route(routes: List[Dict[str, Any]], path: str) -> Optional[Dict[str, Any]]:
    """The route of ``routes`` (in the order routing returns them) that serves ``path``."""
    for candidate in routes:
        match = candidate.get("match") or ""
        if (
            candidate.get("match_type") == "exact_path"
            and path == match
            or candidate.get("match_type") == "path_prefix"
            and path.startswith(match)
        ):
            return candidate
    return None


def _group_labels(backend: Optional[Dict[str, Any]]) -> List[Dict[str, str]]:
    if not backend:
        return []
    kind = backend.get("kind")
    if kind == "tunnel_group":
        return [dict(backend.get("labels") or {})]
    members = backend.get("backends") or []
    if kind == "failover":
        return [labels for m in members for labels in _group_labels(m)]
    if kind == "weighted":
        return [labels for m in members for labels in _group_labels(m.get("backend"))]
    return []


async def _compiled(phases: Dict[str, Any]) -> Any:
    return enforce.compile_document(phases)


async def watch_reserved_ports(edge: Any, interval: float = 2.0) -> None:
    """Keep a listener on every reserved TCP address's port of this edge's range (TCP edges),
    and in a cluster on every generated TCP port another instance holds (its connections are
    relayed to the holder, edge/cluster.py), renewing the entries of this instance's own."""
    while True:
        try:
            claimed = await edge.call(reservations.addr_claims)
            low, high = edge.settings.tcp_ports
            edge.reserved_ports = {port for port in claimed if low <= port <= high}
            if edge.cluster is not None:
                generated = await edge.call(online.generated_ports)
                edge.cluster_ports = {port for port in generated if low <= port <= high}
                await _renew_generated(edge, generated)
            for port in edge.reserved_ports | edge.cluster_ports:
                try:
                    await edge.binds.ensure_port_listener(port)
                except OSError as exc:
                    edge.log.warning("cannot listen on reserved port %d: %s", port, exc)
            for port in list(edge.port_listeners):
                edge.binds.release_port(port)  # no longer reserved, and no agent endpoint on it
        except Exception as exc:  # the store being away must not stop the loop
            edge.log.warning("could not read reserved TCP addresses: %r", exc)
        await asyncio.sleep(interval)


async def _renew_generated(edge: Any, listed: Dict[int, Dict[str, Any]]) -> None:
    """This instance's generated TCP ports: an entry missing (written before a store outage,
    or expired) is written again, one past half its life renewed (a PutItem each)."""
    here = edge.settings.instance_id
    half = online.GENERATED_PORT_SECONDS / 2
    for port, tunnel in list(edge.registry.by_port.items()):
        if not getattr(tunnel, "generated", False):
            continue
        entry = listed.get(port)
        if entry is not None and (
            entry["instance_id"] != here or entry["expires_at"] - online.now() > half
        ):
            continue  # fresh, or another instance's re-bind took the port over
        await edge.call(online.generated_port_opened, port, tunnel.account_id, here)


async def watch_banned_hosts(edge: Any, interval: float = 2.0) -> None:
    """Keep ``edge.banned`` (hostnames an abuse report bans) fresh: their traffic and binds
    are refused within ``interval`` + one store read of the operator's BANNED."""
    while True:
        try:
            edge.banned = frozenset(await edge.call(abuse.banned_hosts))
        except Exception as exc:  # the store being away must not stop the loop
            edge.log.warning("could not read banned hostnames: %r", exc)
        await asyncio.sleep(interval)
