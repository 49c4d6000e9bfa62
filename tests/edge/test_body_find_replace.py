"""request-body-find-replace and response-body-find-replace through the edge, sent by the
official Python SDK as the endpoint's traffic policy; the upstream (tests/edge/sdk_agent.py
``/reflect``) answers with the body it was sent and the Content-Length it saw. The rules
(chalicelib/core/policy/actions.py): the whole body is buffered, at most 1 MiB each way;
RE2 patterns, every match, Go's ``$1`` / ``$$`` replacements, rules in order; the new
Content-Length goes with the body; a body over the bound is refused (413 ERR_NGROK_10088
for a request, 502 ERR_NGROK_3004 for a response) and never passed on unrewritten."""

import gzip
import json

import pytest

from stacks.agents import SdkAgent
from tests.edge.test_edge_sdk import _bound, _credential, _host

MIB = 1 << 20

REQUEST = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "request-body-find-replace",
                    "config": {
                        "replacements": [
                            {"from": "api_key=([a-z0-9]+)", "to": "api_key=REDACTED"},
                            {"from": "REDACTED", "to": "<$0 at ${req.url.path}>"},
                            {"from": "secret", "to": "$$public"},
                            {"from": "x{3}"},
                        ]
                    },
                }
            ]
        }
    ]
}

RESPONSE = {
    "on_http_response": [
        {
            "actions": [
                {
                    "type": "response-body-find-replace",
                    "config": {
                        "replacements": [
                            {"from": "(\\d{4})-(\\d{4})", "to": "XXXX-$2"},
                            {"from": "r{4}", "to": "R"},
                        ]
                    },
                }
            ]
        }
    ]
}


def _binds(policy):
    return [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}]


@pytest.fixture(scope="module")
def hosts(edge, api):
    """One agent serving both endpoints, started once for the module."""
    agent = SdkAgent(
        edge, _credential(api.new_account())["token"], _binds(REQUEST) + _binds(RESPONSE)
    )
    bound = _bound(agent.start())
    yield [_host(b["url"]) for b in bound]
    agent.stop()


@pytest.fixture(scope="module")
def request_host(hosts):
    return hosts[0]


@pytest.fixture(scope="module")
def response_host(hosts):
    return hosts[1]


def test_the_request_body_is_rewritten_in_order_with_its_new_length(edge, request_host):
    sent = b"a api_key=abc123 b secret xxxx \xff end"
    got = edge.http("POST", request_host, "/reflect", data=sent)
    assert got.status_code == 200
    want = b"a api_key=<REDACTED at /reflect> b $public x \xff end"
    assert got.content == want
    assert got.headers["x-request-length"] == str(len(want))


def test_a_chunked_request_body_goes_upstream_with_a_content_length(edge, request_host):
    got = edge.http(
        "POST", request_host, "/reflect", data=iter([b"api_key=", b"abc", b"123 tail"])
    )
    assert got.content == b"api_key=<REDACTED at /reflect> tail"
    assert got.headers["x-request-length"] == str(len(got.content))


def test_a_request_body_up_to_the_bound_is_rewritten_and_one_byte_more_is_refused(
    edge, request_host
):
    whole = b"secret" + b"." * (MIB - len(b"secret"))
    got = edge.http("POST", request_host, "/reflect", data=whole)
    assert got.status_code == 200 and got.content.startswith(b"$public.")
    assert len(got.content) == MIB + 1
    refused = edge.http("POST", request_host, "/reflect", data=whole + b"!")
    assert refused.status_code == 413
    assert refused.headers["ngrok-error-code"] == "ERR_NGROK_10088"
    assert b"secret" not in refused.content


def test_a_request_nothing_matches_goes_on_unchanged(edge, request_host):
    got = edge.http("POST", request_host, "/reflect", data=b"nothing to see")
    assert got.content == b"nothing to see" and got.headers["x-request-length"] == "14"


