"""edge/http1.py: the HTTP/1.1 framing of the public listeners, rule by rule (its docstring).

Each rule is checked at its boundary; where h11 (which this module replaced) decided the same
thing, the test says what h11 did so a difference is deliberate."""

import pytest

from edge import http1
from edge.http1 import (
    CLIENT,
    DONE,
    MUST_CLOSE,
    NEED_DATA,
    PAUSED,
    SERVER,
    SWITCHED_PROTOCOL,
    ConnectionClosed,
    Data,
    EndOfMessage,
    InformationalResponse,
    LocalProtocolError,
    RemoteProtocolError,
    Request,
    Response,
)


def events(conn, *chunks):
    """Feed ``chunks`` one by one (b"" = the peer closed); every event until NEED_DATA/PAUSED."""
    out = []
    for chunk in chunks:
        conn.receive_data(chunk)
        while True:
            event = conn.next_event()
            if event is NEED_DATA or event is PAUSED:
                break
            out.append(event)
            if isinstance(event, ConnectionClosed):
                break
    return out


def body(evs):
    return b"".join(e.data for e in evs if isinstance(e, Data))


def server():
    return http1.Connection(SERVER, max_incomplete_event_size=1024)


def client(method=b"GET", headers=((b"host", b"x"),)):
    conn = http1.Connection(CLIENT, max_incomplete_event_size=1024)
    conn.send(Request(method=method, target=b"/", headers=list(headers)))
    conn.send(EndOfMessage())
    return conn


def respond(conn, status=200, headers=((b"content-length", b"2"),), data=b"ok"):
    out = conn.send(Response(status_code=status, headers=list(headers)))
    if data:
        out += conn.send(Data(data))
    return out + conn.send(EndOfMessage())


# ---- reading requests (server role) ---------------------------------------------------------


