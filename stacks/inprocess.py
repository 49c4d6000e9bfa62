"""The API in this process, for tests and benchmarks: ``InProcessApi`` drives the Chalice app
through ``chalice.test.Client`` (the authorizer runs), over whatever store the environment
names (moto's in-process ``mock_aws`` for the tests; a moto server for some benchmarks).

``Api`` is what a caller sees of it: requests with one principal's API key (``Caller``) and new
accounts, each with an admin and a member user (``new_account``, made by stacks.seed). The
tests' clients (tests/support/api.py) are these, with every error response checked against
the contract, and ``HttpApi``, the same ``Api`` over real HTTP.
"""

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import urlsplit

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
            self.check_error(resp, f"{method} {path}")
        return resp

    def check_error(self, resp: Resp, where: str) -> None:
        """Called with every non-2xx response (but HEAD's); nothing here. The tests' clients
        hold each one to the contract's error body (tests/support/api.py)."""

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
        from stacks.seed import make_account

        return [make_account(reporter) for _ in range(count)]
