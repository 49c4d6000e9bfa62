"""Which connections edge/http_io.py's ``splice`` hands to the compiled core, and how: the
rule (a stream of a session the core runs, a socket carrying plaintext, nothing left to
write; TLS Python terminated stays Python's) and the hand-over (what the reader held goes to
the agent first, after ``to_stream``). The core's side: edge_core/tests/splice.rs and
tests/edge/test_core_splice.py."""

import asyncio
import socket

from edge import http_io
from edge.connections import CoreTlsObject, CoreTlsWriter
from edge.session import MuxStream


class _Session:
    """What a MuxStream reads of its session; the splicer records its call."""

    def __init__(self, splicer=True):
        self._conn = object()
        self.calls = []
        self.released = []
        self._splicer = self._splice if splicer else None

    def _release(self, stream):
        self.released.append(stream.id)

    async def _splice(self, sock, conn, sid, to_stream, to_client, websocket):
        self.calls.append((sock.family, sid, to_stream, to_client, websocket))
        self.sock = sock  # the core's from now on (here: the test's)
        return (7, 9)


async def _pair():
    """An asyncio client connection over a real socket, and the other end."""
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    return reader, writer, theirs


def test_a_plain_socket_and_a_core_sessions_stream_are_carriable_and_nothing_else():
    async def run():
        reader, writer, theirs = await _pair()
        stream = MuxStream(_Session(), 2, local=True)
        assert http_io.carriable(writer, stream)
        assert not http_io.carriable(writer, object())  # not a core session's stream
        assert not http_io.carriable(writer, MuxStream(_Session(splicer=False), 2, local=True))
        finished = MuxStream(_Session(), 4, local=True)
        finished._finished = True
        assert not http_io.carriable(writer, finished)

        class PythonTls:
            """A writer of TLS Python terminated: its socket carries ciphertext."""

            transport = writer.transport

            def get_extra_info(self, name, default=None):
                if name == "ssl_object":
                    return object()  # an ssl.SSLObject's stand-in: not the core's
                return writer.get_extra_info(name, default)

        assert not http_io.carriable(PythonTls(), stream)
        core_tls = CoreTlsWriter(
            writer,
            ("1.2.3.4", 5),
            ("127.0.0.1", 443),
            CoreTlsObject("a", "TLSv1.3", "X", None),
            None,
        )
        assert http_io.carriable(core_tls, stream)  # the core's TLS: the socket is plaintext
        writer.transport.pause_reading()
        writer.write(b"x" * (4 << 20))  # more than the socket takes at once: some left
        assert writer.transport.get_write_buffer_size() > 0
        assert not http_io.carriable(writer, stream)
        writer.transport.abort()
        theirs.close()

    asyncio.run(run())


def test_the_hand_over_sends_what_the_reader_held_after_to_stream_and_returns_the_counts():
    async def run():
        reader, writer, theirs = await _pair()
        theirs.sendall(b"early bytes")
        await asyncio.sleep(0.05)  # read by asyncio before the decision
        session = _Session()
        stream = MuxStream(session, 6, local=True)
        carried = await http_io.splice(
            reader, writer, stream, to_stream=b"head|", to_client=b"101|"
        )
        assert carried == (7, 9)
        assert session.calls == [(socket.AF_UNIX, 6, b"head|early bytes", b"101|", False)]
        assert session.released == [6] and stream.finished  # Python is done with it
        assert writer.transport.is_closing()  # the transport let go ...
        await asyncio.sleep(0.05)  # ... and its descriptor closed
        theirs.sendall(b"still open")  # the connection is not: the socket handed over has it
        session.sock.settimeout(5)
        assert session.sock.recv(100) == b"still open"
        session.sock.close()
        theirs.close()

    asyncio.run(run())
