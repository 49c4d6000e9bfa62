"""The seam between the edge's rules and its compiled core (``edge_core``, built from
edge_core/ by ``make install``): the core carries bytes, this process decides.

What the core carries: the agent listener, the public HTTP and HTTPS listeners (below,
``listen_public``) and every connection Python sent on to an agent's stream once it decided
where it goes (``splice``: a TCP endpoint's, a TLS passthrough, an upgraded HTTP/1.1
connection). The agent listener accepts each connection, completes its
TLS handshake on the core's own threads (rustls; at most ``max_handshakes`` at once, each
within ``handshake_timeout``) and runs the agent's muxado session (edge_core/src/mux.rs):
framing, flow control, the stream table and its bounds. The edge gets the session
(:class:`edge.session.MuxSession`, with the connection's facts: :class:`Handoff`) and its
streams' bytes, and decides everything else. Nothing crosses per frame or per TLS record, and
the core's threads never call Python: new sessions and the sessions' events (a stream opened,
data for a reader that waits, credit for a writer that waits, a slot back, the end) wait in
the core's inbox, whose wake-up descriptor this module watches on the event loop, and are
taken in batches (docs/DATA_PLANE.md, "The compiled core").
"""

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import edge_core
from edge import session, tls_spec

log = logging.getLogger("edge.carrier")

HANDSHAKE_TIMEOUT = 15.0  # seconds a TLS handshake may take (as the asyncio listener had)
MAX_HANDSHAKES = 1024  # handshakes in progress at once per listener; beyond: closed at once
# bytes of a request's body the core reads for a decision at most (decide_body; decide.rs)
BODY_READ_MAX: int = edge_core.BODY_READ_MAX
# seconds the core reads a request's body for a decision at most, in all (each read within the
# body timeout too)
BODY_READ_SECONDS: float = edge_core.BODY_READ_SECONDS


def proxy_protocol_header(version: int, client_addr: str, server_addr: str) -> bytes:
    """The PROXY protocol header (edge_core/src/proxyproto.rs, the edge's one implementation)
    of ``version`` for a connection from ``client_addr`` to ``server_addr``."""
    return bytes(edge_core.proxy_protocol_header(version, client_addr, server_addr))


@dataclass(frozen=True)
class Handoff:
    """What the core knows of a connection it hands over."""

    peer_ip: str
    peer_port: int
    sni: Optional[str]
    alpn: Optional[bytes]


Handler = Callable[[session.MuxSession, Handoff], Awaitable[None]]


@dataclass(frozen=True)
class CoreTls:
    """What the TLS handshake of a connection the core terminated agreed, in OpenSSL's
    names (as Python's own handshakes report them)."""

    sni: str
    version: str
    cipher: str
    alpn: Optional[bytes]
    spec: int = 0  # the number of what the handshake required (set_cert's; 0: the default)
    client_cert: Optional[bytes] = None  # the client certificate it verified (DER)


# A public connection the core hands over: the socket, the bytes it read from it (a request
# head it did not serve, or part of one), whether a request was served on it before, and None
# (the client's own socket; on the HTTPS listener its ClientHello still unread) or the TLS the
# core goes on carrying (the socket is a Unix socket carrying its plaintext both ways), the
# client's (address, port) and the listener's.
PublicHandler = Callable[
    [socket.socket, bytes, bool, Optional[CoreTls], Tuple[str, int], Tuple[str, int]],
    Awaitable[None],
]
# The requests the core served since the last batch (edge/fast_path.py records them).
ServedHandler = Callable[[List[tuple]], None]
# The decided routes' requests waiting for a decision (edge/decided.py decides them).
AskedHandler = Callable[[List[tuple]], None]


@dataclass(frozen=True)
class PublicCounters:
    served: int  # requests the core served itself
    handed: int  # connections handed to Python (a request the core does not serve)
    refused: int  # closed at once: at a connection cap with none waiting to evict
    evicted: int  # closed to make room: waiting for a head the longest at a cap
    held: int  # public connections the core holds now
    failed_handshakes: int  # TLS handshakes of the HTTPS listener that failed or timed out


