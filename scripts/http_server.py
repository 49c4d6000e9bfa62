"""A small, strict HTTP/1.1 server: what `make run` serves the API and the embedded store with.

Python's dev server (http.server, which ``chalice local`` uses) was written for development:
it ignores chunked bodies, answers HEAD with a body, drops the connection on a bad
Content-Length, reads any body whole before its handler can refuse it, has no read timeout,
and answers framing errors with HTML. This server owns the framing instead and hands the
application one complete :class:`Request`; every answer it makes itself comes from the
``error`` callback, so each use renders errors in its own contract.

Framing rules (RFC 9112), each with a test in tests/integration/test_http_framing.py:

- a request target of at most ``max_target`` bytes (414), header fields of at most
  ``max_head`` bytes in all (the lines after the request line, CRLFs between them included;
  431), at most ``max_headers`` header fields (431);
- ``Transfer-Encoding: chunked`` bodies are decoded; any other transfer coding is 501; both
  Transfer-Encoding and Content-Length, or several differing Content-Lengths, are 400
  (request smuggling); a Content-Length that is not a decimal number (``abc``, ``-1``) is 400;
- bodies are refused with 413 as soon as they are known to be too large: a declared
  Content-Length at once, a chunked body as soon as the running total passes the limit; the
  connection is then closed, since the rest of the body was not read;
- ``Expect: 100-continue`` is answered before the body is read (curl sends it);
- the head must arrive within ``head_timeout`` seconds of its first byte and the body
  within ``body_timeout`` (408, connection closed); an idle keep-alive connection is closed
  after ``idle_timeout``;
- HEAD responses carry the headers (Content-Length included) and no body;
- HTTP/1.1 connections stay open unless ``Connection: close``; HTTP/1.0 ones close unless
  ``Connection: keep-alive``; any framing error closes the connection after its answer;
- TCP_NODELAY on every connection (no 40 ms Nagle/delayed-ACK stall on small responses);
- at most ``max_connections`` connections at once (further ones get 503 and are closed).

``stop(drain)`` stops accepting, closes idle connections, lets in-flight requests finish
(each answered with ``Connection: close``) for at most ``drain`` seconds, then closes the rest.
"""

import errno
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_REQUEST_LINE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP/(\d)\.(\d)$")
_DIGITS = re.compile(rb"^[0-9]+$")
_CHUNK_SIZE = re.compile(rb"^([0-9A-Fa-f]{1,16})[ \t]*(;.*)?$")


