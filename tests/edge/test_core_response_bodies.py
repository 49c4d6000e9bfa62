"""The response phase's body actions are carried by the compiled core (docs/DATA_PLANE.md,
"Decided routes"): Python's run asks the core for the agent's body (all of it for
response-body-find-replace, the first 4 KiB for owasp-crs-response's ``process_body``), runs
the actions on it, and the core sends the rewritten body, or what it read and the rest after
it. Through the official Python SDK as a process; each test says, from the edge's metrics,
that the core served every request and handed none to Python (an HTTP/2 stream's aside)."""

import gzip
import json

import pytest

from chalicelib.core.policy.actions import MAX_FIND_REPLACE_BODY
from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, settled, wait

REPLACE = {
    "on_http_response": [
        {
            "actions": [
                {
                    "type": "response-body-find-replace",
                    "config": {"replacements": [{"from": "secret", "to": "[gone]"}]},
                }
            ]
        }
    ]
}
CHECKED = {
    "on_http_response": [
        {
            "actions": [
                {"type": "owasp-crs-response", "config": {"process_body": True}},
                {"type": "compress-response"},
            ]
        }
    ]
}
LEAK = (
    b"You have an error in your SQL syntax; check the manual that corresponds to your MySQL server"
)
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)", "Content-Type": "text/plain"}


def _counts(edge):
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def _settled(edge):
    return settled(lambda: _counts(edge))


def _since(edge, before):
    now = _settled(edge)
    return now[0] - before[0], now[1] - before[1]


@pytest.fixture(scope="module")
def hosts(edge, api):
    binds = [
        {"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}
        for doc in (REPLACE, CHECKED)
    ]
    agent = SdkAgent(edge, credential(api.new_account())["token"], binds)
    names = [host_of(b["url"]) for b in bound(agent.start())]

    def core_serves(name):
        before = _settled(edge)[0]
        assert edge.http("GET", name, "/echo", headers=BROWSER).status_code == 200
        return _settled(edge)[0] > before

    for name in names:
        assert wait(lambda: core_serves(name))  # each route is pushed a moment after its bind
    yield dict(zip(("replace", "checked"), names))
    agent.stop()


def test_a_found_text_is_replaced_in_a_body_by_either_framing(edge, hosts):
    before = _settled(edge)
    text = b"the secret is " + b"x" * 70_000 + b" and so is this secret"
    for query in ("", "?chunks=7"):  # the agent's body by Content-Length, then chunked
        got = edge.http("POST", hosts["replace"], f"/reflect{query}", headers=BROWSER, data=text)
        assert got.status_code == 200
        assert got.content == text.replace(b"secret", b"[gone]")
        assert got.headers["content-length"] == str(len(got.content))
        assert "transfer-encoding" not in got.headers
    assert _since(edge, before) == (2, 0)


def test_a_body_at_the_find_replace_bound_is_rewritten_and_one_byte_past_it_is_a_502(edge, hosts):
    before = _settled(edge)
    at = b"secret" + b"y" * (MAX_FIND_REPLACE_BODY - 6)
    got = edge.http("POST", hosts["replace"], "/reflect?chunks=3", headers=BROWSER, data=at)
    assert got.status_code == 200, got.content[:300]  # (the hosted error says why)
    assert got.content == b"[gone]" + at[6:]
    past = edge.http("POST", hosts["replace"], "/reflect", headers=BROWSER, data=at + b"z")
    assert past.status_code == 502 and past.headers["ngrok-error-code"] == "ERR_NGROK_3004"
    assert f"larger than the {MAX_FIND_REPLACE_BODY} bytes".encode() in past.content
    assert b"yyyy" not in past.content  # nothing of the agent's body went out
    assert _since(edge, before) == (2, 0)


def test_a_leaking_body_is_refused_and_a_clean_one_goes_on_compressed(edge, hosts):
    """owasp-crs-response with process_body: the first 4 KiB read and checked (a match is
    the hosted 403, the agent's body never sent); a clean body goes on as read, then the
    rest as it comes, compressed as negotiated; a leak past the window is not seen."""
    before = _settled(edge)
    refused = edge.http("POST", hosts["checked"], "/reflect?chunks=3", headers=BROWSER, data=LEAK)
    assert refused.status_code == 403 and refused.headers["ngrok-error-code"] == "ERR_NGROK_3700"
    assert b"SQL syntax" not in refused.content
    late = b"x" * 4096 + b"a clean start, " * 5000 + LEAK  # past the window: streams on
    for query in ("", "?chunks=9"):
        got = edge.http(
            "POST",
            hosts["checked"],
            f"/reflect{query}",
            headers={**BROWSER, "Accept-Encoding": "identity"},
            data=late,
        )
        assert got.status_code == 200 and got.content == late
    zipped = edge.http(
        "POST",
        hosts["checked"],
        "/reflect?chunks=5",
        headers={**BROWSER, "Accept-Encoding": "gzip"},
        data=late,
        stream=True,
    )
    assert zipped.headers["content-encoding"] == "gzip"
    assert gzip.decompress(zipped.raw.read()) == late
    assert _since(edge, before) == (4, 0)


def test_an_agent_that_dies_while_its_body_is_read_is_a_502_and_a_heads_answer_is_not_read(
    edge, hosts
):
    """/cut: 1,000 of the 1 MiB its head announced, then the upstream closes, while the core
    reads the body for the find-replace: nothing of it went out, so the client gets the
    hosted 502 (never a rewritten half), the code the Python path gives a response that ends
    short (not a valid one). A HEAD's answer is never read: its head goes on."""
    before = _settled(edge)
    got = edge.http("GET", hosts["replace"], "/cut", headers=BROWSER)
    assert got.status_code == 502 and got.headers["ngrok-error-code"] == "ERR_NGROK_3004"
    assert b"c" * 100 not in got.content
    head = edge.http("HEAD", hosts["replace"], "/echo", headers=BROWSER)
    assert head.status_code == 200 and head.content == b""
    assert _since(edge, before) == (2, 0)


def test_over_http2_the_python_path_rewrites_it(edge, hosts):
    """Each stream of an HTTP/2 connection would hold a body while the caps count one
    connection: such a request is handed to the Python path, which rewrites it the same."""
    before = _settled(edge)
    got = edge.curl_https(
        hosts["replace"],
        "/reflect",
        "--http2",
        "--data-binary",
        "a secret",
        "-H",
        "Content-Type: text/plain",
    )
    body, _, status = got.stdout.rpartition("\n")
    assert (status, body) == ("200", "a [gone]"), got
    assert _since(edge, before)[1] == 1
