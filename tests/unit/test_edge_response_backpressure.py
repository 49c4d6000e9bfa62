"""edge/public.py relays a response no faster than the client reads it: a client that stops
reading stops the relay (and so the stream's credit and the agent), over a real socket."""

import asyncio

import pytest

from edge import http1
from edge.public import HttpFront

CHUNK = 16 * 1024
LIMIT = 64 * 1024 * 1024  # what the agent would send if nothing held it back


class EndlessLeg:
    """An agent's side that always has more body ready (a fast upstream)."""

    def __init__(self):
        self.sent = 0
        self.started = False

    async def next_event(self, before_wait=None):
        if not self.started:
            self.started = True
            return http1.Response(status_code=200, headers=[("transfer-encoding", "chunked")])
        if before_wait is not None:
            before_wait()  # as the real leg does before waiting for the agent's bytes
        await asyncio.sleep(0)
        if self.sent >= LIMIT:
            return http1.EndOfMessage()
        self.sent += CHUNK
        return http1.Data(data=b"x" * CHUNK)


def test_a_client_that_does_not_read_stops_the_relay():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # never reads
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        client = http1.Connection(http1.SERVER)
        client.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert isinstance(client.next_event(), http1.Request)
        assert isinstance(client.next_event(), http1.EndOfMessage)
        leg = EndlessLeg()
        front = HttpFront.__new__(HttpFront)
        front.scheme = "http"
        relay = asyncio.ensure_future(front._response(client, writer, leg, None, "x", None))
        await asyncio.sleep(2)
        finished = relay.done()
        relay.cancel()
        writer.transport.abort()
        server.close()
        return leg.sent, finished

    sent, finished = asyncio.run(main())
    assert not finished
    # the socket buffers hold a few MB at most; without backpressure all 64 MB go through
    assert sent < LIMIT // 4, f"{sent} bytes taken from the agent by a client reading none"


# ---- a request the traffic policy made invalid ------------------------------------------


class _NoPolicy:
    def new_state(self):
        return None


def _Traffic(headers):
    """A request ``GET / Host: x`` after a policy left its headers as ``headers``."""
    from edge.http_policy import Traffic as Real

    traffic = Real(
        _NoPolicy(),
        None,
        http1.Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]),
        "http",
        "x",
    )
    traffic.req.headers = list(headers)
    return traffic


def test_a_header_value_beyond_latin1_goes_as_utf8():
    request = _Traffic([("host", "x"), ("X-Added", "5 €")]).upstream_request("1.2.3.4", "http")
    assert (b"x-added", "5 €".encode("utf-8")) in list(request.headers)
    request = _Traffic([("X-Set", "5 €"), ("host", "x")]).upstream_request("1.2.3.4", "http")
    assert (b"x-set", "5 €".encode("utf-8")) in list(request.headers)


@pytest.mark.parametrize(
    "after, valid",
    [
        ([("host", "x")], True),  # unchanged
        ([("host", "x"), ("x-a", "1")], True),  # appended (the fast path)
        ([("host", "x"), ("x-a", "a\nb")], False),  # appended, invalid value
        ([("host", "x"), ("x a", "1")], False),  # appended, invalid name
        ([("host", "x"), ("Host", "y")], False),  # a second Host appended
        ([("host", "x"), ("content-length", "x")], False),  # framing appended
        ([("x-a", "1")], False),  # Host removed
        ([("x-a", "1"), ("host", "x")], True),  # reordered (the full check)
    ],
)
def test_a_policy_changed_request_is_checked_whichever_way_it_changed(after, valid):
    traffic = _Traffic(after)
    if valid:
        request = traffic.upstream_request("1.2.3.4", "http")
        names = [n for n, _ in request.headers]
        assert names[: len(after)] == [n.lower().encode() for n, _ in after]
        assert names[len(after) :] == [
            b"x-forwarded-for",
            b"x-forwarded-proto",
            b"x-forwarded-host",
        ]
    else:
        with pytest.raises(http1.LocalProtocolError):
            traffic.upstream_request("1.2.3.4", "http")


def test_a_request_the_policy_made_invalid_is_answered_with_err_ngrok_2300():
    async def main():
        got = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            got.set_result(await reader.read(65536))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        client = http1.Connection(http1.SERVER)
        client.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        request = client.next_event()
        client.next_event()
        front = HttpFront.__new__(HttpFront)
        front.scheme = "http"
        traffic = _Traffic([("X-Other", "1")])  # the policy removed Host: HTTP/1.1 needs one
        outcome = await front._exchange(
            client, None, writer, None, request, "1.2.3.4", "x", traffic, []
        )
        answer = await asyncio.wait_for(got, 5)
        writer.close()
        server.close()
        return outcome, answer

    outcome, answer = asyncio.run(main())
    assert outcome == "close"
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert b'"error_code": "ERR_NGROK_2300"' in answer
