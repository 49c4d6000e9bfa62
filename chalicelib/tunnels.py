"""Online tunnels: ``/tunnels`` (read-only, written by the edge).

Fields, as the hosted API and its official clients read them: id, public_url, started_at,
metadata, proto, region, tunnel_session (Ref), endpoint (Ref to the agent endpoint, null for
a labeled tunnel), labels (null for a tunnel that is not labeled), backends (always ``[]``:
tunnel-group backends are not yet a resource here), forwards_to.

A tunnel is shown while its session is live (chalicelib.core.online); otherwise it is a 404 like
an unknown id.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import online, store
from chalicelib.web import Ctx

COLLECTION = online.TUNNELS
PREFIX = online.TUNNEL_PREFIX
PATH = "/tunnels"
LIST_KEY = "tunnels"
WHAT = "tunnel"


def render(c: Ctx, item: store.Item, session: Optional[store.Item]) -> Dict[str, Any]:
    data = item.data
    endpoint_id = data.get("endpoint_id")
    return {
        "id": item.sk,
        "public_url": data.get("public_url", ""),
        "started_at": data.get("started_at"),
        "metadata": data.get("metadata", ""),
        "proto": data.get("proto", ""),
        "region": session.data.get("region", "") if session is not None else "",
        "tunnel_session": c.ref("/tunnel_sessions", data["session_id"]),
        "endpoint": c.ref("/endpoints", endpoint_id) if endpoint_id else None,
        "labels": data.get("labels") or None,
        "backends": [],
        "forwards_to": data.get("forwards_to", ""),
    }


def get(c: Ctx, tunnel_id: str) -> Dict[str, Any]:
    return render(c, *online.live_item(c.account_id, COLLECTION, PREFIX, tunnel_id, WHAT))


def list_page(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool, Optional[str]]:
    pairs, more, cursor = online.live_page(c.account_id, COLLECTION, limit, before_id)
    return [render(c, item, session) for item, session in pairs], more, cursor
