"""The public listeners: HTTP and HTTPS (routed by ``Host``) and raw TCP, proxied to agents.

HTTP/1.1 on both sides is framed by ``edge.http1`` (sans-IO, llhttp): the client's connection
on one side, the agent's proxy stream (which the SDK connects to its upstream) on the other.
One proxy stream serves a client connection for as long as both ends keep the connection alive
and the requests go to the same endpoint. Bodies stream both ways through bounded buffers (http1
events of at most ``READ_CHUNK`` bytes; the muxado window stops a fast sender); nothing
reads a whole body. ``Upgrade`` (WebSocket) switches both legs to raw bytes after the 101.

Requests get ``X-Forwarded-For`` (appended), ``X-Forwarded-Proto`` and ``X-Forwarded-Host``.
When nothing serves the host, or the agent is gone, the answer is the contract's error body
(``error_code`` ERR_NGROK_3200 endpoint offline, 8012 upstream unreachable, 3004 bad
upstream response) with no upstream bytes and no internal addresses in it.
"""
import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple


from chalicelib.core import edge_errors, ids, policy as tp
from edge import breaker, challenges, http1, wstcp
from edge.connections import connection_handler
from edge.edges import Hop, forward_refused
from edge.h2leg import H2Leg
from edge.tls import MISDIRECTED
from edge.session import MuxStream, StreamReset, StreamsExhausted

log = logging.getLogger("edge.public")

READ_CHUNK = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024
BODY_TIMEOUT = 30.0     # a request body must progress (one read) within this
FIXED_BODY_DRAIN = 1024 * 1024  # request body read (and dropped) before a fixed answer
HOP_HEADERS = {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"}

STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests",
               502: "Bad Gateway",
               503: "Service Unavailable"}


class _Closed(Exception):
    """The client went away or broke HTTP: close the connection, nothing to answer."""


def error_body(status: int, code: str, msg: str) -> Tuple[bytes, str]:
    op = ids.new_id(ids.PREFIXES["operation"])
    body = json.dumps({"error_code": code, "status_code": status, "msg": msg,
                       "details": {"operation_id": op}}).encode("utf-8")
    return body, op


def _error_response(status: int, code: str, msg: str, close: bool) -> List[Any]:
    body, op = error_body(status, code, msg)
    headers = [("content-type", "application/json"), ("content-length", str(len(body))),
               ("ngrok-error-code", code), ("operation-id", op)]
    if close:
        headers.append(("connection", "close"))
    return [http1.Response(status_code=status, headers=headers,
                         reason=STATUS_TEXT.get(status, "").encode()),
            http1.Data(data=body), http1.EndOfMessage()]


def request_host(request: http1.Request) -> str:
    for name, value in request.headers:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host.split("]", 1)[0] + "]"
            return host.rsplit(":", 1)[0] if ":" in host else host
    return ""


def forwarded_headers(pairs, client_ip: str, scheme: str) -> List[Tuple[bytes, bytes]]:
    """The request's headers (lower-case bytes pairs) plus X-Forwarded-For (appended),
    -Proto and -Host."""
    headers = []
    xff = []
    host = b""
    for name, value in pairs:
        if name == b"x-forwarded-for":
            xff.append(value)
        if name == b"host":
            host = value
        if name not in HOP_HEADERS:
            headers.append((name, value))
    xff.append(client_ip.encode())
    headers.append((b"x-forwarded-for", b", ".join(xff)))
    headers.append((b"x-forwarded-proto", scheme.encode()))
    if host:
        headers.append((b"x-forwarded-host", host))
    return headers


# A request whose body may not reach the SDK's upstream in one write goes on a proxy stream of
# its own, so the SDK opens a new upstream connection for it (docs/BENCHMARKS.md, "The 40 ms
# stall"): the official SDKs copy a stream to their upstream through an 8 KiB buffer without
# TCP_NODELAY, and on a kept-alive upstream connection (delayed ACKs) the second write waited
# ~40 ms for the ACK of the first; a new connection ACKs at once (quick-ACK mode).
SDK_COPY_BUFFER = 8 * 1024
FRESH_STREAM_BODY = SDK_COPY_BUFFER // 2   # body bytes past which a head + body may not fit
# (the default of EDGE_FRESH_STREAM_BODY; 0 turns it off: each such request costs the SDK a new
# upstream connection, and so a TIME_WAIT socket on its side)


