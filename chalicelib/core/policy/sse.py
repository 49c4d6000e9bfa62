"""Server-sent events (``text/event-stream``) as the ``on_event_stream_message`` phase sees
them: a stream cut into messages, one message's fields, and the message written back.

The format is the WHATWG one: lines end with CRLF, LF or CR; a blank line ends a message;
``name: value`` (one space after the colon dropped), ``name`` alone (an empty value), a line
starting with ``:`` a comment. A message no action changed is passed on as the bytes that came;
a changed one is written with LF line ends, its other lines (event, id, comments) in their
places, the changed ``data`` value as one ``data:`` line per line of it, at the place of the
first. The stream is never held whole: :class:`Splitter` keeps at most one incomplete message
of at most MAX_EVENT bytes (docs/SECURITY.md).
"""

import re
from typing import List, Optional, Tuple

MAX_EVENT = 256 * 1024  # bytes of one message the edge holds while it waits for its end
# bytes the messages one read of the stream completes may come to, rewritten (each message is
# bounded by MAX_EVENT, but a read of many small ones under a rule that grows each would come
# back whole): past it the response is cut, as for a message too long
MAX_FED = 4 * 1024 * 1024
MEDIA_TYPE = "text/event-stream"
_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_LINE = re.compile(rb"\r\n|\r|\n")


class TooLarge(Exception):
    """A message longer than MAX_EVENT bytes (its blank line counted), whole or not yet."""


class Splitter:
    """Bytes of a stream in, whole messages (each with its blank line) out."""

    def __init__(self, limit: int = MAX_EVENT) -> None:
        self.limit = limit
        self.rest = b""

    def feed(self, data: bytes) -> List[bytes]:
        buffer = self.rest + data
        out = []
        start = 0
        while True:
            # a CR at the very end may be the first half of a CRLF: wait for the next byte
            found = _END.search(buffer, start)
            if found is None or (found.end() == len(buffer) and buffer.endswith(b"\r")):
                break
            if found.end() - start > self.limit:
                raise TooLarge(f"a server-sent event longer than {self.limit} bytes")
            out.append(buffer[start : found.end()])
            start = found.end()
        self.rest = buffer[start:]
        if len(self.rest) > self.limit:
            raise TooLarge(f"a server-sent event longer than {self.limit} bytes")
        return out

    def finish(self) -> bytes:
        """What was left without a blank line at the stream's end (passed on as it is:
        clients drop an unfinished message)."""
        rest, self.rest = self.rest, b""
        return rest


class Message:
    """One message: its lines as (name, value) or (None, comment line) pairs."""

    __slots__ = ("raw", "lines", "changed")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.changed = False
        self.lines: List[Tuple[Optional[bytes], bytes]] = []
        for line in _LINE.split(raw):
            if not line:
                continue
            if line.startswith(b":"):
                self.lines.append((None, line))
                continue
            name, colon, value = line.partition(b":")
            if colon and value.startswith(b" "):
                value = value[1:]
            self.lines.append((name, value))

    def field(self, name: bytes) -> Optional[bytes]:
        """A field's value (``data``: its lines joined with LF), None when absent."""
        values = [v for n, v in self.lines if n == name]
        if not values:
            return None
        return b"\n".join(values) if name == b"data" else values[-1]

    def set_field(self, name: bytes, value: bytes) -> None:
        if value == self.field(name):
            return
        self.changed = True
        new: List[Tuple[Optional[bytes], bytes]] = []
        placed = False
        for n, v in self.lines:
            if n != name:
                new.append((n, v))
            elif not placed:
                placed = True
                if name == b"data":
                    new.extend((name, part) for part in value.split(b"\n"))
                else:
                    new.append((name, value))
            elif name != b"data":
                new.append((n, value))
        self.lines = new

    def to_bytes(self) -> bytes:
        if not self.changed:
            return self.raw
        out = []
        for name, value in self.lines:
            out.append(value if name is None else name + b": " + value)
        return b"\n".join(out) + b"\n\n"
