"""The API with its embedded store: ``scripts/serve.py`` as a process (it starts the store and
the API as its own children; ``make run`` is the same script with ``--edge``, see
stacks.make_run)."""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from stacks import http
from stacks.paths import PROJECT_DIR
from stacks.ports import free_port
from stacks.process import read_tail, stop_process


@dataclass
class Admin:
    """Requests to the API with one account's admin API key."""

    api_url: str
    key: str

    def call(self, method: str, path: str, body: Any = None) -> http.Resp:
        return http.request(
            method,
            self.api_url + path,
            body=body,
            headers={"Authorization": f"Bearer {self.key}", "Ngrok-Version": "2"},
        )

    def get(self, path: str) -> http.Resp:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None) -> http.Resp:
        return self.call("POST", path, {} if body is None else body)

    def delete(self, path: str) -> http.Resp:
        return self.call("DELETE", path)

    def bot_credential(self, acl: Optional[List[str]] = None) -> Dict[str, Any]:
        """A credential owned by a new bot user (the spec's recommended arrangement for an
        agent); its ``token`` is an authtoken, ``bot_id`` its owner."""
        bot = self.post("/bot_users", {"name": f"agent-{time.time_ns()}"})
        assert bot.status == 201, bot
        body: Dict[str, Any] = {"description": "device agent", "owner_id": bot.json["id"]}
        if acl is not None:
            body["acl"] = acl
        cred = self.post("/credentials", body)
        assert cred.status == 201, cred
        return {**cred.json, "bot_id": bot.json["id"]}


@dataclass
class ApiProcess:
    """``scripts/serve.py`` (without ``--edge``): the API on ``port`` and the embedded store on
    ``store_port``, their data in ``data_dir``; its output in ``data_dir``/serve.log.

    ``extra_env`` is added to the environment it inherits (an edge's TCP range, BASE_DOMAIN,
    …); variables starting with one of ``drop_prefixes`` are not passed on. ``python`` is the
    service's interpreter (another one than this process's: the device agent's tests)."""

    data_dir: str
    port: int = field(default_factory=free_port)
    store_port: int = field(default_factory=free_port)
    extra_env: Dict[str, str] = field(default_factory=dict)
    drop_prefixes: Sequence[str] = ()
    python: str = sys.executable
    process: Optional[subprocess.Popen] = None
    log_path: str = ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    api_url = base_url

    @property
    def store_url(self) -> str:
        return f"http://127.0.0.1:{self.store_port}"

    def env(self) -> Dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "DYNAMODB_ENDPOINT_URL" and not k.startswith(tuple(self.drop_prefixes))
        }
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
        env.update(self.extra_env)
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

    def start(self, bootstrap: bool = False, timeout: float = 60.0) -> "ApiProcess":
        """Start and return once the API answers (any status); ``bootstrap``: serve.py makes
        the local account and prints its key (a first start as `make run`)."""
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.data_dir, "serve.log")
        log = open(self.log_path, "wb")  # one start, one log
        args = [self.python, os.path.join(PROJECT_DIR, "scripts", "serve.py")]
        if not bootstrap:
            args.append("--no-bootstrap")
        self.process = subprocess.Popen(
            args, cwd=PROJECT_DIR, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve.py exited early: {self.log()}")
            if http.answers(self.base_url + "/api_keys"):  # slow to answer on a busy machine
                return self
            time.sleep(0.2)
        raise RuntimeError(f"serve.py did not start in {timeout}s: {self.log()}")

    def stop(self) -> None:
        stop_process(self.process, timeout=20)

    def log(self) -> str:
        return read_tail(self.log_path, 4000)

    def new_admin(self, name: str = "stacks") -> Admin:
        """A new account made in the store as `make api-key` makes one (chalicelib.admin
        bootstrap); its admin API key's client."""
        out = subprocess.run(
            [self.python, "-m", "chalicelib.admin", "bootstrap", "--name", name, "--json"],
            cwd=PROJECT_DIR,
            env=self.store_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"bootstrap failed: {out.stdout}\n{out.stderr}")
        return Admin(self.base_url, key_of(out.stdout))


def key_of(output: str) -> str:
    """The API key in chalicelib.admin bootstrap's output (its last JSON line, or last line)."""
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            for key in ("token", "api_key", "key"):
                if isinstance(data.get(key), str):
                    return data[key]
            for value in data.values():
                if isinstance(value, dict) and isinstance(value.get("token"), str):
                    return value["token"]
        elif line:
            return line
    raise RuntimeError(f"no API key in bootstrap output: {output!r}")
