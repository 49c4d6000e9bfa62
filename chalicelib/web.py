"""The HTTP edge of the service: what every view shares.

- :func:`install` registers the middleware that wraps every view. It is the single
  translation point from :class:`chalicelib.core.errors.ApiError` (and anything unexpected) to
  the wire error body, checks the version header, the body's media type and size, and gives
  every request an ``op_`` operation id (logged, returned in error details and in the
  ``Operation-Id`` response header). It is also where an authenticated request meets the
  account's ``api`` and ``dashboard`` IP restrictions (:func:`check_ip_restrictions`), once,
  before anything else is read or changed.
- :func:`ctx` is the caller (principal from the authorizer context) and the base URL that
  every ``uri`` is built from. A view that finds no authorizer context refuses (fail closed).
- :func:`body`, :func:`list_params` and :func:`page` implement strict bodies and the
  contract's pagination.
"""

import functools
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from urllib.parse import quote, urlencode

from chalice import Chalice, Response
from chalice.app import ChaliceUnhandledError, Request

from chalicelib import ratelimit, validation
from chalicelib.core import errors, ids, ip_rules, store
from chalicelib.core.config import get_settings

log = logging.getLogger("tunnel_service")

SUPPORTED_VERSIONS = ("2",)
MAX_BODY_BYTES = 256 * 1024
DEFAULT_LIMIT = 100
MAX_LIMIT = 100
# Paths served without the version header (and without auth): machine-readable docs.
UNVERSIONED_PATHS = {"/openapi.json"}

# ``beforeId`` is how the TypeScript client (@ngrok/ngrok-api) spells ``before_id``.
LIST_QUERY = ("limit", "before_id", "beforeId", "filter")

# The dashboard sends ``Service-Client: dashboard`` with each of its requests
# (dashboard/js/api.js): for the account's IP restrictions it is then a dashboard request, not
# an API one (check_ip_restrictions).
CLIENT_HEADER = "service-client"
DASHBOARD_CLIENT = "dashboard"

_app: List[Chalice] = []
_clock = time.time  # the rate limiter's clock (tests replace it)
_local = threading.local()
# (resource path, method) -> query parameters the view accepts; see allow_query().
_query_allowed: Dict[Tuple[str, str], frozenset] = {}


@dataclass(frozen=True)
class Principal:
    """Who is calling: resolved by the authorizer from the API key."""

    account_id: str
    id: str  # usr_… or bot_…
    kind: str  # "user" | "bot"
    role: str  # "admin" | "member"
    api_key_id: str
    # The account's abuse-reporter flag as copied onto the key's lookup item (None: not
    # known, read the account; see chalicelib.auth).
    abuse_reporter: Optional[bool] = None
    # The API event types the account's event subscriptions name, as copied onto the key's
    # lookup item (comma-separated, "" none; None: not known, Query the subscriptions; see
    # chalicelib.audit).
    audit_types: Optional[str] = None
    # The request types the account's IP restrictions restrict ("api", "dashboard",
    # "api,dashboard"; "" or None: none), as copied onto the key's lookup item (see
    # chalicelib.ip_restrictions): only then does a request read the restrictions.
    ip_restricted: Optional[str] = None

    def extra_context(self) -> Dict[str, str]:
        """The optional facts, as authorizer context strings."""
        context = {}
        if self.abuse_reporter is not None:
            context["abuse_reporter"] = "true" if self.abuse_reporter else "false"
        if self.audit_types is not None:
            context["audit_types"] = self.audit_types
        if self.ip_restricted:
            context["ip_restricted"] = self.ip_restricted
        return context

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def require_admin(self, action: str) -> None:
        if not self.is_admin:
            raise errors.Forbidden(f"Only admins may {action}")


@dataclass(frozen=True)
class Ctx:
    principal: Principal
    base_url: str

    @property
    def account_id(self) -> str:
        return self.principal.account_id

    def uri(self, path: str) -> str:
        return self.base_url + path

    def ref(self, path: str, resource_id: str) -> Dict[str, str]:
        return {"id": resource_id, "uri": self.uri(f"{path}/{resource_id}")}


