"""One HTTP-only suite, two targets.

- ``local``: the stack the test session starts itself (scripts/serve.py = chalice local +
  moto server, the ``api_process`` fixture), with accounts created by stacks/seed.py
  against its store.
- ``deployed``: a LocalStack or AWS deployment (scripts/deploy_stack.py prints both values):
  ``INTEGRATION_BASE_URL`` (e.g. https://abc.execute-api.eu-west-1.amazonaws.com/api) and
  ``INTEGRATION_API_KEY`` (an admin key). ``INTEGRATION_OTHER_API_KEY`` (a key of another
  account) enables the isolation checks, ``INTEGRATION_MEMBER_API_KEY`` (a member of the
  first account) the member checks. Without INTEGRATION_BASE_URL these tests are skipped.

Tests only ever send HTTP to ``target.base_url``; everything they create they delete.
"""

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import pytest
import requests

_UNSET = object()


@dataclass
class Target:
    name: str
    base_url: str
    admin_key: str
    member_key: Optional[str] = None
    other_key: Optional[str] = None
    session: requests.Session = field(default_factory=requests.Session)
    created: List[Tuple[str, str]] = field(default_factory=list)  # (key, uri) to delete

    def request(
        self,
        method: str,
        path: str,
        *,
        key: Any = _UNSET,
        json_body: Any = _UNSET,
        data: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
        version: Optional[str] = "2",
        params: Optional[Dict[str, Any]] = None,
    ) -> requests.Response:
        sent: Dict[str, str] = {}
        if version is not None:
            sent["Service-Version"] = version
        key = self.admin_key if key is _UNSET else key
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        if json_body is not _UNSET:
            data = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        url = path if path.startswith("http") else self.base_url + path
        return self.session.request(
            method, url, headers=sent, data=data, params=params, timeout=30
        )

    def create(self, path: str, body: Dict[str, Any], key: Any = _UNSET) -> Dict[str, Any]:
        resp = self.request("POST", path, key=key, json_body=body)
        assert resp.status_code == 201, (path, resp.status_code, resp.text)
        created = resp.json()
        self.created.append((self.admin_key if key is _UNSET else key, created["uri"]))
        return created

    def unique(self, prefix: str = "it") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    def cleanup(self) -> None:
        for key, uri in reversed(self.created):
            self.request("DELETE", uri, key=key)
        self.created.clear()


def _deployed_target() -> Target:
    base_url = os.environ.get("INTEGRATION_BASE_URL", "").rstrip("/")
    if not base_url:
        pytest.skip("INTEGRATION_BASE_URL not set: no LocalStack/AWS deployment to test")
    admin = os.environ.get("INTEGRATION_API_KEY")
    if not admin:
        pytest.skip("INTEGRATION_API_KEY not set: need an admin API key of the deployment")
    return Target(
        "deployed",
        base_url,
        admin,
        member_key=os.environ.get("INTEGRATION_MEMBER_API_KEY") or None,
        other_key=os.environ.get("INTEGRATION_OTHER_API_KEY") or None,
    )


def _local_target(request) -> Target:
    from tests.support.api import HttpApi

    stack = request.getfixturevalue("api_process")
    api = HttpApi(stack)
    mine, other = api._seed(2, reporter=True)
    return Target(
        "local",
        stack.base_url,
        mine["admin"]["token"],
        member_key=mine["member"]["token"],
        other_key=other["admin"]["token"],
    )


# The deployed target exists only when configured; test_deployment.py says why it is absent
# (one skip line instead of one per test).
TARGETS = ["local"] + (["deployed"] if os.environ.get("INTEGRATION_BASE_URL") else [])


@pytest.fixture(scope="session", params=TARGETS)
def target(request):
    t = _deployed_target() if request.param == "deployed" else _local_target(request)
    yield t
    t.cleanup()


@pytest.fixture
def member_key(target):
    if not target.member_key:
        pytest.skip("INTEGRATION_MEMBER_API_KEY not set: no member key for this deployment")
    return target.member_key


@pytest.fixture
def other_key(target):
    if not target.other_key:
        pytest.skip("INTEGRATION_OTHER_API_KEY not set: no second account to check isolation")
    return target.other_key
