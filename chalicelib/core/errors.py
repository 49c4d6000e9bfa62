"""The one error catalog of the service, and the exceptions that carry it.

Every non-2xx response has the body
``{"error_code": "ERR_…", "status_code": N, "msg": "…", "details": {"operation_id": "op_…"}}``.
Views and resource modules raise an :class:`ApiError` subclass; ``chalicelib.web`` is the single
place that turns it into that body. ``details`` values are always strings.

Codes: where the hosted ngrok API documents an ``ERR_NGROK_…`` code for the situation
(https://ngrok.com/docs/errors/), that code; elsewhere a stable string of ours. Code (and
tests) name codes through the constants below, never as literals, so a rename touches one
place. Catalog (also in docs/CONTRACT.md, "Error catalog"):

| constant            | error_code                 | status | when                                                    |
|---------------------|----------------------------|--------|---------------------------------------------------------|
| INVALID_JSON        | ERR_NGROK_213              | 400    | body is not JSON, or not a JSON object                   |
| UNKNOWN_FIELD       | ERR_NGROK_214              | 400    | body has a field the operation does not accept           |
| MISSING_FIELD       | ERR_MISSING_FIELD          | 400    | a required body field is absent                          |
| INVALID_FIELD       | ERR_INVALID_FIELD          | 400    | a body field has the wrong type or breaks a rule         |
| UNKNOWN_QUERY       | ERR_NGROK_231              | 400    | unknown query parameter                                  |
| INVALID_QUERY       | ERR_NGROK_215              | 400    | bad value of a query parameter (`limit`, `before_id`)    |
| INVALID_FILTER      | ERR_NGROK_250              | 400    | `filter` is not a valid expression of the filter language |
| MISSING_VERSION     | ERR_NGROK_218              | 400    | no `Ngrok-Version` / `Service-Version` header             |
| UNSUPPORTED_VERSION | ERR_NGROK_217              | 400    | version header other than 2                              |
| UNAUTHORIZED        | ERR_NGROK_203              | 401    | missing, malformed, unknown or revoked API key; inactive bot |
| FORBIDDEN           | ERR_FORBIDDEN              | 403    | valid key, but the principal may not do this             |
| NOT_ABUSE_REPORTER  | ERR_NGROK_221              | 403    | /abuse_reports from an account that may not report       |
| API_IP_RESTRICTED   | ERR_NGROK_220              | 403    | an API request from an address the account's `api` IP restrictions refuse |
| DASHBOARD_IP_RESTRICTED | ERR_NGROK_1212         | 403    | a dashboard request from an address its `dashboard` IP restrictions refuse |
| NOT_FOUND           | ERR_NOT_FOUND              | 404    | unknown path, or no such resource in the caller's account |
| METHOD_NOT_ALLOWED  | ERR_METHOD_NOT_ALLOWED     | 405    | the path exists but not with this method                 |
| CONFLICT            | ERR_CONFLICT               | 409    | uniqueness or reference conflict, concurrent modification |
| IDEMPOTENCY_CONFLICT| ERR_IDEMPOTENCY_KEY_REUSED | 409    | an `Idempotency-Key` reused with another request          |
| BODY_TOO_LARGE      | ERR_BODY_TOO_LARGE         | 413    | request body over the size limit                         |
| UNSUPPORTED_MEDIA_TYPE | ERR_NGROK_210           | 415    | a body that is not `Content-Type: application/json`      |
| MISSING_MEDIA_TYPE  | ERR_NGROK_216              | 415    | a body sent without any `Content-Type`                   |
| RATE_LIMITED        | ERR_NGROK_226              | 429    | the account's API request rate limit is exhausted (`Retry-After`) |
| INTERNAL            | ERR_INTERNAL               | 500    | anything unexpected (details are logged, never returned) |
| UNSUPPORTED_OPERATION | ERR_UNSUPPORTED_OPERATION | 400   | an operation of the hosted API this service does not offer |
| CLOUD_ENDPOINT_EXISTS | ERR_NGROK_18009          | 409    | the account already has a cloud endpoint on this URL      |
| ENDPOINT_URL_IN_USE | ERR_NGROK_334              | 409    | the URL's host is served by another endpoint or an HTTPS edge |
| INVALID_CLOUD_POLICY | ERR_NGROK_18002           | 400    | a cloud endpoint's traffic_policy the engine refuses      |
| INTERNAL_TCP_CONNECT | ERR_NGROK_2262            | 400    | an internal HTTP(S) cloud endpoint's traffic_policy with on_tcp_connect rules |
| POOLING_ENABLED_CONFLICT | ERR_NGROK_18016      | 400    | a pooled cloud endpoint on a URL an endpoint without pooling serves |
| POOLING_DISABLED_CONFLICT | ERR_NGROK_18017     | 400    | a cloud endpoint without pooling on a URL another endpoint serves |
| POOL_FULL           | ERR_NGROK_18020            | 400    | the URL's pool has its maximum of endpoints               |
| DOMAIN_NOT_OWNED    | ERR_NGROK_320              | 400    | an endpoint URL on a domain another account reserved      |
| DOMAIN_NOT_RESERVED | ERR_NGROK_7117             | 400    | an endpoint URL on a domain nobody reserved (not under the base domain) |
| DOMAIN_RESERVED_BY_YOU | ERR_NGROK_413           | 409    | reserving a domain the account already reserved           |
| DOMAIN_RESERVED_BY_OTHER | ERR_NGROK_414         | 409    | a domain another account reserved: exactly, by a wildcard over it, or a name it is under or that is under it |
| WILDCARD_CONFLICT   | ERR_NGROK_417              | 409    | a wildcard over, or under, a domain another account reserved |
| DOMAIN_IN_USE       | ERR_NGROK_430              | 409    | a domain (or a name it is under) another account serves now |
| AGENT_STOP_REFUSED  | ERR_NGROK_805              | 400    | the agent answered Stop with an error (or not at all in time) |
| AGENT_RESTART_REFUSED | ERR_NGROK_804            | 400    | the agent answered Restart with an error (or not at all in time) |
| COMMAND_NOT_ANSWERED | ERR_COMMAND_NOT_ANSWERED  | 409    | no edge answered a stop/restart within its bound (withdrawn) |
| SSH_KEY_MISSING     | ERR_NGROK_611              | 400    | an SSH credential without a public key (absent or empty)  |
| SSH_KEY_INVALID     | ERR_NGROK_612              | 400    | an SSH public key this service does not accept (the reason) |
| SSH_KEY_EXISTS      | ERR_NGROK_609              | 409    | an SSH public key the account already has a credential for |
| SSH_KEY_OF_ANOTHER_ACCOUNT | ERR_NGROK_610       | 409    | an SSH public key another account has a credential for     |
| SSH_CA_UNKNOWN      | ERR_NGROK_1949             | 400    | an SSH certificate signed by a CA the account does not have |
| SSH_CERT_KEY_TYPE   | ERR_NGROK_1950             | 400    | an SSH certificate for a key type that cannot be certified (ssh-dss, sk-, a certificate) |
| SSH_CERT_KEY_MISSING | ERR_NGROK_1952            | 400    | an SSH certificate without a public key to sign           |
| AGENT_INGRESS_DOMAIN | ERR_NGROK_6705            | 400    | an agent ingress on a domain of this service (BASE_DOMAIN), not the user's own |
| MODULE_NOT_SUPPORTED | ERR_NGROK_7021            | 400    | a module this service does not offer on that kind of edge (a route's saml) |
| MUTUAL_TLS_NEEDS_TERMINATION | ERR_NGROK_1694    | 400    | a TLS edge's mutual_tls without tls_termination at the edge |
| TLS_EDGE_TCP_ADDRESS | ERR_NGROK_7133            | 400    | a TLS edge hostport on the service's TCP address host     |

One code for every 401: the hosted service distinguishes a missing header (ERR_NGROK_200), an
unparsable one (ERR_NGROK_201) and an unknown key (ERR_NGROK_203), but the deployed API
Gateway answers all of them through one gateway response (its authorizer cannot shape the
body), and one stack answers one way; ERR_NGROK_203 is the code of the most common case.

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

# ---- the codes (see the table above) ---------------------------------------------------------
INVALID_JSON = "ERR_NGROK_213"
UNKNOWN_FIELD = "ERR_NGROK_214"
MISSING_FIELD = "ERR_MISSING_FIELD"
INVALID_FIELD = "ERR_INVALID_FIELD"
UNKNOWN_QUERY = "ERR_NGROK_231"
INVALID_QUERY = "ERR_NGROK_215"
INVALID_FILTER = "ERR_NGROK_250"
MISSING_VERSION = "ERR_NGROK_218"
UNSUPPORTED_VERSION = "ERR_NGROK_217"
UNAUTHORIZED = "ERR_NGROK_203"
FORBIDDEN = "ERR_FORBIDDEN"
NOT_ABUSE_REPORTER = "ERR_NGROK_221"
API_IP_RESTRICTED = "ERR_NGROK_220"
DASHBOARD_IP_RESTRICTED = "ERR_NGROK_1212"
NOT_FOUND = "ERR_NOT_FOUND"
METHOD_NOT_ALLOWED = "ERR_METHOD_NOT_ALLOWED"
CONFLICT = "ERR_CONFLICT"
IDEMPOTENCY_CONFLICT = "ERR_IDEMPOTENCY_KEY_REUSED"
BODY_TOO_LARGE = "ERR_BODY_TOO_LARGE"
UNSUPPORTED_MEDIA_TYPE = "ERR_NGROK_210"
MISSING_MEDIA_TYPE = "ERR_NGROK_216"
RATE_LIMITED = "ERR_NGROK_226"
INTERNAL = "ERR_INTERNAL"
UNSUPPORTED_OPERATION = "ERR_UNSUPPORTED_OPERATION"
CLOUD_ENDPOINT_EXISTS = "ERR_NGROK_18009"
ENDPOINT_URL_IN_USE = "ERR_NGROK_334"
INVALID_CLOUD_POLICY = "ERR_NGROK_18002"
INTERNAL_TCP_CONNECT = "ERR_NGROK_2262"
POOLING_ENABLED_CONFLICT = "ERR_NGROK_18016"
POOLING_DISABLED_CONFLICT = "ERR_NGROK_18017"
POOL_FULL = "ERR_NGROK_18020"
DOMAIN_NOT_OWNED = "ERR_NGROK_320"
DOMAIN_NOT_RESERVED = "ERR_NGROK_7117"
DOMAIN_RESERVED_BY_YOU = "ERR_NGROK_413"
DOMAIN_RESERVED_BY_OTHER = "ERR_NGROK_414"
WILDCARD_CONFLICT = "ERR_NGROK_417"
DOMAIN_IN_USE = "ERR_NGROK_430"
AGENT_STOP_REFUSED = "ERR_NGROK_805"
AGENT_RESTART_REFUSED = "ERR_NGROK_804"
COMMAND_NOT_ANSWERED = "ERR_COMMAND_NOT_ANSWERED"
SSH_KEY_MISSING = "ERR_NGROK_611"
SSH_KEY_INVALID = "ERR_NGROK_612"
SSH_KEY_EXISTS = "ERR_NGROK_609"
SSH_KEY_OF_ANOTHER_ACCOUNT = "ERR_NGROK_610"
SSH_CA_UNKNOWN = "ERR_NGROK_1949"
SSH_CERT_KEY_TYPE = "ERR_NGROK_1950"
SSH_CERT_KEY_MISSING = "ERR_NGROK_1952"
AGENT_INGRESS_DOMAIN = "ERR_NGROK_6705"
MODULE_NOT_SUPPORTED = "ERR_NGROK_7021"
MUTUAL_TLS_NEEDS_TERMINATION = "ERR_NGROK_1694"
TLS_EDGE_TCP_ADDRESS = "ERR_NGROK_7133"
# the HTTP server's own answers (scripts/http_server.py)
MALFORMED_REQUEST = "ERR_MALFORMED_REQUEST"
REQUEST_TIMEOUT = "ERR_REQUEST_TIMEOUT"
EXPECTATION_FAILED = "ERR_EXPECTATION_FAILED"
URI_TOO_LONG = "ERR_URI_TOO_LONG"
HEADERS_TOO_LARGE = "ERR_HEADERS_TOO_LARGE"
NOT_IMPLEMENTED = "ERR_NOT_IMPLEMENTED"
UNAVAILABLE = "ERR_UNAVAILABLE"
HTTP_VERSION = "ERR_HTTP_VERSION"


class ApiError(Exception):
    """Base of every error the API returns on purpose.

    A plain exception: this catalog is part of the Chalice-free core. The Chalice layer
    (``chalicelib.web.view``) carries it out of a view to the middleware that renders it.
    """

    status_code = 500
    error_code = INTERNAL
    default_msg = "Internal server error"

    def __init__(
        self,
        msg: Optional[str] = None,
        error_code: Optional[str] = None,
        details: Optional[Dict[str, str]] = None,
    ) -> None:
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
    error_code = INVALID_FIELD
    default_msg = "Bad request"


class InvalidJson(BadRequest):
    error_code = INVALID_JSON


class UnknownField(BadRequest):
    error_code = UNKNOWN_FIELD


class MissingField(BadRequest):
    error_code = MISSING_FIELD


class InvalidField(BadRequest):
    error_code = INVALID_FIELD


class InvalidQuery(BadRequest):
    """A bad value of a known query parameter."""

    error_code = INVALID_QUERY


class UnknownQuery(InvalidQuery):
    error_code = UNKNOWN_QUERY


class InvalidFilter(InvalidQuery):
    error_code = INVALID_FILTER


class MissingVersion(BadRequest):
    error_code = MISSING_VERSION


class UnsupportedVersion(BadRequest):
    error_code = UNSUPPORTED_VERSION


class Unauthorized(ApiError):
    status_code = 401
    error_code = UNAUTHORIZED
    default_msg = (
        "Authentication required: send 'Authorization: Bearer <API key>' with a valid key"
    )


class Forbidden(ApiError):
    status_code = 403
    error_code = FORBIDDEN
    default_msg = "This principal is not allowed to perform this operation"


class NotAbuseReporter(Forbidden):
    error_code = NOT_ABUSE_REPORTER
    default_msg = "This account is not authorized to submit or view abuse reports"


class ApiIpRestricted(Forbidden):
    """The account's IP restrictions refuse the request's source address (chalicelib.web).
    The hosted service documents the code and its message, not the status: 403, as its
    other refusals of a valid key."""

    error_code = API_IP_RESTRICTED
    default_msg = (
        "Your IP does not match the IP Policy for this Account. Send the request from an "
        "address in the allowed range or update the account's IP restrictions."
    )


class DashboardIpRestricted(ApiIpRestricted):
    error_code = DASHBOARD_IP_RESTRICTED


class NotFound(ApiError):
    status_code = 404
    error_code = NOT_FOUND
    default_msg = "Resource not found"


class MethodNotAllowed(ApiError):
    status_code = 405
    error_code = METHOD_NOT_ALLOWED
    default_msg = "Method not allowed"


class Conflict(ApiError):
    status_code = 409
    error_code = CONFLICT
    default_msg = "Conflict"


class DomainReservedByYou(Conflict):
    error_code = DOMAIN_RESERVED_BY_YOU


class DomainReservedByOther(Conflict):
    error_code = DOMAIN_RESERVED_BY_OTHER


class WildcardConflict(Conflict):
    error_code = WILDCARD_CONFLICT


class DomainInUse(Conflict):
    error_code = DOMAIN_IN_USE


class IdempotencyConflict(Conflict):
    error_code = IDEMPOTENCY_CONFLICT


class PayloadTooLarge(ApiError):
    status_code = 413
    error_code = BODY_TOO_LARGE
    default_msg = "Request body too large"


class UnsupportedMediaType(ApiError):
    status_code = 415
    error_code = UNSUPPORTED_MEDIA_TYPE
    default_msg = "Request bodies must be sent with 'Content-Type: application/json'"


class MissingMediaType(UnsupportedMediaType):
    error_code = MISSING_MEDIA_TYPE


class RateLimited(ApiError):
    """429; ``retry_after`` (whole seconds) becomes the ``Retry-After`` header."""

    status_code = 429
    error_code = RATE_LIMITED
    default_msg = "Too many requests"

    def __init__(self, msg: Optional[str] = None, retry_after: int = 1) -> None:
        super().__init__(msg)
        self.retry_after = max(1, int(retry_after))


class Internal(ApiError):
    status_code = 500
    error_code = INTERNAL
    default_msg = "Internal server error"


class UnsupportedOperation(BadRequest):
    """A 4xx, not 501: the official clients report 5xx as a server failure, 4xx as an API
    error carrying this message."""

    error_code = UNSUPPORTED_OPERATION
    default_msg = "This operation is not offered by this service"


class AgentStopRefused(BadRequest):
    """The agent answered Stop with an error: the hosted service's 400 ERR_NGROK_805."""

    error_code = AGENT_STOP_REFUSED

    def __init__(self, reason: str) -> None:
        super().__init__(f"This ngrok agent does not support remote stopping: {reason}.")


