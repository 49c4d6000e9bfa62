"""`make run`: the whole service on this machine, with no cloud account and no Docker.

The stack is a list of components, each a child process started in order and stopped in
reverse order (see ``build_stack``; one more component is one more ``Component(...)`` line):

1. ``store``: the embedded DynamoDB-compatible store (scripts/embedded_store.py: moto behind a
   write-ahead log, every write fsynced before its answer) on 127.0.0.1:STORE_PORT (default
   8001), data in DATA_DIR/store/ (default .data/). Skipped when DYNAMODB_ENDPOINT_URL names
   another store (LocalStack, DynamoDB Local), which is then used as it is.
2. ``api``: the Chalice app (stage ``dev``) behind a real HTTP server (scripts/api_server.py)
   on 127.0.0.1:PORT (default 8000).
3. ``edge`` (with ``--edge``, what `make run` passes): the data plane, ``python -m edge``, on
   the same store and DATA_DIR (its CA: DATA_DIR/ca.pem; ports: EDGE_* in edge/config.py).
4. ``dns`` (when DNS_LISTEN is set): the service's own DNS server for DNS-01 answers
   (chalicelib/acme/dns.py); ``acme`` (when ACME_DIRECTORY_URL is set): the ACME worker
   (chalicelib/acme/worker.py). docs/CERTIFICATES.md.

The store and the API start at once (the API loads in parallel and serves once released);
the edge, DNS and ACME parts read the store as soon as they run, so they start once the
table exists. In between, the table is created if missing and, on first start, a local
account is bootstrapped; its admin key is written to DATA_DIR/local-admin.json only once the account is
on disk (atomically), checked against the store at every start, and printed.

**The store is closed.** Each start generates a fresh secret; the store accepts only requests
signed with it (AWS Signature V4, verified). Child processes get it in their environment
(``stack_env``): DYNAMODB_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION, TABLE_NAME, DATA_DIR. The same variables are written to DATA_DIR/store.env
(mode 0600) for tools run beside the stack (`make api-key`: ``set -a; . .data/store.env``).

**Stopping.** Ctrl-C or SIGTERM: the store's clients are asked to stop at once (the API stops
accepting and finishes in-flight requests, at most 5 s; the edge closes its sessions), then
the store closes its log; the whole stack is down within 10 s. Children ignore
the terminal's Ctrl-C (this process stops them in order) and die with this process if it is
killed (PR_SET_PDEATHSIG). Every acknowledged write is already on disk, so even kill -9 of
the whole stack loses none.

**Supervision.** A part that dies (a crash, kill -9) is started again, after 0.25 s, doubling
with each restart up to 30 s (a minute up starts the count over), with a line saying so. The
store's acknowledged writes are on disk, so a restarted store has them all. The edge's agent,
HTTP and HTTPS sockets are bound here and inherited (``EDGE_LISTEN_FDS``), so they stay open
while the edge restarts: agents reconnecting meanwhile wait in the backlog and are served by
the new edge (the official SDKs otherwise back off for about two minutes after two refusals).

**Start-up tells the truth**: a damaged or incomplete data directory stops start-up with one
line naming the file and the way out (`make reset`, or the backup snapshot kept); so does a
port in use.
"""

import argparse
import ctypes
import faulthandler
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(PROJECT_DIR, "scripts")
STOP_BUDGET = 9.0  # seconds for the whole stack to stop (the promise is 10)
RESTART_FIRST, RESTART_MAX, RESTART_RESET = 0.25, 30.0, 60.0  # supervision back-off (s)


class StartupError(Exception):
    """Start-up cannot go on: one line for the user (``quiet``: a child already said it)."""

    def __init__(self, message: str, quiet: bool = False) -> None:
        super().__init__(message)
        self.quiet = quiet


