"""The floor: the least a single-threaded Python asyncio process in the edge's place spends per
request, measured beside the edge by bench/edge_bench/bench_peers.py (path ``floor``).

Two processes with the edge's shape and none of its work:

- ``front`` (the edge's place): a plain TCP listener for clients; every client connection is a
  stream of one TLS connection to ``back``, multiplexed with an 8-byte frame header (stream id,
  length), as the edge multiplexes requests over an agent's one session;
- ``back`` (the agent's place): the TLS listener; each stream it has not seen opens a TCP
  connection to the upstream.

Bytes pass through as they come: no HTTP parsing, no routing, no policy, no flow control, no
records, no metrics; asyncio Protocols (no streams, no tasks per connection) and one write per
read on each side. What ``front`` spends per small GET is a floor for any edge written on
CPython's asyncio that carries HTTP to an agent over TLS (docs/BENCHMARKS.md, "The floor").

    python bench/edge_bench/floor_relay.py back LISTEN_PORT UPSTREAM_PORT CERT KEY
    python bench/edge_bench/floor_relay.py front LISTEN_PORT BACK_PORT [TLS_PORT CERT KEY]
"""

import asyncio
import ssl
import struct
import sys
from typing import Any, Dict, Optional

HEADER = struct.Struct("!II")  # stream id, payload length (0: the stream ended)


class Mux(asyncio.Protocol):
    """One TLS connection's frames; ``opened(sid)`` makes the local end of a new stream."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.buffer = b""
        self.streams: Dict[int, Any] = {}

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        at, size = 0, len(buffer)
        while size - at >= 8:
            sid, length = HEADER.unpack_from(buffer, at)
            if size - at - 8 < length:
                break
            payload = buffer[at + 8 : at + 8 + length]
            at += 8 + length
            local = self.streams.get(sid)
            if local is None:
                if not length:
                    continue
                local = self.opened(sid)
                if local is None:  # a stream this end already ended: dropped
                    continue
                self.streams[sid] = local
            local.from_mux(payload)
        self.buffer = buffer[at:]

    def send(self, sid: int, data: bytes) -> None:
        self.transport.write(HEADER.pack(sid, len(data)) + data)

    def opened(self, sid: int) -> Any:
        """The local end of a stream the other end began (``back``); None: not opened here."""
        return None


class Local(asyncio.Protocol):
    """A plain TCP connection carried as one stream of ``mux``."""

    def __init__(self, mux: Mux, sid: int) -> None:
        self.mux, self.sid = mux, sid
        self.transport: Any = None
        self.pending: Optional[list] = []  # bytes for it before it connected (back)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.pending:
            transport.write(b"".join(self.pending))
            if not self.pending[-1]:  # the other end closed meanwhile
                transport.close()
        self.pending = None

    def data_received(self, data: bytes) -> None:
        self.mux.send(self.sid, data)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if self.mux.streams.pop(self.sid, None) is not None:
            self.mux.send(self.sid, b"")

    def from_mux(self, data: bytes) -> None:
        if not data:  # the other end closed
            self.mux.streams.pop(self.sid, None)
            if self.transport is not None:
                self.transport.close()
            elif self.pending is not None:  # closed before connected: close once connected
                self.pending.append(b"")
        elif self.pending is not None:
            self.pending.append(data)
        elif not self.transport.is_closing():
            self.transport.write(data)


class BackMux(Mux):
    def __init__(self, upstream_port: int) -> None:
        super().__init__()
        self.upstream_port = upstream_port

    def opened(self, sid: int) -> Any:
        local = Local(self, sid)
        loop = asyncio.get_running_loop()
        loop.create_task(loop.create_connection(lambda: local, "127.0.0.1", self.upstream_port))
        return local


async def back(port: int, upstream_port: int, cert: str, key: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: BackMux(upstream_port), "127.0.0.1", port, ssl=context, backlog=1024
    )
    await server.serve_forever()


async def front(port: int, back_port: int, tls: Optional[list] = None) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    loop = asyncio.get_running_loop()
    _, mux = await loop.create_connection(Mux, "127.0.0.1", back_port, ssl=context)
    ids = iter(range(1, 1 << 31))

    def client() -> Local:
        sid = next(ids)
        local = Local(mux, sid)
        local.pending = None
        mux.streams[sid] = local
        return local

    if tls:  # TLS_PORT CERT KEY: clients' TLS too (the HTTPS case: a handshake per request)
        public = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        public.load_cert_chain(tls[1], tls[2])
        await loop.create_server(client, "127.0.0.1", int(tls[0]), ssl=public, backlog=1024)
    server = await loop.create_server(client, "127.0.0.1", port, backlog=1024)
    await server.serve_forever()


def main(argv: list) -> None:
    if argv[0] == "back":
        asyncio.run(back(int(argv[1]), int(argv[2]), argv[3], argv[4]))
    else:
        asyncio.run(front(int(argv[1]), int(argv[2]), argv[3:6]))


if __name__ == "__main__":
    main(sys.argv[1:])
