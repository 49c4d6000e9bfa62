"""An agent's muxado session as the edge's Python sees it: streams to read and write, whose
bytes the compiled core carries (edge_core/src/mux.rs: framing, flow control, the stream
table and its bounds; edge_core/src/session.rs: the connection). Python keeps the decisions:
which handler serves a stream the agent opens, when to open one, when one is done.

The rules below are the core's, learned against the real agents; this module passes their
values to it (:func:`limits`, read when a session starts) and each is pinned by a test of
edge_core/tests/mux.rs that names it (tests/unit/test_edge_session*.py pin them again through
Python):

- Every stream starts with a send window and a receive window of ``DEFAULT_WINDOW`` bytes;
  credit goes back (WNDINC) once ``CREDIT_BATCH`` bytes were consumed, not after every read.
- Frames the edge queues in one event-loop turn leave in one write (the session is flushed
  once per turn, or at once past ``FLUSH_AT`` bytes).
- The agent opens odd stream ids; the edge even ones (:meth:`MuxSession.open_stream`). A Go
  muxado peer (the agent CLI) takes a stream's id when it opens it and sends the SYN with its
  first write, so SYNs may come out of order: the ids a SYN passed over, the
  ``OUT_OF_ORDER_IDS`` closest below it, may each still open once.
- A frame that breaks the protocol (bad header, DATA beyond the window, SYN for a live or
  wrongly numbered id) ends the session with GOAWAY carrying the muxado error code.
- Before :meth:`MuxSession.authenticate`: ``PRE_AUTH_STREAMS`` streams and ``PRE_AUTH_BYTES``
  of DATA payload at most (GOAWAY ENHANCE_YOUR_CALM beyond).
- Past ``UNSENT_PAUSE_AT`` unsent bytes the core stops reading the agent until they drain.

How a stream ends, and why (docs/AGENT_PROTOCOL.md, "How a stream ends"). The agents count a
stream open until their own side is done with it, and they refuse new streams past 512
(ngrok-rust's muxado drops the whole session then):

- ngrok-rust removes a stream when the SDK drops it, which happens when its forwarding copy
  ends: both directions at EOF, or a write that fails. A stream it only received RST on
  while its upstream is idle is never dropped: an RST without a FIN leaks it.
- ngrok-go removes a stream when both sides sent FIN, or at once on RST or a local Close.

So the edge ends every stream it is done with by :meth:`MuxStream.finish`, whether the
exchange completed or was cut short: a FIN, and the stream stays in the table until the
agent's FIN, so the edge's count of open streams never falls below the agent's. Data the
agent still sends is refused with RST; no FIN within ``LINGER_SECONDS`` and the stream is
reset. An RST alone is never how the edge ends a stream: :meth:`MuxStream.reset` sends a FIN
first. The streams the edge opens on one session are capped at ``MAX_LOCAL_STREAMS`` (a slot
the agent knew counts ``SLOT_GRACE`` longer); an opener waits for a slot
(:meth:`MuxSession.open_stream_when_free`).
"""

import asyncio
import logging
import socket
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import edge_core
from edge import muxado

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
# SYNs passed over that may still come (see the module's docstring)
OUT_OF_ORDER_IDS = 64
READ_CHUNK = 64 * 1024
WRITE_CHUNK = 64 * 1024
CREDIT_BATCH = muxado.DEFAULT_WINDOW // 4  # consumed bytes returned as credit in one WNDINC
FLUSH_AT = 64 * 1024  # queued frame bytes that are written without waiting for the turn
# Unsent bytes past which the core stops reading the peer until they drain: the frames it
# answers with no wait of its own (an RST per refused SYN, WNDINCs) cannot pile up without
# bound behind a peer that sends and never reads.
UNSENT_PAUSE_AT = 1024 * 1024

# the core's events (edge_core/src/mux.rs: EV_*)
EV_OPENED, EV_READABLE, EV_WRITABLE, EV_SLOT, EV_CLOSED, EV_DONE = 1, 2, 3, 4, 5, 6
# what go_away waits for its GOAWAY to be written (the core gives up after 2 s)
GOAWAY_WAIT = 3.0

StreamReset = edge_core.StreamReset  # a ConnectionError: RST, or the session ended
StreamsExhausted = edge_core.StreamsExhausted  # MAX_LOCAL_STREAMS of ours are open


