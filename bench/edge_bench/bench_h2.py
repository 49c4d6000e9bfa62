"""HTTP/2 benchmark: the same small GET through the HTTPS listener over HTTP/1.1 (keep-alive
connections) and over HTTP/2 (concurrent streams on one connection), 100 concurrent streams on
one connection, and a gRPC unary call through the edge (app_protocol http2) beside the same
call direct to the grpcio server. Prints a table; writes bench/edge_bench/h2_latest.json.

    .venv/bin/python bench/edge_bench/bench_h2.py [--seconds 10]

As in bench_edge.py: everything runs here as processes (store + API, the edge, an official SDK
agent with its aiohttp upstream and a grpcio server), requests/s depend on whatever else the
2 shared cores run, and the CPU time per request of each process (from /proc) is what each
path costs whatever the load: ``edge``, ``agent`` (the SDK process with its upstreams),
``client`` (this process: the load generator; its h2 client is python-hyper's h2, so the
client's figure is high for HTTP/2 and for grpcio's Python layer). When nghttp2's ``h2load``
is on PATH (Debian ``nghttp2-client``) the GET cases run again with it as the client (C; its
CPU from the children's rusage).
"""

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import ssl
import subprocess
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

import grpc  # noqa: E402
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

from bench.edge_bench.bench_edge import measured  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.edge import EdgeProcess  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402


def _summary(latencies, bad, seconds):
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "errors": bad,
        "rps": round(n / seconds),
        "p50_ms": round(1000 * statistics.median(latencies), 2) if n else None,
        "p99_ms": round(1000 * latencies[int(n * 0.99) - 1], 2) if n else None,
    }


async def load_h1(edge, ctx, host, seconds, connections):
    """``connections`` keep-alive TLS connections (ALPN http/1.1), one request at a time each."""
    latencies, bad = [], 0
    stop_at = time.perf_counter() + seconds
    head = f"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

    async def worker():
        nonlocal bad
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", edge.https_port, ssl=ctx, server_hostname=host
        )
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            writer.write(head)
            raw = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in raw.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if raw.split(b" ", 2)[1] != b"200":
                bad += 1
            latencies.append(time.perf_counter() - started)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return _summary(latencies, bad, seconds)


