"""Endpoints: ``/endpoints``.

Two kinds live in the account's ``endpoint`` collection (chalicelib.core.online):

- **agent endpoints** (``type: "agent"``): written by the edge when an agent binds, shown
  while its tunnel session is live, gone when the session ends; PATCH of one is a 400 (its
  agent manages it); DELETE stops it: its agent gets a StopTunnel (:func:`stop_agent_endpoint`);
- **cloud endpoints** (``type: "cloud"``): created, changed and deleted through this API
  (``POST``, ``PATCH``, ``DELETE``; rules and store calls in chalicelib.cloud_endpoints), no
  session (``owner`` unset): always live; served by the edge with their traffic policy and
  no agent.

Agents may also bind **internal** endpoints (``https://<name>.internal``, ``bindings:
["internal"]``), and cloud endpoints may be internal too: listed like the others, reachable
only through a ``forward-internal`` action of an endpoint of the same account.

Fields, as the hosted API and its official clients read them: id, region, created_at,
updated_at, public_url, proto, scheme, hostport, host, port, type, metadata, description,
domain (Ref to the reserved domain served, or null), tcp_addr (Ref, or null), tunnel (Ref),
edge (null), upstream_url (what the agent forwards to), upstream_protocol, url, principal
(Ref to the user or bot owning the session's credential; for a cloud endpoint the API key's
principal that created it), traffic_policy, bindings, tunnel_session (Ref), uri, name,
pooling_enabled (true: the endpoint shares its URL with the other pooled endpoints on it,
agent or cloud; chalicelib.core.pooling).

Not offered (yet): the list's ``id`` / ``url`` query parameters (400 like any unknown
parameter).
"""

from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from chalicelib import cloud_endpoints as cloud
from chalicelib import validation
from chalicelib.core import errors, ids, online, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = online.ENDPOINTS
PREFIX = online.ENDPOINT_PREFIX
PATH = "/endpoints"
LIST_KEY = "endpoints"
WHAT = "endpoint"
DEFAULT_PORTS = {"https": 443, "http": 80, "tls": 443}

URL = Field("url", "string", check=cloud.check_url)
TRAFFIC_POLICY = Field("traffic_policy", "string", check=cloud.check_policy)
BINDINGS = Field("bindings", "string_list", check=cloud.check_bindings)
POOLING = Field("pooling_enabled", "boolean", check=cloud.check_pooling)
# GET /endpoints?id=…&url=… (what the official clients send; chalicelib.list_filters)
LIST_QUERY_FILTERS = {"id": "id", "url": "url"}
CREATE_FIELDS = [
    Field("url", "string", required=True, check=cloud.check_url),
    Field("type", "string", check=cloud.check_type),
    TRAFFIC_POLICY,
    DESCRIPTION,
    METADATA,
    BINDINGS,
    POOLING,
]
UPDATE_FIELDS = [URL, TRAFFIC_POLICY, DESCRIPTION, METADATA, BINDINGS, POOLING]


def _principal(c: Ctx, owner_id: Optional[str]) -> Optional[Dict[str, str]]:
    if not owner_id:
        return None
    if ids.is_valid(owner_id, ids.PREFIXES["bot_user"]):
        return c.ref("/bot_users", owner_id)
    return c.ref("/users", owner_id)


def render(c: Ctx, item: store.Item, session: Optional[store.Item]) -> Dict[str, Any]:
    data = item.data
    url = data.get("url") or data.get("public_url") or ""
    if data.get("type") == "cloud" and url:  # stored without the edge's port: shown with it
        url = cloud.public_url(url)
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
        "tcp_addr": (
            c.ref("/reserved_addrs", data["tcp_addr_id"]) if data.get("tcp_addr_id") else None
        ),
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


def list_page(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool, Optional[str]]:
    pairs, more, cursor = online.live_page(c.account_id, COLLECTION, limit, before_id)
    return [render(c, item, session) for item, session in pairs], more, cursor