class _Carried(ChaliceUnhandledError):
    """An :class:`errors.ApiError` on its way out of a view: Chalice renders any other
    exception as its own 500, but lets this kind through to the middleware."""

    def __init__(self, error: errors.ApiError) -> None:
        super().__init__(error.msg)
        self.error = error


def view(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a view so the core's errors reach the middleware (every route is wrapped by the
    route helper in app.py)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except errors.ApiError as exc:
            raise _Carried(exc) from exc

    return wrapped


def install(app: Chalice) -> None:
    _app[:] = [app]
    app.register_middleware(_middleware, "http")


def allow_query(path: str, methods: Iterable[str], names: Iterable[str] = ()) -> None:
    """Declare the query parameters a route accepts; the middleware refuses any other one
    (400) before the view runs, so a request with a stray parameter changes nothing."""
    for method in methods:
        _query_allowed[(path, method)] = frozenset(names)


def request() -> Request:
    return _app[0].current_request


def operation_id() -> str:
    return getattr(_local, "operation_id", None) or ids.new_id("op")


# ---- the translation point -----------------------------------------------------------------
def json_response(status: int, body: Dict[str, Any]) -> Response:
    """A JSON response with the operation id header (a replayed response, chalicelib.rest)."""
    return _json_response(status, body)


def _json_response(status: int, body: Dict[str, Any]) -> Response:
    return Response(
        body=json.dumps(body),
        status_code=status,
        headers={"Content-Type": "application/json", "Operation-Id": operation_id()},
    )


def error_response(exc: errors.ApiError) -> Response:
    response = _json_response(exc.status_code, exc.body(operation_id()))
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


_CHALICE_STATUS_TO_ERROR = {
    400: errors.BadRequest,
    401: errors.Unauthorized,
    403: errors.Forbidden,
    404: errors.NotFound,
    405: errors.MethodNotAllowed,
    409: errors.Conflict,
    413: errors.PayloadTooLarge,
    415: errors.UnsupportedMediaType,
}


def _check_request(req: Request) -> None:
    if req.path not in UNVERSIONED_PATHS:
        headers = req.headers
        version = headers.get("service-version")
        if version is None:
            version = headers.get("ngrok-version")
        if version is None:
            raise errors.MissingVersion(
                "Missing version header: send 'Service-Version: 2' (or 'Ngrok-Version: 2')"
            )
        if version.strip() not in SUPPORTED_VERSIONS:
            raise errors.UnsupportedVersion(
                f"Unsupported API version '{version}'; supported versions: "
                f"{', '.join(SUPPORTED_VERSIONS)}"
            )
    params = req.query_params or {}
    if params:
        allowed = _query_allowed.get(((req.context or {}).get("resourcePath"), req.method))
        unknown = sorted(set(params) - allowed) if allowed is not None else []
        if unknown:
            raise errors.UnknownQuery(
                f"Unknown query parameter '{unknown[0]}'"
                + (
                    f"; accepted: {', '.join(sorted(allowed))}"
                    if allowed
                    else "; this operation takes no query parameters"
                ),
                details={"parameter": unknown[0]},
            )
    raw = req.raw_body or b""
    if len(raw) > MAX_BODY_BYTES:
        raise errors.PayloadTooLarge(
            f"Request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES} bytes"
        )
    if raw.strip():
        content_type = (req.headers.get("content-type") or "").split(";")[0].strip().lower()
        if not content_type:
            raise errors.MissingMediaType(
                "A request body was sent without a Content-Type; send "
                "'Content-Type: application/json'"
            )
        if content_type != "application/json":
            raise errors.UnsupportedMediaType(
                "Request bodies must be sent with 'Content-Type: application/json'"
                + (f", not '{content_type}'" if content_type else "")
            )


