"""edge/public.py relays a response no faster than the client reads it: a client that stops
reading stops the relay (and so the stream's credit and the agent), over a real socket."""
import asyncio

from edge import http1
from edge.public import HttpFront

CHUNK = 16 * 1024
LIMIT = 64 * 1024 * 1024   # what the agent would send if nothing held it back


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
            before_wait()   # as the real leg does before waiting for the agent's bytes
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

class _Traffic:
    def __init__(self, headers):
        from chalicelib.policy import Request
        from edge.public import _Traffic as Real
        self.req = Request(method="GET", url="http://x/", headers=headers)
        self.upstream_request = Real.upstream_request.__get__(self)


def test_a_header_value_beyond_latin1_goes_as_utf8():
    request = _Traffic([("Host", "x"), ("X-Added", "5 €")]).upstream_request("1.2.3.4", "http")
    assert (b"x-added", "5 €".encode("utf-8")) in list(request.headers)


def test_a_request_the_policy_made_invalid_is_answered_with_err_ngrok_2300():
    async def main():
        got = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            got.set_result(await reader.read(65536))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1",
                                                  server.sockets[0].getsockname()[1])
        client = http1.Connection(http1.SERVER)
        client.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        request = client.next_event()
        client.next_event()
        front = HttpFront.__new__(HttpFront)
        front.scheme = "http"
        traffic = _Traffic([("X-Other", "1")])   # the policy removed Host: HTTP/1.1 needs one
        outcome = await front._exchange(client, None, writer, None, request, "1.2.3.4", "x",
                                        traffic, [])
        answer = await asyncio.wait_for(got, 5)
        writer.close()
        server.close()
        return outcome, answer

    outcome, answer = asyncio.run(main())
    assert outcome == "close"
    assert answer.startswith(b"HTTP/1.1 502 ")
    assert b'"error_code": "ERR_NGROK_2300"' in answer