def limits() -> Dict[str, float]:
    """The bounds a new session gets (the module's values as they are now)."""
    return {
        "window": muxado.DEFAULT_WINDOW,
        "max_streams": MAX_STREAMS,
        "max_local_streams": MAX_LOCAL_STREAMS,
        "linger": LINGER_SECONDS,
        "slot_grace": SLOT_GRACE,
        "pre_auth_streams": PRE_AUTH_STREAMS,
        "pre_auth_bytes": PRE_AUTH_BYTES,
        "out_of_order_ids": OUT_OF_ORDER_IDS,
        "credit_batch": CREDIT_BATCH,
        "write_chunk": WRITE_CHUNK,
        "flush_at": FLUSH_AT,
        "unsent_pause_at": UNSENT_PAUSE_AT,
    }


def _wake(waiter: Optional[asyncio.Future]) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class MuxStream:
    """One muxado stream: ``read`` / ``readexactly`` / ``write`` / ``close_write`` /
    ``finish`` / ``reset``. Its state is the core's; this object waits for its events."""

    __slots__ = ("session", "id", "local", "_conn", "_reader", "_writer", "_finished")

    def __init__(self, session: "MuxSession", stream_id: int, *, local: bool):
        self.session = session
        self.id = stream_id
        self.local = local
        self._conn = session._conn
        self._reader: Optional[asyncio.Future] = None  # waits for EV_READABLE
        self._writer: Optional[asyncio.Future] = None  # waits for EV_WRITABLE
        self._finished = False

    async def _wait(self, reading: bool) -> None:
        waiter = asyncio.get_running_loop().create_future()
        if reading:
            self._reader = waiter
        else:
            self._writer = waiter
        try:
            await waiter
        finally:
            if reading:
                if self._reader is waiter:
                    self._reader = None
            elif self._writer is waiter:
                self._writer = None

    # ---- reading --------------------------------------------------------------------------
    async def read(self, n: int = READ_CHUNK) -> bytes:
        """Up to ``n`` bytes; b"" at the end of the peer's side. StreamReset if reset."""
        while True:
            chunk = self._conn.read(self.id, n)
            if chunk is not None:
                return chunk
            await self._wait(True)

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
        """Queue ``payload`` as the stream's window allows, waiting for credit."""
        data = payload if type(payload) is bytes else bytes(payload)
        conn, sid, offset, end = self._conn, self.id, 0, len(data)
        while offset < end:
            taken = conn.write(sid, data, offset)
            if taken:
                offset += taken
                self.session._schedule_flush()
            else:
                await self._wait(False)

    async def close_write(self) -> None:
        """Half-close: FIN on our side (idempotent; nothing after a reset)."""
        self._conn.close_write(self.id)
        self.session._schedule_flush()

    def finish(self) -> None:
        """The owner is done with the stream, whether its exchange completed or was cut
        short: FIN on our side (if not sent yet) and no more reads (what was received and not
        read is dropped). It stays in the core's table until the peer's FIN (see the module's
        docstring)."""
        if self._finished:
            return
        self._finished = True
        self._conn.finish(self.id)
        self.session._release(self)

    def reset(self, code: int = muxado.E_STREAM_CANCELLED) -> None:
        """Abort both directions: FIN (if not sent yet), then RST. A stream of ours the peer
        never heard of (no frame sent yet) is just forgotten."""
        self._finished = True
        self._conn.reset(self.id, code)
        self.session._release(self)

    @property
    def carriable(self) -> bool:
        """The core can carry this stream with a client's socket (:meth:`carry`)."""
        return self.session._splicer is not None and not self._finished

    async def carry(
        self,
        sock: socket.socket,
        *,
        to_stream: bytes = b"",
        to_client: bytes = b"",
        websocket: bool = False,
    ) -> Tuple[int, int]:
        """The rest of this stream's life is the core's (edge_core/src/splice.rs): the
        connected socket ``sock`` (detached: the core owns it from now on) and the stream
        carried both ways, ``to_stream`` to the agent first and ``to_client`` to the client
        first, until both directions are done or either fails; the stream is finished then.
        Python reads and writes neither any more. Returns (bytes read from ``sock``, bytes
        written to it, ``to_client`` included). With ``websocket``, ``sock`` is a client's
        WebSocket answered 101 and the core converts (edge_core/src/wstcp.rs): ``to_stream``
        is the client's frames read so far, ``to_client`` must be empty."""
        splicer = self.session._splicer
        if splicer is None or self._finished:
            raise StreamReset("the stream is not carriable")
        self._finished = True
        self.session._release(self)  # its events are the core's now; what is queued is sent
        return await splicer(sock, self._conn, self.id, to_stream, to_client, websocket)

    def echo_heartbeats(self) -> None:
        """The rest of this heartbeat stream's life is the core's (edge_core/src/heartbeat.rs):
        it echoes each 4-byte id the agent writes and keeps the time of the last one
        (:attr:`MuxSession.since_beat`); Python reads and writes it no more."""
        if self._finished:
            return
        self._finished = True
        self.session._release(self)
        self.session._echo(self.session._conn, self.id)

    def _facts(self) -> tuple:
        return self._conn.facts(self.id) or (0, False, True, self._finished)

    @property
    def buffered(self) -> int:
        """Bytes received and not read yet."""
        return int(self._facts()[0])

    @property
    def peer_open(self) -> bool:
        """The peer has neither ended its side (FIN) nor reset the stream."""
        return bool(self._facts()[1])

    @property
    def done(self) -> bool:
        return bool(self._facts()[2])

    @property
    def finished(self) -> bool:
        """finish() was called: the stream only waits for the peer's FIN."""
        return self._finished


