"""The agent protocol over muxado streams, sans-IO where it can be: stream types, RPC bodies,
error replies and the proxy header (ngrok-rust ``ngrok/src/internals/proto.rs``).

RPC requests (Auth, Bind, Unbind, StartTunnelWithLabel) are one JSON object the agent writes
without half-closing; :class:`JsonReader` recognises the end of that object incrementally and
tells a truncated document (wait for more) from a malformed one (end the session).
"""
import json
import struct
from typing import Any, Dict, Optional

AUTH, BIND, UNBIND, PROXY, RESTART, STOP, UPDATE, BIND_LABELED, STOP_TUNNEL = 0, 1, 2, 3, 4, 5, 6, 7, 9
HEARTBEAT = 0xFFFFFFFF
AGENT_STREAM_TYPES = {AUTH, BIND, UNBIND, BIND_LABELED, HEARTBEAT}

SUPPORTED_VERSIONS = ("3", "2")
MAX_RPC_BYTES = 256 * 1024  # a Bind carries a traffic policy document: generous, bounded

EDGE_TYPE = {"tcp": "1", "tls": "2", "https": "3", "http": "3"}

U32 = struct.Struct(">I")
I64LE = struct.Struct("<q")


class MalformedRequest(ValueError):
    """The agent sent something that is not the protocol: the session ends with GOAWAY."""


class JsonReader:
    """Feed bytes of one JSON object; ``feed`` returns it once complete, else None."""

    _decoder = json.JSONDecoder()

    def __init__(self, limit: int = MAX_RPC_BYTES):
        self._buf = bytearray()
        self._limit = limit

    def feed(self, chunk: bytes) -> Optional[Dict[str, Any]]:
        self._buf += chunk
        if len(self._buf) > self._limit:
            raise MalformedRequest(f"request longer than {self._limit} bytes")
        try:
            text = self._buf.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" and exc.end == len(self._buf):
                return None  # a character cut at the chunk boundary
            raise MalformedRequest("request is not UTF-8") from None
        stripped = text.lstrip()
        if not stripped:
            return None
        if stripped[0] != "{":
            raise MalformedRequest("request is not a JSON object")
        try:
            value, _end = self._decoder.raw_decode(stripped)
        except json.JSONDecodeError as exc:
            if _incomplete(exc, stripped):
                return None
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


def _incomplete(exc: json.JSONDecodeError, text: str) -> bool:
    """True when the document may still be completed by more bytes."""
    if exc.msg.startswith("Unterminated string"):
        return True
    return exc.pos >= len(text.rstrip())


def error_reply(message: str, code: Optional[str] = None) -> bytes:
    """``{"Error": "<message>\\nERR_NGROK_<n>"}``: the SDK splits the code off its own line."""
    text = message if not code else f"{message}\n{code}"
    return json.dumps({"Error": text}).encode("utf-8")


def reply(body: Dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def stream_type(typ: int) -> bytes:
    return U32.pack(typ)


def proxy_header(*, tunnel_id: str, client_addr: str, proto: str, edge_type: str = "",
                 passthrough_tls: bool = False) -> bytes:
    """Type 3, then an i64 little-endian length, then the JSON header."""
    header = json.dumps({"Id": tunnel_id, "ClientAddr": client_addr, "Proto": proto,
                         "EdgeType": edge_type or EDGE_TYPE.get(proto, "0"),
                         "PassthroughTLS": passthrough_tls}).encode("utf-8")
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
