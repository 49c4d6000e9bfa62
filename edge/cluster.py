"""Many edge instances as one edge: the instance registry and the relay between instances.

Off unless ``EDGE_CLUSTER_SECRET`` is set (then a single instance costs nothing more). With it:

- the instance registers ``instance id -> relay address`` in the store
  (chalicelib.core.instances) and renews that lease every few seconds;
- it listens on ``EDGE_RELAY_HOST:EDGE_RELAY_PORT`` (127.0.0.1, any free port by default),
  the **relay listener**, separate from every public listener: a connection there must open
  with ``NGRELAY1 <secret> <kind> <arg> <client ip> <client port>\\r\\n`` (the secret compared
  in constant time; anything else is closed at once, nothing read past the first line); it
  answers ``HERE`` (it serves the connection) or ``MOVED`` (it no longer holds the endpoint:
  the relaying instance reads the claim again) before any byte of the client's is sent;
- a public connection whose endpoint this instance does not hold is carried to the instance
  that does: HTTP by the first request's Host, HTTPS by the handshake's server name (the
  relayed bytes are the decrypted stream; HTTP/2 when the client chose it), TCP by the
  port. The holder is the ``instance_id`` of the name's (or ``host:port``'s) live claim;
  the holder then serves the connection exactly as one of its own public connections (same
  policy, same error bodies), so the relaying instance only copies bytes, with TCP
  back-pressure both ways (StreamReader limits, ``drain``).

A relayed connection is never relayed again (one hop at most): an instance that is named by
the claim but no longer holds the endpoint answers as for any offline endpoint.
"""

import asyncio
import functools
import hmac
import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from chalicelib.core import instances, online, pooling
from edge import http_io, pools
from edge.connections import stream_pair
from edge.designation import designate, not_refused, rate_limited
from edge.group_spread import GroupSpread
from edge.session import MuxSession
from edge.tls_spec import DEFAULT as DEFAULT_TLS

log = logging.getLogger("edge.cluster")

PREAMBLE = b"NGRELAY1"
CLOUD_KINDS = ("chttp", "chttps", "ch2")  # a designated cloud endpoint's relayed connection
GROUP_KINDS = ("ghttp", "ghttps", "gh2", "gtcp")  # an HTTPS or TCP edge's (group_spread.py)
ACK_HERE = b"HERE\r\n"  # the holder serves the connection
ACK_MOVED = b"MOVED\r\n"  # it no longer holds the endpoint: the claim is read again
MAX_PREAMBLE = 512  # bytes of the relay line (closed past it)
PREAMBLE_TIMEOUT = 10.0  # seconds for the relay line
CONNECT_TIMEOUT = 5.0  # seconds to open a relay connection to the holder
HOLDER_CACHE_SECONDS = 2.0  # a name's holder, cached (a moved endpoint is found within it)
MAX_PEEK = 64 * 1024  # bytes of the first request head read to find its Host
CHUNK = 64 * 1024
HOLD_SECONDS = 15.0  # a connection waits this long for a moving endpoint
HOLD_POLL = 0.25
DRAIN_SECONDS = 5.0  # SIGTERM: longest wait for in-flight requests
REBIND_GRACE = 2.0  # ... then for the agents' re-binds before the items go              # seconds between the store reads while it waits
_HOST = re.compile(rb"\r\nhost:[ \t]*([^\r\n]*)", re.IGNORECASE)


@dataclass(frozen=True)
class ClusterSettings:
    secret: str
    relay_host: str
    relay_port: int
    advertise: str  # host the other instances reach this one's relay listener at

    @classmethod
    def from_env(cls, env: Optional[Dict[str, str]] = None) -> Optional["ClusterSettings"]:
        env = dict(os.environ) if env is None else env
        secret = env.get("EDGE_CLUSTER_SECRET", "")
        if not secret:
            return None
        if len(secret) < 16:
            raise SystemExit("EDGE_CLUSTER_SECRET: at least 16 characters")
        host = env.get("EDGE_RELAY_HOST", "127.0.0.1")
        return cls(
            secret=secret,
            relay_host=host,
            relay_port=int(env.get("EDGE_RELAY_PORT", "0")),
            advertise=env.get("EDGE_RELAY_ADVERTISE", host),
        )


