"""Edge benchmark: throughput and latency through the edge vs direct to the same upstream,
and idle agent sessions held vs the edge's RSS. Prints a table; writes bench/edge_bench/latest.json.

    .venv/bin/python bench/edge_bench/bench_edge.py [--seconds 10] [--concurrency 20]
    (cases: small GET and 1 MB POST at that concurrency, small GETs one at a time on one
    connection, which shows per-request latency rather than throughput, and small GETs each
    on a new connection at that concurrency, which shows what a connection costs)
        [--sessions 0,100,500,1000]

EDGE_PROFILE=/tmp/edge.prof runs the edge under cProfile (pstats afterwards).

Besides requests/s (which on a shared 2-core machine depend on whatever else runs), each
case reports the CPU time per request of each process on the path, read from /proc before
and after the load: ``edge`` (the edge itself), ``agent`` (the SDK process: the official
SDK's Rust session plus the upstream it forwards to, an aiohttp server), ``upstream`` (the
same process, in the direct case: the upstream alone) and ``client`` (the load generator).
CPU per request is what the edge costs whatever the machine's load; and since every process
shares the same two cores, ``2 cores / (sum of CPU per request)`` bounds the throughput of
each path, so the ratio the hardware allows with a free edge can be read from the agent's
figure alone.
Everything runs on this machine as processes (the measurement shares its cores with them):
store + API (scripts/serve.py), the edge (python -m edge), an agent on the official Python SDK
(tests/edge/sdk_agent.py, .venv-agent) forwarding to its aiohttp upstream. Load comes from one
asyncio client process with ``concurrency`` keep-alive connections; "direct" is the same client
against the upstream's own port. Idle sessions are raw protocol clients (TLS + muxado + Auth
with a long heartbeat interval) from this process: a load generator, not a test of the edge.
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from stacks import muxado  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.edge import EdgeProcess  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402

BIG = os.urandom(1024 * 1024)
# Five rules that all run on every request and change nothing the upstream sees much.
FIVE_RULES = {
    "on_http_request": [
        {
            "name": f"r{i}",
            "expressions": [
                f"req.url.path.startsWith('/echo') && !('x-block-{i}' in req.headers)"
            ],
            "actions": [{"type": "add-headers", "config": {"headers": {f"x-rule-{i}": "1"}}}],
        }
        for i in range(5)
    ]
}
RATE_LIMIT = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "rate-limit",
                    "config": {
                        "name": "bench",
                        "algorithm": "sliding_window",
                        "capacity": 10000000,
                        "rate": "60s",
                        "bucket_key": ["conn.client_ip"],
                    },
                }
            ]
        }
    ]
}


async def _request(
    reader, writer, host: str, method: str, path: str, body: bytes, close: bool = False
) -> int:
    extra = "Connection: close\r\n" if close else ""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
        f"Content-Type: application/octet-stream\r\n{extra}\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    raw = await reader.readuntil(b"\r\n\r\n")
    status = int(raw.split(b" ", 2)[1])
    length = 0
    for line in raw.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def load(
    port: int,
    host: str,
    method: str,
    path: str,
    body: bytes,
    seconds: float,
    concurrency: int,
    fresh: bool = False,
) -> dict:
    """``concurrency`` keep-alive connections, or with ``fresh`` a new connection for each
    request (Connection: close, its connect counted in its latency)."""
    latencies, bad = [], 0
    stop_at = time.perf_counter() + seconds

    async def worker():
        nonlocal bad
        if not fresh:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            if fresh:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            status = await _request(reader, writer, host, method, path, body, close=fresh)
            if fresh:
                writer.close()
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                bad += 1
        if not fresh:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 2),
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99) - 1], 2),
        "non_200": bad,
    }


async def idle_session(edge: EdgeProcess, token: str, ctx: ssl.SSLContext):
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", edge.agent_port, ssl=ctx, server_hostname="127.0.0.1"
    )
    auth = json.dumps(
        {
            "Version": ["2"],
            "ClientId": "",
            "Extra": {
                "AuthToken": token,
                "OS": "bench",
                "Version": "bench",
                "HeartbeatInterval": 600 * 10**9,
                "HeartbeatTolerance": 600 * 10**9,
            },
        }
    ).encode()
    writer.write(muxado.data(1, (0).to_bytes(4, "big") + auth, syn=True))
    await writer.drain()
    parser, reply = muxado.FrameParser(), b""
    while not reply.endswith(b"}"):
        for frame in parser.feed(await reader.read(65536)):
            if frame.type == muxado.DATA and frame.stream_id == 1:
                reply += frame.payload
    if b'"Error"' in reply:
        raise RuntimeError(reply.decode())
    return writer


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pids: dict, run) -> dict:
    """Run ``run()`` (a load, returning its result dict) and add the CPU µs per request of
    each named process and of this one (the client)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    own = time.process_time()
    result = run()
    n = max(1, result["requests"])
    cpu = {
        name: round(1e6 * (cpu_seconds(pid) - before[name]) / n, 1) for name, pid in pids.items()
    }
    cpu["client"] = round(1e6 * (time.process_time() - own) / n, 1)
    result["cpu_us_per_request"] = cpu
    return result


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--sessions", default="0,100,500,1000")
    args = parser.parse_args()
    results = {"machine": f"{os.cpu_count()} cores", "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(stack.data_dir)
        stack.start()
        edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=stack.store_url)
        os.makedirs(edge.data_dir)
        env = stack.store_env()
        edge.start(env)
        agent = None
        try:
            admin = stack.new_admin("bench")
            token = admin.post("/credentials", {"description": "bench"}).json["token"]
            agent = SdkAgent(
                edge,
                token,
                [
                    {"proto": "http"},
                    {"proto": "http", "options": {"traffic_policy": [json.dumps(FIVE_RULES)]}},
                    {"proto": "http", "options": {"traffic_policy": [json.dumps(RATE_LIMIT)]}},
                ],
            )
            bound = agent.start()
            hosts = [b["url"].split("://")[1].split(":")[0] for b in bound]
            host = hosts[0]
            upstream = agent.seen[-1]["http_port"]
            rows = []
            for label, method, path, body, clients, fresh in (
                ("small GET", "GET", "/echo", b"", args.concurrency, False),
                ("1 MB POST", "POST", "/upload", BIG, args.concurrency, False),
                ("GET 1 conn", "GET", "/echo", b"", 1, False),  # latency: one at a time
                ("GET new conn", "GET", "/echo", b"", args.concurrency, True),  # per connection
            ):
                direct = measured(
                    {"upstream": agent.process.pid},
                    lambda: asyncio.run(
                        load(upstream, host, method, path, body, args.seconds, clients, fresh)
                    ),
                )
                through = measured(
                    {"edge": edge.process.pid, "agent": agent.process.pid},
                    lambda: asyncio.run(
                        load(
                            edge.http_port, host, method, path, body, args.seconds, clients, fresh
                        )
                    ),
                )
                rows.append(
                    {
                        "case": label,
                        "direct": direct,
                        "edge": through,
                        "ratio": round(through["rps"] / direct["rps"], 2),
                    }
                )
            results["throughput"] = rows
            policy_rows = []
            for label, policy_host in (
                ("no policy", hosts[0]),
                ("5-rule policy", hosts[1]),
                ("rate limit", hosts[2]),
            ):
                policy_rows.append(
                    {
                        "case": label,
                        **measured(
                            {"edge": edge.process.pid, "agent": agent.process.pid},
                            lambda: asyncio.run(
                                load(
                                    edge.http_port,
                                    policy_host,
                                    "GET",
                                    "/echo",
                                    b"",
                                    args.seconds,
                                    args.concurrency,
                                )
                            ),
                        ),
                    }
                )
            results["policy"] = policy_rows
            sessions = []
            ctx = ssl.create_default_context(cafile=edge.ca_path)

            async def hold(counts):
                writers, out = [], []
                for count in counts:
                    while len(writers) < count:
                        writers += await asyncio.gather(
                            *(
                                idle_session(edge, token, ctx)
                                for _ in range(min(50, count - len(writers)))
                            )
                        )
                    await asyncio.sleep(2)
                    out.append(
                        {
                            "sessions": count,
                            "edge_rss_mb": round(rss_kb(edge.process.pid) / 1024, 1),
                        }
                    )
                for w in writers:
                    w.close()
                return out

            sessions = asyncio.run(hold([int(n) for n in args.sessions.split(",")]))
            results["idle_sessions"] = sessions
        finally:
            if agent is not None:
                agent.stop()
            edge.stop()
            stack.stop()
    print(
        f"{'case':<12} {'direct rps':>10} {'edge rps':>9} {'ratio':>6} "
        f"{'direct p50/p99 ms':>18} {'edge p50/p99 ms':>16}"
    )
    for row in results["throughput"]:
        d, e = row["direct"], row["edge"]
        print(
            f"{row['case']:<12} {d['rps']:>10} {e['rps']:>9} {row['ratio']:>6} "
            f"{d['p50_ms']:>8}/{d['p99_ms']:<9} {e['p50_ms']:>7}/{e['p99_ms']:<8}"
        )
    print("CPU µs per request (from /proc; independent of what else the machine runs):")
    for row in results["throughput"]:
        d, e = row["direct"]["cpu_us_per_request"], row["edge"]["cpu_us_per_request"]
        bound = (d["upstream"] + d["client"]) / (e["edge"] + e["agent"] + e["client"])
        free = (d["upstream"] + d["client"]) / (e["agent"] + e["client"])
        print(
            f"  {row['case']:<10} direct: upstream {d['upstream']}, client {d['client']} | "
            f"through the edge: edge {e['edge']}, agent+upstream {e['agent']}, "
            f"client {e['client']} | CPU-bound ratio {bound:.2f} "
            f"(with a zero-cost edge {free:.2f})"
        )
    base = results["policy"][0]
    for row in results["policy"]:
        cpu = row["cpu_us_per_request"]["edge"]
        print(
            f"through the edge, {row['case']:<13}: {row['rps']:>7} rps "
            f"(time per request {base['rps'] / row['rps']:.2f}x no policy) "
            f"p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms; edge CPU {cpu} µs/request "
            f"({cpu / base['cpu_us_per_request']['edge']:.2f}x no policy)"
        )
    print(
        "idle sessions vs edge RSS: "
        + ", ".join(f"{r['sessions']}: {r['edge_rss_mb']} MB" for r in results["idle_sessions"])
    )
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "latest.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
