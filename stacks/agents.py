"""The agents as processes: the official Python SDK (``SdkAgent``: tests/edge/sdk_agent.py run
with the device agent's virtualenv, where the SDK is installed), the official agent CLI 2.x
(``CliAgent``: agent 2.3.41 configured only by its config file, logging JSON lines;
scripts/fetch_agent_cli.sh puts the binary in tests/edge/cli/, ``make install`` runs it, so
does :func:`cli_binary` when it is missing), the official Go SDK (``GoAgent``:
tests/edge/go/main.go on golang.ngrok.com/ngrok/v2, built by ``make test-deps``, and by
:func:`go_binary` when missing or older than its sources), the official JavaScript SDK
(``NodeAgent``: tests/edge/node/agent.js on @ngrok/ngrok, installed by ``make test-deps``, and
by :func:`node_install` when missing or partial), and the device agent
(``DeviceAgent``: ``python -m tunnel_agent``). Each connects to an edge: anything with
``server_addr`` and ``ca_path``."""

import collections
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from stacks import http
from stacks.paths import AGENT_DIR, PROJECT_DIR, SDK_PYTHON
from stacks.ports import free_port
from stacks.process import Process, stop_process

SDK_AGENT = os.path.join(PROJECT_DIR, "tests", "edge", "sdk_agent.py")
CLI_DIR = os.path.join(PROJECT_DIR, "tests", "edge", "cli")
CLI_BIN = os.path.join(CLI_DIR, "ngrok")
FETCH = os.path.join(PROJECT_DIR, "scripts", "fetch_agent_cli.sh")
GO_DIR = os.path.join(PROJECT_DIR, "tests", "edge", "go")
GO_BIN = os.path.join(GO_DIR, "agent")
GO_SOURCES = ("main.go", "go.mod", "go.sum")
NODE_DIR = os.path.join(PROJECT_DIR, "tests", "edge", "node")
NODE_SDK = "@ngrok/ngrok"


