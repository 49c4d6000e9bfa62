"""One way for tests to talk to the service, at two levels.

``InProcessApi`` drives the Chalice app through ``chalice.test.Client`` (the authorizer runs)
over moto's in-process ``mock_aws``; ``HttpApi`` talks real HTTP to ``scripts/serve.py``
(the API and its embedded store as processes). Tests written against ``Api`` run at
both levels through the ``api`` fixture (tests/conftest.py).
"""

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import urlsplit

import requests

from tests.support.contract import check_error_response

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_UNSET = object()


@dataclass
class Resp:
    status: int
    headers: Dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text) if self.text else None

    def __repr__(self) -> str:
        return f"<Resp {self.status} {self.text[:300]}>"


@dataclass
class Caller:
    """Requests with one principal's API key."""

    api: "Api"
    id: str
    token: str
    api_key_id: str = ""

    def request(self, method: str, path: str, json_body: Any = _UNSET, **kwargs: Any) -> Resp:
        return self.api.request(method, path, key=self.token, json_body=json_body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Resp:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json_body: Any = None, **kwargs: Any) -> Resp:
        return self.request("POST", path, {} if json_body is None else json_body, **kwargs)

    def put(self, path: str, json_body: Any = None, **kwargs: Any) -> Resp:
        return self.request("PUT", path, {} if json_body is None else json_body, **kwargs)

    def patch(self, path: str, json_body: Any = None, **kwargs: Any) -> Resp:
        return self.request("PATCH", path, {} if json_body is None else json_body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Resp:
        return self.request("DELETE", path, **kwargs)


@dataclass
class Account:
    id: str
    admin: Caller
    member: Caller
    reporter: bool = False


class Api:
    level = "abstract"

    def request(
        self,
        method: str,
        path: str,
        *,
        key: Optional[str] = None,
        json_body: Any = _UNSET,
        data: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
        version: Optional[str] = "2",
    ) -> Resp:
        """``path`` may be absolute (a ``uri`` or ``next_page_uri``): it is followed as is."""
        sent: Dict[str, str] = {}
        if version is not None:
            sent["Service-Version"] = version
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        body = data
        if json_body is not _UNSET:
            body = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        resp = self._send(method, path, sent, body)
        if resp.status >= 400 and method != "HEAD":
            # every error any test provokes is held to the contract's body (tests/support/contract.py)
            check_error_response(resp.status, resp.headers, resp.text, f"{method} {path}")
        return resp

    def _send(
        self, method: str, path: str, headers: Dict[str, str], body: Optional[bytes]
    ) -> Resp:
        raise NotImplementedError

    def _seed(self, count: int, reporter: bool) -> List[Dict[str, Any]]:
        raise NotImplementedError

    @contextlib.contextmanager
    def service_store(self) -> Iterator[None]:
        """Inside: chalicelib.core.store talks to this service's table (to seed items the way
        another component, e.g. the edge, writes them)."""
        yield

    def new_account(self, reporter: bool = False) -> Account:
        raw = self._seed(1, reporter)[0]
        return self._account(raw)

    def _account(self, raw: Dict[str, Any]) -> Account:
        return Account(
            id=raw["account_id"],
            reporter=raw["reporter"],
            admin=Caller(
                self, raw["admin"]["id"], raw["admin"]["token"], raw["admin"]["api_key_id"]
            ),
            member=Caller(
                self, raw["member"]["id"], raw["member"]["token"], raw["member"]["api_key_id"]
            ),
        )


class InProcessApi(Api):
    level = "inprocess"

    def __init__(self, client: Any) -> None:
        self.client = client

    def _send(self, method, path, headers, body):
        parts = urlsplit(path)
        if parts.scheme:
            headers = {"Host": parts.netloc, **headers}
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        response = self.client.http.request(method, path, headers=headers, body=body or b"")
        raw = response.body
        text = raw.decode() if isinstance(raw, bytes) else (raw or "")
        return Resp(
            response.status_code, {k.lower(): v for k, v in response.headers.items()}, text
        )

    def _seed(self, count, reporter):
        from tests.support.seed import make_account

        return [make_account(reporter) for _ in range(count)]


_GIVEN: set = set()  # ports this process has handed out: never twice


def free_port() -> int:
    """A free port below the kernel's ephemeral range (see free_range)."""
    return free_range(1)


def wait_port(port: int, timeout: float = 20.0) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s")


def free_range(size: int) -> int:
    """The first of ``size`` consecutive free ports, below the kernel's ephemeral range: a port
    from that range (what bind(0) gives) can become the source port of any outgoing connection
    made before its server binds it, and the server then fails with 'address already in use'
    (seen in full runs: an edge's TCP listener, and make run's store on 127.0.0.1:33501). No
    port is handed out twice by one process."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        low_ephemeral = int(handle.read().split()[0])
    for _ in range(1000):
        low = random.randrange(20000, max(20001, low_ephemeral - size))
        ports = range(low, low + size)
        if _GIVEN.intersection(ports):
            continue
        try:
            for port in ports:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        _GIVEN.update(ports)
        return low
    raise RuntimeError("no free port range")


@dataclass
class LocalStack:
    """``scripts/serve.py`` as a process: the API and the embedded store (child processes)."""

    data_dir: str
    port: int = field(default_factory=free_port)
    store_port: int = field(default_factory=free_port)
    process: Optional[subprocess.Popen] = None
    log_path: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_url(self) -> str:
        return f"http://127.0.0.1:{self.store_port}"

    def env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "DYNAMODB_ENDPOINT_URL"}
        env.update(
            {
                "PORT": str(self.port),
                "STORE_PORT": str(self.store_port),
                "DATA_DIR": self.data_dir,
                "TABLE_NAME": "tunnel-service",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("PUBLIC_BASE_URL", None)
        return env

    def store_env(self) -> Dict[str, str]:
        """The environment of a tool that uses the running stack's store directly: its
        endpoint and this start's secret, as serve.py writes them to DATA_DIR/store.env."""
        env = self.env()
        with open(os.path.join(self.data_dir, "store.env")) as handle:
            for line in handle:
                name, _, value = line.strip().partition("=")
                if name:
                    env[name] = value
        for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            env.pop(name, None)
        return env

    def store_client(self) -> Any:
        """A boto3 DynamoDB client holding the stack's store secret."""
        import boto3

        env = self.store_env()
        return boto3.client(
            "dynamodb",
            endpoint_url=env["DYNAMODB_ENDPOINT_URL"],
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=None,
        )

    def start(self, bootstrap: bool = False, timeout: float = 60.0) -> "LocalStack":
        self.log_path = os.path.join(self.data_dir, "serve.log")
        log = open(self.log_path, "wb")  # one start, one log
        args = [sys.executable, os.path.join(PROJECT_DIR, "scripts", "serve.py")]
        if not bootstrap:
            args.append("--no-bootstrap")
        self.process = subprocess.Popen(
            args, cwd=PROJECT_DIR, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve.py exited early: {self.log()}")
            try:
                requests.get(self.base_url + "/api_keys", timeout=5)
                return self
            except requests.RequestException:  # refused, or slow to answer on a busy machine
                time.sleep(0.2)
        raise RuntimeError(f"serve.py did not start in {timeout}s: {self.log()}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(2)  # SIGINT, as Ctrl-C
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        try:
            with open(self.log_path) as handle:
                return handle.read()[-4000:]
        except OSError:
            return ""


class HttpApi(Api):
    level = "http"

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.session = requests.Session()
        self._pool: Dict[bool, List[Dict[str, Any]]] = {False: [], True: []}

    @property
    def base_url(self) -> str:
        return self.stack.base_url

    def _send(self, method, path, headers, body):
        url = path if urlsplit(path).scheme else self.base_url + path
        response = self.session.request(method, url, headers=headers, data=body, timeout=30)
        return Resp(
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            response.text,
        )

    @contextlib.contextmanager
    def service_store(self):
        """Inside: chalicelib.core.store talks to the running stack's store, with its endpoint and
        this start's secret (the store checks every request's signature)."""
        from chalicelib.core import config, store

        names = (
            "DYNAMODB_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_SECURITY_TOKEN",
        )
        saved = {name: os.environ.get(name) for name in names}
        env = self.stack.store_env()
        for name in names:
            if env.get(name):
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
        config.reset_settings()
        store.reset()
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            config.reset_settings()
            store.reset()

    def _seed(self, count, reporter):
        pool = self._pool[reporter]
        if len(pool) < count:
            env = self.stack.store_env()
            args = [sys.executable, "-m", "tests.support.seed", str(max(count, 10))]
            if reporter:
                args.append("--reporter")
            out = subprocess.run(
                args, cwd=PROJECT_DIR, env=env, check=True, capture_output=True, text=True
            ).stdout
            pool.extend(json.loads(out))
        taken, pool[:] = pool[:count], pool[count:]
        return taken
