"""edge/http1.py's shortcuts (docs/BENCHMARKS.md, "CPU per request"), each against the path it
skips: whatever changes between reading and writing, a shortcut writes what the full path
writes, byte for byte, and leaves the connection in the same state.

- A response head read from the agent (or built checked, as a traffic policy's) keeps what its
  headers declared (framing, ``Connection: close``); writing it back uses that only while its
  ``headers`` are unchanged: changed in place or replaced, they are read again.
- The agent's side keeps its llhttp parser from one response to the next when llhttp ended the
  response ready for another; otherwise (a response said close, another one had begun) a new
  parser reads the next, as before.
"""

import pytest

from edge import http1
from edge.http1 import (
    CLIENT,
    SERVER,
    Data,
    EndOfMessage,
    LocalProtocolError,
    RemoteProtocolError,
    Request,
    Response,
)
from tests.unit.test_edge_http1 import events

NGINX = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: nginx/1.22.1\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 5\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
    b"hello"
)


def parsed_response(raw=NGINX, method=b"GET"):
    """The agent's response as the edge reads it (a CLIENT connection's Response event)."""
    leg = http1.Connection(CLIENT)
    leg.send(Request(method=method, target=b"/", headers=[(b"host", b"x")]))
    leg.send(EndOfMessage())
    return events(leg, raw)[0]


