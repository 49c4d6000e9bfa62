"""REST API behaviour and every error it returns."""

from __future__ import annotations

import asyncio
import json

import pytest
from agent_helpers import running_agent

ERROR_KEYS = {"error_code", "status_code", "msg", "details"}


def assert_error(status, payload, expected_status, code=None, field=None):
    assert status == expected_status, payload
    assert set(payload) == ERROR_KEYS
    assert payload["status_code"] == expected_status
    assert payload["error_code"].startswith("ERR_")
    assert all(isinstance(v, str) for v in payload["details"].values())
    assert payload["details"]["operation_id"].startswith("op_")
    if code:
        assert payload["error_code"] == code
    if field:
        assert payload["details"].get("field") == field, payload
        assert field in payload["msg"]


def test_list_is_empty_at_first(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, payload, _ = await agent.call("GET", "/tunnels")
            assert (status, payload) == (200, [])

    asyncio.run(scenario())


def test_create_without_domain_generates_one_under_base_domain(tmp_path):
    async def scenario():
        async with running_agent(tmp_path, base_domain="tun.localhost") as agent:
            status, payload, _ = await agent.call("POST", "/tunnels", {"forwards_to": "127.0.0.1:9"})
            assert status == 200
            assert set(payload) == {"url", "protocol", "forwards_to", "domain", "policy"}
            assert payload["protocol"] == "http"
            assert payload["forwards_to"] == "127.0.0.1:9"
            assert payload["policy"] is None
            assert payload["domain"].endswith(".tun.localhost")
            assert payload["url"] == f"http://{payload['domain']}:{agent.agent.ingress_port}"

    asyncio.run(scenario())


def test_list_shows_default_policy_as_json_string_when_none_given(tmp_path):
    policy_file = tmp_path / "default.yaml"
    policy_file.write_text(
        "on_http_response:\n"
        "  - name: tag\n"
        "    actions:\n"
        "      - type: add-headers\n"
        "        config: {headers: {x-default: 'yes'}}\n"
    )

    async def scenario():
        async with running_agent(tmp_path, default_policy_file=str(policy_file)) as agent:
            created = await agent.create(forwards_to="localhost:8000", domain="d.agent.localhost")
            assert created["policy"] is None
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert len(listed) == 1
            entry = listed[0]
            assert set(entry) == {"url", "protocol", "forwards_to", "domain", "policy", "traffic_policy"}
            assert entry["policy"] is None
            assert isinstance(entry["traffic_policy"], str)
            effective = json.loads(entry["traffic_policy"])
            assert effective["on_http_response"][0]["name"] == "tag"

    asyncio.run(scenario())


def test_given_policy_is_returned_as_object_and_listed_once_encoded(tmp_path):
    policy = {
        "on_http_request": [
            {"name": "add", "expressions": ["req.method == 'GET'"],
             "actions": [{"type": "add-headers", "config": {"headers": {"x-a": "1"}}}]}
        ]
    }

    async def scenario():
        async with running_agent(tmp_path) as agent:
            created = await agent.create(forwards_to="127.0.0.1:9", domain="p.agent.localhost", policy=policy)
            assert created["policy"] == policy
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert listed[0]["policy"] == policy
            assert json.loads(listed[0]["traffic_policy"]) == policy  # not double-encoded

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "forwards_to"),
        ({"forwards_to": None}, "forwards_to"),
        ({"forwards_to": ""}, "forwards_to"),
        ({"forwards_to": "127.0.0.1"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:0"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:70000"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:http"}, "forwards_to"),
        ({"forwards_to": "http://127.0.0.1:80"}, "forwards_to"),
        ({"forwards_to": "bad host:80"}, "forwards_to"),
        ({"forwards_to": "::1:80"}, "forwards_to"),
        ({"forwards_to": 8080}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:80", "protocol": "tcp"}, "protocol"),
        ({"forwards_to": "127.0.0.1:80", "protocol": 1}, "protocol"),
        ({"forwards_to": "127.0.0.1:80", "domain": "bad_domain!"}, "domain"),
        ({"forwards_to": "127.0.0.1:80", "domain": "-a.localhost"}, "domain"),
        ({"forwards_to": "127.0.0.1:80", "domain": "10.0.0.1"}, "domain"),
        ({"forwards_to": "127.0.0.1:80", "domain": "a" * 64 + ".localhost"}, "domain"),
        ({"forwards_to": "127.0.0.1:80", "domain": 5}, "domain"),
        ({"forwards_to": "127.0.0.1:80", "policy": "on_http_request: []"}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_tcp_connect": []}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": {}}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"actions": [{"type": "rate-limit", "config": {}}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"expressions": ["req.method =="], "actions": [{"type": "deny"}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"expressions": ["res.status_code == 200"], "actions": [{"type": "deny"}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"actions": [{"type": "add-headers", "config": {"headers": ["x-a"]}}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"bad name": "v"}}}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"x-a": "a\r\nb"}}}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_response": [
            {"actions": [{"type": "remove-headers", "config": {"headers": {"x-a": "1"}}}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_response": [
            {"actions": [{"type": "deny"}]}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"name": "r", "expressions": [], "actions": [], }]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "policy": {"on_http_request": [
            {"actions": [{"type": "deny"}], "when": "always"}]}}, "policy"),
        ({"forwards_to": "127.0.0.1:80", "url": "http://x"}, "url"),
    ],
)
def test_create_with_invalid_input_returns_400_naming_the_field_and_changes_nothing(tmp_path, body, field):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:1", domain="keep.agent.localhost")
            before = (tmp_path / "tunnels.json").read_bytes()
            status, payload, _ = await agent.call("POST", "/tunnels", body)
            assert_error(status, payload, 400, "ERR_INVALID_REQUEST", field)
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert [t["domain"] for t in listed] == ["keep.agent.localhost"]
            assert (tmp_path / "tunnels.json").read_bytes() == before

    asyncio.run(scenario())


