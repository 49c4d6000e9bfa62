"""The agent side of an exchange in HTTP/2, for endpoints bound with ``app_protocol: "http2"``
(the Bind's ``ForwardsProto``).

What the official SDKs do with that option (ngrok-rust ``tunnel_ext.rs``, which the Python and
JavaScript SDKs wrap): for an ``https://`` upstream they offer ALPN ``h2`` in their TLS
handshake with it; for an ``http://`` upstream they only copy the proxy stream's bytes to a
TCP connection. Either way the bytes on the proxy stream are the edge's: so the edge speaks
HTTP/2 itself on it, with prior knowledge (h2c, RFC 9113 3.3), and gRPC servers, which speak
nothing else, are reached.

``H2Leg`` has the interface of ``edge.public._Leg`` (``send`` / ``next_event`` / ``reusable`` /
``close`` / ``conn.start_next_cycle``), turning the front's ``edge.http1`` events into one
HTTP/2 stream per exchange and the upstream's frames back into events, trailers included
(``edge.h2wire.EndOfMessage``). A reader task feeds the state machine; the upstream's DATA is
credited back (WINDOW_UPDATE) only as the front consumes it, so a slow client holds the
upstream back by HTTP/2 flow control, and the request body waits for the upstream's window.
One proxy stream carries the exchanges of one client connection in turn, as HTTP/1.1 does.
"""

import asyncio
import collections
from typing import Any, Callable, Deque, Optional, Set, Tuple

import h2.events
import h2.exceptions
from h2.errors import ErrorCodes

from edge import h2wire, http1
from edge.session import MuxStream, StreamReset

READ_CHUNK = 64 * 1024
CLOSE_WRITE_TIMEOUT = 5.0
_closing: Set["asyncio.Future[Any]"] = set()  # RST_STREAM + FIN writes after a cut exchange