def test_the_response_body_is_rewritten_whole_across_its_chunks(edge, response_host):
    # written back in 7 pieces: "1234-5678" is cut by a piece's end, and still matched
    got = edge.http("POST", response_host, "/reflect?chunks=7", data=b"card 1234-5678, pin 0000")
    assert got.status_code == 200
    assert got.content == b"card XXXX-5678, pin 0000"
    assert got.headers["content-length"] == str(len(got.content))
    assert "transfer-encoding" not in {k.lower() for k in got.headers}


def test_a_response_body_up_to_the_bound_is_rewritten_and_one_byte_more_never_reaches_the_client(
    edge, response_host
):
    got = edge.http("GET", response_host, f"/reflect?size={MIB}&chunks=4")
    assert got.status_code == 200 and got.content == b"R" * (MIB // 4)
    over = edge.http("GET", response_host, f"/reflect?size={MIB + 1}&chunks=4")
    assert over.status_code == 502
    assert over.headers["ngrok-error-code"] == "ERR_NGROK_3004"
    assert b"rrrr" not in over.content


def test_over_http2_the_response_is_rewritten_too(edge, response_host):
    out = edge.curl_https(
        response_host, "/reflect?chunks=3", "--http2", "--data-binary", "tel 1111-2222"
    )
    body, _, code = out.stdout.rpartition("\n")
    assert code == "200" and body == "tel XXXX-2222", out


def test_a_rewritten_body_is_compressed_after_whatever_the_order(edge, account, agents):
    policy = {
        "on_http_response": [
            {"actions": [{"type": "compress-response", "config": {"algorithms": ["gzip"]}}]},
            RESPONSE["on_http_response"][0],
        ]
    }
    agent = agents(edge, _credential(account)["token"], _binds(policy))
    host = _host(_bound(agent.start())[0]["url"])
    got = edge.http(
        "POST",
        host,
        "/reflect?chunks=2",
        data=b"id 9876-5432 " * 100,
        headers={"Accept-Encoding": "gzip"},
        stream=True,
    )
    raw = got.raw.read()
    assert got.headers["content-encoding"] == "gzip"
    assert got.headers["content-length"] == str(len(raw))
    assert gzip.decompress(raw) == b"id XXXX-5432 " * 100


def test_a_response_body_a_rule_would_grow_past_4_mib_never_reaches_the_client(
    edge, account, agents
):
    policy = {
        "on_http_response": [
            {
                "actions": [
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "r+", "to": "$0" * 5}]},
                    }
                ]
            }
        ]
    }
    agent = agents(edge, _credential(account)["token"], _binds(policy))
    host = _host(_bound(agent.start())[0]["url"])
    at = edge.http("GET", host, f"/reflect?size={MIB // 2}")  # 2.5 MiB: within the bound
    assert at.status_code == 200 and len(at.content) == 5 * MIB // 2
    over = edge.http("GET", host, f"/reflect?size={MIB}")  # 5 MiB: past 4 MiB
    assert over.status_code == 502 and over.headers["ngrok-error-code"] == "ERR_NGROK_3004"
    assert b"rrrr" not in over.content


def test_an_action_that_reads_4_kib_first_leaves_the_whole_body_to_a_find_replace(
    edge, account, agents
):
    # owasp-crs-request with process_body asks for the body first (4 KiB of it); the body is
    # read once, as far as the greediest action of the policy needs (1 MiB here)
    policy = {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "owasp-crs-request",
                        "config": {"process_body": True, "on_error": "continue"},
                    },
                    REQUEST["on_http_request"][0]["actions"][0],
                ]
            }
        ]
    }
    agent = agents(edge, _credential(account)["token"], _binds(policy))
    host = _host(_bound(agent.start())[0]["url"])
    sent = b"x" * 10000 + b" secret"
    got = edge.http("POST", host, "/reflect", data=sent)
    # every "xxx" of the 10,000 deleted (REQUEST's last rule): the whole body was rewritten
    assert got.status_code == 200 and got.content == b"x $public"
