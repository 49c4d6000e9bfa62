"""Shared helpers for the agent's tests: a real upstream, the agent in-process and as a
separate process. (conftest.py puts agent/ and this directory on sys.path.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

AGENT_DIR = Path(__file__).resolve().parent.parent

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from tunnel_agent.config import Settings  # noqa: E402
from tunnel_agent.server import RunningAgent, start_agent  # noqa: E402


# ---- a real upstream -----------------------------------------------------------------
@dataclass
class Upstream:
    port: int
    seen: list[dict[str, Any]]

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def upstream_server() -> AsyncIterator[Upstream]:
    """An upstream that echoes what it received and sets a few response headers."""
    seen: list[dict[str, Any]] = []

    async def echo(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        record = {
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        seen.append(record)
        if request.path == "/stream":
            response = web.StreamResponse(headers={"X-Internal": "secret"})
            await response.prepare(request)
            for i in range(int(request.query.get("n", "5"))):
                await response.write(f"chunk{i}\n".encode())
                await asyncio.sleep(float(request.query.get("delay", "0")))
            await response.write_eof()
            return response
        status = int(request.query.get("status", "200"))
        return web.json_response(
            record, status=status, headers={"X-Internal": "secret", "X-Upstream": "yes"}
        )

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Upstream(port, seen)
    finally:
        await runner.cleanup()


def free_port_never_listening() -> int:
    """A loopback port nothing listens on (bound then closed)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- the agent in-process ------------------------------------------------------------
@dataclass
class AgentHandle:
    agent: RunningAgent
    http: aiohttp.ClientSession
    settings: Settings

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.agent.api_port}"

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.agent.ingress_port}"

    async def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any, Any]:
        if body is not None and "data" not in kwargs:
            kwargs["json"] = body
        async with self.http.request(method, self.api + path, **kwargs) as resp:
            raw = await resp.read()
            payload = json.loads(raw) if raw else None
            return resp.status, payload, resp.headers

    async def create(self, **body: Any) -> dict[str, Any]:
        status, payload, _ = await self.call("POST", "/tunnels", body)
        assert status == 200, payload
        return payload

    async def through(self, domain: str, path: str = "/", method: str = "GET", **kwargs: Any):
        """A request through the ingress for ``domain``: (status, headers, body bytes)."""
        headers = dict(kwargs.pop("headers", {}) or {})
        headers["Host"] = f"{domain}:{self.agent.ingress_port}"
        async with self.http.request(method, self.ingress + path, headers=headers, **kwargs) as resp:
            return resp.status, resp.headers, await resp.read()


@contextlib.asynccontextmanager
async def running_agent(tmp_path: Path, **overrides: Any) -> AsyncIterator[AgentHandle]:
    options: dict[str, Any] = {
        "host": "127.0.0.1",
        "api_port": 0,
        "ingress_port": 0,
        "tunnels_file": str(tmp_path / "tunnels.json"),
        "upstream_timeout": 5.0,
    }
    options.update(overrides)
    settings = Settings(**options)
    agent = await start_agent(settings)
    http = aiohttp.ClientSession()
    try:
        yield AgentHandle(agent, http, settings)
    finally:
        await http.close()
        await agent.stop()


# ---- the agent as a separate process -------------------------------------------------
READY = re.compile(r"tunnel-agent ready api=http://127\.0\.0\.1:(\d+) ingress=http://127\.0\.0\.1:(\d+)")


@dataclass
class AgentProcess:
    proc: subprocess.Popen
    api_port: int
    ingress_port: int

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def agent_env(tunnels_file: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "NGROK_"))}
    env.update(
        PYTHONPATH=str(AGENT_DIR),
        AGENT_HOST="127.0.0.1",
        AGENT_API_PORT="0",
        AGENT_INGRESS_PORT="0",
        AGENT_TUNNELS_FILE=str(tunnels_file),
    )
    env.update(extra)
    return env


def start_agent_process(env: dict[str, str], timeout: float = 20.0) -> AgentProcess:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunnel_agent"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        match = READY.search(line)
        if match:
            return AgentProcess(proc, int(match.group(1)), int(match.group(2)))
    proc.kill()
    _, err = proc.communicate(timeout=5)
    raise AssertionError(f"agent did not become ready; exit={proc.returncode} stderr={err}")


def run_agent_expecting_failure(env: dict[str, str], timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tunnel_agent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