@dataclass
class Request:
    method: str
    target: str
    version: Tuple[int, int]
    headers: List[Tuple[str, str]]
    body: bytes = b""
    client: Tuple[str, int] = ("", 0)

    def header(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The value of one header (case-insensitive); repeated fields joined with ', '."""
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return ", ".join(values) if values else default


@dataclass
class Response:
    status: int
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


REASONS = {
    100: "Continue",
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    415: "Unsupported Media Type",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A request the server answers itself. ``close``: the stream position is lost."""

    def __init__(self, status: int, reason: str, close: bool = True) -> None:
        super().__init__(reason)
        self.status, self.reason, self.close = status, reason, close


class _Closed(Exception):
    """The peer went away (or the server is stopping an idle connection): no answer."""


# An application: Request -> Response. An error renderer: (status, reason) -> Response.
App = Callable[[Request], Response]
ErrorRenderer = Callable[[int, str], Response]


class _Conn:
    def __init__(self, server: "HttpServer", sock: socket.socket, addr) -> None:
        self.server, self.sock, self.addr = server, sock, addr
        self.buf = b""
        self.busy = False  # between the first byte of a request and the end of its answer

    # -- reading with deadlines -------------------------------------------------------------
    def _recv(self, deadline: float, status_on_timeout: Optional[int]) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise (
                HttpError(408, "The request was not received in time")
                if status_on_timeout
                else _Closed()
            )
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            if status_on_timeout:
                raise HttpError(408, "The request was not received in time") from None
            raise _Closed() from None
        except OSError:
            raise _Closed() from None
        if not data:
            raise _Closed()
        return data

    def _read_head(self) -> bytes:
        srv = self.server
        if not self.buf:
            # Idle keep-alive (or a fresh connection): wait for the first byte.
            idle_deadline = time.monotonic() + srv.idle_timeout
            while not self.buf:
                if srv.stopping:
                    raise _Closed()
                self.buf += self._recv(idle_deadline, None)
        with srv.lock:
            self.busy = True
        deadline = time.monotonic() + srv.head_timeout
        while True:
            # Leading empty lines before a request line are ignored (RFC 9112 2.2).
            stripped = self.buf.lstrip(b"\r\n")
            end = stripped.find(b"\r\n\r\n")
            if end < 0 and stripped.find(b"\n\n") >= 0:
                end = stripped.find(b"\n\n")
            first_line_end = stripped.find(b"\n")
            line_len = first_line_end if first_line_end >= 0 else len(stripped)
            if line_len > srv.max_target + 64:
                raise HttpError(414, f"The request target is longer than {srv.max_target} bytes")
            if end >= 0:
                sep = 4 if stripped[end : end + 4] == b"\r\n\r\n" else 2
                head, self.buf = stripped[:end], stripped[end + sep :]
                if len(head) - line_len - 1 > srv.max_head:
                    raise HttpError(
                        431, f"The request's header fields are larger than {srv.max_head} bytes"
                    )
                return head
            if len(stripped) > line_len + srv.max_head + 8:
                raise HttpError(
                    431, f"The request's header fields are larger than {srv.max_head} bytes"
                )
            self.buf += self._recv(deadline, 408)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self.buf += self._recv(deadline, 408)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_line(self, deadline: float, limit: int = 4096) -> bytes:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1 :]
                return line.rstrip(b"\r")
            if len(self.buf) > limit:
                raise HttpError(400, "A chunk header line is too long")
            self.buf += self._recv(deadline, 408)

    # -- parsing ----------------------------------------------------------------------------
    def _parse(self, head: bytes) -> Request:
        srv = self.server
        lines = head.replace(b"\r\n", b"\n").split(b"\n")
        match = _REQUEST_LINE.match(lines[0])
        if not match:
            raise HttpError(400, "Malformed request line")
        method, target, major, minor = match.groups()
        if len(target) > srv.max_target:
            raise HttpError(414, f"The request target is longer than {srv.max_target} bytes")
        if (int(major), int(minor)) not in ((1, 0), (1, 1)):
            raise HttpError(505, "Only HTTP/1.0 and HTTP/1.1 are supported")
        if not (
            target.startswith(b"/")
            or target == b"*"
            or target.startswith(b"http://")
            or target.startswith(b"https://")
        ):
            raise HttpError(400, "Malformed request target")
        headers: List[Tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not _TOKEN.match(name):
                # includes obsolete line folding (a line starting with white space)
                raise HttpError(400, "Malformed header field")
            try:
                headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
            except UnicodeDecodeError:
                raise HttpError(400, "Malformed header field") from None
        if len(headers) > srv.max_headers:
            raise HttpError(431, f"More than {srv.max_headers} header fields")
        try:
            target_text = target.decode("ascii")
        except UnicodeDecodeError:
            raise HttpError(
                400, "The request target must be ASCII (percent-encode the rest)"
            ) from None
        return Request(
            method.decode("ascii"),
            target_text,
            (int(major), int(minor)),
            headers,
            client=self.addr,
        )

    def _read_body(self, req: Request) -> None:
        srv = self.server
        te = [v.strip().lower() for k, v in req.headers if k.lower() == "transfer-encoding"]
        cl = [v.strip() for k, v in req.headers if k.lower() == "content-length"]
        if te and cl:
            raise HttpError(400, "Both Transfer-Encoding and Content-Length were sent")
        length: Optional[int] = None
        if cl:
            values = {part.strip() for value in cl for part in value.split(",")}
            if len(values) != 1 or not _DIGITS.match(next(iter(values)).encode()):
                raise HttpError(400, "Content-Length must be one non-negative decimal number")
            length = int(next(iter(values)))
            if length > srv.max_body:
                raise HttpError(413, f"The request body is larger than {srv.max_body} bytes")
        codings = [c.strip() for value in te for c in value.split(",") if c.strip()]
        if te and codings != ["chunked"]:
            raise HttpError(501, "Only the chunked transfer coding is supported")
        if te and req.version < (1, 1):
            raise HttpError(400, "Transfer-Encoding requires HTTP/1.1")
        if not te and not length:
            return
        expect = req.header("expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise HttpError(417, "Only 'Expect: 100-continue' is supported")
            if req.version >= (1, 1) and not self.buf:
                self._send_raw(b"HTTP/1.1 100 Continue\r\n\r\n")
        deadline = time.monotonic() + srv.body_timeout
        if length is not None:
            req.body = self._read_exact(length, deadline)
            return
        chunks, total = [], 0
        while True:
            line = self._read_line(deadline)
            match = _CHUNK_SIZE.match(line)
            if not match:
                raise HttpError(400, "Malformed chunk size line")
            size = int(match.group(1), 16)
            if size == 0:
                break
            total += size
            if total > srv.max_body:
                raise HttpError(413, f"The request body is larger than {srv.max_body} bytes")
            chunks.append(self._read_exact(size, deadline))
            if self._read_exact(2, deadline) != b"\r\n":
                raise HttpError(400, "A chunk is not followed by CRLF")
        trailer_bytes = 0
        while True:  # trailer fields are read and ignored
            line = self._read_line(deadline)
            if not line:
                break
            trailer_bytes += len(line)
            if trailer_bytes > srv.max_head:
                raise HttpError(431, "Trailer fields too large")
        req.body = b"".join(chunks)

    # -- writing ----------------------------------------------------------------------------
    def _send_raw(self, data: bytes) -> None:
        self.sock.settimeout(self.server.write_timeout)
        try:
            self.sock.sendall(data)
        except OSError:
            raise _Closed() from None

    def _send(self, resp: Response, head_only: bool, close: bool) -> None:
        reason = REASONS.get(resp.status, "Status")
        lines = [f"HTTP/1.1 {resp.status} {reason}"]
        skip = {"content-length", "connection", "transfer-encoding"}
        for name, value in resp.headers:
            if name.lower() not in skip:
                lines.append(f"{name}: {value}")
        if resp.status not in (204, 304) and not 100 <= resp.status < 200:
            lines.append(f"Content-Length: {len(resp.body)}")
        lines.append("Connection: close" if close else "Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        body = b"" if head_only or resp.status in (204, 304) else resp.body
        self._send_raw(head + body)

    # -- the connection loop ----------------------------------------------------------------
    def serve(self) -> None:
        srv = self.server
        try:
            while True:
                req: Optional[Request] = None
                try:
                    head = self._read_head()
                    req = self._parse(head)
                    self._read_body(req)
                except HttpError as exc:
                    resp = srv.error(exc.status, exc.reason)
                    head_only = req is not None and req.method == "HEAD"
                    self._send(resp, head_only, close=True)
                    return
                try:
                    resp = srv.app(req)
                except Exception:  # noqa: BLE001 - the app's own bug: a 500, keep serving
                    srv.log_exception(req)
                    resp = srv.error(500, "Internal server error")
                close = self._wants_close(req) or srv.stopping
                self._send(resp, req.method == "HEAD", close)
                with srv.lock:
                    self.busy = False
                if close:
                    return
        except _Closed:
            return
        finally:
            with srv.lock:
                self.busy = False
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()

    @staticmethod
    def _wants_close(req: Request) -> bool:
        tokens = {t.strip().lower() for t in (req.header("connection") or "").split(",")}
        if req.version >= (1, 1):
            return "close" in tokens
        return "keep-alive" not in tokens


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        error: ErrorRenderer,
        *,
        max_body: int,
        max_target: int = 8192,
        max_head: int = 10240,
        max_headers: int = 100,
        head_timeout: float = 10.0,
        body_timeout: float = 30.0,
        idle_timeout: float = 30.0,
        write_timeout: float = 30.0,
        max_connections: int = 256,
        log_exception: Optional[Callable[[Request], None]] = None,
    ) -> None:
        self.host, self.port, self.app, self.error = host, port, app, error
        self.max_body, self.max_target, self.max_head = max_body, max_target, max_head
        self.max_headers = max_headers
        self.head_timeout, self.body_timeout = head_timeout, body_timeout
        self.idle_timeout, self.write_timeout = idle_timeout, write_timeout
        self.max_connections = max_connections
        self.log_exception = log_exception or (lambda req: None)
        self.lock = threading.Lock()
        self.stopping = False
        self._conns: Set[_Conn] = set()
        self._threads: Dict[_Conn, threading.Thread] = {}
        self._listener: Optional[socket.socket] = None
        self._acceptor: Optional[threading.Thread] = None

    def start(self, bind_wait: float = 3.0) -> "HttpServer":
        """Bind and listen, then accept in a thread. A port in use is retried for
        ``bind_wait`` seconds, then OSError."""
        deadline = time.monotonic() + bind_wait
        while True:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((self.host, self.port))
                break
            except OSError as exc:
                listener.close()
                # a stack restarted right after kill -9: its old processes are still dying
                if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="http-accept", daemon=True
        )
        self._acceptor.start()
        return self

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self.stopping:
            try:
                sock, addr = self._listener.accept()
            except OSError:
                if self.stopping:
                    return
                time.sleep(0.05)  # e.g. EMFILE: back off instead of spinning
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self, sock, addr)
            with self.lock:
                if self.stopping or len(self._conns) >= self.max_connections:
                    refuse = True
                else:
                    refuse = False
                    self._conns.add(conn)
            if refuse:
                threading.Thread(target=self._refuse, args=(conn,), daemon=True).start()
                continue
            thread = threading.Thread(
                target=self._run, args=(conn,), daemon=True, name=f"http-{addr[1]}"
            )
            with self.lock:
                self._threads[conn] = thread
            thread.start()

    def _refuse(self, conn: _Conn) -> None:
        try:
            conn._send(self.error(503, "Too many connections; retry later"), False, True)
        except _Closed:
            pass
        finally:
            conn.sock.close()

    def _run(self, conn: _Conn) -> None:
        try:
            conn.serve()
        finally:
            with self.lock:
                self._conns.discard(conn)
                self._threads.pop(conn, None)

    def in_flight(self) -> int:
        with self.lock:
            return sum(1 for c in self._conns if c.busy)

    def stop(self, drain: float = 5.0) -> None:
        """Stop accepting, close idle connections, wait up to ``drain`` s for busy ones."""
        with self.lock:
            self.stopping = True
        if self._listener is not None:
            try:  # shutdown() wakes the accept() blocked in the acceptor thread (Linux)
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        deadline = time.monotonic() + drain
        while True:
            with self.lock:
                idle = [c for c in self._conns if not c.busy]
                left = len(self._conns)
            for conn in idle:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        with self.lock:
            remaining = list(self._conns)
        for conn in remaining:  # drain time is over
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