def _middleware(event: Request, get_response: Callable[[Request], Response]) -> Response:
    _local.operation_id = ids.new_id("op")
    try:
        authorizer = (event.context or {}).get("authorizer") or {}
        ratelimit.check(authorizer.get("account_id"), clock=_clock)
        check_ip_restrictions(event, authorizer)
        _check_request(event)
        try:
            response = get_response(event)
        except _Carried as carried:
            raise carried.error from None
    except errors.ApiError as exc:
        if exc.status_code >= 500:
            log.error("operation %s failed: %s", operation_id(), exc.msg)
        return error_response(exc)
    except Exception:  # noqa: BLE001 - the one place that turns surprises into a clean 500
        log.exception("operation %s failed with an unexpected error", operation_id())
        return error_response(errors.Internal())
    if response.status_code >= 400 and not _is_contract_error(response.body):
        # Chalice's own errors (405 from its router, 500 from a crash inside it).
        cls = _CHALICE_STATUS_TO_ERROR.get(response.status_code, errors.Internal)
        message = None
        if isinstance(response.body, dict) and response.status_code < 500:
            message = response.body.get("Message")
        return error_response(cls(message))
    response.headers.setdefault("Operation-Id", operation_id())
    log.info(
        "operation %s %s %s -> %s", operation_id(), event.method, event.path, response.status_code
    )
    return response


def source_ip(req: Request) -> str:
    """The request's client address: API Gateway's ``identity.sourceIp`` (deployed, the
    connection's peer as API Gateway saw it; under `make run` and the tests the local
    gateway's, chalicelib.gateway)."""
    identity = (req.context or {}).get("identity") or {}
    return str(identity.get("sourceIp") or "")


def check_ip_restrictions(event: Request, authorizer: Dict[str, Any]) -> None:
    """Refuse an authenticated request whose source address the account's IP restrictions of
    its type refuse (403 ERR_NGROK_220, a dashboard request's ERR_NGROK_1212), before its
    view runs; an unenforced restriction that would refuse it only logs. Nothing is read when
    the key's lookup says the account has no restriction that applies (``ip_restricted``,
    chalicelib.ip_restrictions); else the restrictions, and their policies' rules (core
    ip_rules.refusing)."""
    marker = authorizer.get("ip_restricted")
    account_id = authorizer.get("account_id")
    if not marker or not isinstance(marker, str) or not account_id:
        return
    headers = event.headers or {}
    client = (headers.get(CLIENT_HEADER) or "").strip().lower()
    kind = ip_rules.DASHBOARD if client == DASHBOARD_CLIENT else ip_rules.API
    governing = ip_rules.governing(kind, marker)
    if governing is None:
        return
    ip = source_ip(event)
    refused = ip_rules.refusing(account_id, governing, ip)
    for restriction in refused:
        if not restriction["enforced"]:
            log.info(
                "operation %s: %s IP restriction %s would refuse %s (not enforced)",
                operation_id(),
                governing,
                restriction["id"],
                ip,
            )
    enforced = [r for r in refused if r["enforced"]]
    if enforced:
        cls = (
            errors.DashboardIpRestricted
            if governing == ip_rules.DASHBOARD
            else errors.ApiIpRestricted
        )
        log.info(
            "operation %s: %s IP restriction %s refused %s",
            operation_id(),
            governing,
            enforced[0]["id"],
            ip,
        )
        raise cls(
            f"Your IP {ip or '(unknown)'} does not match the IP Policy for this Account: its "
            f"{governing} IP restriction {enforced[0]['id']} refuses it. Send the request "
            "from an address in the allowed range or update the account's IP restrictions.",
            details={"ip": ip, "ip_restriction_id": enforced[0]["id"]},
        )


def _is_contract_error(body: Any) -> bool:
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except ValueError:
            return False
    return isinstance(body, dict) and {"error_code", "status_code", "msg", "details"} <= set(body)


# ---- the caller --------------------------------------------------------------------------
def base_url(req: Optional[Request] = None) -> str:
    """Scheme, host and stage path of this request, or PUBLIC_BASE_URL when configured."""
    configured = get_settings().public_base_url
    if configured:
        return configured
    req = req or request()
    headers = req.headers
    proto = (headers.get("x-forwarded-proto") or "http").split(",")[0].strip() or "http"
    host = headers.get("host") or "localhost"
    stage_path = ""
    context = req.context or {}
    stage = context.get("stage")
    if stage and str(context.get("path", "")).startswith(f"/{stage}/"):
        stage_path = f"/{stage}"
    return f"{proto}://{host}{stage_path}"


