"""What this edge instance serves right now: sessions, and tunnels by hostname, port and id.

Process memory holds only what this instance itself serves (its own sessions' tunnels); the
service-wide facts (which endpoint owns a hostname, which sessions are online) are items in
the table (chalicelib.core.online), so a second instance never needs this one's memory: a public
connection reaching an instance that does not hold the endpoint would be forwarded to the
instance named by the hostname's claim (docs/DEPLOY.md).
"""

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple


@dataclass
class Tunnel:
    """One bound endpoint (``hostname``/``port``) or labeled tunnel (``labels``)."""

    id: str  # what the agent knows it by (Bind reply Id, proxy header Id)
    session: Any  # edge.agents.AgentSession
    proto: str  # http, https, tcp, or "" for labeled tunnels
    url: str = ""
    hostname: str = ""
    port: int = 0
    endpoint_id: Optional[str] = None
    labels: Dict[str, str] = field(default_factory=dict)
    opts: Dict[str, Any] = field(default_factory=dict)
    forwards_to: str = ""
    forwards_proto: str = ""  # the Bind's ForwardsProto (SDK app_protocol): "http2" or ""
    metadata: str = ""
    description: str = ""  # the Bind's Extra.Description (ngrok-go v2), the endpoint's
    enforcement: Any = None  # what the edge applies to this endpoint's traffic
    tls: Any = None  # edge.tls_spec.TlsSpec of its MutualTLSCA option, or None
    internal: bool = False  # https://<name>.internal: reached only by forward-internal
    rebind: bool = False  # bound with the id it had before (an agent's reconnect)
    generated: bool = False  # its name or port was chosen by the edge, not asked for
    # The http and the https endpoint of one name bound by one session (the CLI 2.x's
    # -bind-tls=both): one owner. The first bound holds the name's claim; each listener
    # routes to the endpoint of its own scheme (http_tunnel).
    sibling: Optional["Tunnel"] = None
    holds_claim: bool = True
    scheme_only: bool = False  # served on its own scheme's listener only (CLI 2.x binds)
    # Endpoint pooling (the Bind's PoolingEnabled): endpoints of one account bound with it on
    # one URL share its traffic (round robin); ``pool`` is the list they all share, its first
    # member holds the name's claim (edge.pools).
    pooled: bool = False
    pool: Optional[List["Tunnel"]] = None
    proxy_proto: int = 0  # PROXY protocol version written towards the agent (0: none)
    breaker: Any = None  # edge.breaker.Breaker of its CircuitBreaker option
    ws_tcp: bool = False  # WebsocketTCPConverter: edge.wstcp
    termination: Any = None  # a TLS endpoint's TLSTermination (edge.passthrough)

    @property
    def account_id(self) -> str:
        return self.session.grant.account_id


def session_gone(session: Any) -> bool:
    """Whether ``session`` (an agent's, an SSH client's) has ended, or its connection closed
    before the edge heard of it."""
    return bool(
        getattr(session, "ended", False) or getattr(getattr(session, "mux", None), "closed", False)
    )