@dataclass(frozen=True)
class Counters:
    handshakes: int  # in progress
    sessions: int  # agent sessions running in the core
    refused: int  # closed at once: MAX_HANDSHAKES were in progress
    failed_handshakes: int  # bad, or not done within HANDSHAKE_TIMEOUT


class Carrier:
    """The core of one edge process, the handlers of its listeners and its live sessions."""

    def __init__(self, threads: int = 0):
        self._core = edge_core.Core(threads)
        self._handlers: Dict[int, Handler] = {}  # listener id -> handler
        self._by_port: Dict[int, int] = {}  # port -> listener id
        self._sessions: Dict[int, session.MuxSession] = {}  # the core's key -> session
        self._public: Dict[int, PublicHandler] = {}  # public listener id -> handler
        self.on_served: Optional[ServedHandler] = None
        self.on_asked: Optional[AskedHandler] = None
        self.on_responses: Optional[AskedHandler] = None  # their response heads
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._splices: Dict[int, asyncio.Future] = {}  # splice id -> its end's (in, out)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._core.wake_fd, self._take)

    def stop(self) -> None:
        for port in list(self._by_port):
            self.close(port)
        if self._loop is not None:
            self._loop.remove_reader(self._core.wake_fd)
            self._loop = None

    def listen_agents(
        self,
        handler: Handler,
        chain_pem: bytes,
        key_pem: bytes,
        alpn: List[bytes],
        *,
        host: Optional[str] = None,
        port: int = 0,
        fd: Optional[int] = None,
    ) -> int:
        """Serve agents on (host, port), or on the listening socket ``fd`` (the core owns it
        from then on); ``handler`` gets each connection's session. Returns the port."""
        listener, bound = self._core.listen_agents(
            chain_pem,
            key_pem,
            alpn,
            session.limits(),
            host=host,
            port=port,
            fd=fd,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            max_handshakes=MAX_HANDSHAKES,
        )
        self._handlers[listener] = handler
        self._by_port[bound] = listener
        return bound

    def listen_public(
        self,
        handler: PublicHandler,
        scheme: str,
        *,
        head_timeout: float,
        idle_timeout: float,
        body_timeout: float,
        fresh_stream_body: int,
        max_total: int,
        max_per_address: int,
        host: Optional[str] = None,
        port: int = 0,
        fd: Optional[int] = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        h2_stall_timeout: float = 30.0,
    ) -> int:
        """A public listener in the core (edge_core/src/public.rs): it accepts, reads each
        request head and serves a request whose host has a plain route (``set_route``);
        every other connection goes to ``handler`` with the bytes read. ``scheme`` "https"
        (edge_core/src/https.rs): a connection whose ClientHello names a host with a route
        is terminated in the core with the route's certificate (HTTP/1.1, or HTTP/2 with
        each stream served as an HTTP/1.1 request: edge_core/src/h2front.rs, a response
        that cannot move for ``h2_stall_timeout`` reset); every other connection goes to
        ``handler`` untouched. Returns the port."""
        listener, bound = self._core.listen_public(
            scheme,
            head_timeout=head_timeout,
            idle_timeout=idle_timeout,
            body_timeout=body_timeout,
            fresh_stream_body=fresh_stream_body,
            max_total=max_total,
            max_per_address=max_per_address,
            host=host,
            port=port,
            fd=fd,
            handshake_timeout=handshake_timeout,
            h2_stall_timeout=h2_stall_timeout,
        )
        self._public[listener] = handler
        self._by_port[bound] = listener
        return bound

    def set_relay(
        self, host: str, scheme: str, address: str, line: bytes, ttl: float, cert: int = 0
    ) -> None:
        """A new connection whose first request names ``host`` on the listener of ``scheme``
        (no route there) is relayed by the core to the cluster instance at ``address`` for
        ``ttl`` seconds: ``line`` (the relay line up to the client's address) first, then
        both ways once it answers HERE; any other answer hands the connection to Python.
        HTTPS: terminated with certificate ``cert`` (set_cert) first."""
        self._core.set_relay(host, address, line, ttl, scheme=scheme, cert=cert)

    def drop_relay(self, host: str, scheme: str) -> bool:
        return self._core.drop_relay(host, scheme)

    def relay_counts(self) -> Tuple[int, int]:
        """(connections the core relayed by a relay route, those the holder did not take)."""
        return self._core.relay_counts()

    def listen_tcp(
        self, handler: PublicHandler, host: str, port: int, shared: bool = False
    ) -> int:
        """A TCP port's listener in the core (a TCP endpoint's, a reserved address's): each
        connection goes to ``handler`` at once, as a socket (nothing read); ``shared``:
        SO_REUSEPORT (a cluster's instances on one host). Returns the port."""
        listener, bound = self._core.listen_tcp(host, port, shared=shared)
        self._public[listener] = handler
        self._by_port[bound] = listener
        return bound

    def listen_relay(
        self,
        handler: PublicHandler,
        secret: bytes,
        adopters: Tuple[int, int],
        line_timeout: float,
        host: str,
        port: int,
    ) -> int:
        """A cluster's relay listener in the core (edge_core/src/relay.rs) on (host, port): a
        right relay line (``secret``) of kind http or https for a host with a plain route on
        that listener is answered HERE and served by that scheme's adopting listener
        (``adopters``: the plain-HTTP one's id, the HTTPS one's); ``handler`` gets every
        other connection with the bytes read. Returns the port."""
        listener, bound = self._core.listen_relay(
            secret, adopters[0], adopters[1], line_timeout, host, port
        )
        self._public[listener] = handler
        self._by_port[bound] = listener
        return bound

    def listen_adopting(
        self,
        handler: PublicHandler,
        scheme: str = "http",
        *,
        head_timeout: float,
        idle_timeout: float,
        body_timeout: float,
        fresh_stream_body: int,
        max_total: int,
        max_per_address: int,
        h2_stall_timeout: float = 30.0,
    ) -> int:
        """A listener of the core without a socket (its id): it serves the connections
        :meth:`adopt` hands it as the public listener of ``scheme`` serves its own (the same
        routes and rules, caps of its own; "https": the decrypted stream of a connection
        another instance terminated), and hands ``handler`` what it would hand over."""
        listener, _ = self._core.listen_public(
            scheme,
            head_timeout=head_timeout,
            idle_timeout=idle_timeout,
            body_timeout=body_timeout,
            fresh_stream_body=fresh_stream_body,
            max_total=max_total,
            max_per_address=max_per_address,
            h2_stall_timeout=h2_stall_timeout,
            adopting=True,
        )
        self._public[listener] = handler
        return listener

    def adopt(
        self, listener: int, sock: socket.socket, peer: Tuple[str, int], data: bytes
    ) -> bool:
        """The connected TCP socket ``sock`` (detached: the core's from now on, taken or not)
        served by the adopting listener ``listener`` as one accepted from ``peer``, ``data``
        first. False when it was not taken (an address that does not parse, at a cap)."""
        port = int(peer[1])
        if not 0 <= port <= 65535:  # not an address: not taken (the socket closed)
            sock.close()
            return False
        data = bytes(data)  # (the core reads a bytes object, not a copy of any buffer)
        return self._core.adopt(listener, sock.detach(), peer[0], port, data)

    def set_route(
        self,
        host: str,
        key: int,
        mux: Optional[session.MuxSession],
        tunnel_id: str,
        ttl: float,
        scheme: str = "http",
        cert: int = 0,
        decided: bool = False,
        responses: bool = False,
        holds: Optional[List[str]] = None,
        h2_scheme: Optional[str] = None,
        proxy_proto: int = 0,
        proxy_dest: str = "",
        capture: int = 0,
        ws_tcp: bool = False,
    ) -> None:
        """The core serves ``host``'s requests on the listener of ``scheme`` itself for
        ``ttl`` seconds (unless set again), on proxy streams of ``mux`` carrying
        ``tunnel_id``; its records name ``key``. HTTPS: with certificate ``cert``.
        ``decided``: each request is handed to ``on_asked`` first and carried as decided
        (``decide_*``); ``responses``: each response head to ``on_responses`` too.
        ``holds``: the facts a decided route's decisions are a function of
        (chalicelib.core.policy.holding): a decision made with ``hold`` is applied again by
        the core to the requests with the same facts while the route is quiet.
        ``h2_scheme``: the endpoint speaks HTTP/2 on its streams (``app_protocol`` http2), its
        requests' ``:scheme`` this. ``proxy_proto``: 1 or 2, a PROXY protocol header on each
        proxy stream, towards ``proxy_dest`` (the listener's address). No ``mux``: a cloud
        endpoint's route, ``decided``: each request answered, or sent on to a target its
        decision names (:meth:`decide_internal`). ``capture``: each exchange's first
        ``capture`` data bytes of both bodies go with its record (``Exchange.request_body``,
        ``response_body``: the inspector captures the endpoint's bodies). ``ws_tcp``: the
        endpoint converts WebSockets to TCP (edge/wstcp.py's rules): the core answers each
        upgrade and converts (edge_core/src/wstcp.rs), and answers anything else 400."""
        self._core.set_route(
            host,
            key,
            mux.core if mux is not None else None,
            tunnel_id,
            ttl,
            scheme=scheme,
            cert=cert,
            decided=decided,
            responses=responses,
            holds=holds,
            h2_scheme=h2_scheme,
            proxy_proto=proxy_proto,
            proxy_dest=proxy_dest,
            capture=capture,
            ws_tcp=ws_tcp,
        )

    def set_pool(
        self,
        host: str,
        members: List[Tuple[int, session.MuxSession, str, int, Optional[List[str]], int, int]],
        ttl: float,
        scheme: str = "http",
        cert: int = 0,
        proxy_dest: str = "",
    ) -> None:
        """The core serves ``host``'s requests on the listener of ``scheme`` itself for
        ``ttl`` seconds (unless set again), each on the next of an endpoint pool's
        ``members`` in turn: (key its records and asks name, session, tunnel id, its mode: 0
        plain, 1 decided, 2 decided with its response heads, either with edge/decided.py's
        RESTRICTED bit, the facts its decisions hold
        for: ``set_route``'s ``holds``, its PROXY protocol version towards ``proxy_dest``, the
        data bytes of its bodies its records carry: ``set_route``'s ``capture``). HTTPS: with
        certificate ``cert``. No member drops the host's routes."""
        self._core.set_pool(
            host,
            [
                (key, mux.core, tunnel_id, mode != 0, mode & 3 == 2, holds, proxy, capture)
                for key, mux, tunnel_id, mode, holds, proxy, capture in members
            ],
            ttl,
            scheme=scheme,
            cert=cert,
            proxy_dest=proxy_dest,
        )

    # The decide_* calls queue a decided route's decision in the core; the batch is sent when
    # Carrier._take has handed every row of it to ``on_asked`` (flush_decisions: one wake-up
    # of the core per batch instead of one per request).
    def decide_forward(
        self, ticket: int, head: bytes, memo: Any = None, body: Optional[bytes] = None
    ) -> None:
        """Ticket ``ticket``'s request goes on to its route's agent with ``head``; ``memo``
        comes back with its served row. ``body``: a body the policy rewrote (read whole by
        :meth:`decide_body`), sent in place of the client's, framed as ``head`` says."""
        self._core.decide_forward(ticket, bytes(head), memo, None if body is None else bytes(body))

    def decide_body(self, ticket: int, limit: int, memo: Any = None) -> None:
        """Ticket ``ticket``'s request's body is read first, up to ``limit`` bytes, and the
        request handed to ``on_asked`` again under the same ticket, the row's item 9 what was
        read: (its first bytes, or None when the client ended first; whether they are the
        whole body). Answering a response head: the agent's body likewise, the response row
        handed again with it (its last item); ``memo`` the record's meanwhile."""
        self._core.decide_body(ticket, limit, memo)

    def decide_internal(
        self,
        ticket: int,
        head: Optional[bytes],
        mux: session.MuxSession,
        tunnel_id: str,
        fields: Optional[List[Tuple[bytes, bytes]]] = None,
        memo: Any = None,
        responses: bool = False,
        h2_scheme: Optional[str] = None,
        proxy_proto: int = 0,
        proxy_dest: str = "",
        hold: bool = False,
        ws_tcp: bool = False,
    ) -> None:
        """Ticket ``ticket``'s request goes on with ``head`` to another agent endpoint than
        its route's (the internal one a ``forward-internal`` sent it to, an HTTPS edge
        route's tunnel): ``mux``'s tunnel ``tunnel_id``, spoken to as :meth:`set_route` says
        (``h2_scheme``, ``proxy_proto``, ``proxy_dest``, ``ws_tcp``: the core answers the
        upgrade and converts); ``responses``: its response head is handed to
        ``on_responses``. No ``head``: the client's own with ``fields`` appended (checked,
        lower-case, none of them framing), written by the core as :meth:`decide_append`
        writes it; ``hold`` then as there. Served and recorded as the route's."""
        self._core.decide_internal(
            ticket,
            None if head is None else bytes(head),
            mux.core,
            tunnel_id,
            fields=fields or [],
            memo=memo,
            responses=responses,
            h2_scheme=h2_scheme,
            proxy_proto=proxy_proto,
            proxy_dest=proxy_dest,
            hold=hold,
            ws_tcp=ws_tcp,
        )

    def decide_append(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        hold: bool = False,
    ) -> None:
        """Ticket ``ticket``'s request goes on with the client's head and ``fields`` after its
        own (checked, lower-case names, none of them framing); the core adds the X-Forwarded
        fields as for a plain route. ``hold``: the decision holds for the route's requests
        with the same facts (its ``holds``)."""
        self._core.decide_append(ticket, fields, memo, hold)

    def decide_respond(
        self,
        ticket: int,
        status: int,
        head: bytes,
        body: bytes,
        close: bool,
        memo: Any = None,
        hold: bool = False,
    ) -> None:
        """Ticket ``ticket``'s request is answered with ``head`` and ``body``; the connection
        ends after when ``close`` or when the request has a body not read whole by
        :meth:`decide_body`. ``hold`` as for
        :meth:`decide_append`."""
        self._core.decide_respond(ticket, status, bytes(head), bytes(body), close, memo, hold)

    def decide_rewrite(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        encode: Optional[str] = None,
        body: Optional[bytes] = None,
    ) -> None:
        """Ticket ``ticket``'s response head goes on with ``fields`` (checked) in place of the
        agent's; with ``encode`` (``gzip``, ``deflate``: what compress-response negotiated),
        its body compressed by the core as it comes. After decide_body, what the core read
        goes first; with ``body`` (the phase rewrote it, read whole), that body instead,
        framed by a Content-Length of its size."""
        self._core.decide_rewrite(ticket, fields, memo, encode, body)

    def decide_events(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        encode: Optional[str] = None,
    ) -> None:
        """Ticket ``ticket``'s response head goes on with ``fields`` as decide_rewrite sends
        it, chunked, its body server-sent events: each piece the agent sends comes back to
        ``on_responses`` first (the row's last item: (the piece, whether the body ended)),
        answered with decide_rewrite's ``body`` (what to send instead) or decide_close (the
        response cut there)."""
        self._core.decide_events(ticket, fields, memo, encode)

    def decide_close(self, ticket: int) -> None:
        self._core.decide_close(ticket)

    def decide_python(self, ticket: int) -> None:
        """Ticket ``ticket``'s connection goes to the public listener's handler, its request
        included, as an unrouted one would."""
        self._core.decide_python(ticket)

    def flush_decisions(self) -> None:
        """The decisions queued since the last flush, sent (``_take`` flushes a batch's; a
        decision made later, in a task, is flushed by its maker)."""
        self._core.flush_decisions()

    def deciding(self) -> int:
        """Decided routes' requests waiting for a decision now."""
        return self._core.deciding()

    def set_quiet(self, key: int, quiet: bool) -> None:
        """Route ``key`` quiet: the core counts its requests (``take_tallies``) instead of
        handing over a row of each (``on_served``); or loud again."""
        self._core.set_quiet(key, quiet)

    def take_tallies(self) -> "List[edge_core.Tally]":
        """What the core counted of each quiet route's requests since the last call: (route
        key, [(status, requests)], durations in seconds, body bytes in, out, [(the memo of a
        held decision, requests it served)])."""
        return self._core.take_tallies()

    def held_counts(self) -> Tuple[int, int]:
        """(requests served by a held decision, bytes every route holds now)."""
        return self._core.held_counts()

    def quiet_count(self) -> int:
        return self._core.quiet_count()

    def drop_route(self, host: str, scheme: str = "http") -> bool:
        return self._core.drop_route(host, scheme=scheme)

    def clear_routes(self) -> None:
        self._core.clear_routes()

    def route_count(self) -> int:
        """Routes the core holds, both listeners."""
        return sum(self._core.route_count())

    def set_cert(
        self,
        cert: int,
        chain_pem: bytes,
        key_pem: bytes,
        spec: int = 0,
        requires: Optional[tls_spec.TlsSpec] = None,
    ) -> None:
        """Certificate number ``cert`` for the HTTPS listener's routes; with ``requires``
        (what Python numbered ``spec``), for a name whose TLS settings ask more of a handshake
        than the default: a minimum or maximum version, a client certificate from its CAs."""
        if requires is None or spec == 0:
            self._core.set_cert(cert, chain_pem, key_pem)
            return
        self._core.set_cert(
            cert,
            chain_pem,
            key_pem,
            spec=spec,
            tls13_only=requires.min_version == ssl.TLSVersion.TLSv1_3,
            tls12_only=requires.max_version == ssl.TLSVersion.TLSv1_2,
            client_cas=tls_spec.ca_ders(requires) if requires.mutual else None,
        )

    def set_nameless_cert(self, cert: int) -> None:
        """The certificate a ClientHello without a server name gets (0: Python's)."""
        self._core.set_nameless_cert(cert)

    def drop_cert(self, cert: int) -> bool:
        return self._core.drop_cert(cert)

    def cert_count(self) -> int:
        return self._core.cert_count()

    def public_counters(self) -> PublicCounters:
        return PublicCounters(*self._core.public_counters())

    def attach(self, sock: socket.socket, name: str = "") -> session.MuxSession:
        """A session over a connected Unix stream socket (the core owns it from then on):
        the peer plays the agent on the other end (the edge's tests)."""
        conn = self._core.attach(sock.detach(), session.limits())
        return self._adopt(conn, name)

    def _adopt(self, conn: edge_core.Session, name: str) -> session.MuxSession:
        mux = session.MuxSession(
            conn, self._forget, name=name, splicer=self.splice, echo=self._core.echo
        )
        self._sessions[conn.key] = mux
        return mux

    def _forget(self, key: int) -> None:
        self._sessions.pop(key, None)

    def set_names(self, port: int, names: Dict[str, Tuple[bytes, bytes]]) -> int:
        """The certificates the agent listener of ``port`` serves per SNI name (the agent
        ingresses': edge/server.py), replacing the last ones; other names get its own."""
        return self._core.set_names(self._by_port[port], names)

    def close(self, port: int) -> None:
        """Stop accepting on the listener of ``port`` (sessions handed over go on)."""
        listener = self._by_port.pop(port, None)
        if listener is not None:
            self._core.close(listener)
            self._handlers.pop(listener, None)
            self._public.pop(listener, None)

    def counters(self) -> Counters:
        return Counters(*self._core.counters())

    def splice(
        self,
        sock: socket.socket,
        conn: edge_core.Session,
        sid: int,
        to_stream: bytes,
        to_client: bytes,
        websocket: bool = False,
    ) -> "asyncio.Future[Tuple[int, int]]":
        """The core carries the connected socket ``sock`` (detached: the core's from now
        on) and the stream ``sid`` of ``conn`` both ways (edge_core/src/splice.rs:
        half-closes, the end at the first failure); the future gets (bytes read from the
        client, bytes written to it) when both directions are done. With ``websocket``,
        the core converts between the client's WebSocket and the stream's raw bytes
        (edge_core/src/wstcp.rs), ``to_stream`` the client's frames read so far."""
        assert self._loop is not None, "the carrier is started"
        unix = sock.family == socket.AF_UNIX
        to_stream, to_client = bytes(to_stream), bytes(to_client)  # (before the detach)
        if websocket:
            assert not to_client, "a converted WebSocket's 101 is written before"
            splice_id = self._core.convert_websocket(
                sock.detach(), conn, sid, unix=unix, frames=to_stream
            )
        else:
            splice_id = self._core.splice(
                sock.detach(), conn, sid, unix=unix, to_stream=to_stream, to_client=to_client
            )
        done: "asyncio.Future[Tuple[int, int]]" = self._loop.create_future()
        self._splices[splice_id] = done
        return done

    def relay(
        self, a: socket.socket, b: socket.socket, to_b: bytes, to_a: bytes
    ) -> "asyncio.Future[Tuple[int, int]]":
        """The core carries the connected sockets ``a`` and ``b`` (detached: the core's from
        now on; ``b`` a TCP socket) both ways (edge_core/src/splice.rs ``relay``), ``to_b``
        to ``b`` first and ``to_a`` to ``a`` first; the future gets (bytes read from ``a``,
        bytes written to it) when both directions are done. Counted as a carried
        connection (``splice_counts``)."""
        assert self._loop is not None, "the carrier is started"
        unix = a.family == socket.AF_UNIX
        to_b, to_a = bytes(to_b), bytes(to_a)  # (before the detach)
        relay_id = self._core.relay(a.detach(), b.detach(), a_unix=unix, to_b=to_b, to_a=to_a)
        done: "asyncio.Future[Tuple[int, int]]" = self._loop.create_future()
        self._splices[relay_id] = done
        return done

    def splice_counts(self) -> Tuple[int, int]:
        """(connections the core carries now, carried to their end)."""
        return self._core.splice_counts()

    def _take(self) -> None:
        handed, events, conns, served, spliced, asked, responses = self._core.take()
        for listener, conn, ip, port, sni, alpn in handed:
            handler = self._handlers.get(listener)
            if handler is None:  # the listener was closed meanwhile
                conn.close("the listener was closed")
                continue
            mux = self._adopt(conn, f"{ip}:{port}")
            asyncio.ensure_future(handler(mux, Handoff(ip, port, sni, alpn)))
        sessions = self._sessions
        for key, kind, sid in events:
            live = sessions.get(key)
            if live is not None:
                live.on_event(kind, sid)
        for listener, fd, ip, port, data, first, facts, local in conns:
            sock = socket.socket(fileno=fd)
            public = self._public.get(listener)
            if public is None:
                sock.close()
                continue
            tls = CoreTls(*facts) if facts is not None else None
            asyncio.ensure_future(public(sock, data, first, tls, (ip, port), local))
        if served and self.on_served is not None:
            self.on_served(served)
        if asked or responses:
            try:
                if asked and self.on_asked is not None:
                    self.on_asked(asked)
                elif asked:  # nobody decides: each connection is Python's, as it came
                    for row in asked:
                        self._core.decide_python(row[0])
                if responses and self.on_responses is not None:
                    self.on_responses(responses)
                elif responses:
                    for head in responses:
                        self._core.decide_close(head[0])
            finally:
                self._core.flush_decisions()  # the batch's decisions, sent at once
        for splice_id, carried_in, carried_out in spliced:
            done = self._splices.pop(splice_id, None)
            if done is not None and not done.done():
                done.set_result((carried_in, carried_out))
