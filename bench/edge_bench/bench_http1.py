"""What edge/http1.py costs an exchange: the edge's own sequence of calls for one proxied request
(docs/BENCHMARKS.md, "CPU per request"), on a SERVER connection (the client's side) and a
CLIENT one (the agent's), kept alive across exchanges, with no I/O. Two versions of the module
side by side, interleaved round by round (the machine's load hits both alike):

    .venv/bin/python bench/edge_bench/bench_http1.py [--old main] [--rounds 7] [--n 20000]

``--old`` is a git revision whose edge/http1.py is the baseline (or a path to a .py file); the
other is the working tree's (or ``--new``'s file). Cases:

- **wrk GET**: wrk's request head (``Host`` only) and nginx's 12-byte answer (bench_peers.py's
  small GET): request read, forwarded upstream with the X-Forwarded headers, response read and
  written back to the client;
- **browser GET**: the same with a browser's dozen request headers;
- **policy**: the wrk GET whose response a traffic policy rebuilt (``checked=True``, str
  headers, as edge/http_policy.py's response phase does).

Prints µs per exchange (best and median of the rounds) for each version and their ratio.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import tempfile
import time
from types import ModuleType
from typing import Any, Callable, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from edge import http_policy  # noqa: E402

WRK_REQUEST = b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1:40123\r\n\r\n"
BROWSER_REQUEST = (
    b"GET /static/app.js?v=12 HTTP/1.1\r\n"
    b"Host: demo.ngrok.example:8080\r\n"
    b"Connection: keep-alive\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    b"Chrome/120.0.0.0 Safari/537.36\r\n"
    b"Accept: */*\r\n"
    b"Sec-Fetch-Site: same-origin\r\n"
    b"Sec-Fetch-Mode: no-cors\r\n"
    b"Sec-Fetch-Dest: script\r\n"
    b"Referer: http://demo.ngrok.example:8080/\r\n"
    b"Accept-Encoding: gzip, deflate, br\r\n"
    b"Accept-Language: en-US,en;q=0.9\r\n"
    b"Cookie: session=0123456789abcdef; theme=dark\r\n"
    b'If-None-Match: W/"5e1-18c1f2a3b4"\r\n'
    b"\r\n"
)
NGINX_RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Server: nginx/1.22.1\r\n"
    b"Date: Wed, 25 Nov 2026 16:05:00 GMT\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Content-Length: 12\r\n"
    b"Connection: keep-alive\r\n"
    b"\r\n"
    b"hello world\n"
)


def forwarded(pairs: List[Tuple[bytes, bytes]]) -> List[Tuple[bytes, bytes]]:
    """The X-Forwarded headers as the edge adds them (edge/http_policy.py)."""
    return http_policy.forwarded_headers(pairs, "127.0.0.1", "http")


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exchange_loop(h: ModuleType, request_bytes: bytes, policy: bool) -> Callable[[int], float]:
    """A function running ``n`` exchanges on one kept-alive pair of connections (seconds)."""
    NEED_DATA, Request, Response, EOM = h.NEED_DATA, h.Request, h.Response, h.EndOfMessage

    def run(n: int) -> float:
        client = h.Connection(h.SERVER, max_incomplete_event_size=64 * 1024)
        leg = h.Connection(h.CLIENT, max_incomplete_event_size=64 * 1024)
        sent = 0
        start = time.perf_counter()
        for i in range(n):
            # the client's request head (HttpFront._request_head)
            event = client.next_event()
            assert event is NEED_DATA
            client.receive_data(request_bytes)
            request = client.next_event()
            # forwarded upstream with what of the body is here (HttpFront._exchange)
            headers = forwarded(request.headers)
            upstream = Request(
                method=request.method, target=request.target, headers=headers, raw_headers=headers
            )
            events: List[Any] = [upstream]
            while True:
                event = client.next_event()
                events.append(event)
                if type(event) is EOM:
                    break
            if i:
                leg.start_next_cycle()
            out = b"".join([leg.send(e) for e in events])
            # the agent's response, relayed (HttpFront._response)
            held = []
            while True:
                event = leg.next_event()
                if event is NEED_DATA:
                    leg.receive_data(NGINX_RESPONSE)
                    continue
                if policy and type(event) is Response:
                    event = Response(
                        status_code=event.status_code,
                        reason=event.reason,
                        headers=[
                            (n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers
                        ],
                        checked=True,
                    )
                held.append(client.send(event))
                if type(event) is EOM:
                    break
            sent += len(out) + len(b"".join(held))
            client.start_next_cycle()
        elapsed = time.perf_counter() - start
        assert sent > 0
        return elapsed

    return run


CASES = {
    "wrk GET": (WRK_REQUEST, False),
    "browser GET": (BROWSER_REQUEST, False),
    "policy": (WRK_REQUEST, True),
}


def check_same_bytes(old: ModuleType, new: ModuleType) -> None:
    """Both versions write the same bytes for each case (what the bench compares is equal)."""
    for name, (request_bytes, policy) in CASES.items():
        outs = []
        for h in (old, new):
            client = h.Connection(h.SERVER)
            leg = h.Connection(h.CLIENT)
            client.receive_data(request_bytes)
            request = client.next_event()
            headers = forwarded(request.headers)
            up = h.Request(
                method=request.method, target=request.target, headers=headers, raw_headers=headers
            )
            wire = leg.send(up) + leg.send(client.next_event())
            leg.receive_data(NGINX_RESPONSE)
            while True:
                event = leg.next_event()
                if policy and type(event) is h.Response:
                    event = h.Response(
                        status_code=event.status_code,
                        reason=event.reason,
                        headers=[(n.decode(), v.decode()) for n, v in event.headers],
                        checked=True,
                    )
                wire += client.send(event)
                if type(event) is h.EndOfMessage:
                    break
            outs.append(wire)
        if outs[0] != outs[1]:
            raise SystemExit(f"{name}: the versions write different bytes:\n{outs!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", default="main", help="git revision or .py path (baseline)")
    parser.add_argument("--new", default=os.path.join(ROOT, "edge", "http1.py"), help=".py path")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=20000, help="exchanges per round")
    args = parser.parse_args()
    if args.old.endswith(".py"):
        old_path = args.old
    else:
        text = subprocess.run(
            ["git", "-C", ROOT, "show", f"{args.old}:edge/http1.py"],
            check=True,
            capture_output=True,
        ).stdout
        handle = tempfile.NamedTemporaryFile("wb", suffix=".py", delete=False)
        handle.write(text)
        handle.close()
        old_path = handle.name
    old = load("http1_old", old_path)
    new = load("http1_new", args.new)
    check_same_bytes(old, new)
    print(f"old: {args.old}; new: {args.new}; {args.n} exchanges x {args.rounds} rounds")
    print(f"{'case':<14}{'old best/median µs':>22}{'new best/median µs':>22}{'new/old':>9}")
    for case, (request_bytes, policy) in CASES.items():
        runs: Dict[str, List[float]] = {"old": [], "new": []}
        loops = {
            "old": exchange_loop(old, request_bytes, policy),
            "new": exchange_loop(new, request_bytes, policy),
        }
        for label in ("old", "new"):
            loops[label](args.n // 10)  # warm up
        for _ in range(args.rounds):
            for label in ("old", "new"):
                runs[label].append(loops[label](args.n) / args.n * 1e6)
        o, n = runs["old"], runs["new"]
        print(
            f"{case:<14}{min(o):>12.2f} / {statistics.median(o):<7.2f}"
            f"{min(n):>12.2f} / {statistics.median(n):<7.2f}"
            f"{statistics.median(n) / statistics.median(o):>9.2f}"
        )


if __name__ == "__main__":
    main()