class AgentRestartRefused(BadRequest):
    """The agent answered Restart with an error: the hosted service's 400 ERR_NGROK_804."""

    error_code = AGENT_RESTART_REFUSED

    def __init__(self, reason: str) -> None:
        super().__init__(f"This ngrok agent does not support remote restarting: {reason}.")


class CommandNotAnswered(Conflict):
    """409, not 504: a stop/restart no edge answered in time (the official clients report
    5xx as a server failure; this is the session's state, and a retry may succeed)."""

    error_code = COMMAND_NOT_ANSWERED


class CloudEndpointExists(Conflict):
    error_code = CLOUD_ENDPOINT_EXISTS


class EndpointUrlInUse(Conflict):
    error_code = ENDPOINT_URL_IN_USE


class InvalidCloudPolicy(InvalidField):
    error_code = INVALID_CLOUD_POLICY


class InternalTcpConnect(InvalidField):
    """An internal HTTP(S) endpoint's policy with on_tcp_connect rules: such an endpoint is
    reached only by a forward-internal of a request, never by a connection of its own."""

    error_code = INTERNAL_TCP_CONNECT


class PoolingEnabledConflict(InvalidField):
    error_code = POOLING_ENABLED_CONFLICT


class PoolingDisabledConflict(InvalidField):
    error_code = POOLING_DISABLED_CONFLICT