def _atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _child_setup() -> None:
    """In each child, before exec: ignore Ctrl-C (serve.py stops children in order) and die
    when serve.py dies, even by kill -9 (Linux PR_SET_PDEATHSIG)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Component:
    """One child process of the stack. It prints ``ready <url>`` once it serves; its other
    output is passed through. SIGTERM stops it (it has ``stop_timeout`` seconds)."""

    name: str
    argv: List[str]
    env: Dict[str, str]
    ready_timeout: float = 60.0
    stop_timeout: float = 3.0
    gated: bool = False  # started early (loads in parallel), serves once release() is called
    after_store: bool = False  # started once the table exists (it reads the store at once)
    ready_mark: str = "ready "  # the line that says it serves ("ready …" lines are not shown)
    pass_fds: tuple = ()  # listening sockets it inherits (kept open here across restarts)
    process: Optional[subprocess.Popen] = None
    restarts: int = 0
    started_at: float = 0.0
    ready: threading.Event = field(default_factory=threading.Event)
    last_lines: List[str] = field(default_factory=list)

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=PROJECT_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if self.gated else subprocess.DEVNULL,
            preexec_fn=_child_setup,
            pass_fds=self.pass_fds,
        )
        threading.Thread(target=self._relay, daemon=True, name=f"relay-{self.name}").start()

    def _relay(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            is_ready = line.startswith(self.ready_mark) and not self.ready.is_set()
            if not line.startswith("ready "):
                self.last_lines = (self.last_lines + [line])[-20:]
                print(line, flush=True)
            if is_ready:  # after the line is out, so it comes before "serving on"
                self.ready.set()

    def release(self) -> None:
        """Let a gated component start serving (the store is prepared)."""
        if self.gated and self.alive():
            try:
                self.process.stdin.write(b"go\n")
                self.process.stdin.flush()
            except OSError:
                pass  # it died: wait_ready reports it

    def wait_ready(self, stopping: threading.Event) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not self.ready.wait(0.05):
            if self.process.poll() is not None:
                time.sleep(0.2)  # let the relay print the child's last words
                said = any(line.startswith("error:") for line in self.last_lines)
                raise StartupError(
                    f"the {self.name} did not start (exit status {self.process.returncode})",
                    quiet=said,
                )
            if stopping.is_set():
                raise StartupError("stopped during start-up")
            if time.monotonic() > deadline:
                raise StartupError(
                    f"the {self.name} did not start within {self.ready_timeout:.0f}s"
                )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart_delay(self) -> float:
        """Back-off before restarting it: 0.25 s, doubling with each restart up to 30 s; a
        run of a minute or more starts the count over."""
        if time.monotonic() - self.started_at >= RESTART_RESET:
            self.restarts = 0
        delay = min(RESTART_FIRST * 2**self.restarts, RESTART_MAX)
        self.restarts += 1
        return delay

    def ask_to_stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, budget: float) -> None:
        """SIGTERM (again: harmless) and wait; SIGKILL once its time is over."""
        if not self.alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=max(0.1, min(self.stop_timeout, budget)))
        except subprocess.TimeoutExpired:
            print(f"{self.name}: did not stop in time; killed", flush=True)
            self.process.kill()
            self.process.wait()


def stack_env(base: Dict[str, str], args: argparse.Namespace, endpoint: str) -> Dict[str, str]:
    """What every child of the stack gets (the edge will reuse the same variables)."""
    env = dict(base)
    env.update(
        {
            "DYNAMODB_ENDPOINT_URL": endpoint,
            "DATA_DIR": os.path.abspath(args.data_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def build_stack(args: argparse.Namespace, env: Dict[str, str], embedded: bool) -> List[Component]:
    py = sys.executable
    stack = []
    if args.edge:
        # The API names the edge's public ports in cloud endpoints' URLs, as the edge does in
        # agent endpoints' (chalicelib.core.config edge_public_port): it is told the edge's
        # listeners, with the edge's own defaults (edge_sockets below binds the same).
        env["EDGE_HTTP_PORT"] = env.get("EDGE_HTTP_PORT") or "8080"
        env["EDGE_HTTPS_PORT"] = env.get("EDGE_HTTPS_PORT") or "8443"
    if embedded:
        stack.append(
            Component(
                "store",
                [
                    py,
                    os.path.join(SCRIPTS, "embedded_store.py"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(args.store_port),
                    "--data-dir",
                    args.data_dir,
                ],
                env,
                stop_timeout=3.0,
            )
        )
    stack.append(
        Component(
            "api",
            [
                py,
                os.path.join(SCRIPTS, "api_server.py"),
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--stage",
                args.stage,
                "--drain",
                "5",
                "--gated",
            ],
            env,
            stop_timeout=6.0,
            gated=True,
        )
    )
    if args.edge:  # the data plane on the same store (edge/config.py: EDGE_* settings)
        fds = edge_sockets(env)
        edge_env = {**env, "EDGE_LISTEN_FDS": ",".join(f"{name}={fd}" for name, fd in fds.items())}
        stack.append(
            Component(
                "edge",
                [py, "-m", "edge"],
                edge_env,
                stop_timeout=3.0,
                ready_mark="edge CA certificate",
                after_store=True,
                pass_fds=tuple(fds.values()),
            )
        )
    # managed certificates (docs/CERTIFICATES.md): the ACME worker when a directory is set,
    # the service's own DNS server (DNS-01 answers for CNAME_ZONE) when DNS_LISTEN is set
    if env.get("DNS_LISTEN"):
        stack.append(
            Component(
                "dns",
                [py, "-m", "chalicelib.acme.dns"],
                env,
                stop_timeout=2.0,
                ready_mark="dns server",
                after_store=True,
            )
        )
    if env.get("ACME_DIRECTORY_URL"):
        stack.append(
            Component(
                "acme",
                [py, "-m", "chalicelib.acme.worker"],
                env,
                stop_timeout=3.0,
                ready_mark="acme worker",
                after_store=True,
            )
        )
    return stack


def edge_sockets(env: Dict[str, str]) -> Dict[str, int]:
    """The edge's agent, HTTP and HTTPS listening sockets, bound here and inherited by the
    edge (EDGE_LISTEN_FDS): they stay open while a crashed edge restarts, so an agent that
    reconnects at once (the SDKs retry after 50 ms, then 2.5 s, then about 2 minutes) waits in
    the backlog for the new edge instead of being refused into a two-minute back-off."""
    import socket

    host = env.get("EDGE_HOST", "127.0.0.1")
    fds = {}
    for name, variable, default in (
        ("agent", "EDGE_AGENT_PORT", 4443),
        ("http", "EDGE_HTTP_PORT", 8080),
        ("https", "EDGE_HTTPS_PORT", 8443),
    ):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = int(env.get(variable) or default)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StartupError(
                f"the edge's {name} port {host}:{port} is in use "
                f"({exc.strerror}); set {variable} to another"
            ) from None
        sock.listen(1024)
        os.set_inheritable(sock.fileno(), True)
        _KEEP.append(sock)
        fds[name] = sock.fileno()
    return fds


_KEEP: List = []  # the edge's listening sockets live as long as this process


def prepare_store(args: argparse.Namespace, key_file: str) -> Optional[Dict[str, str]]:
    """Create the table if missing; bootstrap (first start) or check the local admin key."""
    from chalicelib import accounts, auth
    from chalicelib.core import config, errors, store

    config.reset_settings()
    store.reset()
    store.create_table()
    from chalicelib import migrate

    changed = migrate.run_if_needed()
    if any(changed.values()):
        print(f"store: migrated to layout {migrate.LAYOUT_VERSION}: {changed}", flush=True)
    if args.no_bootstrap:
        return None
    if not os.path.exists(key_file):
        result = accounts.bootstrap("local", abuse_reporter=True)
        # The account is on disk (the store fsyncs before answering): now the key file.
        _atomic_write(key_file, json.dumps(result, indent=2).encode())
        print("bootstrapped a local account (abuse reporter) with an admin user", flush=True)
        return result
    try:
        with open(key_file) as handle:
            local_admin = json.load(handle)
        token = local_admin["token"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StartupError(
            f"{key_file} cannot be read ({exc}); delete it to bootstrap a new "
            f"local account, or `make reset`"
        ) from None
    try:
        auth.resolve(f"Bearer {token}")
    except (auth.AuthFailed, errors.Unauthorized):
        raise StartupError(
            f"{key_file} holds an admin key the store does not know (the "
            f"store was reset or replaced); delete it to bootstrap a new local "
            f"account, or `make reset`"
        ) from None
    return local_admin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--store-port", type=int, default=int(os.environ.get("STORE_PORT", "8001"))
    )
    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR", os.path.join(PROJECT_DIR, ".data"))
    )
    parser.add_argument("--stage", default=os.environ.get("STAGE", "dev"))
    parser.add_argument(
        "--no-bootstrap",
        action="store_true",
        help="do not create the local account on first start",
    )
    parser.add_argument(
        "--edge",
        action="store_true",
        help="also run the edge (python -m edge) on the same store (make run)",
    )
    args = parser.parse_args()
    args.data_dir = os.path.abspath(args.data_dir)

    stopping = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # kill -USR1 prints every thread's stack here (where a start or a stop waits)
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    os.makedirs(args.data_dir, mode=0o700, exist_ok=True)
    base = dict(os.environ)
    base.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    base.setdefault("TABLE_NAME", "tunnel-service")
    embedded = not os.environ.get("DYNAMODB_ENDPOINT_URL")
    if embedded:
        endpoint = f"http://127.0.0.1:{args.store_port}"
        base["AWS_ACCESS_KEY_ID"] = "LOCAL" + secrets.token_hex(8).upper()
        base["AWS_SECRET_ACCESS_KEY"] = secrets.token_urlsafe(32)
        for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE"):
            base.pop(name, None)
    else:
        endpoint = os.environ["DYNAMODB_ENDPOINT_URL"]
        base.setdefault("AWS_ACCESS_KEY_ID", "local")
        base.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    env = stack_env(base, args, endpoint)
    try:
        stack = build_stack(args, env, embedded)
    except StartupError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    started: List[Component] = []
    key_file = os.path.join(args.data_dir, "local-admin.json")
    status = 0
    try:
        # The store and the API start loading now (the API serves once the store is
        # prepared); the edge and the ACME parts read the store as soon as they run, so they
        # start once the table exists (before it, a first start logged ResourceNotFound).
        for component in stack:
            if not component.after_store:
                component.start()
                started.append(component)
        store_ = next((c for c in stack if c.name == "store"), None)
        if store_ is not None:
            print(
                f"store: embedded, on {endpoint}, data in {os.path.join(args.data_dir, 'store')}",
                flush=True,
            )
        else:
            print(f"store: {endpoint}", flush=True)
        # This process talks to the store as the children do.
        os.environ.update(
            {
                k: env[k]
                for k in (
                    "DYNAMODB_ENDPOINT_URL",
                    "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY",
                    "AWS_DEFAULT_REGION",
                    "TABLE_NAME",
                )
            }
        )
        if embedded:
            for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
        import chalicelib.core.store  # noqa: F401  (imported while the store starts)

        if store_ is not None:
            store_.wait_ready(stopping)
            lines = [
                f"{k}={env[k]}"
                for k in (
                    "DYNAMODB_ENDPOINT_URL",
                    "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY",
                    "AWS_DEFAULT_REGION",
                    "TABLE_NAME",
                )
            ]
            _atomic_write(
                os.path.join(args.data_dir, "store.env"), ("\n".join(lines) + "\n").encode()
            )
        local_admin = prepare_store(args, key_file)
        for component in stack:
            if component.after_store:
                component.start()
                started.append(component)
        for component in stack:
            component.release()
            component.wait_ready(stopping)
        if local_admin is not None:
            print(
                f"local account {local_admin['account_id']}; admin API key:\n"
                f"{local_admin['token']}",
                flush=True,
            )
        print(
            f"dashboard: http://{args.host}:{args.port}/dashboard/ (sign in with the admin "
            f"API key)",
            flush=True,
        )
        print(f"serving on http://{args.host}:{args.port}", flush=True)
        restart_at: Dict[str, float] = {}
        while not stopping.wait(0.1):  # supervision: a part that dies is started again
            for component in started:
                if component.alive():
                    continue
                if component.name not in restart_at:
                    delay = component.restart_delay()
                    restart_at[component.name] = time.monotonic() + delay
                    print(
                        f"{component.name}: exited with status "
                        f"{component.process.returncode}; restarting in {delay:g} s",
                        flush=True,
                    )
                elif time.monotonic() >= restart_at[component.name]:
                    del restart_at[component.name]
                    component.ready.clear()
                    component.start()
                    component.release()
                    print(f"{component.name}: restarted", flush=True)
    except StartupError as exc:
        if not exc.quiet:
            print(f"error: {exc}", flush=True)
        status = 1
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback, for the user
        print(f"error: start-up failed: {type(exc).__name__}: {exc}", flush=True)
        status = 1
    finally:
        deadline = time.monotonic() + STOP_BUDGET
        # The store's clients (API, edge) at once, so their drains overlap; the store last,
        # with time left to close its log within the 10 s promise.
        clients = [c for c in reversed(started) if c.name != "store"]
        for component in clients:
            component.ask_to_stop()
        for component in clients + [c for c in started if c.name == "store"]:
            component.stop(deadline - time.monotonic())
        if started:
            print("stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
