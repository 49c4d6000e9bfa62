"""Soak: mixed public traffic through ONE official SDK session for a long time, printing the
streams and memory held as it goes. What it shows: the edge's muxado stream table and both
processes' memory stay flat however many connections pass, and the SDK never drops its
session (it would after 512 streams it still counts open).

    .venv/bin/python bench/edge_bench/soak_streams.py [--minutes 60] [--every 60] [--workers 8]

Every ``--every`` seconds one line: elapsed time, connections so far (and per second), failed
connections, the session's stream table on the edge (open streams: edge-opened / agent-opened /
lingering; read from the edge's /sessions/<id>), the edge's and the SDK process's RSS, and the
SDK's disconnects. The whole series goes to bench/edge_bench/soak_streams.json.

Traffic, round robin over ``--workers`` threads, each connection a new one: GET with
Connection: close, three keep-alive GETs, HTTPS GET, HEAD + 204 + 304, a POST whose client
aborts mid-body, a streamed response the client aborts, an upstream that closes mid-response,
a WebSocket echo, a TCP echo, a forward-internal hop, a policy deny and a policy answer.
The stack is the tests' (tests/edge): store + API, the edge and the SDK agent, as processes.
"""

import argparse
import json
import os
import ssl
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from bench.edge_bench.bench_edge import rss_kb  # noqa: E402
from stacks import wire  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.edge import EdgeProcess  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402


