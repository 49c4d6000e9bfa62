"""Real HTTP traffic through the ingress to a real upstream, with traffic policy."""

from __future__ import annotations

import asyncio
import json

from agent_helpers import free_port_never_listening, running_agent, upstream_server

HEADERS_POLICY = {
    "on_http_request": [
        {"name": "tag request", "expressions": [],
         "actions": [{"type": "add-headers", "config": {"headers": {"x-from-policy": "req-tag"}}},
                     {"type": "remove-headers", "config": {"headers": ["x-secret"]}}]},
    ],
    "on_http_response": [
        {"name": "tag response", "expressions": ["res.status_code == 200"],
         "actions": [{"type": "add-headers", "config": {"headers": {"x-policy-response": "res-tag"}}},
                     {"type": "remove-headers", "config": {"headers": ["x-internal"]}}]},
    ],
}


def test_request_through_tunnel_reaches_upstream_with_policy_headers_both_ways(tmp_path):
    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            tunnel = await agent.create(forwards_to=upstream.hostport, domain="web.agent.localhost",
                                        policy=HEADERS_POLICY)
            assert tunnel["url"].startswith("http://web.agent.localhost:")
            status, headers, body = await agent.through(
                "web.agent.localhost", "/some/path?q=1&r=two", headers={"X-Secret": "pw", "X-Keep": "k"}
            )
            assert status == 200
            seen = json.loads(body)
            assert seen["path"] == "/some/path" and seen["query"] == "q=1&r=two"
            assert seen["headers"]["x-from-policy"] == "req-tag"          # added on request
            assert "x-secret" not in seen["headers"]                       # removed on request
            assert seen["headers"]["x-keep"] == "k"                        # others pass through
            assert seen["headers"]["x-forwarded-host"].startswith("web.agent.localhost")
            assert headers["X-Policy-Response"] == "res-tag"               # added on response
            assert "X-Internal" not in headers                             # removed on response
            assert headers["X-Upstream"] == "yes"

    asyncio.run(scenario())


def test_rule_runs_only_when_all_its_cel_expressions_are_true(tmp_path):
    policy = {
        "on_http_request": [
            {"name": "admin", "expressions": ["req.path.startsWith('/admin')", "req.method == 'POST'"],
             "actions": [{"type": "add-headers", "config": {"headers": {"x-admin": "1"}}}]},
            {"name": "by header", "expressions": ["'x-flag' in req.headers && req.headers['x-flag'][0] == 'on'"],
             "actions": [{"type": "add-headers", "config": {"headers": {"x-flagged": "${req.method} ${req.path}"}}}]},
            {"name": "query", "expressions": ["req.query_params['v'][0] == 'yes'"],  # errors when absent: false
             "actions": [{"type": "add-headers", "config": {"headers": {"x-query": "1"}}}]},
        ],
        "on_http_response": [
            {"name": "errors only", "expressions": ["res.status_code >= 400"],
             "actions": [{"type": "add-headers", "config": {"headers": {"x-was-error": "true"}}}]},
            {"name": "json", "expressions": ["res.headers['content-type'][0].startsWith('application/json')"],
             "actions": [{"type": "add-headers", "config": {"headers": {"x-json": "1"}}}]},
        ],
    }

    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="cel.agent.localhost", policy=policy)

            status, headers, body = await agent.through("cel.agent.localhost", "/admin/x", "POST", data=b"{}")
            seen = json.loads(body)
            assert status == 200 and seen["headers"]["x-admin"] == "1"
            assert "x-flagged" not in seen["headers"] and "x-query" not in seen["headers"]
            assert "X-Was-Error" not in headers and headers["X-Json"] == "1"

            status, headers, body = await agent.through("cel.agent.localhost", "/admin/x")  # GET: one false
            seen = json.loads(body)
            assert "x-admin" not in seen["headers"]

            status, headers, body = await agent.through(
                "cel.agent.localhost", "/p?v=yes&status=404", headers={"X-Flag": "on"}
            )
            seen = json.loads(body)
            assert status == 404
            assert seen["headers"]["x-flagged"] == "GET /p"
            assert seen["headers"]["x-query"] == "1"
            assert headers["X-Was-Error"] == "true"

    asyncio.run(scenario())


