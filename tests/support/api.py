"""One way for tests to talk to the service, at two levels.

``InProcessApi`` drives the Chalice app through ``chalice.test.Client`` (the authorizer runs)
over moto's in-process ``mock_aws`` (stacks.inprocess, which the benchmarks use too);
``HttpApi`` talks real HTTP to ``scripts/serve.py`` (the API and its embedded store as
processes: stacks.api.ApiProcess). Both hold every error response a test provokes to the
contract's error body (tests/support/contract.py). Tests written against ``Api`` run at both
levels through the ``api`` fixture (tests/conftest.py).
"""

import contextlib
import json
import os
import subprocess
import sys
from typing import Any, Dict, List
from urllib.parse import urlsplit

import requests

from stacks import inprocess
from stacks.api import ApiProcess
from stacks.inprocess import Account, Api, Caller, Resp
from stacks.paths import PROJECT_DIR
from tests.support.contract import check_error_response

__all__ = ["Account", "Api", "Caller", "HttpApi", "InProcessApi", "Resp"]


class _ContractChecked(Api):
    def check_error(self, resp: Resp, where: str) -> None:
        # every error any test provokes is held to the contract's body (tests/support/contract.py)
        check_error_response(resp.status, resp.headers, resp.text, where)


class InProcessApi(_ContractChecked, inprocess.InProcessApi):
    pass


class HttpApi(_ContractChecked):
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
            args = [sys.executable, "-m", "stacks.seed", str(max(count, 10))]
            if reporter:
                args.append("--reporter")
            out = subprocess.run(
                args, cwd=PROJECT_DIR, env=env, check=True, capture_output=True, text=True
            ).stdout
            pool.extend(json.loads(out))
        taken, pool[:] = pool[:count], pool[count:]
        return taken
