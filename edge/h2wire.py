"""What both HTTP/2 sides of the edge share (``edge.h2front`` towards clients, ``edge.h2leg``
towards an ``app_protocol: "http2"`` upstream): the h2 configuration, the bounded header-block
buffer, header conversion between HTTP/2 field lists and ``edge.http1`` events, and the
end-of-message event that carries trailers.

Header blocks: a HEADERS frame and its CONTINUATION frames are buffered by ``h2`` until
END_HEADERS; ``h2`` itself stops at 64 frames (up to 1 MiB at the default frame size). Here
the block is cut at ``MAX_HEADER_BLOCK`` encoded bytes (the HTTP/1.1 head bound), and the
decoded list at ``MAX_HEADER_LIST_SIZE`` (``hpack``'s own check, advertised in SETTINGS): a
CONTINUATION flood or an HPACK bomb ends the connection with ENHANCE_YOUR_CALM /
COMPRESSION_ERROR after at most that much.
"""

from typing import Any, Iterable, List, Tuple

import h2.config
import h2.connection
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes
from h2.frame_buffer import FrameBuffer
from hyperframe.frame import ContinuationFrame, HeadersFrame

from edge import http1

MAX_HEADER_BLOCK = 64 * 1024  # encoded bytes of one header block (HEADERS + CONTINUATION)
MAX_HEADER_LIST_SIZE = 64 * 1024  # decoded: names + values + 32 per field (RFC 9113 6.5.2)
MAX_FRAME_SIZE = 16384  # the protocol's default; never raised
STREAM_WINDOW = 65535  # per stream: request (or upstream response) body bytes held
CONNECTION_WINDOW = 1024 * 1024  # per connection: what all its streams hold at most

# Fields HTTP/2 forbids (RFC 9113 8.2.2): dropped when a message crosses to HTTP/2.
CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade", b"host")
)

Pairs = List[Tuple[bytes, bytes]]


EndOfMessage = http1.EndOfMessage  # with its trailers (HTTP/2; HTTP/1.1 chunked)


class BoundedFrameBuffer(FrameBuffer):
    """``h2``'s frame buffer with a header block cut at ``MAX_HEADER_BLOCK`` bytes."""

    def __init__(self, server: bool = False):
        super().__init__(server=server)
        self._block = 0

    def _update_header_buffer(self, f: Any) -> Any:
        if isinstance(f, HeadersFrame) and "END_HEADERS" not in f.flags:
            self._block = len(f.data)
        elif isinstance(f, ContinuationFrame) and self._headers_buffer:
            self._block += len(f.data)
            if self._block > MAX_HEADER_BLOCK:
                raise h2.exceptions.DenialOfServiceError(
                    f"header block over {MAX_HEADER_BLOCK} bytes (CONTINUATION)"
                )
        return super()._update_header_buffer(f)


def new_connection(client_side: bool, max_streams: int) -> h2.connection.H2Connection:
    """An h2 state machine with the edge's limits, its preface queued."""
    config = h2.config.H2Configuration(
        client_side=client_side,
        header_encoding=None,
        validate_inbound_headers=True,
        validate_outbound_headers=True,
        normalize_outbound_headers=False,
    )
    conn = h2.connection.H2Connection(config=config)
    conn.incoming_buffer = BoundedFrameBuffer(server=not client_side)
    values = {
        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams,
        h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
        h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
    }
    if client_side:
        values[h2.settings.SettingCodes.ENABLE_PUSH] = 0
    conn.local_settings = h2.settings.Settings(client=client_side, initial_values=values)
    conn.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE  # before the ACK, too
    conn.initiate_connection()
    if CONNECTION_WINDOW > 65535:
        conn.increment_flow_control_window(CONNECTION_WINDOW - 65535)
    return conn


def h2_fields(pairs: Iterable[Tuple[bytes, bytes]]) -> Pairs:
    """HTTP/1.1 header pairs (lower-case names) as HTTP/2 fields: connection-specific ones
    dropped (and those the Connection header names), ``te`` only as ``trailers``."""
    pairs = list(pairs)
    named: set = set()
    for name, value in pairs:
        if name == b"connection":
            named.update(token.strip().lower() for token in value.split(b","))
    out = []
    for name, value in pairs:
        if name in CONNECTION_SPECIFIC or name in named:
            continue
        if name == b"te" and value.strip().lower() != b"trailers":
            continue
        out.append((name, value))
    return out


def http1_fields(fields: Iterable[Tuple[bytes, bytes]]) -> Pairs:
    """HTTP/2 regular fields (pseudo-headers apart) as HTTP/1.1 header pairs, checked as
    HTTP/1.1 requires (http1.LocalProtocolError: a value with a line break, say)."""
    return http1.checked_headers([(n, v) for n, v in fields if not n.startswith(b":")])


def is_grpc(pairs: Iterable[Tuple[bytes, bytes]]) -> bool:
    for name, value in pairs:
        if name == b"content-type":
            return value.lower().startswith(b"application/grpc")
    return False


ENHANCE_YOUR_CALM = ErrorCodes.ENHANCE_YOUR_CALM
