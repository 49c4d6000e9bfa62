"""The HTTP front: a public HTTP(S) connection's requests, each routed (edge/http_routing.py),
run through its endpoint's traffic policy (edge/http_policy.py) and proxied to the agent here.

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
import logging
from typing import Any, Callable, Dict, List, Optional

from chalicelib.core import edge_errors
from chalicelib.core.policy import sse as tp_sse
from chalicelib.core.policy.actions import MAX_FIND_REPLACE_BODY, RewriteTooLarge
from chalicelib.core.policy.waf import BODY_LIMIT as WAF_BODY_LIMIT
from edge import breaker, http1, http_io, http_policy, http_routing, wstcp
from edge import observe  # traffic events, metrics and the inspector (edge/events.py)
from edge.connections import connection_handler
from edge.h2leg import H2Leg
from edge.http_io import BODY_TIMEOUT, READ_CHUNK, Closed, answer, client_event, send, splice
from edge.session import MuxStream, StreamReset, StreamsExhausted

log = logging.getLogger("edge.public")

MAX_HEAD_BYTES = 64 * 1024


def request_host(request: http1.Request) -> str:
    for name, value in request.headers:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host.split("]", 1)[0] + "]"
            return host.rsplit(":", 1)[0] if ":" in host else host
    return ""


# A request whose body may not reach the SDK's upstream in one write goes on a proxy stream of
# its own, so the SDK opens a new upstream connection for it (docs/BENCHMARKS.md, "The 40 ms
# stall"): the official SDKs copy a stream to their upstream through an 8 KiB buffer without
# TCP_NODELAY, and on a kept-alive upstream connection (delayed ACKs) the second write waited
# ~40 ms for the ACK of the first; a new connection ACKs at once (quick-ACK mode).
SDK_COPY_BUFFER = 8 * 1024
FRESH_STREAM_BODY = SDK_COPY_BUFFER // 2  # body bytes past which a head + body may not fit
# (the default of EDGE_FRESH_STREAM_BODY; 0 turns it off: each such request costs the SDK a new
# upstream connection, and so a TIME_WAIT socket on its side)


def needs_fresh_stream(leg: Any, request: http1.Request, limit: int = FRESH_STREAM_BODY) -> bool:
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


def _retrieved(done: "asyncio.Future[None]") -> None:
    """A connection's close, taken note of (its reset is the reason it ended, not an error for
    asyncio to log as never retrieved)."""
    if not done.cancelled():
        done.exception()


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
        return (
            self.conn.our_state is http1.DONE
            and self.conn.their_state is http1.DONE
            and self.conn.clean
            and not self.stream.buffered
        )

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


# The agent's session has MAX_LOCAL_STREAMS connections open and none ended within
# OPEN_WAIT: the hosted "too many connections" (ERR_NGROK_702, answered with 429).
TOO_MANY_STREAMS = (
    429,
    edge_errors.TOO_MANY_CONNECTIONS,
    "Too many connections! The agent session serving "
    "this endpoint has too many connections open at "
    "once; try again later.",
)


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

    def watch_client(self, writer: Any) -> Optional[Callable[[], None]]:
        """From the first exchange with an agent on: when the client's connection is lost
        (reset, or closed under TLS; a plain-TCP FIN is a half-close and is not watched), this
        connection's task is cancelled, so an exchange waiting on a silent agent (a slow first
        byte, a long poll, quiet server-sent events) ends at once: its proxy stream is
        finished (the agent's upstream sees its request end) and the client's connection slot
        given back, instead of both being held until the agent next sends. A streaming
        response is cut at its next piece anyway (the backpressure check in ``_response``).
        edge.h2front cancels a reset stream's task the same way, and has no connection of its
        own to watch (None). Returns what stops the watch when the handler ends (the waiting
        task is left to end with the connection: cancelling it would cancel the protocol's
        own close future)."""
        task = asyncio.current_task()
        watch = asyncio.ensure_future(writer.wait_closed())

        def lost(done: "asyncio.Future[None]") -> None:
            _retrieved(done)
            if not done.cancelled() and task is not None:
                task.cancel()

        def unwatch() -> None:
            watch.remove_done_callback(lost)
            watch.add_done_callback(_retrieved)

        watch.add_done_callback(lost)
        return unwatch

    @connection_handler
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        client_ip, client_addr = str(peer[0]), f"{peer[0]}:{peer[1]}"
        ticket = self.edge.admission.admit(client_ip, writer.transport)
        if ticket is None:  # at a cap with no waiting connection to make room: refused
            writer.transport.abort()
            return
        client = observe.tap(self.client_connection(reader), self.edge, peer, writer, self.scheme)
        leg: Optional[_Leg] = self.idle_leg()
        conns: Dict[Any, Any] = {}  # endpoint -> tp.Conn, built once per connection
        unwatch: Optional[Callable[[], None]] = None
        first = True
        try:
            while True:
                try:
                    self.edge.admission.waiting(ticket)
                    request = await self._request_head(client, reader, first)
                    self.edge.admission.busy(ticket)
                    first = False
                except http1.RemoteProtocolError as exc:
                    await answer(
                        client,
                        writer,
                        400,
                        edge_errors.MISDIRECTED,
                        f"The request is not valid HTTP/1.1: {exc}",
                        close=True,
                    )
                    return
                if not isinstance(request, http1.Request):
                    return
                host = request_host(request)
                routed = await http_routing.route(
                    self.edge, self.scheme, client, writer, request, host
                )
                if routed is None:
                    return
                if routed.tunnel is not None or routed.cloud or routed.fixed is not None:
                    fast = getattr(self.edge, "fast_path", None)  # the core may serve it
                    if fast is not None:  # (edge/fast_path.py): its route pushed again
                        fast.seen(host, self.scheme, routed.named)
                observe.routed(client, routed.endpoint, routed.cloud)
                ran = await http_policy.run(
                    self.edge,
                    self.scheme,
                    client,
                    reader,
                    writer,
                    peer,
                    request,
                    host,
                    routed,
                    conns,
                )
                verdict, traffic, prebuffered = ran.verdict, ran.traffic, ran.prebuffered
                tunnel, fixed, endpoint = ran.route.tunnel, ran.route.fixed, ran.route.endpoint
                if verdict == "close":
                    return
                if verdict == "next":
                    client.start_next_cycle()
                    continue
                if ran.route.cloud:  # its policy let the request through: no upstream
                    await answer(
                        client,
                        writer,
                        502,
                        edge_errors.CLOUD_POLICY_FAILED,
                        f"The traffic policy configured for cloud endpoint "
                        f"{endpoint.endpoint_id} is non-terminating.",
                        close=True,
                    )
                    return
                if fixed is not None:  # an http_response backend: the edge answers
                    if not await http_policy.answer_fixed(
                        client, reader, writer, fixed, traffic, prebuffered, self.edge
                    ):
                        return
                    client.start_next_cycle()
                    continue
                if not breaker.allows(tunnel):  # its circuit breaker tripped (edge.breaker)
                    await answer(client, writer, *breaker.TRIPPED_ANSWER, close=True)
                    return
                if getattr(tunnel, "ws_tcp", False) or ran.route.ws_tcp:  # edge.wstcp
                    await wstcp.serve(self, client, reader, writer, tunnel, request, client_addr)
                    return
                if (
                    leg is None
                    or leg.tunnel is not tunnel
                    or not leg.reusable
                    or needs_fresh_stream(
                        leg,
                        request,
                        getattr(self.edge.settings, "fresh_stream_body", FRESH_STREAM_BODY),
                    )
                ):
                    if leg is not None:
                        leg.close()
                    leg = None
                    try:
                        leg = self.new_leg(
                            tunnel,
                            await tunnel.session.open_proxy(tunnel, client_addr, self.scheme),
                        )
                    except StreamsExhausted:
                        await answer(client, writer, *TOO_MANY_STREAMS, close=True)
                        return
                    except StreamReset:
                        await answer(
                            client,
                            writer,
                            502,
                            edge_errors.ENDPOINT_OFFLINE,
                            f"The endpoint {self.scheme}://{host} is offline.",
                            close=True,
                        )
                        return
                else:
                    leg.conn.start_next_cycle()
                if unwatch is None:
                    unwatch = self.watch_client(writer)
                outcome = await self._exchange(
                    client, reader, writer, leg, request, client_ip, host, traffic, prebuffered
                )
                if outcome != "next":
                    return
                if client.our_state is http1.DONE and client.their_state is http1.DONE:
                    client.start_next_cycle()
                else:
                    return
        except (
            Closed,
            ConnectionError,
            OSError,
            asyncio.TimeoutError,
            asyncio.IncompleteReadError,
        ):
            pass
        except http1.LocalProtocolError as exc:
            log.debug("closing a client connection: %s", exc)
        finally:
            if unwatch is not None:
                unwatch()
            self.edge.admission.release(ticket)
            if leg is not None:
                self.release_leg(leg)
            writer.close()

    # ---- one request/response ---------------------------------------------------------------
    async def _exchange(
        self,
        client,
        reader,
        writer,
        leg: _Leg,
        request: http1.Request,
        client_ip: str,
        host: str,
        traffic: Optional[http_policy.Traffic] = None,
        prebuffered: Optional[List[Any]] = None,
    ) -> str:
        if traffic is not None:
            try:
                upstream_request = traffic.upstream_request(client_ip, self.scheme)
            except http1.LocalProtocolError as exc:
                status, code, msg = http_policy.POLICY_BROKE
                await answer(client, writer, status, code, msg.format(exc), close=True)
                return "close"
        else:
            headers = http_policy.forwarded_headers(request.headers, client_ip, self.scheme)
            upstream_request = http1.Request(
                method=request.method, target=request.target, headers=headers, raw_headers=headers
            )
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
                raise Closed()
            events.append(event)
        try:
            await send_events(leg, events)
        except (StreamReset, http1.LocalProtocolError):
            await answer(
                client,
                writer,
                502,
                edge_errors.ENDPOINT_OFFLINE,
                f"The endpoint {self.scheme}://{host} is offline.",
                close=True,
            )
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
            event = await client_event(client, reader, BODY_TIMEOUT)
            if isinstance(event, http1.Data):
                await leg.send(event)
            elif isinstance(event, http1.EndOfMessage):
                await leg.send(event)
                return
            else:
                raise Closed()

    async def _response(
        self,
        client,
        writer,
        leg: _Leg,
        body_task,
        host: str,
        reader,
        traffic: Optional[http_policy.Traffic] = None,
    ) -> str:
        """Relay the agent's response. Its pieces are held and written together (head and
        body of a small response in one system call), and always before waiting for more
        from the agent, so a streaming response still arrives as it is produced."""
        started = False
        held: List[bytes] = []
        held_size = 0
        # response-body-find-replace: the head waits for the whole body (at most
        # MAX_FIND_REPLACE_BODY), which is rewritten and sent with its new Content-Length
        waiting_head: Optional[http1.Response] = None
        whole: List[bytes] = []
        whole_size = 0

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

        pending: List[Any] = []  # events to handle before reading more (already transformed)
        # owasp-crs-response with process_body: the head waits for the first BODY_LIMIT
        # bytes of the body (or all of a shorter one), which the checks read first
        checking: Optional[http1.Response] = None
        checked: List[bytes] = []

        async def check(body: bytes) -> bool:
            """The body checks on ``body``; False when one answered instead (sent)."""
            for body_check in traffic.body_checks if traffic is not None else ():
                out = body_check(body[:WAF_BODY_LIMIT])
                if out is not None:
                    for item in http_io.outcome_response(out, close=True):
                        if item is not None:
                            hold(item)
                    flush()
                    await writer.drain()
                    return False
            return True

        try:
            while True:
                fresh = not pending
                event = pending.pop(0) if pending else await self._leg_event(leg, body_task, flush)
                stream = traffic.sse if traffic is not None and fresh else None
                if stream is not None and isinstance(event, http1.Data):
                    # on_event_stream_message: whole messages only, each rewritten
                    try:
                        data = stream.feed(bytes(event.data))
                    except tp_sse.TooLarge as exc:
                        log.info("ending an event stream: %s", exc)
                        flush()
                        return "close"  # never passed on unrewritten: the response is cut
                    if not data:
                        continue
                    event = http1.Data(data=data)
                elif stream is not None and isinstance(event, http1.EndOfMessage):
                    tail = stream.finish()
                    if traffic is not None:
                        traffic.sse = None
                    if tail:
                        pending = [http1.Data(data=tail), event]
                        continue
                if isinstance(event, http1.InformationalResponse):
                    if event.status_code == 101:
                        flush()
                        return await self._switch(client, reader, writer, leg, event, body_task)
                    hold(event)
                elif isinstance(event, http1.Response):
                    if traffic is not None:
                        event = await http_policy.response_phase(traffic, event, self.edge)
                        if isinstance(event, list):  # the policy answered instead
                            for item in event:
                                if item is not None:
                                    hold(item)
                            flush()
                            await writer.drain()
                            return "close"
                    breaker.record(getattr(leg, "tunnel", None), event.status_code)
                    http_policy.record_status(traffic, event.status_code)
                    if traffic is not None and traffic.rewrites:
                        waiting_head = event
                        continue
                    if traffic is not None and traffic.body_checks:
                        checking = event
                        continue
                    started = True
                    hold(event)
                elif checking is not None and isinstance(event, (http1.Data, http1.EndOfMessage)):
                    ended = isinstance(event, http1.EndOfMessage)
                    if isinstance(event, http1.Data):
                        checked.append(bytes(event.data))
                    body = b"".join(checked)
                    if not ended and len(body) < WAF_BODY_LIMIT:
                        continue
                    if not await check(body):
                        return "close"
                    started = True
                    hold(checking)
                    checking, checked = None, []
                    pending = ([http1.Data(data=body)] if body else []) + (
                        [event] if ended else []
                    )
                elif isinstance(event, http1.Data) and waiting_head is not None:
                    whole.append(bytes(event.data))
                    whole_size += len(event.data)
                    if whole_size > MAX_FIND_REPLACE_BODY:
                        await answer(
                            client,
                            writer,
                            502,
                            edge_errors.BAD_UPSTREAM_RESPONSE,
                            f"The response body is larger than the {MAX_FIND_REPLACE_BODY} "
                            "bytes response-body-find-replace can rewrite.",
                            close=True,
                        )
                        return "close"
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
                    # A client gone (reset, or its HTTP/2 stream cancelled) ends the exchange
                    # at the next piece (drain raises): a closed transport takes writes into
                    # nothing and never fills. ``watch_client`` ends it sooner (at the loss,
                    # agent silent or not); this check is what holds where no watch runs.
                    if (
                        held_size >= READ_CHUNK
                        or writer.transport.get_write_buffer_size()
                        or writer.transport.is_closing()
                    ):
                        flush()
                        await writer.drain()
                elif isinstance(event, http1.EndOfMessage):
                    if waiting_head is not None and traffic is not None:
                        if traffic.body_checks and not await check(b"".join(whole)):
                            return "close"
                        try:
                            body = http_policy.rewritten_body(
                                b"".join(whole), traffic.rewrites, traffic.compressor
                            )
                        except RewriteTooLarge as exc:
                            await answer(
                                client,
                                writer,
                                502,
                                edge_errors.BAD_UPSTREAM_RESPONSE,
                                f"response-body-find-replace: {exc}.",
                                close=True,
                            )
                            return "close"
                        started = True
                        hold(http_policy.with_length(waiting_head, len(body)))
                        if body:
                            hold(http1.Data(data=body))
                        event = http1.EndOfMessage()  # a Content-Length body has no trailers
                    elif traffic is not None and traffic.compressor is not None:
                        tail = traffic.compressor.finish()
                        if tail:
                            hold(http1.Data(data=tail))
                    hold(event)
                    flush()
                    await writer.drain()
                    if body_task is not None and (
                        not body_task.done() or body_task.exception() is not None
                    ):
                        return "close"  # answered before the body was sent: not reusable
                    return "next"
                else:  # ConnectionClosed
                    raise StreamReset("upstream closed")
        except (StreamReset, http1.RemoteProtocolError) as exc:
            if started:
                flush()
                return "close"  # mid-body: the client sees the connection end
            if isinstance(exc, http1.RemoteProtocolError):
                await answer(
                    client,
                    writer,
                    502,
                    edge_errors.BAD_UPSTREAM_RESPONSE,
                    "The upstream server returned an invalid or incomplete HTTP response.",
                    close=True,
                )
            else:
                breaker.record(getattr(leg, "tunnel", None), 502)
                http_policy.record_status(traffic, 502)
                await answer(
                    client,
                    writer,
                    502,
                    edge_errors.UPSTREAM_UNREACHABLE,
                    f"The agent serving {self.scheme}://{host} could not reach "
                    "its upstream service.",
                    close=True,
                )
            return "close"

    async def _leg_event(self, leg: _Leg, body_task, flush: Callable[[], None]) -> Any:
        """The next event from the agent; a failure of the request body pump (the client
        went away) ends the exchange too. ``flush`` runs before any wait."""
        if body_task is None or body_task.done():
            if body_task is not None and body_task.exception() is not None:
                raise Closed()
            return await leg.next_event(flush)
        flush()
        event_task = asyncio.ensure_future(leg.next_event())
        try:
            while True:
                done, _ = await asyncio.wait(
                    {event_task, body_task} if not body_task.done() else {event_task},
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if event_task in done:
                    return event_task.result()
                if body_task.exception() is not None:
                    raise Closed()
        finally:
            if not event_task.done():
                event_task.cancel()
                await asyncio.gather(event_task, return_exceptions=True)

    async def _switch(self, client, reader, writer, leg: _Leg, event, body_task) -> str:
        """101 Switching Protocols: forward it, then carry raw bytes both ways."""
        if body_task is not None and not body_task.done():
            await asyncio.wait({body_task}, timeout=BODY_TIMEOUT)
        await send(client, writer, event)
        client_rest, _ = client.trailing_data
        leg_rest, _ = leg.conn.trailing_data
        await splice(reader, writer, leg.stream, to_stream=client_rest, to_client=leg_rest)
        return "close"

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


async def send_events(leg: Any, events: List[Any]) -> None:
    """``events`` to the agent, in one write where the leg can (HTTP/1.1 legs)."""
    many = getattr(leg, "send_many", None)
    if many is not None:
        await many(events)
        return
    for event in events:
        await leg.send(event)
