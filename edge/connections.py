"""Connection handler tasks of the edge: tracked, and quiet when cancelled at shutdown; and
TLS started on a connection the edge accepted in the clear (the HTTPS listener, passthrough)."""

import asyncio
import functools
import socket
import ssl
from typing import Any, Optional, Tuple


class SpecWriter(asyncio.StreamWriter):
    """A TLS connection's writer, with what its handshake required (an edge.tls_spec.TlsSpec:
    a request whose Host requires something else is misdirected, edge/http_routing.py)."""

    tls_spec: Optional[Any] = None
    server_name: str = ""  # the SNI name (edge.cluster: where a relayed connection goes)


async def start_server_tls(
    transport: asyncio.Transport, ctx: ssl.SSLContext, timeout: float
) -> "tuple[asyncio.StreamReader, SpecWriter]":
    """The server side of a TLS handshake on ``transport``, as a stream pair. ConnectionError
    when the transport closed before TLS could start (OSError, ssl.SSLError or TimeoutError
    when the handshake fails)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    tls_transport = await loop.start_tls(
        transport, protocol, ctx, server_side=True, ssl_handshake_timeout=timeout
    )
    if tls_transport is None:
        raise ConnectionError("the connection closed before TLS started")
    protocol.connection_made(tls_transport)  # start_tls does not call it: the reader's flow
    # control (pause_reading) and EOF handling need the transport
    return reader, SpecWriter(tls_transport, protocol, reader, loop)


class CoreTlsObject:
    """The handshake facts of a connection whose TLS the compiled core terminated, read as
    an ``ssl.SSLObject``'s (``writer.get_extra_info("ssl_object")``), with the client
    certificate the handshake verified (a name that asks for one)."""

    def __init__(
        self,
        sni: str,
        version: str,
        cipher: str,
        alpn: Optional[bytes],
        client_cert: Optional[bytes] = None,
    ):
        self.server_hostname = sni or None
        self._version, self._cipher = version, cipher
        self._alpn = alpn.decode("ascii", "replace") if alpn else None
        self._client_cert = client_cert

    def version(self) -> Optional[str]:
        return self._version or None

    def cipher(self) -> Optional[Tuple[str, str, int]]:
        return (self._cipher, self._version, 0) if self._cipher else None

    def selected_alpn_protocol(self) -> Optional[str]:
        return self._alpn

    def getpeercert(self, binary_form: bool = False) -> Any:
        """The client certificate's DER (``binary_form``: all Python's paths ask for it), or
        None without one. Its parsed form is not given: nothing reads it."""
        return self._client_cert if binary_form else None


class CoreTlsWriter:
    """The writer of a connection the core handed over mid-way with its TLS still in the core
    (edge_core/src/https.rs ``bridge``): the stream is a Unix socket carrying the plaintext,
    so the client's and the listener's addresses and the handshake's facts come from the
    core, as a TLS connection's writer gives them."""

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        peer: Tuple[str, int],
        local: Tuple[str, int],
        ssl_object: CoreTlsObject,
        tls_spec: Any,
    ):
        self._writer = writer
        self._extra = {"peername": peer, "sockname": local, "ssl_object": ssl_object}
        self.tls_spec = tls_spec
        self.server_name = ssl_object.server_hostname or ""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._extra:
            return self._extra[name]
        if name in ("sslcontext", "peercert"):
            return default
        return self._writer.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


def connection_handler(handler):
    """Wrap a connection handler: its task is tracked (stop() cancels what is left) and ends
    quietly when cancelled at shutdown (asyncio would log a cancelled handler as an error)."""

    @functools.wraps(handler)
    async def wrapper(self, *args):
        edge = getattr(self, "edge", self)
        task = asyncio.current_task()
        edge.connections.add(task)
        try:
            await handler(self, *args)
        except asyncio.CancelledError:
            pass
        finally:
            edge.connections.discard(task)

    return wrapper


async def stream_pair(
    sock: socket.socket, data: bytes
) -> Optional[Tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A socket the core handed over as a stream pair, ``data`` (the bytes the core read from
    it) first in the reader; None (the socket closed) when the loop cannot take it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16, loop=loop)
    if data:
        reader.feed_data(data)
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
    except OSError:
        sock.close()
        return None
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
