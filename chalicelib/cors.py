"""CORS for the dashboard's origin, and for no other (``DASHBOARD_ORIGIN``, chalicelib.core.config).

Deployed, the dashboard is a static site on its own origin that calls this API from the
browser: every response to a request whose ``Origin`` is exactly ``DASHBOARD_ORIGIN`` carries
``Access-Control-Allow-Origin`` with that origin (``Vary: Origin`` always), and a preflight
``OPTIONS`` from it (``Access-Control-Request-Method`` present) is answered 204 with the
methods and headers the dashboard sends. Any other origin gets no CORS header, so browsers
keep its pages out. Unset (the default, and `make run`, where the dashboard is on the API's
own origin): no CORS at all, and ``OPTIONS`` is a 405 as any other unrouted method.

Credentials are never allowed (``Access-Control-Allow-Credentials`` is not sent): the
dashboard authenticates with the ``Authorization`` header, not cookies.

Installed before chalicelib.web's middleware, so it is the outer one: a preflight is answered
before the version-header check, and errors answered by chalicelib.web get the header too.
"""

from typing import Callable, Dict

from chalice import Chalice, Response
from chalice.app import Request

from chalicelib import web
from chalicelib.core import errors
from chalicelib.core.config import get_settings

ALLOW_METHODS = "GET, POST, PUT, PATCH, DELETE"
ALLOW_HEADERS = (
    "Authorization, Content-Type, Ngrok-Version, Service-Version, Service-Client, Idempotency-Key"
)
EXPOSE_HEADERS = "Operation-Id, Retry-After"
MAX_AGE = "600"


def _origin(event: Request) -> str:
    allowed = get_settings().dashboard_origin
    origin = (event.headers or {}).get("origin") or ""
    return origin if allowed and origin == allowed else ""


def cors_headers(origin: str) -> Dict[str, str]:
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Expose-Headers": EXPOSE_HEADERS,
        "Vary": "Origin",
    }


def _middleware(event: Request, get_response: Callable[[Request], Response]) -> Response:
    origin = _origin(event)
    if event.method == "OPTIONS":
        if origin and (event.headers or {}).get("access-control-request-method"):
            return Response(
                body="",
                status_code=204,
                headers={
                    **cors_headers(origin),
                    "Access-Control-Allow-Methods": ALLOW_METHODS,
                    "Access-Control-Allow-Headers": ALLOW_HEADERS,
                    "Access-Control-Max-Age": MAX_AGE,
                    "Content-Type": "application/json",
                },
            )
    response = get_response(event)
    response.headers["Vary"] = "Origin"
    if origin:
        response.headers.update(cors_headers(origin))
    return response


def install(app: Chalice) -> None:
    """Before chalicelib.web.install: the outer middleware."""
    app.register_middleware(_middleware, "http")


def add_preflight_routes(app: Chalice) -> None:
    """An OPTIONS route (no authorizer: browsers send no credentials in a preflight) on every
    path; the middleware answers a preflight of the dashboard's origin, anything else is 405.
    Called once, after every real route is registered."""
    for path, by_method in list(app.routes.items()):
        if "OPTIONS" in by_method:
            continue
        allowed = sorted(by_method)
        # a 405 view to every other reader (chalicelib.openapi, the tests): the same prefix
        name = "method_not_allowed_options_" + "".join(c if c.isalnum() else "_" for c in path)

        # web.view carries the error to chalicelib.web's middleware, which answers it (405);
        # raised bare, Chalice would render it as its own 500.
        @web.view
        def view(_allowed=allowed, **_):
            raise errors.MethodNotAllowed(
                f"Method OPTIONS is not allowed here; allowed: {', '.join(_allowed)}"
            )

        app.route(path, methods=["OPTIONS"], content_types=["*/*"], name=name)(view)
