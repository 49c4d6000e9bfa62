"""An edge (``python -m edge``) as a process, and the edge stack: the API with its store
(stacks.api) and one edge on that store."""

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import urlsplit

from stacks.http import Resp
from stacks.http import request as http_request
from stacks.api import Admin, ApiProcess
from stacks.paths import BASE_DOMAIN, PROJECT_DIR
from stacks.ports import free_port, free_range
from stacks.process import read_tail, stop_process

READY_MARK = "edge CA certificate"  # the edge's log line once it listens


@dataclass
class EdgeProcess:
    """``python -m edge`` on free ports against the store at ``store_url``; its CA and state in
    ``data_dir``, its output in ``data_dir``/edge.log (edge-2.log, … after a restart)."""

    data_dir: str
    store_url: str
    agent_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    https_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    ssh_port: int = field(default_factory=free_port)  # the SSH gateway (docs/SSH.md)
    tcp_low: int = 0  # the first of ``tcp_ports`` TCP listener ports (0: free ones at start)
    tcp_ports: int = 5
    process: Optional[subprocess.Popen] = None
    log_path: str = ""
    python: str = sys.executable  # another interpreter: the edge image's environment
    cwd: str = PROJECT_DIR  # another tree: only what the edge image copies
    starts: int = 0

    @property
    def ca_path(self) -> str:
        return os.path.join(self.data_dir, "ca.pem")

    @property
    def server_addr(self) -> str:
        return f"127.0.0.1:{self.agent_port}"

    def start(self, env_base: Dict[str, str], timeout: float = 30.0) -> "EdgeProcess":
        """Start with ``env_base`` (the store's endpoint and secret: ApiProcess.store_env) and
        the ports; return once it listens. A stopped edge starts again on the same ports."""
        self.tcp_low = self.tcp_low or free_range(self.tcp_ports)
        env = dict(env_base)
        env.update(
            {
                "DYNAMODB_ENDPOINT_URL": self.store_url,
                "DATA_DIR": self.data_dir,
                "EDGE_AGENT_PORT": str(self.agent_port),
                "EDGE_HTTP_PORT": str(self.http_port),
                "EDGE_HTTPS_PORT": str(self.https_port),
                "EDGE_METRICS_PORT": str(self.metrics_port),
                "EDGE_SSH_PORT": str(self.ssh_port),
                "EDGE_TCP_PORTS": f"{self.tcp_low}-{self.tcp_low + self.tcp_ports - 1}",
                "EDGE_CHECK_SECONDS": "1",
                "EDGE_STATIC_BACKEND_ALLOW": "127.0.0.0/8",  # the tests' static backends
                "BASE_DOMAIN": BASE_DOMAIN,
                "PYTHONUNBUFFERED": "1",
            }
        )
        os.makedirs(self.data_dir, exist_ok=True)
        self.starts += 1
        name = "edge.log" if self.starts == 1 else f"edge-{self.starts}.log"
        self.log_path = os.path.join(self.data_dir, name)
        log = open(self.log_path, "wb")
        prefix = os.environ.get("EDGE_PROFILE")  # a cProfile output path (bench/edge_bench)
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
            if READY_MARK in self.log():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"the edge did not start in {timeout}s: {self.log()}")

    def stop(self) -> None:
        stop_process(self.process, timeout=15)

    def log(self) -> str:
        return read_tail(self.log_path, 6000)

    # ---- the operator endpoint (edge/metrics.py) -------------------------------------------
    def session_streams(self, session_id: str) -> Optional[Dict[str, int]]:
        """The muxado stream table of one agent session, or None when the edge holds no
        such session."""
        import requests

        resp = requests.get(
            f"http://127.0.0.1:{self.metrics_port}/sessions/{session_id}", timeout=10
        )
        return resp.json() if resp.status_code == 200 else None

    def metrics(self) -> str:
        import requests

        return requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text

    # ---- public clients -------------------------------------------------------------------
    def public(self, method: str, url: str, path: str = "/", **kwargs: Any) -> Resp:
        """A request to a tunnel's URL (standard library), sent to the listener for its scheme
        with the URL's host in Host (what curl does for *.localhost by itself); HTTPS trusts
        the edge's CA without checking the name."""
        parts = urlsplit(url)
        headers = {"Host": parts.netloc, **kwargs.pop("headers", {})}
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_path)
            context.check_hostname = False
            return http_request(
                method,
                f"https://127.0.0.1:{self.https_port}{path}",
                headers=headers,
                context=context,
                **kwargs,
            )
        return http_request(
            method, f"http://127.0.0.1:{self.http_port}{path}", headers=headers, **kwargs
        )

    def http(self, method: str, hostname: str, path: str = "/", **kwargs: Any) -> Any:
        """A ``requests`` response from the HTTP listener, ``hostname`` in Host."""
        import requests

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


