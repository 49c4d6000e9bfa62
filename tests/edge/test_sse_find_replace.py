"""sse-find-replace in on_event_stream_message through the edge, the policy set by the
official Python SDK; the upstream (tests/edge/sdk_agent.py ``/events``) streams server-sent
events, each message written in two pieces. The rules (chalicelib/core/policy/sse.py and
actions.SseFindReplace): each message is rewritten as it completes (the stream is never held
whole: the first message reaches the client while the upstream is still streaming); ``data``
and ``retry`` fields; a message of more than 256 KiB ends the response instead of passing on
unrewritten; other responses are untouched."""

import json
import time

import pytest
import requests

from stacks.agents import SdkAgent
from tests.edge.support import metric, settled, wait
from tests.edge.test_edge_sdk import _bound, _credential, _host

KIB = 1024
POLICY = {
    "on_event_stream_message": [
        {
            "actions": [
                {
                    "type": "sse-find-replace",
                    "config": {
                        "replacements": [
                            {"field": "data", "from": "(\\d{4})-(\\d{4})", "to": "XXXX-$2"},
                            {"field": "retry", "from": "\\d+", "to": "5000"},
                        ]
                    },
                }
            ]
        }
    ]
}


def _message(i, card="XXXX-5678"):
    return f"id: {i}\ndata: card {card} #{i}\ndata: second line\n\n"


@pytest.fixture(scope="module")
def host(edge, api):
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(POLICY)]}}]
    agent = SdkAgent(edge, _credential(api.new_account())["token"], binds)
    name = _host(_bound(agent.start())[0]["url"])

    def core_serves():  # the route is pushed a moment after the bind: the tests run on the
        before = settled(lambda: _counts(edge))[0]  # core's path (edge/decided.py)
        assert edge.http("GET", name, "/events?n=1").status_code == 200
        return settled(lambda: _counts(edge))[0] > before

    assert wait(core_serves)
    yield name
    agent.stop()


def test_each_message_is_rewritten_as_it_completes(edge, host):
    got = edge.http("GET", host, "/events?n=3")
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/event-stream"
    assert "content-length" not in {k.lower() for k in got.headers}
    assert got.text == "retry: 5000\n\n" + "".join(_message(i) for i in range(3))


def test_the_stream_is_not_held_whole(edge, host):
    started = time.monotonic()
    got = edge.http("GET", host, "/events?n=1&hold=3", stream=True)
    seen = b""
    for piece in got.iter_content(chunk_size=None):
        seen += piece
        if b"#0" in seen:
            break
    first = time.monotonic() - started
    assert _message(0).encode() in seen and first < 2.5, (first, seen)  # the end: 3 s on
    got.close()


def test_a_message_of_256_kib_passes_and_one_byte_more_ends_the_response(edge, host):
    whole = edge.http("GET", host, f"/events?size={256 * KIB}")
    assert whole.status_code == 200 and len(whole.content) == 256 * KIB
    over = edge.http("GET", host, f"/events?size={256 * KIB + 1}", stream=True)
    assert over.status_code == 200  # the head went before the message
    seen = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for piece in over.iter_content(None):
            seen.append(piece)
    assert b"sss" not in b"".join(seen)  # nothing of the message passed on


def _counts(edge):
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def test_the_core_carries_the_stream_python_rewriting_each_piece(edge, host):
    """The route is decided (edge/decided.py): the core carries the stream, each piece the
    agent sends Python's to rewrite first (Decision::Events), over HTTP/1.1 and HTTP/2 alike,
    none handed over."""

    before = settled(lambda: _counts(edge))
    got = edge.http("GET", host, "/events?n=3")
    assert got.text == "retry: 5000\n\n" + "".join(_message(i) for i in range(3))
    out = edge.curl_https(host, "/events?n=2", "--http2", "-w", "\n%{http_code} %{http_version}")
    body, _, status = out.stdout.rpartition("\n")
    assert status == "200 2", out  # over HTTP/2
    assert body == "retry: 5000\n\n" + _message(0) + _message(1)
    after = settled(lambda: _counts(edge))
    assert (after[0] - before[0], after[1] - before[1]) == (2, 0)


def test_a_response_that_is_not_an_event_stream_is_untouched(edge, host):
    got = edge.http(
        "POST",
        host,
        "/reflect",
        data=b"data: 1234-5678\n\n",
        headers={"content-type": "text/plain"},
    )
    assert got.content == b"data: 1234-5678\n\n"


def test_over_http2_the_messages_are_rewritten_too(edge, host):
    out = edge.curl_https(host, "/events?n=2", "--http2")
    body, _, code = out.stdout.rpartition("\n")
    assert code == "200", out
    assert body == "retry: 5000\n\n" + "".join(_message(i) for i in range(2)), out


def test_a_message_a_rule_would_grow_past_256_kib_ends_the_response(edge, account, agents):
    policy = {
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "s", "to": "$0" * 100}]},
                    }
                ]
            }
        ]
    }
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}]
    agent = agents(edge, _credential(account)["token"], binds)
    host = _host(_bound(agent.start())[0]["url"])
    small = edge.http("GET", host, "/events?size=1008")  # 1000 "s": 100,000 bytes after
    assert small.status_code == 200 and small.text.count("s") == 100 * 1000
    over = edge.http("GET", host, "/events?size=3008", stream=True)  # 300,000: past it
    seen = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for piece in over.iter_content(None):
            seen.append(piece)
    assert b"sss" not in b"".join(seen)