class _RelayedWriter:
    """A relay listener's writer as the serving code sees it: the original client's address
    (from the relay line), and the TLS settings of the name it was handshaken for."""

    relayed = True

    def __init__(self, writer: asyncio.StreamWriter, peer: Tuple[str, int], tls_spec: Any = None):
        self._writer = writer
        self._peer = peer
        if tls_spec is not None:
            self.tls_spec = tls_spec

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peer
        if name in ("ssl_object", "sslcontext", "peercert"):
            return default
        return self._writer.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


class Cluster:
    def __init__(self, edge: Any, settings: ClusterSettings):
        self.edge = edge
        self.settings = settings
        self.instance_id = edge.settings.instance_id
        self.address = ""
        self.draining = False
        # the core's listeners that serve relayed connections by scheme (listen_adopting)
        self.adopting: Dict[str, int] = {}
        self._relay_port: Optional[int] = None  # the relay listener's (the core's)
        self._lease: Optional[asyncio.Task] = None
        self._holders: Dict[str, Tuple[float, Optional[str]]] = {}  # name -> (at, address)
        self._cloud_names: set = set()  # cloud endpoints relayed to their designated instance
        self._ended: List[Tuple[str, str]] = []  # sessions a drain ended (defer_end)
        self._dead: Dict[str, float] = {}  # relay addresses that refused (kill -9), when
        self.relayed_out = 0
        self.held = 0
        self.relayed_in = 0
        self.groups = GroupSpread(edge, self.instance_id)  # edge/group_spread.py

    # ---- life ---------------------------------------------------------------------------
    async def start(self) -> None:
        """The relay listener (the compiled core's: edge_core/src/relay.rs) and its adopting
        listener, then the instance's registry item and its lease."""
        s, es, carrier = self.settings, self.edge.settings, self.edge.carrier
        adopters = []
        for scheme in ("http", "https"):  # relayed HTTP(S/1.1) connections, served by the core
            adopters.append(
                carrier.listen_adopting(
                    functools.partial(self.handed_back, scheme),
                    scheme,
                    **http_io.listener_limits(es),
                )
            )
        self.adopting = {"http": adopters[0], "https": adopters[1]}
        port = carrier.listen_relay(
            self._relay_handed,
            s.secret.encode(),
            (adopters[0], adopters[1]),
            PREAMBLE_TIMEOUT,
            s.relay_host,
            s.relay_port,
        )
        self._relay_port = port
        self.address = f"{s.advertise}:{port}"
        await self.edge.call(instances.register, self.instance_id, self.address)
        self._lease = asyncio.ensure_future(self._renew())
        log.info("cluster: instance %s relays at %s", self.instance_id, self.address)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(instances.renew_seconds())
            try:
                await self.edge.call(
                    instances.register,
                    self.instance_id,
                    self.address,
                    "draining" if self.draining else "serving",
                )
            except Exception as exc:  # the store away: the next round tries again
                log.warning("cluster: lease renewal failed: %r", exc)

    async def drain(self) -> None:
        """Stop being a relay target (other instances stop sending it connections)."""
        self.draining = True
        try:
            await self.edge.call(instances.register, self.instance_id, self.address, "draining")
        except Exception as exc:
            log.warning("cluster: could not mark the instance draining: %r", exc)

    async def drain_sessions(self) -> None:
        """SIGTERM in a cluster (the listeners are closed already): marked draining, so the
        other instances hold connections for its endpoints instead of relaying here; then
        each agent session, as soon as no request is in flight on it (at most
        DRAIN_SECONDS), gets GOAWAY, which the official agents answer by reconnecting
        (through the load balancer: to another instance) and binding the same tunnels
        again. The sessions' claims are kept (keep_claims) for those re-binds to take over."""
        await self.drain()
        loop = asyncio.get_running_loop()
        # Connections routed here before "draining" was written (other instances' holder
        # caches, HAProxy's last connects) arrive within HOLDER_CACHE_SECONDS: they are
        # served by the sessions still up, whose agents are asked to move only after.
        await asyncio.sleep(HOLDER_CACHE_SECONDS + 0.5)
        deadline = loop.time() + DRAIN_SECONDS

        async def drain_one(session: Any) -> None:
            idle_since = loop.time()
            while loop.time() < deadline:  # idle for 100 ms running
                if in_flight(session):
                    idle_since = loop.time()
                elif loop.time() - idle_since >= 0.1:
                    break
                await asyncio.sleep(0.02)
            await session.end("the edge instance is restarting; reconnect")

        results = await asyncio.gather(
            *(drain_one(s) for s in list(self.edge.sessions)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                log.warning("cluster: drain of a session failed: %r", result)
        left = [t for t in self.edge.connections if t is not asyncio.current_task()]
        while left and loop.time() < deadline:  # relayed and public exchanges finishing
            await asyncio.sleep(0.05)
            left = [t for t in left if not t.done()]
        if self._ended:
            await asyncio.sleep(max(0.0, min(REBIND_GRACE, deadline + 1 - loop.time())))
        for account_id, session_id in self._ended:
            try:  # the agent resumed the same session id elsewhere: its items are that one's
                await self.edge.call(self._session_ended_here, account_id, session_id)
            except Exception as exc:  # stale after ONLINE_STALE_SECONDS all the same
                log.warning("cluster: session %s not removed: %r", session_id, exc)

    def defer_end(self, account_id: str, session_id: str) -> bool:
        """While draining, a session's online items are removed only at the end of the
        drain (REBIND_GRACE later): online.session_ended removes only what the session
        still owns, so what the agent's new session re-bound meanwhile is left alone."""
        if self.draining:
            self._ended.append((account_id, session_id))
        return self.draining

    def _session_ended_here(self, account_id: str, session_id: str) -> None:
        if online.session_instance(account_id, session_id) == self.instance_id:
            online.session_ended(account_id, session_id, self.instance_id)

    def keep_claims(self) -> bool:
        """A draining instance keeps the claims of the sessions it ends (their agents are
        reconnecting elsewhere and take them over)."""
        return self.draining

    async def stop(self) -> None:
        if self._lease is not None:
            self._lease.cancel()
        if self._relay_port is not None:
            self.edge.carrier.close(self._relay_port)
        try:
            await self.edge.call(instances.deregister, self.instance_id)
        except Exception as exc:
            log.warning("cluster: could not deregister: %r", exc)

    # ---- finding the holder --------------------------------------------------------------
    async def _lookup(self, name: str) -> Tuple[str, Optional[str]]:
        """Where ``name`` is served: ("local", None) when no other instance claims it (no
        claim item: this instance answers, offline if it holds nothing); ("relay", address)
        when a serving instance holds its claim; a cloud endpoint's claim (held by the API,
        served by every instance from the store): see :meth:`_designated`; ("moving", None)
        when the claim names an instance that drains or died (its agent is reconnecting
        elsewhere: its lease ended, or its relay address refused a connection since its
        last renewal, as :meth:`refused` and ``designation.not_refused`` count it), or this
        one while the endpoint is not routed here yet (a bind in progress)."""
        instance = await self.edge.call(online.claim_instance, name)
        if not instance:
            return "local", None
        if instance == pooling.API_INSTANCE:  # a cloud endpoint's claim (the API holds it)
            return await self._designated(name)
        if instance == self.instance_id:  # claimed here, bind still in progress (the
            return "moving", None  # claim is written before the tunnel is routed)
        lease = await self.edge.call(instances.lease_of, instance)
        if lease is None:
            return "moving", None
        address, renewed_at = lease
        refused = self.refused().get(address)
        if refused is not None and renewed_at <= refused:
            return "moving", None  # refused since its last renewal: killed, lease not ended
        return "relay", address

    async def _designated(self, name: str) -> Tuple[str, Optional[str]]:
        """A cloud endpoint is served by the instance its connection lands on, unless its
        traffic policy has a ``rate-limit`` action: then by one instance, the same for every
        instance (:func:`designate` over the serving instances), so that its counters see
        every request and the limit is exact across the cluster, as an agent endpoint's is
        on the instance holding it. Two store reads (the claim's copy of the endpoint, the
        registry), cached with the holder (HOLDER_CACHE_SECONDS)."""
        cloud = await self.edge.call(online.cloud_endpoint_for, name)
        if not cloud or not rate_limited(cloud.get("traffic_policy")):
            return "local", None
        live = await self.edge.call(instances.live_instances)
        chosen = designate(name, not_refused(live, self.refused()))
        if chosen is None or chosen["instance_id"] == self.instance_id:
            return "local", None
        if len(self._cloud_names) > 4096:
            self._cloud_names.clear()
        self._cloud_names.add(name)
        return "relay", chosen["address"]

    def refused(self) -> Dict[str, float]:
        """Relay addresses that refused a connection within HOLD_SECONDS (an instance killed
        with -9 whose lease has not ended yet), with when (epoch seconds): no designation names
        them meanwhile, unless their lease was renewed since (``designation.not_refused``)."""
        now, wall = time.monotonic(), time.time()
        return {a: wall - (now - at) for a, at in self._dead.items() if now - at < HOLD_SECONDS}

    async def holder_address(self, name: str, local: Callable[[], bool]) -> Optional[str]:
        """The relay address of the other instance holding ``name``'s claim, or None (served
        here). Cached HOLDER_CACHE_SECONDS. While the claim names an instance that drains or
        died, the connection waits (up to HOLD_SECONDS, the store read every HOLD_POLL) for
        the agent's reconnect to move the claim, instead of being answered offline;
        ``local()`` says whether the endpoint came back on this very instance."""
        now = time.monotonic()
        cached = self._holders.get(name)
        if cached is not None and now - cached[0] < HOLDER_CACHE_SECONDS:
            return cached[1]
        deadline = now + HOLD_SECONDS
        address: Optional[str] = None
        while True:
            try:
                state, address = await self._lookup(name)
            except Exception as exc:  # the store away: served here (offline answer)
                log.warning("cluster: holder of %s unknown: %r", name, exc)
                state, address = "local", None
            if state != "moving" or local() or time.monotonic() >= deadline:
                break
            self.held += 1
            await asyncio.sleep(HOLD_POLL)
        if state == "moving":
            address = None
        if len(self._holders) > 4096:
            self._holders.clear()
        if state != "moving":
            self._holders[name] = (time.monotonic(), address)
        return address

    # ---- relaying out ----------------------------------------------------------------------
    async def relay(
        self,
        address: str,
        kind: str,
        arg: str,
        peer: Tuple[str, int],
        reader: asyncio.StreamReader,
        writer: Any,
        first: bytes = b"",
        learn: bool = False,
    ) -> bool:
        """Carry a public connection to the instance at ``address``: False when it cannot
        be reached (the caller serves the connection itself). ``learn``: once the holder
        answered HERE, the core relays the name's next connections itself for
        HOLDER_CACHE_SECONDS (``FastPath.relay``: HTTP, and HTTPS over HTTP/1.1)."""
        host, _, port = address.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), limit=CHUNK), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError) as exc:
            log.warning("cluster: relay to %s failed: %r", address, exc)
            if len(self._dead) > 4096:
                self._dead.clear()
            self._dead[address] = time.monotonic()
            self._holders.clear()
            return False
        start = self._line_start(kind, arg)
        line = b" ".join([start, str(peer[0] or "-").encode(), str(peer[1] or 0).encode()])
        line += b"\r\n"
        up_writer.write(line)
        try:  # the holder says whether it still holds the endpoint before any byte goes
            ack = await asyncio.wait_for(up_reader.readuntil(b"\r\n"), CONNECT_TIMEOUT)
        except (
            OSError,
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            ack = b""
        if ack != ACK_HERE:  # moved away meanwhile (it drains, its agent reconnects)
            up_writer.close()
            self._holders.clear()
            return False
        self.relayed_out += 1
        if learn and kind in ("http", "https"):
            self.edge.fast_path.relay(arg, kind, address, start, HOLDER_CACHE_SECONDS)
        try:
            if http_io.detachable(writer) and http_io.detachable(up_writer):
                await self._relay_in_core(reader, writer, up_reader, up_writer, first)
            else:  # TLS this instance terminated: decrypted here, relayed by Python
                up_writer.write(first)
                await pipe(reader, writer, up_reader, up_writer)
        finally:
            writer.close()
            up_writer.close()
        return True

    def _line_start(self, kind: str, arg: str) -> bytes:
        """The relay line up to the client's address."""
        return b" ".join(
            [PREAMBLE, self.settings.secret.encode(), kind.encode(), (arg or "-").encode()]
        )

    async def _relay_in_core(
        self,
        reader: asyncio.StreamReader,
        writer: Any,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        first: bytes,
    ) -> None:
        """Both connections' bytes carried by the compiled core (``Carrier.relay``), each
        side's bytes already read here sent on first: no byte of the relayed connection
        passes through the interpreter from then on."""
        client = await http_io.detach(reader, writer)
        if client is None:
            return
        up = await http_io.detach(up_reader, up_writer)
        if up is None:
            client[0].close()
            return
        try:
            await self.edge.carrier.relay(client[0], up[0], first + client[1], up[1])
        except OSError as exc:  # the core could not take them (closed with the sockets)
            log.warning("cluster: relay not carried: %r", exc)
            client[0].close()
            up[0].close()

    async def http(
        self,
        handle: Callable[..., Awaitable[None]],
        scheme: str,
        reader: asyncio.StreamReader,
        writer: Any,
    ) -> None:
        """The public HTTP listener in a cluster: the first request's Host decides where
        the connection is served (this instance, or the holder's by relay)."""
        peer = writer.get_extra_info("peername") or ("", 0)
        admission = self.edge.admission  # the head is awaited under the same caps as
        ticket = admission.admit(str(peer[0]), writer.transport)  # HttpFront's
        if ticket is None:
            writer.transport.abort()
            return
        try:
            admission.waiting(ticket)  # evictable while no byte of a request came
            head = await self._first_head(reader)
        finally:
            admission.release(ticket)  # HttpFront.handle, or the holder, admits it again
        host = host_of(head)
        pooled = await pools.carry(self, host, "http", reader, writer, head) if host else None
        if pooled:  # a pool's member on another instance took it (edge/pools.py)
            return
        if pooled is False:  # a pool's member here serves it
            host = ""
        if host and await self._carry(
            host,
            lambda: self.edge.registry.http_tunnel(host, scheme) is not None,
            scheme,
            host,
            reader,
            writer,
            head,
        ):
            return
        if host and head and await self._spread(scheme, host, head, peer, reader, writer):
            return
        if head:
            reader._buffer[0:0] = head  # type: ignore[attr-defined]  # unread: served here
        await handle(reader, writer)

    async def _first_head(self, reader: asyncio.StreamReader) -> bytes:
        """The first request's head (through its blank line), what came before the client
        closed, or b"" after ``head_timeout``, an over-long head or a socket error."""
        try:
            return await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), self.edge.settings.head_timeout
            )
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except (asyncio.LimitOverrunError, asyncio.TimeoutError, OSError):
            return b""

    async def _spread(
        self, scheme: str, host: str, head: bytes, peer: Any, reader: Any, writer: Any
    ) -> bool:
        """An HTTPS edge's connection relayed to its designated instance (a route of it
        rate-limits) or to the instance of the labeled tunnel picked for it
        (edge/group_spread.py): True when relayed."""
        if self.edge.registry.http_tunnel(host, scheme) is not None:
            return False
        try:
            decided, address = await self.groups.designated(host, self.refused())
            if not decided:
                address = await self.groups.target(host, head)
        except Exception as exc:  # the store away: served here
            log.warning("cluster: tunnel group of %s unknown: %r", host, exc)
            return False
        if address is None:
            return False
        relayed = await self.relay(address, "g" + scheme, host, peer, reader, writer, head)
        if decided:
            self.groups.designated_out += relayed
        else:
            self.groups.spread_out += relayed
        return relayed

    async def https(
        self, handle: Callable[..., Awaitable[None]], reader: asyncio.StreamReader, writer: Any
    ) -> None:
        """The HTTPS listener (after the handshake) in a cluster: the server name decides."""
        name = getattr(writer, "server_name", "") or ""
        ssl_object = writer.get_extra_info("ssl_object")
        kind = (
            "h2"
            if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"
            else "https"
        )
        pooled = await pools.carry(self, name, kind, reader, writer) if name else None
        if pooled:  # a pool's member on another instance took it (edge/pools.py)
            return
        if pooled is False:  # a pool's member here serves it
            name = ""
        if name and await self._carry(
            name,
            lambda: self.edge.registry.http_tunnel(name, "https") is not None,
            kind,
            name,
            reader,
            writer,
        ):
            return
        if name and await self._edge_connection(kind, name, reader, writer):
            return
        await handle(reader, writer)

    async def _edge_connection(
        self, kind: str, name: str, reader: asyncio.StreamReader, writer: Any
    ) -> bool:
        """An HTTPS connection for an HTTPS edge's hostname (edge/group_spread.py): relayed
        (True) to the edge's designated instance when a route of it rate-limits, else,
        HTTP/2, to the instance of a labeled tunnel picked for the connection, else,
        HTTP/1.1, to the one picked for its first request's route; False: served here."""
        if self.edge.registry.http_tunnel(name, "https") is not None:
            return False
        peer = writer.get_extra_info("peername") or ("", 0)
        try:
            decided, address = await self.groups.designated(name, self.refused())
            if not decided and kind == "h2":
                address = await self.groups.target_h2(name)
        except Exception as exc:  # the store away: served here
            log.warning("cluster: edge of %s unknown: %r", name, exc)
            return False
        if decided or kind == "h2":
            if address is None:
                return False
            relayed = await self.relay(address, "g" + kind, name, peer, reader, writer)
            if decided:
                self.groups.designated_out += relayed
            else:
                self.groups.spread_out += relayed
            return relayed
        if not await self._has_groups(name):
            return False
        head = await self._first_head(reader)  # its route decides (group_spread.py)
        if head and await self._spread("https", name, head, peer, reader, writer):
            return True
        if head:
            reader._buffer[0:0] = head  # type: ignore[attr-defined]  # served here
        return False

    async def _has_groups(self, name: str) -> bool:
        if self.edge.registry.http_tunnel(name, "https") is not None:
            return False
        try:
            return await self.groups.has_groups(name)
        except Exception as exc:
            log.warning("cluster: routes of %s unknown: %r", name, exc)
            return False

    async def tcp(self, port: int, reader: asyncio.StreamReader, writer: Any) -> bool:
        """A TCP port's connection this instance holds no endpoint for: relayed (True) to
        the holder of ``<tcp host>:<port>``'s claim, if another instance holds it."""
        if getattr(writer, "relayed", False):
            return False
        hostport = f"{self.edge.settings.tcp_host}:{port}"
        if await self._carry(
            hostport,
            lambda: port in self.edge.registry.by_port,
            "tcp",
            str(port),
            reader,
            writer,
        ):
            return True
        try:  # a TCP edge's: the instance of a labeled tunnel picked for it (group_spread.py)
            address = await self.groups.target_tcp(hostport)
        except Exception as exc:  # the store away: served here
            log.warning("cluster: tunnel group of %s unknown: %r", hostport, exc)
            return False
        if address is None or port in self.edge.registry.by_port:
            return False
        peer = writer.get_extra_info("peername") or ("", 0)
        relayed = await self.relay(address, "gtcp", str(port), peer, reader, writer)
        self.groups.spread_out += relayed
        return relayed

    async def _carry(
        self,
        name: str,
        local: Callable[[], bool],
        kind: str,
        arg: str,
        reader: asyncio.StreamReader,
        writer: Any,
        first: bytes = b"",
    ) -> bool:
        """Relay the connection to ``name``'s holder (True), or False: served here."""
        peer = writer.get_extra_info("peername") or ("", 0)
        for _ in range(3):  # a holder that refuses is skipped: the claim is waited on
            if local():
                return False
            address = await self.holder_address(name, local)
            if address is None:
                return False
            sent = "c" + kind if name in self._cloud_names else kind  # see _holds
            if await self.relay(address, sent, arg, peer, reader, writer, first, learn=True):
                return True
        return False

    # ---- relaying in -----------------------------------------------------------------------
    async def _relay_handed(
        self,
        sock: socket.socket,
        data: bytes,
        first: bool,
        tls: Any = None,
        peer: Tuple[str, int] = ("", 0),
        local: Tuple[str, int] = ("", 0),
    ) -> None:
        """A relay listener's connection the core did not take (edge_core/src/relay.rs: not a
        right line, not an HTTP one for a host with a plain route, at a cap), with the bytes
        it read, its line among them: Python's rules, as for one accepted here."""
        streams = await stream_pair(sock, data)
        if streams is not None:
            await self._relay_connection(*streams)

    async def _relay_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        self.edge.connections.add(task)
        try:
            try:
                line = await asyncio.wait_for(_read_line(reader), PREAMBLE_TIMEOUT)
            except (asyncio.TimeoutError, OSError):
                line = b""
            parts = line.split()
            if (
                len(parts) != 6
                or parts[0] != PREAMBLE
                or not hmac.compare_digest(parts[1], self.settings.secret.encode())
            ):
                log.warning(
                    "cluster: relay connection refused (bad preamble) from %s",
                    writer.get_extra_info("peername"),
                )
                writer.transport.abort()
                return
            kind, arg = parts[2].decode("ascii", "replace"), parts[3].decode("ascii", "replace")
            try:
                peer = (parts[4].decode("ascii"), int(parts[5]))
            except ValueError:
                writer.transport.abort()
                return
            if not 0 <= peer[1] <= 65535:
                writer.transport.abort()
                return
            if not self._holds(kind, arg):
                writer.write(ACK_MOVED)
                writer.close()
                return
            writer.write(ACK_HERE)
            self.relayed_in += 1
            await self._serve(kind, arg, peer, reader, writer)
        finally:
            self.edge.connections.discard(task)

    def _holds(self, kind: str, arg: str) -> bool:
        registry = self.edge.registry
        if kind == "gtcp":  # a TCP edge's connection: served on its port here
            return arg.isdigit()
        if kind in GROUP_KINDS:  # an HTTPS edge's connection: its route decides
            return True
        if kind in CLOUD_KINDS:  # a rate-limited cloud endpoint's: every instance serves it
            return True
        if kind == "tcp":
            return arg.isdigit() and int(arg) in registry.by_port
        return registry.http_tunnel(arg, "http" if kind == "http" else "https") is not None

    async def _serve(
        self,
        kind: str,
        arg: str,
        peer: Tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        from edge import h2front
        from edge.public import HttpFront

        edge = self.edge
        kind = kind[1:] if kind in GROUP_KINDS or kind in CLOUD_KINDS else kind
        adopting = self.adopting.get(kind)  # http, https (HTTP/1.1 over TLS the relaying
        if kind == "https" and edge.tls.spec_for(arg).key != DEFAULT_TLS.key:  # terminated)
            adopting = None  # the name's own TLS settings: Python checks requests against them
        if adopting is not None and http_io.detachable(writer):
            detached = await http_io.detach(reader, writer)  # the core serves it from here,
            if detached is not None:  # as one of its public listener's own connections
                edge.carrier.adopt(adopting, detached[0], peer, detached[1])
        elif kind == "http":
            await HttpFront(edge, "http").handle(reader, _RelayedWriter(writer, peer))
        elif kind in ("https", "h2"):
            # what the relaying instance's handshake required: the settings every instance
            # reads, not this endpoint's own mutual TLS option (that instance could not know
            # it, and asked for no certificate): a request for such a name is misdirected
            # (421) rather than served past a handshake that did not check it
            relayed: Any = _RelayedWriter(writer, peer, edge.tls.shared_spec_for(arg))
            if kind == "h2":
                await h2front.H2Server(edge, reader, relayed).run()
            else:
                await HttpFront(edge, "https").handle(reader, relayed)
        elif kind == "tcp" and arg.isdigit() and http_io.detachable(writer):
            local = writer.get_extra_info("sockname") or ("", 0)
            detached = await http_io.detach(reader, writer)  # decided here, carried by the core
            if detached is not None:
                await edge.tcp.relayed_in(int(arg), detached[0], detached[1], peer, local)
        elif kind == "tcp" and arg.isdigit():
            await edge.tcp.connection(int(arg), reader, _RelayedWriter(writer, peer))
        else:
            writer.transport.abort()

    async def handed_back(
        self,
        scheme: str,
        sock: socket.socket,
        data: bytes,
        first: bool,
        tls: Any = None,
        peer: Tuple[str, int] = ("", 0),
        local: Tuple[str, int] = ("", 0),
    ) -> None:
        """A relayed connection the core's adopting listener of ``scheme`` hands back (a
        request it does not serve itself), with the bytes it read: Python's HTTP path serves
        the rest, as for a relayed connection it took whole (never relayed again). HTTPS: the
        name it was handshaken for asked nothing more of TLS (the core adopts a connection
        only for a name with a plain route), so its settings are the default's."""
        from edge.public import HttpFront

        streams = await stream_pair(sock, data)
        if streams is not None:
            spec = DEFAULT_TLS if scheme == "https" else None
            await HttpFront(self.edge, scheme).handle(
                streams[0], _RelayedWriter(streams[1], peer, spec)
            )


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """The relay line (without its CRLF), or b"" when the peer closed or sent MAX_PREAMBLE
    bytes without one. The sender waits for the answer before sending more, so nothing
    follows the line; anything that does is put back for the connection's reader."""
    line = b""
    while b"\r\n" not in line:
        if len(line) >= MAX_PREAMBLE:
            return b""
        data = await reader.read(MAX_PREAMBLE - len(line))
        if not data:
            return b""
        line += data
    head, _, rest = line.partition(b"\r\n")
    if rest:
        reader._buffer[0:0] = rest  # type: ignore[attr-defined]
    return head


def in_flight(session: Any) -> int:
    """Proxy streams the edge opened on ``session`` that are still in its table: Python's
    and those the core opened for the requests it serves itself (edge/fast_path.py); the
    agent's own streams, its heartbeat stream among them, do not count. An OpenSSH
    session's forwarded channels are not counted (its drain is its own)."""
    mux = getattr(session, "mux", None)
    return mux.local_open if isinstance(mux, MuxSession) else 0


def host_of(head: bytes) -> str:
    """The lower-cased host (no port) of a request head's Host header ("" when none)."""
    match = _HOST.search(head)
    if match is None:
        return ""
    host = match.group(1).strip().decode("ascii", "replace").lower()
    if host.startswith("["):
        return host
    return host.rsplit(":", 1)[0] if ":" in host else host


async def pipe(
    reader: asyncio.StreamReader,
    writer: Any,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Bytes both ways until both directions end (each half-closed in turn), or either side
    fails; ``drain`` after every write is the back-pressure."""

    async def copy(src: asyncio.StreamReader, dst: Any) -> None:
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    break
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except (ConnectionError, OSError, RuntimeError):
            raise ConnectionError("relay side closed") from None

    tasks = [
        asyncio.ensure_future(copy(reader, up_writer)),
        asyncio.ensure_future(copy(up_reader, writer)),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                break
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        up_writer.close()
