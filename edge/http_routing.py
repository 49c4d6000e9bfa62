"""Where an HTTP request goes: the first room of the HTTP front (edge/public.py).

``route`` answers what never reaches an endpoint (a banned name: 403; an ACME HTTP-01
validation: the key authorization; a name whose TLS settings another handshake met: 421; a
name nothing serves: 404 endpoint offline, or the router's own refusal) and otherwise returns
the :class:`Route`: the agent endpoint on this instance (``Registry.http_tunnel``), else what
the router finds in the store (a cloud endpoint, an HTTPS edge's route, a fixed response).
"""

from dataclasses import dataclass
from typing import Any, Optional

from chalicelib.core import edge_errors
from edge import challenges, http1, ip_restrictions, pools
from edge.edges import Hop
from edge.http_io import answer
from edge.tls import MISDIRECTED

# A hostname an abuse report bans: the hosted code for a banned name, 403.
BANNED = (
    edge_errors.HOST_BANNED,
    "This hostname has been banned for violating the terms of "
    "service. If you own it and believe this is a mistake, contact the "
    "operator of this service.",
)


@dataclass
class Route:
    """The endpoint a request goes to and what applies there."""

    tunnel: Any  # the agent tunnel that serves it (None: answered at the edge)
    fixed: Any  # an http_response backend's answer (a dict), else None
    enforcement: Any  # its traffic policy (edges.Enforcement), or None
    endpoint: Hop  # the endpoint as the policy sees it
    cloud: bool  # a cloud endpoint: its policy must answer, there is no upstream
    account_id: str
    ws_tcp: bool = False  # an HTTPS edge route's websocket_tcp_converter (edge/wstcp.py)
    named: bool = False  # routed by the router from the store (a cloud endpoint, an edge, a pool)


async def route(
    edge: Any, scheme: str, client: Any, writer: Any, request: http1.Request, host: str
) -> Optional[Route]:
    """The request's route, or None when the edge answered it (the connection then ends):
    also when the account's ``endpoints`` IP restrictions refuse the client (403)."""
    found = await _route(edge, scheme, client, writer, request, host)
    if found is None:
        return None
    peer = writer.get_extra_info("peername") or ("", 0)
    if not await ip_restrictions.allows(
        edge, found.account_id, ip_restrictions.ENDPOINTS, str(peer[0])
    ):
        await answer(client, writer, *IP_RESTRICTED, close=True)
        return None
    return found


IP_RESTRICTED = ip_restrictions.REFUSED_ANSWER


async def _route(
    edge: Any, scheme: str, client: Any, writer: Any, request: http1.Request, host: str
) -> Optional[Route]:
    if host in edge.banned:  # an abuse report banned it (docs/SECURITY.md)
        await answer(client, writer, 403, BANNED[0], BANNED[1], close=True)
        return None
    if scheme == "http" and await challenges.answer_http01(
        edge, client, writer, request, host
    ):  # ACME HTTP-01 (edge/challenges.py)
        return None
    refused = edge.tls.misdirected(getattr(writer, "tls_spec", None), host)
    if refused is not None:  # a name's TLS settings met by another handshake
        await answer(client, writer, *MISDIRECTED, refused, close=True)
        return None
    pooled = await pools.routed(  # a pool with cloud members (edge/pools.py)
        edge, host, scheme, getattr(writer, "relayed", False)
    )
    tunnel = edge.registry.http_tunnel(host, scheme) if pooled is None else None
    if tunnel is not None:
        return Route(
            tunnel, None, tunnel.enforcement, Hop.of_tunnel(tunnel), False, tunnel.account_id
        )
    # not an agent endpoint: a cloud endpoint, an HTTPS edge's hostport?
    routed: Any = (
        pooled
        if pooled is not None
        else await edge.router.route_http(host, request.target, scheme)
    )
    if routed is None or routed.error is not None:
        status, code, msg = (
            routed.error
            if routed is not None
            else (404, edge_errors.ENDPOINT_OFFLINE, f"The endpoint {scheme}://{host} is offline.")
        )
        await answer(client, writer, status, code, msg, close=True)
        return None
    return Route(
        routed.tunnel,
        routed.fixed,
        routed.enforcement,
        routed.hop,
        routed.cloud,
        routed.account_id,
        getattr(routed, "ws_tcp", False),
        True,
    )
