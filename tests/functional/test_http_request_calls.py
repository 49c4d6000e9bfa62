"""The edge's http-request calls (edge/http_request.py) against a local HTTP server, with an
edge whose EDGE_HTTP_REQUEST_ALLOW opens 127.0.0.1: each bound measured (the 256 KiB body at
the byte, the timeout over the whole call, at most 4 attempts, max_redirects), redirects, and
the SSRF rule on the wire (a refused address is never connected to)."""

import asyncio
import http.server
import threading
import time
from types import SimpleNamespace

import pytest

from chalicelib.core.policy import httpcall
from edge import http_request

KIB = 1024
SEEN = {"requests": []}


class _Server(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        SEEN["requests"].append((self.command, self.path, dict(self.headers), body))
        parts = self.path.strip("/").split("/")
        if parts[0] == "size":
            self._answer(200, b"s" * int(parts[1]))
        elif parts[0] == "redirect":
            left = int(parts[1])
            if left:
                self._answer(
                    302 if left % 2 else 303, headers=[("location", f"/redirect/{left - 1}")]
                )
            else:
                self._answer(200, f"done {self.command}".encode())
        elif parts[0] == "status":
            self._answer(int(parts[1]))
        elif parts[0] == "slow":
            time.sleep(float(parts[1]))
            self._answer(int(parts[2]) if len(parts) > 2 else 200, b"slow")
        else:
            self._answer(200, b"hi")

    do_GET = do_POST = _handle

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _edge(allow="127.0.0.1/32"):
    return SimpleNamespace(
        settings=SimpleNamespace(http_request_allow=httpcall.parse_allow(allow))
    )


def _call(url, **kw):
    fields = dict(
        method="GET", headers=[], body=b"", timeout=5.0, max_redirects=0, on_error="continue"
    )
    fields.update(kw)
    return httpcall.Call(url=url, **fields)


def _perform(call, allow="127.0.0.1/32"):
    SEEN["requests"].clear()
    return asyncio.run(http_request.perform(_edge(allow), "acct", call))


def test_a_body_of_256_kib_is_kept_and_one_byte_more_fails_the_attempt(port):
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/size/{256 * KIB}"))
    assert not failed and len(values["res"]["body"]) == 256 * KIB
    assert values["res"]["resolved_ip"] == "127.0.0.1"
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/size/{256 * KIB + 1}"))
    assert failed and "response size exceeded" in values["error.message"]
    assert values["res"] == {} and values["error.code"] == "ERR_NGROK_2300"


def test_redirects_are_followed_up_to_max_redirects(port):
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/redirect/2", max_redirects=2))
    assert not failed and values["res"]["body"] == "done GET"
    assert values["req"]["url"] == f"http://127.0.0.1:{port}/redirect/0"
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/redirect/3", max_redirects=2))
    assert failed and values["error.message"] == "stopped after 2 redirects (max_redirects)"
    # 0 (the default): not followed, the 3xx is the answer
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/redirect/1"))
    assert not failed and values["res"]["status_code"] == 302
    assert values["res"]["header"]["location"] == ["/redirect/0"]


def test_a_303_after_a_post_is_followed_with_a_get_and_no_body(port):
    values, failed = _perform(
        _call(f"http://127.0.0.1:{port}/redirect/2", method="POST", body=b"x=1", max_redirects=2)
    )
    assert not failed and values["res"]["body"] == "done GET"
    assert [(m, b) for m, _, _, b in SEEN["requests"]] == [
        ("POST", b"x=1"),
        ("GET", b""),
        ("GET", b""),
    ]


def test_at_most_four_attempts_whatever_the_retry_condition(port):
    from chalicelib.core.policy import celenv

    always = celenv.compile_expression("true", httpcall.RETRY_PHASE)
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/status/500", retry=always))
    assert len(SEEN["requests"]) == 4 and len(values["attempts"]) == 4
    assert not failed and values["res"]["status_code"] == 500
    values, _ = _perform(_call(f"http://127.0.0.1:{port}/status/200", retry=always))
    assert len(SEEN["requests"]) == 1  # a success is not retried


def test_the_timeout_bounds_every_attempt_together(port):
    from chalicelib.core.policy import celenv

    always = celenv.compile_expression("true", httpcall.RETRY_PHASE)
    started = time.monotonic()
    values, failed = _perform(
        _call(f"http://127.0.0.1:{port}/slow/0.8/500", timeout=1.0, retry=always)
    )
    took = time.monotonic() - started
    assert failed and values["error.message"] == "timed out after 1s"
    assert 1.0 <= took < 2.5, took  # 4 attempts unbounded: 3.2 s
    assert len(SEEN["requests"]) <= 2


def test_the_sent_request_carries_the_injected_headers(port):
    call = _call(
        f"http://127.0.0.1:{port}/hi",
        headers=[("x-a", "1"), ("host", "forged"), ("content-length", "99")],
        hops=2,
        client_ip="198.51.100.7",
    )
    values, failed = _perform(call)
    assert not failed
    _, path, headers, _ = SEEN["requests"][0]
    headers = {k.lower(): v for k, v in headers.items()}
    assert path == "/hi" and headers["host"] == f"127.0.0.1:{port}"
    assert headers["x-a"] == "1" and "content-length" not in headers
    assert headers["ngrok-req-hops"] == "2" and headers["x-forwarded-for"] == "198.51.100.7"
    assert headers["ngrok-req-type"] == "http-request" and len(headers["ngrok-req-id"]) == 32
    assert values["req"]["header"]["x-a"] == ["1"]


@pytest.mark.parametrize(
    "allow, words",
    [
        ("", "disabled on this edge"),
        ("0.0.0.0/0", "loopback, private or reserved"),
        ("127.0.0.2/32", "not in a network"),
    ],
)
def test_a_refused_address_is_never_connected_to(port, allow, words):
    values, failed = _perform(_call(f"http://127.0.0.1:{port}/hi"), allow=allow)
    assert failed and words in values["error.message"]
    assert SEEN["requests"] == []


def test_a_name_is_checked_by_the_address_it_resolves_to(port):
    values, failed = _perform(_call(f"http://localhost:{port}/hi"), allow="0.0.0.0/0,::/0")
    assert failed and "loopback, private or reserved" in values["error.message"]
    assert SEEN["requests"] == []
    values, failed = _perform(_call(f"http://localhost:{port}/hi"), allow="127.0.0.1/32,::1/128")
    assert not failed and values["res"]["body"] == "hi"
