"""muxado's wire as an agent speaks it, sans-IO: bytes in, frames out; frames in, bytes out.
What the edge's tests and benchmarks play the agent with (tests/unit/test_edge_session*.py,
tests/edge/test_hostile_agents.py, bench/edge_bench); the edge's own sessions are framed by
its compiled core (edge_core/src/mux.rs).

The wire format of the ``muxado`` crate (ngrok-rust ``muxado/src/frame.rs`` and ``codec.rs``,
the authority; its PROTOCOL.md diagram puts the flags differently, the code is right):

    0               1               2               3
    | length (24 bits, payload bytes)               | type:4 | flags:4 |
    | R |                 stream id (31 bits)                           |
    | payload …

Types: RST 0 (4-byte error code), DATA 1, WNDINC 2 (4-byte increment), GOAWAY 3 (last stream
id, error code, message). Flags: FIN 0x1, SYN 0x2. A malformed frame (unknown type, wrong
length for its type, SYN on a non-DATA frame, stream id 0 on a stream frame) raises
:class:`ProtocolError` (the edge answers such a frame with GOAWAY and ends the session).
"""

import struct
from dataclasses import dataclass
from typing import Iterator, List

# the constants have one definition, the edge's (re-exported: the fake agents use them)
from edge.muxado import (  # noqa: F401
    DEFAULT_WINDOW,
    E_ACCEPT_QUEUE_FULL,
    E_ENHANCE_YOUR_CALM,
    E_FLOW_CONTROL,
    E_FRAME_SIZE,
    E_INTERNAL,
    E_NONE,
    E_PEER_EOF,
    E_PROTOCOL,
    E_REMOTE_GONE_AWAY,
    E_SESSION_CLOSED,
    E_STREAM_CANCELLED,
    E_STREAM_CLOSED,
    E_STREAM_REFUSED,
    E_STREAM_RESET,
    E_STREAMS_EXHAUSTED,
    E_WRITE_TIMEOUT,
)

RST, DATA, WNDINC, GOAWAY = 0, 1, 2, 3
FIN, SYN = 0x1, 0x2

HEADER = struct.Struct(">II")
U32 = struct.Struct(">I")
LENGTH_MAX = 0xFFFFFF
STREAM_ID_MAX = 0x7FFFFFFF
WNDINC_MAX = 0x7FFFFFFF


class ProtocolError(Exception):
    """The peer broke the framing; ``code`` is the muxado error code for the GOAWAY."""

    def __init__(self, message: str, code: int = E_PROTOCOL):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Frame:
    type: int
    flags: int
    stream_id: int
    payload: bytes = b""

    @property
    def fin(self) -> bool:
        return bool(self.flags & FIN)

    @property
    def syn(self) -> bool:
        return bool(self.flags & SYN)

    # decoded bodies of the control frames
    @property
    def error_code(self) -> int:
        if self.type == RST:
            return U32.unpack_from(self.payload)[0]
        if self.type == GOAWAY:
            return U32.unpack_from(self.payload, 4)[0]
        raise ValueError("no error code in this frame type")

    @property
    def increment(self) -> int:
        return U32.unpack_from(self.payload)[0] & WNDINC_MAX

    @property
    def last_stream_id(self) -> int:
        return U32.unpack_from(self.payload)[0] & STREAM_ID_MAX

    @property
    def message(self) -> bytes:
        return self.payload[8:]


def encode(type_: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    if len(payload) > LENGTH_MAX:
        raise ValueError("payload longer than a frame can carry")
    return (
        HEADER.pack(
            (len(payload) << 8) | ((type_ & 0xF) << 4) | (flags & 0xF), stream_id & STREAM_ID_MAX
        )
        + payload
    )


def data(stream_id: int, payload: bytes = b"", *, syn: bool = False, fin: bool = False) -> bytes:
    return encode(DATA, (SYN if syn else 0) | (FIN if fin else 0), stream_id, payload)


def rst(stream_id: int, code: int) -> bytes:
    return encode(RST, 0, stream_id, U32.pack(code))


def wndinc(stream_id: int, increment: int) -> bytes:
    return encode(WNDINC, 0, stream_id, U32.pack(min(increment, WNDINC_MAX)))


def goaway(last_stream_id: int, code: int, message: bytes = b"") -> bytes:
    return encode(
        GOAWAY,
        0,
        0,
        U32.pack(last_stream_id & STREAM_ID_MAX) + U32.pack(code) + message[: LENGTH_MAX - 8],
    )


class FrameParser:
    """Feed bytes, iterate complete frames. ``max_payload`` bounds what one frame may make us
    buffer (DATA can never exceed the window we granted; control frames are tiny)."""

    def __init__(self, max_payload: int = DEFAULT_WINDOW):
        self._buf = bytearray()
        self.max_payload = max_payload

    def feed(self, chunk: bytes) -> List[Frame]:
        self._buf += chunk
        return list(self._frames())

    def _frames(self) -> Iterator[Frame]:
        buf = self._buf
        offset = 0
        try:
            while len(buf) - offset >= 8:
                word, sid = HEADER.unpack_from(buf, offset)
                length, type_, flags = word >> 8, (word >> 4) & 0xF, word & 0xF
                _check_header(length, type_, flags, sid & STREAM_ID_MAX, self.max_payload)
                if len(buf) - offset - 8 < length:
                    break
                start = offset + 8
                yield Frame(type_, flags, sid & STREAM_ID_MAX, bytes(buf[start : start + length]))
                offset = start + length
        finally:
            if offset == len(buf):  # all parsed: drop the buffer (a drained one keeps its size)
                self._buf = bytearray()
            else:
                del buf[:offset]


def _check_header(length: int, type_: int, flags: int, stream_id: int, max_payload: int) -> None:
    if type_ == DATA:
        if stream_id == 0:
            raise ProtocolError("DATA frame on stream 0")
        if length > max_payload:
            raise ProtocolError(f"DATA frame of {length} bytes exceeds the window", E_FLOW_CONTROL)
        return
    if flags & SYN:
        raise ProtocolError(f"SYN flag on a frame of type {type_}")
    if type_ in (RST, WNDINC):
        if length != 4:
            raise ProtocolError(
                f"frame of type {type_} must carry 4 bytes, not {length}", E_FRAME_SIZE
            )
        if stream_id == 0:
            raise ProtocolError(f"frame of type {type_} on stream 0")
    elif type_ == GOAWAY:
        if length < 8 or length > 8 + 64 * 1024:
            raise ProtocolError(f"GOAWAY frame of {length} bytes", E_FRAME_SIZE)
    else:
        raise ProtocolError(f"unknown frame type {type_}")
