"""The edge's compiled core (edge_core/src): the seam's lower side. edge/carrier.py and
edge/session.py are the only modules of the edge that import it."""

from typing import Any, Dict, List, Optional, Tuple

VERSION: str
WS_MAX_FRAME: int  # bytes of one client frame's payload at most (edge_core/src/wstcp.rs)
BODY_READ_MAX: int  # bytes of a request's body decide_body reads at most (decide.rs)
BODY_READ_SECONDS: float  # seconds decide_body's read takes at most, in all (decide.rs)

class StreamReset(ConnectionError):
    """The stream was reset (RST from the peer, or the session ended)."""

class StreamsExhausted(StreamReset):
    """MAX_LOCAL_STREAMS of ours are open on the session: no stream opened."""

# (listener id, session, peer host, peer port, SNI, ALPN)
Handed = Tuple[int, "Session", str, int, Optional[str], Optional[bytes]]
# (session key, kind: edge/session.py's EV_*, stream id)
Event = Tuple[int, int, int]
# What the core's TLS handshake agreed: (SNI, version, cipher, ALPN), in OpenSSL's names
# (SNI, version, cipher, ALPN, the number of what the handshake required: 0 the default,
# the client certificate it verified: DER)
Facts = Tuple[str, str, str, Optional[bytes], int, Optional[bytes]]
# (listener id, fd, peer host, peer port, bytes read, no request served on it yet, None: the
# client's socket / the facts: fd is a Unix socket carrying the plaintext of the core's TLS,
# (local host, port))
Conn = Tuple[int, int, str, int, bytes, bool, Optional[Facts], Tuple[str, int]]
Fields = List[Tuple[bytes, bytes]]
# (route key, status, (body bytes in, body bytes out, started: epoch seconds, duration), served
# over TLS, the rest of it: read only when a record needs it, the memo its decision carried: a
# decided route's, the decision was a held one: Python did not count it when made)
Served = Tuple[int, int, Tuple[int, int, float, float], bool, "Exchange", Any, bool]
# A decided route's request waiting for its decision: (ticket, route key, (peer host, port),
# (local host, port), None or the TLS facts, method, target, fields (names in lower case), no
# body follows, and when asked again after decide_body: (the body's first bytes, or None when
# the client ended first; whether they are the whole body), it came on a stream of an HTTP/2
# connection, it is its connection's first request asked about the route)
ReadBody = Tuple[Optional[bytes], bool]
Asked = Tuple[
    int,
    int,
    Tuple[str, int],
    Tuple[str, int],
    Optional[Facts],
    bytes,
    bytes,
    Fields,
    bool,
    Optional[ReadBody],
    bool,
    bool,
]
# A decided route's response head waiting for its response phase: (ticket, route key, status,
# fields as the agent sent them, the memo of the request's decision)
AskedResponse = Tuple[int, int, int, Fields, Any]
# A connection the core carried ended: (splice id, bytes read from the client's socket,
# bytes written to it)
Spliced = Tuple[int, int, int]
# What the core counted of a quiet route's requests: (route key, [(status, requests)],
# durations in seconds in the order the requests ended, body bytes in, body bytes out,
# [(the memo of a held decision, requests it served)])
Tally = Tuple[int, List[Tuple[int, int]], List[float], int, int, List[Tuple[Any, int]]]
# the bounds of a session, by mux::Limits' names (edge.session.limits())
Limits = Dict[str, float]

class Exchange:
    """The heads and addresses of one request the core served (Python objects made when
    read)."""

    @property
    def peer(self) -> Tuple[str, int]: ...
    @property
    def local(self) -> Tuple[str, int]: ...
    @property
    def method(self) -> bytes: ...
    @property
    def target(self) -> bytes: ...
    @property
    def request_fields(self) -> Fields:
        """As the client sent them."""
    @property
    def reason(self) -> bytes: ...
    @property
    def response_fields(self) -> Fields:
        """Names in lower case."""
    @property
    def request_body(self) -> bytes:
        """The request body's first data bytes (a route's ``capture``; else empty)."""
    @property
    def captured(self) -> bool:
        """The route kept the bodies for the record (``set_route``'s ``capture``)."""
    @property
    def request_ended(self) -> bool:
        """The request's body was all read (else ``request_body`` is only its start)."""
    @property
    def response_body(self) -> bytes:
        """The response body's first data bytes, as ``request_body``."""