async def load_h2(edge, ctx, host, seconds, streams):
    """One TLS connection (ALPN h2), ``streams`` requests in flight on it at all times."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", edge.https_port, ssl=ctx, server_hostname=host
    )
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.initiate_connection()
    conn.increment_flow_control_window(16 << 20)
    writer.write(conn.data_to_send())
    waiting = {}
    latencies, bad = [], 0
    stop_at = time.perf_counter() + seconds
    authority = f"{host}:{edge.https_port}".encode()
    fields = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", authority),
        (b":path", b"/echo"),
    ]

    async def pump():
        while True:
            data = await reader.read(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers)[b":status"]
                    waiting[event.stream_id][1] = status
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    future = waiting.pop(event.stream_id)[0]
                    if not future.done():
                        future.set_result(isinstance(event, h2.events.StreamEnded))
            writer.write(conn.data_to_send())

    async def worker():
        nonlocal bad
        loop = asyncio.get_running_loop()
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            sid = conn.get_next_available_stream_id()
            entry = [loop.create_future(), None]
            waiting[sid] = entry
            conn.send_headers(sid, fields, end_stream=True)
            writer.write(conn.data_to_send())
            ok = await entry[0]
            if not ok or entry[1] != b"200":
                bad += 1
            latencies.append(time.perf_counter() - started)

    reading = asyncio.ensure_future(pump())
    await asyncio.gather(*(worker() for _ in range(streams)))
    reading.cancel()
    writer.close()
    return _summary(latencies, bad, seconds)


async def load_grpc(target, creds, options, seconds, concurrency):
    latencies, bad = [], 0
    stop_at = time.perf_counter() + seconds
    channel = (
        grpc.aio.secure_channel(target, creds, options=options)
        if creds
        else grpc.aio.insecure_channel(target)
    )
    unary = channel.unary_unary("/test.Echo/Unary")

    async def worker():
        nonlocal bad
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            try:
                await unary(b"ping", timeout=10)
            except grpc.RpcError:
                bad += 1
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await channel.close()
    return _summary(latencies, bad, seconds)


def load_h2load(edge, host, seconds, args):
    """nghttp2's h2load (C; Debian nghttp2-client) as the client: requests/s and the
    child's CPU (rusage) as the client's. ``args``: ``--h1 -c N`` or ``-c 1 -m N``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [
            "h2load",
            *args,
            "-D",
            str(int(seconds)),
            "-H",
            f":authority: {host}:{edge.https_port}",
            f"https://127.0.0.1:{edge.https_port}/echo",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = int(
        re.search(
            r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out.stdout
        ).group(2)
    )
    protocol = re.search(r"Application protocol: (\S+)", out.stdout).group(1)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "requests": done,
        "errors": 0,
        "rps": round(done / seconds),
        "p50_ms": None,
        "p99_ms": None,
        "protocol": protocol,
        "h2load_cpu_us_per_request": round(1e6 * cpu / max(1, done), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    results = {"machine": f"{os.cpu_count()} cores", "seconds": args.seconds}
    with tempfile.TemporaryDirectory(prefix="h2-bench-") as tmp:
        stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(stack.data_dir)
        stack.start()
        edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=stack.store_url)
        os.makedirs(edge.data_dir)
        edge.start(stack.store_env())
        agent = None
        try:
            admin = stack.new_admin("bench")
            token = admin.post("/credentials", {"description": "bench"}).json["token"]
            agent = SdkAgent(
                edge,
                token,
                [
                    {"proto": "http"},
                    {"proto": "http", "upstream": "grpc", "options": {"app_protocol": ["http2"]}},
                ],
            )
            bound = agent.start()
            host, grpc_host = [b["url"].split("://")[1].split(":")[0] for b in bound]
            grpc_port = agent.seen[-1]["grpc_port"]
            pids = {"edge": edge.process.pid, "agent": agent.process.pid}
            ctx1 = ssl.create_default_context(cafile=edge.ca_path)
            ctx1.set_alpn_protocols(["http/1.1"])
            ctx2 = ssl.create_default_context(cafile=edge.ca_path)
            ctx2.set_alpn_protocols(["h2"])
            rows = []
            for label, run in (
                (
                    "GET, HTTP/1.1, 20 connections",
                    lambda: load_h1(edge, ctx1, host, args.seconds, 20),
                ),
                (
                    "GET, HTTP/2, 20 streams on 1 connection",
                    lambda: load_h2(edge, ctx2, host, args.seconds, 20),
                ),
                (
                    "GET, HTTP/1.1, 100 connections",
                    lambda: load_h1(edge, ctx1, host, args.seconds, 100),
                ),
                (
                    "GET, HTTP/2, 100 streams on 1 connection",
                    lambda: load_h2(edge, ctx2, host, args.seconds, 100),
                ),
            ):
                rows.append({"case": label, **measured(pids, lambda: asyncio.run(run()))})
            if shutil.which("h2load"):  # the same with a client in C
                for label, h2args in (
                    ("GET, h2load --h1, 20 connections", ["--h1", "-c", "20"]),
                    ("GET, h2load, 20 streams on 1 connection", ["-c", "1", "-m", "20"]),
                    ("GET, h2load, 100 streams on 1 connection", ["-c", "1", "-m", "100"]),
                ):
                    rows.append(
                        {
                            "case": label,
                            **measured(
                                pids, lambda: load_h2load(edge, host, args.seconds, h2args)
                            ),
                        }
                    )
            with open(edge.ca_path, "rb") as fh:
                creds = grpc.ssl_channel_credentials(root_certificates=fh.read())
            options = [
                ("grpc.ssl_target_name_override", grpc_host),
                ("grpc.default_authority", f"{grpc_host}:{edge.https_port}"),
            ]
            rows.append(
                {
                    "case": "gRPC unary direct to grpcio (h2c), 20 in flight",
                    **measured(
                        {"agent": agent.process.pid},
                        lambda: asyncio.run(
                            load_grpc(f"127.0.0.1:{grpc_port}", None, None, args.seconds, 20)
                        ),
                    ),
                }
            )
            # the gRPC endpoint's route idled through the cases above (a route unused for
            # ROUTE_KEEP expires): a short warm-up on its own connection makes it the core's
            # again, so the measured connection is served by the route as it is when in use
            asyncio.run(load_grpc(f"127.0.0.1:{edge.https_port}", creds, options, 1.0, 1))
            time.sleep(0.5)
            rows.append(
                {
                    "case": "gRPC unary through the edge (TLS), 20 in flight",
                    **measured(
                        pids,
                        lambda: asyncio.run(
                            load_grpc(
                                f"127.0.0.1:{edge.https_port}", creds, options, args.seconds, 20
                            )
                        ),
                    ),
                }
            )
            results["rows"] = rows
        finally:
            if agent is not None:
                agent.stop()
            edge.stop()
            stack.stop()
    print(f"{'case':<50} {'rps':>6} {'err':>4} {'p50 ms':>7} {'p99 ms':>7}  CPU µs/request")
    for row in results["rows"]:
        cpu = ", ".join(f"{k} {v}" for k, v in row["cpu_us_per_request"].items())
        if "h2load_cpu_us_per_request" in row:
            cpu += f" (h2load {row['h2load_cpu_us_per_request']})"
        print(
            f"{row['case']:<50} {row['rps']:>6} {row['errors']:>4} {row['p50_ms']!s:>7} "
            f"{row['p99_ms']!s:>7}  {cpu}"
        )
    with open(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "h2_latest.json"), "w"
    ) as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
