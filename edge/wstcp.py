"""The WebSocket-to-TCP converter of an HTTP endpoint (the Bind option
``WebsocketTCPConverter``: the SDKs' ``websocket_tcp_conversion()``).

The edge itself accepts the public client's WebSocket (RFC 6455: it answers the upgrade with
101 and ``Sec-WebSocket-Accept``), then carries the messages' payload as a raw byte stream to
the agent, whose upstream is a plain TCP service. This module answers the upgrade; the
compiled core converts (edge_core/src/wstcp.rs, its rules there): data frames (text, binary,
continuation) from the client become bytes on the proxy stream, bytes from the agent go back
as binary frames; pings are answered with pongs; a close frame is answered with a close and
ends the client's direction (FIN to the agent); the agent's FIN ends the WebSocket with a
close frame. A connection whose TLS Python terminated reaches the core's converter through a
Unix socket pair, Python copying its plaintext both ways (:func:`_bridged`): the conversion
has one implementation.

A request that is not a WebSocket upgrade (GET, ``Upgrade: websocket``, a
``Sec-WebSocket-Key``, version 13) is answered 400 ERR_NGROK_3002 and never forwarded. Bounds:
a client frame larger than :data:`MAX_FRAME` is answered with close code 1009 and the
connection ends; an unmasked client frame (the RFC requires masking) with close 1002.
"""

import asyncio
import base64
import hashlib
import socket
from typing import Any, Dict, Optional

import edge_core

from chalicelib.core import edge_errors
from edge import http1, http_io
from edge.session import StreamReset

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_FRAME = edge_core.WS_MAX_FRAME  # bytes of one client frame's payload
BRIDGE_DRAIN = 2.0  # seconds the core's last frames may take to reach a bridged client
NOT_UPGRADE = (
    400,
    edge_errors.MISDIRECTED,
    "This endpoint converts WebSocket connections to TCP: send a WebSocket upgrade request.",
)
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_key(request: http1.Request) -> Optional[str]:
    """The Sec-WebSocket-Accept of a valid upgrade request, None when it is not one."""
    headers: Dict[bytes, bytes] = {}
    for name, value in request.headers:
        headers.setdefault(name, value)
    upgrade = headers.get(b"upgrade", b"").lower()
    connection = [t.strip() for t in headers.get(b"connection", b"").lower().split(b",")]
    key = headers.get(b"sec-websocket-key", b"").strip()
    if (
        request.method != b"GET"
        or upgrade != b"websocket"
        or b"upgrade" not in connection
        or headers.get(b"sec-websocket-version", b"").strip() != b"13"
        or not key
    ):
        return None
    return base64.b64encode(hashlib.sha1(key + GUID).digest()).decode("ascii")


async def serve(
    front: Any,
    client: Any,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    tunnel: Any,
    request: http1.Request,
    client_addr: str,
) -> None:
    """Answer the upgrade and convert, or refuse; the connection ends with it either way."""
    key = accept_key(request)
    if key is None:
        await http_io.answer(client, writer, *NOT_UPGRADE, close=True)
        return
    try:
        stream = await tunnel.session.open_proxy(tunnel, client_addr, front.scheme)
    except StreamReset:
        await http_io.answer(
            client,
            writer,
            502,
            edge_errors.ENDPOINT_OFFLINE,
            "The endpoint is offline.",
            close=True,
        )
        return
    try:
        await http_io.send(
            client,
            writer,
            http1.InformationalResponse(
                status_code=101,
                headers=[
                    ("upgrade", "websocket"),
                    ("connection", "Upgrade"),
                    ("sec-websocket-accept", key),
                ],
            ),
        )
    except BaseException:  # the client went away before its 101: nobody else ends the stream
        stream.finish()
        raise
    rest, _ = client.trailing_data
    frames = bytes(rest)
    if http_io.carriable(writer, stream):  # the core converts from now on
        detached = await http_io.detach(reader, writer)
        if detached is None:
            stream.finish()
            return
        sock, held = detached
        try:
            await stream.carry(sock, to_stream=frames + held, websocket=True)
        except (ConnectionError, OSError):
            sock.close()
            stream.finish()
        return
    await _bridged(reader, writer, stream, frames)


class _Plain:
    """One end of a Unix socket pair with the proxy stream's interface http_io.splice uses
    (``read``/``write``/``close_write``/``finish``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer

    async def read(self, n: int) -> bytes:
        return await self._reader.read(n)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close_write(self) -> None:
        if self._writer.can_write_eof():
            self._writer.write_eof()

    def finish(self) -> None:
        self._writer.close()


async def _bridged(reader: Any, writer: Any, stream: Any, frames: bytes) -> None:
    """A WebSocket on TLS Python terminated (the socket carries ciphertext, which the core
    cannot take): the core converts on one end of a Unix socket pair, Python copies the
    client's plaintext to and from the other (http_io.splice's copy); a stream of a session
    the core does not run (none today) is reset.

    It ends with whichever side ends first: the core's end of the conversion (what it wrote
    last passed on within :data:`BRIDGE_DRAIN`, then the client's connection is closed), or
    the copy's (the client's EOF or failure: the pair is closed, which the core reads as the
    client's EOF and ends within its linger, wstcp.rs ``LINGER``, without Python waiting)."""
    if not getattr(stream, "carriable", False):
        stream.reset()
        return
    ours, theirs = socket.socketpair()
    try:
        pair = await asyncio.open_connection(sock=ours)
    except (ConnectionError, OSError):
        ours.close()
        theirs.close()
        stream.finish()
        return
    converted = asyncio.ensure_future(stream.carry(theirs, to_stream=frames, websocket=True))
    converted.add_done_callback(_retrieved)
    copying = asyncio.ensure_future(http_io.splice(reader, writer, _Plain(*pair)))
    try:
        done, _ = await asyncio.wait({converted, copying}, return_when=asyncio.FIRST_COMPLETED)
        if copying not in done:  # the core ended it: its last frames on their way
            await asyncio.wait({copying}, timeout=BRIDGE_DRAIN)
    finally:
        if not copying.done():
            copying.cancel()
        await asyncio.gather(copying, return_exceptions=True)
        pair[1].close()


def _retrieved(task: "asyncio.Future[Any]") -> None:
    """The conversion's end, not awaited once the client's side ended: its failure read."""
    if not task.cancelled():
        task.exception()
