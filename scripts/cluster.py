"""N edge instances behind HAProxy on the loopback, beside the store and the API (docs/CLUSTER.md).

    python scripts/cluster.py up [-n 3] [--data-dir DIR] [--agent-port 4443]
                                 [--http-port 8080] [--https-port 8443] [--store-env FILE]
    python scripts/cluster.py restart [--data-dir DIR] [--instance K]   (default: all, in turn)

``up`` runs in the foreground until Ctrl-C/SIGTERM: ``scripts/serve.py`` (store + API) unless
``--store-env`` names the ``store.env`` of a stack already running, then N ``python -m edge``
with ``EDGE_CLUSTER_SECRET`` (edge/cluster.py), each on its own free ports and a relay
listener, all on one TCP port range (SO_REUSEPORT: every instance may listen on a reserved
address's port), then HAProxy (TCP mode) on the public ports, balancing agents (leastconn)
and public connections (round robin) over the instances, each checked every second. An
instance that exits is started again (a fresh instance id, the same ports). DIR/cluster.json
says where everything is; DIR/edge-K.pid is instance K's process.

``restart`` sends SIGTERM to one instance (it drains: edge.cluster) and waits until the
supervisor has started it again and it serves; without ``--instance``, every instance in turn.
"""

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from stacks.ports import free_port

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY_MARK = "edge CA certificate"


def read_env(path: str) -> Dict[str, str]:
    env = {}
    with open(path) as handle:
        for line in handle:
            name, _, value = line.strip().partition("=")
            if name:
                env[name] = value
    return env


class Instance:
    def __init__(self, index: int, data_dir: str, env: Dict[str, str]):
        self.index = index
        self.data_dir = os.path.join(data_dir, f"edge-{index}")
        os.makedirs(self.data_dir, exist_ok=True)
        self.pid_path = os.path.join(data_dir, f"edge-{index}.pid")
        self.log_path = os.path.join(data_dir, f"edge-{index}.log")
        self.ports = {
            "agent": free_port(),
            "http": free_port(),
            "https": free_port(),
            "metrics": free_port(),
            "ssh": free_port(),
        }
        self.env = dict(
            env,
            DATA_DIR=self.data_dir,
            EDGE_AGENT_PORT=str(self.ports["agent"]),
            EDGE_HTTP_PORT=str(self.ports["http"]),
            EDGE_HTTPS_PORT=str(self.ports["https"]),
            EDGE_METRICS_PORT=str(self.ports["metrics"]),
            EDGE_SSH_PORT=str(self.ports["ssh"]),
            PYTHONUNBUFFERED="1",
        )
        self.process: Optional[subprocess.Popen] = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.env["EDGE_INSTANCE_ID"] = f"edge_{self.index}_{secrets.token_hex(4)}"
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "edge"],
                cwd=PROJECT_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with open(self.pid_path + ".tmp", "w") as handle:
            handle.write(f"{self.process.pid} starting\n")
        os.replace(self.pid_path + ".tmp", self.pid_path)

    def serving(self) -> bool:
        try:
            with open(self.log_path, errors="replace") as handle:
                text = handle.read()
        except OSError:
            return False
        return text.rsplit(f"--- start {self.starts}\n", 1)[-1].count(READY_MARK) > 0

    def mark_ready(self) -> None:
        assert self.process is not None
        with open(self.pid_path + ".tmp", "w") as handle:
            handle.write(f"{self.process.pid} serving\n")
        os.replace(self.pid_path + ".tmp", self.pid_path)

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                with open(self.log_path, errors="replace") as handle:
                    tail = handle.read()[-2000:]
                raise SystemExit(f"edge {self.index} exited at start: {tail}")
            if self.serving():
                self.mark_ready()
                return
            time.sleep(0.1)
        raise SystemExit(f"edge {self.index} did not start in {timeout}s; see {self.log_path}")


def haproxy_config(front: Dict[str, int], instances: List[Instance]) -> str:
    lines = [
        "global",
        "    maxconn 8000",
        "defaults",
        "    mode tcp",
        "    timeout connect 2s",
        "    timeout client 1h",
        "    timeout server 1h",
        "    timeout client-fin 30s",
        "    timeout server-fin 30s",
        "    option redispatch",
        "    retries 3",
    ]
    for name, balance in (("agent", "leastconn"), ("http", "roundrobin"), ("https", "roundrobin")):
        lines += [
            f"frontend {name}",
            f"    bind 127.0.0.1:{front[name]}",
            f"    default_backend {name}_edges",
            f"backend {name}_edges",
            f"    balance {balance}",
        ]
        for inst in instances:
            lines.append(
                f"    server edge{inst.index} 127.0.0.1:{inst.ports[name]} "
                "check inter 1s fall 1 rise 1"
            )
    return "\n".join(lines) + "\n"


