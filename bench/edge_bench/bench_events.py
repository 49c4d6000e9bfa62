"""What event subscriptions cost a request: the same load through the edge to three accounts'
endpoints, side by side, interleaved (A B C A B C …, so the machine's load hits all three):

- **none**: no event subscription;
- **kinesis**: ``http_request_complete.v0`` to a Kinesis stream that takes every record;
- **refusing**: the same to a destination that refuses every call (a stream that does not
  exist: every PutRecords fails, is retried with back-off, then dropped).

Reports requests/s, p50/p99 latency, non-200 answers (must be 0: a destination never changes
a status), the edge's CPU µs per request and its delivery process's (built, encoded and sent
there) and moto's (the stand-in for AWS, on the same two cores: it takes CPU a real
Kinesis would not), plus the events sent / retried / dropped the
edge's /metrics counted. Writes bench/edge_bench/events_latest.json.

    .venv/bin/python bench/edge_bench/bench_events.py [--seconds 8] [--concurrency 10] [--rounds 3]

Everything runs here as processes: store + API (scripts/serve.py), moto's server (Kinesis),
the edge (EVENTS_AWS_ENDPOINT_URL at moto), one SDK agent per account.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

import boto3  # noqa: E402
import requests  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench.edge_bench.bench_edge import load, measured  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.moto import MotoServer  # noqa: E402
from stacks.edge import EdgeProcess  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402

KEYS = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/{}"


def children(pid: int) -> list:
    """The child processes of ``pid`` (the edge's delivery process)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found += [int(c) for c in fh.read().split()]
    return found


def counters(edge: EdgeProcess) -> dict:
    text = requests.get(f"http://127.0.0.1:{edge.metrics_port}/metrics", timeout=10).text
    out: dict = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("edge_events_sent", "edge_events_retried", "edge_events_dropped"):
            out[family.name] = sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict = {
        "machine": f"{os.cpu_count()} cores",
        "concurrency": args.concurrency,
        "seconds_per_run": args.seconds,
        "rounds": args.rounds,
    }
    with tempfile.TemporaryDirectory(prefix="events-bench-") as tmp:
        # API and edge share the sealing key (the API seals a destination's secret, the edge
        # opens it), as `make run` does through its one DATA_DIR
        os.environ["TLS_KEY_FILE"] = os.path.join(tmp, "tls-keys.secret")
        moto = MotoServer(tmp).start()
        moto_url = moto.url
        stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(stack.data_dir)
        stack.start()
        edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=stack.store_url)
        os.makedirs(edge.data_dir)
        agents = []
        try:
            kinesis = boto3.client("kinesis", region_name="us-east-1", endpoint_url=moto_url)
            kinesis.create_stream(StreamName="bench", ShardCount=1)
            edge.start({**stack.store_env(), "EVENTS_AWS_ENDPOINT_URL": moto_url})
            hosts = {}
            for case, stream in (
                ("none", None),
                ("kinesis", "bench"),
                ("refusing", "no-such-stream"),
            ):
                admin = stack.new_admin(f"bench-{case}")
                if stream is not None:
                    dest = admin.post(
                        "/event_destinations",
                        {
                            "target": {
                                "kinesis": {
                                    "stream_arn": ARN.format(stream),
                                    "auth": {"creds": KEYS},
                                }
                            }
                        },
                    ).json
                    admin.post(
                        "/event_subscriptions",
                        {
                            "sources": [{"type": "http_request_complete.v0"}],
                            "destination_ids": [dest["id"]],
                        },
                    )
                token = admin.post("/credentials", {}).json["token"]
                agent = SdkAgent(edge, token, [{"proto": "http"}])
                agents.append(agent)
                url = agent.start()[0]["url"]
                hosts[case] = (url.split("://")[1].split(":")[0], agent)
            before = counters(edge)
            runs: dict = {case: [] for case in hosts}
            for _ in range(args.rounds):
                for case, (host, agent) in hosts.items():
                    pids = {
                        "edge": edge.process.pid,
                        "agent": agent.process.pid,
                        "moto": moto.process.pid,
                    }
                    for number, child in enumerate(children(edge.process.pid)):
                        pids[f"delivery{number}"] = child
                    runs[case].append(
                        measured(
                            pids,
                            lambda: asyncio.run(
                                load(
                                    edge.http_port,
                                    host,
                                    "GET",
                                    "/echo",
                                    b"",
                                    args.seconds,
                                    args.concurrency,
                                )
                            ),
                        )
                    )
            time.sleep(5)  # let the worker deliver, retry and drop what it holds
            after = counters(edge)
            rows = []
            for case, got in runs.items():
                total = sum(r["requests"] for r in got)
                rows.append(
                    {
                        "case": case,
                        "requests": total,
                        "rps": round(sum(r["rps"] for r in got) / len(got), 1),
                        "p50_ms": round(sorted(r["p50_ms"] for r in got)[len(got) // 2], 2),
                        "p99_ms": round(sorted(r["p99_ms"] for r in got)[len(got) // 2], 2),
                        "non_200": sum(r["non_200"] for r in got),
                        "edge_cpu_us": round(
                            sorted(r["cpu_us_per_request"]["edge"] for r in got)[len(got) // 2], 1
                        ),
                        "delivery_process_cpu_us": round(
                            sorted(
                                sum(
                                    v
                                    for k, v in r["cpu_us_per_request"].items()
                                    if k.startswith("delivery")
                                )
                                for r in got
                            )[len(got) // 2],
                            1,
                        ),
                        "moto_cpu_us": round(
                            sorted(r["cpu_us_per_request"]["moto"] for r in got)[len(got) // 2], 1
                        ),
                    }
                )
            results["cases"] = rows
            results["events"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        finally:
            for agent in agents:
                agent.stop()
            edge.stop()
            stack.stop()
            moto.stop()
    base = results["cases"][0]
    print(
        f"{'case':<9} {'rps':>7} {'p50 ms':>7} {'p99 ms':>7} {'non-200':>7} "
        f"{'edge CPU µs/req':>15} {'delivery µs/req':>15} {'moto µs/req':>11}  vs none"
    )
    for row in results["cases"]:
        print(
            f"{row['case']:<9} {row['rps']:>7} {row['p50_ms']:>7} {row['p99_ms']:>7} "
            f"{row['non_200']:>7} {row['edge_cpu_us']:>15} "
            f"{row['delivery_process_cpu_us']:>15} {row['moto_cpu_us']:>11}  "
            f"p50 {row['p50_ms'] / base['p50_ms']:.2f}x, CPU "
            f"{row['edge_cpu_us'] / base['edge_cpu_us']:.2f}x"
        )
    print("events during the runs:", results["events"])
    with open(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "events_latest.json"), "w"
    ) as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