def principal(req: Optional[Request] = None) -> Principal:
    """The authorizer's principal; 401 when there is none (fail closed)."""
    req = req or request()
    context = (req.context or {}).get("authorizer") or {}
    try:
        found = Principal(
            account_id=context["account_id"],
            id=context["principal_id"],
            kind=context["principal_kind"],
            role=context["role"],
            api_key_id=context["api_key_id"],
            abuse_reporter={"true": True, "false": False}.get(
                str(context.get("abuse_reporter")).lower()
            ),
            audit_types=context.get("audit_types")
            if isinstance(context.get("audit_types"), str)
            else None,
            ip_restricted=context.get("ip_restricted")
            if isinstance(context.get("ip_restricted"), str)
            else None,
        )
    except (KeyError, TypeError):
        raise errors.Unauthorized() from None
    if not (found.account_id and found.id and found.role in ("admin", "member")):
        raise errors.Unauthorized()
    return found


def ctx() -> Ctx:
    req = request()
    return Ctx(principal=principal(req), base_url=base_url(req))


# ---- bodies and lists ----------------------------------------------------------------------
def json_object() -> Dict[str, Any]:
    """The request body as a JSON object ({} when there is none)."""
    raw = request().raw_body or b""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except RecursionError:
        raise errors.InvalidJson("Request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.InvalidJson(f"Request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise errors.InvalidJson("Request body must be a JSON object")
    try:
        # JSON lets a string hold an unpaired surrogate escape ("\ud800"); such a string is
        # not Unicode, and every later UTF-8 measure or store write of it would fail with a 500.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise errors.InvalidJson("Request body is nested too deeply") from None
    except UnicodeEncodeError:
        raise errors.InvalidJson(
            "Request body holds a string with an unpaired UTF-16 surrogate "
            "escape (\\ud800-\\udfff); strings must be valid Unicode"
        ) from None
    return value


def body(fields: Iterable[validation.Field], path_id: Optional[str] = None) -> Dict[str, Any]:
    """The checked fields sent in the body (see chalicelib.validation.parse)."""
    return validation.parse(json_object(), fields, path_id=path_id)


def reject_query(allowed: Iterable[str] = ()) -> Dict[str, str]:
    params = dict(request().query_params or {})
    allowed = set(allowed)
    for name in params:
        if name not in allowed:
            raise errors.UnknownQuery(
                f"Unknown query parameter '{name}'"
                + (f"; accepted: {', '.join(sorted(allowed))}" if allowed else ""),
                details={"parameter": name},
            )
    return params


def list_params(prefix: str, extra: Iterable[str] = ()) -> Tuple[int, Optional[str]]:
    """``limit`` (1–100, default 100) and ``before_id`` (an id with this prefix) of a list.

    ``beforeId`` is accepted as the same parameter (the TypeScript client sends it); both at
    once with different values is a 400."""
    params = reject_query(LIST_QUERY + tuple(extra))  # extra: the list's own filters
    if "beforeId" in params:
        camel = params.pop("beforeId")
        if params.get("before_id", camel) != camel:
            raise errors.InvalidQuery(
                "Query parameters 'before_id' and 'beforeId' are the same "
                "parameter and were sent with different values",
                details={"parameter": "beforeId"},
            )
        params["before_id"] = camel
    raw_limit = params.get("limit")
    limit = DEFAULT_LIMIT
    if raw_limit is not None:
        text = raw_limit.strip()
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LIMIT:
            raise errors.InvalidQuery(
                f"Query parameter 'limit' must be an integer from 1 to {MAX_LIMIT}, "
                f"got '{raw_limit}'",
                details={"parameter": "limit"},
            )
        limit = int(text)
    before_id = params.get("before_id")
    if before_id is not None and not ids.is_valid(before_id, prefix):
        raise errors.InvalidQuery(
            f"Query parameter 'before_id' must be an id of the form '{prefix}_…', "
            f"got '{before_id}'",
            details={"parameter": "before_id"},
        )
    return limit, before_id


def page(
    c: Ctx,
    path: str,
    items_key: str,
    items: List[Dict[str, Any]],
    more: bool,
    limit: int,
    cursor: Optional[str] = None,
    extra: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """A list body: the items, the list's ``uri`` and ``next_page_uri`` (null on the last page).

    The next page starts before ``cursor`` (default: the last item returned); ``extra`` are
    query parameters the next page repeats (``filter``)."""
    uri = c.uri(path)
    next_page = None
    cursor = cursor or (items[-1]["id"] if items else None)
    if more and cursor:
        query = {"before_id": cursor, "limit": limit, **(extra or {})}
        # %20, not "+", for spaces: API Gateway does not read "+" in a query as a space.
        next_page = f"{uri}?{urlencode(query, quote_via=quote)}"
    return {items_key: items, "uri": uri, "next_page_uri": next_page}


def created(resource: Dict[str, Any]) -> Response:
    return Response(body=resource, status_code=201)


def no_content() -> Response:
    # An empty string, never None: None is sent as "null" and corrupts keep-alive connections.
    return Response(body="", status_code=204, headers={"Content-Type": "application/json"})


def method_not_allowed(allowed: List[str]) -> Callable[..., Response]:
    """A view for a path's unsupported methods, so every gateway answers 405 the same way."""

    def refuse(**_: Any) -> Response:
        raise errors.MethodNotAllowed(
            f"Method {request().method} is not allowed here; allowed: {', '.join(allowed)}"
        )

    return view(refuse)


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def add_method_not_allowed_routes(app: Chalice) -> None:
    """Register a 405 view for every method a known path does not serve.

    API Gateway answers an unrouted method like an unknown path (403 "Missing Authentication
    Token"); routing those methods to a view gives the contract's 405 on every gateway.
    Called once, after every real route is registered.
    """
    for path, by_method in list(app.routes.items()):
        missing = [m for m in HTTP_METHODS if m not in by_method]
        if not missing:
            continue
        allowed = sorted(by_method)
        name = "method_not_allowed_" + "".join(c if c.isalnum() else "_" for c in path)
        app.route(path, methods=missing, content_types=["*/*"], name=name)(
            method_not_allowed(allowed)
        )


def rendered_page(
    c: Ctx,
    collection: str,
    limit: int,
    before_id: Optional[str],
    render: Callable[[Ctx, Any], Dict[str, Any]],
) -> Tuple[List[Dict[str, Any]], bool]:
    """One newest-first page of the caller's ``collection``, each item rendered."""
    items, more = store.query_page(store.collection_pk(c.account_id, collection), limit, before_id)
    return [render(c, item) for item in items], more


def updated(
    c: Ctx,
    collection: str,
    prefix: str,
    item_id: str,
    fields: Dict[str, Any],
    what: str,
    render: Callable[[Ctx, Any], Dict[str, Any]],
) -> Dict[str, Any]:
    """PATCH of plain fields of the caller's item: one UpdateItem of the sent fields (none
    sent: the item as stored, one GetItem), rendered. Absent, or an id that is not one of
    ``prefix``'s: 404 "No <what> with id '…' exists"."""
    if not fields:
        return render(c, store.get_by_id(c.account_id, collection, prefix, item_id, what))
    missing = errors.NotFound(f"No {what} with id '{item_id}' exists")
    if not ids.is_valid(item_id, prefix):
        raise missing
    return render(
        c,
        store.write(
            store.set_fields(
                store.collection_pk(c.account_id, collection), item_id, fields, missing=missing
            )
        ),
    )


def resource_fields(c: Ctx, path: str, item: Any) -> Dict[str, Any]:
    """The fields every described resource starts with: id, uri, created_at, description,
    metadata (``""`` when never set)."""
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{path}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
    }
