"""The agent listener: one :class:`AgentSession` per TLS connection from an agent SDK.

Stream types the agent opens: Auth (first), Bind, Unbind, StartTunnelWithLabel, Heartbeat, and
SrvInfo (before Auth too: ngrok-go's Diagnose never authenticates).
The edge opens Proxy streams (one per public connection) and commands (Stop, Restart: see
:meth:`AgentSession.remote_command`; the session ends only when the agent accepts).

Rules (docs/DATA_PLANE.md): the authtoken is a credential token; a domain must pass the
credential's ACL and be the account's (reserved, or free under the base domain); one hostname
is served by one endpoint service-wide (claimed in the table); labels must pass the ACL. Every
refusal goes back as ``{"Error": "<msg>\\nERR_NGROK_<n>"}`` (chalicelib.core.binding lists codes).

Anything that is not the protocol (a malformed frame, JSON that is not an object, a stream
type an agent may not open, an RPC before Auth that is not Auth or SrvInfo) ends that session
with GOAWAY; nothing a client sends ends the process.

Bind options that change traffic (modules, traffic policy) are enforced by the edge; an
option this edge cannot honour refuses the bind with ERR_NGROK_1602 naming it, never
accepted and ignored (see ``edge.enforce``).
"""

import asyncio
import logging
import time
from typing import Any, Dict, Optional, Tuple

from chalicelib.core import binding, edge_errors, ids, online
from edge import (
    bind_opts,
    breaker,
    enforce,
    ip_restrictions,
    legacy,
    muxado,
    passthrough,
    pools,
    protocol,
    proxyproto,
    quotas,
    tls_spec,
)
from edge.protocol import MalformedRequest
from edge.registry import Tunnel
from edge.session import MuxSession, MuxStream, StreamReset

log = logging.getLogger("edge.agents")

EDGE_VERSION = "tunnel-edge/1"
RPC_TIMEOUT = 30.0  # seconds an RPC request may take to arrive whole
COMMAND_TIMEOUT = online.AGENT_COMMAND_TIMEOUT  # seconds the agent has to answer Stop/Restart
# what a StopTunnel tells the agent (DELETE /endpoints/{id}); the SDKs show it with the code
STOP_TUNNEL_MESSAGE = "endpoint {} was stopped through the API"
AUTH_TIMEOUT = 10.0  # a connection whose Auth has not arrived by then is closed
AUTH_ANSWER_TIMEOUT = 60.0  # seconds from the start by which an arrived Auth is answered
DEFAULT_HEARTBEAT = (10.0, 15.0)
# What an agent may ask for in Auth (HeartbeatInterval / HeartbeatTolerance, nanoseconds) is
# clamped to these seconds: a silent agent is reaped within interval + tolerance +
# HEARTBEAT_GRACE + one check, at most 125 s + EDGE_CHECK_SECONDS, whatever it asked for.
# The core echoes the beats and keeps the time of the last (edge_core/src/heartbeat.rs).
HEARTBEAT_INTERVAL_RANGE = (1.0, 60.0)
HEARTBEAT_TOLERANCE_RANGE = (1.0, 60.0)
HEARTBEAT_GRACE = 5.0
# A session's removal from the store that failed (the store away) is tried again after this,
# doubling up to END_RETRY_MAX_SECONDS, until done: its instance's lease would keep it live.
END_RETRY_SECONDS = 1.0
END_RETRY_MAX_SECONDS = 60.0
_retrying: set = set()  # the retry tasks (kept referenced until done)
OPEN_WAIT = 10.0  # seconds a public connection waits for a free stream to its agent


def _tunnel_id() -> str:
    return ids.new_id(ids.PREFIXES["tunnel"])


def heartbeat_of(interval: Any, tolerance: Any) -> tuple:
    """(interval, tolerance) in seconds from Auth's nanoseconds, each clamped to its range;
    the defaults when the agent sent none (or not integers)."""
    if (
        not (isinstance(interval, int) and isinstance(tolerance, int))
        or isinstance(interval, bool)
        or isinstance(tolerance, bool)
        or interval <= 0
    ):
        return DEFAULT_HEARTBEAT
    low, high = HEARTBEAT_INTERVAL_RANGE
    t_low, t_high = HEARTBEAT_TOLERANCE_RANGE
    return (min(max(interval / 1e9, low), high), min(max(tolerance / 1e9, t_low), t_high))


