"""HTTP/2 with clients on the HTTPS listener: ALPN ``h2`` (``http/1.1`` otherwise), the state
machine python-hyper's ``h2`` (sans-IO, as ``edge.http1`` is for HTTP/1.1), on the connections
Python's TLS terminates: names the compiled core has no route for, names whose TLS settings
require more than the default, ``app_protocol: "http2"`` endpoints. The core serves HTTP/2 on
the connections it terminates itself (edge_core/src/h2front.rs, with these bounds' values).

Each client stream is served by the HTTP/1.1 front's own request path
(``edge.public.HttpFront.handle``), given the stream as its client connection: ``_Stream`` has
the interface of ``http1.Connection`` in the server role (the request as ``http1`` events, the
response events turned into HEADERS/DATA/trailers), so routing, traffic policy (every phase and
action), forward-internal, cloud endpoints, bans, TLS settings and the error answers are the
HTTP/1.1 ones, written once. One proxy stream to the agent per client stream.

Flow control both ways: a client's DATA is credited back (WINDOW_UPDATE) only when the request
path has taken it on to the agent, so a slow agent (the muxado window) holds the client back;
a response is queued per stream up to ``LOW_WATER`` bytes beyond what the client's windows
let through, then the relay from the agent waits (and so the agent, by its window).

Bounds (docs/HTTP2.md states them with what the tests measured): ``MAX_CONCURRENT_STREAMS``
streams (SETTINGS; a stream beyond it is refused with RST_STREAM REFUSED_STREAM), a header
block of ``h2wire.MAX_HEADER_BLOCK`` encoded and ``h2wire.MAX_HEADER_LIST_SIZE`` decoded bytes,
16 KiB frames, ``MAX_RESETS`` streams the client resets and ``MAX_CONTROL`` frames that cost
an answer or carry nothing (SETTINGS, PING, PRIORITY, empty DATA, unknown types) per
``BUDGET_SECONDS``, each plus half the streams answered meanwhile (then GOAWAY
ENHANCE_YOUR_CALM), a stream whose response cannot move (zero window) for ``STALL_TIMEOUT``
reset. The connection counts once against the admission caps, waiting while it has no stream
open (head timeout first, then the idle timeout), and ends with GOAWAY.

gRPC: when a gRPC request (``content-type: application/grpc...``) is answered by the edge
itself (no endpoint, policy deny, too many connections, agent unreachable...), the answer is a
gRPC status (trailers-only HEADERS with ``grpc-status`` and ``grpc-message``) instead of an HTTP
error page a gRPC client cannot read.
"""

import asyncio
import collections
import json
import logging
import time
import urllib.parse
from typing import Any, Deque, Dict, List, Optional

import h2.events
import h2.exceptions
from h2.connection import ConnectionState
from h2.errors import ErrorCodes

from chalicelib.core import edge_errors
from edge import admission, h2wire, http1
from edge.connections import connection_handler
from edge.public import HttpFront, request_host

log = logging.getLogger("edge.h2")

MAX_CONCURRENT_STREAMS = 100
LOW_WATER = 64 * 1024  # response bytes queued per stream beyond the windows
READ_CHUNK = 64 * 1024
STALL_TIMEOUT = 30.0  # a response that cannot move (flow control) for this long: reset
# (EDGE_H2_STALL_TIMEOUT)
BUDGET_SECONDS = 10.0
MAX_RESETS = 200  # client RST_STREAMs per BUDGET_SECONDS (rapid reset)
MAX_CONTROL = 1000  # control frames per BUDGET_SECONDS (settings/ping floods)
MAX_TASKS = 2 * MAX_CONCURRENT_STREAMS  # stream tasks alive (reset ones winding down too)
HEAD_MARKER = b"h"  # what _Stream.send returns for a response head it holds
GRPC_ERROR_BODY = 4096  # of an edge error body, read for its message

# HTTP status of an edge answer -> gRPC status (gRPC's "HTTP to gRPC Status Code Mapping";
# an offline endpoint is UNAVAILABLE, as the agent being unreachable is)
GRPC_CODES = {400: 13, 401: 16, 403: 7, 404: 12, 421: 14, 429: 14, 502: 14, 503: 14, 504: 14}
GRPC_BY_ERROR = {edge_errors.ENDPOINT_OFFLINE: 14, edge_errors.TOO_MANY_CONNECTIONS: 8}