class SdkAgent:
    """tests/edge/sdk_agent.py as a process: the official SDK connecting to ``edge``; its
    events (JSON lines) in ``events``, stdin takes its commands."""

    def __init__(self, edge: Any, authtoken: str, binds: List[Dict[str, Any]], **handlers: str):
        """``handlers``: ``stop_handler`` / ``restart_handler`` ("exit", "refuse", "none":
        tests/edge/sdk_agent.py)."""
        cfg = {
            "authtoken": authtoken,
            "server_addr": edge.server_addr,
            "root_cas": edge.ca_path,
            "binds": binds,
            **handlers,
        }
        self._spawn([SDK_PYTHON, SDK_AGENT, json.dumps(cfg)])

    def _spawn(self, argv: List[str]) -> None:
        self.process = subprocess.Popen(
            argv,
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


class GoAgent(SdkAgent):
    """tests/edge/go/agent (the official Go SDK, golang.ngrok.com/ngrok/v2) as a process
    against ``edge``: ``endpoints`` as main.go reads them (url, traffic_policy, pooling,
    bindings, metadata, description, name, proxy_proto, upstream, agent_tls, listen), ``options`` the
    rest of its config (connect_timeout, retry_refused, log_level). Its events are the Python
    SDK agent's (``bound``, ``error`` with ``stage`` and ``args``, ``ready``) and
    ``connected`` / ``disconnected`` / ``srvinfo`` / ``updated``; stdin takes ``srvinfo``,
    ``update <index> <json>`` and ``exit``. Its SDK's own log (JSON) goes to stderr."""

    def __init__(self, edge: Any, authtoken: str, endpoints: List[Dict[str, Any]], **options: Any):
        cfg = {
            "authtoken": authtoken,
            "server_addr": edge.server_addr,
            "root_cas": edge.ca_path,
            "endpoints": endpoints,
            **options,
        }
        self._spawn([GO_BIN, json.dumps(cfg)])


class NodeAgent:
    """tests/edge/node/agent.js as a process: the official JavaScript SDK forwarding to a small
    HTTP server of its own, connected to ``edge``; ``options`` as agent.js reads them (domain,
    traffic_policy, pooling_enabled, name, options). ``out`` is its first line that is not a
    status change: ``{"url": ...}`` or ``{"error": ..., "code": ...}``; later status changes
    (``closed`` / ``connected``) are collected in ``statuses``. It serves until ``stop``."""

    def __init__(self, edge: Any, authtoken: str, timeout: float = 30.0, **options: Any):
        cfg = {
            "authtoken": authtoken,
            "server_addr": edge.server_addr,
            "root_cas": edge.ca_path,
            **options,
        }
        self.process = subprocess.Popen(
            ["node", "agent.js", json.dumps(cfg)],
            cwd=NODE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.statuses: List[str] = []
        self._lines: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.out = self._first(timeout)

    def _pump(self) -> None:
        first = True
        for line in self.process.stdout:
            out = json.loads(line)
            if first and "status" not in out:
                first = False
                self._lines.put(out)
            elif not first:
                self.statuses.append(out.get("status", line))
        if first:
            self._lines.put(None)  # it exited before its first line

    def _first(self, timeout: float) -> Dict[str, Any]:
        try:
            out = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"the JavaScript SDK printed no URL or error in {timeout} s")
        if out is None:
            raise AssertionError(f"the JavaScript SDK exited ({self.process.wait()}) at start")
        return out

    def stop(self) -> None:
        """Closes its stdin (it exits then); killed after 10 s."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def node_loads(folder: str, module: str) -> bool:
    """Whether Node can load ``module`` with all its dependencies from ``folder``."""
    return (
        subprocess.run(
            ["node", "-e", f"require({json.dumps(module)})"],
            cwd=folder,
            capture_output=True,
            timeout=60,
        ).returncode
        == 0
    )


def node_install(folder: str, module: str) -> str:
    """Install ``folder``'s package.json until ``module`` loads; "" or what went wrong.

    A node_modules left partial (an interrupted run; an extraction seen here to lose a
    package's dist/ once) is removed and installed again, with npm's cache verified."""
    for attempt in range(3):
        if node_loads(folder, module):
            return ""
        shutil.rmtree(os.path.join(folder, "node_modules"), ignore_errors=True)
        if attempt:
            subprocess.run(
                ["npm", "cache", "verify"], cwd=folder, capture_output=True, timeout=300
            )
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            return f"npm install failed: {done.stderr[-500:]}"
    return "" if node_loads(folder, module) else "installed, but Node cannot load it"


def go_binary(folder: str = GO_DIR, name: str = "agent") -> str:
    """``folder``/``name`` (tests/edge/go/agent by default; the Go API client's
    tests/functional/go_client/compat too), built first (``go build``) when missing or older
    than its sources; "" when it cannot be had here (no Go toolchain, or the build failed:
    printed)."""
    binary = os.path.join(folder, name)
    newest = max(os.path.getmtime(os.path.join(folder, source)) for source in GO_SOURCES)
    if os.access(binary, os.X_OK) and os.path.getmtime(binary) >= newest:
        return binary
    if not shutil.which("go"):
        return ""
    building = f"{binary}.{os.getpid()}"  # then renamed: a concurrent build never runs half a file
    done = subprocess.run(
        ["go", "build", "-o", building, "."],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        print(f"go build in {folder} failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
        return ""
    os.replace(building, binary)
    return binary


def cli_binary() -> str:
    """The binary's path, fetched first when missing; "" with the reason printed by the
    fetch script when it cannot be had here (another platform, no npm)."""
    if not os.access(CLI_BIN, os.X_OK):
        subprocess.run(["sh", FETCH], check=False, timeout=600)
    return CLI_BIN if os.access(CLI_BIN, os.X_OK) else ""


def _yaml_value(value: Any) -> str:
    return json.dumps(value)  # JSON scalars, lists and maps are YAML flow values


class CliAgent:
    """``ngrok <args>`` with a config file written for the edge under test."""

    def __init__(
        self,
        edge: Any,
        authtoken: str,
        args: List[str],
        *,
        workdir: str,
        tunnels: Optional[Dict[str, Dict[str, Any]]] = None,
        extra_config: Optional[Dict[str, Any]] = None,
        inspector: bool = True,
    ):
        self.edge = edge
        self.web_port = free_port()
        self.config_path = os.path.join(workdir, f"ngrok-{self.web_port}.yml")
        config = {
            "server_addr": edge.server_addr,
            "root_cas": edge.ca_path,
            "authtoken": authtoken,
            "update_check": False,
            "console_ui": False,
            "log": "stdout",
            "log_format": "json",
            "log_level": "debug",
            "web_addr": f"127.0.0.1:{self.web_port}" if inspector else False,
            **(extra_config or {}),
        }
        if tunnels:
            config["tunnels"] = tunnels
        with open(self.config_path, "w") as handle:
            for key, value in config.items():
                handle.write(f"{key}: {_yaml_value(value)}\n")
        self.process = subprocess.Popen(
            [CLI_BIN, *args[:1], "-config", self.config_path, *args[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: "collections.deque[Dict[str, Any]]" = collections.deque(maxlen=5000)
        self.raw_tail: "collections.deque[str]" = collections.deque(maxlen=200)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.raw_tail.append(line)
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.lines.append({"msg": line.strip()})

    def output(self) -> str:
        return "".join(self.raw_tail)[-4000:]

    # ---- what the CLI tells --------------------------------------------------------------
    def api_tunnels(self) -> List[Dict[str, Any]]:
        import requests

        resp = requests.get(f"http://127.0.0.1:{self.web_port}/api/tunnels", timeout=5)
        return resp.json()["tunnels"]

    def wait_tunnels(self, count: int, timeout: float = 30.0) -> Dict[str, str]:
        """{name: public_url} once the CLI lists ``count`` started tunnels."""
        import requests

        deadline = time.time() + timeout
        seen: List[Dict[str, Any]] = []
        while time.time() < deadline:
            if self.process.poll() is not None:
                break
            try:
                seen = self.api_tunnels()
            except (requests.RequestException, ValueError, KeyError):
                seen = []
            if len(seen) >= count:
                return {t["name"]: t["public_url"] for t in seen}
            time.sleep(0.2)
        errors = [x for x in list(self.lines) if x.get("lvl") in ("eror", "crit")][:10]
        said = [  # what the CLI and the edge exchanged: its Auth and its requests' answers
            x
            for x in list(self.lines)
            if x.get("msg") in ("decoded response", "encode request", "failed to auth")
        ][:12]
        edge_log = self.edge.log()[-3000:] if hasattr(self.edge, "log") else ""
        raise AssertionError(
            f"the CLI did not list {count} tunnels in {timeout}s: {seen}; its first errors: "
            f"{errors}; its RPCs: {said}; output: {self.output()[-1500:]}; "
            f"the edge's log: {edge_log}"
        )

    def wait_log(self, predicate, timeout: float = 30.0) -> Dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                if predicate(line):
                    return line
            if self.process.poll() is not None and not any(predicate(x) for x in self.lines):
                break
            time.sleep(0.1)
        raise AssertionError(f"no such log line in {timeout}s; output: {self.output()}")

    def refusal(self, timeout: float = 30.0) -> str:
        """The error the CLI reports for a refused tunnel or session (its log's ``err``)."""

        def failed(x):
            return x.get("lvl") in ("eror", "crit") and x.get("err")

        first = self.wait_log(failed, timeout)
        if "ERR_NGROK" in str(first["err"]):
            return str(first["err"])
        # the CLI may log the session's close before the refusal it read (a loaded machine
        # showed "session closed" first): the refusal itself, when it comes, is the answer
        try:
            return str(
                self.wait_log(lambda x: failed(x) and "ERR_NGROK" in str(x["err"]), 5.0)["err"]
            )
        except AssertionError:
            return str(first["err"])

    def stop(self) -> None:
        stop_process(self.process, signal.SIGTERM, 10.0)

    # ---- its local inspector (web_addr's API) ------------------------------------------
    def inspected(self):
        """The requests the inspector captured ([] when inspection is off)."""
        import requests

        resp = requests.get(f"http://127.0.0.1:{self.web_port}/api/requests/http", timeout=5)
        return resp.json().get("requests") or [] if resp.status_code == 200 else []

    def replay(self, request_id: str) -> None:
        import requests

        resp = requests.post(
            f"http://127.0.0.1:{self.web_port}/api/requests/http",
            json={"id": request_id},
            timeout=5,
        )
        assert resp.status_code in (200, 204), resp.text


class DeviceAgent:
    """The device agent (``python -m tunnel_agent``, agent/) as a process with this
    interpreter (the agent's virtualenv), against ``edge`` (anything with ``server_addr`` and
    ``ca_path``: an EdgeProcess, an EdgeStack's edge); its files and logs in ``workdir``."""

    def __init__(self, edge: Any, authtoken: str, workdir: Path, **env: str) -> None:
        self.edge, self.authtoken, self.workdir = edge, authtoken, Path(workdir)
        self.extra_env = env
        self.port = 0
        self.proc: Process | None = None
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.starts = 0

    @property
    def tunnels_file(self) -> Path:
        return self.workdir / "tunnels.json"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "NGROK_"))}
        env.update(
            {
                "AGENT_AUTHTOKEN": self.authtoken,
                "AGENT_SERVER_ADDR": self.edge.server_addr,
                "AGENT_ROOT_CAS": self.edge.ca_path,
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
            str(self.workdir / f"agent-{self.starts}.log"),
        )
        return self.proc

    def start(self) -> "DeviceAgent":
        self.launch().wait_for_line("tunnel-agent ready")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        return self.proc.stop(sig) if self.proc else 0

    def log(self) -> str:
        return self.proc.log() if self.proc else ""

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> http.Resp:
        return http.request(method, self.api + path, body=body, **kwargs)
