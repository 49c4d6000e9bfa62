"""Pure pieces: validators, configuration, policy compilation, the optional ngrok driver."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
from agent_helpers import running_agent
from multidict import CIMultiDict

from tunnel_agent.config import load_settings
from tunnel_agent.errors import StartupError
from tunnel_agent.policy import PolicyError, build_activation, compile_policy
from tunnel_agent.validation import HostnameError, normalize_hostname, parse_hostport


@pytest.mark.parametrize(
    "value, expected",
    [("localhost:80", ("localhost", 80)), ("127.0.0.1:8080", ("127.0.0.1", 8080)),
     ("[::1]:9000", ("::1", 9000)), ("my-app.internal:65535", ("my-app.internal", 65535))],
)
def test_parse_hostport_accepts_host_and_port(value, expected):
    assert parse_hostport(value) == expected


@pytest.mark.parametrize("value", ["", "localhost", ":80", "host:", "host:0", "host:99999", "[::1]",
                                   "::1:80", "a/b:1", "https://h:1", "under_score:1"])
def test_parse_hostport_rejects_malformed(value):
    with pytest.raises(ValueError):
        parse_hostport(value)


def test_normalize_hostname_lowercases_and_drops_trailing_dot():
    assert normalize_hostname("App.Agent.LOCALHOST.") == "app.agent.localhost"


@pytest.mark.parametrize("value", ["", ".", "a..b", "-a.b", "a-.b", "a b", "1.2.3.4", "x" * 64, "é.localhost"])
def test_normalize_hostname_rejects_invalid(value):
    with pytest.raises(HostnameError):
        normalize_hostname(value)


def test_settings_come_from_env_and_flags_override():
    env = {"AGENT_API_PORT": "5000", "AGENT_INGRESS_PORT": "0", "AGENT_BASE_DOMAIN": "Tun.Localhost",
           "AGENT_API_TOKEN": "t", "AGENT_TUNNELS_FILE": "/x/t.json"}
    settings = load_settings(["--api-port", "5001"], env)
    assert (settings.api_port, settings.ingress_port, settings.base_domain) == (5001, 0, "tun.localhost")
    assert settings.api_token == "t" and settings.tunnels_file == "/x/t.json"
    assert settings.host == "127.0.0.1"  # loopback by default
    assert load_settings([], {}).api_token is None


@pytest.mark.parametrize("env", [{"AGENT_API_PORT": "x"}, {"AGENT_INGRESS_PORT": "70000"},
                                 {"AGENT_BASE_DOMAIN": "bad domain"}, {"AGENT_UPSTREAM_TIMEOUT": "-1"}])
def test_bad_settings_raise_startup_error(env):
    with pytest.raises(StartupError):
        load_settings([], env)


def _apply(policy, method="GET", path="/", headers=None):
    compiled = compile_policy(policy)
    out = CIMultiDict(headers or {})
    compiled.apply_request(out, lambda: build_activation(
        method=method, url="http://h" + path, path=path, query="", query_params={}, host="h",
        headers=(headers or {}).items(), client_ip="127.0.0.1"))
    return out


def test_later_rules_see_and_override_earlier_ones_in_order():
    policy = {"on_http_request": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"x-a": "1", "x-b": "1"}}}]},
        {"actions": [{"type": "remove-headers", "config": {"headers": ["X-B"]}},
                     {"type": "add-headers", "config": {"headers": {"x-a": "2"}}}]},
    ]}
    out = _apply(policy, headers={"X-A": "client"})
    assert out.getall("x-a") == ["2"] and "x-b" not in out


def test_expression_that_is_not_boolean_counts_as_false():
    policy = {"on_http_request": [{"expressions": ["req.path"],
                                   "actions": [{"type": "add-headers", "config": {"headers": {"x": "1"}}}]}]}
    assert "x" not in _apply(policy)


def test_policy_error_names_the_element():
    with pytest.raises(PolicyError) as caught:
        compile_policy({"on_http_response": [{"actions": [{"type": "add-headers", "config": {}}]}]})
    assert caught.value.path == "policy.on_http_response[0].actions[0].config.headers"


def test_ngrok_driver_publishes_and_stops_tunnels_through_the_sdk(tmp_path, monkeypatch):
    """A stand-in for the ngrok SDK with the calls the driver makes."""
    calls = []

    class Listener:
        def __init__(self, url):
            self._url = url

        def url(self):
            return self._url

    async def forward(addr, **options):
        calls.append(("forward", addr, options))
        return Listener(f"https://{options.get('domain', 'abc123.ngrok.app')}")

    def disconnect(url):
        calls.append(("disconnect", url))

    fake = types.ModuleType("ngrok")
    fake.forward, fake.disconnect = forward, disconnect
    monkeypatch.setitem(sys.modules, "ngrok", fake)

    async def scenario():
        async with running_agent(tmp_path, ngrok_authtoken="tok") as agent:
            created = await agent.create(forwards_to="127.0.0.1:80", domain="me.example.com")
            generated = await agent.create(forwards_to="127.0.0.1:81")
            assert created["url"] == "https://me.example.com"
            assert generated["url"] == "https://abc123.ngrok.app"
            status, _, _ = await agent.call("DELETE", "/tunnels/me.example.com")
            assert status == 204

    asyncio.run(scenario())
    forward_calls = [c for c in calls if c[0] == "forward"]
    assert forward_calls[0][1] == "127.0.0.1:80"
    assert forward_calls[0][2]["authtoken"] == "tok" and forward_calls[0][2]["domain"] == "me.example.com"
    assert "domain" not in forward_calls[1][2]
    assert '"on_http_request"' in forward_calls[0][2]["traffic_policy"]
    assert ("disconnect", "https://me.example.com") in calls


def test_ngrok_authtoken_without_the_sdk_stops_the_agent(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ngrok", None)  # import fails

    async def scenario():
        with pytest.raises(StartupError, match="pip install ngrok"):
            async with running_agent(tmp_path, ngrok_authtoken="tok"):
                pass

    asyncio.run(scenario())


def test_agent_package_never_imports_the_management_service():
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "tunnel_agent"
    for source in package.glob("*.py"):
        assert not re.search(r"^\s*(import|from)\s+chalicelib", source.read_text(), re.M), source


def test_ngrok_authtoken_with_the_api_client_package_instead_of_the_sdk_stops_the_agent(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ngrok", types.ModuleType("ngrok"))  # like ngrok-api: no forward()

    async def scenario():
        with pytest.raises(StartupError, match="not the agent SDK"):
            async with running_agent(tmp_path, ngrok_authtoken="tok"):
                pass

    asyncio.run(scenario())


def test_example_default_policy_file_is_valid():
    from pathlib import Path

    from tunnel_agent.policy import load_default_policy

    example = Path(__file__).resolve().parent.parent / "examples" / "default-policy.yaml"
    assert load_default_policy(str(example)).document["on_http_request"]
