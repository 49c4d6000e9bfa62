"""The edge side by side with what a user would pick instead, in one run, against one upstream:

- ``edge``: this edge (python -m edge) with the official Python SDK (bench/edge_bench/peer_agent.py)
  forwarding to the upstream;
- ``ssh``: OpenSSH's tunnel, ``ssh -R`` to an ``sshd`` on 127.0.0.1 (a throwaway host and user
  key, defaults otherwise: the cipher OpenSSH picks);
- ``nginx``: nginx as a reverse proxy (one worker; keep-alive towards the upstream, request and
  response streamed rather than buffered, as a tunnel does);
- ``direct``: the load generator against the upstream itself.

The upstream is one nginx (one worker): ``GET /echo`` answers 12 bytes, ``POST /upload`` reads
the whole body (the echo module's ``echo_read_request_body``) then answers. Load comes from
``wrk`` (one thread); TCP bulk from this script (256 MiB up, then 256 MiB down, through a TCP
endpoint / a second ``-R`` forward to a sink-and-source server of this script's own).

    make bench-peers           (installs openssh-server, nginx, wrk: scripts/install_bench_deps.sh)
    .venv/bin/python bench/edge_bench/bench_peers.py [--seconds 5] [--runs 3] [--only get20,get1,...]

Cases (``--only``): get20, get1 (small GET at 20 and 1 connections), sweep (POST 1 KiB-16 MiB at
one connection), post20 (1 MiB POST at 20 connections), bulk (TCP 256 MiB each way), tcpconn
(a new TCP connection per one-byte exchange, 8 at a time: edge vs ssh -R), https (a
new TLS connection per request: edge vs nginx), mtls (the same with a client certificate,
checked by the edge's core and by nginx's ssl_verify_client; bench/edge_bench/tls_client, Go,
is its load generator: wrk presents none), h2 (small GETs over HTTP/2, 4 connections of
10 streams each, nghttp2's h2load as the client: edge vs nginx), policy (a 5-rule traffic policy vs none, edge),
cores (small GET at 20 connections with the edge on one core, then on all: requests/s and how
the core's worker threads share its CPU), growth (edge CPU per request with 1 and 1,000
endpoints, 1 and 1,000 sessions; memory per idle session and per in-flight request).

Every figure is the median of ``--runs`` interleaved runs (each path in turn, then again).
Besides requests/s and wrk's p50/p99, each row gives the CPU time per request of every process
on the path, read from /proc (utime + stime of the process and its children's threads) before
and after the run: on a shared machine throughput moves with the other load, CPU per request
much less. Ratios are to ``ssh -R`` (and to nginx for HTTPS). Results: bench/edge_bench/peers_latest.json.
"""

import argparse
import http.client
import functools
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from stacks.ports import free_port, wait_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLK = os.sysconf("SC_CLK_TCK")
BULK = 256 << 20
SWEEP = [1 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
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
# The same rules, the first of which also reads the clock: no decision of it can be held
# (docs/DATA_PLANE.md, "Held decisions"), so Python decides each request.
# An endpoint's policy that sends each request to an internal endpoint of the same agent
# (forward-internal: decided by Python per request, carried by the core to the target).
INTERNAL_NAME = "bench-svc.internal"
FORWARD = {
    "on_http_request": [
        {"actions": [{"type": "forward-internal", "config": {"url": f"https://{INTERNAL_NAME}"}}]}
    ]
}

# A policy that reads each request's body (the core reads it and hands it to Python with the
# head: docs/DATA_PLANE.md, "Decided routes"); wrk's bodies never match, so the client's body
# goes on as it came.
BODY_RULE = {
    "on_http_request": [
        {
            "actions": [
                {
                    "type": "request-body-find-replace",
                    "config": {"replacements": [{"from": "secret", "to": "REDACTED"}]},
                }
            ]
        }
    ]
}

# The response phase's body actions, carried by the core (the body read for the decision,
# rewritten or compressed: docs/DATA_PLANE.md, "Decided routes"), and the same on the Python
# path: a rule for server-sent events (which never match the page) keeps a route Python's
# whole, so the two differ only in who carries the body.
PAGE = "<p>" + "lorem ipsum dolor sit amet, " * 140 + "a secret</p>"  # 3,935 bytes
RESPONSE_RULES = {
    "find-replace": {
        "type": "response-body-find-replace",
        "config": {"replacements": [{"from": "secret", "to": "REDACTED"}]},
    },
    "compress": {"type": "compress-response", "config": {"algorithms": ["gzip"]}},
}
PYTHONS_WHOLE = {
    "on_event_stream_message": [
        {
            "actions": [
                {
                    "type": "sse-find-replace",
                    "config": {"replacements": [{"from": "never", "to": "x"}]},
                }
            ]
        }
    ]
}


def response_policy(action: str, python: bool) -> str:
    doc = {"on_http_response": [{"actions": [RESPONSE_RULES[action]]}]}
    return json.dumps({**doc, **PYTHONS_WHOLE} if python else doc)


FIVE_RULES_EACH = {
    "on_http_request": [
        {**rule, "expressions": [rule["expressions"][0] + " && time.now != ''"]}
        if i == 0
        else rule
        for i, rule in enumerate(FIVE_RULES["on_http_request"])
    ]
}


# ---- /proc -----------------------------------------------------------------------------------
def _stat(pid: int) -> List[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def tree(root: int) -> List[int]:
    """``root`` and its descendants (scanned now)."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(int(_stat(int(name))[1]), []).append(int(name))
            except (OSError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu(pids: List[int]) -> float:
    """utime + stime (seconds) of these processes (all their threads)."""
    total = 0.0
    for pid in pids:
        try:
            fields = _stat(pid)
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK
    return total


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads(pid: int) -> List[tuple]:
    """(thread id, name, utime + stime seconds) of each of ``pid``'s threads now."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                text = fh.read()
        except OSError:  # a thread that ended meanwhile
            continue
        fields = text.rsplit(")", 1)[1].split()
        name = text[text.index("(") + 1 : text.rindex(")")]
        out.append((int(tid), name, (int(fields[11]) + int(fields[12])) / CLK))
    return out


def thread_cpu(pid: int) -> Dict[str, float]:
    """utime + stime (seconds) of ``pid``'s threads by kind: the compiled core's worker
    threads (named "edge-core" by edge_core/src/carrier.rs) and the rest (Python's)."""
    out = {"core": 0.0, "python": 0.0}
    for _, name, seconds in threads(pid):
        out["core" if name.startswith("edge-core") else "python"] += seconds
    return out


def core_threads_cpu(pid: int) -> Dict[int, float]:
    """utime + stime (seconds) of each of ``pid``'s core worker threads, by thread id."""
    return {tid: seconds for tid, name, seconds in threads(pid) if name.startswith("edge-core")}


def pin(pid: int, cpus: set) -> None:
    """Every thread of ``pid`` (the affinity is a thread's own) on ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


class Group:
    """Named process trees whose CPU a measurement reads; the edge's also by thread kind
    (``edge.core``, ``edge.python``: where its work runs, and how it spreads over cores)."""

    def __init__(self, roots: Dict[str, int]):
        self.roots = roots

    def snapshot(self) -> Dict[str, float]:
        out = {name: cpu(tree(pid)) for name, pid in self.roots.items()}
        if "edge" in self.roots:
            for kind, seconds in thread_cpu(self.roots["edge"]).items():
                out[f"edge.{kind}"] = seconds
        return out


# ---- wrk -------------------------------------------------------------------------------------
def _duration_us(text: str) -> float:
    for unit, scale in (("us", 1.0), ("ms", 1e3), ("s", 1e6), ("m", 6e7)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def _load(cmd: List[str], seconds: float) -> Tuple[str, Dict[str, Any]]:
    """A load generator's run: its output, and the result it fills in (with the CPU time of
    this process's children so far, which ``measure`` takes the run's share of)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=seconds + 60)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: Dict[str, Any] = {
        "requests": 0,
        "rps": 0.0,
        "p50_us": 0.0,
        "p99_us": 0.0,
        "errors": 0,
        "_usage": usage.ru_utime + usage.ru_stime,
    }
    return out, result