class H2Leg:
    def __init__(self, tunnel: Any, stream: MuxStream):
        self.tunnel = tunnel
        self.stream = stream
        self.conn = self  # what the front calls ``leg.conn``
        self.scheme = (
            b"https" if str(getattr(tunnel, "forwards_to", "")).startswith("https://") else b"http"
        )
        self.h2 = h2wire.new_connection(client_side=True, max_streams=100)
        self._events: Deque[Tuple[Any, int]] = collections.deque()
        self._ready = asyncio.Event()
        self._window = asyncio.Event()
        self._lock = asyncio.Lock()
        self._reader: Optional["asyncio.Task[None]"] = None
        self._failed: Optional[BaseException] = None
        self._terminated = False
        self._head: Optional[Tuple[Any, bool]] = None  # request fields not sent yet
        self._trailers: Optional[list] = None
        self.sid = 0
        self.our_state = self.their_state = http1.IDLE

    # ---- the front's interface --------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        return (
            self.our_state is http1.DONE
            and self.their_state is http1.DONE
            and self._failed is None
            and not self._terminated
            and self.sid < 2**30
        )

    @property
    def trailing_data(self) -> Tuple[bytes, bool]:
        return b"", False

    def start_next_cycle(self) -> None:
        self.our_state = self.their_state = http1.IDLE
        self._events.clear()
        self._trailers, self.sid = None, 0

    async def send(self, event: Any) -> None:
        if isinstance(event, http1.Request):
            self.sid = self.h2.get_next_available_stream_id()
            host = b""
            for name, value in event.headers:
                if name == b"host":
                    host = value
            fields = [
                (b":method", event.method),
                (b":scheme", self.scheme),
                (b":authority", host),
                (b":path", event.target),
            ]
            self._head = (fields + h2wire.h2_fields(event.headers), False)
            self.our_state, self.their_state = http1.SEND_BODY, http1.SEND_RESPONSE
            if self._reader is None:
                self._reader = asyncio.ensure_future(self._read_loop())
            return
        # frames are gathered and written once at the end (the head with the first data)
        if isinstance(event, http1.Data):
            await self._send_head(end=False, flush=False)
            await self._send_data(bytes(event.data))
        elif isinstance(event, http1.EndOfMessage):
            trailers = h2wire.h2_fields(getattr(event, "trailers", None) or [])
            if self._head is not None and not trailers:
                await self._send_head(end=True, flush=False)
            else:
                await self._send_head(end=False, flush=False)
                self._call(
                    lambda: self.h2.send_headers(self.sid, trailers, end_stream=True)
                    if trailers
                    else self.h2.end_stream(self.sid)
                )
            self.our_state = http1.DONE
        await self._flush()

    async def next_event(self, before_wait: Optional[Callable[[], None]] = None) -> Any:
        await self._send_head(end=False)
        while not self._events:
            if self._failed is not None:
                raise self._failed
            if before_wait is not None:
                before_wait()
            self._ready.clear()
            await self._ready.wait()
        event, credit = self._events.popleft()
        if credit:
            try:
                self.h2.acknowledge_received_data(credit, self.sid)
            except h2.exceptions.ProtocolError:
                pass
            await self._flush()
        if isinstance(event, http1.EndOfMessage):
            self.their_state = http1.DONE
        elif isinstance(event, http1.Response):
            self.their_state = http1.SEND_BODY
        return event

    def close(self) -> None:
        """End the proxy stream; an exchange cut short is reset first (RST_STREAM CANCEL: a
        gRPC server sees the call cancelled), then FIN as ``_Leg.close`` does."""
        if self._reader is not None:
            self._reader.cancel()
        data = b""
        if (
            self.sid
            and (self.our_state is not http1.DONE or self.their_state is not http1.DONE)
            and self._failed is None
        ):
            try:
                self.h2.reset_stream(self.sid, ErrorCodes.CANCEL)
                self.h2.close_connection()
                data = self.h2.data_to_send()
            except h2.exceptions.ProtocolError:
                data = b""
        if not data:
            self.stream.finish()
            return

        async def last_words() -> None:
            try:
                await asyncio.wait_for(self.stream.write(data), CLOSE_WRITE_TIMEOUT)
            except (StreamReset, asyncio.TimeoutError, ConnectionError):
                pass
            finally:
                self.stream.finish()

        task = asyncio.ensure_future(last_words())
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    # ---- writing ----------------------------------------------------------------------------
    def _call(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError) as exc:
            raise StreamReset(f"upstream stream closed: {exc}")

    async def _send_head(self, end: bool, flush: bool = True) -> None:
        if self._head is None:
            return
        fields, _ = self._head
        self._head = None
        self._call(lambda: self.h2.send_headers(self.sid, fields, end_stream=end))
        if flush:
            await self._flush()

    async def _send_data(self, data: bytes) -> None:
        view, unflushed = memoryview(data), 0
        while view:
            window = self.h2.local_flow_control_window(self.sid)
            if window <= 0:
                await self._flush()
                if self._failed is not None:
                    raise StreamReset("upstream gone")
                self._window.clear()
                await self._window.wait()
                unflushed = 0
                continue
            size = min(len(view), window, self.h2.max_outbound_frame_size)
            self._call(lambda: self.h2.send_data(self.sid, bytes(view[:size])))
            view = view[size:]
            unflushed += size
            if unflushed >= READ_CHUNK:
                await self._flush()
                unflushed = 0

    async def _flush(self) -> None:
        async with self._lock:  # one writer at a time: frames stay whole and in order
            data = self.h2.data_to_send()
            if data:
                await self.stream.write(data)

    # ---- reading ----------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc
        self._ready.set()
        self._window.set()

    async def _read_loop(self) -> None:
        await self._flush()  # the preface and SETTINGS, before anything is read
        try:
            while True:
                data = await self.stream.read(READ_CHUNK)
                if not data:
                    self._fail(StreamReset("upstream closed the connection"))
                    return
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    self._fail(http1.RemoteProtocolError(f"upstream broke HTTP/2: {exc}"))
                    await self._flush()
                    return
                for event in events:
                    self._on(event)
                await self._flush()
                self._ready.set()
        except (StreamReset, ConnectionError) as exc:
            self._fail(exc if isinstance(exc, StreamReset) else StreamReset(str(exc)))

    def _on(self, event: Any) -> None:
        sid = getattr(event, "stream_id", None)
        if isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._window.set()
            return
        if isinstance(event, h2.events.ConnectionTerminated):
            self._terminated = True
            if self.sid and (
                event.last_stream_id is None
                or self.sid > event.last_stream_id
                or event.error_code != ErrorCodes.NO_ERROR
            ):
                self._fail(StreamReset(f"upstream GOAWAY ({event.error_code!r})"))
            return
        if sid is None or sid != self.sid:
            if isinstance(event, h2.events.DataReceived) and sid is not None:  # given up on
                try:
                    self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
                except h2.exceptions.ProtocolError:
                    pass
            return
        try:
            if isinstance(event, h2.events.ResponseReceived):
                self._events.append((self._head_event(event.headers, http1.Response), 0))
            elif isinstance(event, h2.events.InformationalResponseReceived):
                self._events.append(
                    (self._head_event(event.headers, http1.InformationalResponse), 0)
                )
            elif isinstance(event, h2.events.DataReceived):
                if event.data:
                    self._events.append((http1.Data(event.data), event.flow_controlled_length))
                elif event.flow_controlled_length:  # padding only
                    self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            elif isinstance(event, h2.events.TrailersReceived):
                self._trailers = h2wire.http1_fields(event.headers)
            elif isinstance(event, h2.events.StreamEnded):
                self._events.append((h2wire.EndOfMessage(self._trailers), 0))
            elif isinstance(event, h2.events.StreamReset):
                self._fail(StreamReset(f"upstream reset the stream ({event.error_code!r})"))
        except http1.LocalProtocolError as exc:
            self._fail(http1.RemoteProtocolError(f"upstream header not valid: {exc}"))

    def _head_event(self, fields: Any, kind: Any) -> Any:
        status = 0
        for name, value in fields:
            if name == b":status":
                status = int(value)
        try:
            return kind(status_code=status, headers=h2wire.http1_fields(fields))
        except http1.LocalProtocolError as exc:
            raise http1.LocalProtocolError(str(exc))