def needs_fresh_stream(leg: Any, request: http1.Request,
                       limit: int = FRESH_STREAM_BODY) -> bool:
    """True when ``request`` should not reuse ``leg``'s stream (HTTP/1.1 legs only; a body
    past ``limit`` bytes, or of unknown size; ``limit`` 0: never, EDGE_FRESH_STREAM_BODY)."""
    if not limit or not isinstance(leg, _Leg):
        return False
    for name, value in request.headers:
        if name == b"content-length":
            return not value.isdigit() or int(value) > limit
        if name == b"transfer-encoding":
            return True
    return False


class _Leg:
    """The agent side of a client connection: a proxy stream and its HTTP/1.1 client state."""

    def __init__(self, tunnel: Any, stream: MuxStream):
        self.tunnel = tunnel
        self.stream = stream
        self.conn = http1.Connection(http1.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)

    @property
    def reusable(self) -> bool:
        """Both messages done with keep-alive, and nothing more from the agent pending
        (parsed or still in the stream's buffer): such bytes would be read as the next
        request's response."""
        return self.conn.our_state is http1.DONE and self.conn.their_state is http1.DONE \
            and self.conn.clean and not self.stream.buffered

    async def next_event(self, before_wait: Optional[Callable[[], None]] = None) -> Any:
        """The next HTTP event from the agent; ``before_wait`` runs before waiting for bytes
        (the response writer flushes what it holds then)."""
        while True:
            event = self.conn.next_event()
            if event is not http1.NEED_DATA:
                return event
            if before_wait is not None:
                before_wait()
            self.conn.receive_data(await self.stream.read(READ_CHUNK))

    async def send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.write(data)

    async def send_many(self, events: List[Any]) -> None:
        """Several events in one stream write (see HttpFront._exchange)."""
        data = b"".join([self.conn.send(event) for event in events])
        if data:
            await self.stream.write(data)

    def close(self) -> None:
        """End the proxy stream: FIN, then the agent's FIN (edge.session: why never RST)."""
        self.stream.finish()


class _Traffic:
    """One request's run through its endpoint's traffic policy (modules included)."""

    def __init__(self, policy: Any, conn: Any, request: http1.Request, scheme: str, host: str):
        self.policy = policy
        self.conn = conn
        self.state = policy.new_state()
        length = None
        for name, value in request.headers:
            if name == b"content-length":
                length = int(value)
        self.request = request
        self.pairs = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers]
        self.req = tp.Request.from_target(
            request.method.decode("ascii"), scheme, host, request.target.decode("latin-1"),
            self.pairs, content_length=length)
        self.target = self.req.target
        self.compressor = None

    def forwarded_request(self) -> http1.Request:
        """The request as this policy left it, for the internal endpoint it forwards to.
        http1.LocalProtocolError when the policy made it invalid (see PolicyBroke)."""
        return http1.Request(method=self.req.method, target=_wire(self.req.target),
                             headers=[(_wire(n), _wire(v)) for n, v in self.req.headers],
                             checked=True)

    def upstream_request(self, client_ip: str, scheme: str) -> http1.Request:
        """The request as this policy left it, with the X-Forwarded headers.
        http1.LocalProtocolError when the policy made it invalid (see PolicyBroke).
        When the policy changed nothing but appending headers (add-headers; none of Host,
        Content-Length, Transfer-Encoding), only those are checked: the rest is the parsed
        request's, already valid."""
        req, count = self.req, len(self.pairs)
        if req.method == self.pairs_method and req.headers[:count] == self.pairs and \
                req.target == self.target:
            added = [(_wire(n.lower()), _wire(v)) for n, v in req.headers[count:]]
            if not any(n in _FRAMING_HEADERS for n, _ in added):
                headers = forwarded_headers(
                    self.request.headers + http1.checked_headers(added) if added
                    else self.request.headers, client_ip, scheme)
                return http1.Request(method=self.request.method, target=self.request.target,
                                     headers=headers, raw_headers=headers)
        pairs = [(_wire(n.lower()), _wire(v)) for n, v in req.headers]
        return http1.Request(method=req.method, target=_wire(req.target),
                             headers=forwarded_headers(pairs, client_ip, scheme), checked=True)

    @property
    def pairs_method(self) -> str:
        return self.request.method.decode("ascii")


