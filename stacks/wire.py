"""Raw public clients of an edge: one connection, bytes in and out (what the stream tests and
the stream soak send)."""

import socket
import ssl
from typing import Optional

# A request that closes its connection (``{host}`` is replaced by the endpoint's host name).
GET_CLOSE = b"GET /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


def recv_all(sock: socket.socket, limit: int = 1 << 22) -> bytes:
    """Read until the peer closes (or ``limit`` bytes)."""
    data = b""
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def status(data: bytes) -> Optional[int]:
    """The status code of a raw HTTP/1.1 response, or None."""
    line = data.split(b"\r\n", 1)[0].split(b" ")
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else None


def http_once(port: int, host: str, request: bytes, tls: Optional[ssl.SSLContext] = None) -> bytes:
    """One connection: send ``request`` (bytes, with ``{host}``), read to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
        sock.sendall(request.replace(b"{host}", host.encode()))
        return recv_all(sock)


def abort(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): a client that goes away without a goodbye."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
