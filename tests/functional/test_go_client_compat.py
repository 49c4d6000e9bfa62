"""Compatibility with the official Go API client (``github.com/ngrok/ngrok-api-go/v7`` 7.6.0).

tests/functional/go_client/main.go runs the Go client as a process (built by ``make test-deps``
from the Go module proxy, pinned by its go.mod/go.sum), taking one call a line: a service (the
client's package, ``edges/https_routes``), a method (``Get``) and the call's arguments. The
recipes are the Python client's (tests/functional/test_client_compat.py), run on a stand-in of
that client whose every call goes to the Go client instead: the same resources, the same
methods, the same checks and the same report (served, or not offered with the reason, or a
route the app lacks). Where the two clients differ, the difference is stated here and tested:

- the Go client's list reads every page itself and has no ``filter`` (its ``Paging`` holds
  ``before_id`` and ``limit``), so the recipes' filter check is not asked of it;
- fields the Go client omits when empty (``omitempty``: a nil certificate reference) read as
  None, as the Go client itself gives them (its zero value).

Skipped, with the reason, where Go is not installed.
"""

import inspect
import json
import os
import subprocess
import threading

import ngrok
import pytest

from stacks.agents import go_binary
from tests.functional import test_client_compat as compat

GO_CLIENT_DIR = os.path.join(os.path.dirname(__file__), "go_client")
CALL_TIMEOUT = 90.0  # the Go client's own per call is 60 s (main.go)


class GoApi:
    """The Go client as a process: ``call`` sends one call and returns its answer."""

    def __init__(self, binary: str, base_url: str, token: str):
        self.process = subprocess.Popen(
            [binary, base_url, token],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lock = threading.Lock()
        self.methods = self.call({"methods": True})["result"]

    def call(self, payload: dict) -> dict:
        with self.lock:
            self.process.stdin.write(json.dumps(payload, default=_props) + "\n")
            self.process.stdin.flush()
            answer: list = []
            reader = threading.Thread(
                target=lambda: answer.append(self.process.stdout.readline()), daemon=True
            )
            reader.start()
            reader.join(CALL_TIMEOUT)
            if not answer or not answer[0]:
                raise AssertionError(
                    f"the Go client gave no answer to {payload} in {CALL_TIMEOUT} s "
                    f"(exit {self.process.poll()}): {self._stderr()}"
                )
            return json.loads(answer[0])

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return ""
        return self.process.stderr.read()[-2000:]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _props(value):
    """The Python client's body parts (datatypes, the recipes' ``_Props``) as JSON."""
    props = getattr(value, "_props", None)
    if props is None:
        raise TypeError(f"{type(value).__name__} is not JSON")
    return props


class Obj:
    """A result of the Go client, read as the recipes read the Python client's: attributes,
    None for a field the Go client omitted as empty, equal when their JSON is."""

    def __init__(self, data: dict):
        self._data = data

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _wrap(self._data.get(name))

    def __eq__(self, other):
        return isinstance(other, Obj) and self._data == other._data

    def __repr__(self):
        return f"Obj({self._data!r})"


def _wrap(value):
    if isinstance(value, dict):
        return Obj(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


def _go_method(method: str) -> str:
    return "".join(part.capitalize() for part in method.split("_"))


class GoService:
    """A service of the Python client whose methods call the Go client's: each call is bound
    to the Python method's parameters (the API's field names, as the Go client's json tags
    are) and sent with its first argument (what a Go ``string`` parameter takes)."""

    def __init__(self, api: GoApi, path: str, python_service):
        self._api, self._path, self._py = api, path, python_service

    def __getattr__(self, method):
        if method.startswith("_"):
            raise AttributeError(method)
        if _go_method(method) not in self._api.methods[self._path]:
            raise AttributeError(f"the Go client's {self._path} has no {_go_method(method)}")
        signature = inspect.signature(getattr(self._py, method))
        if method == "list":  # the Go client's Paging has no filter (the module docstring)
            signature = signature.replace(
                parameters=[p for p in signature.parameters.values() if p.name != "filter"]
            )

        def call(*args, **kwargs):
            named = dict(signature.bind(*args, **kwargs).arguments)
            first = args[0] if args else next(iter(named.values()), None)
            answer = self._api.call(
                {
                    "service": self._path,
                    "method": _go_method(method),
                    "first": first,
                    "named": named,
                }
            )
            if "error" in answer:
                err = answer["error"]
                status = err.get("status_code", 0)
                cls = ngrok.NotFoundError if status == 404 else ngrok.Error
                raise cls(
                    err.get("error_code"), err.get("msg", ""), status, err.get("details", {})
                )
            if "failure" in answer:
                raise AssertionError(f"the Go client could not make the call: {answer['failure']}")
            return _wrap(answer["result"])

        call.__signature__ = signature
        return call


class GoClient:
    """The Python client's attribute tree (``client.edges.https_routes``), its services the
    Go client's packages (``edges/https_routes``)."""

    def __init__(self, api: GoApi, python_client, path: str = ""):
        self._api, self._py, self._path = api, python_client, path

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        python_child = getattr(self._py, name)
        path = f"{self._path}/{name}" if self._path else name
        if path in self._api.methods:
            return GoService(self._api, path, python_child)
        return GoClient(self._api, python_child, path)


@pytest.fixture(scope="module")
def go_api(http_api):
    binary = go_binary(GO_CLIENT_DIR, "compat")
    if not binary:
        pytest.skip("the Go API client cannot be built here (no Go toolchain: `make test-deps`)")
    account = http_api.new_account(reporter=True)
    api = GoApi(binary, http_api.base_url, account.admin.token)
    yield api, ngrok.Client(account.admin.token, base_url=http_api.base_url)
    api.close()


@pytest.fixture(scope="module")
def go_env(go_api):
    api, python_client = go_api
    return compat.Env(GoClient(api, python_client))


def _go_path(attr: str) -> str:
    return attr.replace(".", "/")


# Resources of the table the Go client 7.6.0 does not have (the Python client 0.19 does).
NOT_IN_GO = {"service_users": "the Go client 7.6.0 has no service users package"}


def test_the_go_client_has_the_methods_the_python_client_has(go_api):
    """Same resources, same methods: a method one client has and the other lacks shows here
    (and would have no recipe)."""
    api, python_client = go_api
    for attr in compat.TABLE:
        if attr in NOT_IN_GO:
            assert _go_path(attr) not in api.methods, f"{attr} is in the Go client now"
            continue
        python = {_go_method(m) for m in compat._methods(compat._service(python_client, attr))}
        assert set(api.methods[_go_path(attr)]) == python, attr


@pytest.mark.parametrize("attr,method", list(compat._cases()))
def test_go_client_method_against_the_service(go_env, attr, method):
    if attr in NOT_IN_GO:
        pytest.skip(NOT_IN_GO[attr])
    http_method, path = compat.client_request(attr, method)
    routed = compat.app_routes(http_method, path)
    if compat.TABLE[attr] == "not offered":
        assert not routed, f"{attr} is routed now: move it to SERVED"
        pytest.skip(
            f"not offered: {compat.NOT_OFFERED[attr]} ({http_method} {path}): the client has "
            "it; this service offers the rule as a traffic policy action"
        )
    assert routed, f"{attr}.{method} sends {http_method} {path}, which this service lacks"
    compat.RECIPES[attr].run(go_env, compat._service(go_env.c, attr), method)
