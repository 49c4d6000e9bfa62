"""Every route of the OpenAPI document, over HTTP: refused without a key, and answered as
documented (status listed for the operation, error bodies in the contract's shape) with one.

The operations come from the document the app builds (chalicelib.openapi), which a
functional test keeps equal to the app's routes: a new route is covered here with no edit.
"""

import pytest

from app import app
from chalicelib import openapi
from chalicelib.core import errors
from tests.integration.helpers import assert_error, fake_id

DOCUMENT = openapi.build(app)
OPERATIONS = [
    (method.upper(), path, op)
    for path, item in sorted(DOCUMENT["paths"].items())
    for method, op in sorted(item.items())
]
IDS = [f"{m} {p}" for m, p, _ in OPERATIONS]


def _concrete(path, op):
    for param in op.get("parameters", []):
        if param.get("in") == "path":
            pattern = param["schema"].get("pattern", "^x_")
            prefix = pattern[1:].split("_")[0]
            path = path.replace("{" + param["name"] + "}", fake_id(prefix))
    return path


@pytest.mark.parametrize("method, path, op", OPERATIONS, ids=IDS)
def test_route_refuses_requests_without_a_key(target, method, path, op):
    if op.get("security") == []:
        pytest.skip("public operation")
    body = {} if method in ("POST", "PUT", "PATCH") else None
    kwargs = {"json_body": body} if body is not None else {}
    resp = target.request(method, _concrete(path, op), key=None, **kwargs)
    assert_error(resp, 401, errors.UNAUTHORIZED)


@pytest.mark.parametrize("method, path, op", OPERATIONS, ids=IDS)
def test_route_answers_as_documented(target, method, path, op):
    url = _concrete(path, op)
    kwargs = {"json_body": {}} if method in ("POST", "PUT", "PATCH") else {}
    resp = target.request(method, url, **kwargs)
    documented = {int(s) for s in op["responses"]}
    assert resp.status_code in documented, (resp.status_code, resp.text)
    if resp.status_code >= 400:
        assert_error(resp, resp.status_code)
        assert resp.status_code < 500
    elif resp.status_code == 201:
        target.created.append((target.admin_key, resp.json()["uri"]))
    if "{" in path and resp.status_code >= 400:
        # a well-formed id that names nothing: 404 (400 when the body is checked first)
        assert resp.status_code in (400, 404), resp.text
    if method == "GET" and "{" not in path:
        assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("path", sorted(DOCUMENT["paths"]))
def test_unsupported_methods_get_405(target, path):
    item = DOCUMENT["paths"][path]
    missing = [m for m in ("GET", "POST", "PUT", "PATCH", "DELETE") if m.lower() not in item]
    if not missing:
        pytest.skip("every method is served")
    url = _concrete(path, next(iter(item.values())))
    for method in missing:
        assert_error(target.request(method, url), 405, errors.METHOD_NOT_ALLOWED)


def test_openapi_document_is_public_and_lists_every_route(target):
    resp = target.request("GET", "/openapi.json", key=None, version=None)
    assert resp.status_code == 200, resp.text
    served = resp.json()
    assert set(served["paths"]) == set(DOCUMENT["paths"])
    from openapi_spec_validator import validate

    validate(served)
