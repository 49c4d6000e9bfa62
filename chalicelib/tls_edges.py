"""TLS edges: ``/edges/tls`` and their modules ``/edges/tls/{id}/backend|ip_restriction|
mutual_tls|tls_termination|traffic_policy``, served by SNI on the edge's TLS listener
(edge/passthrough.py).

Fields: id, uri, created_at, description, metadata, hostports (null when none), backend,
ip_restriction, mutual_tls, tls_termination, traffic_policy (each null when unset), policy
(always null, as for TCP edges: the TypeScript client's older shape, stored as
traffic_policy).

Rules (where the hosted docs are silent, decided here):
- Hostports follow :mod:`chalicelib.edge_modules` with the HTTPS edges' ownership rule (a
  name the account reserved, exactly or under a wildcard, or a free name under the base
  domain); the service's TCP address host is a 400 ERR_NGROK_7133 (the hosted words).
  They share one namespace with HTTPS and TCP edges' hostports (409 when taken): an HTTPS
  edge and a TLS edge cannot both serve ``name:443``. Only ``:443`` hostports are served
  (the edge's one TLS listener, whatever port it listens on behind a load balancer).
- backend, ip_restriction, traffic_policy: as a TCP edge's (the policy runs
  ``on_tcp_connect`` only: a TLS edge has no HTTP phases); the backend carries connections
  to tunnel groups (directly or as failover/weighted members).
- tls_termination ``{enabled, terminate_at, min_version}``: ``terminate_at`` is ``edge``
  (the default when absent: a module present asks for termination) or ``upstream``
  (passthrough, as with no module); ``min_version`` one of 1.0–1.3 (1.0 and 1.1 mean 1.2 on
  the wire, as for HTTPS edges), and must be null with ``upstream``.
- mutual_tls ``{enabled, certificate_authority_ids}``: as an HTTPS edge's; it needs an
  enabled tls_termination at the edge (400 ERR_NGROK_1694: "Mutual TLS at edge requires TLS
  termination at edge"), checked on every write of the edge, also when the tls_termination
  module is deleted or disabled under it.
- On traffic the modules are one policy (edge.edges): ip_restriction as ``restrict-ips``,
  tls_termination and mutual_tls as the ``terminate-tls`` action, then the traffic_policy's
  rules, all in ``on_tcp_connect``.
- Create, PATCH and module sub-resources behave as a TCP edge's (chalicelib.tcp_edges).

Store calls: create 1 (a transaction: the edge, hostport claims, the edge's copies for the
TLS listener, reference counters; claiming a hostport first reads its reservation); get 1;
list 1 Query; PATCH of description or metadata 1 UpdateItem; any other PATCH, module PUT or
DELETE: GetItem + transaction; delete: GetItem + transaction.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import edge_modules, https_edges, tcp_edges, traffic_policy, validation, web
from chalicelib.core import errors, ids, routing, store
from chalicelib.edge_modules import HOSTPORTS
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = routing.TLS_EDGE_COLLECTION
PREFIX = ids.PREFIXES["tls_edge"]
PATH = "/edges/tls"
LIST_KEY = "tls_edges"
MODULES = routing.TLS_EDGE_MODULES
TERMINATE_AT = ("edge", "upstream")


def _check_terminate_at(name: str, value: str) -> str:
    if value not in TERMINATE_AT:
        raise errors.InvalidField(
            f"Field '{name}' must be 'edge' or 'upstream', got '{value[:16]}'",
            details={"field": name},
        )
    return value


TLS_FIELDS = [
    edge_modules.ENABLED,
    Field("terminate_at", "string", max_bytes=16, check=_check_terminate_at),
    Field("min_version", "string", max_bytes=16, check=https_edges.check_min_version),
]
TRAFFIC_POLICY_FIELDS = [
    edge_modules.ENABLED,
    Field(
        "value",
        "string",
        required=True,
        check=lambda n, v: traffic_policy.check_document(n, v, protocol="tls"),
    ),
]


def parse_tls_termination(field: Optional[str], value: Any) -> Dict[str, Any]:
    module = edge_modules.parse_module(
        field, value, TLS_FIELDS, terminate_at="edge", min_version=None
    )
    if module["terminate_at"] == "upstream" and module["min_version"] is not None:
        name = f"{field}.min_version" if field else "min_version"
        raise errors.InvalidField(
            f"Field '{name}' must be null when terminate_at is 'upstream' (the upstream "
            "makes the handshake)",
            details={"field": name},
        )
    return module


def parse_traffic_policy(field: Optional[str], value: Any) -> Dict[str, Any]:
    return edge_modules.parse_module(field, value, TRAFFIC_POLICY_FIELDS)


PARSERS = {
    "backend": edge_modules.parse_backend,
    "ip_restriction": edge_modules.parse_ip_restriction,
    "mutual_tls": https_edges.parse_mutual_tls,
    "tls_termination": parse_tls_termination,
    "traffic_policy": parse_traffic_policy,
}


def render_tls_termination(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {
        "enabled": module["enabled"],
        "terminate_at": module.get("terminate_at") or "edge",
        "min_version": module.get("min_version"),
    }


RENDERERS = {
    "backend": edge_modules.render_backend,
    "ip_restriction": edge_modules.render_ip_restriction,
    "mutual_tls": https_edges.render_mutual_tls,
    "tls_termination": render_tls_termination,
    "traffic_policy": edge_modules.render_traffic_policy,
}
assert tuple(PARSERS) == tuple(RENDERERS) == MODULES


def parse_policy(name: str, value: Any) -> Dict[str, Any]:
    """The TypeScript client's ``policy`` {enabled, inbound, outbound}: as a TCP edge's."""
    return tcp_edges.parse_policy(name, value)


FIELDS = (
    [DESCRIPTION, METADATA, HOSTPORTS]
    + [Field(name, "any", check=parse) for name, parse in PARSERS.items()]
    + [Field("policy", "any", check=parse_policy)]
)
CREATE_FIELDS = FIELDS
UPDATE_FIELDS = FIELDS


def terminates_at_edge(data: Dict[str, Any]) -> bool:
    module = data.get("tls_termination")
    return bool(
        module and module.get("enabled", True) and module.get("terminate_at", "edge") == "edge"
    )


def check_modules(data: Dict[str, Any], field: str = "mutual_tls") -> None:
    """400 when an enabled mutual_tls has no enabled tls_termination at the edge under it."""
    mtls = data.get("mutual_tls")
    if mtls and mtls.get("enabled", True) and not terminates_at_edge(data):
        raise errors.MutualTlsNeedsTermination(
            "Mutual TLS at edge requires TLS termination at edge: set tls_termination "
            "{terminate_at: 'edge'} (enabled) with mutual_tls, or remove mutual_tls first",
            details={"field": field},
        )


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    body = {
        "id": item.sk,
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "created_at": data["created_at"],
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "hostports": data.get("hostports") or None,
    }
    for name in MODULES:
        body[name] = RENDERERS[name](c, data.get(name))
    body["policy"] = None
    return body


def _fields(fields: Dict[str, Any]) -> Dict[str, Any]:
    # the TypeScript client's policy is the traffic_policy module, as for TCP edges
    return tcp_edges.policy_as_traffic_policy(fields)


@store.retrying
def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = _fields(fields)
    edge_modules.check_policy_refs(c.account_id, fields)
    edge_id = ids.new_id(PREFIX)
    data = {"description": "", "metadata": "", **fields, "created_at": validation.now_rfc3339()}
    check_modules(data)
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        edge_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit(
        [store.put_new(item)] + edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, {}, data)
    )
    return render(c, item)


def get_item(account_id: str, edge_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, edge_id, "TLS edge")


def get(c: Ctx, edge_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, edge_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


PLAIN_FIELDS = frozenset({"description", "metadata"})


def _replace(
    c: Ctx,
    edge_id: str,
    changes: Dict[str, Any],
    nested: bool = True,
    item: Optional[store.Item] = None,
) -> store.Item:
    """GetItem (unless ``item`` was just read), then one transaction: the edge, its hostport
    claims, its copies for the TLS listener and its reference counters."""
    item = item or get_item(c.account_id, edge_id)
    new = {**item.data, **changes}
    check_modules(new, "mutual_tls" if nested else next(iter(changes), "mutual_tls"))
    ops = edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, new, nested)
    item.data = new
    store.commit([store.save(item)] + ops)
    return item


def update(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = _fields(fields)
    edge_modules.check_policy_refs(c.account_id, fields)
    if not fields:
        return get(c, edge_id)
    if set(fields) <= PLAIN_FIELDS:
        missing = errors.NotFound(f"No TLS edge with id '{edge_id}' exists")
        if not ids.is_valid(edge_id, PREFIX):
            raise missing
        return render(
            c,
            store.write(
                store.set_fields(
                    store.collection_pk(c.account_id, COLLECTION), edge_id, fields, missing=missing
                )
            ),
        )
    return render(c, store.retrying(_replace)(c, edge_id, fields))


@store.retrying
def delete(c: Ctx, edge_id: str) -> None:
    item = get_item(c.account_id, edge_id)
    store.commit(
        [store.delete(item)]
        + edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, {})
    )


# ---- module sub-resources (edge_modules.EdgeModules) ----------------------------------------
def _write_module(c: Ctx, edge_id: str, name: str, module: Dict[str, Any]) -> None:
    store.retrying(_replace)(c, edge_id, {name: module}, nested=False)


@store.retrying
def _delete_module(c: Ctx, edge_id: str, name: str) -> None:
    item = get_item(c.account_id, edge_id)
    if item.data.get(name) is not None:
        _replace(c, edge_id, {name: None}, item=item)


MODULE_HANDLERS = edge_modules.EdgeModules(
    "TLS edge", PARSERS, RENDERERS, get_item, _write_module, _delete_module
)
get_module = MODULE_HANDLERS.get
put_module = MODULE_HANDLERS.put
delete_module = MODULE_HANDLERS.delete
