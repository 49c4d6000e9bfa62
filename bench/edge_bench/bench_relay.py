"""The CPU a relay between edge instances adds to a request (docs/CLUSTER.md).

    .venv/bin/python bench/edge_bench/bench_relay.py [--requests 2000] [--clients 4]

Two instances (scripts/cluster.py up -n 2, on a store + API of their own), an official SDK
agent (tests/edge/sdk_agent.py) on instance 0. The same small GETs go to instance 0's HTTP
port (local) and to instance 1's (relayed to instance 0), on keep-alive connections and on a
new connection per request; CPU time of both edge processes is read from /proc before and
after, and printed in µs per request (what the relay costs whatever else the machine runs).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

import requests  # noqa: E402

from bench.edge_bench.bench_edge import cpu_seconds  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402


class Target:
    def __init__(self, server_addr: str, ca_path: str):
        self.server_addr, self.ca_path = server_addr, ca_path


def load(port: int, host: str, total: int, clients: int, keep_alive: bool) -> float:
    def client(count: int) -> None:
        session = requests.Session() if keep_alive else None
        for _ in range(count):
            headers = {"Host": host} if keep_alive else {"Host": host, "Connection": "close"}
            getter = session.get if session is not None else requests.get
            resp = getter(f"http://127.0.0.1:{port}/echo", headers=headers, timeout=30)
            assert resp.status_code == 200, resp.text

    threads = [threading.Thread(target=client, args=(total // clients,)) for _ in range(clients)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(stack.data_dir)
        stack.start()
        data_dir = os.path.join(tmp, "cluster")
        proc = subprocess.Popen(
            [
                sys.executable,
                os.path.join(ROOT, "scripts", "cluster.py"),
                "up",
                "-n",
                "2",
                "--data-dir",
                data_dir,
                "--store-env",
                os.path.join(stack.data_dir, "store.env"),
            ],
            cwd=ROOT,
            env=stack.store_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        agent = None
        try:
            info_path = os.path.join(data_dir, "cluster.json")
            while not os.path.exists(info_path):
                assert proc.poll() is None, "scripts/cluster.py exited"
                time.sleep(0.2)
            with open(info_path) as handle:
                info = json.load(handle)
            inst = info["instances"]
            pids = []
            for i in inst:
                with open(i["pid_path"]) as handle:
                    pids.append(int(handle.read().split()[0]))
            admin = stack.new_admin("bench")
            token = admin.post("/credentials", {"description": "bench"}).json["token"]
            agent = SdkAgent(
                Target(f"127.0.0.1:{inst[0]['ports']['agent']}", info["ca"]),
                token,
                [{"proto": "http"}],
            )
            host = agent.start()[0]["url"].split("://")[1].split(":")[0]
            load(inst[1]["ports"]["http"], host, 200, 2, True)  # warm up both paths
            load(inst[0]["ports"]["http"], host, 200, 2, True)
            print(
                f"{'case':<28} {'req/s':>7} {'edge0 µs/req':>13} {'edge1 µs/req':>13} "
                f"{'total µs/req':>13}"
            )
            results = {}
            for keep_alive in (True, False):
                for label, index in (("local", 0), ("relayed", 1)):
                    before = [cpu_seconds(p) for p in pids]
                    took = load(
                        inst[index]["ports"]["http"], host, args.requests, args.clients, keep_alive
                    )
                    used = [
                        (cpu_seconds(p) - b) * 1e6 / args.requests for p, b in zip(pids, before)
                    ]
                    name = f"{label}, {'keep-alive' if keep_alive else 'new connection'}"
                    results[name] = sum(used)
                    print(
                        f"{name:<28} {args.requests / took:>7.0f} {used[0]:>13.0f} "
                        f"{used[1]:>13.0f} {sum(used):>13.0f}"
                    )
            for mode in ("keep-alive", "new connection"):
                added = results[f"relayed, {mode}"] - results[f"local, {mode}"]
                print(f"CPU added by the relay ({mode}): {added:.0f} µs per request")
        finally:
            if agent is not None:
                agent.stop()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
