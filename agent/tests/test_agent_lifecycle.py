"""Start, stop, restart and revocation of the agent as a process against the real stack."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stacks.agents import DeviceAgent
from stacks.http import wait_for
from stacks.paths import AGENT_DIR, BASE_DOMAIN
from tests.support.fixtures import device_agent_stack_in


def _name() -> str:
    return f"t{time.time_ns() % 10**12}"


def _run_expecting_failure(env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tunnel_agent"],
        cwd=AGENT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_restarted_agent_recreates_its_tunnels_with_the_same_urls_and_traffic_flows(
    stack, agents, credential, upstream
):
    agent = agents(credential["token"])
    named = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "domain": f"{_name()}.{BASE_DOMAIN}"}
    ).json
    generated = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    before = agent.call("GET", "/tunnels").json
    assert agent.stop() == 0
    assert stack.public("GET", named["url"]).status == 404  # the session ended with the agent
    agent.start()
    assert agent.call("GET", "/tunnels").json == before
    for tunnel in (named, generated):
        resp = stack.public("GET", tunnel["url"], "/again")
        assert resp.status == 200 and resp.json["path"] == "/again", resp
    assert "restored 2 tunnel(s)" in agent.log()


def test_a_tunnel_the_edge_refuses_at_restart_is_listed_with_its_error_and_others_come_back(
    stack, agents, upstream
):
    taken = f"{_name()}.{BASE_DOMAIN}"
    kept = f"{_name()}k.{BASE_DOMAIN}"
    agent = agents(stack.bot_credential()["token"], name="first")
    assert agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": taken}).status == 200
    assert agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": kept}).status == 200
    agent.stop()
    saved = agent.tunnels_file.read_bytes()
    other = agents(stack.bot_credential()["token"], name="other")
    assert other.call("POST", "/tunnels", {"forwards_to": upstream, "domain": taken}).status == 200
    agent.start()
    listed = {t["domain"]: t for t in agent.call("GET", "/tunnels").json}
    assert set(listed) == {taken, kept}
    assert listed[kept]["error"] is None
    assert listed[taken]["error"]["error_code"] == "ERR_NGROK_334"
    assert listed[taken]["url"] == f"https://{taken}:{stack.https_port}"
    assert stack.public("GET", listed[kept]["url"], "/k").status == 200
    assert taken in agent.log() and "ERR_NGROK_334" in agent.log()
    assert agent.tunnels_file.read_bytes() == saved  # kept, not dropped
    health = agent.call("GET", "/healthz").json
    assert health["tunnels"] == 2 and health["tunnels_failed"] == 1
    # deleting the refused one works and leaves the other
    assert agent.call("DELETE", f"/tunnels/{taken}").status == 204
    assert [t["domain"] for t in agent.call("GET", "/tunnels").json] == [kept]
    assert stack.public("GET", f"https://{taken}:{stack.https_port}").status == 200  # other's


def test_stale_temp_files_from_a_crash_are_removed_at_start(agents, credential, tmp_path):
    workdir = tmp_path / "agent"
    workdir.mkdir()
    stale = workdir / ".tunnels.json.k2j3h4.tmp"
    stale.write_text('{"version": 1, "tunn')
    agent = agents(credential["token"])
    assert not stale.exists()
    assert "k2j3h4" in agent.log()


def test_corrupt_tunnels_file_stops_the_agent_with_a_message_and_is_left_untouched(
    agents, credential, tmp_path
):
    workdir = tmp_path / "agent"
    workdir.mkdir()
    path = workdir / "tunnels.json"
    path.write_bytes(b'{"version": 1, "tunnels": [')
    agent = agents(credential["token"], launch_only=True)
    assert agent.proc.process.wait(timeout=60) == 2
    log = agent.log()
    assert str(path) in log and "corrupt" in log and "Traceback" not in log
    assert path.read_bytes() == b'{"version": 1, "tunnels": ['


def test_an_authtoken_the_edge_refuses_stops_the_agent_with_the_edge_code(stack, agents):
    cred = stack.bot_credential()
    assert stack.call("DELETE", f"/credentials/{cred['id']}").status == 204
    agent = agents(cred["token"], launch_only=True)
    assert agent.proc.process.wait(timeout=60) == 2
    assert "ERR_NGROK_107" in agent.log() and "Traceback" not in agent.log()


def test_an_unreachable_edge_stops_the_agent_after_the_connect_timeout(
    stack, credential, tmp_path
):
    with socket.socket() as held:  # bound, never listening: refused, and nobody else gets it
        held.bind(("127.0.0.1", 0))
        dead = held.getsockname()[1]
        env = {
            "AGENT_AUTHTOKEN": credential["token"],
            "AGENT_SERVER_ADDR": f"127.0.0.1:{dead}",
            "AGENT_ROOT_CAS": stack.ca_path,
            "AGENT_CONNECT_TIMEOUT": "3",
            "AGENT_API_PORT": "0",
            "AGENT_TUNNELS_FILE": str(tmp_path / "t.json"),
            "PATH": "/usr/bin:/bin",
        }
        started = time.monotonic()
        result = _run_expecting_failure(env)
    assert result.returncode == 2, result.stderr
    assert "cannot reach the edge" in result.stderr, result.stderr
    assert time.monotonic() - started < 30


def test_sigterm_stops_the_agent_within_10_seconds_with_connections_open(
    agents, credential, upstream
):
    agent = agents(credential["token"])
    assert agent.call("POST", "/tunnels", {"forwards_to": upstream}).status == 200
    idle = socket.create_connection(("127.0.0.1", agent.port))
    idle.sendall(b"GET /tunnels HTTP/1.1\r\nHost: x\r\n\r\n")  # a keep-alive connection
    idle.recv(65536)
    partial = socket.create_connection(("127.0.0.1", agent.port))
    partial.sendall(b"POST /tunnels HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    started = time.monotonic()
    agent.proc.process.send_signal(signal.SIGTERM)
    code = agent.proc.process.wait(timeout=30)
    elapsed = time.monotonic() - started
    idle.close()
    partial.close()
    assert code == 0 and elapsed < 10, elapsed
    assert json.loads(agent.tunnels_file.read_text())["tunnels"]  # the file keeps them


def test_revoking_the_credential_takes_the_tunnels_offline_and_the_agent_reports_it(
    stack, agents, upstream
):
    cred = stack.bot_credential()
    agent = agents(cred["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    assert stack.public("GET", created["url"]).status == 200
    assert stack.call("DELETE", f"/credentials/{cred['id']}").status == 204
    assert wait_for(lambda: stack.public("GET", created["url"]).status == 404, timeout=20)
    health = wait_for(
        lambda: (lambda r: r if r.status == 503 else None)(agent.call("GET", "/healthz")),
        timeout=30,
    )
    assert health is not None and health.json["session"]["connected"] is False
    assert wait_for(
        lambda: "ERR_NGROK_107" in str(agent.call("GET", "/healthz").json["session"]["error"]),
        timeout=30,
    )
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream})
    assert resp.status == 503 and resp.json["error_code"] == "ERR_EDGE_UNAVAILABLE", resp
    assert "ERR_NGROK_107" in resp.json["msg"]
    assert "ERR_NGROK_107" in agent.log()
    assert agent.call("GET", "/tunnels").json[0]["domain"] == created["domain"]  # not dropped


def test_after_the_edge_restarts_the_sdk_reconnects_and_the_tunnels_serve_again(upstream):
    """Its own stack: the edge goes away and comes back on the same address."""
    own = device_agent_stack_in(tempfile.mkdtemp(prefix="agent-edge-restart-"))
    try:
        own.start()
        workdir = Path(own.data_dir) / "agent"
        agent = DeviceAgent(own, own.bot_credential()["token"], workdir).start()
        try:
            created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
            assert own.public("GET", created["url"]).status == 200
            own.edge.stop()
            assert wait_for(lambda: agent.call("GET", "/healthz").status == 503, timeout=20)
            own.start_edge()
            assert wait_for(
                lambda: own.public("GET", created["url"], "/back").status == 200, timeout=60
            ), agent.log()
            assert wait_for(lambda: agent.call("GET", "/healthz").status == 200, timeout=30)
            assert agent.call("GET", "/tunnels").json[0]["url"] == created["url"]
            assert agent.call("POST", "/tunnels", {"forwards_to": upstream}).status == 200
        finally:
            agent.stop()
    finally:
        own.stop()
