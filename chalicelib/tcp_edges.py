"""TCP edges: ``/edges/tcp`` and their modules ``/edges/tcp/{id}/backend|ip_restriction|
traffic_policy``.

Fields: id, uri, created_at, description, metadata, hostports (null when none), backend,
ip_restriction, traffic_policy (each null when unset), policy (always null, as in the spec).
Hostports, module shapes and reference rules: see :mod:`chalicelib.edge_modules`.

Rules (where the spec is silent, decided here):
- Create and PATCH accept description, metadata, hostports and the three modules. In a PATCH
  a field or module that is absent (or null) is left unchanged; a module that is present
  replaces the stored module whole; PATCH never removes a module (use DELETE on the module).
  ``hostports: []`` clears the hostports (they are then ``null``).
- Module sub-resources: GET returns the module (404 when the edge has none); PUT replaces it
  whole and returns it (200); DELETE removes it (204, also when it was not set: the result
  is the same). A missing edge is 404 on all three.
- Deleting an edge releases its hostports and its references in the same transaction.
- A hostport must be exactly an address the account reserved (``/reserved_addrs``); otherwise
  a 400 naming the hostport. ``backend`` may name any backend kind; the edge carries TCP
  traffic to tunnel groups (directly, or as members of failover/weighted backends).
- ``policy`` (what the TypeScript client ``@ngrok/ngrok-api`` sends: the hosted service's
  older traffic policy shape ``{enabled, inbound: [rules], outbound: [rules]}``) is accepted on
  create and PATCH and stored as the ``traffic_policy`` module: ``enabled`` is kept and
  ``inbound`` becomes the ``on_tcp_connect`` phase of a JSON document (``{}`` when empty),
  checked like any traffic policy. A TCP connection has no outbound (response) phase, so a
  non-empty ``outbound`` is a 400, and so is sending ``policy`` and ``traffic_policy``
  together. Responses show it as ``traffic_policy``; ``policy`` stays null, as in the spec.

Store calls: create 1 (a PutItem, or one transaction with hostport claims and reference
counters; each new hostport's reservation is read first: 1 GetItem); get 1; list 1 Query; a
PATCH of description or metadata only 1 UpdateItem; a PATCH or module PUT/DELETE of anything
else (hostports, modules: the hostport items carry a copy of them for the edge) reads first
(1 GetItem) and then writes one transaction (2); delete 2 (GetItem, transaction).
"""

import json
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import edge_modules, traffic_policy, validation, web
from chalicelib.core import errors, ids, store
from chalicelib.edge_modules import HOSTPORTS, TCP_MODULES, TCP_RENDERERS
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx
from chalicelib.core import routing

COLLECTION = routing.TCP_EDGE_COLLECTION
PREFIX = ids.PREFIXES["tcp_edge"]
PATH = "/edges/tcp"
LIST_KEY = "tcp_edges"
MODULES = tuple(TCP_MODULES)

POLICY_KEYS = ("enabled", "inbound", "outbound")


