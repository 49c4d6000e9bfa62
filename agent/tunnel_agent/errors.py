"""One error catalog and one translation point to the wire body.

Every non-2xx answer of the REST API has the management API family's shape:
``{"error_code", "status_code", "msg", "details"}``; ``details`` values are strings.
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


class EdgeRefused(AgentError):
    """The edge refused the endpoint: the edge's ``ERR_NGROK_…`` code is the error code.

    Status by what the code means (agent/README.md, "Errors"): 409 when the name is served or
    reserved by someone else, 403 when the credential may not bind it, 400 otherwise (the
    edge found the endpoint's definition invalid, e.g. its traffic policy)."""

    CONFLICT = frozenset({"ERR_NGROK_334", "ERR_NGROK_320"})
    FORBIDDEN = frozenset(
        {
            "ERR_NGROK_105",
            "ERR_NGROK_107",
            "ERR_NGROK_399",
            "ERR_NGROK_7113",
            "ERR_NGROK_7117",
            "ERR_NGROK_1622",
        }
    )

    def __init__(self, edge_code: str, msg: str, **details: Any) -> None:
        super().__init__(msg, **details)
        self.code = edge_code
        if edge_code in self.CONFLICT:
            self.status = 409
        elif edge_code in self.FORBIDDEN:
            self.status = 403
        else:
            self.status = 400


class EdgeUnavailable(AgentError):
    """The SDK session could not reach the edge, or the edge did not answer in time."""

    status = 503
    code = "ERR_EDGE_UNAVAILABLE"


class StartupError(Exception):
    """The agent cannot start (bad configuration, corrupt tunnels file, bad default policy,
    an authtoken the edge refuses)."""


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
