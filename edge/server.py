"""The edge process: listeners, the binds they serve, and the loop that keeps sessions honest.

Store calls (PynamoDB, blocking) run in worker threads (:meth:`Edge.call`) so a slow store
never stalls traffic. Every few seconds (EDGE_CHECK_SECONDS) each session re-reads its
credential (deleted credential, deleted owner or deactivated bot: the session is closed with
the refusal's code), refreshes its online item and acts on a stop/restart asked through the
API; so revocation takes effect within EDGE_CHECK_SECONDS + one store round trip.
"""

import asyncio
import functools
import socket
import weakref
import logging
from typing import Any, Callable, Dict, List, Optional

from chalicelib.core import binding, errors, hostnames, online, policy as tp
from edge import agents, cluster, config, h2front, legacy, metrics, pools, quotas, tls
from edge import observe  # traffic events (edge/events.py)
from edge.admission import Admission
from edge.certs import ServerCertificates
from edge.connections import connection_handler
from edge.edges import EdgeRouter, Hop, forward_refused, watch_banned_hosts, watch_reserved_ports
from edge.http_routing import BANNED
from edge.http_io import splice
from edge.public import HttpFront
from edge.registry import Registry, Tunnel
from edge.session import StreamReset
from chalicelib.core import edge_errors

log = logging.getLogger("edge")

MAX_GENERATE_ATTEMPTS = 8
MAX_UNAUTHENTICATED_PER_ADDRESS = 16  # agent connections not yet authenticated, per address
MAX_UNAUTHENTICATED = 512  # ... and in total
HEARTBEAT_EVERY = 3  # online items refreshed every 3 checks (15 s by default; stale after 45)


