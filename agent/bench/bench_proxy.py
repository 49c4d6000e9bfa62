"""Throughput and latency of the ingress, all on loopback.

Starts an upstream (aiohttp, its own process) and the agent (``python -m tunnel_agent``,
its own process), creates two tunnels (no policy; a policy with a CEL rule on each
phase), then sends a bounded number of GET requests with fixed concurrency through each,
and directly to the upstream as a baseline. Prints requests/s and p50/p99 latency.

    python agent/bench/bench_proxy.py [--requests 2000] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

AGENT_DIR = Path(__file__).resolve().parent.parent

POLICY = {
    "on_http_request": [{"name": "tag", "expressions": ["req.method == 'GET'"],
                         "actions": [{"type": "add-headers", "config": {"headers": {"x-bench": "1"}}}]}],
    "on_http_response": [{"name": "tag", "expressions": ["res.status_code == 200"],
                          "actions": [{"type": "add-headers", "config": {"headers": {"x-bench": "1"}}}]}],
}


def run_upstream() -> None:
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello from upstream\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", hello)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"upstream port={site._server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def spawn(args: list[str], env: dict[str, str], pattern: str) -> tuple[subprocess.Popen, re.Match]:
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        match = re.search(pattern, line)
        if match:
            return proc, match
    proc.kill()
    raise SystemExit(f"{args} did not start")


async def load(url: str, host: str | None, total: int, concurrency: int) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    errors = 0
    queue = iter(range(total))
    headers = {"Host": host} if host else {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            for _ in queue:
                start = time.perf_counter()
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - start)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return elapsed, latencies, errors


def report(name: str, total: int, elapsed: float, latencies: list[float], errors: int) -> None:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    print(f"{name:<28} {total / elapsed:8.0f} req/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   errors {errors}")


async def bench(args: argparse.Namespace) -> None:
    upstream, match = spawn([sys.executable, __file__, "--upstream"], dict(os.environ), r"upstream port=(\d+)")
    upstream_port = int(match.group(1))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(AGENT_DIR), AGENT_API_PORT="0", AGENT_INGRESS_PORT="0",
                   AGENT_TUNNELS_FILE=str(Path(tmp) / "tunnels.json"), AGENT_LOG_LEVEL="WARNING")
        env.pop("AGENT_API_TOKEN", None)
        agent, match = spawn([sys.executable, "-m", "tunnel_agent"], env,
                             r"api=http://127\.0\.0\.1:(\d+) ingress=http://127\.0\.0\.1:(\d+)")
        api, ingress = f"http://127.0.0.1:{match.group(1)}", f"http://127.0.0.1:{match.group(2)}/"
        try:
            async with aiohttp.ClientSession() as session:
                for domain, policy in (("plain.agent.localhost", None), ("cel.agent.localhost", POLICY)):
                    body = {"forwards_to": f"127.0.0.1:{upstream_port}", "domain": domain}
                    if policy:
                        body["policy"] = policy
                    async with session.post(api + "/tunnels", json=body) as resp:
                        assert resp.status == 200, await resp.text()
            n, c = args.requests, args.concurrency
            print(f"{n} GET requests, concurrency {c}, loopback, {os.cpu_count()} CPUs")
            await load(f"http://127.0.0.1:{upstream_port}/", None, 200, c)  # warm-up
            report("direct to upstream", n, *await load(f"http://127.0.0.1:{upstream_port}/", None, n, c))
            await load(ingress, "plain.agent.localhost", 200, c)
            report("through tunnel, no policy", n, *await load(ingress, "plain.agent.localhost", n, c))
            await load(ingress, "cel.agent.localhost", 200, c)
            report("through tunnel, CEL policy", n, *await load(ingress, "cel.agent.localhost", n, c))
        finally:
            for proc in (agent, upstream):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        run_upstream()
        return
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
