"""The real stack for the agent's tests, as processes: store + API (scripts/serve.py) and the
edge (``python -m edge``), run with the service's virtualenv (``SERVICE_PYTHON``, default
``../.venv/bin/python``: `make test-agent` installs it), and the agent itself
(``python -m tunnel_agent``) with this interpreter (the agent's venv, where the official
``ngrok`` SDK lives). Clients are the standard library's, so the agent's venv needs nothing
else. Everything binds 127.0.0.1 on free ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AGENT_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = AGENT_DIR.parent
SERVICE_PYTHON = os.path.abspath(
    os.environ.get("SERVICE_PYTHON") or str(REPO_DIR / ".venv" / "bin" / "python")
)
BASE_DOMAIN = "tunnels.localhost"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_range(size: int) -> int:
    for _ in range(50):
        low = free_port()
        if low + size > 65535:
            continue
        try:
            for port in range(low, low + size):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return low
        except OSError:
            continue
    raise RuntimeError("no free port range")


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<Resp {self.status} {self.text[:400]}>"


def request(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 30.0,
    context: ssl.SSLContext | None = None,
) -> Resp:
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return Resp(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Resp(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def wait_for(predicate, timeout: float = 20.0, step: float = 0.25):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


class Process:
    """A child process with its output in a log file."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def wait_for_line(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if text in self.log():
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.log_path.name}: exited early:\n{self.log()}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.log_path.name}: no {text!r} in {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@dataclass
class Stack:
    """Store + API + edge; the API's admin key of one bootstrapped account."""

    data_dir: Path
    api_port: int = field(default_factory=free_port)
    store_port: int = field(default_factory=free_port)
    agent_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    https_port: int = field(default_factory=free_port)
    api: Process | None = None
    edge: Process | None = None
    admin_key: str = ""
    tcp_low: int = 0
    edge_starts: int = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def server_addr(self) -> str:
        return f"127.0.0.1:{self.agent_port}"

    @property
    def ca_path(self) -> str:
        return str(self.data_dir / "edge" / "ca.pem")

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AGENT_", "NGROK_", "EDGE_")) and k != "DYNAMODB_ENDPOINT_URL"
        }
        env.update(
            {
                "PORT": str(self.api_port),
                "STORE_PORT": str(self.store_port),
                "TABLE_NAME": "tunnel-service",
                "BASE_DOMAIN": BASE_DOMAIN,
                "AWS_ACCESS_KEY_ID": "local",
                "AWS_SECRET_ACCESS_KEY": "local",
                "AWS_DEFAULT_REGION": "us-east-1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("PUBLIC_BASE_URL", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def start(self) -> "Stack":
        if not os.path.exists(SERVICE_PYTHON):
            raise RuntimeError(
                f"{SERVICE_PYTHON} is missing: run `make install` (or set "
                "SERVICE_PYTHON to the service's virtualenv python)"
            )
        (self.data_dir / "api").mkdir(parents=True)
        (self.data_dir / "edge").mkdir(parents=True)
        env = self.env()
        self.api = Process(
            [SERVICE_PYTHON, "scripts/serve.py", "--no-bootstrap"],
            REPO_DIR,
            {**env, "DATA_DIR": str(self.data_dir / "api")},
            self.data_dir / "serve.log",
        )
        deadline = time.time() + 90
        while True:
            try:
                request("GET", self.api_url + "/api_keys", timeout=5)
                break
            except OSError:
                if self.api.process.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"serve.py did not start:\n{self.api.log()}") from None
                time.sleep(0.2)
        store_env = self.store_env()
        out = subprocess.run(
            [
                SERVICE_PYTHON,
                "-m",
                "chalicelib.admin",
                "bootstrap",
                "--name",
                "agent-tests",
                "--json",
            ],
            cwd=REPO_DIR,
            env=store_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"bootstrap failed: {out.stdout}\n{out.stderr}")
        self.admin_key = _key_of(out.stdout)
        self.tcp_low = free_range(3)
        self.start_edge()
        return self

    def store_env(self) -> dict[str, str]:
        """The environment of a component that uses the running stack's store directly: its
        endpoint and this start's secret, as serve.py writes them to DATA_DIR/store.env
        (older serve.py without it: the endpoint and any local credentials)."""
        env = {**self.env(), "DYNAMODB_ENDPOINT_URL": f"http://127.0.0.1:{self.store_port}"}
        path = self.data_dir / "api" / "store.env"
        if path.exists():
            for line in path.read_text().splitlines():
                name, _, value = line.strip().partition("=")
                if name:
                    env[name] = value
            for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
                env.pop(name, None)
        return env

    def start_edge(self) -> None:
        self.edge_starts += 1
        store_env = self.store_env()
        self.edge = Process(
            [SERVICE_PYTHON, "-m", "edge"],
            REPO_DIR,
            {
                **store_env,
                "DATA_DIR": str(self.data_dir / "edge"),
                "EDGE_AGENT_PORT": str(self.agent_port),
                "EDGE_HTTP_PORT": str(self.http_port),
                "EDGE_HTTPS_PORT": str(self.https_port),
                "EDGE_TCP_PORTS": f"{self.tcp_low}-{self.tcp_low + 2}",
                "EDGE_CHECK_SECONDS": "1",
            },
            self.data_dir / f"edge-{self.edge_starts}.log",
        )
        self.edge.wait_for_line("edge CA certificate")

    def stop(self) -> None:
        for process in (self.edge, self.api):
            if process is not None:
                process.stop()

    # ---- the management API ------------------------------------------------------
    def call(self, method: str, path: str, body: Any = None) -> Resp:
        return request(
            method,
            self.api_url + path,
            body=body,
            headers={"Authorization": f"Bearer {self.admin_key}", "Ngrok-Version": "2"},
        )

    def bot_credential(self, acl: list[str] | None = None) -> dict[str, Any]:
        """A credential owned by a new bot user (the spec's recommended arrangement)."""
        bot = self.call("POST", "/bot_users", {"name": f"agent-{time.time_ns()}"})
        assert bot.status == 201, bot
        body: dict[str, Any] = {"description": "device agent", "owner_id": bot.json["id"]}
        if acl is not None:
            body["acl"] = acl
        cred = self.call("POST", "/credentials", body)
        assert cred.status == 201, cred
        return {**cred.json, "bot_id": bot.json["id"]}

    # ---- the public side ---------------------------------------------------------
    def public(self, method: str, url: str, path: str = "/", **kwargs: Any) -> Resp:
        """A request to a tunnel's URL, sent to the edge's listener for its scheme with the
        URL's host in Host (what curl does for *.localhost by itself)."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        headers = {"Host": parts.netloc, **kwargs.pop("headers", {})}
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_path)
            context.check_hostname = False  # the name is checked by the SNI test below
            return request(
                method,
                f"https://127.0.0.1:{self.https_port}{path}",
                headers=headers,
                context=context,
                **kwargs,
            )
        return request(
            method, f"http://127.0.0.1:{self.http_port}{path}", headers=headers, **kwargs
        )


def _key_of(output: str) -> str:
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            for key in ("token", "api_key", "key"):
                if isinstance(data.get(key), str):
                    return data[key]
            for value in data.values():
                if isinstance(value, dict) and isinstance(value.get("token"), str):
                    return value["token"]
        elif line:
            return line
    raise RuntimeError(f"no API key in bootstrap output: {output!r}")


class Agent:
    """``python -m tunnel_agent`` as a process, against the stack's edge."""

    def __init__(self, stack: Stack, authtoken: str, workdir: Path, **env: str) -> None:
        self.stack, self.authtoken, self.workdir = stack, authtoken, workdir
        self.extra_env = env
        self.port = 0
        self.proc: Process | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self.starts = 0

    @property
    def tunnels_file(self) -> Path:
        return self.workdir / "tunnels.json"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "NGROK_"))}
        env.update(
            {
                "AGENT_AUTHTOKEN": self.authtoken,
                "AGENT_SERVER_ADDR": self.stack.server_addr,
                "AGENT_ROOT_CAS": self.stack.ca_path,
                "AGENT_API_PORT": str(self.port),
                "AGENT_TUNNELS_FILE": str(self.tunnels_file),
                "AGENT_CONNECT_TIMEOUT": "20",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def launch(self) -> Process:
        self.port = self.port or free_port()
        self.starts += 1
        self.proc = Process(
            [sys.executable, "-m", "tunnel_agent"],
            AGENT_DIR,
            self.env(),
            self.workdir / f"agent-{self.starts}.log",
        )
        return self.proc

    def start(self) -> "Agent":
        self.launch().wait_for_line("tunnel-agent ready")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        return self.proc.stop(sig) if self.proc else 0

    def log(self) -> str:
        return self.proc.log() if self.proc else ""

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Resp:
        return request(method, self.api + path, body=body, **kwargs)


def new_data_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
