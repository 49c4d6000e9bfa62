"""A muxado session over an asyncio stream pair: streams with flow control both ways.

- Every stream starts with a send window and a receive window of ``DEFAULT_WINDOW`` bytes.
  A writer never has more unacknowledged bytes in flight than its send window; the peer's
  WNDINC frames give credit back. We give credit back (WNDINC) as the reader consumes
  bytes, so a slow consumer stops the peer instead of growing a buffer; the credit is
  returned once ``CREDIT_BATCH`` bytes are consumed, not after every read: the peer keeps
  at least 3/4 of its window and a small exchange costs no WNDINC frame at all.
- Frames are written through one buffer per session, flushed once per event-loop turn
  (or at once past ``FLUSH_AT`` bytes): the frames of one turn (a request head, WNDINCs,
  several streams' data) go out as one TLS record and one system call. Measured with
  bench/edge_bench: see the commit that introduced it.
- The agent opens odd stream ids; the edge opens even ones (``open_stream``).
- A frame that breaks the protocol (bad header, DATA beyond the window, SYN for a live or
  wrongly numbered id) ends the session with GOAWAY carrying the muxado error code; it
  never raises out of :meth:`MuxSession.run`.

How a stream ends, and why (docs/AGENT_PROTOCOL.md, "How a stream ends"). The agents count a
stream open until their own side is done with it, and they refuse new streams past 512
(ngrok-rust's muxado drops the whole session then):

- ngrok-rust removes a stream when the SDK drops it, which happens when its forwarding copy
  ends: both directions at EOF, or a write that fails. A stream it only received RST on
  while its upstream is idle is never dropped: an RST without a FIN leaks it.
- ngrok-go removes a stream when both sides sent FIN, or at once on RST or a local Close.

So the edge ends every stream it is done with by :meth:`MuxStream.finish`, whether the
exchange completed or was cut short: a FIN (the SDK reads EOF, half-closes its upstream,
which then closes, and the SDK's FIN follows), and the stream stays in the table until that
FIN, so the edge's count of open streams never falls below the agent's. Data the agent still
sends is refused with RST (its next write fails and its copy ends); no FIN within
``LINGER_SECONDS`` and the stream is reset. An RST alone is never how the edge ends a stream:
:meth:`MuxStream.reset` sends a FIN first. The streams the edge opens on one session are
capped at ``MAX_LOCAL_STREAMS``; an opener waits for a slot
(:meth:`MuxSession.open_stream_when_free`).
"""

import asyncio
import collections
import logging
import time
from typing import Any, Awaitable, Callable, Dict, Optional

from edge import muxado
from edge.muxado import ProtocolError

log = logging.getLogger("edge.mux")

MAX_STREAMS = 512  # concurrent streams a peer may open (the crate's default)
MAX_LOCAL_STREAMS = 480  # streams the edge keeps open towards one agent (below its 512:
# the agent's own heartbeat and RPC streams count there too)
LINGER_SECONDS = 30.0  # a finished stream waits this long for the peer's FIN
# A stream of ours that left the table still counts towards MAX_LOCAL_STREAMS for this long:
# ngrok-rust's muxado sends its FIN before its application drops the stream, and removes it
# from its own table only then (stream_manager.rs); a SYN that meets a full table there ends
# the whole session ("transport error" in the SDK). Measured: a burst of 1,000 requests on a
# loaded machine made the SDK reconnect in 3 of ~15 runs with the slot given back at the FIN.
SLOT_GRACE = 0.2
# Before the peer is authenticated (``MuxSession.authenticated``), what it may make us hold:
PRE_AUTH_STREAMS = 2  # streams (the SDKs open Auth, and may open Heartbeat, before it)
PRE_AUTH_BYTES = 32 * 1024  # DATA payload in total, and so the largest frame we buffer
# A Go muxado peer (the agent CLI) takes a stream's id when it opens it and sends the SYN with
# its first write, so two streams opened at once by two goroutines may announce themselves in
# either order: stream 7's SYN after stream 9's. The ids a SYN passed over are remembered, the
# OUT_OF_ORDER_IDS closest below it at most, and each may still open once.
OUT_OF_ORDER_IDS = 64
READ_CHUNK = 64 * 1024
WRITE_CHUNK = 64 * 1024
CREDIT_BATCH = muxado.DEFAULT_WINDOW // 4  # consumed bytes returned as credit in one WNDINC
FLUSH_AT = 64 * 1024  # buffered frame bytes that are written without waiting for the turn
# Unsent bytes past which the edge stops reading the peer until they drain: the frames it
# answers with no wait of its own (an RST per refused SYN, WNDINCs) cannot pile up without
# bound behind a peer that sends and never reads.
UNSENT_PAUSE_AT = 1024 * 1024


