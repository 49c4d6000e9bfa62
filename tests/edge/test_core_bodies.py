"""A traffic policy that reads the request's body is carried by the compiled core
(docs/DATA_PLANE.md, "Decided routes"): the core reads as much of the body as the policy
asks, Python's run decides on it, and the core sends on the client's body, or the policy's
rewrite of it, or the policy's answer. Through the official Python SDK as a process; the
upstream (tests/edge/sdk_agent.py ``/reflect``) answers with the body it was sent and the
Content-Length it saw. Each test says, from the edge's metrics, that the core served every
request and handed none to Python."""

import json
import socket

import pytest
import requests

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, settled, wait

POLICY = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "request-body-find-replace",
                    "config": {"replacements": [{"from": "cat", "to": "doggo"}]},
                }
            ]
        }
    ]
}


def _served(edge) -> float:
    return settled(lambda: metric(edge.metrics(), "edge_core_http_requests_total"))


def _handed(edge) -> float:
    return metric(edge.metrics(), "edge_core_http_handed_over_total")


@pytest.fixture(scope="module")
def host(edge, api):
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(POLICY)]}}]
    agent = SdkAgent(edge, credential(api.new_account())["token"], binds)
    name = host_of(bound(agent.start())[0]["url"])

    def core_serves():
        before = _served(edge)
        assert edge.http("POST", name, "/reflect", data=b"cat").content == b"doggo"
        return _served(edge) > before

    assert wait(core_serves)  # the route is pushed a moment after the bind
    yield name
    agent.stop()


def _exchange(edge, sent: bytes, answers: int) -> bytes:
    """``sent`` on one connection; what came back once ``answers`` responses ended (each
    with a Content-Length) or the connection closed."""
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as conn:
        conn.sendall(sent)
        got = b""
        while got.count(b"HTTP/1.1 ") < answers or not _ended(got):
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def _ended(got: bytes) -> bool:
    head, _, body = got.rpartition(b"HTTP/1.1 ")[2].partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def test_bodies_are_read_decided_and_rewritten_by_the_core(edge, host):
    """Length-framed and chunked bodies on one kept connection, each rewritten (its new
    length upstream) or passed on as it came: all the core's."""
    served, handed = _served(edge), _handed(edge)
    with requests.Session() as session:
        for i in range(4):
            sent = [b"a cat ", b"and a cat"] if i % 2 else b"a cat and a cat"
            got = session.post(
                f"http://127.0.0.1:{edge.http_port}/reflect",
                headers={"Host": host},
                data=iter(sent) if i % 2 else sent,
                timeout=10,
            )
            assert got.content == b"a doggo and a doggo"
            assert got.headers["x-request-length"] == "19"
        unchanged = session.post(
            f"http://127.0.0.1:{edge.http_port}/reflect",
            headers={"Host": host},
            data=b"nothing here",
            timeout=10,
        )
        assert unchanged.content == b"nothing here"
    assert (_served(edge) - served, _handed(edge) - handed) == (5, 0)


def test_a_body_past_the_policys_bound_is_answered_by_the_core(edge, host):
    served, handed = _served(edge), _handed(edge)
    refused = edge.http("POST", host, "/reflect", data=b"cat" + b"." * (1 << 20))
    assert refused.status_code == 413
    assert refused.headers["ngrok-error-code"] == "ERR_NGROK_10088"
    assert (_served(edge) - served, _handed(edge) - handed) == (1, 0)


def test_the_request_after_a_body_read_whole_follows_on_the_same_connection(edge, host):
    """Two requests in one write: the first's body read for its decision (and rewritten),
    the second's head found where that body ended."""
    served, handed = _served(edge), _handed(edge)
    one = (
        f"POST /reflect HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3\r\ncat\r\n0\r\n\r\n"
    ).encode()
    two = f"POST /reflect HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\n\r\nmeow".encode()
    got = _exchange(edge, one + two, 2)
    first, second = got.split(b"HTTP/1.1 ")[1:3]
    assert first.startswith(b"200") and first.endswith(b"\r\n\r\ndoggo")
    assert second.startswith(b"200") and second.endswith(b"\r\n\r\nmeow")
    assert (_served(edge) - served, _handed(edge) - handed) == (2, 0)


def test_over_http2_a_body_policys_streams_are_the_python_paths(edge, host):
    """A stream of an HTTP/2 connection is not read for a decision in the core (its streams
    would each hold a body while the caps count one connection): the core hands it to the
    Python path, which reads and rewrites it as before."""
    handed = _handed(edge)
    out = edge.curl_https(host, "/reflect", "--http2", "--data-binary", "a cat")
    body, _, code = out.stdout.rpartition("\n")
    assert (code, body) == ("200", "a doggo"), out
    assert _handed(edge) - handed >= 1
