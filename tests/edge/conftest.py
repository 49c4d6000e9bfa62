"""The edge tests: the real stack as processes (store + API by scripts/serve.py, the edge by
``python -m edge``), agents built on the official Python SDK as processes (tests/edge/
sdk_agent.py run with the device agent's virtualenv, where ``ngrok`` is installed: the SDK and
the ``ngrok-api`` client share the ``ngrok`` package name, so they cannot share a venv), and
real HTTP/TLS/TCP clients. Servers start once per session."""

import collections
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import pytest
import requests

from tests.support.api import PROJECT_DIR, HttpApi, LocalStack, free_port
from tests.support.api import free_range as _free_range  # the name other test files import

SDK_PYTHON = os.environ.get("SDK_PYTHON") or os.path.join(
    PROJECT_DIR, ".venv-agent", "bin", "python"
)
SDK_AGENT = os.path.join(os.path.dirname(__file__), "sdk_agent.py")
BASE_DOMAIN = "tunnels.localhost"


@dataclass
class EdgeProcess:
    data_dir: str
    store_url: str
    agent_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    https_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    tcp_low: int = 0
    process: Optional[subprocess.Popen] = None
    log_path: str = ""
    python: str = sys.executable  # another interpreter: the edge image's environment
    cwd: str = PROJECT_DIR  # another tree: only what the edge image copies

    @property
    def ca_path(self) -> str:
        return os.path.join(self.data_dir, "ca.pem")

    @property
    def server_addr(self) -> str:
        return f"127.0.0.1:{self.agent_port}"

    def start(self, env_base: Dict[str, str], timeout: float = 30.0) -> "EdgeProcess":
        self.tcp_low = self.tcp_low or _free_range(5)
        env = dict(env_base)
        env.update(
            {
                "DYNAMODB_ENDPOINT_URL": self.store_url,
                "DATA_DIR": self.data_dir,
                "EDGE_AGENT_PORT": str(self.agent_port),
                "EDGE_HTTP_PORT": str(self.http_port),
                "EDGE_HTTPS_PORT": str(self.https_port),
                "EDGE_METRICS_PORT": str(self.metrics_port),
                "EDGE_TCP_PORTS": f"{self.tcp_low}-{self.tcp_low + 4}",
                "EDGE_CHECK_SECONDS": "1",
                "BASE_DOMAIN": BASE_DOMAIN,
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.log_path = os.path.join(self.data_dir, "edge.log")
        log = open(self.log_path, "wb")
        prefix = os.environ.get("EDGE_PROFILE")  # a cProfile output path (edge/bench)
        command = (
            [self.python] + (["-m", "cProfile", "-o", prefix] if prefix else []) + ["-m", "edge"]
        )
        self.process = subprocess.Popen(
            command, cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the edge exited early: {self.log()}")
            if "edge CA certificate" in self.log():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"the edge did not start in {timeout}s: {self.log()}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as handle:
                return handle.read()[-6000:]
        except OSError:
            return ""

    # ---- the operator endpoint (edge/metrics.py) -------------------------------------------
    def session_streams(self, session_id: str) -> Optional[Dict[str, int]]:
        """The muxado stream table of one agent session, or None when the edge holds no
        such session."""
        resp = requests.get(
            f"http://127.0.0.1:{self.metrics_port}/sessions/{session_id}", timeout=10
        )
        return resp.json() if resp.status_code == 200 else None

    def metrics(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text

    # ---- public clients -------------------------------------------------------------------
    def http(self, method: str, hostname: str, path: str = "/", **kwargs) -> requests.Response:
        headers = {"Host": hostname, **kwargs.pop("headers", {})}
        return requests.request(
            method,
            f"http://127.0.0.1:{self.http_port}{path}",
            headers=headers,
            timeout=30,
            **kwargs,
        )

    def curl_https(
        self, hostname: str, path: str = "/", *args: str
    ) -> subprocess.CompletedProcess:
        """curl over the HTTPS listener, verifying the edge's CA, the name resolved to the
        loopback (as *.localhost does)."""
        return subprocess.run(
            [
                "curl",
                "-sS",
                "--max-time",
                "30",
                "--cacert",
                self.ca_path,
                "--resolve",
                f"{hostname}:{self.https_port}:127.0.0.1",
                "-w",
                "\n%{http_code}",
                *args,
                f"https://{hostname}:{self.https_port}{path}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )


def tcp_round_trip(port: int, data: bytes) -> bytes:
    """Send ``data`` to a TCP endpoint on the edge and read back as many bytes (an echo
    upstream); b"" when the edge closed or reset the connection first (a refusal)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(data)
            got = b""
            while len(got) < len(data):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
            return got
    except OSError:
        return b""


class SdkAgent:
    """tests/edge/sdk_agent.py as a process: the official SDK connecting to the edge."""

    def __init__(self, edge: EdgeProcess, authtoken: str, binds: List[Dict[str, Any]]):
        cfg = {
            "authtoken": authtoken,
            "server_addr": edge.server_addr,
            "root_cas": edge.ca_path,
            "binds": binds,
        }
        self.process = subprocess.Popen(
            [SDK_PYTHON, SDK_AGENT, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.seen: List[Dict[str, Any]] = []
        # stderr is read as it comes (its last lines kept): a pipe nobody reads fills up and
        # then blocks the program on its next log line (aiohttp logs each aborted request)
        self.stderr_tail: "collections.deque[str]" = collections.deque(maxlen=200)
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"event": "output", "line": line})

    def _pump_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_tail.append(line)

    def wait_for(self, name: str, timeout: float = 30.0) -> Dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                event = self.events.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            self.seen.append(event)
            if event.get("event") == name:
                return event
        raise AssertionError(
            f"no {name!r} event in {timeout}s; seen {self.seen}; stderr: {self._stderr()}"
        )

    def start(self, timeout: float = 30.0) -> List[Dict[str, Any]]:
        """Events up to ``ready`` (bound / error), or the connect error."""
        out = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                event = self.events.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            self.seen.append(event)
            if event["event"] == "ready":
                return out
            out.append(event)
            if event["event"] == "error" and event.get("stage") == "connect":
                return out
        raise AssertionError(
            f"agent did not get ready; seen {self.seen}; stderr: {self._stderr()}"
        )

    def _stderr(self) -> str:
        return "".join(self.stderr_tail)[-3000:]

    def command(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.command("exit")
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def edge_stack():
    """Store + API (serve.py) and the edge, as processes, for the whole session."""
    if not os.path.exists(SDK_PYTHON):
        pytest.fail(
            f"{SDK_PYTHON} missing: `make test` installs the agent virtualenv "
            "(with the official ngrok SDK) first"
        )
    with tempfile.TemporaryDirectory(prefix="tunnel-edge-test-") as data_dir:
        stack = LocalStack(data_dir=os.path.join(data_dir, "api"))
        tcp_low = _free_range(5)
        stack_env = stack.env  # the API allocates reserved addresses from the edge's range
        stack.env = lambda: {
            **stack_env(),
            "EDGE_TCP_PORTS": f"{tcp_low}-{tcp_low + 4}",
            "BASE_DOMAIN": BASE_DOMAIN,
        }
        os.makedirs(stack.data_dir)
        stack.start()
        edge = EdgeProcess(
            data_dir=os.path.join(data_dir, "edge"), store_url=stack.store_url, tcp_low=tcp_low
        )
        os.makedirs(edge.data_dir)
        env = stack.store_env()  # the stack's store endpoint and this start's secret
        env["BASE_DOMAIN"] = BASE_DOMAIN
        env["EDGE_EVENTS_API"] = "0"  # the API's events go to the event tests' own edges
        try:
            edge.start(env)
            yield stack, edge
        finally:
            edge.stop()
            stack.stop()


@pytest.fixture(scope="session")
def stack(edge_stack):
    return edge_stack[0]


@pytest.fixture(scope="session")
def edge(edge_stack):
    return edge_stack[1]


@pytest.fixture(scope="session")
def api(stack):
    return HttpApi(stack)


@pytest.fixture
def account(api):
    return api.new_account()


@pytest.fixture
def agents():
    """Start SDK agents with ``agents(edge, token, binds)``; all stopped after the test."""
    started: List[SdkAgent] = []

    def start(edge, token, binds):
        agent = SdkAgent(edge, token, binds)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


# ---- a real identity provider (the sign-in tests) ----------------------------------------
PROVIDER = os.path.join(os.path.dirname(__file__), "oidc_provider.py")
CLIENT_ID, CLIENT_SECRET = "edge-client", "edge-secret-123"


@pytest.fixture(scope="module")
def idp():
    """tests/edge/oidc_provider.py as a process (authlib), with one client for the edge."""
    port = free_port()
    cfg = {
        "port": port,
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [f"http://*.{BASE_DOMAIN}:*/ngrok/callback"],
            }
        ],
    }
    process = subprocess.Popen(
        [sys.executable, PROVIDER, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            requests.get(url + "/jwks", timeout=5)
            break
        except requests.ConnectionError:
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)