class Session:
    """One agent session: edge_core/src/mux.rs's State, one lock around it."""

    @property
    def key(self) -> int: ...
    def open(self) -> int:
        """A new stream id of ours; StreamsExhausted, or StreamReset when closed."""
    def want_slot(self) -> Optional[float]:
        """An opener waits: EV_SLOT when a slot comes back; seconds until the first slot in
        grace comes back, if any."""
    def read(self, sid: int, n: int) -> Optional[bytes]:
        """Up to n bytes, b"" at the peer's EOF, None: wait for EV_READABLE."""
    def write(self, sid: int, data: bytes, offset: int) -> int:
        """Queue data[offset:] as the window allows: bytes taken (0: wait for EV_WRITABLE)."""
    def close_write(self, sid: int) -> None: ...
    def finish(self, sid: int) -> None: ...
    def reset(self, sid: int, code: int) -> None: ...
    def facts(self, sid: int) -> Optional[Tuple[int, bool, bool, bool]]:
        """(unread bytes, peer side open, done, finished); None once not held."""
    def authenticate(self) -> None: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def since_beat(self) -> float:
        """Seconds since the agent's last heartbeat (``Core.echo``), or since the session
        began."""
    @property
    def beats(self) -> int:
        """The heartbeats the core echoed on this session."""
    def go_away(self, code: int, message: str) -> None: ...
    def close(self, reason: str) -> None: ...
    def flush(self) -> None:
        """Send the frames queued (the edge calls it once per event-loop turn)."""
    @property
    def closed(self) -> bool: ...
    @property
    def close_reason(self) -> str: ...
    def counts(self) -> Tuple[int, int, int, int, int, int, int, int]:
        """(ours open, the peer's open, lingering, ours in grace, entries held, unsent
        bytes, ids passed over, the peer's highest id)."""

def proxy_protocol_header(version: int, client: str, server: str) -> bytes:
    """The PROXY protocol header of ``version`` (1 or 2; anything else: b"") for a connection
    from ``client`` to ``server`` (``ip:port`` each; anything else: 0.0.0.0:0)."""

