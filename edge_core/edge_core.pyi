"""The edge's compiled core (edge_core/src): the seam's lower side. edge/carrier.py is the
only module of the edge that imports it."""

from typing import List, Optional, Tuple

VERSION: str

# (listener id, fd, peer host, peer port, SNI, ALPN)
Handed = Tuple[int, int, str, int, Optional[str], Optional[bytes]]

class Core:
    def __init__(self, threads: int = 0) -> None: ...
    @property
    def wake_fd(self) -> int: ...
    def listen_tls(
        self,
        chain_pem: bytes,
        key_pem: bytes,
        alpn: List[bytes],
        *,
        host: Optional[str] = None,
        port: int = 0,
        fd: Optional[int] = None,
        handshake_timeout: float = 15.0,
        max_handshakes: int = 1024,
        relay_buffer: int = 16384,
    ) -> Tuple[int, int]:
        """A TLS listener on (host, port), or on the listening socket ``fd``, which the core
        owns from then on. Returns (listener id, port)."""
    def close(self, listener: int) -> bool: ...
    def take(self) -> List[Handed]:
        """Every connection waiting, oldest first; each fd is the caller's to close."""
    def counters(self) -> Tuple[int, int, int, int]:
        """(handshakes in progress, relays running, refused over max_handshakes, failed
        handshakes)."""