def _bad_policy(where: str, why: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{where}' {why}", details={"field": where})


def parse_policy(name: str, value: Any) -> Dict[str, Any]:
    """``policy`` {enabled, inbound, outbound} → the traffic_policy module it stands for."""
    if not isinstance(value, dict):
        raise _bad_policy(name, "must be an object {enabled, inbound, outbound}")
    for key in value:
        if key not in POLICY_KEYS:
            raise _bad_policy(
                f"{name}.{key}", f"is not accepted; accepted: {', '.join(POLICY_KEYS)}"
            )
    enabled = value.get("enabled")
    if enabled is None:
        enabled = True
    if not isinstance(enabled, bool):
        raise _bad_policy(f"{name}.enabled", "must be a boolean")
    phases = {}
    for key in ("inbound", "outbound"):
        rules = value.get(key)
        if rules is None:
            rules = []
        if not isinstance(rules, list):
            raise _bad_policy(f"{name}.{key}", "must be a list of rules")
        phases[key] = rules
    if phases["outbound"]:
        raise _bad_policy(
            f"{name}.outbound",
            "must be empty: a TCP edge has no outbound (response) phase; use inbound rules",
        )
    document = {"on_tcp_connect": phases["inbound"]} if phases["inbound"] else {}
    text = json.dumps(document)
    traffic_policy.check_document(name, text)
    return {"enabled": enabled, "value": text}


def policy_as_traffic_policy(fields: Dict[str, Any]) -> Dict[str, Any]:
    if "policy" not in fields:
        return fields
    fields = dict(fields)
    module = fields.pop("policy")
    if fields.get("traffic_policy") is not None:
        raise errors.InvalidField(
            "Fields 'policy' and 'traffic_policy' set the same module; send one of them",
            details={"field": "policy"},
        )
    fields["traffic_policy"] = module
    return fields


FIELDS = (
    [DESCRIPTION, METADATA, HOSTPORTS]
    + [Field(name, "any", check=parse) for name, parse in TCP_MODULES.items()]
    + [Field("policy", "any", check=parse_policy)]
)
CREATE_FIELDS = FIELDS
UPDATE_FIELDS = FIELDS


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
        body[name] = TCP_RENDERERS[name](c, data.get(name))
    body["policy"] = None
    return body


@store.retrying
def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = policy_as_traffic_policy(fields)
    edge_modules.check_policy_refs(c.account_id, fields)
    edge_id = ids.new_id(PREFIX)
    data = {"description": "", "metadata": "", **fields, "created_at": validation.now_rfc3339()}
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
    return store.get_by_id(account_id, COLLECTION, PREFIX, edge_id, "TCP edge")


def get(c: Ctx, edge_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, edge_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def _replace(c: Ctx, item: store.Item, new: Dict[str, Any], nested: bool = True) -> None:
    """Save ``new`` as the edge's data, moving hostport claims and references with it."""
    ops = edge_modules.edge_ops(c.account_id, COLLECTION, item.sk, item.data, new, nested)
    item.data = new
    store.commit([store.save(item)] + ops)


# Fields whose change involves no other item (no hostport claim, no reference counter, and
# not copied onto the hostport items for the edge: traffic_policy is).
PLAIN_FIELDS = frozenset({"description", "metadata"})


def _set(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> store.Item:
    """One UpdateItem of plain fields (404 when the edge does not exist)."""
    missing = errors.NotFound(f"No TCP edge with id '{edge_id}' exists")
    if not ids.is_valid(edge_id, PREFIX):
        raise missing
    return store.write(
        store.set_fields(
            store.collection_pk(c.account_id, COLLECTION), edge_id, fields, missing=missing
        )
    )


def update(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = policy_as_traffic_policy(fields)
    edge_modules.check_policy_refs(c.account_id, fields)
    if not fields:
        return get(c, edge_id)
    if set(fields) <= PLAIN_FIELDS:
        return render(c, _set(c, edge_id, fields))
    return _update_linked(c, edge_id, fields)


@store.retrying
def _update_linked(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    item = get_item(c.account_id, edge_id)
    _replace(c, item, {**item.data, **fields})
    return render(c, item)


@store.retrying
def delete(c: Ctx, edge_id: str) -> None:
    item = get_item(c.account_id, edge_id)
    store.commit(
        [store.delete(item)]
        + edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, {})
    )


# ---- module sub-resources (edge_modules.EdgeModules) ----------------------------------------
def _write_module(c: Ctx, edge_id: str, name: str, module: Dict[str, Any]) -> None:
    if name in PLAIN_FIELDS:
        _set(c, edge_id, {name: module})
    else:
        _put_linked_module(c, edge_id, name, module)


@store.retrying
def _put_linked_module(c: Ctx, edge_id: str, name: str, module: Dict[str, Any]) -> None:
    item = get_item(c.account_id, edge_id)
    _replace(c, item, {**item.data, name: module}, nested=False)


def _remove_module(c: Ctx, edge_id: str, name: str) -> None:
    if name in PLAIN_FIELDS:
        _set(c, edge_id, {name: None})
    else:
        _delete_linked_module(c, edge_id, name)


@store.retrying
def _delete_linked_module(c: Ctx, edge_id: str, name: str) -> None:
    item = get_item(c.account_id, edge_id)
    if item.data.get(name) is not None:
        _replace(c, item, {**item.data, name: None})


MODULE_HANDLERS = edge_modules.EdgeModules(
    "TCP edge", TCP_MODULES, TCP_RENDERERS, get_item, _write_module, _remove_module
)
get_module = MODULE_HANDLERS.get
put_module = MODULE_HANDLERS.put
delete_module = MODULE_HANDLERS.delete
