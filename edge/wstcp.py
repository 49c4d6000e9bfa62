"""The WebSocket-to-TCP converter of an HTTP endpoint (the Bind option
``WebsocketTCPConverter``: the SDKs' ``websocket_tcp_conversion()``).

The edge itself accepts the public client's WebSocket (RFC 6455: it answers the upgrade with
101 and ``Sec-WebSocket-Accept``), then carries the messages' payload as a raw byte stream to
the agent, whose upstream is a plain TCP service: data frames (text, binary, continuation)
from the client become bytes on the proxy stream, bytes from the agent go back as binary
frames. Pings are answered with pongs; a close frame is answered with a close and ends the
client's direction (FIN to the agent); the agent's FIN ends the WebSocket with a close
frame.

A request that is not a WebSocket upgrade (GET, ``Upgrade: websocket``, a
``Sec-WebSocket-Key``, version 13) is answered 400 ERR_NGROK_3002 and never forwarded. Bounds:
a client frame larger than :data:`MAX_FRAME` is answered with close code 1009 and the
connection ends; an unmasked client frame (the RFC requires masking) with close 1002.
"""

import asyncio
import base64
import hashlib
import struct
from typing import Any, Dict, Optional, Tuple

from chalicelib.core import edge_errors
from edge import http1, http_io
from edge.session import StreamReset

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_FRAME = 1 << 20  # bytes of one client frame's payload
READ_CHUNK = 64 * 1024
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


def frame(opcode: int, payload: bytes = b"") -> bytes:
    """A server frame (final, unmasked)."""
    size = len(payload)
    if size < 126:
        head = struct.pack(">BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
    return head + payload


class FrameError(ValueError):
    def __init__(self, code: int, why: str):
        super().__init__(why)
        self.code = code


class FrameReader:
    """Client frames from a byte stream: ``feed`` bytes, ``frames`` yields (opcode, payload)."""

    def __init__(self, data: bytes = b""):
        self._buf = bytearray(data)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> Optional[Tuple[int, bytes]]:
        buf = self._buf
        if len(buf) < 2:
            return None
        opcode, masked, size, at = buf[0] & 0x0F, buf[1] & 0x80, buf[1] & 0x7F, 2
        if size == 126:
            if len(buf) < 4:
                return None
            size, at = struct.unpack(">H", buf[2:4])[0], 4
        elif size == 127:
            if len(buf) < 10:
                return None
            size, at = struct.unpack(">Q", buf[2:10])[0], 10
        if size > MAX_FRAME:
            raise FrameError(1009, f"a frame of {size} bytes (at most {MAX_FRAME})")
        if not masked:
            raise FrameError(1002, "client frames must be masked")
        if len(buf) < at + 4 + size:
            return None
        mask = bytes(buf[at : at + 4])
        data = bytes(buf[at + 4 : at + 4 + size])
        del buf[: at + 4 + size]
        if size:
            repeated = (mask * (size // 4 + 1))[:size]
            data = (int.from_bytes(data, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
                size, "big"
            )
        return opcode, data


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
    frames = FrameReader(bytes(rest))

    async def up() -> None:
        while True:
            while (item := frames.next()) is not None:
                opcode, payload = item
                if opcode in (CONT, TEXT, BINARY):
                    if payload:
                        await stream.write(payload)
                elif opcode == PING:
                    # drained: a client that never reads its pongs is stopped, not buffered
                    writer.write(frame(PONG, payload[:125]))
                    await writer.drain()
                elif opcode == CLOSE:
                    writer.write(frame(CLOSE, payload[:2]))
                    await stream.close_write()
                    return
            data = await reader.read(READ_CHUNK)
            if not data:
                await stream.close_write()
                return
            frames.feed(data)

    async def down() -> None:
        while True:
            data = await stream.read(READ_CHUNK)
            if not data:
                writer.write(frame(CLOSE, struct.pack(">H", 1000)))
                await writer.drain()
                return
            writer.write(frame(BINARY, data))
            await writer.drain()

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            exc = task.exception()
            if isinstance(exc, FrameError):
                writer.write(frame(CLOSE, struct.pack(">H", exc.code)))
                await writer.drain()
            elif exc is not None:
                raise exc
        if not all(task.done() for task in tasks):
            await asyncio.wait(tasks, timeout=30)
    except (ConnectionError, OSError, StreamReset):
        pass
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stream.finish()