class StreamReset(ConnectionError):
    """The stream was reset (RST from the peer, or the session ended)."""


class StreamsExhausted(StreamReset):
    """MAX_LOCAL_STREAMS of ours are open on the session: no stream opened."""


class MuxStream:
    """One muxado stream: ``read`` / ``readexactly`` / ``write`` / ``close_write`` / ``reset``."""

    def __init__(self, session: "MuxSession", stream_id: int, *, local: bool):
        self.session = session
        self.id = stream_id
        self._recv = bytearray()
        # the reader waiting for data, the writer waiting for credit (_waiter_after)
        self._waiter: Optional[asyncio.Future] = None
        self._remote_fin = False
        self._reset: Optional[str] = None
        self._send_window = muxado.DEFAULT_WINDOW
        self._recv_window = muxado.DEFAULT_WINDOW  # credit the peer still has
        self._window_waiter: Optional[asyncio.Future] = None
        self.local = local
        self._needs_syn = local
        self._local_fin = False
        self._consumed = 0  # bytes read and not yet returned as credit (WNDINC)
        self._finished = False  # the owner is done with it: no more reads (see finish)
        self._linger: Optional[asyncio.TimerHandle] = None

    @property
    def peer_open(self) -> bool:
        """The peer has neither ended its side (FIN) nor reset the stream."""
        return self._reset is None and not self._remote_fin

    # ---- reading --------------------------------------------------------------------------
    async def read(self, n: int = READ_CHUNK) -> bytes:
        """Up to ``n`` bytes; b"" at the end of the peer's side. StreamReset if reset."""
        while not self._recv:
            if self._reset is not None:
                raise StreamReset(self._reset)
            if self._remote_fin:
                return b""
            waiter = self._waiter = _waiter_after(self._waiter)
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        if n >= len(self._recv):  # all of it: a fresh buffer (a drained one keeps its size)
            chunk, self._recv = bytes(self._recv), bytearray()
        else:
            chunk = bytes(self._recv[:n])
            del self._recv[:n]
        if not self._remote_fin and self._reset is None:
            self._consumed += len(chunk)
            if self._consumed >= CREDIT_BATCH:
                self._recv_window += self._consumed
                self.session.send_nowait(muxado.wndinc(self.id, self._consumed))
                self._consumed = 0
        return chunk

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    # ---- writing --------------------------------------------------------------------------
    async def write(self, payload: bytes) -> None:
        view = memoryview(payload)
        while view:
            while self._send_window <= 0:
                if self._reset is not None:
                    raise StreamReset(self._reset)
                waiter = self._window_waiter = _waiter_after(self._window_waiter)
                try:
                    await waiter
                finally:
                    if self._window_waiter is waiter:
                        self._window_waiter = None
            if self._reset is not None:
                raise StreamReset(self._reset)
            if self._local_fin:
                raise StreamReset("write after close")
            size = min(len(view), self._send_window, WRITE_CHUNK)
            self._send_window -= size
            frame = muxado.data(self.id, bytes(view[:size]), syn=self._needs_syn)
            self._needs_syn = False
            view = view[size:]
            await self.session.send(frame)

    async def close_write(self) -> None:
        """Half-close: FIN on our side (idempotent; nothing after a reset)."""
        if self._local_fin or self._reset is not None:
            return
        self._local_fin = True
        await self.session.send(muxado.data(self.id, b"", syn=self._needs_syn, fin=True))
        self._needs_syn = False
        self.session.maybe_forget(self)

    def _fin_nowait(self) -> None:
        if not self._local_fin:
            self._local_fin = True
            self.session.send_nowait(muxado.data(self.id, b"", fin=True))

    def finish(self) -> None:
        """The owner is done with the stream, whether its exchange completed or was cut
        short: FIN on our side (if not sent yet) and no more reads; what was received and
        not read is dropped. The stream stays in the table until the peer's FIN (its SDK
        counts it open until then: see the module's docstring); data the peer still sends
        is refused with RST (E_STREAM_CLOSED), which fails its next write; a peer that
        sends no FIN within LINGER_SECONDS is reset."""
        if self._reset is not None or self._finished:
            return
        if self._needs_syn:  # the peer never heard of it
            self._mark_reset("never opened")
            return
        self._finished = True
        self._recv.clear()
        self._fin_nowait()
        if self._remote_fin:
            self.session.forget(self)
        else:
            self.session.linger(self)

    def reset(self, code: int = muxado.E_STREAM_CANCELLED) -> None:
        """Abort both directions: FIN (if not sent yet, so an SDK reading the stream gets its
        EOF), then RST (its writes fail). A stream of ours the peer never heard of (no frame
        sent yet) is just forgotten."""
        if self._reset is None:
            never_sent = self._needs_syn
            self._mark_reset("reset locally")
            if never_sent or self.session.closed:
                return
            self._fin_nowait()
            self.session.send_nowait(muxado.rst(self.id, code))

    # ---- fed by the session ---------------------------------------------------------------
    def _on_data(self, payload: bytes, fin: bool) -> None:
        if len(payload) > self._recv_window:
            raise ProtocolError(
                f"stream {self.id} sent {len(payload)} bytes with "
                f"{self._recv_window} of window left",
                muxado.E_FLOW_CONTROL,
            )
        if self._remote_fin and payload:
            raise ProtocolError(f"stream {self.id} sent data after FIN", muxado.E_STREAM_CLOSED)
        self._recv_window -= len(payload)
        if payload and self._finished:  # nobody reads it any more: refused
            self.reset(muxado.E_STREAM_CLOSED)
            return
        if payload:
            self._recv += payload
        if fin:
            self._remote_fin = True
        _wake(self._waiter)

    def _on_wndinc(self, increment: int) -> None:
        self._send_window += increment
        _wake(self._window_waiter)

    def _mark_reset(self, why: str) -> None:
        self._reset = why
        _wake(self._waiter)
        _wake(self._window_waiter)
        self.session.forget(self)

    @property
    def buffered(self) -> int:
        """Bytes received and not read yet."""
        return len(self._recv)

    @property
    def done(self) -> bool:
        return self._reset is not None or (self._local_fin and self._remote_fin)

    @property
    def finished(self) -> bool:
        """finish() was called: the stream only waits for the peer's FIN."""
        return self._finished


