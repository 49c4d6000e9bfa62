"""One error catalog and one translation point to the wire body.

Every non-2xx answer of the REST API and of the ingress has the management API
family's shape: ``{"error_code", "status_code", "msg", "details"}``; ``details``
values are strings.
"""

from __future__ import annotations

import secrets
from typing import Any


class AgentError(Exception):
    """A failure with its HTTP status and stable error code."""

    status = 500
    code = "ERR_INTERNAL"

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = {key: str(value) for key, value in details.items()}


class BadRequest(AgentError):
    status = 400
    code = "ERR_INVALID_REQUEST"


class Unauthorized(AgentError):
    status = 401
    code = "ERR_UNAUTHORIZED"


class NotFound(AgentError):
    status = 404
    code = "ERR_NOT_FOUND"


class TunnelNotFound(NotFound):
    code = "ERR_TUNNEL_NOT_FOUND"


class MethodNotAllowed(AgentError):
    status = 405
    code = "ERR_METHOD_NOT_ALLOWED"


class Conflict(AgentError):
    status = 409
    code = "ERR_CONFLICT"


class PayloadTooLarge(AgentError):
    status = 413
    code = "ERR_PAYLOAD_TOO_LARGE"


class PersistFailed(AgentError):
    status = 500
    code = "ERR_PERSIST_FAILED"


class PolicyDenied(AgentError):
    """A ``deny`` action of a traffic policy refused the request."""

    code = "ERR_POLICY_DENIED"

    def __init__(self, msg: str, status: int, **details: Any) -> None:
        super().__init__(msg, **details)
        self.status = status


class LoopDetected(AgentError):
    status = 508
    code = "ERR_LOOP_DETECTED"


class UpstreamUnavailable(AgentError):
    status = 502
    code = "ERR_UPSTREAM_UNAVAILABLE"


class UpstreamTimeout(AgentError):
    status = 504
    code = "ERR_UPSTREAM_TIMEOUT"


class StartupError(Exception):
    """The agent cannot start (bad configuration, corrupt tunnels file, bad default policy)."""


def new_operation_id() -> str:
    return "op_" + secrets.token_hex(12)


def error_body(err: AgentError, operation_id: str) -> dict[str, Any]:
    details = dict(err.details)
    details["operation_id"] = operation_id
    return {
        "error_code": err.code,
        "status_code": err.status,
        "msg": err.msg,
        "details": details,
    }