StreamHandler = Callable[[MuxStream], Awaitable[None]]
# edge_core.Core.echo: (the core's session, stream id)
Echoer = Callable[[Any, int], None]
# edge.carrier.Carrier.splice: (socket, the core's session, stream id, to the stream first, to
# the client first) -> (bytes read from the client, bytes written to it)
Splicer = Callable[[socket.socket, Any, int, bytes, bytes, bool], Awaitable[Tuple[int, int]]]


class MuxSession:
    """One agent session; ``on_stream`` is started as a task for each stream the peer opens
    once ``run()`` runs, which returns when the session ends, whatever the reason. Made by
    edge.carrier.Carrier for each agent connection (and ``Carrier.attach``)."""

    def __init__(
        self,
        conn: Any,  # edge_core.Session
        on_closed: Callable[[int], Any],
        *,
        name: str = "",
        splicer: Optional[Splicer] = None,
        echo: Echoer,
    ):
        self._conn = conn
        self._on_closed = on_closed
        self._splicer = splicer
        self._echo = echo
        self.on_stream: Optional[StreamHandler] = None
        self.name = name
        self._streams: Dict[int, MuxStream] = {}
        self._tasks: set = set()
        self._waiting_run: List[MuxStream] = []  # opened before run()
        self._running = False
        self._closed = False
        self._ended: Optional[asyncio.Future] = None
        self._slot: Optional[asyncio.Future] = None
        self._loop = asyncio.get_running_loop()
        self._done = self._loop.create_future()  # EV_DONE: the connection is closed
        self._flush_scheduled = False

    # ---- the core's events ------------------------------------------------------------------
    def on_event(self, kind: int, sid: int) -> None:
        """One of the core's events for this session (edge.carrier delivers them)."""
        if kind == EV_READABLE:
            stream = self._streams.get(sid)
            if stream is not None:
                _wake(stream._reader)
        elif kind == EV_WRITABLE:
            stream = self._streams.get(sid)
            if stream is not None:
                _wake(stream._writer)
        elif kind == EV_OPENED:
            stream = MuxStream(self, sid, local=False)
            self._streams[sid] = stream
            if self._running:
                self._spawn(stream)
            else:
                self._waiting_run.append(stream)
        elif kind == EV_SLOT:
            _wake(self._slot)
        elif kind == EV_CLOSED:
            self._ended_now()
        elif kind == EV_DONE:
            self._ended_now()
            _wake(self._done)
            self._on_closed(self._conn.key)

    def _ended_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        for stream in self._streams.values():
            _wake(stream._reader)
            _wake(stream._writer)
        _wake(self._slot)
        _wake(self._ended)
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:  # a handler that ended the session finishes its work
                task.cancel()

    def _release(self, stream: MuxStream) -> None:
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """The frames queued this turn leave together at its end."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._conn.flush()

    # ---- streams ----------------------------------------------------------------------------
    def open_stream(self) -> MuxStream:
        """A new stream of ours (its SYN goes with its first frame). StreamsExhausted when
        MAX_LOCAL_STREAMS of ours are open, those that left the table less than SLOT_GRACE
        ago included: see open_stream_when_free."""
        stream = MuxStream(self, self._conn.open(), local=True)
        self._streams[stream.id] = stream
        return stream

    async def open_stream_when_free(self, timeout: float) -> MuxStream:
        """open_stream, waiting up to ``timeout`` seconds for a slot when all are taken
        (StreamsExhausted after that; StreamReset when the session ends)."""
        loop = self._loop
        deadline = loop.time() + timeout
        while True:
            try:
                return self.open_stream()
            except StreamsExhausted:
                left = deadline - loop.time()
                if left <= 0:
                    raise
            grace = self._conn.want_slot()  # a slot in grace comes back with no event
            if grace is not None:
                left = min(left, max(0.005, grace))
            waiter = self._slot = loop.create_future()
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:
                pass
            finally:
                if self._slot is waiter:
                    self._slot = None

    def _spawn(self, stream: MuxStream) -> None:
        task = self._loop.create_task(self._serve(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: MuxStream) -> None:
        assert self.on_stream is not None
        try:
            await self.on_stream(stream)
        except StreamReset:
            pass
        except Exception:  # a handler bug ends that stream, never the process
            log.exception("session %s: stream %d handler failed", self.name, stream.id)
            stream.reset(muxado.E_INTERNAL)
        finally:  # a handler that returned is done with its stream
            stream.finish()

    # ---- the session ------------------------------------------------------------------------
    @property
    def core(self) -> Any:
        """The core's session this wraps (edge_core.Session): what a route the core serves
        itself names (edge/carrier.py ``set_route``)."""
        return self._conn

    @property
    def authenticated(self) -> bool:
        return bool(self._conn.authenticated)

    @property
    def since_beat(self) -> float:
        """Seconds since the agent's last heartbeat (:meth:`MuxStream.echo_heartbeats`), or
        since the session began."""
        return float(self._conn.since_beat)

    @property
    def beats(self) -> int:
        """The agent's heartbeats echoed."""
        return int(self._conn.beats)

    def authenticate(self) -> None:
        """The peer proved who it is: the pre-authentication bounds are lifted."""
        self._conn.authenticate()

    async def run(self) -> None:
        """Serve the peer's streams with ``on_stream`` until the session ends."""
        self._running = True
        waiting, self._waiting_run = self._waiting_run, []
        for stream in waiting:
            self._spawn(stream)
        try:
            if not self._closed:
                self._ended = self._loop.create_future()
                await self._ended
        finally:
            await self.close()

    async def go_away(self, code: int, message: str) -> None:
        """GOAWAY to the peer, then the connection is closed: returns once the core wrote
        what was queued and the GOAWAY (it gives up after 2 s), so an edge that stops
        right after still says why."""
        if not self._closed:
            self._conn.go_away(code, message)
            self._ended_now()
        try:
            await asyncio.wait_for(asyncio.shield(self._done), GOAWAY_WAIT)
        except asyncio.TimeoutError:
            pass

    @property
    def disconnected(self) -> bool:
        """The connection is closed (EV_DONE): nothing more is written to it."""
        return self._done.done()

    async def close(self) -> None:
        if not self._closed:
            self._conn.close("")
            self._ended_now()

    @property
    def closed(self) -> bool:
        return self._closed or bool(self._conn.closed)

    @property
    def close_reason(self) -> str:
        return str(self._conn.close_reason)

    # ---- counts (metrics, tests) ------------------------------------------------------------
    @property
    def local_open(self) -> int:
        """Streams of ours in the table (MAX_LOCAL_STREAMS)."""
        return int(self._conn.counts()[0])

    @property
    def remote_open(self) -> int:
        """Streams of the peer's in the table (MAX_STREAMS)."""
        return int(self._conn.counts()[1])

    @property
    def lingering(self) -> int:
        """Finished streams waiting for the peer's FIN."""
        return int(self._conn.counts()[2])

    @property
    def cooling(self) -> int:
        """Streams of ours that left the table less than SLOT_GRACE ago."""
        return int(self._conn.counts()[3])

    @property
    def open_streams(self) -> int:
        """Streams in the table, both sides' (what the soak and the tests watch)."""
        counts = self._conn.counts()
        return int(counts[0] + counts[1])

    @property
    def held(self) -> int:
        """Stream entries the core holds (in the table, or not yet let go by the edge)."""
        return int(self._conn.counts()[4])

    @property
    def unsent(self) -> int:
        """Bytes queued for the agent and not written yet."""
        return int(self._conn.counts()[5])

    @property
    def passed_over(self) -> int:
        """Peer ids a SYN passed over that may still open."""
        return int(self._conn.counts()[6])

    @property
    def last_remote_id(self) -> int:
        return int(self._conn.counts()[7])
