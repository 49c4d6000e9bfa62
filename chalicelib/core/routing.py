"""Where a request goes: the legacy edges a hostport belongs to, their routes, and the backends
those name. The edge reads these for each connection; the API's resource modules
(``chalicelib.https_edges``, ``chalicelib.tcp_edges``, ``chalicelib.backends``) write them.

Keys: a hostport (``host:port``) is a uniqueness item ``(HOSTPORT_NAMESPACE, hostport)`` naming
its edge (``kind``: ``https_edge`` or ``tcp_edge``); an HTTPS edge's routes follow it in its
account's partition (sort keys ``<edge id>#<route id>``); a TCP edge's hostport item carries a
copy of what the edge needs.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import ids, store

HOSTPORT_NAMESPACE = "hostport"
HTTPS_EDGE_COLLECTION = "https_edge"
TCP_EDGE_COLLECTION = "tcp_edge"
TLS_EDGE_COLLECTION = "tls_edge"
HTTPS_EDGE_MODULES = ("tls_termination", "mutual_tls")
ROUTE_MODULES = (
    "backend",
    "ip_restriction",
    "user_agent_filter",
    "request_headers",
    "response_headers",
    "traffic_policy",
    # policy actions here (chalicelib.core.route_modules), or the WebSocket converter
    "circuit_breaker",
    "compression",
    "oauth",
    "oidc",
    "webhook_verification",
    "websocket_tcp_converter",
)
TCP_EDGE_MODULES = ("backend", "ip_restriction", "traffic_policy")
TCP_COPY_FIELDS = ("hostports",) + TCP_EDGE_MODULES
TLS_EDGE_MODULES = ("backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy")
DEFAULT_RESPONSE_STATUS = 200


# ---- edges -----------------------------------------------------------------------------------
def _route_order(route: Dict[str, Any]) -> Tuple[int, int, str]:
    return (0 if route["match_type"] == "exact_path" else 1, -len(route["match"]), route["id"])


def https_edge_for_hostport(
    hostport: str,
) -> Optional[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
    """The HTTPS edge serving ``hostport`` (canonical ``host:port``, lower-case) and its
    routes, or None when no HTTPS edge serves it. One GetItem (the hostport's uniqueness item:
    account and edge) and one Query (the edge with its routes, which follow it in its
    partition).

    The edge dict: ``{"id", "account_id", "hostports", "tls_termination", "mutual_tls",
    "description", "metadata", "created_at"}``, modules in their stored form or None:
    ``tls_termination {"enabled", "min_version": "1.0".."1.3" | None}``, ``mutual_tls
    {"enabled", "certificate_authority_ids": [ca_…]}`` (PEMs:
    :func:`chalicelib.core.certs.pems_by_id`).

    Routes, in match order (every ``exact_path`` first, then ``path_prefix`` by longest
    ``match`` first): ``{"id", "edge_id", "match_type", "match", "backend",
    "ip_restriction", "user_agent_filter", "request_headers", "response_headers",
    "traffic_policy", ...}``, each module None or its stored form: ``backend {"enabled",
    "backend_id"}`` (act on it with :func:`resolve_backend`), ``ip_restriction
    {"enabled", "ip_policy_ids"}`` (:func:`chalicelib.core.ip_rules.rules_of`),
    ``user_agent_filter {"enabled", "allow", "deny"}``, ``request_headers``/
    ``response_headers {"enabled", "add": {name: value}, "remove": [name]}``,
    ``traffic_policy {"enabled", "value": JSON or YAML text}``.
    """
    owner = store.get(store.unique_pk(HOSTPORT_NAMESPACE, hostport), store.UNIQUE_SK)
    if owner is None or owner.data.get("kind") != HTTPS_EDGE_COLLECTION:
        return None
    account_id, edge_id = owner.data["account_id"], owner.data["edge_id"]
    if not ids.is_valid(edge_id, ids.PREFIXES["https_edge"]):
        return None
    model = store.model()
    items = list(
        model.query(
            store.collection_pk(account_id, HTTPS_EDGE_COLLECTION),
            model.sk.between(edge_id, edge_id + "$"),
            consistent_read=True,
        )
    )
    if not items or items[0].sk != edge_id:
        return None
    edge = {
        "id": edge_id,
        "account_id": account_id,
        **{k: v for k, v in items[0].data.items() if k != "hostport_refs"},
    }
    for name in HTTPS_EDGE_MODULES:
        edge.setdefault(name, None)
    routes = []
    for route in items[1:]:
        plain = {"id": route.sk.rpartition("#")[2], **route.data}
        for name in ROUTE_MODULES:
            plain.setdefault(name, None)
        routes.append(plain)
    routes.sort(key=_route_order)
    return edge, routes


def tcp_edge_for_hostport(hostport: str) -> Optional[Dict[str, Any]]:
    """The TCP edge serving ``hostport`` (canonical ``host:port``), or None. One GetItem: the
    hostport's uniqueness item carries a copy of what the edge needs.

    ``{"id", "account_id", "hostports", "backend", "ip_restriction", "traffic_policy"}``;
    modules None or their stored form: ``backend {"enabled", "backend_id"}``
    (:func:`resolve_backend`), ``ip_restriction {"enabled", "ip_policy_ids"}``
    (:func:`chalicelib.core.ip_rules.rules_of`), ``traffic_policy {"enabled", "value"}``.
    """
    owner = store.get(store.unique_pk(HOSTPORT_NAMESPACE, hostport), store.UNIQUE_SK)
    if owner is None or owner.data.get("kind") != TCP_EDGE_COLLECTION:
        return None
    account_id, edge_id = owner.data["account_id"], owner.data["edge_id"]
    data = owner.data.get("edge")
    if data is None:  # claimed before hostport items carried the edge
        item = store.get(store.collection_pk(account_id, TCP_EDGE_COLLECTION), edge_id)
        if item is None:
            return None
        data = {k: item.data.get(k) for k in TCP_COPY_FIELDS}
    edge = {"id": edge_id, "account_id": account_id, **data}
    for name in TCP_EDGE_MODULES:
        edge.setdefault(name, None)
    return edge


def tls_index() -> Dict[str, Dict[str, Any]]:
    """Hostport → what its HTTPS edge's TLS modules ask of the handshake, for every hostport
    whose edge has an enabled ``tls_termination`` with a ``min_version`` or an enabled
    ``mutual_tls``: ``{"account_id", "edge_id", "min_version"?, "certificate_authority_ids"?}``
    (:func:`chalicelib.edge_modules.tls_of`). One Query of the index partition (paged past
    1 MB): the edge reads it in the background, never during a handshake."""
    return {item.sk: dict(item.data or {}) for item in store.query_all(store.EDGE_TLS_PK)}


def tls_edges() -> Dict[str, Dict[str, Any]]:
    """Hostport → the TLS edge serving it, for every hostport of every TLS edge: ``{"id",
    "account_id", "hostports", "backend", "ip_restriction", "mutual_tls", "tls_termination",
    "traffic_policy"}``, modules None or their stored form (``tls_termination {"enabled",
    "terminate_at": "edge" | "upstream", "min_version"}``, ``mutual_tls {"enabled",
    "certificate_authority_ids"}``, the others as a TCP edge's). One Query of the index
    partition the TLS edges' transactions keep (chalicelib.tls_edges): the edge's TLS listener
    reads it in the background, never during a handshake."""
    found: Dict[str, Dict[str, Any]] = {}
    for item in store.query_all(store.TLS_EDGE_PK):
        data = dict(item.data or {})
        edge = {"id": data.get("edge_id", ""), "account_id": data.get("account_id", "")}
        edge.update(data.get("edge") or {})
        for name in TLS_EDGE_MODULES:
            edge.setdefault(name, None)
        found[item.sk] = edge
    return found


# ---- backends --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    name: str  # "http_response" | "tunnel_group" | "failover" | "weighted"
    collection: str
    prefix: str
    path: str
    what: str


HTTP_RESPONSE = Kind(
    "http_response",
    "http_response_backend",
    ids.PREFIXES["http_response_backend"],
    "/backends/http_response",
    "HTTP response backend",
)


TUNNEL_GROUP = Kind(
    "tunnel_group",
    "tunnel_group_backend",
    ids.PREFIXES["tunnel_group_backend"],
    "/backends/tunnel_group",
    "tunnel group backend",
)


FAILOVER = Kind(
    "failover",
    "failover_backend",
    ids.PREFIXES["failover_backend"],
    "/backends/failover",
    "failover backend",
)


WEIGHTED = Kind(
    "weighted",
    "weighted_backend",
    ids.PREFIXES["weighted_backend"],
    "/backends/weighted",
    "weighted backend",
)


STATIC = Kind(
    "static",
    "static_backend",
    ids.PREFIXES["static_backend"],
    "/backends/static",
    "static backend",
)


KINDS = {kind.prefix: kind for kind in (HTTP_RESPONSE, TUNNEL_GROUP, FAILOVER, WEIGHTED, STATIC)}


MEMBER_KINDS = (HTTP_RESPONSE, TUNNEL_GROUP, STATIC)


def kind_of(backend_id: Any) -> Optional[Kind]:
    """The kind of a well-formed backend id (by its prefix), else None."""
    if not isinstance(backend_id, str):
        return None
    kind = KINDS.get(backend_id.split("_", 1)[0])
    return kind if kind and ids.is_valid(backend_id, kind.prefix) else None


# ---- one composite resource, three kinds --------------------------------------------------------
def members(kind: Kind, data: Dict[str, Any]) -> Counter:
    """(collection, id) of every backend this one refers to."""
    counts: Counter = Counter()
    if kind is FAILOVER:
        members = data.get("backends") or []
    elif kind is WEIGHTED:
        members = list(data.get("backends") or {})
    else:
        members = []
    for member in members:
        member_kind = kind_of(member)
        if member_kind is not None:
            counts[(member_kind.collection, member)] += 1
    return counts


# ---- the edge's read --------------------------------------------------------------------------
def plain(kind: Kind, item: store.Item, children: Dict[str, store.Item]) -> Dict[str, Any]:
    data = item.data
    if kind is HTTP_RESPONSE:
        return {
            "kind": kind.name,
            "id": item.sk,
            "status_code": data.get("status_code", DEFAULT_RESPONSE_STATUS),
            "headers": dict(data.get("headers") or {}),
            "body": data.get("body", ""),
        }
    if kind is TUNNEL_GROUP:
        return {"kind": kind.name, "id": item.sk, "labels": dict(data.get("labels") or {})}
    if kind is STATIC:
        tls = data.get("tls") or {}
        return {
            "kind": kind.name,
            "id": item.sk,
            "address": data.get("address", ""),
            "tls": bool(tls.get("enabled")),
        }

    def child(backend_id: str) -> Optional[Dict[str, Any]]:
        found = children.get(backend_id)
        member_kind = kind_of(backend_id)
        return None if found is None or member_kind is None else plain(member_kind, found, {})

    if kind is FAILOVER:
        members = [child(b) for b in data.get("backends") or []]
        return {"kind": kind.name, "id": item.sk, "backends": [m for m in members if m]}
    weighted = []
    for backend_id, weight in (data.get("backends") or {}).items():
        member = child(backend_id)
        if member is not None:
            weighted.append({"weight": weight, "backend": member})
    return {"kind": kind.name, "id": item.sk, "backends": weighted}


def resolve_backend(account_id: str, backend_id: str) -> Optional[Dict[str, Any]]:
    """What the edge needs to send traffic to ``backend_id``, as a plain dict, or None when
    it does not exist (in this account). Shapes, by ``kind``:

    - ``{"kind": "http_response", "id", "status_code": int, "headers": {name: value},
      "body": str}`` — the edge answers itself;
    - ``{"kind": "tunnel_group", "id", "labels": {key: value}}`` — the online tunnels of the
      account whose labels include all of these;
    - ``{"kind": "static", "id", "address": "host:port", "tls": bool}`` — the edge forwards
      to that address itself (edge/static.py);
    - ``{"kind": "failover", "id", "backends": [member, ...]}`` — members in order, each a
      tunnel_group, http_response or static dict as above; the first that can serve serves;
    - ``{"kind": "weighted", "id", "backends": [{"weight": int, "backend": member}, ...]}``.

    Cost: one GetItem, plus one BatchGetItem of the members for failover and weighted (no
    nesting, so never more). Members deleted meanwhile are left out.
    """
    kind = kind_of(backend_id)
    if kind is None:
        return None
    item = store.get(store.collection_pk(account_id, kind.collection), backend_id)
    if item is None:
        return None
    children: Dict[str, store.Item] = {}
    wanted = members(kind, item.data)
    if wanted:
        keys = [
            (store.collection_pk(account_id, collection), member_id)
            for collection, member_id in wanted
        ]
        for found in store.model().batch_get(keys, consistent_read=True):
            children[found.sk] = found
    return plain(kind, item, children)