class Core:
    def __init__(self, threads: int = 0) -> None: ...
    @property
    def wake_fd(self) -> int: ...
    def listen_agents(
        self,
        chain_pem: bytes,
        key_pem: bytes,
        alpn: List[bytes],
        limits: Limits,
        *,
        host: Optional[str] = None,
        port: int = 0,
        fd: Optional[int] = None,
        handshake_timeout: float = 15.0,
        max_handshakes: int = 1024,
    ) -> Tuple[int, int]:
        """An agent listener on (host, port), or on the listening socket ``fd``, which the
        core owns from then on. Returns (listener id, port)."""
    def listen_public(
        self,
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
        handshake_timeout: float = 15.0,
        h2_stall_timeout: float = 30.0,
        adopting: bool = False,
    ) -> Tuple[int, int]:
        """A public listener on (host, port), or on the listening socket ``fd``, which the core
        owns from then on: plain HTTP (edge_core/src/public.rs) or HTTPS (https.rs: the
        ClientHello and handshake within ``handshake_timeout``; over HTTP/2, a response that
        cannot move for ``h2_stall_timeout`` is reset: h2front.rs). Returns (listener id,
        port). ``adopting``: a plain-HTTP listener without a socket (no host, port or fd;
        its port 0) serving what ``adopt`` hands it."""
    def set_route(
        self,
        host: str,
        key: int,
        session: Optional[Session],
        tunnel_id: str,
        ttl: float,
        *,
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
        """``host``'s requests on the listener of ``scheme`` served by the core on
        ``session``'s streams for ``ttl`` seconds (unless pushed again; expired, the host is
        Python's again); HTTPS with the certificate ``cert`` (``set_cert``). ``holds``: the
        facts a decided route's decisions are a function of (chalicelib.core.policy.holding);
        a decision made with ``hold`` is applied again to its key's requests (held.rs).
        ``h2_scheme``: the endpoint speaks HTTP/2 on its streams (``app_protocol`` http2;
        h2up.rs), its requests' ``:scheme`` this (its upstream's: http or https).
        ``proxy_proto``: 1 or 2, a PROXY protocol header on each proxy stream, from the client
        to ``proxy_dest`` (the listener's address). No ``session``: a cloud endpoint's route
        (``decided`` only: each request answered or sent to a target, ``decide_internal``)."""
    def set_pool(
        self,
        host: str,
        members: List[Tuple[int, Session, str, bool, bool, Optional[List[str]], int, int]],
        ttl: float,
        *,
        scheme: str = "http",
        cert: int = 0,
        proxy_dest: str = "",
    ) -> None:
        """``host``'s requests on the listener of ``scheme`` spread in turn over an endpoint
        pool's ``members`` (key, session, tunnel id, decided, responses, holds, proxy_proto,
        capture: a route each, as ``set_route`` takes them; ``proxy_dest`` their PROXY headers') for ``ttl`` seconds (unless pushed again); no member
        drops the host's routes."""
    def drop_route(self, host: str, *, scheme: str = "http") -> bool: ...
    def clear_routes(self) -> None: ...
    def route_count(self) -> Tuple[int, int]:
        """(plain-HTTP listener's routes, HTTPS listener's)."""
    def set_cert(
        self,
        id: int,
        chain_pem: bytes,
        key_pem: bytes,
        *,
        spec: int = 0,
        tls13_only: bool = False,
        tls12_only: bool = False,
        client_cas: Optional[List[bytes]] = None,
    ) -> None:
        """Certificate ``id`` (>= 1) for the HTTPS listener's routes; ValueError when the
        pair does not load. For a name whose TLS settings are numbered ``spec`` (0: none
        beyond the default): TLS 1.3 only, TLS 1.2 only, a client certificate chaining to one
        of ``client_cas`` (DER) required; a route of the certificate is served only on a
        connection whose handshake was made for the same ``spec``."""
    def drop_cert(self, id: int) -> bool: ...
    def set_nameless_cert(self, id: int) -> None:
        """The certificate a ClientHello without a server name gets; its requests routed by
        Host alone (0: none, such connections are Python's)."""
    def cert_count(self) -> int: ...
    def public_counters(self) -> Tuple[int, int, int, int, int, int]:
        """(requests served, connections handed over, refused, evicted, held now, HTTPS
        handshakes failed)."""
    def attach(self, fd: int, limits: Limits) -> Session:
        """A session over the connected Unix stream socket ``fd`` (the core owns it)."""
    def splice(
        self,
        fd: int,
        session: Session,
        sid: int,
        *,
        unix: bool = False,
        to_stream: bytes = b"",
        to_client: bytes = b"",
    ) -> int:
        """Carry the connected stream socket ``fd`` (the core owns it from then on; a Unix
        socket with ``unix``) and the stream ``sid`` of ``session`` both ways
        (edge_core/src/splice.rs), ``to_stream`` to the agent first and ``to_client`` to the
        client first; Python no longer reads or writes the stream. Its end comes in ``take``
        under the id returned."""
    def relay(
        self, a: int, b: int, *, a_unix: bool = False, to_b: bytes = b"", to_a: bytes = b""
    ) -> int:
        """Carry the connected stream socket ``a`` (a Unix socket with ``a_unix``) and the
        TCP socket ``b`` both ways (edge_core/src/splice.rs ``relay``: the cluster's relay);
        the core owns both descriptors from then on. ``to_b`` goes to ``b`` first, ``to_a``
        to ``a`` first. Its end comes in ``take`` as a carried connection's under the id
        returned: (bytes read from ``a``, bytes written to it)."""
    def listen_tcp(self, host: str, port: int, *, shared: bool = False) -> Tuple[int, int]:
        """A TCP port's listener on (host, port) (SO_REUSEPORT with ``shared``): every
        connection comes in ``take`` at once, nothing read, under the id returned. Returns
        (listener id, port)."""
    def listen_relay(
        self,
        secret: bytes,
        adopter: int,
        tls_adopter: int,
        line_timeout: float,
        host: str,
        port: int,
    ) -> Tuple[int, int]:
        """A cluster's relay listener on (host, port) (edge_core/src/relay.rs): a relay line
        with ``secret``, of kind http (https), for a host with a plain route on the plain-HTTP
        (HTTPS) listener is answered HERE and served by the adopting listener ``adopter``
        (``tls_adopter``, whose scheme is https); every other connection comes in
        ``take`` under the id returned with the bytes read; no whole line within
        ``line_timeout``: closed. Returns (listener id, port)."""
    def set_relay(
        self,
        host: str,
        address: str,
        line: bytes,
        ttl: float,
        *,
        scheme: str = "http",
        cert: int = 0,
    ) -> None:
        """A new connection whose first request names ``host`` on the listener of ``scheme``
        (and that has no route there) is relayed by the core to the cluster instance at
        ``address`` (``host:port``) for ``ttl`` seconds unless pushed again: the relay line is
        ``line`` (preamble, secret, kind and name; no line break) with the client's address
        (edge_core/src/relay.rs). HTTPS: TLS terminated with certificate ``cert`` first."""
    def drop_relay(self, host: str, scheme: str) -> bool: ...
    def relay_counts(self) -> Tuple[int, int]:
        """(connections relayed by a relay route, those the holder did not take: Python's)."""
    def adopt(self, listener: int, fd: int, ip: str, port: int, data: bytes) -> bool:
        """Serve the connected TCP socket ``fd`` (the core's from now on, taken or not) on the
        adopting listener ``listener`` (``listen_public(..., adopting=True)``) as one it
        accepted from ``ip``:``port``, ``data`` first; what it would hand over comes in
        ``take`` under that listener's id. False when it was not taken (no such listener,
        an address that does not parse, at a connection cap: the socket closed)."""
    def echo(self, session: Session, sid: int) -> None:
        """The heartbeat stream ``sid`` of ``session`` (its type read) is the core's from now
        on: it echoes each 4-byte id until the stream ends (edge_core/src/heartbeat.rs)."""
    def set_quiet(self, key: int, quiet: bool) -> None:
        """Route ``key`` quiet: the core counts its requests (``take_tallies``) instead of
        handing a row of each to ``take`` (at most 65,536 between two takes, rows past it)."""
    def take_tallies(self) -> List[Tally]:
        """Every quiet route's numbers since the last call."""
    def quiet_count(self) -> int: ...
    def convert_websocket(
        self,
        fd: int,
        session: Session,
        sid: int,
        *,
        unix: bool = False,
        frames: bytes = b"",
    ) -> int:
        """Convert between the connected stream socket ``fd`` (a client's WebSocket, answered
        101; the core owns it from then on; a Unix socket with ``unix``) and the stream ``sid``
        of ``session`` (edge_core/src/wstcp.rs: data frames' payload to the agent, its bytes
        back as binary frames), ``frames`` the client's bytes read after its upgrade request;
        Python no longer reads or writes the stream. Its end comes in ``take`` as a carried
        connection's, under the id returned."""
    def splice_counts(self) -> Tuple[int, int]:
        """(connections carried now, carried to their end)."""
    def close(self, listener: int) -> bool: ...
    def set_names(self, listener: int, names: Dict[str, Tuple[bytes, bytes]]) -> int:
        """Replace the certificates an agent listener serves per SNI name (lower-case name ->
        (chain PEM, key PEM)); other names get the listener's own. Nothing changes when a
        pair does not load (ValueError naming it). Returns how many names are served."""
    def take(
        self,
    ) -> Tuple[
        List[Handed],
        List[Event],
        List[Conn],
        List[Served],
        List[Spliced],
        List[Asked],
        List[AskedResponse],
    ]:
        """Every session handed over, every event, every public connection handed over,
        every request served, every carried connection ended and every decided route's
        request waiting, oldest first (each connection's fd is the caller's)."""
    def decide_forward(
        self, ticket: int, head: bytes, memo: Any = None, body: Optional[bytes] = None
    ) -> None:
        """Ticket ``ticket``'s request on to its agent with ``head`` (request line and fields,
        the blank line included); ``body``: the policy's rewrite of a body decide_body read
        whole, sent instead of the client's (``head`` frames it by its Content-Length). Each
        decide_* call queues its decision until flush_decisions."""
    def decide_body(self, ticket: int, limit: int, memo: Any = None) -> None:
        """Ticket ``ticket``'s request's body read first, up to ``limit`` bytes (at most
        BODY_READ_MAX), and the request asked again under the same ticket with what was read
        (the row's item 9). Once per request. Answering a response head: the agent's body
        likewise (the response row's last item), ``memo`` the record's meanwhile."""
    def decide_internal(
        self,
        ticket: int,
        head: Optional[bytes],
        session: Session,
        tunnel_id: str,
        *,
        fields: List[Tuple[bytes, bytes]] = ...,
        memo: Any = None,
        responses: bool = False,
        h2_scheme: Optional[str] = None,
        proxy_proto: int = 0,
        proxy_dest: str = "",
        hold: bool = False,
        ws_tcp: bool = False,
    ) -> None:
        """Ticket ``ticket``'s request on to ``session``'s tunnel ``tunnel_id`` (a
        forward-internal's target, an HTTPS edge route's tunnel) with ``head`` (None: the
        client's with ``fields`` appended; ``hold`` as decide_append's), served and recorded
        as its route's; ``ws_tcp``: the target converts WebSockets to TCP (the core answers
        the upgrade and converts)."""
    def decide_append(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        hold: bool = False,
    ) -> None:
        """Ticket ``ticket``'s request on to its agent with the client's head and ``fields``
        after its own; the core adds the X-Forwarded fields."""
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
        """Ticket ``ticket``'s request answered with ``head`` and ``body``."""
    def decide_rewrite(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        encode: Optional[str] = None,
        body: Optional[bytes] = None,
    ) -> None:
        """Ticket ``ticket``'s response head on to the client with ``fields``; with
        ``encode`` (``gzip`` or ``deflate``, else ValueError), its body compressed; after
        decide_body, what was read first, or ``body`` instead (Content-Length framed)."""
    def decide_events(
        self,
        ticket: int,
        fields: List[Tuple[bytes, bytes]],
        memo: Any = None,
        encode: Optional[str] = None,
    ) -> None:
        """Ticket ``ticket``'s response head on with ``fields``, chunked, its body's pieces
        each handed back first (the response row asked again) and answered with
        decide_rewrite's ``body`` or decide_close."""
    def decide_close(self, ticket: int) -> None: ...
    def decide_python(self, ticket: int) -> None:
        """Ticket ``ticket``'s connection handed over, its request's bytes included."""
    def flush_decisions(self) -> None:
        """The decisions queued since the last flush, sent (one wake-up of the core)."""
    def deciding(self) -> int:
        """Decided routes' requests waiting for a decision now."""
    def held_counts(self) -> Tuple[int, int]:
        """(requests served by a held decision, bytes every route holds now)."""
    def counters(self) -> Tuple[int, int, int, int]:
        """(handshakes in progress, sessions running, refused over max_handshakes, failed
        handshakes)."""