class PoolFull(InvalidField):
    error_code = POOL_FULL


class DomainNotOwned(InvalidField):
    error_code = DOMAIN_NOT_OWNED


class DomainNotReserved(InvalidField):
    error_code = DOMAIN_NOT_RESERVED


class ModuleNotSupported(InvalidField):
    error_code = MODULE_NOT_SUPPORTED


class MutualTlsNeedsTermination(InvalidField):
    error_code = MUTUAL_TLS_NEEDS_TERMINATION


class TlsEdgeTcpAddress(InvalidField):
    error_code = TLS_EDGE_TCP_ADDRESS


class SshKeyMissing(InvalidField):
    error_code = SSH_KEY_MISSING


class SshKeyInvalid(InvalidField):
    error_code = SSH_KEY_INVALID


class SshKeyExists(Conflict):
    error_code = SSH_KEY_EXISTS


class SshKeyOfAnotherAccount(Conflict):
    error_code = SSH_KEY_OF_ANOTHER_ACCOUNT


class SshCertificateAuthorityUnknown(InvalidField):
    error_code = SSH_CA_UNKNOWN


class SshCertificateKeyType(InvalidField):
    error_code = SSH_CERT_KEY_TYPE


class SshCertificateKeyMissing(InvalidField):
    error_code = SSH_CERT_KEY_MISSING


