"""The sans-IO pieces of the HTTP/2 side (edge/h2wire.py, edge/h2front.py): request fields
to the request path's http1.Request, fields across protocols, gRPC statuses of edge answers,
the header block bound."""

import urllib.parse

import h2.exceptions
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame

from edge import h2front, h2wire, http1
from edge.http_io import error_response


def test_an_h2_request_becomes_the_request_the_path_takes():
    req = h2front._request_of(
        [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", b"a.example:8443"),
            (b":path", b"/x?y=1"),
            (b"cookie", b"a=1"),
            (b"cookie", b"b=2"),
            (b"content-type", b"text/plain"),
        ],
        ended=False,
    )
    assert (req.method, req.target) == (b"POST", b"/x?y=1")
    assert req.headers[0] == (b"host", b"a.example:8443")
    assert (b"cookie", b"a=1; b=2") in req.headers
    assert (b"transfer-encoding", b"chunked") in req.headers  # a body of unknown length
    req = h2front._request_of(
        [(b":method", b"GET"), (b":path", b"/"), (b"host", b"h"), (b"content-length", b"0")],
        ended=False,
    )
    assert (
        req.headers[0] == (b"host", b"h") and (b"transfer-encoding", b"chunked") not in req.headers
    )
    req = h2front._request_of(
        [(b":method", b"GET"), (b":path", b"/"), (b":authority", b"h")], ended=True
    )
    assert not any(n == b"transfer-encoding" for n, _ in req.headers)


@pytest.mark.parametrize(
    "fields, error",
    [
        ([(b":method", b"CONNECT"), (b":authority", b"h:1")], ValueError),
        ([(b":method", b"GET"), (b":path", b"/")], ValueError),
        (
            [(b":method", b"GET"), (b":path", b"/"), (b":authority", b"h"), (b"x", b"a\nb")],
            http1.LocalProtocolError,
        ),
    ],
)
def test_what_http11_cannot_carry_is_refused(fields, error):
    with pytest.raises(error):
        h2front._request_of(fields, ended=True)


def test_connection_specific_fields_do_not_cross_to_http2():
    pairs = [
        (b"connection", b"close, x-hop"),
        (b"keep-alive", b"5"),
        (b"x-hop", b"1"),
        (b"transfer-encoding", b"chunked"),
        (b"upgrade", b"h2c"),
        (b"host", b"h"),
        (b"te", b"gzip"),
        (b"x-keep", b"1"),
    ]
    assert h2wire.h2_fields(pairs) == [(b"x-keep", b"1")]
    assert h2wire.h2_fields([(b"te", b"Trailers")]) == [(b"te", b"Trailers")]
    assert h2wire.http1_fields([(b":status", b"200"), (b"a", b"b")]) == [(b"a", b"b")]
    with pytest.raises(http1.LocalProtocolError):
        h2wire.http1_fields([(b"a", b"b\r\nc: d")])


@pytest.mark.parametrize(
    "status, code, grpc",
    [
        (404, "ERR_NGROK_3200", 14),
        (403, "ERR_NGROK_3208", 7),
        (429, "ERR_NGROK_702", 8),
        (502, "ERR_NGROK_8012", 14),
        (400, "ERR_NGROK_3002", 13),
        (418, "ERR_NGROK_X", 2),
    ],
)
def test_edge_answers_to_grpc_requests_are_grpc_statuses(status, code, grpc):
    head, data, _ = error_response(status, code, "It is 100% offline: ünïcode", close=True)
    fields = dict(h2front.grpc_status(head, data.data))
    assert fields[b":status"] == b"200" and fields[b"content-type"] == b"application/grpc"
    assert fields[b"grpc-status"] == str(grpc).encode()
    assert (
        urllib.parse.unquote(fields[b"grpc-message"].decode())
        == f"{code}: It is 100% offline: ünïcode"
    )
    assert fields[b"ngrok-error-code"] == code.encode()


def test_a_header_block_is_cut_at_its_bound():
    buffer = h2wire.BoundedFrameBuffer(server=False)
    buffer.max_frame_size = 16384
    first = HeadersFrame(1)
    first.data = b"\x82" * 100
    data = first.serialize()
    for _ in range(h2wire.MAX_HEADER_BLOCK // 16384 + 1):
        piece = ContinuationFrame(1)
        piece.data = b"\x00" * 16384
        data += piece.serialize()
    buffer.add_data(data)
    with pytest.raises(h2.exceptions.DenialOfServiceError):
        list(buffer)
    ok = h2wire.BoundedFrameBuffer(server=False)  # within the bound: one frame comes out
    ok.max_frame_size = 16384
    first = HeadersFrame(1)
    first.data = b"\x82"
    piece = ContinuationFrame(1)
    piece.data = b"\x00" * 16384
    piece.flags.add("END_HEADERS")
    ok.add_data(first.serialize() + piece.serialize())
    assert [type(f) for f in ok] == [HeadersFrame]
