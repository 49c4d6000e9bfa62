"""Traffic policy through the agent: the document goes with the endpoint to the edge (the
SDK's ``traffic_policy``), the edge enforces it on the public traffic, and the edge's answer
decides what is valid (a refused document saves nothing)."""

from __future__ import annotations

import json
import time

import pytest

from stacks.paths import AGENT_DIR, BASE_DOMAIN

POLICY = {
    "on_http_request": [
        {
            "name": "tag",
            "expressions": ["req.method == 'GET'"],
            "actions": [
                {"type": "add-headers", "config": {"headers": {"x-from-policy": "request"}}}
            ],
        }
    ],
    "on_http_response": [
        {
            "name": "mark",
            "expressions": [],
            "actions": [
                {"type": "add-headers", "config": {"headers": {"x-policy-response": "yes"}}}
            ],
        }
    ],
}


def _name() -> str:
    return f"t{time.time_ns() % 10**12}"


def test_a_given_policy_is_enforced_by_the_edge_and_shown_once_encoded(
    stack, agents, credential, upstream
):
    agent = agents(credential["token"])
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream, "policy": POLICY})
    assert resp.status == 200, resp
    assert resp.json["policy"] == POLICY
    listed = agent.call("GET", "/tunnels").json[0]
    assert listed["policy"] == POLICY and json.loads(listed["traffic_policy"]) == POLICY
    through = stack.public("GET", resp.json["url"], "/p")
    assert through.status == 200, through
    assert through.json["headers"]["x-from-policy"] == "request"  # the upstream saw it
    assert through.headers["x-policy-response"] == "yes"  # the client sees it
    posted = stack.public("POST", resp.json["url"], "/p", data=b"{}")
    assert "x-from-policy" not in posted.json["headers"]  # the expression did not match


def test_without_a_policy_the_default_file_applies_and_policy_is_null(
    stack, agents, credential, upstream
):
    default = AGENT_DIR / "examples" / "default-policy.yaml"
    agent = agents(credential["token"], AGENT_DEFAULT_POLICY_FILE=str(default))
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream})
    assert resp.status == 200, resp
    assert resp.json["policy"] is None
    import yaml

    expected = yaml.safe_load(default.read_text())
    assert json.loads(agent.call("GET", "/tunnels").json[0]["traffic_policy"]) == expected
    through = stack.public("GET", resp.json["url"], "/d")
    assert through.json["headers"]["x-tunnel-agent"] == "1"
    assert through.headers["x-served-by"] == "tunnel-agent"


def test_tunnels_without_their_own_policy_follow_the_default_file_after_a_restart(
    stack, agents, credential, upstream, tmp_path
):
    first = tmp_path / "first.json"
    first.write_text(json.dumps(POLICY))
    agent = agents(credential["token"], AGENT_DEFAULT_POLICY_FILE=str(first))
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    assert stack.public("GET", created["url"]).headers.get("x-policy-response") == "yes"
    agent.stop()
    first.write_text(json.dumps({"on_http_response": []}))
    agent.start()
    assert "x-policy-response" not in stack.public("GET", created["url"]).headers
    assert json.loads(agent.call("GET", "/tunnels").json[0]["traffic_policy"]) == {
        "on_http_response": []
    }


@pytest.mark.parametrize(
    "policy",
    [
        {"on_http_request": [{"actions": [{"type": "no-such-action"}]}]},
        {
            "on_http_request": [
                {
                    "expressions": ["req.method =="],
                    "actions": [{"type": "add-headers", "config": {"headers": {"a": "b"}}}],
                }
            ]
        },
        {"on_http_request": [{"actions": [{"type": "add-headers", "config": {"headers": "x"}}]}]},
        {
            "on_http_request": [
                {
                    "expressions": ["req.no_such_member == 'x'"],
                    "actions": [{"type": "add-headers", "config": {"headers": {"a": "b"}}}],
                }
            ]
        },
        {
            "on_http_request": [
                {
                    "actions": [
                        {"type": "add-headers", "config": {"headers": {"a": "b"}, "extra": 1}}
                    ]
                }
            ]
        },
    ],
    ids=["unknown-action", "bad-expression", "bad-config", "unknown-member", "unknown-config-key"],
)
def test_a_policy_the_edge_refuses_is_400_with_the_edge_code_and_nothing_is_saved(
    stack, agents, credential, upstream, policy
):
    domain = f"{_name()}.{BASE_DOMAIN}"
    agent = agents(credential["token"])
    resp = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "domain": domain, "policy": policy}
    )
    assert resp.status == 400, resp
    assert resp.json["error_code"].startswith("ERR_NGROK_"), resp
    assert agent.call("GET", "/tunnels").json == []
    assert not agent.tunnels_file.exists()
    assert stack.public("GET", f"https://{domain}:{stack.https_port}").status == 404


def test_an_empty_policy_object_is_sent_as_no_policy_and_listed_as_given(
    stack, agents, credential, upstream
):
    agent = agents(credential["token"])
    resp = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "policy": {"on_http_request": []}}
    )
    assert resp.status == 200, resp
    assert resp.json["policy"] == {"on_http_request": []}
    assert agent.call("GET", "/tunnels").json[0]["traffic_policy"] == '{"on_http_request": []}'
    assert stack.public("GET", resp.json["url"]).status == 200
