"""compress-response is carried by the compiled core (docs/DATA_PLANE.md, "Decided routes"):
Python's response phase negotiates the algorithm and rewrites the head, the core compresses
the body as it comes (edge_core/src/encode.rs) and chunks it. Through the official Python
SDK as a process; each test says, from the edge's metrics, that the core served every
request and handed none to Python."""

import gzip
import json
import socket
import zlib

import pytest

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, settled, wait

POLICY = {"on_http_response": [{"actions": [{"type": "compress-response"}]}]}
TEXT = b"the quick brown fox jumps over the lazy dog " * 1500  # 66,000 bytes


def _counts(edge):
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def _settled(edge):
    return settled(lambda: _counts(edge))


def _exchange(edge, host: str, request: bytes, until=None):
    """``request`` (its Host added) on a connection of its own; (head, the chunked body's
    pieces as sent, whether the last chunk came) once ``until(data so far)`` says so, or the
    body ended, or the connection closed."""
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=15) as conn:
        line, rest = request.split(b"\r\n", 1)
        conn.sendall(line + b"\r\nHost: " + host.encode() + b"\r\n" + rest)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = conn.recv(65536)
            assert chunk, got
            got += chunk
        head, _, raw = got.partition(b"\r\n\r\n")
        data, ended = b"", False
        while True:
            data, ended, raw = _dechunk(data, raw)
            if ended or (until is not None and until(data)):
                return head.decode("latin-1").lower(), data, ended
            chunk = conn.recv(65536)
            if not chunk:
                return head.decode("latin-1").lower(), data, False
            raw += chunk


def _dechunk(data: bytes, raw: bytes):
    """The whole chunks at the start of ``raw`` appended to ``data``: (data, whether the
    last chunk came, what is left of ``raw``)."""
    while b"\r\n" in raw:
        size_line, _, after = raw.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert after == b"\r\n", after  # no trailers
            return data, True, b""
        if len(after) < size + 2:
            break
        data += after[:size]
        raw = after[size + 2 :]
    return data, False, raw


@pytest.fixture(scope="module")
def host(edge, api):
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(POLICY)]}}]
    agent = SdkAgent(edge, credential(api.new_account())["token"], binds)
    name = host_of(bound(agent.start())[0]["url"])

    def core_serves():
        before = _settled(edge)[0]
        assert edge.http("GET", name, "/echo").status_code == 200
        return _settled(edge)[0] > before

    assert wait(core_serves)  # the route is pushed a moment after the bind
    yield name
    agent.stop()


@pytest.mark.parametrize(
    "accepts, name, decode",
    [
        ("gzip", "gzip", gzip.decompress),
        ("deflate", "deflate", zlib.decompress),  # HTTP's deflate: the zlib format
        ("br;q=1, gzip;q=0.5", "gzip", gzip.decompress),  # (br is not compressed with here)
    ],
)
def test_a_body_is_compressed_by_the_core_in_the_algorithm_negotiated(
    edge, host, accepts, name, decode
):
    served, handed = _settled(edge)
    for query in ("", "?chunks=7"):  # the agent's body by Content-Length, then chunked
        request = (
            f"POST /reflect{query} HTTP/1.1\r\nAccept-Encoding: {accepts}\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {len(TEXT)}\r\n\r\n"
        ).encode() + TEXT
        head, body, ended = _exchange(edge, host, request)
        assert head.startswith("http/1.1 200"), head
        assert ended and "transfer-encoding: chunked" in head and "content-length" not in head
        assert f"content-encoding: {name}" in head
        assert "vary: accept-encoding" in head
        assert decode(body) == TEXT and len(body) < len(TEXT) // 20
    assert (_settled(edge)[0] - served, _settled(edge)[1] - handed) == (2, 0)


def test_nothing_negotiated_or_no_body_goes_as_the_agent_sent_it(edge, host):
    served, handed = _settled(edge)
    plain = f"POST /reflect HTTP/1.1\r\nContent-Length: {len(TEXT)}\r\n\r\n".encode() + TEXT
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=15) as conn:
        line, rest = plain.split(b"\r\n", 1)
        conn.sendall(line + b"\r\nHost: " + host.encode() + b"\r\n" + rest)
        got = b""
        while len(got) < len(TEXT) or b"\r\n\r\n" not in got:
            chunk = conn.recv(65536)
            assert chunk
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert f"content-length: {len(TEXT)}".encode() in head.lower()
    assert b"content-encoding" not in head.lower() and body == TEXT
    # a HEAD's answer has no body to compress
    head_only = edge.http("HEAD", host, "/echo", headers={"Accept-Encoding": "gzip"})
    assert head_only.status_code == 200 and head_only.content == b""
    assert (_settled(edge)[0] - served, _settled(edge)[1] - handed) == (2, 0)


def test_a_streamed_body_reaches_the_client_compressed_as_it_is_sent(edge, host):
    """Server-sent events held open 3 s after their messages: each message the agent sent is
    readable from what the client got while the stream is still open (a sync flush per piece
    read), and the whole decodes to what the agent sent."""

    def every_message(data: bytes) -> bool:
        return b"#2" in zlib.decompressobj(31).decompress(data)

    request = b"GET /events?n=3&hold=3 HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
    head, body, ended = _exchange(edge, host, request, until=every_message)
    assert "content-type: text/event-stream" in head and "content-encoding: gzip" in head
    assert not ended  # every message read while the agent still held its stream open
    text = zlib.decompressobj(31).decompress(body)
    assert text.startswith(b"retry: 10\n\n") and text.count(b"data: card 1234-5678") == 3


def test_an_agent_that_dies_mid_body_ends_the_compressed_answer_unfinished(edge, host):
    """/cut: 1,000 of the 1 MiB its head announced, then the upstream closes: the client gets
    what was compressed, then the connection's end, never a last chunk (a complete-looking
    answer would pass a truncated body for a whole one)."""
    request = b"GET /cut HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
    head, body, ended = _exchange(edge, host, request)
    assert head.startswith("http/1.1 200") and "content-encoding: gzip" in head
    assert not ended
    assert zlib.decompressobj(31).decompress(body) == b"c" * 1000