_FRAMING_HEADERS = (b"host", b"content-length", b"transfer-encoding")


def _wire(text: str) -> bytes:
    """A header name or value (or target) as bytes: what came from the client round-trips
    as Latin-1 (the bytes it sent); a value a policy added beyond Latin-1 goes as UTF-8."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


# A request the traffic policy made invalid (a removed Host header, a value with a line break, a
# name HTTP/1.1 refuses): ERR_NGROK_2300, the hosted "internal gateway error while processing policy
# action", instead of a closed connection.
POLICY_BROKE = (502, edge_errors.POLICY_FAILED, "Internal gateway error occurred while processing "
                                       "policy action: the request it produced is not valid "
                                       "HTTP/1.1 ({})")


# A hostname an abuse report bans: the hosted code for a banned name, 403.
BANNED = (edge_errors.HOST_BANNED, "This hostname has been banned for violating the terms of "
                            "service. If you own it and believe this is a mistake, contact the "
                            "operator of this service.")

# The agent's session has MAX_LOCAL_STREAMS connections open and none ended within
# OPEN_WAIT: the hosted "too many connections" (ERR_NGROK_702, answered with 429).
TOO_MANY_STREAMS = (429, edge_errors.TOO_MANY_CONNECTIONS,
                         "Too many connections! The agent session serving "
                         "this endpoint has too many connections open at "
                         "once; try again later.")


def _outcome_response(out: Any, close: bool) -> List[Any]:
    headers = [(n, v) for n, v in out.headers if n.lower() not in ("content-length",
                                                                   "connection")]
    headers.append(("content-length", str(len(out.body))))
    if close:
        headers.append(("connection", "close"))
    return [http1.Response(status_code=out.status_code, headers=headers, checked=True),
            http1.Data(data=out.body) if out.body else None, http1.EndOfMessage()]


class HttpFront:
    """One public HTTP(S) listener's connection handler."""

    def __init__(self, edge: Any, scheme: str):
        self.edge = edge
        self.scheme = scheme

    def client_connection(self, reader: Any) -> Any:
        """The client side's framing (edge.h2front gives each HTTP/2 stream its own)."""
        return http1.Connection(http1.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

    def new_leg(self, tunnel: Any, stream: MuxStream) -> Any:
        """The agent side: HTTP/1.1, or HTTP/2 for an endpoint bound with app_protocol
        "http2" (edge.h2leg)."""
        if getattr(tunnel, "forwards_proto", "") == "http2":
            return H2Leg(tunnel, stream)
        return _Leg(tunnel, stream)

    def idle_leg(self) -> Any:
        """A proxy stream kept from an earlier exchange (edge.h2front pools them per HTTP/2
        connection, as a keep-alive connection keeps its own), or None."""
        return None

    def release_leg(self, leg: Any) -> None:
        leg.close()

    @connection_handler
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        client_ip, client_addr = str(peer[0]), f"{peer[0]}:{peer[1]}"
        ticket = self.edge.admission.admit(client_ip, writer.transport)
        if ticket is None:   # at a cap with no waiting connection to make room: refused
            writer.transport.abort()
            return
        client = self.client_connection(reader)
        leg: Optional[_Leg] = self.idle_leg()
        conns: Dict[Any, Any] = {}   # endpoint -> tp.Conn, built once per connection
        first = True
        try:
            while True:
                try:
                    self.edge.admission.waiting(ticket)
                    request = await self._request_head(client, reader, first)
                    self.edge.admission.busy(ticket)
                    first = False
                except http1.RemoteProtocolError as exc:
                    await self._answer(client, writer, 400, edge_errors.MISDIRECTED,
                                       f"The request is not valid HTTP/1.1: {exc}", close=True)
                    return
                if not isinstance(request, http1.Request):
                    return
                host = request_host(request)
                if host in self.edge.banned:   # an abuse report banned it (docs/SECURITY.md)
                    await self._answer(client, writer, 403, BANNED[0], BANNED[1], close=True)
                    return
                if self.scheme == "http" and await challenges.answer_http01(
                        self, client, writer, request, host):   # ACME HTTP-01 (edge/challenges.py)
                    return
                refused = self.edge.tls.misdirected(getattr(writer, "tls_spec", None), host)
                if refused is not None:   # a name's TLS settings met by another handshake
                    await self._answer(client, writer, *MISDIRECTED, refused, close=True)
                    return
                tunnel = self.edge.registry.http_tunnel(host, self.scheme)
                fixed, cloud = None, False
                if tunnel is not None:
                    enforcement = tunnel.enforcement
                    endpoint = Hop.of_tunnel(tunnel)
                    account_id = tunnel.account_id
                else:   # not an agent endpoint: a cloud endpoint, an HTTPS edge's hostport?
                    routed = await self.edge.router.route_http(host, request.target,
                                                               self.scheme)
                    if routed is None or routed.error is not None:
                        status, code, msg = routed.error if routed is not None else (
                            404, edge_errors.ENDPOINT_OFFLINE,
                                 f"The endpoint {self.scheme}://{host} is "
                                 "offline.")
                        await self._answer(client, writer, status, code, msg, close=True)
                        return
                    tunnel, fixed, enforcement = routed.tunnel, routed.fixed, routed.enforcement
                    endpoint = routed.hop
                    cloud, account_id = routed.cloud, routed.account_id
                traffic, prebuffered = None, []
                hop_request, forwards = request, 0
                while enforcement is not None and enforcement.policy is not None:
                    conn = conns.get(endpoint)   # what the policy sees of this connection
                    if conn is None:
                        if len(conns) >= 16:
                            conns.clear()
                        conn = conns[endpoint] = self._conn(writer, peer, endpoint)
                    conn.ip_policy_resolver = None
                    if enforcement.policy.ip_policy_ids:   # restrict-ips ip_policies, cached
                        conn.ip_policy_resolver = await self.edge.router.ip_policy_resolver(
                            endpoint.account_id, enforcement.policy)
                    traffic = _Traffic(enforcement.policy, conn, hop_request, self.scheme, host)
                    verdict, prebuffered, target = await self._request_phase(
                        client, reader, writer, traffic, host, prebuffered, account_id)
                    if verdict in ("next", "proxy"):
                        break
                    if verdict != "forward":
                        return
                    # forward-internal: the internal endpoint's own policy runs next (if it
                    # has none, the forwarding endpoint's response phase stays in force)
                    forwards += 1
                    refused = forward_refused(target, forwards)
                    if refused is not None:
                        await self._answer(client, writer, *refused, close=True)
                        return
                    tunnel, fixed, enforcement = target.tunnel, None, target.enforcement
                    endpoint = target.hop
                    try:
                        hop_request = traffic.forwarded_request()
                    except http1.LocalProtocolError as exc:
                        status, code, msg = POLICY_BROKE
                        await self._answer(client, writer, status, code, msg.format(exc),
                                           close=True)
                        return
                    cloud = target.cloud
                else:
                    verdict = "proxy"
                if verdict == "next":
                    client.start_next_cycle()
                    continue
                if cloud:   # a cloud endpoint's policy let the request through: no upstream
                    await self._answer(client, writer, 502, edge_errors.CLOUD_POLICY_FAILED,
                                       f"The traffic policy configured for cloud endpoint "
                                       f"{endpoint.endpoint_id} is non-terminating.", close=True)
                    return
                if fixed is not None:   # an http_response backend: the edge answers
                    if not await self._answer_fixed(client, reader, writer, fixed, traffic,
                                                    prebuffered):
                        return
                    client.start_next_cycle()
                    continue
                if not breaker.allows(tunnel):   # its circuit breaker tripped (edge.breaker)
                    await self._answer(client, writer, *breaker.TRIPPED_ANSWER, close=True)
                    return
                if getattr(tunnel, "ws_tcp", False):   # WebSocket-to-TCP (edge.wstcp)
                    await wstcp.serve(self, client, reader, writer, tunnel, request,
                                      client_addr)
                    return
                if leg is None or leg.tunnel is not tunnel or not leg.reusable or \
                        needs_fresh_stream(leg, request, getattr(
                            self.edge.settings, "fresh_stream_body", FRESH_STREAM_BODY)):
                    if leg is not None:
                        leg.close()
                    leg = None
                    try:
                        leg = self.new_leg(tunnel, await tunnel.session.open_proxy(
                            tunnel, client_addr, self.scheme))
                    except StreamsExhausted:
                        await self._answer(client, writer, *TOO_MANY_STREAMS, close=True)
                        return
                    except StreamReset:
                        await self._answer(client, writer, 502, edge_errors.ENDPOINT_OFFLINE,
                                           f"The endpoint {self.scheme}://{host} is offline.",
                                           close=True)
                        return
                else:
                    leg.conn.start_next_cycle()
                outcome = await self._exchange(client, reader, writer, leg, request,
                                               client_ip, host, traffic, prebuffered)
                if outcome != "next":
                    return
                if client.our_state is http1.DONE and client.their_state is http1.DONE:
                    client.start_next_cycle()
                else:
                    return
        except (_Closed, ConnectionError, OSError, asyncio.TimeoutError,
                asyncio.IncompleteReadError):
            pass
        except http1.LocalProtocolError as exc:
            log.debug("closing a client connection: %s", exc)
        finally:
            self.edge.admission.release(ticket)
            if leg is not None:
                self.release_leg(leg)
            writer.close()

    # ---- one request/response ---------------------------------------------------------------
    async def _exchange(self, client, reader, writer, leg: _Leg, request: http1.Request,
                        client_ip: str, host: str, traffic: Optional[_Traffic] = None,
                        prebuffered: Optional[List[Any]] = None) -> str:
        if traffic is not None:
            try:
                upstream_request = traffic.upstream_request(client_ip, self.scheme)
            except http1.LocalProtocolError as exc:
                status, code, msg = POLICY_BROKE
                await self._answer(client, writer, status, code, msg.format(exc), close=True)
                return "close"
        else:
            headers = forwarded_headers(request.headers, client_ip, self.scheme)
            upstream_request = http1.Request(method=request.method, target=request.target,
                                           headers=headers, raw_headers=headers)
        # The head and whatever of the body is already here go in one write (one muxado frame
        # up to its size): the SDK writes each frame to its upstream as it comes, without
        # TCP_NODELAY, so a body in a frame of its own waited there for the ACK of the head,
        # which a delayed ACK held ~40 ms (docs/BENCHMARKS.md, "The 40 ms stall"). A body
        # still to come is pumped by a task beside the response.
        events = [upstream_request, *(prebuffered or ())]
        body_pending = False
        while not isinstance(events[-1], http1.EndOfMessage):
            event = client.next_event()
            if event is http1.NEED_DATA:
                body_pending = True
                break
            if not isinstance(event, (http1.Data, http1.EndOfMessage)):
                raise _Closed()
            events.append(event)
        try:
            await send_events(leg, events)
        except (StreamReset, http1.LocalProtocolError):
            await self._answer(client, writer, 502, edge_errors.ENDPOINT_OFFLINE,
                               f"The endpoint {self.scheme}://{host} is offline.", close=True)
            return "close"
        body_task = None
        if body_pending:
            body_task = asyncio.ensure_future(self._request_body(client, reader, leg))
        try:
            return await self._response(client, writer, leg, body_task, host, reader, traffic)
        finally:
            if body_task is not None:
                if not body_task.done():
                    body_task.cancel()
                await asyncio.gather(body_task, return_exceptions=True)

    async def _request_body(self, client, reader, leg: _Leg) -> None:
        while True:
            event = await self._client_event(client, reader, BODY_TIMEOUT)
            if isinstance(event, http1.Data):
                await leg.send(event)
            elif isinstance(event, http1.EndOfMessage):
                await leg.send(event)
                return
            else:
                raise _Closed()

    async def _response(self, client, writer, leg: _Leg, body_task, host: str, reader,
                        traffic: Optional[_Traffic] = None) -> str:
        """Relay the agent's response. Its pieces are held and written together (head and
        body of a small response in one system call), and always before waiting for more
        from the agent, so a streaming response still arrives as it is produced."""
        started = False
        held: List[bytes] = []
        held_size = 0

        def hold(event: Any) -> None:
            nonlocal held_size
            data = client.send(event)
            if data:
                held.append(data)
                held_size += len(data)

        def flush() -> None:
            nonlocal held_size
            if held:
                writer.write(b"".join(held))
                held.clear()
                held_size = 0

        try:
            while True:
                event = await self._leg_event(leg, body_task, flush)
                if isinstance(event, http1.InformationalResponse):
                    if event.status_code == 101:
                        flush()
                        return await self._switch(client, reader, writer, leg, event, body_task)
                    hold(event)
                elif isinstance(event, http1.Response):
                    if traffic is not None:
                        event = self._response_phase(traffic, event)
                        if isinstance(event, list):   # the policy answered instead
                            for item in event:
                                if item is not None:
                                    hold(item)
                            flush()
                            await writer.drain()
                            return "close"
                    started = True
                    breaker.record(getattr(leg, "tunnel", None), event.status_code)
                    hold(event)
                elif isinstance(event, http1.Data):
                    if traffic is not None and traffic.compressor is not None:
                        data = traffic.compressor.feed(bytes(event.data))
                        if data:
                            hold(http1.Data(data=data))
                    else:
                        hold(event)
                    # Backpressure: a client slower than the agent stops the relay here (and
                    # so the stream's credit, and so the agent) instead of the edge buffering
                    # the response. Bytes the socket has not taken yet mean it is behind.
                    if held_size >= READ_CHUNK or writer.transport.get_write_buffer_size():
                        flush()
                        await writer.drain()
                elif isinstance(event, http1.EndOfMessage):
                    if traffic is not None and traffic.compressor is not None:
                        tail = traffic.compressor.finish()
                        if tail:
                            hold(http1.Data(data=tail))
                    hold(event)
                    flush()
                    await writer.drain()
                    if body_task is not None and (not body_task.done()
                                                  or body_task.exception() is not None):
                        return "close"   # answered before the body was sent: not reusable
                    return "next"
                else:  # ConnectionClosed
                    raise StreamReset("upstream closed")
        except (StreamReset, http1.RemoteProtocolError) as exc:
            if started:
                flush()
                return "close"   # mid-body: the client sees the connection end
            if isinstance(exc, http1.RemoteProtocolError):
                await self._answer(client, writer, 502, edge_errors.BAD_UPSTREAM_RESPONSE,
                                   "The upstream server returned an invalid or incomplete "
                                   "HTTP response.", close=True)
            else:
                breaker.record(getattr(leg, "tunnel", None), 502)
                await self._answer(client, writer, 502, edge_errors.UPSTREAM_UNREACHABLE,
                                   f"The agent serving {self.scheme}://{host} could not reach "
                                   "its upstream service.", close=True)
            return "close"

    async def _leg_event(self, leg: _Leg, body_task, flush: Callable[[], None]) -> Any:
        """The next event from the agent; a failure of the request body pump (the client
        went away) ends the exchange too. ``flush`` runs before any wait."""
        if body_task is None or body_task.done():
            if body_task is not None and body_task.exception() is not None:
                raise _Closed()
            return await leg.next_event(flush)
        flush()
        event_task = asyncio.ensure_future(leg.next_event())
        try:
            while True:
                done, _ = await asyncio.wait({event_task, body_task} if not body_task.done()
                                             else {event_task},
                                             return_when=asyncio.FIRST_COMPLETED)
                if event_task in done:
                    return event_task.result()
                if body_task.exception() is not None:
                    raise _Closed()
        finally:
            if not event_task.done():
                event_task.cancel()
                await asyncio.gather(event_task, return_exceptions=True)

    async def _switch(self, client, reader, writer, leg: _Leg, event, body_task) -> str:
        """101 Switching Protocols: forward it, then carry raw bytes both ways."""
        if body_task is not None and not body_task.done():
            await asyncio.wait({body_task}, timeout=BODY_TIMEOUT)
        await self._send(client, writer, event)
        client_rest, _ = client.trailing_data
        leg_rest, _ = leg.conn.trailing_data
        await splice(reader, writer, leg.stream, to_stream=client_rest, to_client=leg_rest)
        return "close"

    # ---- traffic policy ---------------------------------------------------------------------
    def _conn(self, writer, peer, endpoint: Hop) -> Any:
        sockname = writer.get_extra_info("sockname") or ("", 0)
        ssl_object = writer.get_extra_info("ssl_object")
        conn = tp.Conn(client_ip=str(peer[0]), client_port=int(peer[1] or 0),
                       server_ip=str(sockname[0]), server_port=int(sockname[1] or 0),
                       endpoint=tp.Endpoint(id=endpoint.endpoint_id, url=endpoint.url,
                                            host=endpoint.host, port=int(sockname[1] or 0),
                                            protocol=self.scheme,
                                            account_id=endpoint.account_id),
                       server_region=self.edge.settings.region)
        if ssl_object is not None:
            conn.tls_version = ssl_object.version() or ""
            conn.tls_cipher_suite = (ssl_object.cipher() or ("",))[0]
            conn.tls_sni = ssl_object.server_hostname or ""
        return conn

    async def _request_phase(self, client, reader, writer, traffic: _Traffic, host: str,
                             events: Optional[List[Any]] = None, account_id: str = ""
                             ) -> Tuple[str, List[Any], Any]:
        """Run on_http_request: ("proxy", body events read so far, None) to go on upstream;
        ("forward", events, target) for a forward-internal to an endpoint found (an
        ``edges.Routed``); ("next", [], None) when the policy answered and the connection
        stays usable; ("close", [], None) when it is done. ``events``: the body events an
        earlier hop (the endpoint that forwarded here) already read."""
        events = list(events or [])
        while not (events and isinstance(events[-1], http1.EndOfMessage)):
            # what of the body is already here (all of it, for a bodiless request)
            event = client.next_event()
            if event is http1.NEED_DATA:
                break
            if not isinstance(event, (http1.Data, http1.EndOfMessage)):
                raise _Closed()
            events.append(event)
            if isinstance(event, http1.EndOfMessage):
                break
        asked = False
        while True:
            out = traffic.policy.on_http_request(traffic.conn, traffic.req, traffic.state)
            while out.kind == tp.NEED_BODY and not asked:
                asked = True
                events = await self._buffer_body(client, reader, out.max_body_bytes, events)
                body = b"".join(bytes(e.data) for e in events if isinstance(e, http1.Data))
                traffic.req.body = body[:out.max_body_bytes]
                traffic.req.body_complete = len(body) <= out.max_body_bytes and \
                    isinstance(events[-1], http1.EndOfMessage)
                out = traffic.policy.on_http_request(traffic.conn, traffic.req, traffic.state)
            if out.kind != tp.FORWARD_INTERNAL:
                break
            target = await self.edge.router.internal_target(account_id, out.url)
            if target is not None:
                return "forward", events, target
            if out.on_error != "continue":   # halt: offline, like any unknown endpoint
                await self._answer(client, writer, 502, edge_errors.ENDPOINT_OFFLINE,
                                   f"The internal endpoint {out.url} is offline.", close=True)
                return "close", [], None
            # continue: the phase resumes after the forward action (same state)
        if out.kind == tp.CONTINUE:
            return "proxy", events, None
        if out.kind == tp.RESPOND:
            whole = bool(events) and isinstance(events[-1], http1.EndOfMessage)
            for item in _outcome_response(out, close=not whole):
                if item is not None:
                    await self._send(client, writer, item)
            return ("next" if whole else "close"), [], None
        return "close", [], None

    def _response_phase(self, traffic: _Traffic, event: http1.Response) -> Any:
        if not traffic.policy.has("on_http_response"):
            return event   # nothing to run: the response goes on as the agent sent it
        res = tp.Response(status_code=event.status_code,
                          headers=[(n.decode("latin-1"), v.decode("latin-1"))
                                   for n, v in event.headers])
        out = traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)
        if out.kind == tp.RESPOND:
            return _outcome_response(out, close=True)
        if out.kind == tp.CLOSE:
            raise _Closed()
        traffic.compressor = out.compressor
        return http1.Response(status_code=res.status_code, reason=event.reason,
                            headers=[(_wire(n), _wire(v)) for n, v in res.headers],
                            checked=True)

    async def _answer_fixed(self, client, reader, writer, fixed, traffic, events) -> bool:
        """Answer with an http_response backend's status, headers and body (the response
        phase's rules apply to it too). True when the connection stays usable."""
        events = await self._buffer_body(client, reader, FIXED_BODY_DRAIN, list(events or []))
        whole = bool(events) and isinstance(events[-1], http1.EndOfMessage)
        body = (fixed.get("body") or "").encode("utf-8")
        headers = [(str(k), str(v)) for k, v in (fixed.get("headers") or {}).items()]
        status = int(fixed.get("status_code") or 200)
        if traffic is not None:
            res = tp.Response(status_code=status, headers=headers)
            out = traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)
            if out.kind == tp.RESPOND:
                status, headers, body = out.status_code, out.headers, out.body
            elif out.kind == tp.CLOSE:
                return False
            else:
                status, headers = res.status_code, res.headers
                if out.compressor is not None:
                    body = out.compressor.feed(body) + out.compressor.finish()
        answer = SimpleNamespace(status_code=status, headers=headers, body=body)
        for item in _outcome_response(answer, close=not whole):
            if item is not None:
                await self._send(client, writer, item)
        return whole

    async def _buffer_body(self, client, reader, limit: int, events: List[Any]) -> List[Any]:
        """Read the request body until it ends or passes ``limit`` bytes, for the policy; the
        events are forwarded upstream afterwards as they came."""
        size = sum(len(e.data) for e in events if isinstance(e, http1.Data))
        while size <= limit and not (events and isinstance(events[-1], http1.EndOfMessage)):
            event = await self._client_event(client, reader, BODY_TIMEOUT)
            if not isinstance(event, (http1.Data, http1.EndOfMessage)):
                raise _Closed()
            events.append(event)
            if isinstance(event, http1.Data):
                size += len(event.data)
        return events

    # ---- I/O helpers ------------------------------------------------------------------------
    async def _request_head(self, client, reader, first: bool) -> Any:
        """The next request (or ConnectionClosed). Its first byte must come within
        EDGE_HEAD_TIMEOUT on a new connection, EDGE_IDLE_TIMEOUT between keep-alive
        requests; from its first byte, the whole head within EDGE_HEAD_TIMEOUT (a deadline,
        not a timer that each byte restarts: a head sent a byte at a time is cut off all the
        same)."""
        loop = asyncio.get_running_loop()
        head, idle = self.edge.settings.head_timeout, self.edge.settings.idle_timeout
        deadline = loop.time() + (head if first else idle)
        started = False
        while True:
            event = client.next_event()
            if event is not http1.NEED_DATA:
                return event
            async with asyncio.timeout_at(deadline):
                data = await reader.read(READ_CHUNK)
            if data and not started:
                started = True
                deadline = min(deadline, loop.time() + head) if first else loop.time() + head
            client.receive_data(data)

    async def _client_event(self, client, reader, timeout: float) -> Any:
        while True:
            event = client.next_event()
            if event is not http1.NEED_DATA:
                return event
            async with asyncio.timeout(timeout):   # a timer, not a task as wait_for makes
                data = await reader.read(READ_CHUNK)
            client.receive_data(data)

    async def _send(self, client, writer, event) -> None:
        data = client.send(event)
        if data:
            writer.write(data)
            await writer.drain()

    async def _answer(self, client, writer, status: int, code: str, msg: str,
                      close: bool) -> None:
        if client.our_state not in (http1.IDLE, http1.SEND_RESPONSE):
            return
        try:
            for event in _error_response(status, code, msg, close):
                await self._send(client, writer, event)
        except http1.LocalProtocolError:
            return


async def send_events(leg: Any, events: List[Any]) -> None:
    """``events`` to the agent, in one write where the leg can (HTTP/1.1 legs)."""
    many = getattr(leg, "send_many", None)
    if many is not None:
        await many(events)
        return
    for event in events:
        await leg.send(event)


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stream: MuxStream,
                 *, to_stream: bytes = b"", to_client: bytes = b"") -> None:
    """Raw bytes both ways between a client connection and a proxy stream, each direction
    ending with a half-close, until both are done (or either side fails)."""

    async def up() -> None:
        if to_stream:
            await stream.write(to_stream)
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                break
            await stream.write(data)
        await stream.close_write()

    async def down() -> None:
        if to_client:
            writer.write(to_client)
        while True:
            data = await stream.read(READ_CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    except (ConnectionError, OSError, StreamReset):
        pass
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stream.finish()