def traffic(edge, hosts, tcp_port):
    """The kinds of connection, each a function of nothing returning True when answered as
    expected."""
    tls = ssl.create_default_context(cafile=edge.ca_path)
    http = hosts["http"]

    def status(host, request, want, ctx=None, port=None):
        return (
            lambda: wire.status(wire.http_once(port or edge.http_port, host, request, ctx)) == want
        )

    def three():
        data = wire.http_once(
            edge.http_port,
            http,
            b"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n" * 2 + wire.GET_CLOSE,
        )
        return data.count(b"HTTP/1.1 200 OK") == 3

    def tcp():
        import socket

        with socket.create_connection(("127.0.0.1", tcp_port), timeout=20) as sock:
            sock.sendall(b"soak")
            sock.shutdown(socket.SHUT_WR)
            return wire.recv_all(sock) == b"soak"

    def abort_body():
        import socket

        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"POST /upload HTTP/1.1\r\nHost: "
                + http.encode()
                + b"\r\nContent-Length: 100000\r\n\r\n"
                + b"x" * 5000
            )
            wire.abort(sock)
        return True

    def abort_response():
        import socket

        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"GET /stream?n=20&size=4096 HTTP/1.1\r\nHost: " + http.encode() + b"\r\n\r\n"
            )
            ok = sock.recv(4096).startswith(b"HTTP/1.1 200")
            wire.abort(sock)
        return ok

    def cut():
        data = wire.http_once(edge.http_port, http, b"GET /cut HTTP/1.1\r\nHost: {host}\r\n\r\n")
        return wire.status(data) == 200

    def websocket():
        import base64
        import socket

        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"GET /ws HTTP/1.1\r\nHost: "
                + http.encode()
                + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
                + base64.b64encode(os.urandom(16))
                + b"\r\n\r\n"
            )
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                head += chunk
            mask = os.urandom(4)
            sock.sendall(b"\x81\x82" + mask + bytes(b ^ mask[j % 4] for j, b in enumerate(b"hi")))
            reply = head.split(b"\r\n\r\n", 1)[1]
            while len(reply) < 9:
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                reply += chunk
            sock.sendall(b"\x88\x80" + mask)
            return reply[2:9] == b"echo:hi"

    return [
        status(http, wire.GET_CLOSE, 200),
        three,
        status(http, wire.GET_CLOSE, 200, tls, edge.https_port),
        status(http, b"HEAD /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", 200),
        status(
            http, b"GET /status/204 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", 204
        ),
        status(
            http, b"GET /status/304 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", 304
        ),
        abort_body,
        abort_response,
        cut,
        websocket,
        tcp,
        status(hosts["forwarding"], wire.GET_CLOSE, 200),
        status(
            hosts["answering"],
            b"GET /deny HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
            403,
        ),
        status(
            hosts["answering"],
            b"GET /answer HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
            200,
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--every", type=float, default=60)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    series = []
    with tempfile.TemporaryDirectory(prefix="edge-soak-") as tmp:
        stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(stack.data_dir)
        stack.start()
        edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=stack.store_url)
        os.makedirs(edge.data_dir)
        edge.start(stack.store_env())
        agent = None
        try:
            admin = stack.new_admin("bench")
            token = admin.post("/credentials", {"description": "soak"}).json["token"]
            internal = f"soak-{time.time_ns()}.internal"
            forwarding = {
                "on_http_request": [
                    {
                        "actions": [
                            {"type": "forward-internal", "config": {"url": f"https://{internal}"}}
                        ]
                    }
                ]
            }
            answering = {
                "on_http_request": [
                    {"expressions": ["req.url.path == '/deny'"], "actions": [{"type": "deny"}]},
                    {
                        "expressions": ["req.url.path == '/answer'"],
                        "actions": [
                            {
                                "type": "custom-response",
                                "config": {"status_code": 200, "body": "policy"},
                            }
                        ],
                    },
                ]
            }
            agent = SdkAgent(
                edge,
                token,
                [
                    {"proto": "http"},
                    {"proto": "tcp"},
                    {"proto": "http", "domain": internal},
                    {"proto": "http", "options": {"traffic_policy": [json.dumps(forwarding)]}},
                    {"proto": "http", "options": {"traffic_policy": [json.dumps(answering)]}},
                ],
            )
            bound = [e for e in agent.start() if e["event"] == "bound"]
            urls = dict(
                zip(
                    ("http", "tcp", "internal", "forwarding", "answering"),
                    (b["url"] for b in bound),
                )
            )
            hosts = {k: v.split("://")[1].split(":")[0] for k, v in urls.items()}
            session_id = admin.get("/tunnel_sessions").json["tunnel_sessions"][0]["id"]
            kinds_list = traffic(edge, hosts, int(urls["tcp"].rsplit(":", 1)[1]))
            counts = {"done": 0, "failed": 0}
            lock = threading.Lock()
            stop = time.monotonic() + args.minutes * 60

            def worker(offset):
                i = offset
                while time.monotonic() < stop:
                    try:
                        ok = kinds_list[i % len(kinds_list)]()
                    except OSError:
                        ok = False
                    with lock:
                        counts["done"] += 1
                        counts["failed"] += not ok
                    i += 1

            threads = [
                threading.Thread(target=worker, args=(n,), daemon=True)
                for n in range(args.workers)
            ]
            start = time.monotonic()
            for thread in threads:
                thread.start()
            print(
                f"{'minutes':>8} {'connections':>12} {'per s':>7} {'failed':>7} "
                f"{'streams (edge/agent/lingering)':>31} {'edge RSS MB':>12} "
                f"{'SDK RSS MB':>11} {'drops':>6}",
                flush=True,
            )
            last = (start, 0)
            while any(t.is_alive() for t in threads):
                time.sleep(min(args.every, max(0.1, stop - time.monotonic() + 0.5)))
                now = time.monotonic()
                table = edge.session_streams(session_id) or {}
                drops = sum(
                    1
                    for e in agent.seen + list(agent.events.queue)
                    if e.get("event") == "disconnected"
                )
                row = {
                    "minutes": round((now - start) / 60, 2),
                    "connections": counts["done"],
                    "per_second": round((counts["done"] - last[1]) / (now - last[0]), 1),
                    "failed": counts["failed"],
                    "streams": table,
                    "edge_rss_mb": round(rss_kb(edge.process.pid) / 1024, 1),
                    "sdk_rss_mb": round(rss_kb(agent.process.pid) / 1024, 1),
                    "disconnects": drops,
                }
                last = (now, counts["done"])
                series.append(row)
                print(
                    f"{row['minutes']:>8} {row['connections']:>12} {row['per_second']:>7} "
                    f"{row['failed']:>7} "
                    f"{table.get('streams_open', '-'):>8} ({table.get('edge_opened', '-')}/"
                    f"{table.get('agent_opened', '-')}/{table.get('lingering', '-')})"
                    f"{'':>13} {row['edge_rss_mb']:>12} {row['sdk_rss_mb']:>11} "
                    f"{drops:>6}",
                    flush=True,
                )
            time.sleep(3)  # the traffic has stopped: what is still held
            settled = edge.session_streams(session_id)
            print(f"settled, 3 s after the last connection: streams {settled}", flush=True)
            series.append({"settled": settled})
        finally:
            if agent is not None:
                agent.stop()
            edge.stop()
            stack.stop()
    with open(os.path.join(os.path.dirname(__file__), "soak_streams.json"), "w") as out:
        json.dump(
            {"minutes": args.minutes, "workers": args.workers, "series": series}, out, indent=1
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
