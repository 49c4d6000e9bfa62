"""The API's HTTP server (scripts/api_server.py over scripts/http_server.py) as clients meet it:
framing errors answered in the contract's error body with an Operation-Id header, and the
connection left usable or closed cleanly."""

import json

import pytest

from chalicelib import web
from chalicelib.core import errors
from tests.support.raw_http import RawConnection, request_bytes


@pytest.fixture(scope="module")
def stack_account(http_api):
    return http_api.new_account()


@pytest.fixture
def conn(api_process):
    with RawConnection(api_process.port) as connection:
        yield connection


def _auth(account, **extra):
    return {"Authorization": f"Bearer {account.admin.token}", "Service-Version": "2", **extra}


def _assert_contract_error(resp, status, error_code):
    assert resp.status == status, (resp.status, resp.body)
    body = resp.json
    assert body["error_code"] == error_code and body["status_code"] == status
    assert body["details"]["operation_id"].startswith("op_")
    assert resp.headers["operation-id"] == body["details"]["operation_id"]
    assert resp.headers["content-type"] == "application/json"


def _list_works(conn, account):
    conn.send(request_bytes("GET", "/api_keys?limit=1", _auth(account)))
    resp = conn.read_response()
    assert resp.status == 200, resp.body
    return resp


def test_a_chunked_body_is_decoded_and_the_connection_stays_usable(conn, stack_account):
    body = json.dumps({"description": "sent in chunks"}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:]))
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
            ),
            chunked + b"0\r\n\r\n",
        )
    )
    resp = conn.read_response()
    assert resp.status == 201 and resp.json["description"] == "sent in chunks"
    _list_works(conn, stack_account)


def test_head_has_headers_and_no_body_and_keeps_the_connection(conn, stack_account):
    conn.send(request_bytes("HEAD", "/api_keys", _auth(stack_account)))
    resp = conn.read_response(head_only=True)
    assert "operation-id" in resp.headers and int(resp.headers["content-length"]) > 0
    _list_works(conn, stack_account)  # no stray body bytes in between


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "0x10", "5, 6"])
def test_a_bad_content_length_is_400_and_closes(conn, stack_account, value):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(stack_account, **{"Content-Type": "application/json", "Content-Length": value}),
            b"{}",
        )
    )
    _assert_contract_error(conn.read_response(), 400, errors.MalformedRequest.error_code)
    assert conn.is_closed()


def test_both_content_length_and_chunked_is_400(conn, stack_account):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(stack_account, **{"Content-Length": "2", "Transfer-Encoding": "chunked"}),
            b"{}",
        )
    )
    _assert_contract_error(conn.read_response(), 400, errors.MalformedRequest.error_code)
    assert conn.is_closed()


def test_an_unknown_transfer_coding_is_501(conn, stack_account):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(stack_account, **{"Transfer-Encoding": "gzip, chunked"}),
            b"0\r\n\r\n",
        )
    )
    _assert_contract_error(conn.read_response(), 501, errors.NotImplementedByServer.error_code)


def test_a_declared_body_over_the_limit_is_413_before_it_is_sent(conn, stack_account):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{
                    "Content-Type": "application/json",
                    "Content-Length": str(web.MAX_BODY_BYTES + 1),
                },
            ),
        )
    )
    # nothing of the body was sent: the answer comes anyway
    _assert_contract_error(conn.read_response(), 413, errors.PayloadTooLarge.error_code)
    assert conn.is_closed()


def test_a_body_at_the_limit_is_read_and_reaches_the_api(conn, stack_account):
    description = "x" * (web.MAX_BODY_BYTES - len('{"description": ""}'))
    body = json.dumps({"description": description}).encode()
    assert len(body) == web.MAX_BODY_BYTES
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{"Content-Type": "application/json", "Content-Length": str(len(body))},
            ),
            body,
        )
    )
    resp = conn.read_response()
    assert resp.status == 400 and resp.json["error_code"] == errors.InvalidField.error_code
    _list_works(conn, stack_account)  # the API's own refusal keeps the connection


def test_a_chunked_body_one_byte_over_the_limit_is_413(conn, stack_account):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
            ),
        )
    )
    half = web.MAX_BODY_BYTES // 2
    try:
        for size in (half, web.MAX_BODY_BYTES - half, 1):
            conn.send(b"%x\r\n%s\r\n" % (size, b"x" * size))
        conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed while we were still sending
    _assert_contract_error(conn.read_response(), 413, errors.PayloadTooLarge.error_code)


def test_a_chunk_announcing_more_than_the_limit_is_413_before_its_data(conn, stack_account):
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
            ),
        )
    )
    conn.send(b"%x\r\n" % (web.MAX_BODY_BYTES + 1))  # and not one byte of it
    _assert_contract_error(conn.read_response(), 413, errors.PayloadTooLarge.error_code)
    assert conn.is_closed()


