"""IP restrictions ``/ip_restrictions``: IP policies attached to the account's agents, its
endpoints, its API requests or its dashboard's, enforced by the edge (edge/ip_restrictions.py:
``agent``, ``endpoints``) and by the API itself (chalicelib.web.check_ip_restrictions: ``api``,
``dashboard``).

Fields: id, uri, created_at, description, metadata, enforced, type, ip_policies (Refs).

Rules (where the hosted docs are silent, decided here):
- ``type``: ``agent`` (agent sessions: their Auth is refused from an address the policies do
  not allow, ERR_NGROK_9040), ``endpoints`` (every endpoint of the account, agent or cloud,
  and the account's edges: a request from such an address is answered 403 ERR_NGROK_3203, a
  TCP or TLS connection closed), ``api`` (every request to this API with one of the account's
  keys: 403 ERR_NGROK_220, the hosted service's code for "Your IP does not match the IP
  Policy for this Account", before the view runs, so it changes nothing) or ``dashboard``
  (the dashboard's requests: 403 ERR_NGROK_1212, the code the hosted service gives the same
  words at its dashboard). Required at creation; it cannot be changed (delete and create).
- What a dashboard request is: the dashboard signs in with an API key and calls this API
  like any client (docs/DASHBOARD.md), so there is no dashboard credential to tell its
  requests apart; it sends ``Service-Client: dashboard`` (chalicelib.web), which any key
  holder can send. So a dashboard request is checked against the ``dashboard`` restrictions
  when the account has any, and against its ``api`` restrictions when it has none: the header
  is never a way around an ``api`` restriction. With both, a stolen key works from the
  addresses either allows; a ``dashboard`` restriction alone keeps the dashboard, not the
  key, to its addresses (a client that does not send the header is an API request).
- Locking oneself out: allowed, as the hosted service allows it (an enforced ``api``
  restriction made from an address it refuses refuses the next request, the one that would
  undo it too). ``enforced`` defaults to false, and an unenforced restriction logs what it
  would refuse; the way back is the operator's: ``python -m chalicelib.admin
  lift-ip-restrictions --account ACCT`` sets ``enforced: false`` on the account's ``api``
  and ``dashboard`` restrictions, through the store.
- ``ip_policy_ids``: 1 to 10 distinct IP policies of the account (400 naming the field and
  id otherwise), counted in their ``refs`` (a policy an IP restriction uses cannot be deleted:
  409). The addresses are checked as a ``restrict-ips`` action with those ``ip_policies``
  checks them (one implementation, chalicelib.core.ip_rules.decide: deny rules win, then
  allow rules; no rule at all allows nothing).
- ``enforced`` (default false, as the hosted resource): false only logs what would have been
  refused (the action's ``enforce: false``).
- Changes are in force at the edge within its cache's second; at the API on the next request
  once the change has answered (its reads are strongly consistent, nothing is cached).

What an API request costs: an account with no ``api`` or ``dashboard`` restriction, nothing
(the API key's lookup, which the authorizer reads anyway, carries ``ip_restricted``: the
types the account restricts, copied from the account item, as chalicelib.audit copies event
types); an account with one: a Query of its restrictions and, when one of the request's type
has policies, :func:`chalicelib.core.ip_rules.rules_of` (a Query of its rules, a GetItem per
policy without rules). The copies' rule: a create or delete of an ``api`` or ``dashboard``
restriction recomputes the types from a Query of the restrictions and, when the account item
holds other ones, writes them there and onto every key lookup (``auth.set_account_copies``,
the account marked ``ip_restricted_copying`` meanwhile, so a refresh cut short is redone by
the next), again until a Query after the copies agrees, before its response; a key created
meanwhile is conditioned on the account's value (``auth.new_secret_item``). So a request
authorized after such a change has answered sees it. A PATCH cannot change a type, so it
changes no copy. No restriction of these types could be made before this rule existed, so a
lookup without the copy is right to say none.

Store calls: create 1 (a transaction: the restriction and its policies' counters), of an
``api``/``dashboard`` restriction + the refresh (a Query, a GetItem; when the types change,
two UpdateItems and the copies); get 1; list 1 Query; PATCH of description/metadata/enforced
1 UpdateItem, of ip_policy_ids GetItem + transaction; delete GetItem + transaction (+ the
refresh for those types). The edge reads an account's restrictions with one Query of this
collection (:func:`chalicelib.core.ip_rules.restrictions_of`).
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import auth, edge_modules, ip_policies, validation, web
from chalicelib.core import errors, ids, ip_rules, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = ip_rules.RESTRICTION_COLLECTION
PREFIX = ids.PREFIXES["ip_restriction"]
PATH = "/ip_restrictions"
LIST_KEY = "ip_restrictions"
TYPES = ("agent", "endpoints", ip_rules.API, ip_rules.DASHBOARD)


def _check_type(name: str, value: str) -> str:
    if value not in TYPES:
        raise errors.InvalidField(
            f"Field '{name}' must be one of {', '.join(TYPES)}, got '{value[:32]}'",
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


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    item = _create(c, fields)
    if item.data["type"] in ip_rules.REQUEST_TYPES:
        refresh_marker(c.account_id)
    return render(c, item)


@store.retrying
def _create(c: Ctx, fields: Dict[str, Any]) -> store.Item:
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
    return item


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


def delete(c: Ctx, restriction_id: str) -> None:
    kind = _delete(c, restriction_id)
    if kind in ip_rules.REQUEST_TYPES:
        refresh_marker(c.account_id)


@store.retrying
def _delete(c: Ctx, restriction_id: str) -> str:
    item = get_item(c.account_id, restriction_id)
    _commit([store.delete(item)] + edge_modules.ref_ops(c.account_id, _refs(item.data), {}))
    return str(item.data.get("type", ""))


# ---- the copies of which request types the account restricts ------------------------------------
MARKER = "ip_restricted"
COPYING = "ip_restricted_copying"


def refresh_marker(account_id: str) -> str:
    """After a create or delete of an ``api`` or ``dashboard`` restriction: the types the
    account's restrictions restrict, on the account item and every key lookup (the rule in
    the module docstring). Returns them."""
    while True:
        marker = ip_rules.marker_of(ip_rules.restrictions_of(account_id))
        account = store.get(store.account_pk(account_id), store.ACCOUNT_SK)
        if account is None or (
            (account.data.get(MARKER) or "") == marker and not account.data.get(COPYING)
        ):
            return marker
        # marked until the copies are written: a refresh cut short is redone by the next one
        store.write(store.set_fields(account.pk, account.sk, {MARKER: marker, COPYING: True}))
        auth.set_account_copies(account_id, {MARKER: marker})
        store.write(store.set_fields(account.pk, account.sk, {COPYING: False}))


def lift(account_id: str) -> List[str]:
    """The operator's way back from a lock-out (``python -m chalicelib.admin
    lift-ip-restrictions``): every ``api`` and ``dashboard`` restriction of the account set to
    ``enforced: false`` (one UpdateItem each; they stay, and log what they would refuse).
    Returns their ids."""
    lifted = []
    for restriction in ip_rules.restrictions_of(account_id):
        if restriction["type"] in ip_rules.REQUEST_TYPES and restriction["enforced"]:
            try:
                store.write(
                    store.set_fields(
                        store.collection_pk(account_id, COLLECTION),
                        restriction["id"],
                        {"enforced": False},
                        missing=store.VersionConflict(),
                    )
                )
            except store.VersionConflict:
                continue  # deleted meanwhile
            lifted.append(restriction["id"])
    return lifted