def written(response, body=b"hello", request=b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
    """What a client's connection writes for ``response`` and ``body`` (or the error it
    raises), and its states after."""
    client = http1.Connection(SERVER)
    events(client, request)
    out = []
    try:
        out.append(client.send(response))
        if body:
            out.append(client.send(Data(body)))
        out.append(client.send(EndOfMessage()))
    except LocalProtocolError as exc:
        out.append(f"LocalProtocolError: {exc}")
    return out, client.our_state, client.their_state


def unshortcut(response):
    """The same head as an event the edge did not parse (nothing kept from reading)."""
    return Response(
        status_code=response.status_code,
        reason=response.reason,
        headers=list(response.headers),
        raw_headers=list(response.raw_headers),
    )


def remove(name):
    def change(headers):
        headers[:] = [(n, v) for n, v in headers if n != name]

    return change


def append(name, value):
    def change(headers):
        headers.append((name, value))

    return change


def replace(name, value):
    def change(headers):
        for i, (n, _) in enumerate(headers):
            if n == name:
                headers[i] = (name, value)

    return change


CHANGES = {
    "unchanged": lambda headers: None,
    "Connection: close appended": append(b"connection", b"close"),
    "Connection replaced by close": replace(b"connection", b"close"),
    "Content-Length removed": remove(b"content-length"),
    "Content-Length made smaller": replace(b"content-length", b"3"),
    "Content-Length made larger": replace(b"content-length", b"9"),
    "Content-Length made invalid": replace(b"content-length", b"five"),
    "a second Content-Length": append(b"content-length", b"6"),
    "chunked instead of a length": lambda headers: (
        remove(b"content-length")(headers),
        headers.append((b"transfer-encoding", b"chunked")),
    ),
    "chunked beside the length": append(b"transfer-encoding", b"chunked"),
    "Connection removed": remove(b"connection"),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=list(CHANGES))
@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_parsed_response_changed_after_reading_is_written_as_a_new_one_would_be(change, how):
    response = parsed_response()
    if how == "in place":
        change(response.headers)
    else:
        headers = list(response.headers)
        change(headers)
        response.headers = headers
    assert written(response) == written(unshortcut(response))


@pytest.mark.parametrize("change", CHANGES.values(), ids=list(CHANGES))
def test_a_checked_response_changed_after_it_was_built_is_written_as_a_new_one_would_be(change):
    response = Response(
        status_code=200,
        headers=[("Content-Length", "5"), ("Connection", "keep-alive"), ("X-Policy", "1")],
        checked=True,
    )
    change(response.headers)
    assert written(response) == written(unshortcut(response))


@pytest.mark.parametrize(
    "raw",
    [
        NGINX,
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 005\r\nX-A: 1\r\n\r\nhello",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    ],
)
@pytest.mark.parametrize(
    "request_head",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",
        b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ],
)
def test_an_unchanged_parsed_response_is_written_as_a_new_one_would_be(raw, request_head):
    response = parsed_response(raw)
    body = b"" if response.status_code == 204 or request_head.startswith(b"HEAD") else b"hello"
    assert written(response, body, request_head) == written(
        unshortcut(response), body, request_head
    )


# ---- the agent's side keeps its parser between responses -----------------------------------
EXCHANGES = [
    (b"GET", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    (
        b"GET",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
    ),
    (b"GET", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nk"),
    (b"HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    (b"HEAD", b"HTTP/1.1 200 OK\r\nETag: x\r\n\r\n"),
    (b"GET", b"HTTP/1.1 204 No Content\r\n\r\n"),
    (b"GET", b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n"),
    (b"GET", b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"),
    (b"GET", b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!"),
]


def exchange(leg, method, raw, split):
    leg.send(Request(method=method, target=b"/", headers=[(b"host", b"x")]))
    leg.send(EndOfMessage())
    chunks = [raw[i : i + split] for i in range(0, len(raw), split)]
    return [fields(e) for e in events(leg, *chunks)]


def fields(event):
    """An event's class and public fields (all of them: its class's and its bases')."""
    names = [
        name
        for cls in type(event).__mro__
        for name in getattr(cls, "__slots__", ())
        if not name.startswith("_")
    ]
    return type(event).__name__, {name: getattr(event, name) for name in names}


@pytest.mark.parametrize("split", [1, 7, 1000])
def test_responses_read_on_one_kept_alive_connection_are_read_as_on_fresh_ones(split):
    leg = http1.Connection(CLIENT)
    for method, raw in EXCHANGES * 2:
        fresh = http1.Connection(CLIENT)
        assert exchange(leg, method, raw, split) == exchange(fresh, method, raw, split)
        assert (leg.our_state, leg.their_state, leg.clean) == (
            fresh.our_state,
            fresh.their_state,
            fresh.clean,
        )
        leg.start_next_cycle()


def test_a_response_begun_behind_the_last_one_is_not_read_on_across_cycles():
    """Bytes of a next response that came with the last one (the edge does not reuse such a
    connection: ``clean`` is False) go to a new parser after ``start_next_cycle``, as they did
    before the parser was kept: its head's first bytes are not read as its start."""
    leg = http1.Connection(CLIENT)
    leg.send(Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
    leg.send(EndOfMessage())
    evs = events(leg, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nCont")
    assert isinstance(evs[-1], EndOfMessage) and not leg.clean
    leg.start_next_cycle()
    leg.send(Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
    leg.send(EndOfMessage())
    with pytest.raises(RemoteProtocolError):
        events(leg, b"ent-Length: 2\r\n\r\nok")


def test_after_a_response_that_says_close_the_connection_is_not_reused():
    leg = http1.Connection(CLIENT)
    leg.send(Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
    leg.send(EndOfMessage())
    events(leg, b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    with pytest.raises(LocalProtocolError):
        leg.start_next_cycle()


def test_events_compare_and_print_every_public_field_of_their_class_and_bases():
    ok, missing = http1.Response(status_code=200), http1.Response(status_code=404)
    assert ok != missing  # Response adds no slot of its own: its base's count
    assert ok == http1.Response(status_code=200)
    assert http1.InformationalResponse(status_code=100) != http1.InformationalResponse(
        status_code=103
    )
    assert "status_code=404" in repr(missing)
    assert http1.Request(method="GET", target="/", headers=[("Host", "a")]) != http1.Request(
        method="GET", target="/b", headers=[("Host", "a")]
    )
