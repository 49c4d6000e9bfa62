"""The request path's few lines into edge/events.py: what a request or connection records.

``tap(client, …)`` wraps the HTTP front's client-side framing (an ``http1.Connection`` or an
HTTP/2 stream's) and notes, as events pass through ``next_event`` and ``send``, the request
head, body sizes, the response head and its end; ``routed`` tells it the endpoint, ``policy``
the traffic policy state. At the response's end (or a 101) it hands one
:class:`edge.events.Record` to the process's :class:`edge.events.Hub` — an append to a bounded
queue. Nothing here awaits, reads the store or touches the network.

``counting(reader, writer)`` does the same for TCP endpoints' bytes; ``tcp_closed`` records
the connection when it ends.
"""

import time
from typing import Any, List, Optional, Tuple

from chalicelib.core import inspector as layout
from edge import http1
from edge.events import Hub, Record, time_store_calls
from edge.inspector import Inspector


def hub_of(edge: Any) -> Hub:
    """The edge's hub, made on first use (so the Edge class needs no new field)."""
    hub = getattr(edge, "_events_hub", None)
    if hub is None:
        time_store_calls()
        instance_id = getattr(getattr(edge, "settings", None), "instance_id", "edge")
        hub = Hub(instance_id, inspector=Inspector())
        edge._events_hub = hub
    return hub


class Tap:
    """The client-side framing of one connection, noting what passes (see the module doc)."""

    def __init__(self, conn: Any, edge: Any, peer: Any, writer: Any, scheme: str):
        self._conn = conn
        self._edge = edge
        self._peer = peer
        # the listener's address, read now: a closed TLS transport cannot answer later
        self._sock = writer.get_extra_info("sockname") or ("", 0)
        self._scheme = scheme
        self._hop: Any = None
        self._kind = "none"
        self._state: Any = None
        self._request: Any = None
        self._started = 0.0
        self._wall = 0.0
        self._in = 0
        self._out = 0
        self._response: Any = None
        self._capture = False
        self._bodies: Optional[Tuple[List[bytes], List[bytes]]] = None
        self._request_ended = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    # The framing's members the HTTP front reads on every request, delegated explicitly: a
    # name found on the class costs a plain call, one left to __getattr__ first fails the
    # normal lookup (an AttributeError made and caught) on every access.
    @property
    def our_state(self) -> Any:
        return self._conn.our_state

    @property
    def their_state(self) -> Any:
        return self._conn.their_state

    @property
    def trailing_data(self) -> Any:
        return self._conn.trailing_data

    def receive_data(self, data: Any) -> Any:
        return self._conn.receive_data(data)

    def start_next_cycle(self) -> Any:
        return self._conn.start_next_cycle()

    def next_event(self) -> Any:
        event = self._conn.next_event()
        kind = type(event)
        if kind is http1.Data:
            self._in += len(event.data)
            if self._bodies is not None:
                _keep(self._bodies[0], event.data)
        elif kind is http1.Request:
            self._request, self._response, self._hop, self._state = event, None, None, None
            self._kind = "none"  # until routed: an unknown host, a ban, a bad request
            self._started, self._wall = time.perf_counter(), time.time()
            self._in = self._out = 0
            self._bodies = None
            self._request_ended = False
        elif kind is http1.EndOfMessage:
            self._request_ended = True
        return event

    def send(self, event: Any) -> Any:
        data = self._conn.send(event)
        kind = type(event)
        if kind is http1.Data:
            self._out += len(event.data)
            if self._bodies is not None:
                _keep(self._bodies[1], event.data)
        elif kind is http1.Response:
            self._response = event
        elif kind is http1.EndOfMessage:
            if self._response is not None:
                self._finish()
        elif kind is http1.InformationalResponse and event.status_code == 101:
            self._response = event
            self._finish()
        return data

    def _finish(self) -> None:
        """Hand what this request left to the hub: one tuple appended (the Record is made by
        the worker, off the request path)."""
        request, response = self._request, self._response
        self._response = None
        if request is None:
            return
        bodies, self._bodies = self._bodies, None
        hub = self._edge._events_hub if hasattr(self._edge, "_events_hub") else hub_of(self._edge)
        hub.record_http(
            (
                self._peer,
                self._sock,
                self._scheme,
                self._hop,
                self._kind,
                self._state,
                self._wall,
                self._started,
                time.perf_counter(),
                time.time(),
                self._in,
                self._out,
                request,
                response,
                bodies,
                self._request_ended,
            )
        )


