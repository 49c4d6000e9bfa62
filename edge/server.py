"""The edge process: its listeners and the loop that keeps sessions honest; the binds they
serve are edge/binds.py's, the TCP ports' connections edge/tcp_front.py's.

Store calls (PynamoDB, blocking) run in worker threads (:meth:`Edge.call`) so a slow store
never stalls traffic. Every few seconds (EDGE_CHECK_SECONDS) each session re-reads its
credential (deleted credential, deleted owner or deactivated bot: the session is closed with
the refusal's code; edge/online_keeper.py: the instance's lease, not each session, keeps the
online items live); so revocation takes effect within EDGE_CHECK_SECONDS + one store round
trip. Stop/restart asked through the API, whose caller waits for the agent's answer, are read
apart, every EDGE_COMMAND_POLL_SECONDS (1 s), each sent in a task of its own and answered in
the store (:meth:`Edge._command`).
"""

import asyncio
import functools
import socket
import weakref
import logging
from typing import Any, Callable, Dict, List, Optional, Protocol, Set, Tuple

from chalicelib.core import binding, hostnames, ingresses, instances, online
from edge import (
    agents,
    audit_outbox,
    carrier,
    cluster,
    config,
    h2front,
    http_io,
    metrics,
    online_keeper,
    quotas,
    ssh_gateway,
    tls,
)
from edge.admission import Admission
from edge.binds import Binds
from edge.certs import ServerCertificates
from edge.carrier import CoreTls
from edge.tls_spec import DEFAULT as DEFAULT_TLS
from edge.connections import CoreTlsObject, CoreTlsWriter, connection_handler, stream_pair
from edge.edges import EdgeRouter, watch_banned_hosts, watch_reserved_ports
from edge.fast_path import FastPath
from edge.public import HttpFront
from edge.registry import Registry
from edge.session import MuxSession
from edge.tcp_front import TcpFront

log = logging.getLogger("edge")

MAX_UNAUTHENTICATED_PER_ADDRESS = 16  # agent connections not yet authenticated, per address
MAX_UNAUTHENTICATED = 512  # ... and in total


class CheckedSession(Protocol):
    """What the edge's check loop and its shutdown, the metrics and the cluster's drain read
    of a session: an agent's (edge.agents.AgentSession) or an SSH client's
    (edge.ssh_gateway.SshSession)."""

    @property
    def id(self) -> Optional[str]: ...

    @property
    def grant(self) -> Optional[binding.Grant]: ...

    @property
    def granted(self) -> binding.Grant: ...

    @property
    def ended(self) -> bool: ...

    @property
    def is_online(self) -> bool: ...

    @property
    def mux(self) -> Any: ...  # its streams' counts (edge/metrics.py)

    def due_end(self, fresh: Any, gone: bool = False) -> Optional[Tuple[str, Optional[str]]]:
        """Why the periodic check ends it now ((reason, code)), or None."""

    async def end(self, reason: str, code: Optional[str] = None) -> None: ...