def enforcement_of(proto: str, opts_in: Dict[str, Any]) -> Any:
    """What the edge applies to an endpoint's traffic (edge.enforce), from its Bind options
    without ProxyProto; the options enforced elsewhere (CircuitBreaker, WebsocketTCPConverter:
    edge.breaker, edge.wstcp) and the name (URL: edge.bind_opts) left out. At bind, and again
    when PatchTunnelState changes the traffic policy."""
    if proto in ("http", "https"):
        drop: Tuple[str, ...] = ("URL", "CircuitBreaker", "WebsocketTCPConverter")
        rest = {k: v for k, v in opts_in.items() if k not in drop}
        return enforce.http_options(legacy.http_options(rest))
    opts_in = {k: v for k, v in opts_in.items() if k != "URL"}
    if proto == "tcp":
        return enforce.tcp_options(opts_in)
    return passthrough.options(opts_in)


def endpoint_id_of(tunnel_id: str) -> str:
    """An endpoint's id follows from its tunnel's (same random part), so a re-bind with the
    same tunnel id reclaims the same endpoint, on any instance."""
    return ids.PREFIXES["endpoint"] + "_" + tunnel_id.split("_", 1)[1]


async def _end_later(edge: Any, account_id: str, session_id: str) -> None:
    delay = END_RETRY_SECONDS
    while True:
        await asyncio.sleep(delay)
        try:
            await edge.call(
                online.session_ended, account_id, session_id, edge.settings.instance_id
            )
            return
        except Exception as exc:
            log.warning("session %s: not removed from the store yet: %r", session_id, exc)
        delay = min(delay * 2, END_RETRY_MAX_SECONDS)