@dataclass
class EdgeStack:
    """The API with its store (``api``) and one edge on that store (``edge``), in
    ``data_dir``/api and ``data_dir``/edge (a temporary directory, removed at stop, when
    None). The API allocates reserved TCP addresses from the edge's range.

    ``api_env`` and ``edge_env`` are added to each one's environment; ``tcp_ports`` is the
    size of the edge's TCP range. With ``admin_name``, an account is made at start and
    ``admin`` is its admin API key's client."""

    data_dir: Optional[str] = None
    api_env: Dict[str, str] = field(default_factory=dict)
    edge_env: Dict[str, str] = field(default_factory=dict)
    drop_prefixes: Sequence[str] = ()
    tcp_ports: int = 5
    python: str = sys.executable
    api_timeout: float = 60.0
    admin_name: str = ""
    admin: Optional[Admin] = field(init=False, default=None)
    api: ApiProcess = field(init=False)
    edge: EdgeProcess = field(init=False)
    _own_dir: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="tunnel-edge-stack-")
            self._own_dir = True
        tcp_low = free_range(self.tcp_ports)
        self.api = ApiProcess(
            data_dir=os.path.join(self.data_dir, "api"),
            extra_env={
                "EDGE_TCP_PORTS": f"{tcp_low}-{tcp_low + self.tcp_ports - 1}",
                "BASE_DOMAIN": BASE_DOMAIN,
                **self.api_env,
            },
            drop_prefixes=self.drop_prefixes,
            python=self.python,
        )
        self.edge = EdgeProcess(
            data_dir=os.path.join(self.data_dir, "edge"),
            store_url=self.api.store_url,
            tcp_low=tcp_low,
            tcp_ports=self.tcp_ports,
            python=self.python,
        )

    def edge_env_base(self) -> Dict[str, str]:
        """What the edge starts with: the store's endpoint and this start's secret, and
        ``edge_env``."""
        return {**self.api.store_env(), "BASE_DOMAIN": BASE_DOMAIN, **self.edge_env}

    def start(self) -> "EdgeStack":
        try:
            self.api.start(timeout=self.api_timeout)
            if self.admin_name:
                self.admin = self.api.new_admin(self.admin_name)
            self.edge.start(self.edge_env_base())
        except BaseException:
            self.stop()
            raise
        return self

    def start_edge(self) -> None:
        """Start the (stopped) edge again on the same ports and data."""
        self.edge.start(self.edge_env_base())

    def stop(self) -> None:
        self.edge.stop()
        self.api.stop()
        if self._own_dir and self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "EdgeStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- shortcuts: what an agent and a test read of the stack ------------------------------
    @property
    def server_addr(self) -> str:
        return self.edge.server_addr

    @property
    def ca_path(self) -> str:
        return self.edge.ca_path

    @property
    def http_port(self) -> int:
        return self.edge.http_port

    @property
    def https_port(self) -> int:
        return self.edge.https_port

    @property
    def api_url(self) -> str:
        return self.api.base_url

    @property
    def admin_key(self) -> str:
        assert self.admin is not None, "no admin_name: no account was made"
        return self.admin.key

    def call(self, method: str, path: str, body: Any = None) -> Resp:
        """The API with the admin key (``admin_name``)."""
        assert self.admin is not None, "no admin_name: no account was made"
        return self.admin.call(method, path, body)

    def bot_credential(self, acl: Optional[List[str]] = None) -> Dict[str, Any]:
        assert self.admin is not None, "no admin_name: no account was made"
        return self.admin.bot_credential(acl)

    def public(self, method: str, url: str, path: str = "/", **kwargs: Any) -> Resp:
        return self.edge.public(method, url, path, **kwargs)