class Edge:
    def __init__(self, settings: config.EdgeSettings):
        self.settings = settings
        self.registry = Registry()
        self.certs = ServerCertificates(
            settings.data_dir, settings.tls_cert or None, settings.tls_key or None
        )
        self._servers: List[asyncio.Server] = []  # (Server: its sockets are read)
        self._sessions: Set[CheckedSession] = set()
        self.auth_throttle = quotas.AuthThrottle(settings.limits.failed_auths_per_address)
        self.admission = Admission(
            settings.max_connections,  # public connections: caps
            settings.max_connections_per_address,
        )
        self._unauthenticated: Dict[str, int] = {}  # address -> connections not yet authed
        self._counted: "weakref.WeakSet[Any]" = weakref.WeakSet()  # sessions no longer counted
        self.connections: set = set()  # tasks of open connections (agents, public)
        self.port_listeners: dict = {}  # TCP port -> its port in the core (endpoints, edges)
        self.reserved_ports: set = set()  # ports of reserved addresses (TCP edges), kept fresh
        # a cluster's generated TCP ports held by any instance (edge.edges.watch_reserved_ports)
        self.cluster_ports: set = set()
        self.banned: frozenset = frozenset()  # hostnames an abuse report bans, kept fresh
        self.router = EdgeRouter(self)
        self.binds = Binds(self)  # what agent tunnels serve where (edge/binds.py)
        self.tcp = TcpFront(self)  # the TCP ports' connections (edge/tcp_front.py)
        self.tls = tls.TlsSettings(self)  # what each name asks of the HTTPS handshake
        self.carrier = carrier.Carrier(settings.core_threads)  # the compiled core's bytes
        self.fast_path = FastPath(self)  # the hosts the core serves by itself
        self.log = log
        self._checker: Optional[asyncio.Task] = None
        self.agent_port = settings.agent_port
        self.http_port = settings.http_port
        self.https_port = settings.https_port
        self.metrics_port: Optional[int] = None
        self.ssh: Optional[ssh_gateway.SshGateway] = None  # OpenSSH as an agent (docs/SSH.md)
        # agent ingress domain -> {account_id, agent_ingress_id} (refresh_agent_ingresses), and
        # what the agent listener serves for each: (domain, fingerprint or "local CA")
        self.agent_ingresses: Dict[str, Dict[str, str]] = {}
        self._agent_names: List[Tuple[str, str]] = []
        self.ssh_port: Optional[int] = None
        cluster_settings = cluster.ClusterSettings.from_env()  # EDGE_CLUSTER_SECRET set
        self.cluster = cluster.Cluster(self, cluster_settings) if cluster_settings else None
        self.keeper = online_keeper.OnlineKeeper(settings.instance_id)
        self._lease: Optional[asyncio.Task] = None  # no cluster: the lease renewed here
        self._commands: set = set()  # the tasks of the commands being sent (kept referenced)

    @property
    def sessions(self) -> Set[CheckedSession]:
        """The agent sessions of this instance (authenticated or not yet), and the SSH
        gateway's (edge/ssh_gateway.py), which its check loop treats alike."""
        return self._sessions

    async def call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking store function in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(func, *args, **kwargs)
        )

    # ---- start / stop -----------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self.carrier.start(asyncio.get_running_loop())  # the compiled core (edge/carrier.py)
        if self.cluster is not None:  # the registry item and the relay listener
            await self.cluster.start()
        else:  # the lease that keeps this instance's online items live
            await self.call(instances.register, s.instance_id, "", "serving")
            self._lease = asyncio.ensure_future(online_keeper.keep_lease(self.call, s.instance_id))
        # The agent listener (TLS, muxado) is carried by the compiled core.
        chain, key = self.certs.pair_for(s.agent_hostnames)
        fd = self.settings.listen_fds.get("agent")
        self.agent_port = self.carrier.listen_agents(
            self._agent_connection,
            chain,
            key,
            [],
            **({"fd": fd} if fd is not None else {"host": s.host, "port": s.agent_port}),
        )
        http_handle = HttpFront(self, "http").handle
        https_handle = h2front.https_handler(  # h2 by ALPN, else HTTP/1.1
            self, HttpFront(self, "https").handle
        )
        if self.cluster is not None:  # a connection for another instance's endpoint: relayed
            http_handle = functools.partial(self.cluster.http, http_handle, "http")
            https_handle = functools.partial(self.cluster.https, https_handle)
        # The public plain-HTTP listener is the core's (edge/fast_path.py): it serves a plain
        # route's requests itself and hands every other connection over.
        http_fd = self.settings.listen_fds.get("http")
        self.http_port = self.carrier.listen_public(
            functools.partial(self._public_connection, http_handle),
            "http",
            **http_io.listener_limits(s),
            **({"fd": http_fd} if http_fd is not None else {"host": s.host, "port": s.http_port}),
        )
        self.carrier.on_served = self.fast_path.served
        self.carrier.on_asked = self.fast_path.decide
        self.carrier.on_responses = self.fast_path.decide_responses
        self.registry.on_change = self.fast_path.sync
        self.registry.on_internal = self.fast_path.internal_changed
        self.fast_path.start()
        # The HTTPS listener is the core's too: it terminates TLS for a plain route's host
        # (with the certificate edge/fast_path.py pushed) and hands every other connection
        # over untouched, to edge/tls.py's listener (which reads its ClientHello as before).
        https = tls.HttpsListener(self, https_handle, [s.base_domain], self.serves_name)
        https_fd = self.settings.listen_fds.get("https")
        self.https_port = self.carrier.listen_public(
            functools.partial(self._https_connection, https, https_handle),
            "https",
            **http_io.listener_limits(s),
            handshake_timeout=https.handshake_timeout,
            **(
                {"fd": https_fd}
                if https_fd is not None
                else {"host": s.host, "port": s.https_port}
            ),
        )
        if s.ssh_port is not None:
            self.ssh = ssh_gateway.SshGateway(self)
            try:
                self.ssh_port = await self.ssh.start(s.host, s.ssh_port)
            except OSError as exc:
                raise SystemExit(
                    f"error: the SSH gateway's port {s.host}:{s.ssh_port} is in use "
                    f"({exc.strerror}); set EDGE_SSH_PORT to another port, or to off"
                ) from None
        if s.metrics_port is not None:
            self._servers.append(await metrics.start(self, s.host, s.metrics_port))
            self.metrics_port = self._servers[-1].sockets[0].getsockname()[1]
        self._checker = asyncio.ensure_future(self._check_loop())
        self._commander = asyncio.ensure_future(self._command_loop())
        self._watcher = asyncio.ensure_future(watch_reserved_ports(self))
        self._tls_watcher = asyncio.ensure_future(self.tls.watch())
        self._ban_watcher = asyncio.ensure_future(watch_banned_hosts(self))
        self._audit_outbox = audit_outbox.start(self)  # the API's events (docs/EVENTS.md)

    async def refresh_agent_ingresses(self) -> None:
        """The agent ingresses (chalicelib.core.ingresses: one Query) and their certificates on
        the agent listener, by SNI: the one issued under the ingress's own policy, else a
        stored certificate for the domain (a reserved domain's; edge.certs, read with the TLS
        settings), else one the local CA issues (or EDGE_TLS_CERT). The core's names are
        replaced only when what they serve changed."""
        index = await self.call(ingresses.index)
        pairs: Dict[str, Tuple[bytes, bytes]] = {}
        served: List[Tuple[str, str]] = []
        for domain in sorted(index):
            stored = self.certs.ingress_pair(domain) or self.certs.stored_pair(domain)
            if stored is not None:
                served.append((domain, stored[0]))
                pairs[domain] = stored[1]
            else:
                served.append((domain, "local CA"))
                pairs[domain] = self.certs.pair_for([domain])
        self.agent_ingresses = index
        if served != self._agent_names:
            self.carrier.set_names(self.agent_port, pairs)
            self._agent_names = served
            log.info("agent listener: %d agent ingress names", len(served))

    async def _public_connection(
        self,
        handle: Callable[..., Any],
        sock: socket.socket,
        data: bytes,
        first: bool,
        core_tls: Optional[CoreTls] = None,
        peer: Tuple[str, int] = ("", 0),
        local: Tuple[str, int] = ("", 0),
    ) -> None:
        """A connection of the public HTTP listener the core handed over, with the bytes it
        read from it: served by ``handle`` (edge/public.py) as if accepted here."""
        streams = await stream_pair(sock, data)
        if streams is not None:
            await handle(*streams)

    async def _https_connection(
        self,
        listener: tls.HttpsListener,
        handle: Callable[..., Any],
        sock: socket.socket,
        data: bytes,
        first: bool,
        core_tls: Optional[CoreTls],
        peer: Tuple[str, int],
        local: Tuple[str, int],
    ) -> None:
        """A connection of the HTTPS listener the core handed over: untouched (``core_tls``
        None: edge/tls.py's listener reads its ClientHello and does its TLS as if it had
        accepted it), or mid-way on a connection whose TLS the core terminated (the socket
        carries its plaintext, ``data`` the bytes read): served by ``handle`` with the
        handshake's facts."""
        loop = asyncio.get_running_loop()
        if core_tls is None:
            try:
                await loop.connect_accepted_socket(listener.protocol, sock)
            except OSError:
                sock.close()
            return
        streams = await stream_pair(sock, data)
        if streams is None:
            return
        reader, plain_writer = streams
        ssl_object = CoreTlsObject(
            core_tls.sni, core_tls.version, core_tls.cipher, core_tls.alpn, core_tls.client_cert
        )
        writer = CoreTlsWriter(
            plain_writer,
            peer,
            local,
            ssl_object,
            # what the core's handshake required: a Host that requires something else is
            # misdirected (edge/http_routing.py), as on any connection made for less
            self.fast_path.spec_numbered(core_tls.spec) if core_tls.spec else DEFAULT_TLS,
        )
        await handle(reader, writer)

    def serves_name(self, name: str) -> bool:
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
        self.carrier.close(self.agent_port)
        self.carrier.close(self.http_port)
        # the core's HTTP/2 connections: GOAWAY now, while their agents' sessions still serve
        # (Carrier.stop closes it too, after the sessions ended)
        self.carrier.close(self.https_port)
        self.fast_path.stop()
        for server in self._servers:
            server.close()
        if self.ssh is not None:
            self.ssh.close()
        if self._checker is not None:
            self._checker.cancel()
            self._commander.cancel()
            self._watcher.cancel()
            self._tls_watcher.cancel()
            self._ban_watcher.cancel()
            self._audit_outbox.cancel()
        for port in self.port_listeners:
            self.carrier.close(port)
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
        if self._lease is not None:
            self._lease.cancel()
            await self.call(instances.deregister, self.settings.instance_id)
        self.carrier.stop()

    # ---- agent sessions ---------------------------------------------------------------------
    @connection_handler
    async def _agent_connection(self, mux: MuxSession, facts: carrier.Handoff) -> None:
        """One agent connection, its TLS and muxado run by the core. Until it authenticates
        it counts against MAX_UNAUTHENTICATED_PER_ADDRESS and MAX_UNAUTHENTICATED (closed at
        once beyond them), and the core bounds what it may send (edge.session:
        PRE_AUTH_STREAMS, PRE_AUTH_BYTES)."""
        ip = facts.peer_ip
        if (
            self._unauthenticated.get(ip, 0) >= MAX_UNAUTHENTICATED_PER_ADDRESS
            or sum(self._unauthenticated.values()) >= MAX_UNAUTHENTICATED
        ):
            log.info("agent connection from %s refused: too many unauthenticated", ip)
            await mux.close()
            return
        self._unauthenticated[ip] = self._unauthenticated.get(ip, 0) + 1
        session = agents.AgentSession(self, mux, (ip, facts.peer_port), facts.sni or "")
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
        it); the TTLs due are pushed (edge/online_keeper.py: no write per session)."""
        while True:
            await asyncio.sleep(self.settings.check_seconds)
            sessions = [s for s in self._sessions if not s.ended]
            kept = await self._keep(
                [(s.granted.account_id, s.id) for s in sessions if s.is_online]
            )
            grants: Dict[str, binding.Grant] = {}
            for session in sessions:
                if session.grant is not None:
                    grants.setdefault(session.grant.credential_id, session.grant)
            fresh = dict(zip(grants, await self._recheck(list(grants.values()))))
            ending = []  # only the sessions that end get a task
            for s in sessions:
                try:
                    why = s.due_end(
                        fresh.get(s.grant.credential_id) if s.grant else None,
                        gone=s.id in kept.gone,
                    )
                except Exception as exc:
                    log.warning("session check failed for %s: %r", s.id, exc)
                    continue
                if why is not None:
                    ending.append((s, why))
            results = await asyncio.gather(
                *(s.end(*why) for s, why in ending), return_exceptions=True
            )
            for (session, _), result in zip(ending, results):
                if isinstance(result, Exception):
                    log.warning("session end failed for %s: %r", session.id, result)

    async def _keep(self, online_sessions: List[Any]) -> online_keeper.Round:
        """This round's TTL refreshes; none when the store could not be read."""
        try:
            result: online_keeper.Round = await self.call(self.keeper.check, online_sessions)
            return result
        except Exception as exc:
            log.warning("online check failed: %r", exc)
            return online_keeper.Round(set())

    async def _command_loop(self) -> None:
        """Every EDGE_COMMAND_POLL_SECONDS: the stop/restart commands written for this
        instance (one Query), each sent in a task of its own (an agent slow to answer delays
        no other command)."""
        while True:
            await asyncio.sleep(self.settings.command_poll_seconds)
            try:
                commands = await self.call(self.keeper.commands)
            except Exception as exc:  # the store away: the next round reads them
                log.warning("reading the commands failed: %r", exc)
                continue
            for command in commands:
                task = asyncio.ensure_future(self._command(command))
                self._commands.add(task)
                task.add_done_callback(self._commands.discard)

    async def _command(self, command: online.Command) -> None:
        """Send one command to its session's agent and write the outcome the API waits for
        (chalicelib.core.online.answer_command). A command whose answer could no longer reach
        the API in time (its deadline nearer than the agent's COMMAND_TIMEOUT plus
        COMMAND_MARGIN_SECONDS) is not sent: the API withdraws it and says so."""
        session = self.registry.sessions.get(command.session_id)
        late = command.deadline is not None and (
            online.now() + agents.COMMAND_TIMEOUT + online.COMMAND_MARGIN_SECONDS
            > command.deadline
        )
        if late:
            log.warning(
                "session %s: %s taken too late, not sent", command.session_id, command.command
            )
            outcome, error = "expired", ""
        elif (
            session is None
            or not session.is_online
            or session.grant is None
            or session.grant.account_id != command.account_id
        ):
            outcome, error = "gone", ""
        else:
            try:
                if command.command == "stop_endpoint":  # DELETE /endpoints/{id}: StopTunnel
                    outcome, error = await session.stop_endpoint(command.target), ""
                else:
                    outcome, error = await session.remote_command(command.command)
            except Exception as exc:  # never left unanswered: the API would wait its bound
                log.warning("session %s: %s failed: %r", command.session_id, command.command, exc)
                outcome, error = "refused", f"the edge could not send it ({exc})"
        try:
            await self.call(online.answer_command, command, outcome, error)
        except Exception as exc:  # the API, unanswered, withdraws the command and says so
            log.warning("session %s: answer not written: %r", command.session_id, exc)

    async def _recheck(self, grants: List[binding.Grant]) -> List[Any]:
        """Each grant read afresh, or the Refused that ends its sessions (one BatchGetItem per
        binding.RECHECK_BATCH credentials); all None when the store could not be read (the
        sessions keep running; the next round tries again)."""
        if not grants:
            return []
        try:
            return list(await self.call(binding.recheck_many, grants))
        except Exception as exc:
            log.warning("could not re-check %d credentials: %r", len(grants), exc)
            return [None] * len(grants)