def up(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    children: List[subprocess.Popen] = []
    stack = None
    front = {
        "agent": args.agent_port or free_port(),
        "http": args.http_port or free_port(),
        "https": args.https_port or free_port(),
    }
    public = {  # the URLs name HAProxy's ports: the agents' (edges) and cloud endpoints' (API)
        "EDGE_PUBLIC_HTTP_PORT": str(front["http"]),
        "EDGE_PUBLIC_HTTPS_PORT": str(front["https"]),
    }
    if args.store_env:
        env = {**os.environ, **read_env(args.store_env)}
    else:
        stack_dir = os.path.join(data_dir, "stack")
        os.makedirs(stack_dir, exist_ok=True)
        api_port = args.api_port or free_port()
        env = {
            **os.environ,
            "PORT": str(api_port),
            "STORE_PORT": str(free_port()),
            "DATA_DIR": stack_dir,
            "PYTHONUNBUFFERED": "1",
            **public,
        }
        env.pop("DYNAMODB_ENDPOINT_URL", None)
        stack = subprocess.Popen(
            [sys.executable, os.path.join(PROJECT_DIR, "scripts", "serve.py")],
            cwd=PROJECT_DIR,
            env=env,
        )
        children.append(stack)
        store_env = os.path.join(stack_dir, "store.env")
        deadline = time.time() + 120
        while not os.path.exists(store_env) and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        env = {**env, **read_env(store_env)}
        print(f"cluster: API at http://127.0.0.1:{api_port}", flush=True)
    low = args.tcp_low
    env.update(
        {
            "EDGE_CLUSTER_SECRET": os.environ.get("EDGE_CLUSTER_SECRET")
            or secrets.token_urlsafe(32),
            "EDGE_TCP_PORTS": env.get("EDGE_TCP_PORTS") or f"{low}-{low + 99}",
        }
    )
    if args.check_seconds:
        env["EDGE_CHECK_SECONDS"] = str(args.check_seconds)
    env.update(public)
    instances = [Instance(k, data_dir, env) for k in range(args.n)]
    instances[0].start()
    instances[0].wait_serving()
    for inst in instances[1:]:  # one CA for the fleet: the agents verify any instance
        for name in ("ca.pem", "ca-key.pem"):
            shutil.copy2(
                os.path.join(instances[0].data_dir, name), os.path.join(inst.data_dir, name)
            )
        inst.start()
    for inst in instances[1:]:
        inst.wait_serving()
    cfg_path = os.path.join(data_dir, "haproxy.cfg")
    with open(cfg_path, "w") as handle:
        handle.write(haproxy_config(front, instances))
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", cfg_path], cwd=data_dir)
    children.append(haproxy)
    info = {
        "front": front,
        "ca": os.path.join(instances[0].data_dir, "ca.pem"),
        "tcp_ports": env["EDGE_TCP_PORTS"],
        "haproxy_pid": haproxy.pid,
        "instances": [
            {"index": i.index, "ports": i.ports, "pid_path": i.pid_path, "log": i.log_path}
            for i in instances
        ],
    }
    with open(os.path.join(data_dir, "cluster.json.tmp"), "w") as handle:
        json.dump(info, handle)
    time.sleep(0.5)  # HAProxy's first checks
    os.replace(os.path.join(data_dir, "cluster.json.tmp"), os.path.join(data_dir, "cluster.json"))
    print(
        f"cluster: {args.n} edges; agents at 127.0.0.1:{front['agent']}, HTTP at "
        f"127.0.0.1:{front['http']}, HTTPS at 127.0.0.1:{front['https']}; "
        f"{data_dir}/cluster.json",
        flush=True,
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        while not stopping:
            for inst in instances:  # the supervisor: an instance that exits starts again
                assert inst.process is not None
                if inst.process.poll() is not None:
                    print(
                        f"cluster: edge {inst.index} exited ({inst.process.returncode});"
                        " starting it again",
                        flush=True,
                    )
                    inst.start()
                elif not inst.serving():
                    continue
                else:
                    with open(inst.pid_path) as handle:
                        if "serving" not in handle.read():
                            inst.mark_ready()
            if haproxy.poll() is not None:
                raise SystemExit("haproxy exited")
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        for inst in instances:
            if inst.process is not None and inst.process.poll() is None:
                inst.process.terminate()
        for child in children[::-1]:
            if child.poll() is None:
                child.send_signal(signal.SIGINT if child is stack else signal.SIGTERM)
        for proc in [i.process for i in instances] + children:
            try:
                if proc is not None:
                    proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


def _pid_state(path: str) -> List[str]:
    try:
        with open(path) as handle:
            return handle.read().split()
    except OSError:
        return []


def restart(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    with open(os.path.join(data_dir, "cluster.json")) as handle:
        info = json.load(handle)
    order = (
        [args.instance] if args.instance is not None else [i["index"] for i in info["instances"]]
    )
    for index in order:
        path = os.path.join(data_dir, f"edge-{index}.pid")
        old = _pid_state(path)
        if not old:
            raise SystemExit(f"no instance {index}")
        started = time.time()
        os.kill(int(old[0]), signal.SIGTERM)
        deadline = time.time() + args.timeout
        while time.time() < deadline:
            state = _pid_state(path)
            if state and state[0] != old[0] and state[1:] == ["serving"]:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"edge {index} did not come back in {args.timeout}s")
        print(f"edge {index}: restarted in {time.time() - started:.1f}s", flush=True)
        time.sleep(args.pause)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("-n", type=int, default=3)
    p_up.add_argument("--data-dir", default=os.environ.get("DATA_DIR", ".data/cluster"))
    p_up.add_argument("--store-env", default="")
    p_up.add_argument("--api-port", type=int, default=0)
    p_up.add_argument("--agent-port", type=int, default=0)
    p_up.add_argument("--http-port", type=int, default=0)
    p_up.add_argument("--https-port", type=int, default=0)
    p_up.add_argument("--tcp-low", type=int, default=20000)
    p_up.add_argument("--check-seconds", type=float, default=0)
    p_re = sub.add_parser("restart")
    p_re.add_argument("--data-dir", default=os.environ.get("DATA_DIR", ".data/cluster"))
    p_re.add_argument("--instance", type=int, default=None)
    p_re.add_argument("--timeout", type=float, default=60.0)
    p_re.add_argument(
        "--pause",
        type=float,
        default=2.0,
        help="seconds between instances (agents settle on the others)",
    )
    args = parser.parse_args(argv)
    return up(args) if args.command == "up" else restart(args)


if __name__ == "__main__":
    sys.exit(main())
