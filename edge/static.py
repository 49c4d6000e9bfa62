"""Static backends (``/backends/static``): the edge forwards a route's HTTP to a ``host:port``
itself, over TCP or TLS, instead of to an agent.

:class:`StaticTarget` stands where a labeled tunnel stands in a route's answer
(edge.edges.EdgeRouter._serve): ``target.session.open_proxy(...)`` opens a connection to the
address and returns a :class:`SocketStream`, which has the interface public.py uses of a
muxado stream (``read``/``readexactly``/``write``/``close_write``/``finish``/``reset``,
``buffered``), so the HTTP front sends the request and reads the answer as it does through an
agent (one implementation of the exchange). A connection that cannot be made reads as a reset
stream: 502, as for an agent whose upstream is down.

Bound (docs/SECURITY.md): the edge connects only to addresses whose every resolved IP is
global (not private, loopback, link-local, multicast or reserved), so a static backend cannot
reach the operator's own network, unless the operator allows ranges with
``EDGE_STATIC_BACKEND_ALLOW`` (CIDRs; the tests allow 127.0.0.0/8). The check is made on the
address the connection uses (resolved once, then connected to by IP), so a name that resolves
elsewhere later cannot slip past it. Connect timeout: CONNECT_TIMEOUT.
"""

import asyncio
import ipaddress
import socket
import ssl
from typing import Any, Iterable, List, Optional

from edge.session import StreamReset

CONNECT_TIMEOUT = 10.0
READ_SIZE = 64 * 1024


def allowed(ip: str, extra: Iterable[Any]) -> bool:
    address = ipaddress.ip_address(ip)
    if any(address in net for net in extra):
        return True
    return address.is_global


class SocketStream:
    """A TCP (or TLS) connection with the proxy stream's interface."""

    def __init__(self, reader: Optional[asyncio.StreamReader], writer: Any, why: str = ""):
        self._reader = reader
        self._writer = writer
        self._why = why  # set: the connection could not be made (reads as reset)
        self._pending = b""

    @property
    def buffered(self) -> int:
        if self._reader is None:
            return 0
        return len(self._pending) + len(getattr(self._reader, "_buffer", b""))

    @property
    def peer_open(self) -> bool:
        return self._reader is not None and not self._reader.at_eof()

    async def read(self, n: int = READ_SIZE) -> bytes:
        if self._reader is None:
            raise StreamReset(self._why)
        if self._pending:
            chunk, self._pending = self._pending[:n], self._pending[n:]
            return chunk
        try:
            return await self._reader.read(n)
        except (OSError, ssl.SSLError) as exc:
            raise StreamReset(str(exc)) from None

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    async def write(self, payload: bytes) -> None:
        if self._writer is None:
            return  # as a refused channel: the request is taken, the answer never comes
        try:
            self._writer.write(payload)
            await self._writer.drain()
        except (OSError, ssl.SSLError) as exc:
            raise StreamReset(str(exc)) from None

    async def close_write(self) -> None:
        if self._writer is not None and self._writer.can_write_eof():
            try:
                self._writer.write_eof()
            except OSError:
                pass

    def finish(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def reset(self, code: int = 0) -> None:
        if self._writer is not None:
            self._writer.transport.abort()


class _Session:
    def __init__(self, target: "StaticTarget"):
        self.target = target

    async def open_proxy(self, tunnel: Any, client_addr: str, proto: str, **_: Any) -> Any:
        return await self.target.connect()


class StaticTarget:
    """A static backend as the HTTP front's target (a tunnel's place)."""

    proto = "http"
    forwards_proto = ""
    breaker = None
    ws_tcp = False
    enforcement = None

    def __init__(self, edge: Any, backend: dict):
        self.edge = edge
        self.id = backend.get("id", "")
        self.address = backend.get("address", "")
        self.tls = bool(backend.get("tls"))
        self.session = _Session(self)
        self.forwards_to = ("https://" if self.tls else "http://") + self.address

    def _extra(self) -> List[Any]:
        cidrs = getattr(self.edge.settings, "static_backend_allow", ()) or ()
        return [ipaddress.ip_network(c, strict=False) for c in cidrs]

    async def connect(self) -> SocketStream:
        host, _, port = self.address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, int(port), type=socket.SOCK_STREAM), CONNECT_TIMEOUT
            )
            ips = [str(info[4][0]) for info in infos]
            extra = self._extra()
            if not ips or not all(allowed(ip, extra) for ip in ips):
                return SocketStream(None, None, f"{self.address} is not a public address")
            ctx = ssl.create_default_context() if self.tls else None
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    ips[0], int(port), ssl=ctx, server_hostname=host if ctx else None
                ),
                CONNECT_TIMEOUT,
            )
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ValueError) as exc:
            return SocketStream(None, None, f"could not connect to {self.address}: {exc}")
        return SocketStream(reader, writer)
