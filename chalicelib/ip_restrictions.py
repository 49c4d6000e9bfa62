"""IP restrictions ``/ip_restrictions``: IP policies attached to the account's agents or its
endpoints, enforced by the edge (edge/ip_restrictions.py).

Fields: id, uri, created_at, description, metadata, enforced, type, ip_policies (Refs).

Rules (where the hosted docs are silent, decided here):
- ``type``: ``agent`` (agent sessions: their Auth is refused from an address the policies do
  not allow, ERR_NGROK_9040) or ``endpoints`` (every endpoint of the account, agent or cloud,
  and the account's edges: a request from such an address is answered 403 ERR_NGROK_3203, a
  TCP or TLS connection closed). ``api`` and ``dashboard`` are a 400 (not enforced by this
  service, so never accepted: the API has no per-request read of the account's restrictions).
  Required at creation; it cannot be changed (delete and create).
- ``ip_policy_ids``: 1 to 10 distinct IP policies of the account (400 naming the field and
  id otherwise), counted in their ``refs`` (a policy an IP restriction uses cannot be deleted:
  409). The addresses are checked as a ``restrict-ips`` action with those ``ip_policies``
  checks them (one implementation: deny rules win, then allow rules; no rule at all allows
  nothing).
- ``enforced`` (default false, as the hosted resource): false only logs what would have been
  refused (the action's ``enforce: false``).
- Changes are in force at the edge within its cache's second.

Store calls: create 1 (a transaction: the restriction and its policies' counters); get 1;
list 1 Query; PATCH of description/metadata/enforced 1 UpdateItem, of ip_policy_ids GetItem +
transaction; delete GetItem + transaction. The edge reads an account's restrictions with one
Query of this collection (:func:`chalicelib.core.ip_rules.restrictions_of`).
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import edge_modules, ip_policies, validation, web
from chalicelib.core import errors, ids, ip_rules, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = ip_rules.RESTRICTION_COLLECTION
PREFIX = ids.PREFIXES["ip_restriction"]
PATH = "/ip_restrictions"
LIST_KEY = "ip_restrictions"
TYPES = ("agent", "endpoints")
NOT_ENFORCED = ("api", "dashboard")


def _check_type(name: str, value: str) -> str:
    if value in NOT_ENFORCED:
        raise errors.InvalidField(
            f"Field '{name}': '{value}' IP restrictions are not enforced by this service, so "
            "they are not accepted; offered: agent, endpoints",
            details={"field": name},
        )
    if value not in TYPES:
        raise errors.InvalidField(
            f"Field '{name}' must be one of agent, endpoints, got '{value[:32]}'",
            details={"field": name},
        )
    return value


POLICY_IDS = Field(
    "ip_policy_ids",
    "string_list",
    max_bytes=64,
    max_items=edge_modules.MAX_IP_POLICIES,
    check=edge_modules.check_policy_ids,  # the edges' rule, shared
)
CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("enforced", "boolean"),
    Field("type", "string", required=True, max_bytes=32, check=_check_type),
    dataclasses.replace(POLICY_IDS, required=True),
]
# In a PATCH an empty ip_policy_ids means unchanged (the reference client sends [] by default).
UPDATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("enforced", "boolean"),
    dataclasses.replace(
        POLICY_IDS, check=lambda n, v: edge_modules.check_policy_ids(n, v) if v else v
    ),
]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        "enforced": bool(data.get("enforced", False)),
        "type": data["type"],
        "ip_policies": [
            c.ref(ip_policies.POLICY_PATH, p) for p in data.get("ip_policy_ids") or []
        ],
    }


def _refs(data: Dict[str, Any]) -> Dict[str, Any]:
    """What edge_modules.refs_of counts: the policies, as an ip_restriction module's."""
    return {"ip_restriction": {"ip_policy_ids": list(data.get("ip_policy_ids") or [])}}


def _missing_field(exc: errors.ApiError) -> errors.ApiError:
    exc.msg = exc.msg.replace("ip_restriction.ip_policy_ids", "ip_policy_ids")
    if exc.details.get("field") == "ip_restriction.ip_policy_ids":
        exc.details["field"] = "ip_policy_ids"
    return exc


def _commit(ops: List[store.Op]) -> None:
    try:
        store.commit(ops)
    except errors.InvalidField as exc:
        raise _missing_field(exc) from None


@store.retrying
def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    data = {
        "description": "",
        "metadata": "",
        "enforced": False,
        **fields,
        "created_at": validation.now_rfc3339(),
    }
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        ids.new_id(PREFIX),
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    _commit([store.put_new(item)] + edge_modules.ref_ops(c.account_id, {}, _refs(data)))
    return render(c, item)


def get_item(account_id: str, restriction_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, restriction_id, "IP restriction")


def get(c: Ctx, restriction_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, restriction_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, restriction_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    changes = {k: v for k, v in fields.items() if not (k == "ip_policy_ids" and not v)}
    if not changes:
        return get(c, restriction_id)
    if "ip_policy_ids" not in changes:
        missing = errors.NotFound(f"No IP restriction with id '{restriction_id}' exists")
        if not ids.is_valid(restriction_id, PREFIX):
            raise missing
        return render(
            c,
            store.write(
                store.set_fields(
                    store.collection_pk(c.account_id, COLLECTION),
                    restriction_id,
                    changes,
                    missing=missing,
                )
            ),
        )
    return render(c, _update_policies(c, restriction_id, changes))


@store.retrying
def _update_policies(c: Ctx, restriction_id: str, changes: Dict[str, Any]) -> store.Item:
    item = get_item(c.account_id, restriction_id)
    new = {**item.data, **changes}
    ops = edge_modules.ref_ops(c.account_id, _refs(item.data), _refs(new))
    item.data = new
    _commit([store.save(item)] + ops)
    return item


@store.retrying
def delete(c: Ctx, restriction_id: str) -> None:
    item = get_item(c.account_id, restriction_id)
    _commit([store.delete(item)] + edge_modules.ref_ops(c.account_id, _refs(item.data), {}))
