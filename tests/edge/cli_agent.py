"""The official agent CLI 2.x (agent 2.3.41) as a process, configured only by its config file
(``server_addr``, ``root_cas``, ``authtoken``; ``web_addr`` for its local inspector and API),
logging JSON lines to stdout. scripts/fetch_agent_cli.sh puts the binary in tests/edge/cli/
(``make install`` / ``make test`` run it; so does :func:`cli_binary` when it is missing)."""

import collections
import json
import os
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

import requests

from tests.support.api import PROJECT_DIR, free_port

CLI_DIR = os.path.join(os.path.dirname(__file__), "cli")
CLI_BIN = os.path.join(CLI_DIR, "ngrok")
FETCH = os.path.join(PROJECT_DIR, "scripts", "fetch_agent_cli.sh")


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
        resp = requests.get(f"http://127.0.0.1:{self.web_port}/api/tunnels", timeout=5)
        return resp.json()["tunnels"]

    def wait_tunnels(self, count: int, timeout: float = 30.0) -> Dict[str, str]:
        """{name: public_url} once the CLI lists ``count`` started tunnels."""
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
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # ---- its local inspector (web_addr's API) ------------------------------------------
    def inspected(self):
        """The requests the inspector captured ([] when inspection is off)."""
        resp = requests.get(f"http://127.0.0.1:{self.web_port}/api/requests/http", timeout=5)
        return resp.json().get("requests") or [] if resp.status_code == 200 else []

    def replay(self, request_id: str) -> None:
        resp = requests.post(
            f"http://127.0.0.1:{self.web_port}/api/requests/http",
            json={"id": request_id},
            timeout=5,
        )
        assert resp.status_code in (200, 204), resp.text