class AgentSession:
    def __init__(self, edge: Any, mux: MuxSession, peer: Tuple[str, int], sni: str = ""):
        """``mux``: the agent's muxado session (edge.carrier hands it over, run by the core);
        ``sni``: the TLS server name it connected with (an agent ingress domain, or not)."""
        self.edge = edge
        self.sni = sni.lower()
        self.peer_ip = str(peer[0])
        self.mux = mux
        mux.on_stream = self._on_stream
        mux.name = f"{peer[0]}:{peer[1]}"
        self.id: Optional[str] = None
        self.grant: Optional[binding.Grant] = None
        self.version = ""  # the protocol version Auth chose ("2": the CLI 2.x)
        self.tunnels: Dict[str, Tunnel] = {}
        self.heartbeat = DEFAULT_HEARTBEAT
        self.started = time.monotonic()
        self._auth_lock = asyncio.Lock()
        self._legacy_bind_lock = asyncio.Lock()
        self._auth_arrived = False  # an Auth request was read whole: its answer may take time
        self._online = False  # its online item is written: the checks may refresh it
        # nothing under it in the store: its id was made at its Auth, and no request came
        # after (a Bind writes children): its end removes its two items in one write
        self._unbound = False
        self._ending = False
        self._command_lock = asyncio.Lock()  # Stop/Restart asked through the API, one by one
        self._ended = asyncio.Event()  # end() has done its work (the store's removal tried)
        # the Auth's write of the session item while it is in flight: the session's end
        # removes the item only once it landed (else the write would land after the removal
        # and leave an item no session owns, listed while the instance lives)
        self._starting: Optional["asyncio.Future[Any]"] = None

    # ---- lifecycle --------------------------------------------------------------------------
    async def run(self) -> None:
        deadline = asyncio.get_running_loop().call_later(
            AUTH_TIMEOUT,
            lambda: None
            if self.grant is not None or self._auth_arrived or self._ending
            else asyncio.ensure_future(self.end("no Auth in time")),
        )
        try:
            await self.mux.run()
        finally:
            deadline.cancel()
            await self.end(self.mux.close_reason or "session closed")

    async def end(self, reason: str, code: Optional[str] = None) -> None:
        """Close the session (GOAWAY with ``reason``), drop its tunnels and online items."""
        if self._ending:
            return
        self._ending = True
        try:
            await self._end(reason, code)
        finally:
            self._ended.set()

    async def _end(self, reason: str, code: Optional[str]) -> None:
        log.info("session %s ends: %s", self.id or self.mux.name, reason)
        message = reason if not code else f"{reason}\n{code}"
        await self.mux.go_away(muxado.E_NONE, message)
        for tunnel in list(self.tunnels.values()):
            try:
                await self.edge.binds.drop_tunnel(tunnel, remember=True)
            except Exception as exc:  # the store away: session_ended removes its items
                log.warning("session %s: tunnel %s not dropped: %r", self.id, tunnel.id, exc)
        self.tunnels.clear()
        if self.id and self.edge.registry.sessions.get(self.id) is self:
            del self.edge.registry.sessions[self.id]
            if self._starting is not None:  # the Auth's write lands first, then goes
                await asyncio.wait([self._starting])
            cluster = self.edge.cluster  # draining: removed after the agents re-bound
            if cluster is None or not cluster.defer_end(self.grant.account_id, self.id):
                await self._ended_in_store(self.grant.account_id, self.id)

    async def _ended_in_store(self, account_id: str, session_id: str) -> None:
        """online.session_ended; when the store fails it, tried again in the background
        until done (END_RETRY_SECONDS, doubling): the instance's lease keeps a session item
        that is left live, its names claimed, as long as the instance runs."""
        try:
            await self.edge.call(
                online.session_ended,
                account_id,
                session_id,
                self.edge.settings.instance_id,
                unbound_credential=(
                    self.grant.credential_id if self._unbound and self.grant else None
                ),
            )
            log.info("session %s: removed from the store", session_id)
        except Exception as exc:
            log.warning(
                "session %s: not removed from the store (%r): tried again", session_id, exc
            )
            task = asyncio.ensure_future(_end_later(self.edge, account_id, session_id))
            _retrying.add(task)
            task.add_done_callback(_retrying.discard)

    # ---- streams the agent opens --------------------------------------------------------------
    async def _on_stream(self, stream: MuxStream) -> None:
        try:
            raw = await asyncio.wait_for(stream.readexactly(4), RPC_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError):
            stream.reset(muxado.E_PROTOCOL)
            return
        typ = protocol.U32.unpack(raw)[0]
        if typ not in protocol.AGENT_STREAM_TYPES:
            await self.end(f"protocol error: an agent may not open a stream of type {typ}")
            return
        if typ == protocol.HEARTBEAT:
            stream.echo_heartbeats()  # the core echoes its ids (edge_core/src/heartbeat.rs)
            return
        try:
            request = await self._read_request(stream)
            if typ == protocol.AUTH:
                # The deadline is for the request to arrive; answering it reads the store,
                # which a loaded store may make slow (AUTH_ANSWER_TIMEOUT bounds that).
                self._auth_arrived = True
                async with self._auth_lock:
                    await self._auth(stream, request)
                return
            if typ == protocol.SRV_INFO:
                # ngrok-go's Diagnose opens it on a session it never authenticates: the region
                # is all it tells (the pre-Auth bounds of edge.session still hold)
                await self._reply(stream, protocol.srv_info_reply(self.edge.settings.region))
                return
            if self.grant is None:
                await self.end("protocol error: Auth must come first")
                return
            self._unbound = False
            if typ == protocol.BIND:
                await self._bind(stream, request)
            elif typ == protocol.BIND_LABELED:
                await self._bind_labeled(stream, request)
            elif typ == protocol.UNBIND:
                await self._unbind(stream, request)
            elif typ == protocol.PATCH_TUNNEL_STATE:
                await self._patch(stream, request)
        except MalformedRequest as exc:
            await self.end(f"protocol error: {exc}")
        except binding.Refused as exc:
            log.info(
                "session %s: request of type %d refused: %s %s",
                self.id,
                typ,
                exc.code,
                exc.message,
            )
            await self._reply(stream, protocol.error_reply(exc.message, exc.code))

    async def _read_request(self, stream: MuxStream) -> Dict[str, Any]:
        reader = protocol.JsonReader()
        deadline = time.monotonic() + RPC_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MalformedRequest("request did not arrive whole in time")
            try:
                chunk = await asyncio.wait_for(stream.read(), remaining)
            except asyncio.TimeoutError:
                raise MalformedRequest("request did not arrive whole in time") from None
            if not chunk:
                return reader.finish()
            value = reader.feed(chunk)
            if value is not None:
                return value

    async def _reply(self, stream: MuxStream, body: bytes) -> None:
        try:
            await stream.write(body)
            await stream.close_write()
        except StreamReset:
            pass

    # ---- Auth -------------------------------------------------------------------------------
    async def _auth(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        if self.grant is not None:
            raise MalformedRequest("a second Auth on one session")
        version = protocol.choose_version(request.get("Version"))
        extra = protocol.obj(request.get("Extra"))
        # AuthToken (the SDKs), Authtoken (the CLI 2.x and ngrok-go's legacy client)
        token = protocol.text(extra.get("AuthToken")) or protocol.text(extra.get("Authtoken"))
        client_id = protocol.text(request.get("ClientId"))
        if version is None:
            await self._reply(
                stream,
                protocol.error_reply(
                    f"Unsupported protocol version; this edge speaks "
                    f"{', '.join(protocol.SUPPORTED_VERSIONS)}",
                    edge_errors.INVALID_OPTION,
                ),
            )
            return
        limits = self.edge.settings.limits
        locked = self.edge.auth_throttle.locked(self.peer_ip)
        try:
            if locked is not None:  # too many failures from this address: no store read
                raise binding.Refused(
                    "",
                    f"Too many failed authentications from "
                    f"{self.peer_ip}; try again in {int(locked) + 1} s.",
                )
            try:
                grant = await self.edge.call(binding.authenticate, token)
            except binding.Refused:
                self.edge.auth_throttle.failed(self.peer_ip)
                raise
            ingress = self.edge.agent_ingresses.get(self.sni) if self.sni else None
            if ingress is not None and ingress["account_id"] != grant.account_id:
                # an agent ingress admits its account's agents only (as hosted)
                self.edge.auth_throttle.failed(self.peer_ip)
                raise binding.Refused(
                    edge_errors.AUTHTOKEN_INVALID,
                    f"The agent ingress {self.sni} accepts agents of its own account only; "
                    "this authtoken is another account's.",
                )
            if not await ip_restrictions.allows(
                self.edge, grant.account_id, ip_restrictions.AGENT, self.peer_ip
            ):  # the account's agent IP restrictions
                raise binding.Refused(
                    ip_restrictions.AGENT_REFUSED,
                    ip_restrictions.AGENT_MESSAGE.format(ip=self.peer_ip),
                )
            if (
                await self.edge.call(online.count_auth, grant.credential_id)
                > limits.auths_per_credential
            ):
                raise quotas.auths_per_credential(limits.auths_per_credential)
            session_id = (
                client_id
                if ids.is_valid(client_id, ids.PREFIXES["tunnel_session"])
                else ids.new_id(ids.PREFIXES["tunnel_session"])
            )
            if (
                await self.edge.call(
                    online.live_credential_sessions,
                    grant.account_id,
                    grant.credential_id,
                    exclude=session_id,
                )
                >= limits.sessions_per_credential
            ):
                raise quotas.sessions_per_credential(limits.sessions_per_credential)
        except binding.Refused as exc:
            await self._reply(stream, protocol.error_reply(exc.message, exc.code))
            asyncio.get_running_loop().call_later(
                1.0, lambda: asyncio.ensure_future(self.end("authentication failed"))
            )
            return
        old = self.edge.registry.sessions.get(session_id)
        if old is not None and old is not self:
            if old.grant.account_id != grant.account_id:
                session_id = ids.new_id(ids.PREFIXES["tunnel_session"])
            else:
                await old.end("replaced by a reconnect of the same agent")
        if self._ending or self.mux.closed:
            # The agent went away while this Auth read the store. Its handler is cancelled
            # then, unless the connection closed before the session ran: the core may hand
            # it over with its Auth stream and its close in one batch (the agent CLI stopping
            # right after the reconnect that followed the edge's GOAWAY), and run() starts
            # the handler after the close. The end ran, or runs, with no id: registered now,
            # the session item would be written and never removed (listed while the
            # instance lives), the registry would keep a dead session.
            return
        self.heartbeat = heartbeat_of(
            extra.get("HeartbeatInterval"), extra.get("HeartbeatTolerance")
        )
        self.grant = grant
        self.id = session_id
        self._unbound = session_id != client_id
        self.version = version
        self.mux.authenticate()
        self.edge.authenticated(self)
        self.edge.registry.sessions[session_id] = self
        self._starting = asyncio.ensure_future(
            self.edge.call(
                online.session_started,
                account_id=grant.account_id,
                session_id=session_id,
                credential_id=grant.credential_id,
                instance_id=self.edge.settings.instance_id,
                agent_version=protocol.text(extra.get("Version"))[:64],
                os=protocol.text(extra.get("OS"))[:64],
                ip=self.peer_ip,
                metadata=protocol.text(extra.get("Metadata"))[:4096],
                region=self.edge.settings.region,
                owner_id=grant.owner_id,
            )
        )
        # shielded: the write goes on in its thread whatever becomes of this request, and the
        # session's end waits for it (_end)
        await asyncio.shield(self._starting)
        self._online = True
        log.info(
            "session %s authenticated (credential %s, account %s)",
            session_id,
            grant.credential_id,
            grant.account_id,
        )
        await self._reply(
            stream,
            protocol.reply(
                {
                    "Version": version,
                    "ClientId": session_id,
                    "Extra": {
                        "Version": EDGE_VERSION,
                        "Region": self.edge.settings.region,
                        "Cookie": "",
                        "AccountName": grant.account_id,
                        "SessionDuration": 0,
                        "PlanName": "self-hosted",
                        "Banner": "",
                        # ngrok-go v2's AgentSession.ID(): the id GET /tunnel_sessions lists
                        "AgentSessionID": session_id,
                    },
                }
            ),
        )

    # ---- Bind / Unbind ----------------------------------------------------------------------
    async def _reusable_id(self, requested: str) -> str:
        """The id the agent asked for (its re-bind after a reconnect) when it is this
        account's or nobody's, else a new one; every id given out is recorded as the account's
        (chalicelib.core.online.claim_tunnel_id), so no other account can take it over."""
        if requested and ids.is_valid(requested, ids.PREFIXES["tunnel"]):
            held = self.edge.registry.by_id.get(requested)
            if (
                held is None or held.account_id == self.granted.account_id
            ) and await self.edge.call(online.claim_tunnel_id, requested, self.granted.account_id):
                return requested
        while True:
            fresh = _tunnel_id()
            if await self.edge.call(online.claim_tunnel_id, fresh, self.granted.account_id):
                return fresh

    async def _bind(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        if self.version != legacy.PROTOCOL_VERSION:
            await self._bind_one(stream, request)
            return
        # The CLI 2.x's two halves of one name find each other in what this session bound
        # before (edge.legacy): its Binds are taken one at a time, whatever the streams' order.
        async with self._legacy_bind_lock:
            await self._bind_one(stream, request)

    async def _bind_one(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        proto = protocol.text(request.get("Proto"))
        opts = protocol.obj(request.get("Opts"))
        extra = protocol.obj(request.get("Extra"))
        asked_id = protocol.text(request.get("Id"))
        forwards_proto = bind_opts.forwards_proto(request.get("ForwardsProto"))
        proxy_proto, opts_in = proxyproto.version_of(opts)  # edge.proxyproto
        from_url = bind_opts.name_of_url(
            proto, opts.get("URL"), {"http": self.edge.http_port, "https": self.edge.https_port}
        )
        await self._check_quotas(proto, asked_id)
        tunnel_id = await self._reusable_id(asked_id)
        tunnel = Tunnel(
            id=tunnel_id,
            session=self,
            proto=proto,
            opts=opts,
            forwards_to=protocol.text(request.get("ForwardsTo"))[:512],
            forwards_proto=forwards_proto,
            metadata=protocol.text(extra.get("Metadata"))[:4096],
            description=protocol.text(extra.get("Description"))[:255],
            endpoint_id=endpoint_id_of(tunnel_id),
            rebind=tunnel_id == asked_id,
            scheme_only=self.version == legacy.PROTOCOL_VERSION,
            pooled=pools.wants_pooling(extra),
            proxy_proto=proxy_proto,
        )
        if proto in ("http", "https"):
            tunnel.breaker = breaker.of_option(opts_in.get("CircuitBreaker"))
            tunnel.ws_tcp = opts_in.get("WebsocketTCPConverter") is not None
            tunnel.enforcement = enforcement_of(proto, opts_in)
            tunnel.tls = tls_spec.spec_of_bind(opts.get("MutualTLSCA"))
            name = bind_opts.one_name(from_url, self._requested_domain(opts), "Domain")
            bind_opts.check_bindings(extra.get("Bindings"), name)
            await enforce.check_ip_policies(self.edge, self.granted.account_id, tunnel.enforcement)
            await self.edge.binds.bind_http(tunnel, name)
        elif proto == "tcp":
            tunnel.enforcement = enforcement_of(proto, opts_in)
            name = bind_opts.one_name(from_url, protocol.text(opts.get("Addr")), "Addr")
            bind_opts.check_bindings(extra.get("Bindings"), name)
            await enforce.check_ip_policies(self.edge, self.granted.account_id, tunnel.enforcement)
            await self.edge.binds.bind_tcp(tunnel, name)
        elif proto == passthrough.PROTO:  # SNI-routed, not terminated (edge.passthrough)
            tunnel.enforcement = enforcement_of(proto, opts_in)
            tunnel.tls = passthrough.client_certificates(
                opts_in.get("MutualTLSAtEdge"), opts_in.get("TLSTermination") is not None
            )
            tunnel.termination = passthrough.termination(opts_in.get("TLSTermination"), tunnel.tls)
            name = bind_opts.one_name(from_url, self._requested_domain(opts), "Domain")
            bind_opts.check_bindings(extra.get("Bindings"), name)
            await enforce.check_ip_policies(self.edge, self.granted.account_id, tunnel.enforcement)
            await self.edge.binds.bind_http(tunnel, name)
        else:
            raise binding.Refused(
                edge_errors.INVALID_PROTOCOL,
                f"'{proto}' is not a valid endpoint type. Must be one of "
                "'http', 'https', 'tcp', 'tls'.",
            )
        self.tunnels[tunnel.id] = tunnel
        log.info("session %s: tunnel %s bound at %s", self.id, tunnel.id, tunnel.url)
        await self._reply(
            stream,
            protocol.reply(
                {
                    "Id": tunnel.id,
                    "URL": tunnel.url,
                    "Proto": proto,
                    "Opts": opts,
                    # TunnelID: ngrok-go v2's Endpoint.TunnelID(), what its PatchTunnelState
                    # names; the Id itself, here
                    "Extra": {"Token": "", "TunnelID": tunnel.id},
                }
            ),
        )

    async def _check_quotas(self, proto: str, asked_id: str) -> None:
        """Endpoints per session, and online endpoints (TCP ones apart) per account
        (edge.quotas); a re-bind of a tunnel this session already has replaces it."""
        limits = self.edge.settings.limits
        if asked_id in self.tunnels:
            return
        if len(self.tunnels) >= limits.endpoints_per_session:
            raise quotas.endpoints_per_session(
                limits.endpoints_per_session, [t.url for t in self.tunnels.values() if t.url]
            )
        account_id = self.granted.account_id
        if (
            await self.edge.call(online.live_endpoint_count, account_id)
            >= limits.endpoints_per_account
        ):
            raise quotas.endpoints_per_account(limits.endpoints_per_account)
        if (
            proto == "tcp"
            and await self.edge.call(online.live_endpoint_count, account_id, "tcp")
            >= limits.tcp_endpoints_per_account
        ):
            raise quotas.endpoints_per_account(limits.tcp_endpoints_per_account, "TCP endpoints")

    def _requested_domain(self, opts: Dict[str, Any]) -> str:
        """``Domain`` (newer SDKs) or ``Hostname`` (1.4.0), or ``Subdomain`` under the base
        domain; "" asks for a generated name."""
        for key in ("Domain", "Hostname"):
            value = protocol.text(opts.get(key)).strip()
            if value:
                return value.lower()
        sub = protocol.text(opts.get("Subdomain")).strip().lower()
        if sub:
            return f"{sub}.{self.edge.settings.base_domain}"
        return ""

    async def _bind_labeled(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        labels = protocol.obj(request.get("Labels"))
        labels = binding.check_labels(self.granted, labels)
        forwards_proto = bind_opts.forwards_proto(request.get("ForwardsProto"))
        tunnel_id = _tunnel_id()
        tunnel = Tunnel(
            id=tunnel_id,
            session=self,
            proto="",
            labels=labels,
            forwards_to=protocol.text(request.get("ForwardsTo"))[:512],
            forwards_proto=forwards_proto,
            metadata=protocol.text(request.get("Metadata"))[:4096],
        )
        await self.edge.binds.add_labeled(tunnel)
        self.tunnels[tunnel.id] = tunnel
        await self._reply(stream, protocol.reply({"Id": tunnel.id}))

    async def _patch(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        """PatchTunnelState (ngrok-go v2's ``EndpointForwarder.Update``): metadata, description
        or traffic policy of a bound endpoint changed in place (rules: edge.bind_opts)."""
        tunnel = self.tunnels.get(protocol.text(request.get("TunnelId")))
        if tunnel is None or not tunnel.proto:
            raise binding.Refused(
                edge_errors.INVALID_OPTION,
                "No endpoint with that tunnel id is bound on this session",
            )
        changes = bind_opts.patch_of(request, tunnel.pooled)
        enforcement = tunnel.enforcement
        if "TrafficPolicy" in changes:
            _, opts_in = proxyproto.version_of(
                {**tunnel.opts, "TrafficPolicy": changes["TrafficPolicy"]}
            )
            enforcement = enforcement_of(tunnel.proto, opts_in)
            if tunnel.internal:
                enforce.check_internal(tunnel.proto, enforcement)
            await enforce.check_ip_policies(self.edge, self.granted.account_id, enforcement)
        stored = {
            field: changes[key]
            for key, field in (
                ("Metadata", "metadata"),
                ("Description", "description"),
                ("TrafficPolicy", "traffic_policy"),
            )
            if key in changes
        }
        if stored:
            await self.edge.call(
                online.tunnel_patched,
                self.granted.account_id,
                self.id,
                tunnel.id,
                tunnel.endpoint_id if tunnel.url else None,
                **stored,
            )
        if "TrafficPolicy" in changes:
            tunnel.opts = {**tunnel.opts, "TrafficPolicy": changes["TrafficPolicy"]}
            tunnel.enforcement = enforcement
            self.edge.registry.tunnel_changed(tunnel)  # a plain route no more, or again
        tunnel.metadata = changes.get("Metadata", tunnel.metadata)
        tunnel.description = changes.get("Description", tunnel.description)
        log.info("session %s: tunnel %s patched (%s)", self.id, tunnel.id, ", ".join(changes))
        await self._reply(stream, protocol.reply({}))

    async def _unbind(self, stream: MuxStream, request: Dict[str, Any]) -> None:
        tunnel = self.tunnels.pop(protocol.text(request.get("Id")), None)
        if tunnel is None:
            await self._reply(
                stream,
                protocol.error_reply(
                    "No tunnel with that id is bound on this session", edge_errors.INVALID_OPTION
                ),
            )
            return
        await self.edge.binds.drop_tunnel(tunnel)
        await self._reply(stream, protocol.reply({}))

    # ---- what the edge sends the agent ------------------------------------------------------
    async def open_proxy(
        self,
        tunnel: Tunnel,
        client_addr: str,
        proto: str,
        passthrough_tls: bool = False,
        server_addr: str = "",
    ) -> MuxStream:
        """A proxy stream for one public connection, its header written (and the PROXY
        protocol header when the endpoint asked for one: ``server_addr``, else the address of
        the listener of ``proto``). Waits up to OPEN_WAIT for a free slot when the session
        has MAX_LOCAL_STREAMS open (StreamsExhausted after that)."""
        stream = await self.mux.open_stream_when_free(OPEN_WAIT)
        head = protocol.proxy_header(
            tunnel_id=tunnel.id,
            client_addr=client_addr,
            proto=proto,
            passthrough_tls=passthrough_tls,
        )
        if tunnel.proxy_proto:
            head += proxyproto.header(
                tunnel.proxy_proto, client_addr, server_addr or self._listener_addr(tunnel, proto)
            )
        try:
            await stream.write(head)
        except BaseException:
            # a reset, or the opener cancelled (its client went away): the stream is in the
            # table and may be known to the agent, and nobody else will end it
            stream.finish()
            raise
        return stream

    def _listener_addr(self, tunnel: Tunnel, proto: str) -> str:
        port = (
            tunnel.port
            if proto == "tcp"
            else self.edge.http_port
            if proto == "http"
            else self.edge.https_port
        )
        return f"{self.edge.settings.host}:{port}"

    async def command(self, typ: int) -> Optional[str]:
        """Send Stop / Restart; the agent's error string, or None when it accepted."""
        stream = self.mux.open_stream()
        await stream.write(protocol.stream_type(typ) + b"{}")
        reader = protocol.JsonReader(limit=64 * 1024)
        body: Optional[Dict[str, Any]] = None
        try:
            while body is None:
                chunk = await asyncio.wait_for(stream.read(), COMMAND_TIMEOUT)
                body = reader.feed(chunk) if chunk else reader.finish()
        finally:
            stream.finish()
        error = body.get("Error")
        return error if isinstance(error, str) and error else None

    async def stop_endpoint(self, endpoint_id: str) -> str:
        """Stop one endpoint of this session asked through the API (``DELETE
        /endpoints/{id}``): the edge stops serving it (registry, claim, online items: as an
        Unbind), then opens a StopTunnel stream (type 9) carrying ``{"Id": <the Bind's id>,
        "Message", "ErrorCode"}`` and ends it; the official SDKs close that one listener with
        the message and code (ngrok-go's ``OnStopTunnel``, ngrok-rust's
        ``close_tunnel_with_error``) and answer nothing. The session and its other endpoints
        stay up. The agent CLI 2.x (protocol version 2) has no StopTunnel: its endpoint is
        stopped all the same, and it is not told. ``"accepted"``, or ``"gone"`` when no
        endpoint of this session has that id."""
        tunnel = next(
            (t for t in self.tunnels.values() if t.endpoint_id == endpoint_id and t.url), None
        )
        if tunnel is None or self._ending or self.mux.closed:
            return "gone"
        self.tunnels.pop(tunnel.id, None)
        await self.edge.binds.drop_tunnel(tunnel)
        if self.version == legacy.PROTOCOL_VERSION:  # the CLI 2.x knows no StopTunnel (it
            # reads one as a broken proxy stream): the endpoint is stopped, the CLI not told
            log.info("session %s: endpoint %s stopped through the API", self.id, endpoint_id)
            return "accepted"
        body = {
            "Id": tunnel.id,
            "Message": STOP_TUNNEL_MESSAGE.format(endpoint_id),
            "ErrorCode": edge_errors.ENDPOINT_STOPPED,
        }
        try:
            stream = self.mux.open_stream()
            await stream.write(protocol.stream_type(protocol.STOP_TUNNEL) + protocol.reply(body))
            stream.finish()
        except (StreamReset, ConnectionError) as exc:  # the endpoint is stopped all the same
            log.info("session %s: StopTunnel for %s not delivered: %r", self.id, tunnel.id, exc)
        log.info("session %s: endpoint %s stopped through the API", self.id, endpoint_id)
        return "accepted"

    # ---- periodic checks (the edge's check loop) --------------------------------------------
    @property
    def ended(self) -> bool:
        return self._ending

    @property
    def granted(self) -> binding.Grant:
        """The session's grant: the RPCs after Auth run only once it has one."""
        if self.grant is None:
            raise MalformedRequest("Auth must come first")
        return self.grant

    @property
    def is_online(self) -> bool:
        """Authenticated, and its online item written."""
        return self.grant is not None and self._online

    async def check(self, fresh: Any, gone: bool = False) -> None:
        """The periodic check of one session: :meth:`due_end`, and the end it says."""
        why = self.due_end(fresh, gone)
        if why is not None:
            await self.end(*why)

    def due_end(self, fresh: Any, gone: bool = False) -> Optional[Tuple[str, Optional[str]]]:
        """Why the periodic check ends this session now ((reason, code)), or None. Credential
        still usable (``fresh``: the grant re-read this round, a Refused, or None when it
        could not be read; a fresh grant is taken)? Heartbeats still coming? Its online item
        removed (``gone``)? (Stop and restart asked through the API: :meth:`remote_command`.)
        Synchronous: a check of 10,000 sessions makes no task for those that go on."""
        if self.grant is None or not self._online:  # still authenticating: no item to
            waited = time.monotonic() - self.started  # refresh yet (a heartbeat would end it)
            if waited > (AUTH_ANSWER_TIMEOUT if self._auth_arrived else AUTH_TIMEOUT):
                return (
                    "Auth not answered in time" if self._auth_arrived else "no Auth in time"
                ), None
            return None
        interval, tolerance = self.heartbeat
        if self.mux.since_beat > interval + tolerance + HEARTBEAT_GRACE:
            return "heartbeats stopped", None
        if isinstance(fresh, binding.Refused):
            return fresh.message, fresh.code
        if isinstance(fresh, binding.Grant):
            self.grant = fresh
        if gone:
            return "the session was removed", None
        return None

    async def remote_command(self, command: str) -> Tuple[str, str]:
        """Send Stop or Restart (``command``: "stop" | "restart") asked through the API and
        return its outcome for the API (chalicelib.core.online.answer_command):

        - ``("accepted", "")``: the agent answered without an error, or closed its session
          while the edge waited (it exited or restarted at once); the session is ended (its
          online items removed) before this returns, so the API's 204 finds it unlisted;
        - ``("refused", reason)``: the agent answered with an error (the official SDKs do when
          the program set no handler for the command), reset the stream, sent no JSON, or did
          not answer within COMMAND_TIMEOUT; the session is kept: ending it would only make
          the agent reconnect;
        - ``("gone", "")``: the session had already ended.

        One command at a time per session (a second waits for the first)."""
        typ = protocol.STOP if command == "stop" else protocol.RESTART
        async with self._command_lock:
            if self._ending or self.mux.closed:
                return "gone", ""
            try:
                error = await self.command(typ)
            except asyncio.TimeoutError:
                error = f"the agent did not answer within {COMMAND_TIMEOUT:g} s"
            except (StreamReset, MalformedRequest) as exc:
                error = f"the agent's answer could not be read ({exc})"
            if error and not (self.mux.closed or self._ending):
                log.info("session %s: %s refused by the agent: %s", self.id, command, error)
                return "refused", error
            done = "stopped" if command == "stop" else "restarted"
            await self.end(f"{done} through the API")  # or the agent's own close, ending it
            await self._ended.wait()
            return "accepted", ""
