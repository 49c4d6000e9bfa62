"""edge/public.py sends a request's head and the part of its body already read in one write
to the agent's stream (one muxado DATA frame): the official SDKs write each frame they get
to their upstream as it comes, without TCP_NODELAY, so a body in a frame of its own waited
for the upstream's delayed ACK of the head, ~40 ms per request (docs/BENCHMARKS.md, "The 40
ms stall"). A body still to come follows in later writes, as it arrives."""

import asyncio

from edge import http1
from edge.public import HttpFront, _Leg

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class RecordingStream:
    """A proxy stream: records each write; answers RESPONSE once the request is whole."""

    def __init__(self, tail: bytes):
        self.writes = []
        self.tail = tail  # the request's last bytes: the answer comes after them
        self.answered = False
        self.ready = asyncio.Event()

    @property
    def buffered(self):
        return 0

    async def write(self, data):
        self.writes.append(bytes(data))
        if b"".join(self.writes).endswith(self.tail):
            self.ready.set()

    async def read(self, n):
        await self.ready.wait()
        if self.answered:
            await asyncio.sleep(3600)
        self.answered = True
        return RESPONSE

    def finish(self):
        pass


def _exchange(first: bytes, rest: bytes = b""):
    async def main():
        got = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):  # the client's socket: the edge's answer lands here
            got.set_result(await reader.read(65536))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        client = http1.Connection(http1.SERVER)
        client.receive_data(first)
        request = client.next_event()
        reader = asyncio.StreamReader()
        if rest:
            asyncio.get_running_loop().call_later(0.2, reader.feed_data, rest)
        stream = RecordingStream(tail=(first + rest)[-8:])
        leg = _Leg(None, stream)
        front = HttpFront.__new__(HttpFront)
        front.scheme = "http"
        outcome = await front._exchange(
            client, reader, writer, leg, request, "1.2.3.4", "x", None, []
        )
        answer = await asyncio.wait_for(got, 5)
        writer.close()
        server.close()
        return outcome, stream.writes, answer

    return asyncio.run(main())


def test_a_small_post_goes_to_the_agent_in_one_write():
    body = b"a" * 1024
    outcome, writes, answer = _exchange(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n" + body
    )
    assert outcome == "next"
    assert len(writes) == 1, [len(w) for w in writes]
    assert writes[0].startswith(b"POST /upload HTTP/1.1\r\n") and writes[0].endswith(body)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok")


def test_a_body_still_to_come_follows_the_head_and_what_was_read():
    outcome, writes, answer = _exchange(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n" + b"a" * 10,
        rest=b"b" * 10,
    )
    assert outcome == "next"
    assert len(writes) == 2, [len(w) for w in writes]
    assert writes[0].endswith(b"\r\n\r\n" + b"a" * 10) and writes[1] == b"b" * 10
    assert answer.endswith(b"ok")


def test_a_get_goes_in_one_write():
    outcome, writes, _ = _exchange(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert outcome == "next" and len(writes) == 1
    assert b"x-forwarded-for: 1.2.3.4\r\n" in writes[0]


# ---- a request body that may not fit the SDK's one write: a proxy stream of its own -------


def _request(*headers):
    return http1.Request(method=b"POST", target=b"/", headers=[(b"host", b"x"), *headers])


def test_a_body_past_half_the_sdks_copy_buffer_takes_a_fresh_stream():
    from edge.public import FRESH_STREAM_BODY, needs_fresh_stream

    leg = _Leg(None, RecordingStream(tail=b""))
    assert FRESH_STREAM_BODY == 4096
    assert not needs_fresh_stream(leg, _request())  # no body
    assert not needs_fresh_stream(leg, _request((b"content-length", b"4096")))
    assert needs_fresh_stream(leg, _request((b"content-length", b"4097")))
    assert needs_fresh_stream(leg, _request((b"content-length", b"1048576")))
    assert needs_fresh_stream(leg, _request((b"transfer-encoding", b"chunked")))  # unknown size
    assert not needs_fresh_stream(object(), _request((b"content-length", b"1048576")))  # h2 leg
    big = _request((b"content-length", b"1048576"))
    assert not needs_fresh_stream(leg, big, 0)  # EDGE_FRESH_STREAM_BODY=0: off
    assert needs_fresh_stream(leg, big, 65536) and not needs_fresh_stream(leg, big, 1 << 20)


def test_edge_fresh_stream_body_is_read_from_the_environment():
    from edge import config

    assert config.EdgeSettings.fresh_stream_body == 4096
    base = {"BASE_DOMAIN": "tunnels.localhost"}
    assert config.load({**base, "EDGE_FRESH_STREAM_BODY": "0"}).fresh_stream_body == 0
    assert config.load({**base, "EDGE_FRESH_STREAM_BODY": "65536"}).fresh_stream_body == 65536
    for bad in ("-1", "4k", "1.5"):
        try:
            config.load({**base, "EDGE_FRESH_STREAM_BODY": bad})
        except ValueError as exc:
            assert "EDGE_FRESH_STREAM_BODY" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
