"""Connection handler tasks of the edge: tracked, and quiet when cancelled at shutdown; and
TLS started on a connection the edge accepted in the clear (the HTTPS listener, passthrough)."""

import asyncio
import functools
import ssl
from typing import Any, Optional


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