def _cloud_data(c: Ctx, fields: Dict[str, Any], old: Dict[str, Any]) -> Dict[str, Any]:
    """The stored data of a cloud endpoint after ``fields`` (sent, checked) over ``old``."""
    url = fields.get("url", old.get("url"))
    if "bindings" in fields or "url" in fields:  # not sent: the URL's own binding
        bindings = cloud.resolve_bindings(url, fields.get("bindings"))
    else:
        bindings = old["bindings"]
    scheme, host = cloud.split(url)
    data = {**old, **{k: v for k, v in fields.items() if k not in ("type", "bindings")}}
    data.update(
        type="cloud",
        url=url,
        public_url=url,
        proto=scheme,
        hostname=host,
        port=urlsplit(url).port or DEFAULT_PORTS[scheme],
        bindings=bindings,
        pooling_enabled=bool(fields.get("pooling_enabled", old.get("pooling_enabled", False))),
        updated_at=validation.now_rfc3339(),
    )
    if url != old.get("url"):
        public = not cloud.is_internal(host)
        data["domain_id"] = (
            cloud.domain_of(c.account_id, host) if public and scheme != "tcp" else None
        )
        data["tcp_addr_id"] = (
            cloud.addr_of(c.account_id, url) if public and scheme == "tcp" else None
        )
    if "traffic_policy" in fields or "url" in fields:  # the phases its protocol runs
        cloud.check_policy(
            "traffic_policy", data.get("traffic_policy", ""), "tcp" if scheme == "tcp" else "http"
        )
        if scheme != "tcp" and cloud.is_internal(host):
            cloud.check_internal_policy("traffic_policy", data.get("traffic_policy", ""))
    return data


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """A cloud endpoint (rules and store calls: chalicelib.cloud_endpoints)."""
    now = validation.now_rfc3339()
    data = _cloud_data(
        c,
        fields,
        {
            "description": "",
            "metadata": "",
            "traffic_policy": "",
            "created_at": now,
            "principal_id": c.principal.id,
        },
    )
    item = cloud.create(c.account_id, online.new_endpoint_id(), data)
    return render(c, item, None)


@store.retrying
def update(c: Ctx, endpoint_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """1 GetItem + 1 TransactWriteItems (+ the reservation read of a new url's host)."""
    old = cloud.read(c.account_id, endpoint_id)
    if not fields:
        return render(c, old, None)
    return render(c, cloud.update(c.account_id, old, _cloud_data(c, fields, old.data)), None)


def delete(c: Ctx, endpoint_id: str) -> None:
    """A cloud endpoint: 1 GetItem + 1 TransactWriteItems (the endpoint and its host's claim
    together). A live agent endpoint is stopped (:func:`stop_agent_endpoint`)."""
    try:
        _delete_cloud(c.account_id, endpoint_id)
    except errors.UnsupportedOperation:  # a live agent endpoint
        stop_agent_endpoint(c, endpoint_id)


@store.retrying
def _delete_cloud(account_id: str, endpoint_id: str) -> None:
    cloud.delete(account_id, cloud.read(account_id, endpoint_id))


def stop_agent_endpoint(c: Ctx, endpoint_id: str) -> None:
    """``DELETE /endpoints/{id}`` of a live agent endpoint: the edge holding its session sends
    the agent a StopTunnel for it (the official SDKs close that one listener with the message
    and code; the session and its other endpoints stay up) and stops serving it; 204 once
    done, so the endpoint is no longer listed. Members and bots only for sessions of
    credentials they own (as POST /tunnel_sessions/{id}/stop). 404 when the session ended
    first; 409 ERR_COMMAND_NOT_ANSWERED when no edge answered in time. Store calls: the
    endpoint and its session (2 GetItem, after cloud.read's 3 found it is an agent's), the
    command (1 PutItem), then one GetItem per 0.5 s of waiting (online.await_answer)."""
    item, session = online.live_item(c.account_id, COLLECTION, PREFIX, endpoint_id, WHAT)
    if session is None or not session.instance_id:
        raise errors.NotFound(f"No {WHAT} with id '{endpoint_id}' exists")
    if session.data.get("owner_id") != c.principal.id:
        c.principal.require_admin("stop endpoints of another user's or bot's credentials")
    command = online.request_stop_endpoint(
        c.account_id, session.sk, session.instance_id, endpoint_id
    )
    answer = online.await_answer(command)
    if answer is None:
        raise errors.CommandNotAnswered(
            f"No answer about endpoint {endpoint_id} within {online.COMMAND_WAIT_SECONDS:g} s: "
            "the edge that holds its session did not take the stop (it may be down or cut off "
            "from the store). The command was withdrawn; try again."
        )
    if answer["outcome"] == "gone":
        raise errors.NotFound(f"No {WHAT} with id '{endpoint_id}' exists")
    if answer["outcome"] != "accepted":
        raise errors.CommandNotAnswered(
            f"The edge that holds endpoint {endpoint_id} took the stop too late to answer "
            f"within {online.COMMAND_WAIT_SECONDS:g} s and did not carry it out; try again."
        )
