"""The one error catalog of the service, and the exceptions that carry it.

Every non-2xx response has the body
``{"error_code": "ERR_…", "status_code": N, "msg": "…", "details": {"operation_id": "op_…"}}``.
Views and resource modules raise an :class:`ApiError` subclass; ``chalicelib.web`` is the single
place that turns it into that body. ``details`` values are always strings.

Catalog (also in the README):

| error_code                 | status | when                                                       |
|----------------------------|--------|------------------------------------------------------------|
| ERR_INVALID_JSON           | 400    | body is not JSON, or not a JSON object                      |
| ERR_UNKNOWN_FIELD          | 400    | body has a field the operation does not accept              |
| ERR_MISSING_FIELD          | 400    | a required body field is absent                             |
| ERR_INVALID_FIELD          | 400    | a body field has the wrong type or breaks a rule            |
| ERR_INVALID_QUERY          | 400    | unknown query parameter, bad `limit` or `before_id`         |
| ERR_MISSING_VERSION        | 400    | no `Service-Version` / `Ngrok-Version` header               |
| ERR_UNSUPPORTED_VERSION    | 400    | version header other than 2                                 |
| ERR_UNAUTHORIZED           | 401    | missing, malformed, unknown or revoked API key; inactive bot |
| ERR_FORBIDDEN              | 403    | valid key, but the principal may not do this                |
| ERR_NOT_FOUND              | 404    | unknown path, or no such resource in the caller's account   |
| ERR_METHOD_NOT_ALLOWED     | 405    | the path exists but not with this method                    |
| ERR_CONFLICT               | 409    | uniqueness or reference conflict, concurrent modification   |
| ERR_BODY_TOO_LARGE         | 413    | request body over the size limit                            |
| ERR_UNSUPPORTED_MEDIA_TYPE | 415    | a body that is not `Content-Type: application/json`         |
| ERR_INTERNAL               | 500    | anything unexpected (details are logged, never returned)    |
| ERR_UNSUPPORTED_OPERATION  | 400    | an operation of the hosted API this service does not offer  |

HTTP-level errors, answered by the server before any route runs (scripts/http_server.py):

| error_code                 | status | when                                                       |
|----------------------------|--------|------------------------------------------------------------|
| ERR_MALFORMED_REQUEST      | 400    | bad request line, header field, Content-Length or chunking  |
| ERR_REQUEST_TIMEOUT        | 408    | head not received within 10 s, or body within 30 s          |
| ERR_EXPECTATION_FAILED     | 417    | an ``Expect`` other than ``100-continue``                   |
| ERR_URI_TOO_LONG           | 414    | request target over 8192 bytes                              |
| ERR_HEADERS_TOO_LARGE      | 431    | header fields over 10240 bytes, or more than 100 of them    |
| ERR_NOT_IMPLEMENTED        | 501    | a transfer coding other than ``chunked``                    |
| ERR_UNAVAILABLE            | 503    | too many open connections                                   |
| ERR_HTTP_VERSION           | 505    | an HTTP version other than 1.0 and 1.1                      |
"""
from typing import Dict, Optional

from chalice.app import ChaliceUnhandledError


class ApiError(ChaliceUnhandledError):
    """Base of every error the API returns on purpose.

    It derives from ChaliceUnhandledError so that Chalice lets it propagate to the
    middleware in chalicelib.web instead of rendering its own 500.
    """

    status_code = 500
    error_code = "ERR_INTERNAL"
    default_msg = "Internal server error"

    def __init__(self, msg: Optional[str] = None, error_code: Optional[str] = None,
                 details: Optional[Dict[str, str]] = None) -> None:
        self.msg = msg or self.default_msg
        if error_code:
            self.error_code = error_code
        self.details = {k: str(v) for k, v in (details or {}).items()}
        super().__init__(self.msg)

    def body(self, operation_id: str) -> dict:
        return {
            "error_code": self.error_code,
            "status_code": self.status_code,
            "msg": self.msg,
            "details": {**self.details, "operation_id": operation_id},
        }


class BadRequest(ApiError):
    status_code = 400
    error_code = "ERR_INVALID_FIELD"
    default_msg = "Bad request"


class InvalidJson(BadRequest):
    error_code = "ERR_INVALID_JSON"


class UnknownField(BadRequest):
    error_code = "ERR_UNKNOWN_FIELD"


class MissingField(BadRequest):
    error_code = "ERR_MISSING_FIELD"