def wrk(
    url: str,
    conns: int,
    seconds: float,
    tmp: str,
    host: str = "",
    body: int = 0,
    close: bool = False,
    headers: Sequence[str] = (),
) -> Dict[str, Any]:
    cmd = [
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{int(round(seconds))}s",
        "--latency",
        "--timeout",
        "10s",
    ]
    if host:
        cmd += ["-H", f"Host: {host}"]
    if close:
        cmd += ["-H", "Connection: close"]
    for header in headers:
        cmd += ["-H", header]
    if body:
        script = os.path.join(tmp, f"post{body}.lua")
        if not os.path.exists(script):
            with open(script, "w") as fh:
                fh.write(
                    f'wrk.method = "POST"\nwrk.body = string.rep("a", {body})\n'
                    'wrk.headers["Content-Type"] = "application/octet-stream"\n'
                )
        cmd += ["-s", script]
    out, result = _load(cmd + [url], seconds)
    for line in out.splitlines():
        parts = line.split()
        if line.strip().startswith("50%"):
            result["p50_us"] = _duration_us(parts[1])
        elif line.strip().startswith("99%"):
            result["p99_us"] = _duration_us(parts[1])
        elif "requests in" in line:
            result["requests"] = int(parts[0])
        elif line.startswith("Requests/sec:"):
            result["rps"] = float(parts[1])
        elif line.strip().startswith("Non-2xx"):
            result["errors"] += int(parts[-1])
        elif line.strip().startswith("Socket errors"):
            result["errors"] += sum(int(p.strip(",")) for p in parts if p.strip(",").isdigit())
    if not result["requests"]:
        raise RuntimeError(f"wrk failed: {' '.join(cmd)} {url}\n{out}")
    return result


def h2load(url: str, seconds: float, host: str = "", conns: int = 4, streams: int = 10):
    """Small GETs over HTTP/2 with nghttp2's ``h2load`` (one thread): ``conns`` connections
    of ``streams`` concurrent streams each, for ``seconds``."""
    cmd = ["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{int(round(seconds))}"]
    if host:
        cmd += ["-H", f":authority: {host}"]
    out, result = _load(cmd + [url], seconds)
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("finished in"):
            result["rps"] = float(parts[3])
        elif line.startswith("requests:"):
            result["requests"] = int(parts[7])  # succeeded
            result["errors"] = int(parts[9]) + int(parts[11])  # failed, errored
        elif line.startswith("status codes:"):
            result["errors"] += sum(int(parts[i]) for i in (4, 6, 8))  # 3xx, 4xx, 5xx
        elif line.startswith("time for request:"):
            result["p50_us"] = _duration_us(parts[5])  # the mean: h2load gives no median
    if not result["requests"] or "h2" not in out:
        raise RuntimeError(f"h2load failed: {' '.join(cmd)} {url}\n{out}")
    return result