def test_invalid_cel_message_names_the_expression(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            policy = {"on_http_request": [{"expressions": ["req.path ==="], "actions": [{"type": "deny"}]}]}
            status, payload, _ = await agent.call(
                "POST", "/tunnels", {"forwards_to": "127.0.0.1:80", "policy": policy}
            )
            assert_error(status, payload, 400, field="policy")
            assert "policy.on_http_request[0].expressions[0]" in payload["msg"]
            assert "req.path ===" in payload["msg"]

    asyncio.run(scenario())


@pytest.mark.parametrize("raw", [b"not json", b"", b"[1, 2]", b'"text"', b"{\"forwards_to\": "])
def test_create_with_body_that_is_not_a_json_object_returns_400(tmp_path, raw):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, payload, _ = await agent.call("POST", "/tunnels", data=raw)
            assert_error(status, payload, 400, "ERR_INVALID_REQUEST")

    asyncio.run(scenario())


def test_create_accepts_json_sent_with_a_form_content_type(tmp_path):
    # curl -d '{...}' sends application/x-www-form-urlencoded
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, payload, _ = await agent.call(
                "POST", "/tunnels", data=b'{"forwards_to": "127.0.0.1:80"}',
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert status == 200, payload

    asyncio.run(scenario())


def test_create_with_a_domain_already_served_returns_409(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:80", domain="dup.agent.localhost")
            status, payload, _ = await agent.call(
                "POST", "/tunnels", {"forwards_to": "127.0.0.1:81", "domain": "DUP.agent.localhost."}
            )
            assert_error(status, payload, 409, "ERR_CONFLICT", "domain")
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert [t["forwards_to"] for t in listed] == ["127.0.0.1:80"]

    asyncio.run(scenario())


def test_domain_is_lower_cased(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            created = await agent.create(forwards_to="127.0.0.1:80", domain="MiXed.Agent.Localhost")
            assert created["domain"] == "mixed.agent.localhost"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "url_part",
    ["app.agent.localhost", "APP.agent.localhost", "app", "app.agent.localhost:8080",
     "http%3A%2F%2Fapp.agent.localhost%3A8080"],
)
def test_delete_by_host_or_unique_label_returns_204_and_removes_it(tmp_path, url_part):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:80", domain="app.agent.localhost")
            await agent.create(forwards_to="127.0.0.1:81", domain="other.agent.localhost")
            async with agent.http.delete(agent.api + "/tunnels/" + url_part) as resp:
                assert resp.status == 204
                assert await resp.read() == b""
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert [t["domain"] for t in listed] == ["other.agent.localhost"]
            saved = json.loads((tmp_path / "tunnels.json").read_text())
            assert [t["domain"] for t in saved["tunnels"]] == ["other.agent.localhost"]

    asyncio.run(scenario())


@pytest.mark.parametrize("url_part", ["ap", "app.agent", "agent.localhost", "pp", "nothing", "localhost"])
def test_delete_never_matches_a_substring_and_returns_404(tmp_path, url_part):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:80", domain="app.agent.localhost")
            status, payload, _ = await agent.call("DELETE", f"/tunnels/{url_part}")
            assert_error(status, payload, 404, "ERR_TUNNEL_NOT_FOUND")
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert len(listed) == 1

    asyncio.run(scenario())


def test_delete_by_a_label_shared_by_two_tunnels_returns_409_and_deletes_nothing(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:80", domain="api.one.localhost")
            await agent.create(forwards_to="127.0.0.1:81", domain="api.two.localhost")
            status, payload, _ = await agent.call("DELETE", "/tunnels/api")
            assert_error(status, payload, 409, "ERR_CONFLICT")
            assert "api.one.localhost" in payload["msg"] and "api.two.localhost" in payload["msg"]
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert len(listed) == 2

    asyncio.run(scenario())


def test_unknown_path_returns_404_json_and_wrong_method_405_json(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, payload, _ = await agent.call("GET", "/nope")
            assert_error(status, payload, 404, "ERR_NOT_FOUND")
            status, payload, headers = await agent.call("PUT", "/tunnels", {})
            assert_error(status, payload, 405, "ERR_METHOD_NOT_ALLOWED")
            assert "GET" in headers["Allow"] and "POST" in headers["Allow"]
            status, payload, _ = await agent.call("GET", "/tunnels/abc")
            assert_error(status, payload, 405, "ERR_METHOD_NOT_ALLOWED")

    asyncio.run(scenario())


def test_body_too_large_returns_413_json(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            big = b'{"forwards_to": "127.0.0.1:80", "domain": "' + b"a" * 300_000 + b'"}'
            status, payload, _ = await agent.call("POST", "/tunnels", data=big)
            assert_error(status, payload, 413, "ERR_PAYLOAD_TOO_LARGE")

    asyncio.run(scenario())


def test_with_a_token_configured_requests_without_the_right_bearer_get_401(tmp_path):
    async def scenario():
        async with running_agent(tmp_path, api_token="s3cret-token") as agent:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"},
                            {"Authorization": "Basic s3cret-token"}, {"Authorization": "Bearer "}):
                for method, path, body in (("GET", "/tunnels", None),
                                           ("POST", "/tunnels", {"forwards_to": "127.0.0.1:80"}),
                                           ("DELETE", "/tunnels/x", None),
                                           ("GET", "/unknown", None)):
                    status, payload, resp_headers = await agent.call(method, path, body, headers=headers)
                    assert_error(status, payload, 401, "ERR_UNAUTHORIZED")
                    assert resp_headers["WWW-Authenticate"].startswith("Bearer")
            good = {"Authorization": "Bearer s3cret-token"}
            status, payload, _ = await agent.call("POST", "/tunnels", {"forwards_to": "127.0.0.1:80"}, headers=good)
            assert status == 200
            status, listed, _ = await agent.call("GET", "/tunnels", headers={"Authorization": "bearer s3cret-token"})
            assert status == 200 and len(listed) == 1
            assert (await agent.call("GET", "/healthz"))[0] == 200  # liveness stays open

    asyncio.run(scenario())


def test_without_a_token_configured_the_api_is_open(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, _, _ = await agent.call("GET", "/tunnels", headers={"Authorization": "Bearer anything"})
            assert status == 200

    asyncio.run(scenario())


def test_thirty_concurrent_creates_lose_no_tunnel(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            bodies = [{"forwards_to": f"127.0.0.1:{1000 + i}"} for i in range(30)]
            bodies += [{"forwards_to": "127.0.0.1:80", "domain": f"c{i}.agent.localhost"} for i in range(30)]
            results = await asyncio.gather(*(agent.call("POST", "/tunnels", b) for b in bodies))
            assert all(status == 200 for status, _, _ in results)
            domains = {payload["domain"] for _, payload, _ in results}
            assert len(domains) == 60
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert {t["domain"] for t in listed} == domains
            saved = json.loads((tmp_path / "tunnels.json").read_text())
            assert {t["domain"] for t in saved["tunnels"]} == domains

    asyncio.run(scenario())


def test_concurrent_creates_of_the_same_domain_yield_one_200_and_409s(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            body = {"forwards_to": "127.0.0.1:80", "domain": "same.agent.localhost"}
            results = await asyncio.gather(*(agent.call("POST", "/tunnels", body) for _ in range(10)))
            statuses = sorted(status for status, _, _ in results)
            assert statuses == [200] + [409] * 9

    asyncio.run(scenario())