def https_handler(edge: Any, http1_handle: Any) -> Any:
    """The HTTPS listener's handler: HTTP/2 when the handshake chose ``h2``, else HTTP/1.1."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            await H2Server(edge, reader, writer).run()
        else:
            await http1_handle(reader, writer)

    return handle


class _StreamAdmission:
    """A stream's request path takes no admission ticket: its connection holds one."""

    def admit(self, address: str, transport: Any) -> admission.Ticket:
        return admission.Ticket(address, None)

    def waiting(self, ticket: Any) -> None:
        pass

    def busy(self, ticket: Any) -> None:
        pass

    def release(self, ticket: Any) -> None:
        pass


class _EdgeView:
    """The edge as a stream's ``HttpFront`` sees it (its own admission, the rest shared)."""

    def __init__(self, edge: Any):
        self._edge = edge
        self.admission = _StreamAdmission()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._edge, name)


class _StreamFront(HttpFront):
    """``HttpFront`` for one HTTP/2 stream: the stream is its client connection."""

    def __init__(self, view: _EdgeView, stream: "_Stream"):
        super().__init__(view, "https")
        self.stream = stream

    def client_connection(self, reader: Any) -> Any:
        return self.stream

    def new_leg(self, tunnel: Any, mux: Any) -> Any:
        leg = super().new_leg(tunnel, mux)
        relay = leg.next_event
        leg.owner = self.stream

        async def next_event(before_wait=None):
            event = await relay(before_wait)
            if isinstance(event, (http1.Response, http1.InformationalResponse)):
                leg.owner.upstream_answered = True
            return event

        leg.next_event = next_event
        return leg

    def watch_client(self, writer: Any) -> None:
        """Nothing to watch: the stream's reset, or its connection's end, cancels this task
        (H2Server.forget)."""
        return None

    def idle_leg(self) -> Any:
        leg = self.stream.server.pool_take(self.stream.host)
        if leg is not None:
            leg.owner = self.stream
        return leg

    def release_leg(self, leg: Any) -> None:
        self.stream.server.pool_put(self.stream.host, leg)


class _Reader:
    """What the request path reads from: a token when the stream has events, b"" at its end
    (the events themselves come from ``_Stream.next_event``)."""

    def __init__(self, stream: "_Stream"):
        self.stream = stream

    async def read(self, n: int = -1) -> bytes:
        stream = self.stream
        while not stream.inbox and not stream.gone:
            stream.arrived.clear()
            await stream.arrived.wait()
        return b"" if stream.gone and not stream.inbox else b"+"


class _Transport:
    def __init__(self, stream: "_Stream"):
        self.stream = stream

    def get_write_buffer_size(self) -> int:
        return self.stream.queued

    def is_closing(self) -> bool:
        """The stream was reset (either side) or its connection ended: ``drain`` raises."""
        return self.stream.gone

    def abort(self) -> None:
        self.stream.server.reset(self.stream, ErrorCodes.CANCEL)


