"""The client side of an HTTP exchange at the edge: reading its events, writing events to it,
and the answers the edge gives by itself (the contract's error body, a policy's response).

Shared by the HTTP front's rooms (edge/public.py proxying, edge/http_routing.py,
edge/http_policy.py) and the features that answer on the client connection (edge/wstcp.py,
edge/challenges.py, edge/h2front.py); ``splice`` carries raw bytes both ways once a
connection is no longer HTTP (an upgrade, a TLS passthrough, a TCP endpoint).
"""

import asyncio
import json
import os
import socket
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import ids
from edge import http1
from edge.connections import CoreTlsObject
from edge.session import MuxStream, StreamReset

READ_CHUNK = 64 * 1024
BODY_TIMEOUT = 30.0  # a request body must progress (one read) within this

STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def listener_limits(settings: Any) -> Dict[str, Any]:
    """What the core's public listeners (and its adopting ones) take of the edge's settings:
    the head, idle and body timeouts, when a request body gets a fresh stream, the
    connection caps."""
    return {
        "head_timeout": settings.head_timeout,
        "idle_timeout": settings.idle_timeout,
        "body_timeout": BODY_TIMEOUT,
        "fresh_stream_body": settings.fresh_stream_body,
        "max_total": settings.max_connections,
        "max_per_address": settings.max_connections_per_address,
        "h2_stall_timeout": settings.h2_stall_timeout,
    }


class Closed(Exception):
    """The client went away or broke HTTP: close the connection, nothing to answer."""


def error_body(status: int, code: str, msg: str) -> Tuple[bytes, str]:
    op = ids.new_id(ids.PREFIXES["operation"])
    body = json.dumps(
        {"error_code": code, "status_code": status, "msg": msg, "details": {"operation_id": op}}
    ).encode("utf-8")
    return body, op


def error_response(status: int, code: str, msg: str, close: bool) -> List[Any]:
    body, op = error_body(status, code, msg)
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("ngrok-error-code", code),
        ("operation-id", op),
    ]
    if close:
        headers.append(("connection", "close"))
    return [
        http1.Response(
            status_code=status, headers=headers, reason=STATUS_TEXT.get(status, "").encode()
        ),
        http1.Data(data=body),
        http1.EndOfMessage(),
    ]


def outcome_response(out: Any, close: bool) -> List[Any]:
    headers = [(n, v) for n, v in out.headers if n.lower() not in ("content-length", "connection")]
    headers.append(("content-length", str(len(out.body))))
    if close:
        headers.append(("connection", "close"))
    return [
        http1.Response(status_code=out.status_code, headers=headers, checked=True),
        http1.Data(data=out.body) if out.body else None,
        http1.EndOfMessage(),
    ]


async def client_event(client: Any, reader: Any, timeout: float) -> Any:
    """The client's next HTTP event, waiting at most ``timeout`` for each read."""
    while True:
        event = client.next_event()
        if event is not http1.NEED_DATA:
            return event
        async with asyncio.timeout(timeout):  # a timer, not a task as wait_for makes
            data = await reader.read(READ_CHUNK)
        client.receive_data(data)


async def send(client: Any, writer: Any, event: Any) -> None:
    """One event to the client, written and drained."""
    data = client.send(event)
    if data:
        writer.write(data)
        await writer.drain()


async def answer(client: Any, writer: Any, status: int, code: str, msg: str, close: bool) -> None:
    """The contract's error body, unless a response has already begun."""
    if client.our_state not in (http1.IDLE, http1.SEND_RESPONSE):
        return
    try:
        for event in error_response(status, code, msg, close):
            await send(client, writer, event)
    except http1.LocalProtocolError:
        return


async def splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    stream: Any,
    *,
    to_stream: bytes = b"",
    to_client: bytes = b"",
) -> Optional[Tuple[int, int]]:
    """Raw bytes both ways between a client connection and a proxy stream, each direction
    ending with a half-close, until both are done (or either side fails). The compiled core
    carries them (edge_core/src/splice.rs) when it can: a stream of a session it runs and a
    client on a socket of its own with nothing left to write (a TCP or Unix socket, no TLS of
    Python's); it returns the bytes the core read from the client and wrote to it then (what
    ``reader``/``writer`` saw not included), None when Python carried them here."""
    if carriable(writer, stream):
        return await _carry(reader, writer, stream, to_stream, to_client)

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
            failure = task.exception()
            if failure is not None:
                raise failure
    except (ConnectionError, OSError, StreamReset):
        pass
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stream.finish()
    return None


async def detach(
    reader: asyncio.StreamReader, writer: Any
) -> Optional[Tuple[socket.socket, bytes]]:
    """Let go of a :func:`detachable` connection: reading stops, the bytes ``reader`` already
    holds are returned with a duplicate of its socket, and the transport is let go (its
    descriptor closed, the connection untouched). None (the connection failed meanwhile)."""
    transport = writer.transport
    transport.pause_reading()
    reader.feed_eof()  # what it holds is all it will give: read without waiting
    try:
        held = await reader.read()
    except (ConnectionError, OSError):
        return None
    sock = writer.get_extra_info("socket")
    dup = socket.socket(sock.family, sock.type, sock.proto, fileno=os.dup(sock.fileno()))
    transport.abort()
    return dup, held


def carriable(writer: Any, stream: Any) -> bool:
    """The core can carry this pair: its own session's stream, and a stream socket carrying
    the client's plaintext (TCP, or the Unix socket of TLS the core terminated) whose writes
    all left. TLS Python terminated stays Python's."""
    if not isinstance(stream, MuxStream) or not stream.carriable:
        return False
    return detachable(writer)


def detachable(writer: Any) -> bool:
    """The connection under ``writer`` can be handed to the core: a stream socket (TCP, or
    the Unix socket of TLS the core terminated) carrying the peer's plaintext, not closing,
    whose writes all left. TLS Python terminated stays Python's."""
    tls = writer.get_extra_info("ssl_object")
    if tls is not None and not isinstance(tls, CoreTlsObject):
        return False  # Python's TLS: the socket carries ciphertext
    sock = writer.get_extra_info("socket")
    if sock is None or sock.type != socket.SOCK_STREAM:
        return False
    if sock.family not in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
        return False
    transport = writer.transport
    return not transport.is_closing() and transport.get_write_buffer_size() == 0


async def _carry(
    reader: asyncio.StreamReader,
    writer: Any,
    stream: MuxStream,
    to_stream: bytes,
    to_client: bytes,
) -> Optional[Tuple[int, int]]:
    """Hand the client's socket and the stream to the core. Reading stops first; what the
    reader already holds goes to the agent after ``to_stream``; the socket is duplicated
    and the transport let go (its descriptor closed, the connection untouched)."""
    detached = await detach(reader, writer)
    if detached is None:
        stream.finish()
        return None
    dup, held = detached
    try:
        return await stream.carry(dup, to_stream=to_stream + held, to_client=to_client)
    except (ConnectionError, OSError):
        dup.close()
        stream.finish()
        return None
