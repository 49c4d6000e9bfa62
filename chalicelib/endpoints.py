"""Endpoints: ``/endpoints``.

Today every endpoint is an **agent endpoint** (``type: "agent"``, the hosted service's name
for endpoints an agent or SDK starts): written by the edge when an agent binds, shown while
its tunnel session is live (chalicelib.online), gone when the session ends. Cloud endpoints
(``type: "cloud"``, created through this API) will live in the same collection: an item
without a session (``owner`` unset) is always live, and :func:`render` reads the fields both
kinds share from the item's data.

Fields, as the hosted API and its official clients read them: id, region, created_at,
updated_at, public_url, proto, scheme, hostport, host, port, type, metadata, description,
domain (Ref to the reserved domain served, or null), tcp_addr (Ref, or null), tunnel (Ref),
edge (null), upstream_url (what the agent forwards to), upstream_protocol, url, principal
(Ref to the user or bot owning the session's credential), traffic_policy, bindings
(``["public"]``), tunnel_session (Ref), uri, name, pooling_enabled (false: one endpoint per
URL, service-wide).

Not offered (yet): the list's ``id`` / ``url`` / ``filter`` query parameters (400 like any
unknown parameter).
"""
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from chalicelib import ids, online, store
from chalicelib.web import Ctx

COLLECTION = online.ENDPOINTS
PREFIX = online.ENDPOINT_PREFIX
PATH = "/endpoints"
LIST_KEY = "endpoints"
WHAT = "endpoint"
DEFAULT_PORTS = {"https": 443, "http": 80, "tls": 443}


def _principal(c: Ctx, owner_id: Optional[str]) -> Optional[Dict[str, str]]:
    if not owner_id:
        return None
    if ids.is_valid(owner_id, ids.PREFIXES["bot_user"]):
        return c.ref("/bot_users", owner_id)
    return c.ref("/users", owner_id)


def render(c: Ctx, item: store.Item, session: Optional[store.Item]) -> Dict[str, Any]:
    data = item.data
    url = data.get("url") or data.get("public_url") or ""
    parts = urlsplit(url)
    scheme = parts.scheme
    host = parts.hostname or data.get("hostname") or ""
    try:
        port = parts.port or data.get("port") or DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = data.get("port")
    session_data = session.data if session is not None else {}
    session_id = data.get("session_id")
    tunnel_id = data.get("tunnel_id")
    return {
        "id": item.sk,
        "region": session_data.get("region", data.get("region", "")),
        "created_at": data.get("created_at"),
        "updated_at": data.get("updated_at") or data.get("created_at"),
        "public_url": url,
        "proto": data.get("proto") or scheme,
        "scheme": scheme,
        "hostport": f"{host}:{port}" if host and port else host,
        "host": host,
        "port": port,
        "type": data.get("type", "agent"),
        "metadata": data.get("metadata", ""),
        "description": data.get("description", ""),
        "domain": c.ref("/reserved_domains", data["domain_id"]) if data.get("domain_id") else None,
        "tcp_addr": (c.ref("/reserved_addrs", data["tcp_addr_id"])
                     if data.get("tcp_addr_id") else None),
        "tunnel": c.ref("/tunnels", tunnel_id) if tunnel_id else None,
        "edge": None,
        "upstream_url": data.get("forwards_to", ""),
        "upstream_protocol": data.get("upstream_protocol", ""),
        "url": url,
        "principal": _principal(c, session_data.get("owner_id") or data.get("principal_id")),
        "traffic_policy": data.get("traffic_policy", ""),
        "bindings": list(data.get("bindings") or ["public"]),
        "tunnel_session": c.ref("/tunnel_sessions", session_id) if session_id else None,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "name": data.get("name", ""),
        "pooling_enabled": bool(data.get("pooling_enabled", False)),
    }


def get(c: Ctx, endpoint_id: str) -> Dict[str, Any]:
    return render(c, *online.live_item(c.account_id, COLLECTION, PREFIX, endpoint_id, WHAT))


def list_page(c: Ctx, limit: int, before_id: Optional[str]
              ) -> Tuple[List[Dict[str, Any]], bool, Optional[str]]:
    pairs, more, cursor = online.live_page(c.account_id, COLLECTION, limit, before_id)
    return [render(c, item, session) for item, session in pairs], more, cursor
