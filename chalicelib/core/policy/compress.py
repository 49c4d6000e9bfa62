"""Streaming response compression for compress-response: the edge feeds body chunks."""

import zlib
from typing import Any, List

AVAILABLE = ["gzip", "deflate"]
try:  # optional: br only when the brotli module is installed
    import brotli

    AVAILABLE.append("br")
except ImportError:  # pragma: no cover - depends on the environment
    brotli = None


def negotiate(accept_encoding: str, allowed: List[str]) -> str:
    """The allowed algorithm with the highest q-value in Accept-Encoding ('' for none)."""
    if not accept_encoding.strip():
        return ""
    prefs = {}
    for item in accept_encoding.split(","):
        name, *params = item.strip().split(";")
        q = 1.0
        for param in params:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name.strip():
            prefs[name.strip().lower()] = q
    best, best_q = "", 0.0
    for name in allowed:
        q = prefs.get(name, prefs.get("*", 0.0) if name not in prefs else 0.0)
        if q > best_q:
            best, best_q = name, q
    return best


class Compressor:
    """``feed(chunk) -> bytes`` for each body chunk, then ``finish() -> bytes`` once."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self._z: Any
        if algorithm == "gzip":
            self._z = zlib.compressobj(6, zlib.DEFLATED, 31)
        elif algorithm == "deflate":
            self._z = zlib.compressobj(6, zlib.DEFLATED, 15)
        elif algorithm == "br" and brotli is not None:
            self._z = brotli.Compressor()
        else:
            raise ValueError(f"unsupported algorithm {algorithm}")

    def feed(self, chunk: bytes) -> bytes:
        if self.algorithm == "br":
            return self._z.process(chunk)
        return self._z.compress(chunk) + self._z.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._z.finish() if self.algorithm == "br" else self._z.flush()