class InvalidField(BadRequest):
    error_code = "ERR_INVALID_FIELD"


class InvalidQuery(BadRequest):
    error_code = "ERR_INVALID_QUERY"


class MissingVersion(BadRequest):
    error_code = "ERR_MISSING_VERSION"


class UnsupportedVersion(BadRequest):
    error_code = "ERR_UNSUPPORTED_VERSION"


class Unauthorized(ApiError):
    status_code = 401
    error_code = "ERR_UNAUTHORIZED"
    default_msg = "Authentication required: send 'Authorization: Bearer <API key>' with a valid key"


class Forbidden(ApiError):
    status_code = 403
    error_code = "ERR_FORBIDDEN"
    default_msg = "This principal is not allowed to perform this operation"


class NotFound(ApiError):
    status_code = 404
    error_code = "ERR_NOT_FOUND"
    default_msg = "Resource not found"


class MethodNotAllowed(ApiError):
    status_code = 405
    error_code = "ERR_METHOD_NOT_ALLOWED"
    default_msg = "Method not allowed"


class Conflict(ApiError):
    status_code = 409
    error_code = "ERR_CONFLICT"
    default_msg = "Conflict"


class PayloadTooLarge(ApiError):
    status_code = 413
    error_code = "ERR_BODY_TOO_LARGE"
    default_msg = "Request body too large"


class UnsupportedMediaType(ApiError):
    status_code = 415
    error_code = "ERR_UNSUPPORTED_MEDIA_TYPE"
    default_msg = "Request bodies must be sent with 'Content-Type: application/json'"


class Internal(ApiError):
    status_code = 500
    error_code = "ERR_INTERNAL"
    default_msg = "Internal server error"


class UnsupportedOperation(BadRequest):
    """A 4xx, not 501: the official clients report 5xx as a server failure, 4xx as an API
    error carrying this message."""
    error_code = "ERR_UNSUPPORTED_OPERATION"
    default_msg = "This operation is not offered by this service"


class MalformedRequest(BadRequest):
    error_code = "ERR_MALFORMED_REQUEST"
    default_msg = "Malformed HTTP request"


class RequestTimeout(ApiError):
    status_code = 408
    error_code = "ERR_REQUEST_TIMEOUT"
    default_msg = "The request was not received in time"


class ExpectationFailed(ApiError):
    status_code = 417
    error_code = "ERR_EXPECTATION_FAILED"
    default_msg = "Only 'Expect: 100-continue' is supported"


class UriTooLong(ApiError):
    status_code = 414
    error_code = "ERR_URI_TOO_LONG"
    default_msg = "The request target is too long"


class HeadersTooLarge(ApiError):
    status_code = 431
    error_code = "ERR_HEADERS_TOO_LARGE"
    default_msg = "The request header fields are too large"


class NotImplementedByServer(ApiError):
    status_code = 501
    error_code = "ERR_NOT_IMPLEMENTED"
    default_msg = "Not implemented"


class Unavailable(ApiError):
    status_code = 503
    error_code = "ERR_UNAVAILABLE"
    default_msg = "The service is busy; retry later"


class HttpVersionNotSupported(ApiError):
    status_code = 505
    error_code = "ERR_HTTP_VERSION"
    default_msg = "Only HTTP/1.0 and HTTP/1.1 are supported"


# The server's own answers (scripts/http_server.py), by status.
HTTP_ERRORS = {cls.status_code: cls for cls in (
    MalformedRequest, RequestTimeout, ExpectationFailed, UriTooLong, HeadersTooLarge,
    NotImplementedByServer, Unavailable, HttpVersionNotSupported, MethodNotAllowed,
    PayloadTooLarge, Internal)}

CATALOG = {cls.error_code: cls.status_code for cls in (
    InvalidJson, UnknownField, MissingField, InvalidField, InvalidQuery, MissingVersion,
    UnsupportedVersion, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict,
    PayloadTooLarge, UnsupportedMediaType, Internal, MalformedRequest, RequestTimeout,
    ExpectationFailed, UriTooLong, HeadersTooLarge, NotImplementedByServer, Unavailable,
    HttpVersionNotSupported, UnsupportedOperation)}


def error_body(status_code: int, error_code: str, msg: str, operation_id: str) -> dict:
    """The wire error body for errors produced outside a view (gateway, router)."""
    return {"error_code": error_code, "status_code": status_code, "msg": msg,
            "details": {"operation_id": operation_id}}
