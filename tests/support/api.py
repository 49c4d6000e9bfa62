"""One way for tests to talk to the service, at two levels.

``InProcessApi`` drives the Chalice app through ``chalice.test.Client`` (the authorizer runs)
over moto's in-process ``mock_aws``; ``HttpApi`` talks real HTTP to ``scripts/serve.py``
(the API and its embedded store as processes: stacks.api.ApiProcess). Tests written against ``Api`` run at
both levels through the ``api`` fixture (tests/conftest.py).
"""

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import urlsplit

import requests

from stacks.api import ApiProcess
from stacks.paths import PROJECT_DIR
from tests.support.contract import check_error_response

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


class HttpApi(Api):
    level = "http"

    def __init__(self, stack: ApiProcess) -> None:
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
