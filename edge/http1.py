"""HTTP/1.1 framing for the public listeners: a sans-IO connection, one per side of a proxied
exchange, parsed by llhttp (``httptools``, C) and written by hand.

It replaced h11 (measured: h11 cost about 80 µs of the edge's ~200 µs of CPU per small request,
33 µs on the client's side and 47 µs on the agent's; this module costs a few µs per side; see
``bench/edge_bench``). The interface is h11's, cut to what the edge uses: ``Connection(role)`` with
``receive_data`` / ``next_event`` / ``send`` / ``start_next_cycle`` / ``our_state`` /
``their_state`` / ``trailing_data``, and the events ``Request``, ``InformationalResponse``,
``Response``, ``Data``, ``EndOfMessage``, ``ConnectionClosed`` (plus ``NEED_DATA`` and
``PAUSED``). So are its rules, which ``tests/unit/test_edge_http1.py`` pins:

- Reading (the peer's bytes): a head larger than ``max_incomplete_event_size`` (complete or
  not), as many bytes of chunk framing or trailers without body bytes between them, a head
  llhttp refuses (bad request line, a method outside llhttp's list, header token, control
  characters, bare LF, obs-fold, Content-Length together with Transfer-Encoding), an HTTP
  version other than 1.0 and 1.1, a request without exactly one ``Host`` (HTTP/1.1), a
  ``Transfer-Encoding`` other than ``chunked``, an Upgrade or CONNECT request with a body, or a
  status code below 100 is a ``RemoteProtocolError``, raised by ``next_event`` after the events
  before the fault. The peer closing in the middle of a head or a counted body is one too;
  closing between messages is ``ConnectionClosed``; a response without a length (not chunked,
  no Content-Length) ends when the peer closes. A chunked body's trailers come with its
  ``EndOfMessage`` (``trailers``, framing and routing fields dropped) and are written after the
  last chunk when the message sent is chunked (an HTTP/2 peer's too: edge.h2front, edge.h2leg).
- A response to HEAD, a 1xx, 204 or 304 has no body whatever its headers say (one that
  declares a body ends its connection's reuse: a body sent anyway must answer nothing).
  101 switches protocols, only for a request that asked to (``Upgrade`` and ``Connection:
  upgrade``, both ways): ``trailing_data`` holds what came after the head. An upgrade request
  that gets anything but a 101 closes the connection after that response.
- Pipelining: requests parsed ahead wait for ``start_next_cycle``; what a later one says
  (``Connection: close``, HTTP/1.0, an upgrade) applies when it is returned, never to the
  response of the one before. ``clean`` tells whether anything of the peer's is pending.
- Writing (our bytes): a message's body framing comes from its headers (Content-Length,
  ``Transfer-Encoding: chunked``); a response with neither is sent chunked to an HTTP/1.1 client
  and delimited by closing to an HTTP/1.0 one. More or less body than a Content-Length
  declares is a ``LocalProtocolError``, as are header names, values, methods and targets that
  are not valid HTTP/1.1 when the event is built with ``checked=True`` (what a traffic policy
  produced: the edge answers ERR_NGROK_2300).
- Keep-alive: a connection is reused (both states ``DONE``) unless either message said
  ``Connection: close``, the request was HTTP/1.0, or the body was delimited by closing;
  a response the edge ends the connection after carries ``Connection: close``.
- Header names are read case-insensitively: events carry ``headers`` as (lower-case name,
  value) pairs, and keep the peer's own spelling (``raw_headers``) for writing. A response is
  relayed with its upstream's header spelling; a request goes upstream with lower-case names.
"""

import re
from http import HTTPStatus
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import httptools

SERVER, CLIENT = "SERVER", "CLIENT"


class _Sentinel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA, PAUSED = _Sentinel("NEED_DATA"), _Sentinel("PAUSED")
IDLE, SEND_RESPONSE, SEND_BODY, DONE, MUST_CLOSE, CLOSED, SWITCHED_PROTOCOL, ERROR = (
    _Sentinel(n)
    for n in (
        "IDLE",
        "SEND_RESPONSE",
        "SEND_BODY",
        "DONE",
        "MUST_CLOSE",
        "CLOSED",
        "SWITCHED_PROTOCOL",
        "ERROR",
    )
)