def tls_load(binary: str, addr: str, sni: str, tmp: str, conns: int, seconds: float):
    """tls_client's run: a new TLS connection per request, presenting the client
    certificate of :func:`write_client_certs`."""
    cmd = [binary, "-addr", addr, "-sni", sni, "-c", str(conns), "-d", str(seconds)]
    cmd += ["-cert", os.path.join(tmp, "client.pem"), "-key", os.path.join(tmp, "client.key")]
    out, result = _load(cmd, seconds)
    try:
        result.update(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise RuntimeError(f"tls_client failed: {' '.join(cmd)}\n{out}")
    if not result["requests"]:
        raise RuntimeError(f"tls_client answered nothing: {' '.join(cmd)}\n{out}")
    return result


def measure(group: Group, run: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    before = group.snapshot()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run()
    after = group.snapshot()
    n = max(1, result["requests"])
    result["cpu_us"] = {name: 1e6 * (after[name] - before[name]) / n for name in before}
    client = result.pop("_usage", None)
    if client is not None:
        result["cpu_us"]["client"] = 1e6 * (client - usage.ru_utime - usage.ru_stime) / n
    return result


def median_of(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key in ("requests", "rps", "p50_us", "p99_us", "errors", "mbps"):
        if key in runs[0]:
            out[key] = statistics.median(r[key] for r in runs)
    out["cpu_us"] = {
        name: statistics.median(r["cpu_us"][name] for r in runs) for name in runs[0]["cpu_us"]
    }
    out["runs"] = len(runs)
    if "rps" in runs[0]:
        out["rps_range"] = [min(r["rps"] for r in runs), max(r["rps"] for r in runs)]
    return out


# ---- the peers -------------------------------------------------------------------------------
NGINX_UPSTREAM = """
load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;
worker_processes 1;
error_log {tmp}/up-error.log warn;
pid {tmp}/up.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/up-body;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    location /echo {{ return 200 "hello world\\n"; }}
    location /page {{ default_type text/html; return 200 "{page}"; }}
    location /upload {{
      client_max_body_size 0;
      client_body_buffer_size 32m;
      echo_read_request_body;
      echo "ok";
    }}
  }}
}}
"""

NGINX_PROXY = """
worker_processes 1;
error_log {tmp}/rp-error.log warn;
pid {tmp}/rp.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/rp-body;
  proxy_temp_path {tmp}/rp-proxy;
  keepalive_requests 1000000;
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    listen 127.0.0.1:{tls_port} ssl http2 backlog=1024;
    ssl_certificate {tmp}/rp.crt;
    ssl_certificate_key {tmp}/rp.key;
    ssl_session_cache off;
    ssl_session_tickets off;
    client_max_body_size 0;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_request_buffering off;
      proxy_buffering off;
    }}
  }}
  server {{
    listen 127.0.0.1:{mtls_port} ssl backlog=1024;
    ssl_certificate {tmp}/rp.crt;
    ssl_certificate_key {tmp}/rp.key;
    ssl_client_certificate {tmp}/client-ca.pem;
    ssl_verify_client on;
    ssl_session_cache off;
    ssl_session_tickets off;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""

SSHD_CONFIG = """
Port {port}
ListenAddress 127.0.0.1
HostKey {tmp}/ssh_host_ed25519_key
PidFile {tmp}/sshd.pid
AuthorizedKeysFile {tmp}/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AllowTcpForwarding yes
"""


class Procs:
    """Processes this bench started, stopped at the end (in reverse)."""

    def __init__(self):
        self.items: List[subprocess.Popen] = []

    def start(self, cmd: List[str], **kwargs: Any) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, **kwargs)
        self.items.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.items):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def write_client_certs(tmp: str) -> str:
    """A client CA and a certificate it signed for the mutual TLS case, in ``tmp``
    (client-ca.pem, client.pem, client.key): the CA's PEM."""
    from stacks.certs import make_ca, make_client_cert, pem

    ca = make_ca("bench clients")
    cert, key = make_client_cert(ca, "bench")
    with open(os.path.join(tmp, "client-ca.pem"), "w") as fh:
        fh.write(pem(ca[1]))
    with open(os.path.join(tmp, "client.pem"), "wb") as fh:
        fh.write(cert)
    with open(os.path.join(tmp, "client.key"), "wb") as fh:
        fh.write(key)
    return pem(ca[1])


def tls_client(tmp: str) -> str:
    """bench/edge_bench/tls_client (Go, the standard library only) built into ``tmp``: the
    mutual TLS case's load generator; "" without Go."""
    binary = os.path.join(tmp, "tls_client")
    if not os.path.exists(binary):
        if shutil.which("go") is None:
            return ""
        subprocess.run(
            ["go", "build", "-o", binary, "."],
            cwd=os.path.join(HERE, "tls_client"),
            check=True,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    return binary


def start_nginx(procs: Procs, tmp: str, name: str, text: str) -> subprocess.Popen:
    conf = os.path.join(tmp, f"{name}.conf")
    with open(conf, "w") as fh:
        fh.write(text)
    return procs.start(
        ["nginx", "-c", conf, "-p", tmp, "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_ssh(procs: Procs, tmp: str, forwards: List[tuple]) -> tuple:
    """sshd on 127.0.0.1 and ``ssh -N -R`` for each (remote port, local port)."""
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{tmp}/ssh_host_ed25519_key"],
        check=True,
    )
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{tmp}/user_key"], check=True
    )
    shutil.copy(f"{tmp}/user_key.pub", f"{tmp}/authorized_keys")
    port = free_port()
    with open(f"{tmp}/sshd_config", "w") as fh:
        fh.write(SSHD_CONFIG.format(port=port, tmp=tmp))
    sshd = procs.start(
        ["/usr/sbin/sshd", "-D", "-e", "-f", f"{tmp}/sshd_config"],
        stdout=subprocess.DEVNULL,
        stderr=open(f"{tmp}/sshd.log", "wb"),
    )
    wait_port(port)
    cmd = [
        "ssh",
        "-N",
        "-T",
        "-i",
        f"{tmp}/user_key",
        "-p",
        str(port),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ExitOnForwardFailure=yes",
        "-o",
        "LogLevel=ERROR",
    ]
    for remote, local in forwards:
        cmd += ["-R", f"127.0.0.1:{remote}:127.0.0.1:{local}"]
    ssh = procs.start(
        cmd + [f"{os.environ.get('USER') or 'root'}@127.0.0.1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(f"{tmp}/ssh.log", "wb"),
    )
    for remote, _ in forwards:
        wait_port(remote)
    return sshd, ssh


# ---- TCP bulk --------------------------------------------------------------------------------
def bulk_server(port: int) -> None:
    """Sink and source: 'U' + size: read size bytes, answer b"k"; 'D' + size: send size bytes,
    close. One thread per connection."""
    chunk = b"b" * (1 << 20)

    def serve(conn: socket.socket) -> None:
        with conn:
            head = b""
            while len(head) < 9:
                more = conn.recv(9 - len(head))
                if not more:
                    return
                head += more
            size = int.from_bytes(head[1:], "big")
            if head[:1] == b"U":
                buf = bytearray(1 << 20)
                left = size
                while left > 0:
                    got = conn.recv_into(buf)
                    if not got:
                        return
                    left -= got
                conn.sendall(b"k")
            else:
                left = size
                view = memoryview(chunk)
                while left > 0:
                    left -= conn.send(view[: min(left, len(chunk))])
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def bulk(port: int, direction: str, size: int = BULK) -> Dict[str, Any]:
    started = time.perf_counter()
    own = time.process_time()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(direction.encode() + size.to_bytes(8, "big"))
        if direction == "U":
            chunk = memoryview(b"u" * (1 << 20))
            left = size
            while left > 0:
                left -= sock.send(chunk[: min(left, len(chunk))])
            if sock.recv(1) != b"k":
                raise RuntimeError("bulk upload not acknowledged")
        else:
            buf = bytearray(1 << 20)
            got = 0
            while got < size:
                n = sock.recv_into(buf)
                if not n:
                    raise RuntimeError(f"bulk download ended at {got} of {size} bytes")
                got += n
    elapsed = time.perf_counter() - started
    mib = size / (1 << 20)
    return {
        "requests": int(mib),
        "mbps": round(size / elapsed / 1e6, 1),
        "_usage": None,
        "_own": time.process_time() - own,
    }


def tcp_connects(port: int, seconds: float, threads: int = 8) -> Dict[str, Any]:
    """A new TCP connection per exchange (one byte up, the bulk server's b"k" back), from
    ``threads`` threads for ``seconds``: exchanges made, per second."""
    done = [0] * threads
    errors = [0] * threads
    stop = time.monotonic() + seconds
    own = time.process_time()

    def loop(index: int) -> None:
        while time.monotonic() < stop:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    sock.sendall(b"U" + (1).to_bytes(8, "big") + b"x")
                    if sock.recv(1) == b"k":
                        done[index] += 1
                    else:
                        errors[index] += 1
            except OSError:
                errors[index] += 1

    started = time.perf_counter()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    return {
        "requests": sum(done),
        "rps": sum(done) / elapsed,
        "errors": sum(errors),
        "_usage": None,
        "_own": time.process_time() - own,
    }


def mtls_case(stack: "Stack", runs: int, seconds: float) -> Dict[str, Any]:
    """Mutual TLS, a new connection per request (20 at a time), the client's certificate
    checked by the edge's core (OpenSSL's X509_verify_cert, edge_core/src/client_cert.rs)
    and by nginx (ssl_verify_client on); neither resumes a session."""
    binary = tls_client(stack.tmp)
    if not binary or not stack.mtls_host:
        return {}
    up = stack.upstream.pid
    groups = {
        "edge": Group(
            {"edge": stack.edge.process.pid, "sdk": stack.mtls_agent.pid, "upstream": up}
        ),
        "nginx": Group({"nginx": stack.proxy.pid, "upstream": up}),
    }
    targets = {
        "edge": (f"127.0.0.1:{stack.edge.https_port}", stack.mtls_host),
        "nginx": (f"127.0.0.1:{stack.rp_mtls}", "127.0.0.1"),
    }
    # the endpoint's route, and its certificate, warmed up (an idle route expires: ROUTE_KEEP)
    tls_load(binary, targets["edge"][0], targets["edge"][1], stack.tmp, 2, 1.0)
    results: Dict[str, List[Dict[str, Any]]] = {p: [] for p in targets}
    for _ in range(runs):
        for path, (addr, sni) in targets.items():
            load = functools.partial(tls_load, binary, addr, sni, stack.tmp, 20, seconds)
            results[path].append(measure(groups[path], load))
    return {path: median_of(rs) for path, rs in results.items()}


def tcpconn_case(stack: "Stack", runs: int, seconds: float) -> Dict[str, Any]:
    groups = {
        "edge": Group(
            {"edge": stack.edge.process.pid, "sdk": stack.agent.pid, "upstream": stack.bulk.pid}
        ),
        "ssh": Group({"sshd": stack.sshd.pid, "ssh": stack.ssh.pid, "upstream": stack.bulk.pid}),
        "direct": Group({"upstream": stack.bulk.pid}),
    }
    ports = {"edge": stack.edge_tcp, "ssh": stack.ssh_bulk, "direct": stack.bulk_port}
    results: Dict[str, List[Dict[str, Any]]] = {p: [] for p in ports}
    for _ in range(runs):
        for path, port in ports.items():
            r = measure(groups[path], lambda: tcp_connects(port, seconds))
            r["cpu_us"]["client"] = 1e6 * r.pop("_own") / max(1, r["requests"])
            results[path].append(r)
    return {path: median_of(rs) for path, rs in results.items()}


# The official SDK the edge's endpoints are forwarded by: "python" (the ngrok package,
# bench/edge_bench/peer_agent.py) or "go" (golang.ngrok.com/ngrok/v2, tests/edge/go: its HTTP
# endpoints forwarded by the SDK's own upstream client, its TCP ones joined byte for byte).
AGENTS = ("python", "go")
agent_kind = "python"


def start_sdk_agent(
    procs: Procs, server_addr: str, ca_path: str, token: str, binds: List[Dict[str, Any]]
) -> tuple:
    """An official SDK agent (its own session: :data:`agent_kind`'s) connected to
    ``server_addr`` and binding ``binds``: (its process, the URLs bound) once it is ready."""
    cfg: Dict[str, Any] = {"authtoken": token, "server_addr": server_addr, "root_cas": ca_path}
    if agent_kind == "go":
        from stacks.agents import go_binary

        cfg["endpoints"] = [
            {
                "url": f"https://{bind['domain']}"
                if bind.get("domain")
                else f"{bind['proto']}://",
                "upstream": bind["upstream"]
                if bind["proto"] == "http"
                else f"tcp://{bind['upstream']}",
                **({"traffic_policy": bind["policy"]} if bind.get("policy") else {}),
            }
            for bind in binds
        ]
        binary = go_binary()
        if not binary:
            raise RuntimeError("the Go SDK agent could not be built (tests/edge/go)")
        argv = [binary, json.dumps(cfg)]
    else:
        from stacks.paths import SDK_PYTHON

        cfg["binds"] = binds
        argv = [SDK_PYTHON, os.path.join(HERE, "peer_agent.py"), json.dumps(cfg)]
    agent = procs.start(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    bound = []
    while True:
        line = agent.stdout.readline()
        if not line:
            raise RuntimeError("the SDK agent ended before it was ready")
        event = json.loads(line)
        if event["event"] == "ready":
            return agent, bound
        if event["event"] == "error":
            raise RuntimeError(f"the SDK agent failed: {event}")
        if event["event"] == "bound":
            bound.append(event["url"])


# ---- the stack -------------------------------------------------------------------------------
class Stack:
    def __init__(self, tmp: str, procs: Procs, growth: bool = False):
        from stacks.api import ApiProcess
        from stacks.edge import EdgeProcess

        self.tmp = tmp
        self.up_port, self.rp_port, self.rp_tls = free_port(), free_port(), free_port()
        self.bulk_port, self.rp_mtls = free_port(), free_port()
        self.client_ca = write_client_certs(tmp)  # the mutual TLS case's
        self.upstream = start_nginx(
            procs, tmp, "up", NGINX_UPSTREAM.format(tmp=tmp, port=self.up_port, page=PAGE)
        )
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                f"{tmp}/rp.key",
                "-out",
                f"{tmp}/rp.crt",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.proxy = start_nginx(
            procs,
            tmp,
            "rp",
            NGINX_PROXY.format(
                tmp=tmp,
                port=self.rp_port,
                tls_port=self.rp_tls,
                mtls_port=self.rp_mtls,
                up=self.up_port,
            ),
        )
        self.bulk = procs.start([sys.executable, __file__, "--bulk-server", str(self.bulk_port)])
        wait_port(self.up_port)
        wait_port(self.rp_port)
        wait_port(self.bulk_port)
        self.ssh_http, self.ssh_bulk = free_port(), free_port()
        self.sshd, self.ssh = start_ssh(
            procs, tmp, [(self.ssh_http, self.up_port), (self.ssh_bulk, self.bulk_port)]
        )
        # the floor: a bare asyncio relay in the edge's place (bench/edge_bench/floor_relay.py)
        self.floor_port, self.floor_tls, floor_back = free_port(), free_port(), free_port()
        relay = os.path.join(HERE, "floor_relay.py")
        self.floor_back = procs.start(
            [sys.executable, relay, "back", str(floor_back), str(self.up_port)]
            + [f"{tmp}/rp.crt", f"{tmp}/rp.key"]
        )
        wait_port(floor_back)
        self.floor = procs.start(
            [sys.executable, relay, "front", str(self.floor_port), str(floor_back)]
            + [str(self.floor_tls), f"{tmp}/rp.crt", f"{tmp}/rp.key"]
        )
        wait_port(self.floor_port)
        # the growth case binds 1,000 endpoints on one session and opens 1,000 sessions with
        # one credential: the edge's quotas (edge/quotas.py) raised for the bench
        os.environ.update(
            {
                "EDGE_MAX_ENDPOINTS_PER_SESSION": "5000",
                "EDGE_MAX_ENDPOINTS_PER_ACCOUNT": "5000",
                "EDGE_MAX_SESSIONS_PER_CREDENTIAL": "5000",
                "EDGE_MAX_AUTHS_PER_CREDENTIAL": "100000",
            }
        )
        self.api = ApiProcess(data_dir=os.path.join(tmp, "api"))
        os.makedirs(self.api.data_dir)
        self.edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=self.api.store_url)
        os.makedirs(self.edge.data_dir)
        try:  # the caller stops them once this returns; a failure here must not leave them up
            self.api.start()
            self.edge.start(self.api.store_env())
            self._bind(procs)
        except BaseException:
            self.edge.stop()
            self.api.stop()
            raise

    def _bind(self, procs: Procs) -> None:
        admin = self.api.new_admin("bench")
        self.token = admin.post("/credentials", {"description": "bench"}).json["token"]
        self.agent, bound = self.start_agent(
            [
                {"proto": "http", "upstream": f"http://127.0.0.1:{self.up_port}"},
                {
                    "proto": "http",
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                    "policy": json.dumps(FIVE_RULES),
                },
                {"proto": "tcp", "upstream": f"127.0.0.1:{self.bulk_port}"},
                {
                    "proto": "http",
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                    "policy": json.dumps(FIVE_RULES_EACH),
                },
                {
                    "proto": "http",
                    "domain": INTERNAL_NAME,
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                },
                {
                    "proto": "http",
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                    "policy": json.dumps(FORWARD),
                },
                {
                    "proto": "http",
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                    "policy": json.dumps(BODY_RULE),
                },
            ]
            + [
                {
                    "proto": "http",
                    "upstream": f"http://127.0.0.1:{self.up_port}",
                    "policy": response_policy(action, python),
                }
                for action in RESPONSE_RULES
                for python in (False, True)
            ],
            procs,
        )
        self.host = bound[0].split("://")[1].split(":")[0]
        self.policy_host = bound[1].split("://")[1].split(":")[0]
        self.edge_tcp = int(bound[2].rsplit(":", 1)[1])
        self.policy_each_host = bound[3].split("://")[1].split(":")[0]
        self.forward_host = bound[5].split("://")[1].split(":")[0]
        self.body_host = bound[6].split("://")[1].split(":")[0]
        # the response phase's routes: (action, "core" or "python") -> host
        self.response_hosts = {
            (action, "python" if python else "core"): bound[7 + i].split("://")[1].split(":")[0]
            for i, (action, python) in enumerate(
                (a, p) for a in RESPONSE_RULES for p in (False, True)
            )
        }
        # a cloud endpoint (no agent: made with the API) whose policy forwards each request
        # to the same internal endpoint: the hosted gateway's usual shape
        from stacks.paths import BASE_DOMAIN

        self.cloud_host = f"bench-cloud.{BASE_DOMAIN}"
        made = admin.post(
            "/endpoints",
            {
                "url": f"https://{self.cloud_host}",
                "type": "cloud",
                "traffic_policy": json.dumps(FORWARD),
            },
        )
        if made.status != 201:
            raise RuntimeError(f"the cloud endpoint was not made: {made.status} {made.json}")
        # an endpoint asking for client certificates (the mutual TLS case), the Python SDK's
        # mutual_tlsca (the Go test agent binds none): served by the core's TLS
        self.mtls_host = ""
        if agent_kind == "python":
            self.mtls_agent, bound = self.start_agent(
                [
                    {
                        "proto": "http",
                        "upstream": f"http://127.0.0.1:{self.up_port}",
                        "mutual_tlsca": self.client_ca,
                    }
                ],
                procs,
            )
            self.mtls_host = bound[0].split("://")[1].split(":")[0]

    def start_agent(
        self, binds: List[Dict[str, Any]], procs: Procs, token: Optional[str] = None
    ) -> tuple:
        """An official SDK agent (its own session) binding ``binds``, with ``token`` (the
        bench account's by default): (its process, the URLs bound)."""
        return start_sdk_agent(
            procs, self.edge.server_addr, self.edge.ca_path, token or self.token, binds
        )

    # process groups of each path
    def groups(self) -> Dict[str, Group]:
        up = self.upstream.pid
        return {
            "edge": Group({"edge": self.edge.process.pid, "sdk": self.agent.pid, "upstream": up}),
            "ssh": Group({"sshd": self.sshd.pid, "ssh": self.ssh.pid, "upstream": up}),
            "nginx": Group({"nginx": self.proxy.pid, "upstream": up}),
            "direct": Group({"upstream": up}),
            "floor": Group({"front": self.floor.pid, "back": self.floor_back.pid, "upstream": up}),
        }

    def url(self, path: str, route: str, tls: bool = False) -> str:
        port = {
            "edge": self.edge.https_port if tls else self.edge.http_port,
            "ssh": self.ssh_http,
            "nginx": self.rp_tls if tls else self.rp_port,
            "direct": self.up_port,
            "floor": self.floor_tls if tls else self.floor_port,
        }[path]
        return f"{'https' if tls else 'http'}://127.0.0.1:{port}{route}"


# ---- the cases -------------------------------------------------------------------------------
def http_case(
    stack: Stack,
    paths: List[str],
    runs: int,
    seconds: float,
    conns: int,
    route: str,
    body: int = 0,
    tls: bool = False,
    close: bool = False,
    host: Optional[Dict[str, str]] = None,
    headers: Sequence[str] = (),
) -> Dict[str, Any]:
    groups = stack.groups()
    results: Dict[str, List[Dict[str, Any]]] = {p: [] for p in paths}
    for _ in range(runs):
        for path in paths:
            name = path.split(":")[0]
            if name == "edge" and not tls:  # its route pushed before the load's connections
                warm(stack.url(name, route, tls), (host or {}).get(path, stack.host))
            results[path].append(
                measure(
                    groups[name],
                    lambda: wrk(
                        stack.url(name, route, tls),
                        conns,
                        seconds,
                        stack.tmp,
                        (host or {}).get(path, stack.host),
                        body,
                        close,
                        headers,
                    ),
                )
            )
    return {path: median_of(rs) for path, rs in results.items()}


def warm(url: str, host: str) -> None:
    """One request to the edge for ``host``, then a moment: a route the edge's core let go
    while the host was idle (a cloud endpoint's, after 1.5 s) is pushed again by the Python
    path that serves it, so the load's keep-alive connections start on the core's path (a
    connection Python served stays Python's)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", parts.path or "/", headers={"Host": host, "Connection": "close"})
        conn.getresponse().read()
    finally:
        conn.close()
    time.sleep(0.1)


def h2_case(stack: Stack, runs: int, seconds: float) -> Dict[str, Any]:
    """Small GETs over HTTP/2 (h2load: 4 connections of 10 streams), edge against nginx."""
    groups = stack.groups()
    results: Dict[str, List[Dict[str, Any]]] = {"edge": [], "nginx": []}
    for _ in range(runs):
        for path in results:
            url = stack.url(path, "/echo", tls=True)
            host = stack.host if path == "edge" else ""
            results[path].append(measure(groups[path], lambda: h2load(url, seconds, host)))
    return {path: median_of(rs) for path, rs in results.items()}


def bulk_case(stack: Stack, runs: int) -> Dict[str, Any]:
    groups = stack.groups()
    bulk_group = {
        "edge": Group(
            {"edge": stack.edge.process.pid, "sdk": stack.agent.pid, "upstream": stack.bulk.pid}
        ),
        "ssh": Group({"sshd": stack.sshd.pid, "ssh": stack.ssh.pid, "upstream": stack.bulk.pid}),
        "direct": Group({"upstream": stack.bulk.pid}),
    }
    del groups
    ports = {"edge": stack.edge_tcp, "ssh": stack.ssh_bulk, "direct": stack.bulk_port}
    out = {}
    for direction, label in (("U", "up"), ("D", "down")):
        results: Dict[str, List[Dict[str, Any]]] = {p: [] for p in ports}
        for _ in range(runs):
            for path, port in ports.items():

                def run() -> Dict[str, Any]:
                    result = bulk(port, direction)
                    result["_usage"] = None
                    return result

                r = measure(bulk_group[path], run)
                r["cpu_us"]["client"] = 1e6 * r.pop("_own") / r["requests"]
                results[path].append(r)
        out[label] = {path: median_of(rs) for path, rs in results.items()}
    return out


# ---- printing --------------------------------------------------------------------------------
PROXY = {
    "edge": ("edge", "sdk"),
    "ssh": ("sshd", "ssh"),
    "nginx": ("nginx",),
    "direct": (),
    "floor": ("front", "back"),
}


def cores_case(stack: Stack, runs: int, seconds: float) -> Dict[str, Any]:
    """Small GETs at 20 connections to the edge with all its threads on one core, then on
    every core this machine has (the SDK, the upstream and wrk free to run anywhere):
    requests/s, the edge's CPU per request, and how its core worker threads shared the core's
    CPU (each thread's share: work spread over threads that the kernel runs on any core)."""
    pid = stack.edge.process.pid
    every = os.sched_getaffinity(pid)
    settings = [("1 core", {min(every)}), (f"{len(every)} cores", set(every))]
    group = stack.groups()["edge"]
    rows: Dict[str, List[Dict[str, Any]]] = {label: [] for label, _ in settings}
    shares: Dict[str, List[List[float]]] = {label: [] for label, _ in settings}
    try:
        for _ in range(runs):
            for label, cpus in settings:
                pin(pid, cpus)
                before = core_threads_cpu(pid)
                rows[label].append(
                    measure(
                        group,
                        lambda: wrk(
                            stack.url("edge", "/echo"), 20, seconds, stack.tmp, stack.host
                        ),
                    )
                )
                after = core_threads_cpu(pid)
                spent = [after[t] - before.get(t, 0.0) for t in after]
                total = sum(spent) or 1.0
                shares[label].append(sorted((x / total for x in spent), reverse=True))
    finally:
        pin(pid, set(every))
    out = {}
    for label, _ in settings:
        row = median_of(rows[label])
        width = max(len(s) for s in shares[label])
        row["core_thread_shares"] = [
            statistics.median(s[i] if i < len(s) else 0.0 for s in shares[label])
            for i in range(width)
        ]
        out[label] = row
    return out


def fmt_us(value: float) -> str:
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def print_http(title: str, rows: Dict[str, Any], base: str = "ssh") -> None:
    print(f"\n{title}")
    print(
        f"  {'path':<14} {'req/s':>9} {'×' + base:>7} {'p50':>10} {'p99':>10}   "
        "CPU µs per request (proxy: its processes; upstream; client)"
    )
    ref = rows.get(base)
    for path, row in rows.items():
        ratio = f"{row['rps'] / ref['rps']:.2f}" if ref and ref["rps"] else "-"
        cpu_us = row["cpu_us"]
        name = path.split(":")[0]
        proxy = sum(cpu_us.get(p, 0) for p in PROXY.get(name, ()))
        parts = ", ".join(f"{k} {v:.1f}" for k, v in cpu_us.items())
        print(
            f"  {path:<14} {row['rps']:>9.0f} {ratio:>7} {fmt_us(row['p50_us']):>10} "
            f"{fmt_us(row['p99_us']):>10}   proxy {proxy:.1f} | {parts}"
            + (f" | errors {row['errors']:.0f}" if row.get("errors") else "")
        )


# The goals, as ratios: (most, least) — a figure meets its goal when it is at most ``most``
# (a cost) or at least ``least`` (a rate).
GOALS = {
    "edge_cpu_vs_sshd": (1.5, None),
    "rps_vs_ssh": (None, 1.5),
    "p50_vs_ssh": (1.2, None),
    "https_cpu_vs_nginx": (1.2, None),
    "h2_cpu_vs_nginx": (1.2, None),
    "policy_added_vs_sshd": (1.0, None),
    "growth_cpu_vs_first": (1.15, 0.85),
    "idle_session_kib": (64.0, None),
}


def judged(figure: str, value: Optional[float]) -> str:
    """``value`` against the goal of ``figure``: "goal ≤ 1.5×: met" and the like."""
    most, least = GOALS[figure]
    unit = " KiB" if figure.endswith("_kib") else "×"
    bounds = []
    if least is not None:
        bounds.append(f"≥ {least:g}{unit}")
    if most is not None:
        bounds.append(f"≤ {most:g}{unit}")
    if value is None:
        return f"goal {' and '.join(bounds)}: not measured"
    met = (most is None or value <= most) and (least is None or value >= least)
    return f"goal {' and '.join(bounds)}: {'met' if met else 'NOT met'}"


def goal_lines(results: Dict[str, Any]) -> List[str]:
    """Each of the goals' figures from this run: its value, its ratio and whether it meets
    its goal (:data:`GOALS`)."""
    lines = []

    def ratio(a: float, b: float) -> Optional[float]:
        return a / b if b else None

    def x(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.2f}×"

    for case, label in (
        ("get20", "small GET, 20 connections"),
        ("get1", "small GET, 1 connection"),
    ):
        rows = results.get(case)
        if not rows or "edge" not in rows or "ssh" not in rows:
            continue
        e, s = rows["edge"], rows["ssh"]
        cpu = ratio(e["cpu_us"]["edge"], s["cpu_us"]["sshd"])
        rps = ratio(e["rps"], s["rps"])
        lines.append(
            f"{label}: edge CPU {e['cpu_us']['edge']:.1f} µs per request = {x(cpu)} sshd's "
            f"{s['cpu_us']['sshd']:.1f} ({judged('edge_cpu_vs_sshd', cpu)}; edge+SDK "
            f"{e['cpu_us']['edge'] + e['cpu_us']['sdk']:.1f} vs sshd+ssh "
            f"{s['cpu_us']['sshd'] + s['cpu_us']['ssh']:.1f})"
        )
        lines.append(
            f"{label}: requests/s {e['rps']:.0f} = {x(rps)} ssh -R's {s['rps']:.0f} "
            f"({judged('rps_vs_ssh', rps)})"
        )
        if case == "get1":
            p50 = ratio(e["p50_us"], s["p50_us"])
            lines.append(
                f"{label}: p50 {fmt_us(e['p50_us'])} = {x(p50)} ssh -R's "
                f"{fmt_us(s['p50_us'])} ({judged('p50_vs_ssh', p50)})"
            )
        floor = rows.get("floor")
        if floor:
            lines.append(
                f"  the floor (a bare asyncio relay over TLS in the edge's place): "
                f"{floor['cpu_us']['front']:.1f} µs = "
                f"{x(ratio(floor['cpu_us']['front'], s['cpu_us']['sshd']))} sshd's; the edge "
                f"{x(ratio(e['cpu_us']['edge'], floor['cpu_us']['front']))} the floor"
            )
    sweep = results.get("sweep")
    if sweep and all("edge" in rows and "direct" in rows for rows in sweep.values()):
        stalls = [
            size
            for size, rows in sweep.items()
            if rows["edge"]["p50_us"] >= 30000 and rows["direct"]["p50_us"] < 10000
        ]
        lines.append(
            f"POST sweep at 1 connection: edge p50 over 30 ms where direct is under 10 ms at: "
            f"{', '.join(stalls) or 'no size'} (goal: no stall at any size: "
            f"{'NOT met' if stalls else 'met'})"
        )
    if sweep and "1 MiB" in sweep and "ssh" in sweep["1 MiB"]:
        one = sweep["1 MiB"]
        rps = ratio(one["edge"]["rps"], one["ssh"]["rps"])
        lines.append(
            f"1 MiB POST, 1 connection: requests/s {x(rps)} ssh -R's ({judged('rps_vs_ssh', rps)})"
        )
    if results.get("post20") and "ssh" in results["post20"]:
        rows = results["post20"]
        rps = ratio(rows["edge"]["rps"], rows["ssh"]["rps"])
        lines.append(
            f"1 MiB POST, 20 connections: requests/s {x(rps)} ssh -R's "
            f"({judged('rps_vs_ssh', rps)}); upstream CPU behind the edge "
            f"{x(ratio(rows['edge']['cpu_us']['upstream'], rows['ssh']['cpu_us']['upstream']))} "
            "behind ssh"
        )
    if results.get("bulk"):
        for label, rows in results["bulk"].items():
            rate = ratio(rows["edge"]["mbps"], rows["ssh"]["mbps"])
            lines.append(
                f"TCP bulk {label}: {rows['edge']['mbps']:.0f} MB/s = {x(rate)} ssh -R's "
                f"{rows['ssh']['mbps']:.0f} ({judged('rps_vs_ssh', rate)})"
            )
    for case, label in (
        ("mtls", "mutual TLS, new connection per request"),
        ("https", "HTTPS, new TLS connection per request"),
    ):
        rows = results.get(case)
        if not rows:
            continue
        e, n = rows["edge"]["cpu_us"], rows["nginx"]["cpu_us"]
        cpu = ratio(e["edge"], n["nginx"])
        lines.append(
            f"{label}: edge CPU {e['edge']:.0f} µs = {x(cpu)} "
            f"nginx's {n['nginx']:.0f} µs ({judged('https_cpu_vs_nginx', cpu)})"
        )
    if results.get("https"):
        rows = results["https"]
        if "floor" in rows:
            f = rows["floor"]["cpu_us"]["front"]
            lines.append(
                f"  the floor (a bare asyncio TLS listener and relay in the edge's place): "
                f"{f:.0f} µs = {x(ratio(f, n['nginx']))} nginx's; the edge "
                f"{x(ratio(e['edge'], f))} the floor"
            )
    if results.get("h2"):
        e, n = results["h2"]["edge"], results["h2"]["nginx"]
        cpu = ratio(e["cpu_us"]["edge"], n["cpu_us"]["nginx"])
        lines.append(
            f"HTTP/2, 4 connections of 10 streams: edge CPU {e['cpu_us']['edge']:.1f} µs per "
            f"request = {x(cpu)} nginx's {n['cpu_us']['nginx']:.1f} "
            f"({judged('h2_cpu_vs_nginx', cpu)}); requests/s {e['rps']:.0f} against "
            f"{n['rps']:.0f}"
        )
    if results.get("policy"):
        rows = results["policy"]
        added = rows["edge:policy"]["cpu_us"]["edge"] - rows["edge"]["cpu_us"]["edge"]
        sshd = results.get("get20", {}).get("ssh", {}).get("cpu_us", {}).get("sshd")
        share = ratio(added, sshd) if sshd else None
        lines.append(
            f"5-rule policy: edge CPU added per request {added:.1f} µs "
            f"({rows['edge:policy']['cpu_us']['edge']:.0f} vs "
            f"{rows['edge']['cpu_us']['edge']:.0f}) = {x(share)} sshd's whole request "
            f"({judged('policy_added_vs_sshd', share)}"
            + ("" if sshd else "; sshd's from get20, not run")
            + ")"
        )
        if "edge:policy-each" in rows:
            each = rows["edge:policy-each"]["cpu_us"]["edge"] - rows["edge"]["cpu_us"]["edge"]
            lines.append(
                f"  the same rules decided by Python for each request (one reads the clock: "
                f"nothing held): {each:.1f} µs added = {x(ratio(each, sshd) if sshd else None)} "
                f"sshd's whole request"
            )
        if "edge:cloud" in rows:
            hop = rows["edge:cloud"]["cpu_us"]["edge"] - rows["edge"]["cpu_us"]["edge"]
            lines.append(
                f"  a cloud endpoint forwarding to an internal endpoint (its decision held while "
                f"the route is quiet): {hop:.1f} µs added = {x(ratio(hop, sshd) if sshd else None)} "
                f"sshd's whole request"
            )
        if "edge:forward" in rows:
            hop = rows["edge:forward"]["cpu_us"]["edge"] - rows["edge"]["cpu_us"]["edge"]
            lines.append(
                f"  an agent endpoint's forward-internal to an internal endpoint (held while the "
                f"route is quiet): {hop:.1f} µs added = {x(ratio(hop, sshd) if sshd else None)} "
                f"sshd's whole request"
            )
    if results.get("cores"):
        labels = list(results["cores"])
        first, last = results["cores"][labels[0]], results["cores"][labels[-1]]
        lines.append(
            f"the edge on {labels[-1]} against {labels[0]}: requests/s "
            f"{x(ratio(last['rps'], first['rps']))}; its core threads' shares of the core's "
            f"CPU: {', '.join(f'{v:.0%}' for v in last['core_thread_shares'])}"
        )
    growth = results.get("growth")
    if growth:
        rows = list(growth["rows"].items())
        base = rows[0][1]["cpu_us"]["edge"]
        for label, row in rows[1:]:
            grown = ratio(row["cpu_us"]["edge"], base)
            lines.append(
                f"growth, {label}: edge CPU per request {x(grown)} what it was with {rows[0][0]} "
                f"({judged('growth_cpu_vs_first', grown)})"
            )
        kib = growth.get("idle_session_kb")
        lines.append(
            f"memory per idle agent session: {kib} KiB ({judged('idle_session_kib', kib)}); per "
            f"request in flight: {growth.get('in_flight_request_kb')} KiB"
        )
    return lines


def size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--sweep-seconds", type=float, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--only",
        default="get20,get1,sweep,post20,bulk,tcpconn,https,mtls,h2,policy,body,response,cores,growth",
    )
    parser.add_argument("--paths", default="edge,ssh,nginx,direct,floor")
    parser.add_argument(
        "--sizes",
        default=",".join(str(n) for n in SWEEP),
        help="the POST sweep's body sizes, bytes",
    )
    parser.add_argument("--endpoints", type=int, default=200, help="growth: endpoints bound")
    parser.add_argument("--sessions", type=int, default=1000, help="growth: idle sessions")
    parser.add_argument("--bulk-server", type=int, default=0)
    parser.add_argument(
        "--agent", choices=AGENTS, default="python", help="the official SDK behind the edge"
    )
    parser.add_argument(
        "--keep", action="store_true", help="print the ports and wait for Enter before stopping"
    )
    args = parser.parse_args()
    if args.bulk_server:
        bulk_server(args.bulk_server)
        return 0
    global agent_kind
    agent_kind = args.agent
    for tool in ("wrk", "nginx", "ssh", "ssh-keygen", "openssl"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: run scripts/install_bench_deps.sh (make bench-peers)")
            return 2
    only = set(args.only.split(","))
    paths = args.paths.split(",")
    results: Dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "seconds": args.seconds,
        "runs": args.runs,
        "load_before": os.getloadavg()[0],
        "agent": args.agent,
    }
    procs = Procs()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        try:
            stack = Stack(tmp, procs)
            if args.keep:
                print(
                    json.dumps(
                        {
                            "edge_http": stack.edge.http_port,
                            "edge_https": stack.edge.https_port,
                            "host": stack.host,
                            "policy_host": stack.policy_host,
                            "policy_each_host": stack.policy_each_host,
                            "forward_host": stack.forward_host,
                            "cloud_host": stack.cloud_host,
                            "mtls_host": stack.mtls_host,
                            "ssh": stack.ssh_http,
                            "nginx": stack.rp_port,
                            "direct": stack.up_port,
                            "floor": stack.floor_port,
                            "floor_tls": stack.floor_tls,
                            "floor_pid": stack.floor.pid,
                            "edge_pid": stack.edge.process.pid,
                            "sdk_pid": stack.agent.pid,
                            "sshd_pid": stack.sshd.pid,
                        }
                    )
                )
                input()
            if "get20" in only:
                results["get20"] = http_case(stack, paths, args.runs, args.seconds, 20, "/echo")
                print_http("small GET, 20 connections", results["get20"])
            if "get1" in only:
                results["get1"] = http_case(stack, paths, args.runs, args.seconds, 1, "/echo")
                print_http("small GET, 1 connection", results["get1"])
            if "sweep" in only:
                results["sweep"] = {}
                for size in [int(n) for n in args.sizes.split(",")]:
                    rows = http_case(stack, paths, 1, args.sweep_seconds, 1, "/upload", size)
                    results["sweep"][size_label(size)] = rows
                    print_http(f"POST {size_label(size)}, 1 connection", rows)
            if "post20" in only:
                results["post20"] = http_case(
                    stack, paths, args.runs, args.seconds, 20, "/upload", 1 << 20
                )
                print_http("POST 1 MiB, 20 connections", results["post20"])
            if "bulk" in only:
                results["bulk"] = bulk_case(stack, args.runs)
                for label, rows in results["bulk"].items():
                    print(f"\nTCP bulk, 256 MiB {label}")
                    for path, row in rows.items():
                        parts = ", ".join(f"{k} {v:.0f}" for k, v in row["cpu_us"].items())
                        print(f"  {path:<8} {row['mbps']:>8.0f} MB/s   CPU µs per MiB: {parts}")
            if "tcpconn" in only:
                results["tcpconn"] = tcpconn_case(stack, args.runs, args.seconds)
                print("\nTCP, a new connection per one-byte exchange, 8 at a time")
                for path, row in results["tcpconn"].items():
                    parts = ", ".join(f"{k} {v:.0f}" for k, v in row["cpu_us"].items())
                    print(
                        f"  {path:<8} {row['rps']:>8.0f} conn/s   CPU µs per connection: {parts}"
                    )
            if "https" in only:
                results["https"] = http_case(
                    stack,
                    ["edge", "nginx"] + (["floor"] if "floor" in paths else []),
                    args.runs,
                    args.seconds,
                    20,
                    "/echo",
                    tls=True,
                    close=True,
                )
                print_http(
                    "HTTPS, a new TLS connection per request (20 at a time)",
                    results["https"],
                    base="nginx",
                )
            if "mtls" in only:
                results["mtls"] = mtls_case(stack, args.runs, args.seconds)
                if results["mtls"]:
                    print_http(
                        "Mutual TLS, a new connection per request with a client certificate "
                        "(20 at a time)",
                        results["mtls"],
                        base="nginx",
                    )
                else:
                    print("\nMutual TLS: skipped (Go's toolchain or the Python SDK agent needed)")
            if "h2" in only:
                results["h2"] = h2_case(stack, args.runs, args.seconds)
                print_http(
                    "HTTP/2, small GETs, 4 connections of 10 streams (h2load)",
                    results["h2"],
                    base="nginx",
                )
            if "policy" in only:
                results["policy"] = http_case(
                    stack,
                    ["edge", "edge:policy", "edge:policy-each", "edge:forward", "edge:cloud"],
                    args.runs,
                    args.seconds,
                    20,
                    "/echo",
                    host={
                        "edge": stack.host,
                        "edge:policy": stack.policy_host,
                        "edge:policy-each": stack.policy_each_host,
                        "edge:forward": stack.forward_host,
                        "edge:cloud": stack.cloud_host,
                    },
                )
                print_http(
                    "small GET, 20 connections: no policy vs a 5-rule policy (held) vs the same "
                    "decided per request vs a forward-internal to another endpoint, from an "
                    "agent's endpoint and from a cloud endpoint",
                    results["policy"],
                    base="edge",
                )
            if "body" in only:
                results["body"] = http_case(
                    stack,
                    ["edge", "edge:body"],
                    args.runs,
                    args.seconds,
                    20,
                    "/upload",
                    1024,
                    host={"edge": stack.host, "edge:body": stack.body_host},
                )
                print_http(
                    "POST 1 KiB, 20 connections: no policy vs a request-body-find-replace (the "
                    "body read for the decision)",
                    results["body"],
                    base="edge",
                )
            if "response" in only:
                hosts = {"edge": stack.host}
                for (action, who), name in stack.response_hosts.items():
                    hosts[f"edge:{action}-{who}"] = name
                results["response"] = http_case(
                    stack,
                    list(hosts),
                    args.runs,
                    args.seconds,
                    20,
                    "/page",
                    host=hosts,
                    headers=["Accept-Encoding: gzip"],
                )
                print_http(
                    "GET a 4 KB page, 20 connections: no policy vs the response's body rewritten "
                    "(response-body-find-replace) and compressed (compress-response, gzip), each "
                    "carried by the core and by the Python path",
                    results["response"],
                    base="edge",
                )
            if "cores" in only:
                results["cores"] = cores_case(stack, args.runs, args.seconds)
                print("\nsmall GET, 20 connections: the edge on one core, then on every core")
                for label, row in results["cores"].items():
                    shares = ", ".join(f"{x:.0%}" for x in row["core_thread_shares"])
                    print(
                        f"  {label:<8} {row['rps']:>9.0f} req/s   edge CPU "
                        f"{row['cpu_us']['edge']:.1f} µs per request (core "
                        f"{row['cpu_us']['edge.core']:.1f}); core threads' shares: {shares}"
                    )
            if "growth" in only:
                from bench.edge_bench import peers_growth

                results["growth"] = peers_growth.run(
                    stack, procs, args.seconds, args.runs, args.endpoints, args.sessions
                )
        finally:
            procs.stop()
            if "stack" in locals():
                stack.edge.stop()
                stack.api.stop()
    print("\nGoals, as ratios from this run:")
    for line in goal_lines(results):
        print("  " + line)
    # a whole run's figures are the ones docs/BENCHMARKS.md quotes: a run of some cases (an
    # --only, a --keep) writes beside them, never over them
    whole = args.only == parser.get_default("only") and not args.keep
    out = os.path.join(HERE, "peers_latest.json" if whole else "peers_partial.json")
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1, default=str)
    print(f"figures: {os.path.relpath(out, os.getcwd())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