def _waiter_after(previous: Optional[asyncio.Future]) -> asyncio.Future:
    """A future for one wait on a stream (data, or send credit) until :func:`_wake`. A bare
    future per wait: an asyncio.Event cost a future, a deque and a clear per wait (4 µs more
    a wake-up, measured with a loop of 100,000). A second task waiting on the same stream
    (none does today) still works: the newer waiter wakes the one before it, which looks
    again and waits anew (a wake-up without data is only a look)."""
    waiter = asyncio.get_running_loop().create_future()
    if previous is not None and not previous.done():
        waiter.add_done_callback(lambda _: _wake(previous))
    return waiter


def _wake(waiter: Optional[asyncio.Future]) -> None:
    """Wake the task waiting on a stream's slot, if any."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


StreamHandler = Callable[[MuxStream], Awaitable[None]]


class MuxSession:
    """Runs one muxado session; ``on_stream`` is started as a task for each stream the peer
    opens. ``run()`` returns when the session ends, whatever the reason."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_stream: StreamHandler,
        *,
        name: str = "",
    ):
        self._reader = reader
        self._writer = writer
        self._on_stream = on_stream
        self._streams: Dict[int, MuxStream] = {}
        self._tasks: set = set()
        self._next_local_id = 2
        self._last_remote_id = 0
        # peer ids below _last_remote_id not yet opened, oldest first (a dict as an ordered
        # set: ids are only ever added rising)
        self._passed_over: Dict[int, None] = {}
        self.local_open = 0  # streams of ours in the table (MAX_LOCAL_STREAMS)
        self._cooling: "collections.deque[float]" = collections.deque()  # SLOT_GRACE ends
        self.remote_open = 0  # streams of the peer's in the table (MAX_STREAMS)
        self._parser = muxado.FrameParser(max_payload=PRE_AUTH_BYTES)
        self._authenticated = False
        self._pre_auth_bytes = 0  # DATA payload received before authentication
        self._slot_freed = asyncio.Event()
        self.closed = False
        self.close_reason = ""
        self.name = name
        self._ended: Optional[asyncio.Future] = None  # run(): resolved when the session ends
        self._out: list = []  # frames queued this turn (see send_nowait)
        self._out_size = 0
        self._flush_scheduled = False
        self._reading_paused = False  # UNSENT_PAUSE_AT reached: the peer is not read

    # ---- sending ----------------------------------------------------------------------------
    def send_nowait(self, frame: bytes) -> None:
        """Queue a frame; it is written at the end of this event-loop turn."""
        if self.closed:
            return
        self._out.append(frame)
        self._out_size += len(frame)
        if self._out_size >= FLUSH_AT:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and not self.closed:
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._out_size = 0
            try:
                self._writer.write(data)
            except (ConnectionError, OSError, RuntimeError) as exc:
                self.close_reason = self.close_reason or f"connection lost: {exc}"
                return
            transport = self._writer.transport
            if not self._reading_paused and transport.get_write_buffer_size() > UNSENT_PAUSE_AT:
                self._pause_reading(transport)

    def _pause_reading(self, transport: Any) -> None:
        """Stop reading the peer until what we wrote drains (UNSENT_PAUSE_AT)."""
        try:
            transport.pause_reading()
        except (AttributeError, RuntimeError):
            return
        self._reading_paused = True
        task = asyncio.get_running_loop().create_task(self._resume_when_drained(transport))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resume_when_drained(self, transport: Any) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError, RuntimeError):
            return
        self._reading_paused = False
        if not self.closed and not transport.is_closing():
            transport.resume_reading()

    async def send(self, frame: bytes) -> None:
        """Queue a frame, waiting while the connection's write buffer is full. StreamReset
        at once when the session is closed or its connection is closing (lost, and the read
        loop has not seen it yet): the frame could never be sent."""
        if self.closed:
            raise StreamReset("session closed")
        if self._writer.transport.is_closing():
            self.close_reason = self.close_reason or "connection lost"
            raise StreamReset("session connection closing")
        self.send_nowait(frame)
        transport = self._writer.transport
        if transport.get_write_buffer_size() > 0 or self._out_size >= FLUSH_AT:
            self._flush()
            await self._writer.drain()

    def open_stream(self) -> MuxStream:
        """A new stream of ours (its SYN goes with its first frame). StreamsExhausted when
        MAX_LOCAL_STREAMS of ours are open, those that left the table less than SLOT_GRACE
        ago included: see open_stream_when_free."""
        if self.closed:
            raise StreamReset("session closed")
        if self.local_open + len(self._cooling) >= MAX_LOCAL_STREAMS:
            cooling = self.cooling
            if self.local_open + cooling >= MAX_LOCAL_STREAMS:
                raise StreamsExhausted(
                    f"{self.local_open} streams open towards the agent"
                    + (f" and {cooling} that ended just now" if cooling else "")
                )
        stream = MuxStream(self, self._next_local_id, local=True)
        self._next_local_id += 2
        self._add(stream)
        return stream

    async def open_stream_when_free(self, timeout: float) -> MuxStream:
        """open_stream, waiting up to ``timeout`` seconds for a slot when all are taken
        (StreamsExhausted after that; StreamReset when the session ends)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                return self.open_stream()
            except StreamsExhausted:
                left = deadline - loop.time()
                if left <= 0:
                    raise
            if self._cooling:  # a slot comes back when its grace ends, with no event
                left = min(left, max(0.005, self._cooling[0] - time.monotonic()))
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), left)
            except asyncio.TimeoutError:
                pass

    # ---- stream table -----------------------------------------------------------------------
    def _add(self, stream: MuxStream) -> None:
        self._streams[stream.id] = stream
        if stream.local:
            self.local_open += 1
        else:
            self.remote_open += 1

    def forget(self, stream: MuxStream) -> None:
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]
            if stream.local:
                self.local_open -= 1
                if not stream._needs_syn:  # the peer knew it: see SLOT_GRACE
                    self._cooling.append(time.monotonic() + SLOT_GRACE)
                self._slot_freed.set()
            else:
                self.remote_open -= 1
        if stream._linger is not None:
            stream._linger.cancel()
            stream._linger = None

    def maybe_forget(self, stream: MuxStream) -> None:
        if stream.done:
            self.forget(stream)

    def linger(self, stream: MuxStream) -> None:
        """A finished stream waits LINGER_SECONDS for the peer's FIN, then is reset."""
        if stream._linger is None and not self.closed:
            stream._linger = asyncio.get_running_loop().call_later(
                LINGER_SECONDS, self._linger_over, stream
            )

    def _linger_over(self, stream: MuxStream) -> None:
        stream._linger = None
        if not stream.done:
            stream.reset(muxado.E_STREAM_CANCELLED)

    @property
    def cooling(self) -> int:
        """Streams of ours that left the table less than SLOT_GRACE ago."""
        now, cooling = time.monotonic(), self._cooling
        while cooling and cooling[0] <= now:
            cooling.popleft()
        return len(cooling)

    @property
    def open_streams(self) -> int:
        """Streams in the table, both sides' (what the soak and the tests watch)."""
        return len(self._streams)

    @property
    def lingering(self) -> int:
        """Finished streams waiting for the peer's FIN."""
        return sum(1 for stream in self._streams.values() if stream.finished)

    # ---- the read loop ----------------------------------------------------------------------
    @property
    def authenticated(self) -> bool:
        return self._authenticated

    def authenticate(self) -> None:
        """The peer proved who it is: the pre-authentication bounds are lifted."""
        self._authenticated = True
        self._parser.max_payload = muxado.DEFAULT_WINDOW

    async def run(self) -> None:
        """Handle the peer's frames until the session ends. After the bytes that arrived
        before it ran, the frames are handled where the connection delivers its bytes (the
        reader's ``feed_data``, ``feed_eof`` and ``set_exception``, which its protocol calls,
        are taken over): no task wakes up and no buffer is copied per read. Measured with
        bench/edge_bench/bench_peers.py: see the commit that introduced it."""
        reader = self._reader
        ended = self._ended = asyncio.get_running_loop().create_future()
        try:
            first = await reader.read(1 << 30)  # all the reader holds, or its first bytes
            if not first:
                self.close_reason = self.close_reason or "peer closed the connection"
                return
            parser = self._parser

            def feed_data(chunk: bytes) -> None:
                if ended.done():
                    return
                try:
                    for frame in parser.feed(chunk):
                        self._handle(frame)
                except Exception as exc:  # ends the session: run() sorts it out
                    ended.set_exception(exc)

            def feed_eof() -> None:
                if not ended.done():
                    ended.set_result("peer closed the connection")

            def set_exception(exc: BaseException) -> None:
                if not ended.done():
                    ended.set_exception(exc)

            reader.feed_data = feed_data  # type: ignore[method-assign, assignment]
            reader.feed_eof = feed_eof  # type: ignore[method-assign]
            reader.set_exception = set_exception  # type: ignore[method-assign]
            feed_data(first)
            reason = await ended
            if reason:
                self.close_reason = self.close_reason or reason
        except ProtocolError as exc:
            log.info("session %s: protocol error: %s", self.name, exc)
            await self.go_away(exc.code, f"protocol error: {exc}")
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            self.close_reason = self.close_reason or f"connection lost: {exc}"
        finally:
            await self.close()

    def _handle(self, frame: muxado.Frame) -> None:
        sid = frame.stream_id
        if frame.type == muxado.DATA:
            if not self._authenticated:
                self._pre_auth_bytes += len(frame.payload)
                if self._pre_auth_bytes > PRE_AUTH_BYTES:
                    raise ProtocolError(
                        f"more than {PRE_AUTH_BYTES} bytes before authentication",
                        muxado.E_ENHANCE_YOUR_CALM,
                    )
                if frame.syn and self.remote_open >= PRE_AUTH_STREAMS:
                    raise ProtocolError(
                        f"more than {PRE_AUTH_STREAMS} streams before authentication",
                        muxado.E_ENHANCE_YOUR_CALM,
                    )
            stream = self._streams.get(sid)
            if frame.syn:
                if stream is not None or sid % 2 == 0:
                    raise ProtocolError(f"SYN for stream {sid} that cannot be opened")
                last = self._last_remote_id
                if sid > last:
                    if sid > last + 2:
                        self._pass_over(last, sid)
                    self._last_remote_id = sid
                elif sid in self._passed_over:
                    del self._passed_over[sid]
                else:
                    raise ProtocolError(f"SYN for stream {sid} that cannot be opened")
                if self.remote_open >= MAX_STREAMS:
                    self.send_nowait(muxado.rst(sid, muxado.E_STREAMS_EXHAUSTED))
                    return
                stream = MuxStream(self, sid, local=False)
                self._add(stream)
                stream._on_data(frame.payload, frame.fin)
                self._spawn(stream)
                return
            if stream is None:
                if (
                    sid % 2 == 0
                    and sid >= self._next_local_id
                    or sid % 2 == 1
                    and sid > self._last_remote_id
                ):
                    raise ProtocolError(f"DATA for stream {sid} that was never opened")
                return  # late data for a stream we already closed: dropped
            stream._on_data(frame.payload, frame.fin)
            self.maybe_forget(stream)
        elif frame.type == muxado.WNDINC:
            stream = self._streams.get(sid)
            if stream is not None:
                stream._on_wndinc(frame.increment)
        elif frame.type == muxado.RST:
            stream = self._streams.get(sid)
            if stream is not None:
                stream._mark_reset(f"reset by peer (code {frame.error_code})")
        elif frame.type == muxado.GOAWAY:
            self.close_reason = (
                f"peer went away (code {frame.error_code}): "
                f"{frame.message.decode('utf-8', 'replace')}"
            )
            raise _PeerGoneAway()

    def _pass_over(self, last: int, sid: int) -> None:
        """Remember the odd ids between ``last`` and ``sid``, the OUT_OF_ORDER_IDS closest
        below ``sid``, as ids whose SYN may still come; older ones are forgotten first."""
        passed = self._passed_over
        lowest = last + 2 if last else 1  # no SYN yet: the peer's first id is 1
        passed.update(dict.fromkeys(range(max(lowest, sid - 2 * OUT_OF_ORDER_IDS), sid, 2)))
        while len(passed) > OUT_OF_ORDER_IDS:
            del passed[next(iter(passed))]

    def _spawn(self, stream: MuxStream) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: MuxStream) -> None:
        try:
            await self._on_stream(stream)
        except StreamReset:
            pass
        except ProtocolError as exc:
            log.info("session %s: stream %d: %s", self.name, stream.id, exc)
            await self.go_away(exc.code, str(exc))
        except Exception:  # a handler bug ends that stream, never the process
            log.exception("session %s: stream %d handler failed", self.name, stream.id)
            stream.reset(muxado.E_INTERNAL)
        finally:  # a handler that returned is done with its stream
            stream.finish()

    # ---- ending -----------------------------------------------------------------------------
    async def go_away(self, code: int, message: str) -> None:
        """GOAWAY to the peer, then close the connection."""
        if self.closed:
            return
        self.close_reason = self.close_reason or message
        try:
            self._flush()
            self._writer.write(
                muxado.goaway(self._last_remote_id, code, message.encode("utf-8")[:1024])
            )
            await asyncio.wait_for(self._writer.drain(), 2)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass
        await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self._flush()  # what was queued before the end (an RST, a last frame) still goes
        self.closed = True
        if self._ended is not None and not self._ended.done():
            self._ended.set_result("")  # run() returns
        for stream in list(self._streams.values()):
            stream._mark_reset("session closed")
        self._streams.clear()
        self._slot_freed.set()  # openers waiting for a slot see the session closed
        try:
            self._writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass
        for task in list(self._tasks):
            task.cancel()


class _PeerGoneAway(ConnectionError):
    """GOAWAY received: the session ends (not a protocol error of ours)."""