class Edge:
    def __init__(self, settings: config.EdgeSettings):
        self.settings = settings
        self.registry = Registry()
        self.certs = ServerCertificates(
            settings.data_dir, settings.tls_cert or None, settings.tls_key or None
        )
        self._servers: List[asyncio.Server] = []  # (Server: its sockets are read)
        self._sessions: set = set()
        self.auth_throttle = quotas.AuthThrottle(settings.limits.failed_auths_per_address)
        self.admission = Admission(
            settings.max_connections,  # public connections: caps
            settings.max_connections_per_address,
        )
        self._unauthenticated: Dict[str, int] = {}  # address -> connections not yet authed
        self._counted: "weakref.WeakSet[Any]" = weakref.WeakSet()  # sessions no longer counted
        self.connections: set = set()  # tasks of open connections (agents, public)
        self.port_listeners: dict = {}  # TCP port -> its listener (agent endpoints, TCP edges)
        self.reserved_ports: set = set()  # ports of reserved addresses (TCP edges), kept fresh
        self.banned: frozenset = frozenset()  # hostnames an abuse report bans, kept fresh
        self.router = EdgeRouter(self)
        self.tls = tls.TlsSettings(self)  # what each name asks of the HTTPS handshake
        self.log = log
        self._checker: Optional[asyncio.Task] = None
        self.agent_port = settings.agent_port
        self.http_port = settings.http_port
        self.https_port = settings.https_port
        self.metrics_port: Optional[int] = None
        cluster_settings = cluster.ClusterSettings.from_env()  # EDGE_CLUSTER_SECRET set
        self.cluster = cluster.Cluster(self, cluster_settings) if cluster_settings else None

    @property
    def sessions(self) -> set:
        """The agent sessions of this instance (authenticated or not yet)."""
        return self._sessions

    async def call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking store function in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(func, *args, **kwargs)
        )

    # ---- start / stop -----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        agent_ctx = self.certs.context_for(s.agent_hostnames)
        if self.cluster is not None:  # the registry item and the relay listener
            await self.cluster.start()
        self._servers.append(
            await asyncio.start_server(
                self._agent_connection,
                ssl=agent_ctx,
                ssl_handshake_timeout=15,
                **self._where("agent", s.agent_port),
            )
        )
        http_handle = HttpFront(self, "http").handle
        https_handle = h2front.https_handler(  # h2 by ALPN, else HTTP/1.1
            self, HttpFront(self, "https").handle
        )
        if self.cluster is not None:  # a connection for another instance's endpoint: relayed
            http_handle = functools.partial(self.cluster.http, http_handle, "http")
            https_handle = functools.partial(self.cluster.https, https_handle)
        self._servers.append(
            await asyncio.start_server(http_handle, **self._where("http", s.http_port))
        )
        https = tls.HttpsListener(self, https_handle, [s.base_domain], self._serves_name)
        self._servers.append(
            await asyncio.get_running_loop().create_server(
                https.protocol, **self._where("https", s.https_port)
            )
        )
        self.agent_port, self.http_port, self.https_port = (
            srv.sockets[0].getsockname()[1] for srv in self._servers[:3]
        )
        if s.metrics_port is not None:
            self._servers.append(await metrics.start(self, s.host, s.metrics_port))
            self.metrics_port = self._servers[-1].sockets[0].getsockname()[1]
        self._checker = asyncio.ensure_future(self._check_loop())
        self._watcher = asyncio.ensure_future(watch_reserved_ports(self))
        self._tls_watcher = asyncio.ensure_future(self.tls.watch())
        self._ban_watcher = asyncio.ensure_future(watch_banned_hosts(self))

    def _where(self, name: str, port: int) -> dict:
        """Where a listener listens: the socket a supervisor handed over (EDGE_LISTEN_FDS,
        kept open across a restart of this process), else host and port."""
        fd = self.settings.listen_fds.get(name)
        if fd is None:
            return {"host": self.settings.host, "port": port}
        return {"sock": socket.socket(fileno=fd)}

    def _serves_name(self, name: str) -> bool:
        """Which SNI names get a certificate from the local CA: any well-formed host name
        (agent endpoints, cloud endpoints and HTTPS edges alike: a cloud endpoint's host or
        an edge's hostport is only known after a
        store read, which a TLS handshake callback cannot wait for). Issued certificates are
        cached (1024 names, LRU); with EDGE_TLS_CERT one certificate serves every name."""
        try:
            hostnames.parse(name, min_labels=2)
            return True
        except hostnames.InvalidHostname:
            return False

    async def stop(self) -> None:
        """Stop accepting, end every session (GOAWAY, online items removed), then cancel the
        connections still open."""
        for server in self._servers:
            server.close()
        if self._checker is not None:
            self._checker.cancel()
            self._watcher.cancel()
            self._tls_watcher.cancel()
            self._ban_watcher.cancel()
        for server in self.port_listeners.values():
            server.close()
        if self.cluster is not None:  # drain: agents asked to reconnect when idle
            await self.cluster.drain_sessions()
            await self.cluster.stop()
        await asyncio.gather(
            *(s.end("the edge is shutting down") for s in list(self._sessions)),
            return_exceptions=True,
        )
        pending = [t for t in self.connections if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # ---- agent sessions ---------------------------------------------------------------------
    @connection_handler
    async def _agent_connection(self, reader, writer) -> None:
        """One agent connection. Until it authenticates it counts against
        MAX_UNAUTHENTICATED_PER_ADDRESS and MAX_UNAUTHENTICATED (closed at once beyond them),
        and edge.session bounds what it may send (PRE_AUTH_STREAMS, PRE_AUTH_BYTES)."""
        ip = str((writer.get_extra_info("peername") or ("",))[0])
        if (
            self._unauthenticated.get(ip, 0) >= MAX_UNAUTHENTICATED_PER_ADDRESS
            or sum(self._unauthenticated.values()) >= MAX_UNAUTHENTICATED
        ):
            log.info("agent connection from %s refused: too many unauthenticated", ip)
            writer.close()
            return
        self._unauthenticated[ip] = self._unauthenticated.get(ip, 0) + 1
        session = agents.AgentSession(self, reader, writer)
        self._sessions.add(session)
        try:
            await session.run()
        finally:
            self._sessions.discard(session)
            self.authenticated(session)

    def authenticated(self, session: "agents.AgentSession") -> None:
        """``session`` no longer counts as unauthenticated (it authenticated, or it ended)."""
        if session in self._counted:
            return
        self._counted.add(session)
        ip = session.peer_ip
        left = self._unauthenticated.get(ip, 0) - 1
        if left > 0:
            self._unauthenticated[ip] = left
        else:
            self._unauthenticated.pop(ip, None)

    async def _check_loop(self) -> None:
        """Every check: each credential in use is re-read once (however many sessions share
        it); each session refreshes its online item every HEARTBEAT_EVERY checks."""
        round_no = 0
        while True:
            await asyncio.sleep(self.settings.check_seconds)
            round_no += 1
            sessions = [s for s in self._sessions if not s.ended]
            grants: Dict[str, binding.Grant] = {}
            for session in sessions:
                if session.grant is not None:
                    grants.setdefault(session.grant.credential_id, session.grant)
            fresh = dict(
                zip(grants, await asyncio.gather(*(self._recheck(g) for g in grants.values())))
            )
            results = await asyncio.gather(
                *(
                    s.check(
                        fresh.get(s.grant.credential_id) if s.grant else None,
                        heartbeat=round_no % HEARTBEAT_EVERY == 0,
                    )
                    for s in sessions
                ),
                return_exceptions=True,
            )
            for session, result in zip(sessions, results):
                if isinstance(result, Exception):
                    log.warning("session check failed for %s: %r", session.id, result)

    async def _recheck(self, grant: binding.Grant) -> Any:
        """The grant read afresh, the Refused that ends its sessions, or None when the store
        could not be read (the sessions keep running; the next round tries again)."""
        try:
            return await self.call(
                binding.recheck,
                grant.account_id,
                grant.credential_id,
                grant.owner_id,
                grant.owner_kind,
            )
        except binding.Refused as exc:
            return exc
        except Exception as exc:
            log.warning("could not re-check credential %s: %r", grant.credential_id, exc)
            return None

    # ---- binds ------------------------------------------------------------------------------
    async def _claim(self, tunnel: Tunnel, name: str) -> None:
        try:
            await self.call(
                online.claim_hostname,
                name,
                account_id=tunnel.account_id,
                endpoint_id=tunnel.endpoint_id,
                instance_id=self.settings.instance_id,
            )
        except errors.Conflict:
            raise binding.Refused(
                edge_errors.ENDPOINT_IN_USE,
                f"The endpoint '{name}' is already online. "
                "Stop the agent serving it first, or use "
                "another name.",
            ) from None

    async def _take_over(self, tunnel: Tunnel) -> None:
        """A re-bind of a tunnel id another (stale) session of this instance still holds."""
        held = self.registry.by_id.get(tunnel.id)
        if held is not None and held.session is not tunnel.session:
            held.session.tunnels.pop(held.id, None)
            self.registry.remove(held)

    async def bind_http(self, tunnel: Tunnel, requested: str) -> None:
        grant = tunnel.session.grant
        await self._take_over(tunnel)
        if requested.lower().endswith(online.INTERNAL_SUFFIX):
            await self._bind_internal(tunnel, requested)
            return
        sibling = None  # the other scheme's endpoint of this name, this session (edge.legacy)
        if requested:
            name = await self.call(binding.check_domain, grant, requested)
            if name in self.banned:
                raise binding.Refused(*BANNED)
            sibling = legacy.sibling_for(tunnel, self.registry, name)
            if sibling is None and pools.join(self.registry, tunnel, name) is None:
                try:
                    await self._claim(tunnel, name)
                except binding.Refused as exc:
                    raise pools.refusal(exc, tunnel, self.registry.by_host.get(name), name)
        elif (sibling := legacy.generated_partner(tunnel)) is not None:
            name, tunnel.generated = sibling.hostname, True
        elif (name := await self._remembered(tunnel)) is not None:
            pass
        else:
            tunnel.generated = True
            for attempt in range(MAX_GENERATE_ATTEMPTS):
                name = binding.generated_domain()
                if not binding.acl_allows_domain(grant, name):
                    raise binding.Refused(
                        edge_errors.ACL_REFUSED,
                        "The credential ACL policy does not permit binding a "
                        f"generated name under {self.settings.base_domain}; ask for a domain "
                        "the ACL allows.",
                    )
                try:
                    await self._claim(tunnel, name)
                    break
                except binding.Refused:
                    if attempt == MAX_GENERATE_ATTEMPTS - 1:
                        raise
        if sibling is not None:
            legacy.pair(tunnel, sibling)
        tunnel.hostname = name
        scheme = "http" if tunnel.proto == "http" else "https"
        tunnel.url = self.settings.http_url(name, scheme)
        if tunnel.proto == "tls":  # served on the HTTPS listener (edge.passthrough)
            tunnel.url = "tls" + tunnel.url[len("https") :]
        self.registry.add(tunnel)
        await self._online(tunnel)

    async def _remembered(self, tunnel: Tunnel) -> Optional[str]:
        """A re-bind (same tunnel id, no name asked) after the agent's session dropped: the
        generated name it had, claimed again if the ACL still allows it and no one took it
        meanwhile; None otherwise (a new name is generated)."""
        if not tunnel.rebind:
            return None
        name = await self.call(online.remembered_name, tunnel.account_id, tunnel.id)
        if (
            not name
            or ":" in name
            or name in self.banned
            or not binding.acl_allows_domain(tunnel.session.grant, name)
        ):
            return None
        try:
            await self._claim(tunnel, name)
        except binding.Refused:
            return None
        tunnel.generated = True
        return name

    async def _remembered_port(self, tunnel: Tunnel) -> Optional[int]:
        if not tunnel.rebind:
            return None
        name = await self.call(online.remembered_name, tunnel.account_id, tunnel.id)
        host, _, port = (name or "").rpartition(":")
        return int(port) if host == self.settings.tcp_host and port.isdigit() else None

    async def _bind_internal(
        self, tunnel: Tunnel, requested: str, port: Optional[int] = None
    ) -> None:
        """An internal endpoint (``https://<name>.internal``): any well-formed name, no
        reservation (hosted rule; ``tcp://<name>.internal:<port>`` for TCP, no listener);
        namespaced per account (its claim is ``<name>@<account>``,
        chalicelib.core.online.claim_name); reachable only through a ``forward-internal`` action
        of an endpoint of the same account, never from the public listeners."""
        try:
            name = hostnames.parse(requested, min_labels=2)
        except hostnames.InvalidHostname as exc:
            raise binding.Refused(
                edge_errors.INVALID_OPTION, f"Invalid domain '{requested}': {exc}"
            ) from None
        if not binding.acl_allows_domain(tunnel.session.grant, name):
            raise binding.Refused(
                edge_errors.ACL_REFUSED,
                f"The credential ACL policy does not permit binding this domain: {name}",
            )
        tunnel.internal = True
        tunnel.hostname = name
        await self._claim(tunnel, online.claim_name(name, tunnel.account_id))
        if tunnel.proto == "tcp":
            tunnel.url = f"tcp://{name}:{port}"
        else:
            tunnel.url = f"{'http' if tunnel.proto == 'http' else 'https'}://{name}"
        self.registry.add(tunnel)
        await self._online(tunnel)

    async def bind_tcp(self, tunnel: Tunnel, requested: str) -> None:
        """A TCP endpoint: the requested address (``host:port`` of this edge's range; when
        someone reserved it, only its account may bind it) or a free port no one reserved."""
        grant = tunnel.session.grant
        host = self.settings.tcp_host
        await self._take_over(tunnel)
        low, high = self.settings.tcp_ports
        want_host, _, port_text = requested.rpartition(":")
        if want_host.lower().endswith(online.INTERNAL_SUFFIX):
            if (
                not (port_text.isascii() and port_text.isdigit())
                or not 1 <= int(port_text) <= 65535
            ):
                raise binding.Refused(
                    edge_errors.INVALID_OPTION,
                    f"An internal TCP endpoint needs "
                    f"<name>.internal:<port>, got "
                    f"'{requested[:300]}'.",
                )
            await self._bind_internal(tunnel, want_host, int(port_text))
            return
        if requested:
            if (
                not port_text.isdigit()
                or not low <= int(port_text) <= high
                or want_host.lower() not in (host, "")
            ):
                raise binding.Refused(
                    edge_errors.ADDRESS_NOT_RESERVED, f"The address {requested} is not reserved."
                )
            candidates = [int(port_text)]
        else:
            tunnel.generated = True
            candidates = [
                p
                for p in range(low, high + 1)
                if p not in self.registry.by_port and p not in self.reserved_ports
            ]
            before = await self._remembered_port(tunnel)
            if before in candidates:  # a reconnect: the port it had first, if still free
                candidates.remove(before)
                candidates.insert(0, before)
        for port in candidates:
            address = f"{host}:{port}"
            try:
                await self.call(binding.check_address, grant, address, bool(requested))
            except binding.Refused:
                if requested:
                    raise
                continue  # reserved since the edge last read the reservations: not free
            try:
                await self._claim(tunnel, address)
            except binding.Refused:
                if requested:
                    raise
                continue
            try:
                await self.ensure_port_listener(port)
            except OSError:
                await self.call(online.release_hostname, address, endpoint_id=tunnel.endpoint_id)
                if requested:
                    raise binding.Refused(
                        edge_errors.ENDPOINT_IN_USE, f"The address {address} is in use."
                    ) from None
                continue
            tunnel.port = port
            tunnel.url = f"tcp://{address}"
            self.registry.add(tunnel)
            await self._online(tunnel)
            return
        raise binding.Refused(
            edge_errors.ENDPOINT_IN_USE, "No TCP port is free in this edge's range."
        )

    async def ensure_port_listener(self, port: int) -> None:
        """One listener per TCP port, shared by an agent's TCP endpoint and a TCP edge's
        reserved address (OSError when the port cannot be bound)."""
        if port not in self.port_listeners:
            self.port_listeners[port] = await asyncio.start_server(
                functools.partial(self.port_connection, port),
                self.settings.host,
                port,
                reuse_port=self.cluster is not None,
            )  # every instance: edge.cluster

    def release_port(self, port: int) -> None:
        if port in self.reserved_ports or port in self.registry.by_port:
            return
        server = self.port_listeners.pop(port, None)
        if server is not None:
            server.close()

    async def add_labeled(self, tunnel: Tunnel) -> None:
        self.registry.add(tunnel)
        await self._online(tunnel)

    async def _online(self, tunnel: Tunnel) -> None:
        if tunnel.generated:  # kept for a re-bind even if this process dies (kill -9)
            await self.call(
                online.remember_name,
                tunnel.account_id,
                tunnel.id,
                tunnel.hostname or f"{self.settings.tcp_host}:{tunnel.port}",
            )
        await self.call(
            online.tunnel_started,
            account_id=tunnel.account_id,
            session_id=tunnel.session.id,
            tunnel_id=tunnel.id,
            instance_id=self.settings.instance_id,
            proto=tunnel.proto,
            public_url=tunnel.url or None,
            hostname=tunnel.hostname or None,
            port=tunnel.port or None,
            labels=tunnel.labels or None,
            forwards_to=tunnel.forwards_to,
            metadata=tunnel.metadata,
            endpoint_id=tunnel.endpoint_id if tunnel.url else None,
            traffic_policy=str(tunnel.opts.get("TrafficPolicy") or ""),
            pooling_enabled=tunnel.pooled,
            bindings=["internal"] if tunnel.internal else ["public"],
        )

    async def drop_tunnel(self, tunnel: Tunnel, remember: bool = False) -> None:
        """Stop serving a tunnel: registry, listener, claim and online items. ``remember``
        (its session ended, the agent may reconnect): a generated name or port is kept for
        the re-bind of the same tunnel id (chalicelib.core.online.remember_name)."""
        if self.registry.by_id.get(tunnel.id) is not tunnel:
            return  # already taken over by a reconnect
        partner = tunnel.sibling or next(
            (t for t in tunnel.pool or () if t is not tunnel), None
        )  # who keeps serving the name (its claim)
        self.registry.remove(tunnel)
        if tunnel.port:
            self.release_port(tunnel.port)
        name = (
            online.claim_name(tunnel.hostname, tunnel.account_id)
            if tunnel.hostname
            else f"{self.settings.tcp_host}:{tunnel.port}"
            if tunnel.port
            else ""
        )
        try:
            if remember and tunnel.generated and (tunnel.hostname or tunnel.port):
                await self.call(
                    online.remember_name,
                    tunnel.account_id,
                    tunnel.id,
                    tunnel.hostname or f"{self.settings.tcp_host}:{tunnel.port}",
                )
            if remember and self.cluster is not None and self.cluster.keep_claims():
                return  # draining: the agent's re-bind elsewhere takes its items over
            if name and tunnel.holds_claim:
                await self.call(online.release_hostname, name, endpoint_id=tunnel.endpoint_id)
            await self.call(online.tunnel_stopped, tunnel.account_id, tunnel.id)
            if partner is not None and tunnel.holds_claim and not partner.session.ended:
                partner.holds_claim = True  # the other scheme's endpoint keeps serving it
                await self._claim(partner, name)
        except Exception:  # the store being down must not keep a dead tunnel routed
            log.exception("could not record that tunnel %s stopped", tunnel.id)

    # ---- TCP endpoints ----------------------------------------------------------------------
    @connection_handler
    async def port_connection(self, port: int, reader, writer) -> None:
        """A connection to a TCP port: the agent endpoint bound on it, else the TCP edge of
        its reserved address; its on_tcp_connect rules first, then raw bytes to the agent."""
        peer = writer.get_extra_info("peername") or ("", 0)
        ticket = self.admission.admit(str(peer[0]), writer.transport)  # busy: never evicted
        if ticket is None:
            writer.transport.abort()
            return
        counted = observe.counting(reader, writer)  # bytes, for tcp_connection_closed.v0
        reader, writer, endpoint, cloud, state = counted.reader, counted.writer, None, False, None
        try:
            tunnel = self.registry.by_port.get(port)
            enforcement = tunnel.enforcement if tunnel is not None else None
            endpoint = Hop.of_tunnel(tunnel) if tunnel else Hop("", "", "", "")
            account_id = endpoint.account_id
            cloud = False
            if (
                tunnel is None
                and self.cluster is not None
                and await self.cluster.tcp(port, reader, writer)
            ):  # another instance's
                return
            if tunnel is None:  # a cloud endpoint's or a TCP edge's reserved address?
                routed = await self.router.route_tcp(f"{self.settings.tcp_host}:{port}")
                if routed is None or routed.error is not None:
                    return
                tunnel, enforcement = routed.tunnel, routed.enforcement
                endpoint = routed.hop
                cloud, account_id = routed.cloud, routed.account_id
            forwards = 0
            while enforcement is not None and enforcement.policy is not None:
                sock = writer.get_extra_info("sockname") or ("", 0)
                conn = tp.Conn(
                    client_ip=str(peer[0]),
                    client_port=int(peer[1] or 0),
                    server_ip=str(sock[0]),
                    server_port=int(sock[1] or 0),
                    endpoint=tp.Endpoint(
                        id=endpoint.endpoint_id,
                        url=endpoint.url,
                        host=self.settings.tcp_host,
                        port=port,
                        protocol="tcp",
                        account_id=endpoint.account_id,
                    ),
                    server_region=self.settings.region,
                )
                if enforcement.policy.ip_policy_ids:  # restrict-ips ip_policies, cached
                    conn.ip_policy_resolver = await self.router.ip_policy_resolver(
                        endpoint.account_id, enforcement.policy
                    )
                state = enforcement.policy.new_state()
                out = enforcement.policy.on_tcp_connect(conn, state)
                target = None
                while out.kind == tp.FORWARD_INTERNAL:
                    target = await self.router.internal_target(account_id, out.url, "tcp")
                    if target is not None:
                        break
                    if out.on_error != "continue":
                        return  # offline internal endpoint, halt: closed
                    out = enforcement.policy.on_tcp_connect(conn, state)
                if target is None:
                    if out.kind != tp.CONTINUE:
                        return  # refused by ip restriction / policy: the connection is closed
                    break
                forwards += 1  # forward-internal: the internal endpoint's own rules next
                if forward_refused(target, forwards) is not None:
                    return
                tunnel, enforcement, cloud = target.tunnel, target.enforcement, target.cloud
                endpoint = target.hop
            if cloud or tunnel is None:
                return  # a cloud endpoint that did not forward (non-terminating), or a
                # TCP edge without an online tunnel: closed
            try:
                stream = await tunnel.session.open_proxy(tunnel, f"{peer[0]}:{peer[1]}", "tcp")
            except StreamReset:
                return
            await splice(reader, writer, stream)
        finally:
            self.admission.release(ticket)
            writer.close()
            observe.tcp_closed(self, counted, peer, writer, endpoint, cloud, state)
