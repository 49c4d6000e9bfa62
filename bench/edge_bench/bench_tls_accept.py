"""New HTTPS connections per second on the edge's HTTPS listener code, by how it picks the
TLS context: ``sni`` (the previous listener: asyncio's TLS server with an SNI callback that
swaps the certificate) vs ``peek`` (edge.tls.HttpsListener: the ClientHello peeked, then TLS
started with the context made for what the name requires), for a name with no requirement and
for a name with mutual TLS (a client certificate checked).

    .venv/bin/python bench/edge_bench/bench_tls_accept.py [--seconds 5] [--concurrency 8]

Each mode's server runs in its own process (one core of its own, as the edge has); the clients
run here (asyncio, ``concurrency`` loops of connect + handshake + read one answer + close).
A measurement on a shared 2-core machine: compare modes within one run, not across runs.
"""

import argparse
import asyncio
import multiprocessing
import os
import ssl
import statistics
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _serve(mode, folder, ca_pem, port_queue):
    from edge import certs, tls, tls_spec
    from edge.registry import Registry

    class Edge:
        def __init__(self):
            self.certs = certs.ServerCertificates(folder)
            self.registry = Registry()
            self.connections = set()
            self.tls = tls.TlsSettings(self)
            self.tls.by_host = {"mtls.example.com": tls_spec.spec_of(None, [ca_pem])}
            self.tls.loaded.set()

    async def handler(reader, writer):
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    async def main():
        edge = Edge()
        if mode == "sni":
            base = edge.certs.context_for(["edge.example.com"])

            def pick(sslobj, name, _ctx):
                if name:
                    sslobj.context = edge.certs.context_for([name.lower()])

            base.sni_callback = pick
            server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=base)
        else:
            listener = tls.HttpsListener(edge, handler, ["edge.example.com"], lambda n: True)
            server = await asyncio.get_running_loop().create_server(
                listener.protocol, "127.0.0.1", 0
            )
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.sleep(3600)

    asyncio.run(main())


async def _load(port, name, ctx, seconds, concurrency):
    latencies = []
    failures = 0
    deadline = time.monotonic() + seconds

    async def one_loop():
        nonlocal failures
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=ctx, server_hostname=name
                )
                data = await reader.read()
                writer.close()
                if data != b"ok":
                    failures += 1
                    continue
            except (OSError, ssl.SSLError):
                failures += 1
                continue
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(one_loop() for _ in range(concurrency)))
    return latencies, failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    from stacks.certs import make_ca, make_client_cert, pem

    ca = make_ca("bench clients")
    cert, key = make_client_cert(ca)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        client_pem = os.path.join(folder, "client.pem")
        with open(client_pem, "wb") as fh:
            fh.write(cert + key)
        for mode, name in (
            ("sni", "plain.example.com"),
            ("peek", "plain.example.com"),
            ("peek", "mtls.example.com"),
        ):
            server_dir = tempfile.mkdtemp(dir=folder)
            ports = multiprocessing.Queue()
            proc = multiprocessing.Process(
                target=_serve, args=(mode, server_dir, pem(ca[1]), ports)
            )
            proc.start()
            try:
                port = ports.get(timeout=30)
                ctx = ssl.create_default_context(cafile=os.path.join(server_dir, "ca.pem"))
                if name.startswith("mtls"):
                    ctx.load_cert_chain(client_pem)
                asyncio.run(_load(port, name, ctx, 1, args.concurrency))  # warm the caches
                latencies, failures = asyncio.run(
                    _load(port, name, ctx, args.seconds, args.concurrency)
                )
            finally:
                proc.terminate()
                proc.join()
            latencies.sort()
            rows.append(
                (
                    mode,
                    name,
                    len(latencies) / args.seconds,
                    statistics.median(latencies) * 1000,
                    latencies[int(len(latencies) * 0.99) - 1] * 1000,
                    failures,
                )
            )
    print(f"{'mode':6} {'name':20} {'conn/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'failed':>7}")
    for mode, name, rate, p50, p99, failed in rows:
        print(f"{mode:6} {name:20} {rate:8.0f} {p50:8.2f} {p99:8.2f} {failed:7d}")


if __name__ == "__main__":
    main()