class ProtocolError(Exception):
    pass


class RemoteProtocolError(ProtocolError):
    """The peer broke HTTP/1.1."""


class LocalProtocolError(ProtocolError):
    """What we were about to send is not valid HTTP/1.1 (or not valid now)."""


Pairs = List[Tuple[bytes, bytes]]
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+\Z")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,18}\Z")


def _b(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode("latin-1")


_TOKENS = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+(?:\t[-!#$%&'*+.^_`|~0-9a-zA-Z]+)*\Z")


def _normalize(headers: Iterable[Tuple[Any, Any]], checked: bool) -> Tuple[Pairs, Pairs]:
    """(lower-case pairs, raw pairs) of ``headers`` (str or bytes); ``checked`` refuses what
    HTTP/1.1 does not allow (LocalProtocolError) and trims values' surrounding whitespace.
    The check is two regular-expression scans of the names and the values joined by a tab
    (a tab is allowed in a value; in a name it shows as one tab too many), whatever the
    number of headers; the offending header is looked for only when one is refused."""
    if checked:
        raw = [
            (
                name if name.__class__ is bytes else _b(name),
                (value if value.__class__ is bytes else _b(value)).strip(b" \t"),
            )
            for name, value in headers
        ]
        names = b"\t".join([n for n, _ in raw])
        if raw and (
            not _TOKENS.match(names)
            or names.count(b"\t") != len(raw) - 1
            or _BAD_VALUE.search(b"\t".join([v for _, v in raw]))
        ):
            for name, value in raw:
                if not _TOKEN.match(name):
                    raise LocalProtocolError(f"Illegal header name {name!r}")
                if _BAD_VALUE.search(value):
                    raise LocalProtocolError(f"Illegal header value {value!r}")
    else:
        raw = [
            (
                name if name.__class__ is bytes else _b(name),
                value if value.__class__ is bytes else _b(value),
            )
            for name, value in headers
        ]
    return [(name.lower(), value) for name, value in raw], raw


def checked_headers(headers: Iterable[Tuple[Any, Any]]) -> Pairs:
    """``headers`` as (lower-case name, value) bytes pairs, LocalProtocolError for a name or
    value HTTP/1.1 does not allow (values trimmed), as a checked event does."""
    return _normalize(headers, True)[0]


_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _fields(cls: type) -> Tuple[str, ...]:
    """An event class's fields: the public slots of it and its bases (a subclass that adds
    none, as Response, still compares and prints its base's)."""
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(
            name
            for klass in reversed(cls.__mro__)
            for name in getattr(klass, "__slots__", ())
            if not name.startswith("_")
        )
    return fields


class Event:
    __slots__: Tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{s}={getattr(self, s)!r}" for s in _fields(type(self)))
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: Any) -> bool:
        return type(self) is type(other) and all(
            getattr(self, s) == getattr(other, s) for s in _fields(type(self))
        )

    __hash__ = None  # type: ignore


class Request(Event):
    """A request head. ``checked=True`` validates it as h11 would (LocalProtocolError)."""

    __slots__ = ("method", "target", "headers", "raw_headers", "http_version", "close", "upgrade")

    def __init__(
        self,
        *,
        method: Any,
        target: Any,
        headers: Sequence[Tuple[Any, Any]],
        http_version: bytes = b"1.1",
        checked: bool = False,
        raw_headers: Optional[Pairs] = None,
    ):
        self.method, self.target, self.http_version = _b(method), _b(target), http_version
        self.close = False  # parsed: this message ends its connection
        self.upgrade = False  # parsed: llhttp stopped after this head (Upgrade, CONNECT)
        if raw_headers is not None:  # from the parser: already valid, names lower-cased
            self.headers, self.raw_headers = cast(Pairs, headers), raw_headers
        else:
            self.headers, self.raw_headers = _normalize(headers, checked)
        if checked:
            if not _TOKEN.match(self.method):
                raise LocalProtocolError("Illegal method characters")
            if not self.target or _BAD_TARGET.search(self.target):
                raise LocalProtocolError("Illegal target characters")
            framing, hosts, _, _ = _declare(self.headers)
            if hosts == 0 and http_version == b"1.1":
                raise LocalProtocolError("Missing mandatory Host: header")
            if hosts > 1:
                raise LocalProtocolError("Found multiple Host: headers")
            if framing:
                _framing(framing, LocalProtocolError)


class _ResponseBase(Event):
    # _declared: what the parser found in ``headers`` (see _Declared), for writing the head
    # back without scanning it again while ``headers`` is unchanged
    __slots__ = (
        "status_code",
        "reason",
        "headers",
        "raw_headers",
        "http_version",
        "close",
        "_declared",
    )

    def __init__(
        self,
        *,
        status_code: int,
        headers: Sequence[Tuple[Any, Any]] = (),
        reason: Any = b"",
        http_version: bytes = b"1.1",
        checked: bool = False,
        raw_headers: Optional[Pairs] = None,
    ):
        self.close = False  # parsed: this message ends its connection
        self._declared: Optional[_Declared] = None
        self.status_code, self.reason, self.http_version = (
            int(status_code),
            _b(reason),
            http_version,
        )
        if raw_headers is not None:
            self.headers, self.raw_headers = cast(Pairs, headers), raw_headers
        else:
            self.headers, self.raw_headers = _normalize(headers, checked)
        if checked:
            if b"\r" in self.reason or b"\n" in self.reason:
                raise LocalProtocolError("Illegal reason phrase")
            framing, _, says_close, _ = _declare(self.headers)
            kind, length = _framing(framing, LocalProtocolError) if framing else (_UNTIL_CLOSE, 0)
            self._declared = (self.headers[:], kind, length, says_close)


class InformationalResponse(_ResponseBase):
    """A 1xx head."""

    __slots__ = ()

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not 100 <= self.status_code < 200:
            raise LocalProtocolError(
                "InformationalResponse status_code should be in range "
                f"[100, 200), not {self.status_code}"
            )


class Response(_ResponseBase):
    """A final response head."""

    __slots__ = ()

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not 200 <= self.status_code < 1000:
            raise LocalProtocolError(
                f"Response status_code should be in range [200, 1000), not {self.status_code}"
            )


class Data(Event):
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class EndOfMessage(Event):
    """The end of a message, with its trailers (lower-case pairs; [] when none)."""

    __slots__ = ("trailers",)

    def __init__(self, trailers: Optional[Pairs] = None):
        self.trailers = trailers or []


class ConnectionClosed(Event):
    __slots__ = ()


_EOM = EndOfMessage()
_new = object.__new__
_VERSIONS = {"1.1": b"1.1", "1.0": b"1.0"}


def _parsed(
    cls: Any, status: int, reason: bytes, version: bytes, headers: Pairs, raw: Pairs
) -> Any:
    """A response head as ``cls(…, raw_headers=raw)`` builds it, without its keyword
    arguments (the parser's own, already valid)."""
    event = _new(cls)
    event.status_code, event.reason, event.http_version = status, reason, version
    event.headers, event.raw_headers = headers, raw
    event.close, event._declared = False, None
    return event


# Fields a trailer section may not carry (framing, routing, the connection: RFC 9110 6.5.1).
_NOT_TRAILERS = frozenset(
    (
        b"content-length",
        b"transfer-encoding",
        b"host",
        b"connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"upgrade",
        b"content-encoding",
        b"content-type",
        b"content-range",
        b"authorization",
        b"set-cookie",
        b"cache-control",
        b"expires",
        b"proxy-connection",
    )
)
_CHUNKED, _LENGTH, _UNTIL_CLOSE, _NONE = "chunked", "length", "until-close", "none"


def _framing(headers: Pairs, error: type) -> Tuple[str, int]:
    """(kind, length) of a message body as its headers declare it; ``error`` for conflicting
    or unsupported declarations."""
    length, chunked = None, False
    for name, value in headers:
        if name == b"content-length":
            if value.isdigit() and len(value) <= 18:
                number = int(value)
            else:  # "5, 5" is one length; anything else is not
                values = {v.strip() for v in value.split(b",")}
                if len(values) != 1 or not _CONTENT_LENGTH.match(next(iter(values))):
                    raise error("bad Content-Length")
                number = int(values.pop())
            if length is not None and length != number:
                raise error("conflicting Content-Length headers")
            length = number
        elif name == b"transfer-encoding":
            if chunked:
                raise error("multiple Transfer-Encoding headers")
            if value.strip().lower() != b"chunked":
                raise error("Only Transfer-Encoding: chunked is supported")
            chunked = True
    if chunked:
        if length is not None:
            raise error("Transfer-Encoding and Content-Length both given")
        return _CHUNKED, 0
    if length is not None:
        return _LENGTH, length
    return _UNTIL_CLOSE, 0


# The fields a head's framing and its connection's fate depend on (see _declare).
_DECLARING = frozenset(
    (b"host", b"content-length", b"transfer-encoding", b"connection", b"upgrade")
)
# What a parsed response's headers declared: (a copy of its ``headers``, framing kind, length,
# Connection says close); valid while the event's ``headers`` still equal the copy.
_Declared = Tuple[Pairs, str, int, bool]


def _declare(headers: Pairs) -> Tuple[Optional[Pairs], int, bool, bool]:
    """One pass over a head's lower-case headers: its Content-Length and Transfer-Encoding
    fields in order (None when it has none; ``_framing`` reads them), how many ``Host``
    fields it has, whether ``Connection`` says close, and whether it asks to switch protocols:
    both ``Upgrade`` and ``Connection: upgrade``, what makes llhttp stop at a head (a CONNECT
    request does too: it is answered, then the connection closes)."""
    framing: Optional[Pairs] = None
    hosts = 0
    close = connection_upgrade = upgrade = False
    for name, value in headers:
        if name in _DECLARING:
            if name == b"host":
                hosts += 1
            elif name == b"connection":
                value = value.lower()
                if b"close" in value:
                    close = True
                if b"upgrade" in value:
                    connection_upgrade = True
            elif name == b"upgrade":
                upgrade = True
            elif framing is None:
                framing = [(name, value)]
            else:
                framing.append((name, value))
    return framing, hosts, close, upgrade and connection_upgrade


def _head(first: bytes, raw: Pairs) -> bytes:
    """``first`` (a start line without its CRLF, or a last chunk's ``0``), then the fields."""
    return b"\r\n".join([first, *map(b": ".join, raw), b"", b""])


def request_head(event: "Request") -> bytes:
    """The bytes of a request's head as a CLIENT connection writes it (the compiled core sends
    a decided route's request with it: edge/decided.py)."""
    return _head(b"%s %s HTTP/1.1" % (event.method, event.target), event.raw_headers)


def response_head(event: "Response") -> bytes:
    """The bytes of the head of an answer the edge writes whole, framed by its own
    Content-Length (edge/decided.py): its fields as given, as a SERVER connection writes them
    to an HTTP/1.1 client. LocalProtocolError when its framing fields are not valid."""
    framing, _, _, _ = _declare(event.headers)
    if framing:
        _framing(framing, LocalProtocolError)
    return _head(
        b"HTTP/1.1 %d %s" % (event.status_code, event.reason or _phrase(event.status_code)),
        event.raw_headers,
    )


class Connection:
    """One side of an HTTP/1.1 connection: ``SERVER`` reads requests and writes responses
    (the edge towards a client), ``CLIENT`` the other way (the edge towards the agent)."""

    def __init__(self, our_role: str, max_incomplete_event_size: int = 16 * 1024):
        self.our_role = our_role
        self.max_head = max_incomplete_event_size
        self.our_state = IDLE
        self.their_state = IDLE
        self._events: List[Any] = []  # parsed, not yet returned (this cycle's and after)
        self._read = 0  # index of the next event to return
        self._error: Optional[ProtocolError] = None
        self._closed = False  # the peer closed its side
        self._trailing = b""  # bytes after a protocol switch
        self._switching = False  # parser stopped at an upgrade
        self._keep_alive = True
        self._request_method = b""  # the current exchange's, for the response's body
        self._peer_version = b"1.1"  # the request's HTTP version (server role)
        self._upgrade_asked = False  # the current request asked to switch protocols
        # what we write
        self._send_framing = _NONE
        self._send_left = 0
        # what we read
        self._parser: Any = None
        self._in_message = False  # the peer's message has begun, not ended
        self._in_body = False  # ... and its head is done
        self._read_framing = _NONE
        self._head_bytes = 0
        self._fed_body = 0  # body bytes parsed so far (all messages)
        self._begun_at: Optional[int] = None  # _fed_body when a message began in this feed
        self._chunk_overhead = 0  # chunk framing and trailer bytes since body bytes
        self._url = b""
        self._reason = b""
        self._raw: Pairs = []  # the head's fields (values without trailing OWS), then trailers
        self._reusable_parser = False  # CLIENT role: llhttp is ready for the next response
        self._informational = False
        self._head_buffer = b""  # CLIENT role, HEAD exchange: head bytes so far
        if our_role == SERVER:
            self._parser = httptools.HttpRequestParser(self)

    # ---- llhttp callbacks -------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._in_message, self._in_body, self._head_bytes = True, False, 0
        self._begun_at, self._chunk_overhead = self._fed_body, 0
        self._url = self._reason = b""
        self._raw = []
        self._reusable_parser = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw.append((name, value.rstrip(b" \t")))  # llhttp keeps OWS

    def _too_large(self) -> "RemoteProtocolError":
        return RemoteProtocolError(f"message head larger than {self.max_head} bytes")

    def on_headers_complete(self) -> None:
        raw = self._raw
        self._raw = []  # what llhttp reports after this: trailers
        parser = self._parser
        server = self.our_role == SERVER
        if server:
            method = parser.get_method()
            start = len(method) + len(self._url) + 12
        else:
            start = len(self._reason) + 15
        # A complete head is bounded too (an incomplete one is, in _feed): its size as sent
        # (exact for single spaces and no optional whitespace around values).
        if sum([len(name) + len(value) for name, value in raw]) + 4 * len(raw) + 2 + start > (
            self.max_head
        ):
            raise self._too_large()
        lower = [(name.lower(), value) for name, value in raw]
        version = _VERSIONS.get(parser.get_http_version())
        if version is None:
            raise RemoteProtocolError(f"HTTP/{parser.get_http_version()} is not supported")
        framing, hosts, says_close, upgrade = _declare(lower)
        close = says_close or version != b"1.1"
        if server:
            if version == b"1.1" and hosts != 1:
                raise RemoteProtocolError(
                    "Missing mandatory Host: header"
                    if not hosts
                    else "Found multiple Host: headers"
                )
            kind, length = _framing(framing, RemoteProtocolError) if framing else (_UNTIL_CLOSE, 0)
            if kind == _UNTIL_CLOSE:
                kind = _NONE  # a request without a length has no body
            if (method == b"CONNECT" or upgrade) and (
                kind == _CHUNKED or (kind == _LENGTH and length > 0)
            ):
                # llhttp stops at such a head (the rest is the new protocol's): a body there
                # cannot be framed as HTTP/1.1
                raise RemoteProtocolError(
                    "an Upgrade or CONNECT request with a body is not supported"
                )
            self._read_framing = kind
            # Built as Request(…, raw_headers=raw) would be, without its keyword arguments
            request = _new(Request)
            request.method, request.target, request.http_version = method, self._url, version
            request.headers, request.raw_headers = lower, raw
            request.close, request.upgrade = close, False
            self._in_body = True
            self._events.append(request)
            return
        status = parser.get_status_code()
        if status < 100:
            raise RemoteProtocolError(f"status code {status} is not valid")
        if status < 200:  # 1xx (101 included): no body, no end of message
            if status == 101 and not (upgrade and self._upgrade_asked):
                raise RemoteProtocolError(
                    "101 Switching Protocols without 'Connection: "
                    "upgrade', or to a request that asked for none"
                )
            self._informational = True
            self._events.append(
                _parsed(InformationalResponse, status, self._reason, version, lower, raw)
            )
            return
        if status >= 1000:  # as Response() refuses it (llhttp reads three digits)
            raise LocalProtocolError(
                f"Response status_code should be in range [200, 1000), not {status}"
            )
        self._informational = False
        kind, length = _framing(framing, RemoteProtocolError) if framing else (_UNTIL_CLOSE, 0)
        response = _parsed(Response, status, self._reason, version, lower, raw)
        response._declared = (lower[:], kind, length, says_close)
        if self._request_method == b"HEAD" or status in (204, 304):
            # no body, whatever the head declares; one that declares a body may send
            # it anyway, later: the stream is not reused, so such bytes answer nothing
            close = close or kind == _CHUNKED or (kind == _LENGTH and length > 0)
            kind = _NONE
        self._read_framing = kind
        response.close = close  # applied when the event is returned (pipelined heads wait)
        self._in_body = True
        self._events.append(response)

    def on_body(self, body: bytes) -> None:
        self._fed_body += len(body)
        self._events.append(Data(body))

    def on_message_complete(self) -> None:
        if self.our_role == CLIENT and self._informational:
            self._informational = False
            return  # a 1xx has no end of message of its own; the final response follows
        self._in_message = self._in_body = False
        if self._read_framing == _UNTIL_CLOSE:
            self._keep_alive = False
        if self.our_role == CLIENT:  # llhttp can read the next response (start_next_cycle)
            self._reusable_parser = self._parser.should_keep_alive()
        trailers = self._raw if self._read_framing == _CHUNKED else None
        self._events.append(
            EndOfMessage(
                [
                    (name.lower(), value.strip(b" \t"))
                    for name, value in trailers
                    if name.lower() not in _NOT_TRAILERS
                ]
            )
            if trailers
            else _EOM
        )

    # ---- reading ----------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """The peer's next bytes; ``b""`` when it closed its side."""
        if self._error is not None:
            return
        if not data:
            self._closed = True
            self._eof()
            return
        if self._switching or self.their_state is SWITCHED_PROTOCOL:
            self._trailing += data
            return
        try:
            if self.our_role == CLIENT and self._request_method == b"HEAD":
                self._feed_head_only(data)
            else:
                self._feed(data)
        except ProtocolError as exc:
            self._error = _remote(exc)
        except httptools.HttpParserUpgrade as exc:
            self._switching = True
            self._trailing = data[exc.args[0] :]
            for event in reversed(self._events):  # the head llhttp stopped after
                if isinstance(event, Request):
                    event.upgrade = True
                    break
        except httptools.HttpParserError as exc:
            context = exc.__context__
            self._error = (
                _remote(context)
                if isinstance(context, ProtocolError)
                else RemoteProtocolError(str(exc) or type(exc).__name__)
            )

    def _feed(self, data: bytes) -> None:
        if self._parser is None:
            self._parser = httptools.HttpResponseParser(self)
        body_before, self._begun_at = self._fed_body, None
        self._parser.feed_data(data)
        if self._in_message and not self._in_body:  # a head is incomplete: bounded
            if self._begun_at is not None:  # it began in this read: after what came before
                self._head_bytes = len(data) - (self._begun_at - body_before)
            else:
                self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                raise self._too_large()
        elif self._in_body and self._read_framing == _CHUNKED:
            # chunk-size lines, extensions and trailers are bounded like a head: bytes that
            # are not body since the last body bytes
            produced = self._fed_body - body_before
            overhead = len(data) - produced
            self._chunk_overhead = overhead if produced else self._chunk_overhead + overhead
            if self._chunk_overhead > self.max_head:
                raise RemoteProtocolError(
                    f"more than {self.max_head} bytes of chunk framing "
                    "or trailers without body bytes"
                )

    def _feed_head_only(self, data: bytes) -> None:
        """The response to a HEAD: llhttp cannot be told the request's method, so it is fed
        heads only (each up to its blank line, 1xx ones first) until the final one, which
        ends the message. Bytes after it belong to no response: the connection is not
        reused."""
        buffer = self._head_buffer + data
        self._head_buffer = b""
        while buffer:
            if self._request_method != b"HEAD":
                self._keep_alive = False
                return
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > self.max_head:
                    raise self._too_large()
                self._head_buffer = buffer
                return
            head, buffer = buffer[: end + 4], buffer[end + 4 :]
            self._parser = httptools.HttpResponseParser(self)
            try:
                self._parser.feed_data(head)
            except httptools.HttpParserUpgrade:
                self._switching, self._trailing = True, buffer
                return
            if self._events and isinstance(self._events[-1], Response):
                self._in_message = self._in_body = False  # its body never comes
                self._events.append(_EOM)
            if self._events and self._events[-1] is _EOM:
                self._request_method, self._parser = b"", None

    def _eof(self) -> None:
        if self._switching or self.their_state is SWITCHED_PROTOCOL:
            return
        if self._head_buffer or (self._in_message and not self._in_body):
            self._error = RemoteProtocolError("peer unexpectedly closed connection")
        elif self._in_body:
            if self._read_framing == _UNTIL_CLOSE:
                self._in_message = self._in_body = False
                self._keep_alive = False
                self._events.append(_EOM)
            else:
                self._error = RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )

    def next_event(self) -> Any:
        """The next event of this cycle, ``NEED_DATA`` or ``PAUSED`` (the peer's message is
        done and the next one waits for ``start_next_cycle``); raises RemoteProtocolError."""
        state = self.their_state
        if state is DONE or state is MUST_CLOSE:
            return (
                PAUSED
                if (self._read < len(self._events) or self._trailing or self._error is not None)
                else (ConnectionClosed() if self._closed else NEED_DATA)
            )
        events, read = self._events, self._read
        if state is SWITCHED_PROTOCOL or (self._switching and read >= len(events)):
            return PAUSED
        if read < len(events):
            event = events[read]
            read += 1
            if read == len(events):
                events.clear()
                read = 0
            self._read = read
            # what the event does to the states (the parser's own classes: no subclasses)
            kind = type(event)
            if kind is Data:
                pass
            elif kind is EndOfMessage:
                if self._keep_alive:
                    self.their_state = DONE
                else:  # both states say the connection is not to be reused
                    self.their_state = MUST_CLOSE
                    if self.our_state is DONE:
                        self.our_state = MUST_CLOSE
            elif kind is Request:
                self.their_state = SEND_BODY
                self._request_method = event.method
                self._peer_version = event.http_version
                self._upgrade_asked = event.upgrade
                if event.close:
                    self._keep_alive = False
                if self.our_state is IDLE:
                    self.our_state = SEND_RESPONSE
            elif kind is Response:
                self.their_state = SEND_BODY
                if event.close:
                    self._keep_alive = False
            elif event.status_code == 101:  # an InformationalResponse
                self.their_state = self.our_state = SWITCHED_PROTOCOL
            return event
        if self._error is not None:
            self.their_state = ERROR
            raise self._error
        if self._closed:
            self.their_state = CLOSED
            return ConnectionClosed()
        return NEED_DATA

    # ---- writing ----------------------------------------------------------------------------
    def send(self, event: Any) -> bytes:
        """The bytes of ``event``; LocalProtocolError when it cannot be sent now."""
        kind = type(event)
        if kind is Data:
            return self._send_data(event.data)
        if kind is EndOfMessage:
            return self._send_end(event.trailers)
        if kind is Response:
            return self._send_response(event)
        if kind is Request:
            return self._send_request(event)
        if isinstance(event, Data):
            return self._send_data(event.data)
        if isinstance(event, EndOfMessage):
            return self._send_end(getattr(event, "trailers", None))
        if isinstance(event, Response):
            return self._send_response(event)
        if isinstance(event, InformationalResponse):
            if self.our_role != SERVER or self.our_state not in (IDLE, SEND_RESPONSE):
                raise LocalProtocolError("can't send an InformationalResponse now")
            if event.status_code == 101 and not self._upgrade_asked:
                raise LocalProtocolError(
                    "101 Switching Protocols to a request that did not ask for an upgrade"
                )
            if event.status_code == 101:
                self.our_state = self.their_state = SWITCHED_PROTOCOL
            return _head(
                b"HTTP/1.1 %d %s"
                % (event.status_code, event.reason or _phrase(event.status_code)),
                event.raw_headers,
            )
        if isinstance(event, Request):
            return self._send_request(event)
        raise LocalProtocolError(f"can't send {event!r}")

    def _send_request(self, event: Request) -> bytes:
        if self.our_role != CLIENT or self.our_state is not IDLE:
            raise LocalProtocolError("can't send a Request now")
        framing, _, close, upgrade = _declare(event.headers)
        kind, length = _framing(framing, LocalProtocolError) if framing else (_UNTIL_CLOSE, 0)
        self._send_framing, self._send_left = (
            (_NONE, 0) if kind == _UNTIL_CLOSE else (kind, length)
        )
        if close:
            self._keep_alive = False
        self._request_method = event.method
        self._upgrade_asked = upgrade
        self.our_state, self.their_state = SEND_BODY, SEND_RESPONSE
        return _head(b"%s %s HTTP/1.1" % (event.method, event.target), event.raw_headers)

    def _send_response(self, event: Response) -> bytes:
        if self.our_role != SERVER or self.our_state not in (IDLE, SEND_RESPONSE):
            raise LocalProtocolError("can't send a Response now")
        raw = event.raw_headers
        declared = event._declared
        if declared is not None and declared[0] == event.headers:
            # parsed by an http1 Connection and its headers unchanged since: what they declare
            # was found then (a traffic policy's change makes a new event, or fails this test)
            _, kind, length, says_close = declared
        else:
            framing, _, says_close, _ = _declare(event.headers)
            kind, length = _framing(framing, LocalProtocolError) if framing else (_UNTIL_CLOSE, 0)
        if self._request_method == b"HEAD" or event.status_code in (204, 304):
            kind = _NONE
        elif kind == _CHUNKED and self._peer_version != b"1.1":
            kind = _UNTIL_CLOSE  # an HTTP/1.0 client knows no chunks
            raw = [(n, v) for n, v in raw if n.lower() != b"transfer-encoding"]
        elif kind == _UNTIL_CLOSE and self._peer_version == b"1.1":
            kind = _CHUNKED
            raw = raw + [(b"Transfer-Encoding", b"chunked")]
        if kind == _UNTIL_CLOSE or says_close or self._upgrade_asked:
            self._keep_alive = False
        if not self._keep_alive and not says_close:
            raw = [(n, v) for n, v in raw if n.lower() != b"connection"] + [
                (b"Connection", b"close")
            ]
        self._send_framing, self._send_left = kind, length
        self.our_state = SEND_BODY
        return _head(
            b"HTTP/1.1 %d %s" % (event.status_code, event.reason or _phrase(event.status_code)),
            raw,
        )

    def _send_data(self, data: bytes) -> bytes:
        if self.our_state is not SEND_BODY:
            raise LocalProtocolError("can't send data now")
        if not data:
            return b""
        kind = self._send_framing
        if kind == _CHUNKED:
            return b"%x\r\n%s\r\n" % (len(data), data)
        if kind == _LENGTH:
            if len(data) > self._send_left:
                raise LocalProtocolError("Too much data for declared Content-Length")
            self._send_left -= len(data)
            return bytes(data)
        if kind == _UNTIL_CLOSE:
            return bytes(data)
        raise LocalProtocolError("Too much data for declared Content-Length")

    def _send_end(self, trailers: Optional[Pairs] = None) -> bytes:
        """The end of the body; ``trailers`` (checked pairs) go after the last chunk of a
        chunked body, and nowhere else."""
        if self.our_state is not SEND_BODY:
            raise LocalProtocolError("can't end a message now")
        if self._send_framing == _LENGTH and self._send_left:
            raise LocalProtocolError("Too little data for declared Content-Length")
        if self._keep_alive:
            self.our_state = DONE
        else:  # both states say the connection is not to be reused
            self.our_state = MUST_CLOSE
            if self.their_state is DONE:
                self.their_state = MUST_CLOSE
        if self._send_framing == _CHUNKED:
            return _head(b"0", trailers) if trailers else b"0\r\n\r\n"
        return b""

    # ---- cycles -----------------------------------------------------------------------------
    def start_next_cycle(self) -> None:
        if self.our_state is not DONE or self.their_state is not DONE:
            raise LocalProtocolError("not in a reusable state")
        self.our_state = self.their_state = IDLE
        self._request_method, self._upgrade_asked = b"", False
        self._send_framing, self._send_left = _NONE, 0
        if self.our_role == CLIENT and not self._reusable_parser:
            # a new parser unless the one that read this response ended it ready for the next
            # (llhttp's own keep-alive, nothing of another response begun)
            self._parser = None

    @property
    def clean(self) -> bool:
        """Nothing of the peer's is pending: no parsed event, error, partial message or head
        (a connection reused otherwise would read those as the next exchange's)."""
        return (
            self._read >= len(self._events)
            and self._error is None
            and not self._in_message
            and not self._head_buffer
        )

    @property
    def trailing_data(self) -> Tuple[bytes, bool]:
        """What the peer sent after a protocol switch, and whether it closed since."""
        return self._trailing, self._closed


def _remote(exc: ProtocolError) -> RemoteProtocolError:
    """An error found while parsing the peer's bytes is the peer's."""
    return exc if isinstance(exc, RemoteProtocolError) else RemoteProtocolError(str(exc))


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""
