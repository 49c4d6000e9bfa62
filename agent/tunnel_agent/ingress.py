"""The ingress: routes each request by ``Host`` to its tunnel's upstream and streams back.

The tunnel is looked up per request, so a deleted tunnel stops at once: the next request
(even on a kept-alive connection) gets a 404 naming the unknown host, and a response
still streaming stops at its next chunk.

Deviations from the ngrok cloud, on purpose: plain HTTP only (no TLS on the ingress);
the upstream receives ``Host: <forwards_to>`` (the original host is in
``X-Forwarded-Host``), which local dev servers that check Host expect.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any, Callable
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from .api import error_response
from .errors import (
    AgentError,
    LoopDetected,
    PolicyDenied,
    TunnelNotFound,
    UpstreamTimeout,
    UpstreamUnavailable,
    new_operation_id,
)
from .policy import Denied, build_activation, response_variables
from .tunnels import Tunnel, TunnelService

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
        "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
    )
)
HOP_HEADER = "X-Tunnel-Agent-Hop"


def host_of(request: web.Request) -> str:
    """The request's host, lower-case, without port or trailing dot."""
    host = (request.headers.get("Host") or "").strip().lower()
    if host.startswith("["):
        host = host[: host.find("]") + 1] if "]" in host else host
    elif ":" in host:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


def _strip_hop_by_hop(headers: Any) -> CIMultiDict:
    listed = {
        token.strip().lower()
        for value in headers.getall("Connection", [])
        for token in value.split(",")
    }
    return CIMultiDict(
        (k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in listed
    )


class Ingress:
    def __init__(self, service: TunnelService, upstream_timeout: float = 30.0) -> None:
        self.service = service
        self.upstream_timeout = upstream_timeout
        self.instance_id = secrets.token_hex(8)
        self._session: aiohttp.ClientSession | None = None

    async def _on_startup(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=256),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=min(10.0, self.upstream_timeout), sock_read=self.upstream_timeout
            ),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        )

    async def _on_cleanup(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        operation_id = new_operation_id()
        try:
            return await self._proxy(request)
        except AgentError as err:
            if err.status >= 500:
                log.warning("ingress %s %s [%s]: %s", request.method, request.host, operation_id, err.msg)
            return error_response(err, operation_id)

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        host = host_of(request)
        tunnel = self.service.lookup(host)
        if tunnel is None:
            raise TunnelNotFound(f"no tunnel serves host {host!r} on this agent", host=host)
        if self.instance_id in request.headers.getall(HOP_HEADER, []):
            raise LoopDetected(
                f"tunnel {tunnel.domain!r} forwards to this agent's own ingress", host=host
            )

        headers = _strip_hop_by_hop(request.headers)
        headers.popall("Host", None)
        peer = request.remote or ""
        prior = headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
        headers["X-Forwarded-Host"] = request.headers.get("Host", "")
        headers["X-Forwarded-Proto"] = request.scheme

        cached: dict[str, Any] = {}

        def request_activation() -> dict[str, Any]:
            # Built at most once per request; the response phase reuses it.
            if not cached:
                cached.update(self._activation(request, host, peer))
            return cached

        try:
            tunnel.effective.apply_request(headers, request_activation)
        except Denied as denied:
            raise PolicyDenied(
                f"request denied by traffic policy rule {denied.rule!r}",
                status=denied.status, rule=denied.rule,
            ) from None
        headers.add(HOP_HEADER, self.instance_id)

        upstream_host = tunnel.upstream_host
        if ":" in upstream_host:
            upstream_host = f"[{upstream_host}]"
        url = URL(f"http://{upstream_host}:{tunnel.upstream_port}{request.raw_path}", encoded=True)
        headers["Host"] = tunnel.forwards_to
        data = request.content if request.body_exists else None
        assert self._session is not None
        try:
            upstream = await self._session.request(
                request.method, url, headers=headers, data=data, allow_redirects=False,
            )
        except asyncio.TimeoutError:
            raise UpstreamTimeout(
                f"tunnel {tunnel.domain!r}: upstream {tunnel.forwards_to} did not answer in time",
                host=host,
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(
                f"tunnel {tunnel.domain!r}: upstream {tunnel.forwards_to} is unreachable "
                f"({type(exc).__name__}: {exc})",
                host=host,
            ) from None
        try:
            return await self._relay(request, upstream, tunnel, request_activation)
        finally:
            upstream.release()

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        tunnel: Tunnel,
        request_activation: Callable[[], dict[str, Any]],
    ) -> web.StreamResponse:
        headers = _strip_hop_by_hop(upstream.headers)

        def response_activation() -> dict[str, Any]:
            activation = dict(request_activation())
            activation["res"] = response_variables(upstream.status, upstream.headers.items())
            return activation

        tunnel.effective.apply_response(headers, response_activation)
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                if not tunnel.active:  # deleted while streaming: stop now
                    request.transport and request.transport.close()
                    return response
                await response.write(chunk)
        except ConnectionResetError:  # the client went away: nothing left to send
            return response
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("tunnel %s: upstream broke mid-response: %s", tunnel.domain, exc)
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
        return response

    @staticmethod
    def _activation(request: web.Request, host: str, peer: str) -> dict[str, Any]:
        query = request.query_string
        return build_activation(
            method=request.method,
            url=f"{request.scheme}://{request.headers.get('Host', host)}{request.raw_path}",
            path=request.path,
            query=query,
            query_params={k: v for k, v in parse_qs(query, keep_blank_values=True).items()},
            host=host,
            headers=request.headers.items(),
            client_ip=peer,
        )
