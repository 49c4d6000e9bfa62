"""The tunnels file: atomic saves, strict loads, and recreation when the process restarts."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import pytest
from agent_helpers import (
    agent_env,
    run_agent_expecting_failure,
    running_agent,
    start_agent_process,
    upstream_server,
)

from tunnel_agent.errors import StartupError
from tunnel_agent.store import TunnelsFile

POLICY = {"on_http_response": [{"name": "mark", "expressions": [],
                                "actions": [{"type": "add-headers", "config": {"headers": {"x-mark": "m"}}}]}]}


def _http(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_crash_during_save_leaves_previous_file_intact_and_changes_nothing(tmp_path, monkeypatch, failing):
    async def scenario():
        async with running_agent(tmp_path) as agent:
            await agent.create(forwards_to="127.0.0.1:80", domain="first.agent.localhost")
            path = tmp_path / "tunnels.json"
            before = path.read_bytes()

            def crash(*args, **kwargs):
                raise OSError(28, "No space left on device")

            monkeypatch.setattr(os, failing, crash)
            status, payload, _ = await agent.call(
                "POST", "/tunnels", {"forwards_to": "127.0.0.1:81", "domain": "second.agent.localhost"}
            )
            assert status == 500 and payload["error_code"] == "ERR_PERSIST_FAILED"
            status, payload, _ = await agent.call("DELETE", "/tunnels/first")
            assert status == 500
            monkeypatch.undo()

            assert path.read_bytes() == before
            assert [p.name for p in tmp_path.iterdir()] == ["tunnels.json"]  # no temp file left
            _, listed, _ = await agent.call("GET", "/tunnels")
            assert [t["domain"] for t in listed] == ["first.agent.localhost"]  # memory matches file
            status, headers, _ = await agent.through("first.agent.localhost")
            assert status != 404  # still served (its upstream is down: 502)

    asyncio.run(scenario())


def test_save_writes_a_complete_new_file_through_a_temp_file_in_the_same_dir(tmp_path, monkeypatch):
    store = TunnelsFile(tmp_path / "sub" / "tunnels.json")
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((os.path.dirname(src), os.path.basename(src), os.fspath(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store.save([{"domain": "a.localhost", "protocol": "http", "forwards_to": "h:1", "policy": None}])
    assert calls[0][0] == str(tmp_path / "sub")
    assert calls[0][1].startswith(".tunnels.json.") and calls[0][1].endswith(".tmp")
    assert store.load()[0]["domain"] == "a.localhost"


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b"\xff\xfe", b"[]", b'{"version": 1, "tunnels": {}}', b'{"version": 99, "tunnels": []}',
     b'{"version": 1, "tunnels": [{"domain": "a.localhost"}]}',
     b'{"version": 1, "tunnels": [{"domain": "bad domain", "protocol": "http", "forwards_to": "h:1", "policy": null}]}',
     b'{"version": 1, "tunnels": [{"domain": "a.localhost", "protocol": "http", "forwards_to": "h:1",'
     b' "policy": {"on_http_request": [{"actions": [{"type": "explode"}]}]}}]}'],
)
def test_corrupt_tunnels_file_stops_the_agent_naming_the_file_and_leaves_it_untouched(tmp_path, content):
    path = tmp_path / "tunnels.json"
    path.write_bytes(content)

    async def scenario():
        with pytest.raises(StartupError) as caught:
            async with running_agent(tmp_path):
                pass
        assert str(path) in str(caught.value)

    asyncio.run(scenario())
    assert path.read_bytes() == content


def test_corrupt_tunnels_file_makes_the_process_exit_with_a_message(tmp_path):
    path = tmp_path / "tunnels.json"
    path.write_bytes(b'{"version": 1, "tunnels": [')
    result = run_agent_expecting_failure(agent_env(path))
    assert result.returncode == 2
    assert str(path) in result.stderr and "corrupt" in result.stderr
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == b'{"version": 1, "tunnels": ['


def test_unreadable_tunnels_file_stops_the_agent(tmp_path):
    path = tmp_path / "tunnels.json"
    path.mkdir()  # a directory where the file should be: unreadable as a file

    async def scenario():
        with pytest.raises(StartupError, match="cannot be read"):
            async with running_agent(tmp_path):
                pass

    asyncio.run(scenario())
    assert path.is_dir()


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("p.yaml", "on_http_request: [\n", "not valid JSON/YAML"),
        ("p.json", '{"on_http_request": [{"actions": [{"type": "nope"}]}]}', "unknown action type"),
        ("p.yaml", "on_tcp_connect: []\n", "unknown phase"),
        ("p.yaml", "on_http_request:\n  - expressions: ['req.method ==']\n    actions: [{type: deny}]\n",
         "invalid CEL"),
        ("missing.yaml", None, "cannot be read"),
    ],
)
def test_invalid_default_policy_file_stops_the_process_with_a_clear_message(tmp_path, name, content, words):
    policy = tmp_path / name
    if content is not None:
        policy.write_text(content)
    result = run_agent_expecting_failure(
        agent_env(tmp_path / "tunnels.json", AGENT_DEFAULT_POLICY_FILE=str(policy))
    )
    assert result.returncode == 2
    assert str(policy) in result.stderr and words in result.stderr, result.stderr
    assert not (tmp_path / "tunnels.json").exists()


def test_restarted_process_recreates_tunnels_from_the_file_and_traffic_flows_again(tmp_path):
    tunnels_file = tmp_path / "state" / "tunnels.json"
    env = agent_env(tunnels_file, AGENT_API_TOKEN="tok")
    auth = {"Authorization": "Bearer tok", "Content-Type": "application/json"}

    async def scenario():
        async with upstream_server() as upstream:
            first = await asyncio.to_thread(start_agent_process, env)
            try:
                api = f"http://127.0.0.1:{first.api_port}"
                for body in ({"forwards_to": upstream.hostport, "domain": "keep.agent.localhost", "policy": POLICY},
                             {"forwards_to": upstream.hostport}):
                    status, _, raw = await asyncio.to_thread(_http, "POST", api + "/tunnels", body, auth)
                    assert status == 200, raw
                _, _, before = await asyncio.to_thread(_http, "GET", api + "/tunnels", None, auth)
            finally:
                assert await asyncio.to_thread(first.stop) == 0

            second = await asyncio.to_thread(start_agent_process, env)
            try:
                api = f"http://127.0.0.1:{second.api_port}"
                _, _, after = await asyncio.to_thread(_http, "GET", api + "/tunnels", None, auth)
                def strip(items):
                    return [{k: v for k, v in t.items() if k != "url"} for t in json.loads(items)]
                assert strip(after) == strip(before)
                assert len(json.loads(after)) == 2
                ingress = f"http://127.0.0.1:{second.ingress_port}/after-restart"
                status, headers, raw = await asyncio.to_thread(
                    _http, "GET", ingress, None, {"Host": "keep.agent.localhost"}
                )
                assert status == 200
                assert headers["x-mark"] == "m"
                assert json.loads(raw)["path"] == "/after-restart"
            finally:
                second.stop()

    asyncio.run(scenario())
