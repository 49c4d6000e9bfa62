"""A cluster: the API with its store (stacks.api) and N edge instances behind HAProxy (TCP),
started by ``scripts/cluster.py up`` (docs/CLUSTER.md), as processes on 127.0.0.1."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from stacks.api import ApiProcess
from stacks.paths import BASE_DOMAIN, PROJECT_DIR
from stacks.ports import free_range
from stacks.process import read_tail, stop_process


@dataclass
class Target:
    """Where an agent connects: one instance's agent port, or HAProxy's."""

    server_addr: str
    ca_path: str


class Cluster:
    """``instances`` edges behind HAProxy beside one API and store, in ``data_dir`` (a
    temporary directory when None); the instances share ``secret`` (EDGE_CLUSTER_SECRET) and
    ``env`` is added to every process's environment. After ``start``: ``api`` (the
    ApiProcess), ``info`` (scripts/cluster.py's cluster.json: ``ca``, ``front``'s ports, each
    instance's ports, pid file and log)."""

    def __init__(
        self,
        data_dir: Optional[str] = None,
        instances: int = 3,
        secret: str = "",
        env: Optional[Dict[str, str]] = None,
        check_seconds: int = 1,
    ) -> None:
        self._own_dir = data_dir is None
        self.root = data_dir or tempfile.mkdtemp(prefix="tunnel-cluster-")
        self.data_dir = os.path.join(self.root, "cluster")
        self.count = instances
        self.secret = secret or "cluster-secret-" + os.urandom(8).hex()
        self.check_seconds = check_seconds
        tcp_low = free_range(5)
        self.env = {
            "EDGE_TCP_PORTS": f"{tcp_low}-{tcp_low + 4}",
            "BASE_DOMAIN": BASE_DOMAIN,
            **(env or {}),
        }
        self.api = ApiProcess(data_dir=os.path.join(self.root, "api"), extra_env=self.env)
        self.proc: Optional[subprocess.Popen] = None
        self.info: Dict[str, Any] = {}
        self.out_path = os.path.join(self.root, "cluster.out")

    @property
    def stack(self) -> ApiProcess:  # the name tests used before (tests/edge/test_cluster.py)
        return self.api

    @property
    def ca(self) -> str:
        return self.info["ca"]

    @property
    def front(self) -> Dict[str, int]:
        return self.info["front"]

    @property
    def instances(self) -> List[Dict[str, Any]]:
        return self.info["instances"]

    # ---- life ------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> "Cluster":
        self.api.start()
        env = {**self.api.store_env(), **self.env, "EDGE_CLUSTER_SECRET": self.secret}
        with open(self.out_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(PROJECT_DIR, "scripts", "cluster.py"),
                    "up",
                    "-n",
                    str(self.count),
                    "--data-dir",
                    self.data_dir,
                    "--store-env",
                    os.path.join(self.api.data_dir, "store.env"),
                    "--check-seconds",
                    str(self.check_seconds),
                ],
                cwd=PROJECT_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        info_path = os.path.join(self.data_dir, "cluster.json")
        deadline = time.time() + timeout
        while not os.path.exists(info_path):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the cluster did not start: {read_tail(self.out_path, 3000)}")
            time.sleep(0.2)
        with open(info_path) as handle:
            self.info = json.load(handle)
        return self

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, timeout=40)
        self.api.stop()
        if self._own_dir:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- where things are ------------------------------------------------------------------
    def agent_target(self, index: int = -1) -> Target:
        port = self.front["agent"] if index < 0 else self.instances[index]["ports"]["agent"]
        return Target(f"127.0.0.1:{port}", self.ca)

    def http_port(self, index: int = -1) -> int:
        return self.front["http"] if index < 0 else self.instances[index]["ports"]["http"]

    def https_port(self, index: int = -1) -> int:
        return self.front["https"] if index < 0 else self.instances[index]["ports"]["https"]

    def get(self, host: str, path: str = "/echo", index: int = -1, **kw: Any) -> Any:
        """A ``requests`` GET through HAProxy (or instance ``index``), ``host`` in Host."""
        import requests

        return requests.get(
            f"http://127.0.0.1:{self.http_port(index)}{path}",
            headers={"Host": host, "Connection": "close"},
            timeout=60,
            **kw,
        )

    def metrics(self, index: int) -> str:
        """Instance ``index``'s /metrics text."""
        import requests

        port = self.instances[index]["ports"]["metrics"]
        return requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    def pid(self, index: int) -> int:
        with open(self.instances[index]["pid_path"]) as handle:
            return int(handle.read().split()[0])

    def holder_index(self, name: str) -> Optional[int]:
        """Which instance holds ``name``'s claim (its id: edge_<index>_<random>), or None."""
        client = self.api.store_client()
        item = client.get_item(
            TableName="tunnel-service",
            ConsistentRead=True,
            Key={"pk": {"S": f"U#served_host#{name}"}, "sk": {"S": "U"}},
        )
        if "Item" not in item:
            return None  # nobody claims it
        return int(item["Item"]["instance_id"]["S"].split("_")[1])

    def relay_port(self, index: int) -> int:
        """Instance ``index``'s relay listener (its log's last "relays at" line)."""
        line = [x for x in self.log(index).splitlines() if "relays at" in x][-1]
        return int(line.rsplit(":", 1)[1])

    def log(self, index: int) -> str:
        with open(self.instances[index]["log"], errors="replace") as handle:
            return handle.read()