class AgentIngressDomain(InvalidField):
    error_code = AGENT_INGRESS_DOMAIN


class MalformedRequest(BadRequest):
    error_code = MALFORMED_REQUEST
    default_msg = "Malformed HTTP request"


class RequestTimeout(ApiError):
    status_code = 408
    error_code = REQUEST_TIMEOUT
    default_msg = "The request was not received in time"


class ExpectationFailed(ApiError):
    status_code = 417
    error_code = EXPECTATION_FAILED
    default_msg = "Only 'Expect: 100-continue' is supported"


class UriTooLong(ApiError):
    status_code = 414
    error_code = URI_TOO_LONG
    default_msg = "The request target is too long"


class HeadersTooLarge(ApiError):
    status_code = 431
    error_code = HEADERS_TOO_LARGE
    default_msg = "The request header fields are too large"


class NotImplementedByServer(ApiError):
    status_code = 501
    error_code = NOT_IMPLEMENTED
    default_msg = "Not implemented"


class Unavailable(ApiError):
    status_code = 503
    error_code = UNAVAILABLE
    default_msg = "The service is busy; retry later"


class HttpVersionNotSupported(ApiError):
    status_code = 505
    error_code = HTTP_VERSION
    default_msg = "Only HTTP/1.0 and HTTP/1.1 are supported"