def test_default_policy_file_applies_to_tunnels_without_policy(tmp_path):
    policy_file = tmp_path / "default.json"
    policy_file.write_text(json.dumps({
        "on_http_request": [{"name": "d", "actions": [
            {"type": "add-headers", "config": {"headers": {"x-default-req": "1"}}}]}],
        "on_http_response": [{"name": "d", "actions": [
            {"type": "add-headers", "config": {"headers": {"x-default-res": "1"}}}]}],
    }))

    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path, default_policy_file=str(policy_file)) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="def.agent.localhost")
            await agent.create(forwards_to=upstream.hostport, domain="own.agent.localhost",
                               policy={"on_http_request": []})
            status, headers, body = await agent.through("def.agent.localhost")
            assert json.loads(body)["headers"]["x-default-req"] == "1"
            assert headers["X-Default-Res"] == "1"
            status, headers, body = await agent.through("own.agent.localhost")  # own policy replaces default
            assert "x-default-req" not in json.loads(body)["headers"]
            assert "X-Default-Res" not in headers

    asyncio.run(scenario())


def test_deny_action_refuses_matching_requests_without_reaching_upstream(tmp_path):
    policy = {"on_http_request": [{"name": "block admin", "expressions": ["req.path == '/admin'"],
                                   "actions": [{"type": "deny", "config": {"status_code": 403}}]}]}

    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="deny.agent.localhost", policy=policy)
            status, _, body = await agent.through("deny.agent.localhost", "/admin")
            assert status == 403
            assert json.loads(body)["error_code"] == "ERR_POLICY_DENIED"
            assert upstream.seen == []
            status, _, _ = await agent.through("deny.agent.localhost", "/public")
            assert status == 200

    asyncio.run(scenario())


def test_request_body_and_method_are_forwarded(tmp_path):
    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="body.agent.localhost")
            payload = "x" * 2_000_000
            status, _, body = await agent.through("body.agent.localhost", "/upload", "PUT", data=payload.encode())
            seen = json.loads(body)
            assert status == 200 and seen["method"] == "PUT" and seen["body"] == payload

    asyncio.run(scenario())


def test_streamed_response_arrives_whole(tmp_path):
    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="s.agent.localhost")
            status, _, body = await agent.through("s.agent.localhost", "/stream?n=50")
            assert status == 200
            assert body.decode().splitlines() == [f"chunk{i}" for i in range(50)]

    asyncio.run(scenario())


def test_delete_stops_traffic_at_once_with_404_from_the_ingress(tmp_path):
    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="gone.agent.localhost")
            assert (await agent.through("gone.agent.localhost"))[0] == 200  # keeps the connection alive
            status, _, _ = await agent.call("DELETE", "/tunnels/gone")
            assert status == 204
            hits = len(upstream.seen)
            status, headers, body = await agent.through("gone.agent.localhost")
            assert status == 404
            error = json.loads(body)
            assert error["error_code"] == "ERR_TUNNEL_NOT_FOUND"
            assert "gone.agent.localhost" in error["msg"]
            assert "X-Upstream" not in headers
            assert len(upstream.seen) == hits  # the upstream never saw it

    asyncio.run(scenario())


def test_delete_cuts_a_response_that_is_still_streaming(tmp_path):
    async def scenario():
        async with upstream_server() as upstream, running_agent(tmp_path) as agent:
            await agent.create(forwards_to=upstream.hostport, domain="long.agent.localhost")
            headers = {"Host": f"long.agent.localhost:{agent.agent.ingress_port}"}
            received = b""
            async with agent.http.get(agent.ingress + "/stream?n=200&delay=0.02", headers=headers) as resp:
                received += await resp.content.readline()
                status, _, _ = await agent.call("DELETE", "/tunnels/long")
                assert status == 204
                try:
                    received += await asyncio.wait_for(resp.content.read(), timeout=5)
                except Exception:
                    pass  # the connection is cut: that is the point
            assert received.count(b"\n") < 200

    asyncio.run(scenario())


def test_unknown_host_gets_404_naming_it(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            status, _, body = await agent.through("nobody.agent.localhost")
            assert status == 404
            assert "nobody.agent.localhost" in json.loads(body)["msg"]

    asyncio.run(scenario())


def test_upstream_down_gives_502_with_clear_message(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            port = free_port_never_listening()
            await agent.create(forwards_to=f"127.0.0.1:{port}", domain="down.agent.localhost")
            status, _, body = await agent.through("down.agent.localhost")
            error = json.loads(body)
            assert status == 502 and error["status_code"] == 502
            assert error["error_code"] == "ERR_UPSTREAM_UNAVAILABLE"
            assert f"127.0.0.1:{port}" in error["msg"]

    asyncio.run(scenario())


def test_tunnel_to_the_ingress_itself_is_stopped_as_a_loop(tmp_path):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            # The upstream Host is forwards_to ("localhost:<ingress>"), which this tunnel serves.
            await agent.create(forwards_to=f"localhost:{agent.agent.ingress_port}", domain="localhost")
            status, _, body = await agent.through("localhost")
            assert status == 508
            assert json.loads(body)["error_code"] == "ERR_LOOP_DETECTED"

    asyncio.run(scenario())
