"""`make run` as a process, for the tests that meet the stack as a user does: scripts/serve.py
--edge on free ports with its own data directory, read until it says "serving on", and what
its banner tells a user (the admin key, the agent address, the edge CA, the dashboard).

    with MakeRun(data_dir, env={"ACME_EMAIL": …}) as run:
        token = run.credential("sdk")
        …
        assert run.interrupt() == 0          # one Ctrl-C stops everything

Its output is read by a thread from the start (a chatty stack never blocks on a full pipe);
``lines`` holds every line so far.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence

from stacks.paths import PROJECT_DIR
from stacks.ports import free_port, free_range

PORT_VARIABLES = (
    "PORT",
    "STORE_PORT",
    "EDGE_AGENT_PORT",
    "EDGE_HTTP_PORT",
    "EDGE_HTTPS_PORT",
    "EDGE_SSH_PORT",
)


class MakeRun:
    """scripts/serve.py --edge; ``ports`` maps each port variable to the port it was given."""

    def __init__(
        self,
        data_dir: str,
        env: Optional[Mapping[str, str]] = None,
        ports: Sequence[str] = (),
        drop: Sequence[str] = (),
        tcp_ports: int = 3,
    ) -> None:
        self.data_dir = data_dir
        self.ports: Dict[str, int] = {name: free_port() for name in (*PORT_VARIABLES, *ports)}
        low = free_range(tcp_ports)
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("DYNAMODB_ENDPOINT_URL", *drop)
        }  # make run's own store
        self.env.update({k: str(v) for k, v in self.ports.items()})
        self.env.update(
            {
                "DATA_DIR": data_dir,
                "EDGE_TCP_PORTS": f"{low}-{low + tcp_ports - 1}",
                "PYTHONUNBUFFERED": "1",
                **(env or {}),
            }
        )
        self.lines: List[str] = []
        self.proc: Optional[subprocess.Popen] = None
        self.banner = ""

    # ---- life ------------------------------------------------------------------------------
    def start(self, timeout: float = 120) -> "MakeRun":
        self.proc = subprocess.Popen(
            [sys.executable, "scripts/serve.py", "--edge"],
            cwd=PROJECT_DIR,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        stdout = self.proc.stdout
        threading.Thread(target=lambda: self.lines.extend(stdout), daemon=True).start()
        deadline = time.time() + timeout
        while time.time() < deadline and not any("serving on" in x for x in self.lines):
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the reader's last lines
                break
            time.sleep(0.1)
        self.banner = self.output()
        if "serving on" not in self.banner:
            self.stop()
            raise AssertionError(f"make run did not start:\n{self.banner}")
        return self

    def interrupt(self, timeout: float = 30) -> int:
        """Ctrl-C: the exit status (the test fails if it does not stop within ``timeout``,
        saying where it waits: its output, with every thread's stack of scripts/serve.py, and
        the state of each of its processes)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # its threads' stacks (faulthandler)
            time.sleep(1.0)
            states = "\n".join(_process_states(self.proc.pid))
            raise AssertionError(
                f"make run did not stop within {timeout:g} s of Ctrl-C\n{states}\n"
                f"{''.join(self.lines[-80:])}"
            ) from None
        time.sleep(0.2)  # the reader's last lines
        return status

    def stop(self) -> None:
        """Ctrl-C, then kill when it does not stop within 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "MakeRun":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def output(self) -> str:
        return "".join(self.lines)

    # ---- what the banner tells a user ----------------------------------------------------
    @property
    def key(self) -> str:
        return self.banner.split("admin API key:\n", 1)[1].split("\n", 1)[0].strip()

    @property
    def agent_addr(self) -> str:
        return _found(r"agents connect to (\S+) \(TLS", self.banner)

    @property
    def ca_path(self) -> str:
        return _found(r"edge CA certificate: (\S+)", self.banner)

    @property
    def dashboard_url(self) -> str:
        return _found(r"dashboard: (http://\S+)", self.banner)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['PORT']}"

    @property
    def server_addr(self) -> str:  # what stacks.agents.SdkAgent reads of an edge
        return self.agent_addr

    def credential(self, description: str = "test") -> Dict[str, str]:
        """A new credential through the API (its ``token`` is an authtoken)."""
        import requests

        resp = requests.post(
            f"{self.api_url}/credentials",
            json={"description": description},
            headers={"Authorization": f"Bearer {self.key}", "Ngrok-Version": "2"},
            timeout=30,
        )
        resp.raise_for_status()
        return resp.json()


def _found(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    if match is None:
        raise AssertionError(f"{pattern!r} not in the output of make run:\n{text}")
    return match.group(1)


def _process_states(root: int) -> List[str]:
    """``root`` and its descendants: pid, state, kernel wait channel, command line."""
    children: Dict[int, List[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as handle:
                state = next(
                    (l.split(":", 1)[1].strip() for l in handle if l.startswith("State")), "?"
                )
            with open(f"/proc/{pid}/wchan") as handle:
                wchan = handle.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            continue
        out.append(f"pid {pid} {state} wchan={wchan} {cmdline}")
    return out