# The server's own answers (scripts/http_server.py), by status.
HTTP_ERRORS = {
    cls.status_code: cls
    for cls in (
        MalformedRequest,
        RequestTimeout,
        ExpectationFailed,
        UriTooLong,
        HeadersTooLarge,
        NotImplementedByServer,
        Unavailable,
        HttpVersionNotSupported,
        MethodNotAllowed,
        PayloadTooLarge,
        Internal,
    )
}

CATALOG = {
    cls.error_code: cls.status_code
    for cls in (
        InvalidJson,
        UnknownField,
        MissingField,
        InvalidField,
        ModuleNotSupported,
        MutualTlsNeedsTermination,
        TlsEdgeTcpAddress,
        InvalidQuery,
        UnknownQuery,
        InvalidFilter,
        MissingVersion,
        UnsupportedVersion,
        Unauthorized,
        Forbidden,
        NotAbuseReporter,
        ApiIpRestricted,
        DashboardIpRestricted,
        NotFound,
        DomainReservedByYou,
        DomainReservedByOther,
        WildcardConflict,
        DomainInUse,
        MethodNotAllowed,
        Conflict,
        IdempotencyConflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        MissingMediaType,
        RateLimited,
        Internal,
        UnsupportedOperation,
        AgentStopRefused,
        AgentRestartRefused,
        CommandNotAnswered,
        CloudEndpointExists,
        EndpointUrlInUse,
        InvalidCloudPolicy,
        InternalTcpConnect,
        PoolingEnabledConflict,
        PoolingDisabledConflict,
        PoolFull,
        DomainNotOwned,
        DomainNotReserved,
        SshKeyMissing,
        SshKeyInvalid,
        SshKeyExists,
        SshKeyOfAnotherAccount,
        SshCertificateAuthorityUnknown,
        SshCertificateKeyType,
        SshCertificateKeyMissing,
        AgentIngressDomain,
        MalformedRequest,
        RequestTimeout,
        ExpectationFailed,
        UriTooLong,
        HeadersTooLarge,
        NotImplementedByServer,
        Unavailable,
        HttpVersionNotSupported,
    )
}


def error_body(status_code: int, error_code: str, msg: str, operation_id: str) -> dict:
    """The wire error body for errors produced outside a view (gateway, router)."""
    return {
        "error_code": error_code,
        "status_code": status_code,
        "msg": msg,
        "details": {"operation_id": operation_id},
    }


# The traffic inspector's replay (chalicelib/captured_requests.py).
REPLAY_FAILED = "ERR_REPLAY_FAILED"


class ReplayFailed(ApiError):
    """502: the replayed request did not reach the edge or got no answer from it."""

    status_code = 502
    error_code = REPLAY_FAILED
    default_msg = "The captured request could not be replayed through the edge"


CATALOG[ReplayFailed.error_code] = ReplayFailed.status_code
