"""The seam between the edge's rules and its compiled core (``edge_core``, built from
edge_core/ by ``make install``): the core carries bytes, this process decides.

What the core carries today: the agent listener's TLS. It accepts each connection, completes
its handshake on the core's own threads (rustls; at most ``max_handshakes`` at once, each
within ``handshake_timeout``), and hands over one end of a Unix socket pair carrying the
plaintext, with the connection's facts (:class:`Handoff`); the core relays between the two
until both sides are done. The edge reads and writes that socket as it would the TLS
connection: the asyncio SSL transport is not on the path any more. Handing over costs no
Python call per byte or per TLS record, and none from the core's threads: connections wait in
the core's inbox, whose wake-up descriptor this module watches on the event loop, and are
taken in batches (docs/DATA_PLANE.md, "The compiled core").
"""

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import Awaitable, Callable, Dict, List, Optional

import edge_core

log = logging.getLogger("edge.carrier")

HANDSHAKE_TIMEOUT = 15.0  # seconds a TLS handshake may take (as the asyncio listener had)
MAX_HANDSHAKES = 1024  # handshakes in progress at once per listener; beyond: closed at once
RELAY_BUFFER = 16 * 1024  # the core's relay buffer per direction (one TLS record)


@dataclass(frozen=True)
class Handoff:
    """What the core knows of a connection it hands over."""

    peer_ip: str
    peer_port: int
    sni: Optional[str]
    alpn: Optional[bytes]


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Handoff], Awaitable[None]]


@dataclass(frozen=True)
class Counters:
    handshakes: int  # in progress
    relays: int  # connections handed over and still open
    refused: int  # closed at once: MAX_HANDSHAKES were in progress
    failed_handshakes: int  # bad, or not done within HANDSHAKE_TIMEOUT


class Carrier:
    """The core of one edge process, and the handlers of its listeners."""

    def __init__(self, threads: int = 0):
        self._core = edge_core.Core(threads)
        self._handlers: Dict[int, Handler] = {}  # listener id -> handler
        self._by_port: Dict[int, int] = {}  # port -> listener id
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._core.wake_fd, self._take)

    def stop(self) -> None:
        for port in list(self._by_port):
            self.close(port)
        if self._loop is not None:
            self._loop.remove_reader(self._core.wake_fd)
            self._loop = None

    def listen_tls(
        self,
        handler: Handler,
        chain_pem: bytes,
        key_pem: bytes,
        alpn: List[bytes],
        *,
        host: Optional[str] = None,
        port: int = 0,
        fd: Optional[int] = None,
    ) -> int:
        """Serve TLS on (host, port), or on the listening socket ``fd`` (the core owns it
        from then on); ``handler`` gets each connection's plaintext. Returns the port."""
        listener, bound = self._core.listen_tls(
            chain_pem,
            key_pem,
            alpn,
            host=host,
            port=port,
            fd=fd,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            max_handshakes=MAX_HANDSHAKES,
            relay_buffer=RELAY_BUFFER,
        )
        self._handlers[listener] = handler
        self._by_port[bound] = listener
        return bound

    def close(self, port: int) -> None:
        """Stop accepting on the listener of ``port`` (connections handed over go on)."""
        listener = self._by_port.pop(port, None)
        if listener is not None:
            self._core.close(listener)
            self._handlers.pop(listener, None)

    def counters(self) -> Counters:
        return Counters(*self._core.counters())

    def _take(self) -> None:
        for listener, fd, ip, port, sni, alpn in self._core.take():
            handler = self._handlers.get(listener)
            if handler is None:  # the listener was closed meanwhile
                os.close(fd)
                continue
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
            asyncio.ensure_future(_serve(handler, sock, Handoff(ip, port, sni, alpn)))


async def _serve(handler: Handler, sock: socket.socket, facts: Handoff) -> None:
    try:
        reader, writer = await asyncio.open_connection(sock=sock)
    except OSError as exc:
        log.info("connection from %s lost before it was served: %r", facts.peer_ip, exc)
        sock.close()
        return
    await handler(reader, writer, facts)
