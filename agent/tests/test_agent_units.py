"""Units without the stack: validators, settings, policy outline, the tunnels file, the SDK
error parsing, and the TunnelService's ordering rules against a stand-in edge."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from tunnel_agent.config import load_settings
from tunnel_agent.errors import EdgeRefused, StartupError
from tunnel_agent.policy import PolicyError, check_outline, load_default_policy
from tunnel_agent.sdk import sdk_error
from tunnel_agent.store import TunnelsFile
from tunnel_agent.tunnels import TunnelService
from tunnel_agent.errors import PersistFailed
from tunnel_agent.validation import HostnameError, normalize_hostname, parse_hostport

AGENT_DIR = Path(__file__).resolve().parent.parent


# ---- validators -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        ("localhost:80", ("localhost", 80)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:9000", ("::1", 9000)),
        ("my-app.internal:65535", ("my-app.internal", 65535)),
        ("h:1", ("h", 1)),
    ],
)
def test_parse_hostport_accepts_host_and_port(value, expected):
    assert parse_hostport(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "localhost",
        ":80",
        "host:",
        "host:0",
        "host:65536",
        "[::1]",
        "::1:80",
        "a/b:1",
        "https://h:1",
        "under_score:1",
        "127.0.0.1:\u0669\u0665\u0660\u0661",
        "h:\uff18\uff10",
        "h:+80",
        "h:8 0",
        "a\n:80",
    ],
)
def test_parse_hostport_rejects_malformed_and_non_ascii_digit_ports(value):
    with pytest.raises(ValueError):
        parse_hostport(value)


def test_hostname_labels_of_63_characters_pass_and_64_fail():
    assert normalize_hostname("x" * 63 + ".localhost") == "x" * 63 + ".localhost"
    with pytest.raises(HostnameError):
        normalize_hostname("x" * 64 + ".localhost")


def test_normalize_hostname_lowercases_and_drops_trailing_dot():
    assert normalize_hostname("App.Tunnels.LOCALHOST.") == "app.tunnels.localhost"


@pytest.mark.parametrize(
    "value",
    [
        "",
        ".",
        "a..b",
        "-a.b",
        "a-.b",
        "a b",
        "1.2.3.4",
        "x" * 64,
        "\u00e9.localhost",
        "a\nb.localhost",
    ],
)
def test_normalize_hostname_rejects_invalid(value):
    with pytest.raises(HostnameError):
        normalize_hostname(value)


# ---- settings ---------------------------------------------------------------------------
def test_settings_come_from_env_and_flags_override(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    env = {
        "AGENT_AUTHTOKEN": "tok",
        "AGENT_SERVER_ADDR": "127.0.0.1:4443",
        "AGENT_ROOT_CAS": str(ca),
        "AGENT_API_PORT": "5000",
        "AGENT_API_TOKEN": "t",
    }
    settings = load_settings(["--api-port", "5001", "--server-addr", "edge:4443"], env)
    assert (settings.authtoken, settings.server_addr, settings.root_cas) == (
        "tok",
        "edge:4443",
        str(ca),
    )
    assert settings.api_port == 5001 and settings.api_token == "t"
    assert settings.host == "127.0.0.1"  # loopback by default


def test_settings_without_server_addr_leave_the_sdk_default_for_the_hosted_service():
    settings = load_settings([], {"NGROK_AUTHTOKEN": "tok"})
    assert settings.authtoken == "tok"
    assert settings.server_addr is None and settings.root_cas is None


@pytest.mark.parametrize(
    "env, words",
    [
        ({}, "AGENT_AUTHTOKEN"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_API_PORT": "x"}, "AGENT_API_PORT"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_API_PORT": "65536"}, "AGENT_API_PORT"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_API_PORT": "\u0664\u0660\u0664\u0660"}, "AGENT_API_PORT"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_ROOT_CAS": "/nonexistent/ca.pem"}, "AGENT_ROOT_CAS"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_SERVER_ADDR": "http://edge:4443"}, "AGENT_SERVER_ADDR"),
        ({"AGENT_AUTHTOKEN": "t", "AGENT_BIND_TIMEOUT": "-1"}, "AGENT_BIND_TIMEOUT"),
    ],
)
def test_bad_settings_raise_startup_error_naming_the_setting(env, words):
    with pytest.raises(StartupError) as caught:
        load_settings([], env)
    assert words in str(caught.value)


def test_api_port_65535_is_accepted():
    assert load_settings([], {"AGENT_AUTHTOKEN": "t", "AGENT_API_PORT": "65535"}).api_port == 65535


# ---- policy outline ----------------------------------------------------------------------
def test_policy_outline_accepts_the_seed_shape():
    doc = {
        "on_http_request": [
            {
                "name": "n",
                "expressions": [],
                "actions": [{"type": "add-headers", "config": {"headers": {"a": "b"}}}],
            }
        ],
        "on_http_response": [],
    }
    assert check_outline(doc) is doc


@pytest.mark.parametrize(
    "doc, path",
    [
        ([], "policy"),
        ("x", "policy"),
        ({"on_tcp_connect": []}, "policy.on_tcp_connect"),
        ({"inbound": []}, "policy.inbound"),
        ({"on_http_request": {}}, "policy.on_http_request"),
        ({"on_http_request": ["rule"]}, "policy.on_http_request[0]"),
    ],
)
def test_policy_outline_errors_name_the_element(doc, path):
    with pytest.raises(PolicyError) as caught:
        check_outline(doc)
    assert caught.value.path == path


def test_example_default_policy_file_is_valid():
    doc = load_default_policy(str(AGENT_DIR / "examples" / "default-policy.yaml"))
    assert doc["on_http_request"] and doc["on_http_response"]


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("p.yaml", "on_http_request: [unclosed", "not valid YAML"),
        ("p.json", "{", "not valid JSON"),
        ("p.yaml", "- a list", "invalid"),
        ("p.yaml", "on_http_requests: []", "unknown phase"),
    ],
)
def test_invalid_default_policy_file_stops_the_agent_with_a_clear_message(
    tmp_path, name, content, words
):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(StartupError) as caught:
        load_default_policy(str(path))
    assert words in str(caught.value) and str(path) in str(caught.value)


def test_missing_default_policy_file_stops_the_agent(tmp_path):
    with pytest.raises(StartupError, match="cannot be read"):
        load_default_policy(str(tmp_path / "nope.yaml"))


# ---- the tunnels file ----------------------------------------------------------------------
def test_save_goes_through_a_temp_file_in_the_same_dir(tmp_path, monkeypatch):
    store = TunnelsFile(tmp_path / "sub" / "tunnels.json")
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((os.path.dirname(src), os.path.basename(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store.save(
        [{"domain": "a.localhost", "protocol": "http", "forwards_to": "h:1", "policy": None}]
    )
    assert calls[0][0] == str(tmp_path / "sub")
    assert calls[0][1].startswith(".tunnels.json.") and calls[0][1].endswith(".tmp")
    assert store.load()[0]["domain"] == "a.localhost"


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_crash_during_save_leaves_the_previous_file_and_no_temp_file(
    tmp_path, monkeypatch, failing
):
    store = TunnelsFile(tmp_path / "tunnels.json")
    store.save([])
    before = store.path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError):
        store.save(
            [{"domain": "a.localhost", "protocol": "http", "forwards_to": "h:1", "policy": None}]
        )
    monkeypatch.undo()
    assert store.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["tunnels.json"]


def test_stale_temp_files_from_a_crash_are_removed_and_nothing_else(tmp_path):
    store = TunnelsFile(tmp_path / "tunnels.json")
    stale = [tmp_path / ".tunnels.json.abc123.tmp", tmp_path / ".tunnels.json.x.tmp"]
    keep = [tmp_path / "tunnels.json", tmp_path / ".other.json.abc.tmp", tmp_path / "notes.tmp"]
    for path in stale + keep:
        path.write_text("{}")
    assert sorted(store.clean_stale_temp_files()) == sorted(stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in keep)


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"version": 1, "tunnels": {}}',
        b'{"version": 99, "tunnels": []}',
        b'{"version": 1, "tunnels": [{"domain": "a.localhost"}]}',
        b"[" * 100000,
    ],
)
def test_corrupt_tunnels_file_raises_naming_the_file(tmp_path, content):
    path = tmp_path / "tunnels.json"
    path.write_bytes(content)
    with pytest.raises(StartupError) as caught:
        TunnelsFile(path).load()
    assert str(path) in str(caught.value)
    assert path.read_bytes() == content


# ---- SDK errors ----------------------------------------------------------------------------
def test_sdk_error_takes_the_edge_code_and_message():
    exc = ValueError(
        "failed to bind listener",
        "The credential ACL policy does not permit binding this domain.\n\nERR_NGROK_399",
        "ERR_NGROK_399",
    )
    code, message = sdk_error(exc)
    assert code == "ERR_NGROK_399"
    assert message == "The credential ACL policy does not permit binding this domain."


def test_sdk_error_without_a_code():
    assert sdk_error(ValueError("connection refused"))[0] is None


@pytest.mark.parametrize(
    "code, status",
    [
        ("ERR_NGROK_334", 409),
        ("ERR_NGROK_320", 409),
        ("ERR_NGROK_399", 403),
        ("ERR_NGROK_7117", 403),
        ("ERR_NGROK_1602", 400),
        ("ERR_NGROK_2201", 400),
    ],
)
def test_edge_refusals_map_to_statuses_by_code(code, status):
    err = EdgeRefused(code, "m")
    assert (err.status, err.code) == (status, code)


# ---- TunnelService ordering against a stand-in edge ------------------------------------------
class _Listener:
    def __init__(self, url):
        self._url, self.closed = url, False

    def url(self):
        return self._url


class _Edge:
    def __init__(self, refuse=()):
        self.refuse, self.listeners = set(refuse), []

    async def bind(self, domain, forwards_to, policy):
        if domain in self.refuse:
            raise EdgeRefused("ERR_NGROK_399", "not allowed")
        listener = _Listener(f"https://{domain or 'gen%d.t.localhost' % len(self.listeners)}:1")
        self.listeners.append(listener)
        return listener

    async def unbind(self, listener):
        listener.closed = True


def test_a_save_that_fails_closes_the_endpoint_again_and_keeps_nothing(tmp_path, monkeypatch):
    edge = _Edge()
    service = TunnelService(TunnelsFile(tmp_path / "t.json"), {"on_http_request": []}, edge)

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(PersistFailed):
        asyncio.run(service.create({"forwards_to": "h:1", "domain": "a.t.localhost"}))
    assert edge.listeners[0].closed and len(service) == 0


def test_a_refused_bind_saves_nothing(tmp_path):
    edge = _Edge(refuse={"a.t.localhost"})
    service = TunnelService(TunnelsFile(tmp_path / "t.json"), {}, edge)
    with pytest.raises(EdgeRefused):
        asyncio.run(service.create({"forwards_to": "h:1", "domain": "a.t.localhost"}))
    assert not (tmp_path / "t.json").exists() and len(service) == 0


def test_restore_keeps_a_refused_tunnel_with_its_error_and_binds_the_others(tmp_path):
    store = TunnelsFile(tmp_path / "t.json")
    records = [
        {
            "domain": d,
            "protocol": "http",
            "forwards_to": "h:1",
            "policy": None,
            "url": f"https://{d}:1",
        }
        for d in ("a.t.localhost", "b.t.localhost", "c.t.localhost")
    ]
    store.save(records)
    before = store.path.read_bytes()
    edge = _Edge(refuse={"b.t.localhost"})
    service = TunnelService(store, {}, edge)
    asyncio.run(service.restore())
    listed = service.list_view()
    assert [t["domain"] for t in listed] == ["a.t.localhost", "b.t.localhost", "c.t.localhost"]
    assert [t["error"] for t in listed][0::2] == [None, None]
    assert listed[1]["error"] == {"error_code": "ERR_NGROK_399", "msg": "not allowed"}
    assert listed[1]["url"] == "https://b.t.localhost:1"
    assert store.path.read_bytes() == before  # restore never rewrites the file


def test_agent_package_never_imports_the_service_or_the_edge():
    package = AGENT_DIR / "tunnel_agent"
    for source in package.glob("*.py"):
        text = source.read_text()
        assert not re.search(r"^\s*(import|from)\s+(chalicelib|edge)\b", text, re.M), source


def test_records_round_trip_as_json(tmp_path):
    store = TunnelsFile(tmp_path / "t.json")
    store.save(
        [
            {
                "domain": "a.localhost",
                "protocol": "http",
                "forwards_to": "h:1",
                "policy": {"on_http_request": []},
            }
        ]
    )
    assert json.loads(store.path.read_text())["tunnels"][0]["policy"] == {"on_http_request": []}


def test_authtoken_file_is_read_when_no_token_is_given(tmp_path):
    path = tmp_path / "authtoken"
    path.write_text("from-file\n")
    assert load_settings([], {"AGENT_AUTHTOKEN_FILE": str(path)}).authtoken == "from-file"
    assert (
        load_settings([], {"AGENT_AUTHTOKEN_FILE": str(path), "AGENT_AUTHTOKEN": "env"}).authtoken
        == "env"
    )
    with pytest.raises(StartupError, match="AGENT_AUTHTOKEN_FILE"):
        load_settings([], {"AGENT_AUTHTOKEN_FILE": str(tmp_path / "missing")})


class _FakeBuilder:
    def __init__(self, calls):
        self.calls = calls

    def __getattr__(self, name):
        def record(*args):
            self.calls.append((name, args))
            return self

        return record


class _FakeSdk:
    def __init__(self):
        self.calls = []

    def SessionBuilder(self):  # noqa: N802 (the SDK's name)
        return _FakeBuilder(self.calls)


def test_without_server_addr_the_session_is_built_as_for_the_hosted_service():
    from tunnel_agent.sdk import EdgeSession

    session = EdgeSession("tok", None, None)
    session._sdk = _FakeSdk()
    session._builder()
    names = [name for name, _ in session._sdk.calls]
    assert ("authtoken", ("tok",)) in session._sdk.calls
    assert "server_addr" not in names and "root_cas" not in names


def test_with_server_addr_and_root_cas_the_session_goes_to_the_edge():
    from tunnel_agent.sdk import EdgeSession

    session = EdgeSession("tok", "127.0.0.1:4443", "/data/ca.pem")
    session._sdk = _FakeSdk()
    session._builder()
    assert ("server_addr", ("127.0.0.1:4443",)) in session._sdk.calls
    assert ("root_cas", ("/data/ca.pem",)) in session._sdk.calls


def test_policy_outline_refuses_a_document_nested_too_deeply_and_limits_its_size():
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(PolicyError, match="nested too deeply"):
        check_outline({"on_http_request": [deep]})

    def doc(n):
        return {
            "on_http_request": [
                {"actions": [{"type": "add-headers", "config": {"headers": {"x": "v" * n}}}]}
            ]
        }

    base = len(json.dumps(doc(0)).encode())
    check_outline(doc(64 * 1024 - base))  # exactly 65536 bytes
    with pytest.raises(PolicyError, match="at most 65536 bytes"):
        check_outline(doc(64 * 1024 - base + 1))