def _keep(kept: List[bytes], data: Any) -> None:
    size = sum(len(k) for k in kept)
    if size <= layout.BODY_BYTES:  # one byte more than kept tells "truncated"
        kept.append(bytes(data[: layout.BODY_BYTES + 1 - size]))


def tap(conn: Any, edge: Any, peer: Any, writer: Any, scheme: str) -> Tap:
    return Tap(conn, edge, peer, writer, scheme)


def routed(client: Any, hop: Any, cloud: bool) -> None:
    """The endpoint a request reached (its account, id and URL for the record)."""
    if type(client) is Tap:
        client._hop = hop
        client._kind = (
            "cloud" if cloud else ("edge" if hop.endpoint_id.startswith("edghts") else "agent")
        )
        if (
            hop.endpoint_id
            and client._bodies is None
            and hub_of(client._edge).inspector.captures_bodies(hop.account_id, hop.endpoint_id)
        ):
            client._bodies = ([], [])


def policy(client: Any, traffic: Any) -> None:
    """The request's traffic policy run (its action results become the record's decisions)."""
    if type(client) is Tap:
        client._state = traffic.state


# ---- TCP endpoints -------------------------------------------------------------------------
class _Counting:
    """A reader or writer that counts the bytes it carries."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read(self, n: int = -1) -> bytes:
        data = await self._inner.read(n)
        self.count += len(data)
        return data

    def write(self, data: bytes) -> None:
        self.count += len(data)
        self._inner.write(data)


class TcpConn:
    def __init__(self, reader: Any, writer: Any):
        self.reader = _Counting(reader)
        self.writer = _Counting(writer)
        self.started = time.perf_counter()
        self.wall = time.time()

    def attach(self, reader: Any, writer: Any) -> None:
        """Count what ``reader`` and ``writer`` carry from now on (a connection made a
        stream pair after it started: edge/tcp_front.py)."""
        self.reader._inner, self.writer._inner = reader, writer

    def carried(self, bytes_in: int, bytes_out: int) -> None:
        """Bytes the core carried past the reader and the writer (edge/http_io.py splice)."""
        self.reader.count += bytes_in
        self.writer.count += bytes_out


def counting(reader: Any, writer: Any) -> TcpConn:
    return TcpConn(reader, writer)


def tcp_closed(
    edge: Any,
    conn: TcpConn,
    peer: Any,
    local: Any,
    hop: Any,
    cloud: bool = False,
    state: Any = None,
) -> None:
    """A TCP endpoint connection ended: one record (none when no endpoint took it);
    ``local`` is the edge's address the client connected to."""
    if hop is None or not hop.account_id:
        return
    sock = local or ("", 0)
    hub_of(edge).record(
        Record(
            kind="tcp",
            account_id=hop.account_id,
            endpoint_id=hop.endpoint_id,
            endpoint_url=hop.url,
            endpoint_host=hop.host,
            endpoint_kind="cloud" if cloud else "agent",
            scheme="tcp",
            client_ip=str(peer[0]),
            client_port=int(peer[1] or 0),
            server_ip=str(sock[0]),
            server_port=int(sock[1] or 0),
            started=conn.wall,
            ended=time.time(),
            duration=time.perf_counter() - conn.started,
            bytes_in=conn.reader.count,
            bytes_out=conn.writer.count,
            action_vars=getattr(state, "action_vars", None),
        )
    )
