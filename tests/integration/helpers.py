"""Checks the integration tests share (HTTP only)."""

import re

from chalicelib.core.errors import CATALOG

OP_ID = re.compile(r"^op_[0-9A-Za-z-]+$")  # op_ + base62 id, or op_ + API Gateway's request id


def assert_error(resp, status, code=None):
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error_code", "status_code", "msg", "details"}, body
    assert body["status_code"] == status and body["msg"], body
    assert body["error_code"] in CATALOG, body  # one of chalicelib.core.errors' codes
    if code:
        assert body["error_code"] == code, body
    assert OP_ID.match(body["details"]["operation_id"]), body
    assert all(isinstance(v, str) for v in body["details"].values()), body
    return body


def fake_id(prefix):
    return f"{prefix}_" + "0" * 6 + "Zz9" * 7
