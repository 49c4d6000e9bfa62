"""A cluster's CPU per request: three edge instances (stacks/cluster.py, as `make cluster` runs
them), the official Python SDK bound to instance 0, nginx as the upstream; wrk at 20
connections sends small GETs to the holder itself and to instance 1, which relays each
connection to the holder (docs/CLUSTER.md, "The relay"), on kept-alive connections and with a
new connection per request. CPU per request of each instance's process tree, the SDK and the
upstream from /proc, medians of ``--runs`` interleaved runs of ``--seconds``.

    .venv/bin/python bench/edge_bench/cluster_bench.py [--runs 3] [--seconds 5]
"""

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Dict, List

from bench.edge_bench.bench_peers import (  # the peers bench's instruments
    NGINX_UPSTREAM,
    Group,
    Procs,
    fmt_us,
    measure,
    median_of,
    start_nginx,
    start_sdk_agent,
    wrk,
)
from stacks.cluster import Cluster
from stacks.ports import free_port, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [  # (name, instance wrk talks to, a new connection per request)
    ("holder", 0, False),
    ("relayed", 1, False),
    ("relayed, new connection each", 1, True),
]


def start_agent(procs: Procs, cluster: Cluster, token: str, upstream: int) -> Any:
    """The SDK agent on instance 0, one HTTP endpoint to ``upstream``: (its process, host)."""
    target = cluster.agent_target(0)
    binds = [{"proto": "http", "upstream": f"http://127.0.0.1:{upstream}"}]
    agent, urls = start_sdk_agent(procs, target.server_addr, target.ca_path, token, binds)
    return agent, urls[0].split("://")[1].split(":")[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--conns", type=int, default=20)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="cluster-bench-")
    procs = Procs()
    cluster = Cluster(os.path.join(tmp, "cluster"), instances=3)
    try:
        up = free_port()
        upstream = start_nginx(procs, tmp, "up", NGINX_UPSTREAM.format(tmp=tmp, port=up))
        wait_port(up)
        cluster.start()
        admin = cluster.api.new_admin("bench")
        token = admin.post("/credentials", {"description": "bench"}).json["token"]
        agent, host = start_agent(procs, cluster, token, up)
        group = Group(
            {
                "holder": cluster.pid(0),
                "relaying": cluster.pid(1),
                "sdk": agent.pid,
                "upstream": upstream.pid,
            }
        )
        for index in (0, 1):  # the route pushed, every path warm
            wrk(f"http://127.0.0.1:{cluster.http_port(index)}/echo", 4, 2, tmp, host=host)
        runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name, _, _ in CASES}
        for _ in range(args.runs):
            for name, index, close in CASES:
                url = f"http://127.0.0.1:{cluster.http_port(index)}/echo"
                runs[name].append(
                    measure(
                        group,
                        lambda: wrk(url, args.conns, args.seconds, tmp, host=host, close=close),
                    )
                )
        print(f"small GET, {args.conns} connections, a cluster of 3 (the SDK bound to instance 0)")
        print(f"  {'path':32} {'req/s':>8}   CPU µs per request")
        results = {}
        for name, _, _ in CASES:
            row = median_of(runs[name])
            results[name] = row
            cpu = row["cpu_us"]
            parts = ", ".join(
                f"{k} {fmt_us(cpu[k])}"
                for k in ("holder", "relaying", "sdk", "upstream", "client")
            )
            print(f"  {name:32} {row['rps']:8.0f}   {parts}")
        with open(os.path.join(HERE, "cluster_latest.json"), "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)
        return 0
    finally:
        procs.stop()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