def test_a_target_at_8192_bytes_is_served_and_one_more_is_414(api_process, stack_account):
    prefix = "/api_keys/"
    for length, status in ((8192, 404), (8193, 414)):
        with RawConnection(api_process.port) as conn:
            path = prefix + "a" * (length - len(prefix))
            conn.send(request_bytes("GET", path, _auth(stack_account)))
            resp = conn.read_response()
            if status == 414:
                _assert_contract_error(resp, 414, errors.UriTooLong.error_code)
            else:
                _assert_contract_error(resp, 404, errors.NotFound.error_code)


def _head_of(size, account):
    """A GET whose header fields (the lines after the request line, with the CRLFs between
    them) are exactly ``size`` bytes."""
    base = request_bytes("GET", "/api_keys", _auth(account, **{"X-Pad": ""}))
    fields = base.split(b"\r\n", 1)[1][:-4]
    pad = size - len(fields)
    return request_bytes("GET", "/api_keys", _auth(account, **{"X-Pad": "p" * pad}))


def test_header_fields_of_10240_bytes_pass_and_one_more_is_431(api_process, stack_account):
    with RawConnection(api_process.port) as conn:
        conn.send(_head_of(10240, stack_account))
        assert conn.read_response().status == 200
    with RawConnection(api_process.port) as conn:
        conn.send(_head_of(10241, stack_account))
        _assert_contract_error(conn.read_response(), 431, errors.HeadersTooLarge.error_code)
        assert conn.is_closed()


def test_more_than_100_header_fields_is_431_and_100_pass(api_process, stack_account):
    for count, status in ((100 - 3, 200), (101, 431)):
        with RawConnection(api_process.port) as conn:
            extra = {f"X-H{i}": "v" for i in range(count)}
            conn.send(request_bytes("GET", "/api_keys", _auth(stack_account, **extra)))
            resp = conn.read_response()
            if status == 431:
                _assert_contract_error(resp, 431, errors.HeadersTooLarge.error_code)
            else:
                assert resp.status == 200, resp.body


@pytest.mark.parametrize("method", ["TRACE", "PROPFIND", "CONNECT", "BREW"])
def test_methods_the_gateway_does_not_route_are_405_and_keep_the_connection(
    conn, stack_account, method
):
    conn.send(request_bytes(method, "/api_keys", _auth(stack_account)))
    _assert_contract_error(conn.read_response(), 405, errors.MethodNotAllowed.error_code)
    _list_works(conn, stack_account)


def test_gateway_401_and_404_carry_operation_id(conn, stack_account):
    conn.send(request_bytes("GET", "/api_keys", {"Service-Version": "2"}))
    _assert_contract_error(conn.read_response(), 401, errors.Unauthorized.error_code)
    conn.send(request_bytes("GET", "/no/such/path", _auth(stack_account)))
    _assert_contract_error(conn.read_response(), 404, errors.NotFound.error_code)


@pytest.mark.parametrize("line", [b"GET /api_keys HTTP/2.0", b"GET /api_keys HTTP/3.0"])
def test_other_http_versions_are_505(conn, line):
    conn.send(line + b"\r\nHost: x\r\n\r\n")
    _assert_contract_error(conn.read_response(), 505, errors.HttpVersionNotSupported.error_code)


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /api_keys HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"GET /api_keys HTTP/1.1\r\n folded: x\r\n\r\n",
    ],
)
def test_a_malformed_head_is_400_and_closes(conn, raw):
    conn.send(raw)
    _assert_contract_error(conn.read_response(), 400, errors.MalformedRequest.error_code)
    assert conn.is_closed()


def test_expect_100_continue_is_answered_before_the_body(conn, stack_account):
    body = json.dumps({"description": "after 100"}).encode()
    conn.send(
        request_bytes(
            "POST",
            "/api_keys",
            _auth(
                stack_account,
                **{
                    "Content-Type": "application/json",
                    "Content-Length": str(len(body)),
                    "Expect": "100-continue",
                },
            ),
        )
    )
    assert conn.read_response().status == 100
    conn.send(body)
    resp = conn.read_response()
    assert resp.status == 201 and resp.json["description"] == "after 100"


def test_connection_close_is_honoured(conn, stack_account):
    conn.send(request_bytes("GET", "/api_keys", _auth(stack_account, Connection="close")))
    resp = conn.read_response()
    assert resp.status == 200 and resp.headers["connection"] == "close"
    assert conn.is_closed()


def test_pipelined_requests_are_answered_in_order(conn, stack_account):
    conn.send(
        request_bytes("GET", "/api_keys?limit=1", _auth(stack_account))
        + request_bytes("GET", "/nope", _auth(stack_account))
    )
    assert conn.read_response().status == 200
    assert conn.read_response().status == 404
