"""The local REST API: list, create and delete tunnels.

Views are thin: read the request, call one TunnelService method, return JSON. The
``error_middleware`` is the single place that turns failures into the wire error body,
including aiohttp's own 404/405/413.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from .errors import (
    AgentError,
    BadRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    error_body,
    new_operation_id,
)
from .sdk import EdgeSession
from .tunnels import TunnelService

log = logging.getLogger(__name__)

SERVICE_KEY = web.AppKey("tunnel_service", TunnelService)
TOKEN_KEY = web.AppKey("api_token", str)
SESSION_KEY = web.AppKey("edge_session", EdgeSession)
MAX_BODY_BYTES = 256 * 1024
PUBLIC_PATHS = frozenset({"/healthz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.json_response(payload, status=status, dumps=json.dumps)


def error_response(err: AgentError, operation_id: str) -> web.Response:
    response = json_response(error_body(err, operation_id), status=err.status)
    if isinstance(err, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="tunnel-agent"'
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    operation_id = new_operation_id()
    try:
        _check_auth(request)
        return await handler(request)
    except AgentError as err:
        if err.status >= 500:
            log.error("%s %s failed [%s]: %s", request.method, request.path, operation_id, err.msg)
        return error_response(err, operation_id)
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        response = error_response(
            MethodNotAllowed(
                f"method {request.method} is not allowed on {request.path}; allowed: {allowed}"
            ),
            operation_id,
        )
        response.headers["Allow"] = ",".join(sorted(exc.allowed_methods))
        return response
    except web.HTTPNotFound:
        return error_response(NotFound(f"no such path: {request.path}"), operation_id)
    except web.HTTPRequestEntityTooLarge:
        return error_response(
            PayloadTooLarge(f"request body must be at most {MAX_BODY_BYTES} bytes"), operation_id
        )
    except web.HTTPException as exc:  # any other aiohttp status, same body shape
        err = AgentError(exc.reason or "request failed")
        err.status, err.code = exc.status, "ERR_HTTP_" + str(exc.status)
        return error_response(err, operation_id)
    except Exception:
        log.exception("%s %s crashed [%s]", request.method, request.path, operation_id)
        return error_response(AgentError("internal error"), operation_id)


def _check_auth(request: web.Request) -> None:
    token = request.app.get(TOKEN_KEY)
    if not token or request.path in PUBLIC_PATHS:
        return
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        raise Unauthorized("invalid bearer token")


async def list_tunnels(request: web.Request) -> web.Response:
    return json_response(request.app[SERVICE_KEY].list_view())


async def create_tunnel(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    body = await _json_body(request)
    tunnel = await service.create(body)
    return json_response(service.view(tunnel))


async def delete_tunnel(request: web.Request) -> web.Response:
    await request.app[SERVICE_KEY].delete(request.match_info["url_part"])
    return web.Response(status=204)


async def healthz(request: web.Request) -> web.Response:
    """200 while the SDK session is up, 503 while it is down (the SDK is reconnecting);
    ``session.error`` is the last disconnection's reason (e.g. a revoked authtoken's
    ERR_NGROK_107)."""
    service = request.app[SERVICE_KEY]
    session = request.app[SESSION_KEY].state()
    return json_response(
        {
            "status": "ok" if session["connected"] else "degraded",
            "session": session,
            "tunnels": len(service),
            "tunnels_failed": service.failed(),
        },
        status=200 if session["connected"] else 503,
    )


async def _json_body(request: web.Request) -> Any:
    """The body parsed as JSON, whatever the Content-Type (curl -d sends a form type)."""
    raw = await request.read()
    if not raw.strip():
        raise BadRequest("request body must be a JSON object, got an empty body")
    try:
        return json.loads(raw)
    except RecursionError:  # json's parser recurses per nesting level
        raise BadRequest("request body is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


def create_api_app(
    service: TunnelService, session: EdgeSession, api_token: str | None = None
) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[SERVICE_KEY] = service
    app[SESSION_KEY] = session
    if api_token:
        app[TOKEN_KEY] = api_token
    app.router.add_get("/tunnels", list_tunnels, allow_head=False)
    app.router.add_post("/tunnels", create_tunnel)
    app.router.add_delete("/tunnels/{url_part}", delete_tunnel)
    app.router.add_get("/healthz", healthz, allow_head=False)
    return app
