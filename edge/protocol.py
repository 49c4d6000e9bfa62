"""The agent protocol over muxado streams, sans-IO where it can be: stream types, RPC bodies,
error replies and the proxy header (ngrok-rust ``ngrok/src/internals/proto.rs``).

RPC requests (Auth, Bind, Unbind, StartTunnelWithLabel, SrvInfo) are one JSON object the agent
writes without half-closing; :class:`JsonReader` recognises the end of that object
incrementally and tells a truncated document (wait for more) from a malformed one (end the
session).
"""

import json
import re
import struct
from typing import Any, Dict, Optional

AUTH, BIND, UNBIND, PROXY, RESTART, STOP, UPDATE, BIND_LABELED, STOP_TUNNEL = (
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    9,
)
# ngrok-go v2 (internal/tunnel/proto/msg.go): SrvInfo, which its Diagnose opens without Auth
# (the reply names the region), and PatchTunnelState, its EndpointForwarder.Update.
SRV_INFO, PATCH_TUNNEL_STATE = 8, 10
HEARTBEAT = 0xFFFFFFFF
AGENT_STREAM_TYPES = {AUTH, BIND, UNBIND, BIND_LABELED, SRV_INFO, PATCH_TUNNEL_STATE, HEARTBEAT}

SUPPORTED_VERSIONS = ("3", "2")
MAX_RPC_BYTES = 256 * 1024  # a Bind carries a traffic policy document: generous, bounded

EDGE_TYPE = {"tcp": "1", "tls": "2", "https": "3", "http": "3"}

U32 = struct.Struct(">I")
I64LE = struct.Struct("<q")


class MalformedRequest(ValueError):
    """The agent sent something that is not the protocol: the session ends with GOAWAY."""


class JsonReader:
    """Feed bytes of one JSON object; ``feed`` returns it once complete, else None.

    The end of the object is found by scanning only the bytes each chunk adds (string,
    escape and nesting state kept between chunks; JSON's structural characters are ASCII, so
    UTF-8 never hides one), and the document is decoded once, when its closing brace
    arrives: a request fed one byte at a time costs linear time, not a decode per chunk.
    Bounds: ``limit`` bytes, ``MAX_DEPTH`` levels of nesting."""

    MAX_DEPTH = 64
    _decoder = json.JSONDecoder()
    _OUTSIDE = re.compile(rb'[{}\[\]"]')
    _INSIDE = re.compile(rb'["\\]')

    def __init__(self, limit: int = MAX_RPC_BYTES):
        self._buf = bytearray()
        self._limit = limit
        self._scanned = 0  # bytes of _buf already scanned
        self._started = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._end: Optional[int] = None  # index just past the object's closing brace

    def feed(self, chunk: bytes) -> Optional[Dict[str, Any]]:
        self._buf += chunk
        if len(self._buf) > self._limit:
            raise MalformedRequest(f"request longer than {self._limit} bytes")
        if self._end is None:
            self._scan()
        if self._end is None:
            return None
        return self._decode(bytes(self._buf[: self._end]))

    def _scan(self) -> None:
        buf, at = self._buf, self._scanned
        if not self._started:
            while at < len(buf) and buf[at] in b" \t\r\n":
                at += 1
            if at == len(buf):
                self._scanned = at
                return
            if buf[at] != ord("{"):
                raise MalformedRequest("request is not a JSON object")
            self._started, self._depth, at = True, 1, at + 1
        while at < len(buf):
            if self._escape:
                self._escape, at = False, at + 1
                continue
            found = (self._INSIDE if self._in_string else self._OUTSIDE).search(buf, at)
            if found is None:
                at = len(buf)
                break
            char, at = buf[found.start()], found.start() + 1
            if self._in_string:
                if char == ord("\\"):
                    self._escape = True
                else:
                    self._in_string = False
            elif char == ord('"'):
                self._in_string = True
            elif char in b"{[":
                self._depth += 1
                if self._depth > self.MAX_DEPTH:
                    raise MalformedRequest("request nests too deeply")
            else:
                self._depth -= 1
                if self._depth == 0:
                    self._end = at
                    break
        self._scanned = at

    @classmethod
    def _decode(cls, raw: bytes) -> Dict[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRequest("request is not UTF-8") from None
        try:
            value, _end = cls._decoder.raw_decode(text.lstrip())
        except json.JSONDecodeError as exc:
            raise MalformedRequest(f"request is not JSON: {exc.msg}") from None
        except RecursionError:
            raise MalformedRequest("request nests too deeply") from None
        if not isinstance(value, dict):
            raise MalformedRequest("request is not a JSON object")
        return value

    def finish(self) -> Dict[str, Any]:
        """At end of stream: the object, or MalformedRequest (truncated)."""
        value = self.feed(b"")
        if value is None:
            raise MalformedRequest("request ended before its JSON object did")
        return value


def error_reply(message: str, code: Optional[str] = None) -> bytes:
    """``{"Error": "<message>\\nERR_NGROK_<n>"}``: the SDK splits the code off its own line."""
    text = message if not code else f"{message}\n{code}"
    return json.dumps({"Error": text}).encode("utf-8")


def reply(body: Dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def srv_info_reply(region: str) -> bytes:
    """SrvInfo's answer (ngrok-go ``SrvInfoResp``): the region, as Auth's reply names it."""
    return reply({"Region": region})


def stream_type(typ: int) -> bytes:
    return U32.pack(typ)


def proxy_header(
    *,
    tunnel_id: str,
    client_addr: str,
    proto: str,
    edge_type: str = "",
    passthrough_tls: bool = False,
) -> bytes:
    """Type 3, then an i64 little-endian length, then the JSON header."""
    header = json.dumps(
        {
            "Id": tunnel_id,
            "ClientAddr": client_addr,
            "Proto": proto,
            "EdgeType": edge_type or EDGE_TYPE.get(proto, "0"),
            "PassthroughTLS": passthrough_tls,
        }
    ).encode("utf-8")
    return U32.pack(PROXY) + I64LE.pack(len(header)) + header


def choose_version(offered: Any) -> Optional[str]:
    if not isinstance(offered, list):
        return None
    for version in offered:
        if version in SUPPORTED_VERSIONS:
            return version
    return None


def text(value: Any, default: str = "") -> str:
    """A string field of a request (absent or null: the default; another type: malformed)."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise MalformedRequest("a string field holds another type")
    return value


def obj(value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedRequest("an object field holds another type")
    return value