class _Writer:
    """What the request path writes to: nothing goes through ``write`` (``_Stream.send`` sends
    the frames); ``drain`` waits while the stream's response is queued beyond LOW_WATER."""

    def __init__(self, stream: "_Stream", real: asyncio.StreamWriter):
        self.stream = stream
        self.real = real
        self.transport = _Transport(stream)
        self.tls_spec = getattr(real, "tls_spec", None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.real.get_extra_info(name, default)

    def write(self, data: bytes) -> None:
        """The request path flushing what it holds: only ever HEAD_MARKERs."""
        if data:
            self.stream.release_head()

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        pass

    async def drain(self) -> None:
        stream = self.stream
        if stream.queued > LOW_WATER and not stream.gone:
            async with asyncio.timeout(stream.server.stall_timeout):
                while stream.queued > LOW_WATER and not stream.gone:
                    stream.moved.clear()
                    await stream.moved.wait()
        if stream.gone:
            raise ConnectionResetError("stream reset")
        await self.real.drain()


class _Stream:
    """One client stream as ``http1.Connection`` (server role) shows a client connection."""

    def __init__(self, server: "H2Server", stream_id: int):
        self.server = server
        self.id = stream_id
        self.inbox: Deque[Any] = collections.deque()  # (event, flow-controlled length)
        self.arrived = asyncio.Event()
        self.moved = asyncio.Event()
        self.gone = False  # reset (either side) or the connection ended
        self.cycled = False
        self.our_state = http1.SEND_RESPONSE
        self.their_state = http1.SEND_BODY
        self.outbox: Deque[memoryview] = collections.deque()
        self.queued = 0
        self.end: Optional[List[Any]] = None  # trailers to end with (queued after the data)
        self.ended = False  # END_STREAM sent
        self.grpc = False
        self.upstream_answered = False
        self.grpc_error: Optional[Any] = None  # an edge answer being turned into a gRPC status
        self.grpc_body = b""
        self.task: Optional["asyncio.Task[None]"] = None
        self.stall: Optional[asyncio.TimerHandle] = None
        self.trailers_in: Optional[List[Any]] = None
        self.head: Optional[List[Any]] = None  # response fields not sent yet
        self.host = ""

    # ---- the request, as http1 events -------------------------------------------------------
    def next_event(self) -> Any:
        if self.cycled:
            return http1.ConnectionClosed()
        if self.inbox:
            event, credit = self.inbox.popleft()
            if credit:
                self.server.credit(self, credit)
            if isinstance(event, http1.EndOfMessage):
                self.their_state = http1.DONE
            return event
        if self.gone:
            return http1.ConnectionClosed()
        return http1.NEED_DATA

    def receive_data(self, data: bytes) -> None:
        pass

    def start_next_cycle(self) -> None:
        self.cycled = True  # one exchange per stream: the next "request" is the end

    @property
    def trailing_data(self):
        return b"", False

    def push(self, event: Any, credit: int = 0) -> None:
        self.inbox.append((event, credit))
        self.arrived.set()

    # ---- the response, as HTTP/2 frames ----------------------------------------------------
    def send(self, event: Any) -> bytes:
        if self.gone:
            raise ConnectionResetError("stream reset")
        if isinstance(event, http1.Response):
            self.our_state = http1.SEND_BODY
            if self.grpc and not self.upstream_answered and event.status_code != 200:
                self.grpc_error = event
                return b""
            # held until the request path flushes (writes the marker) or the message ends:
            # a response with no body goes as one HEADERS frame with END_STREAM (gRPC's
            # trailers-only answer stays one)
            self.head = [(b":status", str(event.status_code).encode())] + h2wire.h2_fields(
                event.headers
            )
            return HEAD_MARKER
        elif isinstance(event, http1.InformationalResponse):
            if event.status_code != 101:
                self.server.send_headers(
                    self,
                    [(b":status", str(event.status_code).encode())]
                    + h2wire.h2_fields(event.headers),
                    end=False,
                )
        elif isinstance(event, http1.Data):
            self.release_head()
            if self.grpc_error is not None:
                self.grpc_body = (self.grpc_body + bytes(event.data))[:GRPC_ERROR_BODY]
            elif event.data:
                data = memoryview(bytes(event.data))
                self.outbox.append(data)
                self.queued += len(data)
                self.server.flush(self)
        elif isinstance(event, http1.EndOfMessage):
            self.our_state = http1.DONE
            if self.grpc_error is not None:
                self.server.send_headers(
                    self, grpc_status(self.grpc_error, self.grpc_body), end=True
                )
                self.ended = True
            elif (
                self.head is not None and not self.outbox and not getattr(event, "trailers", None)
            ):
                head, self.head = self.head, None
                self.server.send_headers(self, head, end=True)
                self.server.finish_if_done(self)
            else:
                self.release_head()
                self.end = h2wire.h2_fields(getattr(event, "trailers", None) or [])
                self.server.flush(self)
        return b""

    def release_head(self) -> None:
        if self.head is not None and not self.gone:
            head, self.head = self.head, None
            self.server.send_headers(self, head, end=False)


def grpc_status(response: http1.Response, body: bytes) -> List[Any]:
    """A trailers-only gRPC answer for an edge error response (its JSON body's message)."""
    code, msg = "", ""
    try:
        parsed = json.loads(body.decode("utf-8")) if body else {}
        code, msg = str(parsed.get("error_code", "")), str(parsed.get("msg", ""))
    except (ValueError, AttributeError):
        pass
    for name, value in response.headers:
        if name == b"ngrok-error-code" and not code:
            code = value.decode("latin-1")
    status = GRPC_BY_ERROR.get(code) or GRPC_CODES.get(response.status_code, 2)
    text = f"{code}: {msg}" if code else (msg or f"HTTP status {response.status_code}")
    fields = [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-status", str(status).encode()),
        (b"grpc-message", urllib.parse.quote(text, safe=" !#$&'()*+,/:;=?@[]~").encode()),
    ]
    if code:
        fields.append((b"ngrok-error-code", code.encode()))
    return fields


class H2Server:
    """One HTTP/2 client connection."""

    def __init__(self, edge: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.edge = edge
        self.reader = reader
        self.writer = writer
        self.view = _EdgeView(edge)
        self.conn = h2wire.new_connection(client_side=False, max_streams=MAX_CONCURRENT_STREAMS)
        self.streams: Dict[int, _Stream] = {}
        self.tasks: set = set()
        self.budget_start = time.monotonic()
        self.resets = 0
        self.control = 0
        self.closing = False
        self.stall_timeout = getattr(edge.settings, "h2_stall_timeout", STALL_TIMEOUT)
        self.write_scheduled = False
        self.pool: Dict[str, List[Any]] = {}  # host -> idle proxy streams (legs)
        self.pooled = 0
        self.completed = 0  # streams answered in this budget window

    # ---- proxy streams kept between streams ---------------------------------------------------
    def pool_take(self, host: str) -> Any:
        legs = self.pool.get(host)
        while legs:
            leg = legs.pop()
            self.pooled -= 1
            if _alive(leg):
                return leg
            leg.close()
        return None

    def pool_put(self, host: str, leg: Any) -> None:
        if self.closing or self.pooled >= MAX_CONCURRENT_STREAMS or not _alive(leg):
            leg.close()
            return
        self.pool.setdefault(host, []).append(leg)
        self.pooled += 1

    def pool_close(self) -> None:
        for legs in self.pool.values():
            for leg in legs:
                leg.close()
        self.pool.clear()
        self.pooled = 0

    # ---- the connection ---------------------------------------------------------------------
    @connection_handler
    async def run(self) -> None:
        peer = self.writer.get_extra_info("peername") or ("", 0)
        ticket = self.edge.admission.admit(str(peer[0]), self.writer.transport)
        if ticket is None:
            self.writer.transport.abort()
            return
        settings = self.edge.settings
        loop = asyncio.get_running_loop()
        first = True
        try:
            self.write_out()
            while not (self.closing and not self.tasks):
                idle = not self.streams and not self.tasks
                if idle:
                    self.edge.admission.waiting(ticket)
                    deadline = loop.time() + (
                        settings.head_timeout if first else settings.idle_timeout
                    )
                else:
                    self.edge.admission.busy(ticket)
                    deadline = None
                async with asyncio.timeout_at(deadline):
                    data = await self.reader.read(READ_CHUNK)
                if not data:
                    break
                first = False
                try:
                    events = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    log.debug("h2 connection error: %s", exc)
                    self.write_now()
                    await self.writer.drain()
                    return
                for event in events:
                    try:
                        self.on_event(event)
                    except h2.exceptions.ProtocolError as exc:
                        # events come after the whole read: a stream they name may be gone
                        log.debug("h2 event on a closed stream: %s", exc)
                if self.over_budget():
                    self.conn.close_connection(
                        ErrorCodes.ENHANCE_YOUR_CALM, last_stream_id=self.last_id()
                    )
                    self.write_now()
                    await self.writer.drain()
                    return
                self.write_now()
                await self.writer.drain()  # a client not reading our output stops being read
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            self.edge.admission.release(ticket)
            try:
                if self.conn.state_machine.state is not ConnectionState.CLOSED:
                    self.conn.close_connection(ErrorCodes.NO_ERROR, last_stream_id=self.last_id())
                self.write_now()
            except (h2.exceptions.ProtocolError, ConnectionError, OSError, RuntimeError):
                pass
            for stream in list(self.streams.values()):
                self.forget(stream)
            for task in list(self.tasks):
                task.cancel()
            self.closing = True
            if self.tasks:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            self.pool_close()
            self.writer.close()

    def last_id(self) -> int:
        return self.conn.highest_inbound_stream_id

    def over_budget(self) -> bool:
        earned = self.completed // 2  # a busy client's cancels and pings are its due
        if self.resets > MAX_RESETS + earned or self.control > MAX_CONTROL + earned:
            return True
        now = time.monotonic()
        if now - self.budget_start > BUDGET_SECONDS:
            self.budget_start, self.resets, self.control, self.completed = now, 0, 0, 0
        return False

    def write_out(self) -> None:
        """Write what the state machine has queued at the end of this event-loop turn: the
        frames of every stream served in the turn go in one TLS record and one system call
        (one each measured 100 µs of the edge's CPU per request more)."""
        if not self.write_scheduled:
            self.write_scheduled = True
            asyncio.get_running_loop().call_soon(self.write_now)

    def write_now(self) -> None:
        self.write_scheduled = False
        data = self.conn.data_to_send()
        if data and not self.writer.transport.is_closing():
            self.writer.write(data)

    def on_event(self, event: Any) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.on_request(event)
        elif isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            if not event.data:
                self.control += 1
            if stream is None or stream.gone:
                if event.flow_controlled_length:
                    self.ack(event.stream_id, event.flow_controlled_length)
                return
            if event.data:
                stream.push(http1.Data(event.data), event.flow_controlled_length)
            elif event.flow_controlled_length:
                self.ack(event.stream_id, event.flow_controlled_length)
        elif isinstance(event, h2.events.TrailersReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                try:
                    stream.trailers_in = h2wire.http1_fields(event.headers)
                except http1.LocalProtocolError:
                    self.reset(stream, ErrorCodes.PROTOCOL_ERROR)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.get(event.stream_id)
            if stream is not None and not stream.gone:
                stream.push(h2wire.EndOfMessage(stream.trailers_in))
        elif isinstance(event, h2.events.StreamReset):
            self.resets += 1
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                self.forget(stream)
        elif isinstance(event, h2.events.WindowUpdated):
            if event.stream_id:
                stream = self.streams.get(event.stream_id)
                if stream is not None:
                    self.flush(stream)
            else:
                for stream in list(self.streams.values()):
                    if stream.outbox or stream.end is not None:
                        self.flush(stream)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.control += 1
            for stream in list(self.streams.values()):
                if stream.outbox:
                    self.flush(stream)
        elif isinstance(
            event,
            (h2.events.PingReceived, h2.events.PriorityUpdated, h2.events.UnknownFrameReceived),
        ):
            self.control += 1
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closing = True

    def on_request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        stream = _Stream(self, sid)
        if self.closing or len(self.tasks) >= MAX_TASKS:
            try:
                self.conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            except h2.exceptions.ProtocolError:  # reset by the client in the same read
                pass
            return
        self.streams[sid] = stream
        ended = event.stream_ended is not None
        try:
            request = _request_of(event.headers, ended)
        except (ValueError, http1.LocalProtocolError) as exc:
            task = asyncio.ensure_future(self._refuse(stream, str(exc)))
        else:
            stream.grpc = h2wire.is_grpc(request.headers)
            stream.host = request_host(request)
            stream.push(request)
            if ended:
                stream.push(h2wire.EndOfMessage())
            task = asyncio.ensure_future(self._serve(stream))
        stream.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, stream: _Stream) -> None:
        try:
            await _StreamFront(self.view, stream).handle(
                _Reader(stream), _Writer(stream, self.writer)
            )
        finally:
            self.done(stream)

    async def _refuse(self, stream: _Stream, why: str) -> None:
        """A request HTTP/2 allowed but HTTP/1.1 semantics do not (no :authority, a
        CONNECT, a field value with a line break): 400, as over HTTP/1.1."""
        try:
            from edge.http_io import error_response

            stream.inbox.clear()
            for item in error_response(
                400, edge_errors.MISDIRECTED, f"The request is not valid HTTP: {why}", close=False
            ):
                stream.send(item)
        except ConnectionError:
            pass
        finally:
            self.done(stream)

    def done(self, stream: _Stream) -> None:
        """The request path is done with a stream: a response cut short is reset; a complete
        one is left to drain (the client's window), reset after STALL_TIMEOUT if it cannot."""
        if stream.gone:
            self.forget(stream)
            return
        if stream.our_state is not http1.DONE:
            self.reset(
                stream,
                ErrorCodes.INTERNAL_ERROR
                if stream.our_state is http1.SEND_BODY
                else ErrorCodes.CANCEL,
            )
        elif stream.ended:
            self.finish(stream)
        else:
            stream.stall = asyncio.get_running_loop().call_later(
                self.stall_timeout, self.reset, stream, ErrorCodes.CANCEL
            )
        self.write_out()

    def finish(self, stream: _Stream) -> None:
        """The response is all sent: a request still coming is refused (RST NO_ERROR)."""
        self.completed += 1
        if stream.their_state is not http1.DONE and not stream.gone:
            try:
                self.conn.reset_stream(stream.id, ErrorCodes.NO_ERROR)
            except h2.exceptions.ProtocolError:
                pass
        self.forget(stream)

    def forget(self, stream: _Stream) -> None:
        """The stream is over for the edge: what it held of the client's window is given
        back, its task cancelled (a client's reset ends the exchange with the agent)."""
        stream.gone = True
        stream.arrived.set()
        stream.moved.set()
        if stream.stall is not None:
            stream.stall.cancel()
        if self.streams.pop(stream.id, None) is None:
            return
        credit = sum(c for _, c in stream.inbox)
        stream.inbox.clear()
        stream.outbox.clear()
        stream.queued = 0
        if credit:
            self.ack(stream.id, credit)
        if (
            stream.task is not None
            and not stream.task.done()
            and stream.task is not asyncio.current_task()
        ):
            stream.task.cancel()

    def reset(self, stream: _Stream, code: int) -> None:
        if not stream.gone:
            try:
                self.conn.reset_stream(stream.id, code)
            except h2.exceptions.ProtocolError:
                pass
        self.forget(stream)
        self.write_out()

    def ack(self, sid: int, size: int) -> None:
        try:
            self.conn.acknowledge_received_data(size, sid)
        except (h2.exceptions.ProtocolError, KeyError):
            pass

    def credit(self, stream: _Stream, size: int) -> None:
        """The request path took ``size`` bytes of the stream's body on: the client may send
        as much more."""
        self.ack(stream.id, size)
        self.write_out()

    def send_headers(self, stream: _Stream, fields: List[Any], end: bool) -> None:
        try:
            self.conn.send_headers(stream.id, fields, end_stream=end)
        except h2.exceptions.ProtocolError as exc:
            if isinstance(exc, h2.exceptions.StreamClosedError):
                self.forget(stream)
                raise ConnectionResetError("stream closed")
            raise http1.LocalProtocolError(f"not a valid HTTP/2 response: {exc}")
        if end:
            stream.ended = True
        self.write_out()

    def flush(self, stream: _Stream) -> None:
        """Send what the windows let through of the stream's queued response, and its end."""
        conn = self.conn
        try:
            while stream.outbox:
                window = min(
                    conn.local_flow_control_window(stream.id), conn.max_outbound_frame_size
                )
                if window <= 0:
                    break
                chunk = stream.outbox[0]
                if len(chunk) <= window:
                    stream.outbox.popleft()
                    piece = chunk
                else:
                    piece, stream.outbox[0] = chunk[:window], chunk[window:]
                conn.send_data(stream.id, bytes(piece))
                stream.queued -= len(piece)
            if not stream.outbox and stream.end is not None and not stream.ended:
                if stream.end:
                    conn.send_headers(stream.id, stream.end, end_stream=True)
                else:
                    conn.end_stream(stream.id)
                stream.ended = True
        except (h2.exceptions.ProtocolError, KeyError):
            self.forget(stream)
            return
        stream.moved.set()
        self.write_out()
        self.finish_if_done(stream)

    def finish_if_done(self, stream: _Stream) -> None:
        if stream.ended and (stream.task is None or stream.task.done()):
            self.finish(stream)


def _alive(leg: Any) -> bool:
    """A proxy stream fit for another exchange: both messages done, nothing pending, the
    agent has not ended or reset it."""
    mux = leg.stream
    return leg.reusable and not mux.buffered and mux.peer_open


def _request_of(fields: List[Any], ended: bool) -> http1.Request:
    """An HTTP/2 request's fields as the ``http1.Request`` the request path takes: Host from
    :authority, cookies joined (RFC 9113 8.2.3), a body of unknown length sent on chunked.
    ValueError / http1.LocalProtocolError when HTTP/1.1 cannot carry it."""
    pseudo: Dict[bytes, bytes] = {}
    pairs, cookies, host = [], [], b""
    for name, value in fields:
        if name.startswith(b":"):
            pseudo[name] = value
        elif name == b"cookie":
            cookies.append(value)
        elif name == b"host":
            host = value
        else:
            pairs.append((name, value))
    method = pseudo.get(b":method", b"")
    if method == b"CONNECT":
        raise ValueError("CONNECT is not served")
    authority = pseudo.get(b":authority") or host
    path = pseudo.get(b":path", b"")
    if not authority or not path:
        raise ValueError("no :authority (or Host) or no :path")
    headers = [(b"host", authority)] + pairs
    if cookies:
        headers.append((b"cookie", b"; ".join(cookies)))
    if not ended and not any(n == b"content-length" for n, _ in pairs):
        headers.append((b"transfer-encoding", b"chunked"))
    return http1.Request(method=method, target=path, headers=headers, checked=True)
