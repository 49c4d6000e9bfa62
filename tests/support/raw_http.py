"""Raw HTTP/1.1 over a socket, for tests of framing (what requests/urllib would not send)."""

import json
import socket
from dataclasses import dataclass
from typing import Any, Dict, Optional


@dataclass
class RawResponse:
    status: int
    headers: Dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    def __init__(self, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def read_response(self, head_only: bool = False) -> RawResponse:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"closed before a response head: {self.buf!r}")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status == 100:
            return RawResponse(status, headers, b"")
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            if not self._fill():
                raise ConnectionError("closed in the middle of a body")
        body, self.buf = self.buf[:length], self.buf[length:]
        return RawResponse(status, headers, body)

    def is_closed(self, wait: float = 5.0) -> bool:
        """True when the server closed the connection (EOF or reset) within ``wait`` s."""
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def request_bytes(
    method: str,
    path: str,
    headers: Optional[Dict[str, str]] = None,
    body: bytes = b"",
    host: str = "127.0.0.1",
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
