"""The contract's error body, checked on every non-2xx response a test receives.

``Api.request`` (tests/support/api.py) calls :func:`check_error_response` on each response, so
every 4xx/5xx that any test provokes, at either level, is held to docs/CONTRACT.md's "Errors" rule
(body ``{error_code, status_code, msg, details: {operation_id, …}}``, the code in the catalog
with that status, the operation id also in the ``Operation-Id`` header) even where the test
itself only looks at the status. Tests assert codes through :func:`assert_error` with the
catalog's classes (chalicelib.core.errors), so renaming a code renames it here too.
"""

import json
import re
from typing import Any, Dict, Optional, Type

from chalicelib.core import errors

# op_ + base62 id; behind a deployed API Gateway its own errors carry op_ + the gateway's request id
OPERATION_ID = re.compile(r"^op_[0-9A-Za-z-]+$")


class ContractViolation(AssertionError):
    pass


def check_error_response(
    status: int, headers: Dict[str, str], text: str, where: str = ""
) -> Dict[str, Any]:
    """The parsed error body of a non-2xx response; ContractViolation when it breaks the rule."""

    def fail(why: str) -> None:
        raise ContractViolation(
            f"{where}: {status} response breaks the error contract: {why}; body {text[:300]!r}"
        )

    content_type = headers.get("content-type", "")
    if not content_type.startswith("application/json"):
        fail(f"content type {content_type!r}")
    try:
        body = json.loads(text)
    except ValueError:
        fail("body is not JSON")
    if not isinstance(body, dict) or set(body) != {"error_code", "status_code", "msg", "details"}:
        fail("fields are not exactly error_code, status_code, msg, details")
    if body["status_code"] != status:
        fail("status_code differs from the HTTP status")
    if errors.CATALOG.get(body["error_code"]) != status:
        fail(f"{body['error_code']!r} is not the catalog's code for {status}")
    if not isinstance(body["msg"], str) or not body["msg"].strip():
        fail("msg is empty")
    details = body["details"]
    if not isinstance(details, dict) or not all(isinstance(v, str) for v in details.values()):
        fail("details is not an object of strings")
    operation_id = details.get("operation_id", "")
    if not OPERATION_ID.match(operation_id):
        fail("details.operation_id is not an op_ id")
    if headers.get("operation-id") != operation_id:
        fail("the Operation-Id header differs from details.operation_id")
    return body


def assert_error(
    resp: Any, cls: Type[errors.ApiError], field: Optional[str] = None, **details: str
) -> Dict[str, Any]:
    """``resp`` is the catalog error ``cls`` (status and code), with the given details."""
    assert resp.status == cls.status_code, resp
    body = check_error_response(resp.status, resp.headers, resp.text, "assert_error")
    assert body["error_code"] == cls.error_code, body
    if field is not None:
        assert body["details"].get("field") == field, body
    for key, value in details.items():
        assert body["details"].get(key) == value, body
    return body