def test_a_request_is_read_with_lower_case_names_and_the_peers_spelling_kept():
    evs = events(server(), b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Thing:  v \r\n\r\n")
    request = evs[0]
    assert (request.method, request.target, request.http_version) == (b"GET", b"/a?b=1", b"1.1")
    assert request.headers == [(b"host", b"x"), (b"x-thing", b"v")]
    assert request.raw_headers == [(b"Host", b"x"), (b"X-Thing", b"v")]
    assert evs[1:] == [EndOfMessage()]


def test_a_request_arriving_byte_by_byte_is_the_same_request():
    raw = b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    evs = events(server(), *[raw[i : i + 1] for i in range(len(raw))])
    assert evs[0].target == b"/p" and evs[0].headers[0] == (b"host", b"x")
    assert body(evs) == b"hello" and evs[-1] == EndOfMessage()


def test_a_chunked_request_body_is_decoded():
    evs = events(
        server(),
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    )
    assert body(evs) == b"abcde" and evs[-1] == EndOfMessage()


def test_an_incomplete_head_of_exactly_the_limit_waits_and_one_byte_more_is_refused():
    base = b"GET / HTTP/1.1\r\nHost: x\r\nX: "
    conn = server()
    assert events(conn, base + b"a" * (1024 - len(base))) == []  # 1024 bytes: waits for more
    conn = server()
    with pytest.raises(RemoteProtocolError, match="larger than"):  # 1025 bytes, no blank line
        events(conn, base + b"a" * (1025 - len(base)))


@pytest.mark.parametrize(
    "make, role",
    [
        (lambda pad: b"GET /p HTTP/1.1\r\nHost: x\r\nX: " + b"a" * pad + b"\r\n\r\n", SERVER),
        (
            lambda pad: b"HTTP/1.1 200 OK\r\nX: " + b"a" * pad + b"\r\nContent-Length: 0\r\n\r\n",
            CLIENT,
        ),
    ],
)
def test_a_complete_head_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(make, role):
    pad = 1024 - len(make(0))
    assert len(make(pad)) == 1024
    conn = server() if role == SERVER else client()
    assert events(conn, make(pad))[-1] == EndOfMessage()
    conn = server() if role == SERVER else client()
    with pytest.raises(RemoteProtocolError, match="larger than"):
        events(conn, make(pad + 1))


@pytest.mark.parametrize(
    "raw",
    [
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",  # two Hosts
        b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",  # space in the target
        b"GET / HTTP/1.1\r\nHo st: x\r\n\r\n",  # a name that is no token
        b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n",  # a control character
        b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",  # obs-fold
        b"garbage\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    ],
)
def test_a_request_that_is_not_valid_http_is_a_remote_protocol_error(raw):
    with pytest.raises(RemoteProtocolError):
        events(server(), raw)


def test_an_http_1_0_request_needs_no_host_and_ends_the_connection():
    conn = server()
    evs = events(conn, b"GET / HTTP/1.0\r\n\r\n")
    assert evs[0].http_version == b"1.0"
    out = respond(conn, headers=[(b"content-type", b"text/plain")])
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in out
    assert b"Transfer-Encoding" not in out and out.endswith(b"\r\n\r\nok")  # ends by closing
    assert conn.our_state is MUST_CLOSE


def test_the_peer_closing_between_requests_is_connection_closed():
    conn = server()
    assert events(conn, b"") == [ConnectionClosed()]


def test_the_peer_closing_mid_head_or_mid_body_is_an_error():
    with pytest.raises(RemoteProtocolError, match="closed"):
        events(server(), b"GET / HTTP/1.1\r\nHos", b"")
    with pytest.raises(RemoteProtocolError, match="complete message body"):
        events(server(), b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab", b"")


def test_events_before_a_fault_come_out_before_the_error():
    conn = server()
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(conn.next_event(), Request)
    assert conn.next_event() == EndOfMessage()


def test_pipelined_requests_wait_for_the_next_cycle():
    conn = server()
    conn.receive_data(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert conn.next_event().target == b"/1"
    assert conn.next_event() == EndOfMessage()
    assert conn.next_event() is PAUSED
    conn.send(Response(status_code=200, headers=[(b"content-length", b"0")]))
    conn.send(EndOfMessage())
    assert conn.our_state is DONE and conn.their_state is DONE
    conn.start_next_cycle()
    assert conn.next_event().target == b"/2"


def test_a_connection_close_request_is_not_reused():
    conn = server()
    events(conn, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out = respond(conn)
    assert b"Connection: close\r\n" in out
    assert conn.our_state is MUST_CLOSE and conn.their_state is MUST_CLOSE
    with pytest.raises(LocalProtocolError):
        conn.start_next_cycle()


# ---- writing responses (server role) --------------------------------------------------------


def test_a_response_without_a_length_is_chunked_to_an_http_1_1_client():
    conn = server()
    events(conn, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    out = conn.send(Response(status_code=200, headers=[(b"Content-Type", b"text/plain")]))
    assert out == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert conn.send(Data(b"hello")) == b"5\r\nhello\r\n"
    assert conn.send(Data(b"")) == b""
    assert conn.send(EndOfMessage()) == b"0\r\n\r\n"
    assert conn.our_state is DONE


def test_content_length_is_enforced_both_ways_at_its_boundary():
    conn = server()
    events(conn, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.send(Response(status_code=200, headers=[(b"content-length", b"3")]))
    assert conn.send(Data(b"abc")) == b"abc"  # exactly the length
    with pytest.raises(LocalProtocolError, match="Too much"):
        conn.send(Data(b"d"))  # one byte more
    conn = server()
    events(conn, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.send(Response(status_code=200, headers=[(b"content-length", b"3")]))
    conn.send(Data(b"ab"))  # one byte short
    with pytest.raises(LocalProtocolError, match="Too little"):
        conn.send(EndOfMessage())


@pytest.mark.parametrize("method,status", [(b"HEAD", 200), (b"GET", 204), (b"GET", 304)])
def test_head_204_and_304_responses_carry_no_body(method, status):
    conn = server()
    events(conn, method + b" / HTTP/1.1\r\nHost: x\r\n\r\n")
    out = conn.send(Response(status_code=status, headers=[(b"content-length", b"10")]))
    assert b"Content-Length: 10" in out.replace(b"content-length", b"Content-Length")
    with pytest.raises(LocalProtocolError):
        conn.send(Data(b"x"))
    assert conn.send(EndOfMessage()) == b""
    assert conn.our_state is DONE


def test_an_upgrade_request_answered_without_101_closes_the_connection():
    conn = server()
    events(
        conn, b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    out = respond(conn, status=400)
    assert b"Connection: close\r\n" in out and conn.our_state is MUST_CLOSE


def test_an_upgrade_request_answered_101_switches_and_keeps_the_bytes_after_the_head():
    conn = server()
    evs = events(
        conn,
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nFRAME1",
    )
    assert isinstance(evs[0], Request) and evs[-1] == EndOfMessage()
    conn.receive_data(b"FRAME2")
    out = conn.send(InformationalResponse(status_code=101, headers=[(b"upgrade", b"websocket")]))
    assert out.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert conn.our_state is SWITCHED_PROTOCOL
    assert conn.trailing_data == (b"FRAME1FRAME2", False)


def test_a_checked_event_refuses_what_http_does_not_allow():
    ok = [(b"host", b"x")]
    Request(method=b"GET", target=b"/", headers=ok, checked=True)
    with pytest.raises(LocalProtocolError, match="Host"):
        Request(method=b"GET", target=b"/", headers=[(b"x", b"1")], checked=True)
    with pytest.raises(LocalProtocolError, match="multiple Host"):
        Request(method=b"GET", target=b"/", headers=ok + ok, checked=True)
    with pytest.raises(LocalProtocolError, match="header value"):
        Request(method=b"GET", target=b"/", headers=ok + [(b"x", b"a\r\nb")], checked=True)
    with pytest.raises(LocalProtocolError, match="header name"):
        Response(status_code=200, headers=[(b"a b", b"1")], checked=True)
    with pytest.raises(LocalProtocolError, match="target"):
        Request(method=b"GET", target=b"/a b", headers=ok, checked=True)
    with pytest.raises(LocalProtocolError, match="method"):
        Request(method=b"G(T", target=b"/", headers=ok, checked=True)
    # unchecked (the parser's own, or headers the edge built) is taken as it is
    Request(method=b"GET", target=b"/", headers=[(b"x", b"1")])
    assert Response(status_code=200, headers=[("X", " v ")], checked=True).headers == [
        (b"x", b"v")
    ]
    with pytest.raises(LocalProtocolError):
        Response(status_code=199)
    with pytest.raises(LocalProtocolError):
        InformationalResponse(status_code=200)


# ---- the agent's side (client role) ---------------------------------------------------------


def test_a_request_is_written_as_given_and_its_body_framed_by_its_headers():
    conn = http1.Connection(CLIENT)
    head = conn.send(
        Request(
            method=b"POST",
            target=b"/u",
            headers=[(b"host", b"x"), (b"transfer-encoding", b"chunked")],
        )
    )
    assert head == b"POST /u HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    assert conn.send(Data(b"ab")) == b"2\r\nab\r\n"
    assert conn.send(EndOfMessage()) == b"0\r\n\r\n"
    bodiless = http1.Connection(CLIENT)
    bodiless.send(Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
    with pytest.raises(LocalProtocolError):
        bodiless.send(Data(b"x"))


def test_a_response_with_content_length_then_reuse():
    conn = client()
    evs = events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert evs[0].status_code == 200 and evs[0].reason == b"OK"
    assert evs[0].raw_headers == [(b"Content-Length", b"2")]
    assert body(evs) == b"ok" and evs[-1] == EndOfMessage()
    assert conn.our_state is DONE and conn.their_state is DONE
    conn.start_next_cycle()
    conn.send(Request(method=b"GET", target=b"/2", headers=[(b"host", b"x")]))
    conn.send(EndOfMessage())
    assert body(events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")) == b"abc"


def test_a_response_without_a_length_ends_when_the_agent_closes_and_is_not_reused():
    conn = client()
    evs = events(conn, b"HTTP/1.1 200 OK\r\n\r\nab", b"cd", b"")
    assert body(evs) == b"abcd" and evs[-2:] == [EndOfMessage(), ConnectionClosed()]
    assert conn.their_state is MUST_CLOSE


def test_a_response_to_head_has_no_body_whatever_its_content_length():
    conn = client(method=b"HEAD")
    evs = events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
    assert [type(e) for e in evs] == [Response, EndOfMessage]
    # it declared a body: if the agent sends one anyway, later, it must answer nothing, so
    # the stream is not reused
    assert conn.their_state is MUST_CLOSE
    conn = client(method=b"HEAD")
    events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert conn.their_state is DONE and conn.clean
    # the head in pieces, after a 100
    conn = client(method=b"HEAD")
    evs = events(
        conn, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Le", b"ngth: 9\r\n\r\n"
    )
    assert [type(e) for e in evs] == [InformationalResponse, Response, EndOfMessage]


def test_bytes_after_a_head_response_mean_the_connection_is_not_reused():
    conn = client(method=b"HEAD")
    events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
    assert conn.their_state is MUST_CLOSE


def test_informational_responses_come_before_the_final_one_without_an_end_of_their_own():
    conn = client()
    evs = events(
        conn, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    )
    assert [type(e) for e in evs] == [InformationalResponse, Response, EndOfMessage]


def test_a_101_switches_and_keeps_what_came_after_its_head():
    conn = client(
        headers=[(b"host", b"x"), (b"upgrade", b"websocket"), (b"connection", b"upgrade")]
    )
    evs = events(
        conn,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\n\r\nRAW",
    )
    assert [type(e) for e in evs] == [InformationalResponse] and evs[0].status_code == 101
    assert conn.their_state is SWITCHED_PROTOCOL
    conn.receive_data(b"MORE")
    assert conn.trailing_data == (b"RAWMORE", False)


def test_a_101_without_connection_upgrade_is_a_remote_protocol_error():
    with pytest.raises(RemoteProtocolError, match="101"):
        events(client(), b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nRAW")


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"NOPE\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
    ],
)
def test_a_response_that_is_not_valid_http_is_a_remote_protocol_error(raw):
    with pytest.raises(RemoteProtocolError):
        events(client(), raw)


def test_the_agent_closing_before_any_response_is_connection_closed_and_mid_response_an_error():
    assert events(client(), b"") == [ConnectionClosed()]
    with pytest.raises(RemoteProtocolError):
        events(client(), b"HTTP/1.1 200 OK\r\nContent-Le", b"")
    with pytest.raises(RemoteProtocolError):
        events(client(), b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", b"")
    with pytest.raises(RemoteProtocolError):
        events(client(method=b"HEAD"), b"HTTP/1.1 200 OK\r\nContent-Le", b"")


def test_a_response_saying_connection_close_or_http_1_0_is_not_reused():
    for raw in (
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    ):
        conn = client()
        events(conn, raw)
        assert conn.their_state is MUST_CLOSE and conn.our_state is MUST_CLOSE


def test_the_response_head_limit_applies_to_the_agent_too():
    conn = client()
    with pytest.raises(RemoteProtocolError, match="larger than"):
        events(conn, b"HTTP/1.1 200 OK\r\nX: " + b"a" * 1100)


def test_a_101_to_a_request_that_asked_for_no_upgrade_cannot_be_sent():
    conn = server()
    events(conn, b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")  # no Connection
    with pytest.raises(LocalProtocolError, match="upgrade"):
        conn.send(InformationalResponse(status_code=101, headers=[]))


def test_a_connect_request_is_answered_then_the_connection_closes():
    conn = server()
    evs = events(conn, b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\nxx")
    assert evs[0].method == b"CONNECT"
    assert b"Connection: close" in respond(conn, status=405)
    assert conn.our_state is MUST_CLOSE


def test_a_chunked_response_to_an_http_1_0_client_is_sent_until_close():
    conn = server()
    events(conn, b"GET / HTTP/1.0\r\n\r\n")
    out = conn.send(Response(status_code=200, headers=[(b"Transfer-Encoding", b"chunked")]))
    assert b"Transfer-Encoding" not in out and b"Connection: close" in out
    assert conn.send(Data(b"abc")) == b"abc" and conn.send(EndOfMessage()) == b""


def test_a_response_is_relayed_with_the_upstreams_header_spelling():
    agent = client()
    evs = events(agent, b"HTTP/1.1 200 OK\r\nX-Custom-Thing: 1\r\nContent-Length: 0\r\n\r\n")
    front = server()
    events(front, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"\r\nX-Custom-Thing: 1\r\n" in front.send(evs[0])


@pytest.mark.parametrize(
    "value,ok",
    [
        (b"5", True),
        (b"5, 5", True),
        (b"9" * 18, True),
        (b"9" * 19, False),
        (b"5, 6", False),
        (b"-1", False),
        (b"0x5", False),
    ],
)
def test_content_length_values(value, ok):
    headers = [(b"host", b"x"), (b"content-length", value)]
    if ok:
        Request(method=b"POST", target=b"/", headers=headers, checked=True)
    else:
        with pytest.raises(LocalProtocolError, match="Content-Length"):
            Request(method=b"POST", target=b"/", headers=headers, checked=True)


@pytest.mark.parametrize(
    "name, value",
    [
        (b"a\tb", b"v"),
        (b"a b", b"v"),
        (b"", b"v"),
        (b"a:b", b"v"),
        (b"\xe9", b"v"),
        (b"x", b"a\nb"),
        (b"x", b"a\rb"),
        (b"x", b"a\x00b"),
        (b"x", b"a\x7fb"),
    ],
)
def test_a_checked_header_is_refused_wherever_it_stands_among_valid_ones(name, value):
    ok = [(b"host", b"x"), (b"accept", b"*/*")]
    for headers in ([(name, value)] + ok, ok[:1] + [(name, value)] + ok[1:], ok + [(name, value)]):
        with pytest.raises(LocalProtocolError):
            Request(method=b"GET", target=b"/", headers=headers, checked=True)
    # tabs inside a value, obs-text, and an empty value are allowed
    Request(
        method=b"GET", target=b"/", headers=ok + [(b"x", b"a\tb \xe9"), (b"y", b"")], checked=True
    )


# ---- found in review ------------------------------------------------------------------------


def test_chunk_framing_and_trailers_are_bounded_like_a_head():
    conn = server()
    start = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: "
    with pytest.raises(RemoteProtocolError, match="trailers"):
        events(conn, start, *[b"a" * 512] * 3)  # a trailer value that never ends
    conn = server()  # many small chunks are body, not overhead
    evs = events(
        conn,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        *[b"1\r\nz\r\n" * 150] * 4,
        b"0\r\nX-T: 1\r\n\r\n",
    )
    assert body(evs) == b"z" * 600 and evs[-1] == EndOfMessage([(b"x-t", b"1")])


def test_trailers_come_with_the_end_of_message_and_go_after_the_last_chunk():
    conn = client()
    conn.receive_data(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n"
        b"0\r\nGrpc-Status: 0\r\nSet-Cookie: a=b\r\nX-T:  y \r\n\r\n"
    )
    evs = [conn.next_event() for _ in range(3)]
    assert evs[1] == Data(b"hi")
    # framing and routing fields are not trailers: dropped
    assert evs[2] == EndOfMessage([(b"grpc-status", b"0"), (b"x-t", b"y")])
    peer = server()
    peer.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    peer.next_event()
    out = peer.send(Response(status_code=200, headers=[(b"transfer-encoding", b"chunked")]))
    out += peer.send(Data(b"hi")) + peer.send(evs[2])
    assert out.endswith(b"2\r\nhi\r\n0\r\ngrpc-status: 0\r\nx-t: y\r\n\r\n")
    peer = server()  # a body with a length has nowhere to put them
    peer.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    peer.next_event()
    assert respond(peer, data=b"ok").endswith(b"\r\n\r\nok")
    peer = server()
    peer.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    peer.next_event()
    peer.send(Response(status_code=200, headers=[(b"content-length", b"2")]))
    assert peer.send(Data(b"ok")) + peer.send(evs[2]) == b"ok"


def test_a_pipelined_request_does_not_change_how_the_one_before_is_answered():
    for second in (
        b"GET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"GET /2 HTTP/1.0\r\n\r\n",
        b"GET /2 HTTP/1.1\r\nHost: a\r\nUpgrade: ws\r\nConnection: upgrade\r\n\r\n",
    ):
        conn = server()
        conn.receive_data(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n" + second)
        assert conn.next_event().target == b"/1" and conn.next_event() == EndOfMessage()
        with pytest.raises(LocalProtocolError):  # /1 asked for no upgrade
            conn.send(InformationalResponse(status_code=101, headers=[]))
        out = respond(conn)
        assert b"Connection: close" not in out and conn.our_state is DONE, second
        conn.start_next_cycle()
        assert conn.next_event().target == b"/2"
        assert b"Connection: close" in respond(conn, status=400 if b"pgrade" in second else 200)


def test_the_agent_cannot_switch_protocols_on_a_request_that_asked_for_none():
    with pytest.raises(RemoteProtocolError, match="101"):
        events(
            client(),
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\n",
        )


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        b"Content-Length: 3\r\n\r\nabc",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
    ],
)
def test_an_upgrade_or_connect_request_with_a_body_is_refused(raw):
    with pytest.raises(RemoteProtocolError, match="with a body"):
        events(server(), raw)


@pytest.mark.parametrize("status", [b"099", b"000"])
def test_a_status_below_100_is_the_agents_protocol_error(status):
    with pytest.raises(RemoteProtocolError):
        events(client(), b"HTTP/1.1 " + status + b" X\r\n\r\n")


def test_a_small_head_after_a_large_body_in_one_read_is_not_counted_with_it():
    conn = server()
    head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n"
    nxt = b"GET /2 HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"p" * 100
    evs = events(conn, head, b"b" * 2000 + nxt[:40])  # 2,040 bytes, over the 1,024 limit
    assert body(evs) == b"b" * 2000
    conn.receive_data(nxt[40:] + b"\r\n\r\n")
    respond(conn)
    conn.start_next_cycle()
    assert conn.next_event().target == b"/2"


@pytest.mark.parametrize("raw", [b"GET /\r\n\r\n", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"])
def test_versions_other_than_1_0_and_1_1_are_refused(raw):
    with pytest.raises(RemoteProtocolError):
        events(server(), raw)


def test_a_connection_with_anything_pending_is_not_clean():
    conn = client()
    events(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n")
    assert conn.their_state is DONE and not conn.clean  # bytes beyond the response