class Registry:
    def __init__(self) -> None:
        self.sessions: Dict[str, Any] = {}
        self.by_id: Dict[str, Tunnel] = {}
        self.by_host: Dict[str, Tunnel] = {}
        self.by_port: Dict[int, Tunnel] = {}
        # internal endpoints by (account, name): never found by a public Host
        self.internal: Dict[Tuple[str, str], Tunnel] = {}
        self._rr = itertools.count()
        # told of each hostname whose routing may have changed (edge/fast_path.py)
        self.on_change: Optional[Callable[[str], None]] = None
        # told of each internal endpoint (its account, its hostname) that came, went or changed
        # (what a forward-internal reaches: edge/fast_path.py drops decisions naming one)
        self.on_internal: Optional[Callable[[str, str], None]] = None

    def changed(self, hostname: str) -> None:
        """``hostname``'s endpoint, or what applies to it, changed."""
        if self.on_change is not None and hostname:
            self.on_change(hostname)

    def tunnel_changed(self, tunnel: Tunnel) -> None:
        """What applies to ``tunnel`` changed (its traffic policy): its name's routing, or for
        an internal endpoint, what forward-internals of its account reach."""
        if tunnel.internal:
            if self.on_internal is not None:
                self.on_internal(tunnel.account_id, tunnel.hostname)
        else:
            self.changed(tunnel.hostname)

    def add(self, tunnel: Tunnel) -> None:
        self.by_id[tunnel.id] = tunnel
        if tunnel.internal:
            self.internal[(tunnel.account_id, tunnel.hostname)] = tunnel
        elif tunnel.hostname:
            held = self.by_host.get(tunnel.hostname)
            if (
                held is None
                or held is not tunnel.sibling
                and not (tunnel.pool and held in tunnel.pool)
            ):  # the claim holder stays first
                self.by_host[tunnel.hostname] = tunnel
        if tunnel.port:
            self.by_port[tunnel.port] = tunnel
        self.tunnel_changed(tunnel)

    def remove(self, tunnel: Tunnel) -> None:
        if self.by_id.get(tunnel.id) is tunnel:
            del self.by_id[tunnel.id]
        if tunnel.internal:
            if self.internal.get((tunnel.account_id, tunnel.hostname)) is tunnel:
                del self.internal[(tunnel.account_id, tunnel.hostname)]
        elif tunnel.hostname and self.by_host.get(tunnel.hostname) is tunnel:
            heirs = [t for t in tunnel.pool or () if t is not tunnel]
            if heirs:  # the pool keeps the name
                self.by_host[tunnel.hostname] = heirs[0]
            elif tunnel.sibling is not None:  # the other scheme's endpoint keeps the name
                self.by_host[tunnel.hostname] = tunnel.sibling
            else:
                del self.by_host[tunnel.hostname]
        if tunnel.sibling is not None:
            tunnel.sibling.sibling = None
            tunnel.sibling = None
        if tunnel.pool is not None:
            if tunnel in tunnel.pool:
                tunnel.pool.remove(tunnel)
            tunnel.pool = None
        if tunnel.port and self.by_port.get(tunnel.port) is tunnel:
            del self.by_port[tunnel.port]
        self.tunnel_changed(tunnel)

    def http_tunnel(self, hostname: str, scheme: str = "") -> Optional[Tunnel]:
        """The endpoint serving ``hostname``; with ``scheme`` (the listener's), the one of
        that scheme when the name has an http and an https endpoint, and none when the only
        one is ``scheme_only`` of the other scheme."""
        tunnel = self.by_host.get(hostname)
        if tunnel is not None and tunnel.proto == "tls":  # no HTTP: edge.passthrough
            return None
        if tunnel is not None and tunnel.pool and scheme:  # routing a connection: its turn
            tunnel = self.pick(tunnel.pool)
        if tunnel is None or not scheme or tunnel.proto == scheme:
            return tunnel
        if tunnel.sibling is not None:
            return tunnel.sibling
        return None if tunnel.scheme_only else tunnel

    def labeled(self, account_id: str, labels: Dict[str, str]) -> List[Tunnel]:
        """Live labeled tunnels of the account carrying every label of ``labels``."""
        return [
            t
            for t in self.by_id.values()
            if t.labels
            and t.account_id == account_id
            and all(t.labels.get(k) == v for k, v in labels.items())
        ]

    def pick(self, tunnels: List[Tunnel]) -> Optional[Tunnel]:
        """Spread connections across ``tunnels`` (round robin), passing over a tunnel whose
        session has ended (its agent gone before the registry dropped it: its requests would
        be answered 502) while another is live."""
        if not tunnels:
            return None
        live = [t for t in tunnels if not session_gone(t.session)] or tunnels
        return live[next(self._rr) % len(live)]
