"""IP policies ``/ip_policies`` and IP policy rules ``/ip_policy_rules``.

IP policy fields: id, uri, created_at, description, metadata.
IP policy rule fields: id, uri, created_at, description, metadata, cidr, action,
ip_policy (a Ref to its policy).

Rules (where the spec is silent, decided here):
- ``cidr`` is an IPv4 or IPv6 network in CIDR notation (checked with :mod:`ipaddress`); a
  bare address means a single host (``/32`` or ``/128``). Host bits set below the prefix
  (``10.0.0.1/8``) are a 400, since the caller most likely meant something else. The stored
  and returned form is the normalised one (``2001:DB8::/32`` → ``2001:db8::/32``).
- ``action`` is ``allow`` or ``deny`` (required at creation; may be changed by PATCH).
- ``ip_policy_id`` is required at creation, must name a policy of the caller's account
  (400 naming the id otherwise: the body is wrong, not the path), and cannot be changed.
- A policy cannot be deleted (409) while rules belong to it or edges' ``ip_restriction``
  modules use it: delete the rules / change the edges first. The policy's ``refs`` counter
  counts both and is updated in the same transaction as the rule or edge that changes it.
"""

import ipaddress
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import rest, validation, web
from chalicelib.core import errors, ids, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx
from chalicelib.core import ip_rules

POLICY_COLLECTION = ip_rules.POLICY_COLLECTION
POLICY_PREFIX = ids.PREFIXES["ip_policy"]
POLICY_PATH = "/ip_policies"
POLICY_LIST_KEY = "ip_policies"

RULE_COLLECTION = ip_rules.RULE_COLLECTION
RULE_PREFIX = ids.PREFIXES["ip_policy_rule"]
RULE_PATH = "/ip_policy_rules"
RULE_LIST_KEY = "ip_policy_rules"

ACTIONS = ("allow", "deny")


def check_cidr(name: str, value: str) -> str:
    text = value.strip()
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise errors.InvalidField(
            f"Field '{name}' must be an IPv4 or IPv6 network in CIDR notation "
            f"(e.g. 203.0.113.0/24 or 2001:db8::/32), got '{value[:100]}': {exc}",
            details={"field": name},
        ) from None
    return str(network)


def _check_action(name: str, value: str) -> str:
    if value not in ACTIONS:
        raise errors.InvalidField(
            f"Field '{name}' must be 'allow' or 'deny', got '{value[:50]}'",
            details={"field": name},
        )
    return value


POLICY_FIELDS = [DESCRIPTION, METADATA]
CIDR = Field("cidr", "string", max_bytes=64, check=check_cidr)
ACTION = Field("action", "string", max_bytes=16, check=_check_action)
RULE_CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("cidr", "string", required=True, max_bytes=64, check=check_cidr),
    Field("ip_policy_id", "string", required=True, max_bytes=64),
    Field("action", "string", required=True, max_bytes=16, check=_check_action),
]
RULE_UPDATE_FIELDS = [DESCRIPTION, METADATA, CIDR, ACTION]


# ---- policies ---------------------------------------------------------------------------------
def render_policy(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{POLICY_PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
    }


def create_policy(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    data = {"description": "", "metadata": "", **fields, "created_at": validation.now_rfc3339()}
    item = store.new_item(
        store.collection_pk(c.account_id, POLICY_COLLECTION),
        ids.new_id(POLICY_PREFIX),
        kind=POLICY_COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit([store.put_new(item)])
    return render_policy(c, item)


def get_policy_item(account_id: str, policy_id: str) -> store.Item:
    return store.get_by_id(account_id, POLICY_COLLECTION, POLICY_PREFIX, policy_id, "IP policy")


def get_policy(c: Ctx, policy_id: str) -> Dict[str, Any]:
    return render_policy(c, get_policy_item(c.account_id, policy_id))


def list_policies(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, POLICY_COLLECTION, limit, before_id, render_policy)


def _no_policy(policy_id: str) -> errors.NotFound:
    return errors.NotFound(f"No IP policy with id '{policy_id}' exists")


def update_policy(c: Ctx, policy_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields."""
    if not fields or not ids.is_valid(policy_id, POLICY_PREFIX):
        return get_policy(c, policy_id)
    return render_policy(
        c,
        store.write(
            store.set_fields(
                store.collection_pk(c.account_id, POLICY_COLLECTION),
                policy_id,
                fields,
                missing=_no_policy(policy_id),
            )
        ),
    )


def delete_policy(c: Ctx, policy_id: str) -> None:
    """One conditional DeleteItem: 404 when absent, 409 while rules or edges use it."""
    if not ids.is_valid(policy_id, POLICY_PREFIX):
        raise _no_policy(policy_id)
    store.write(
        store.remove_item(
            store.collection_pk(c.account_id, POLICY_COLLECTION),
            policy_id,
            require=lambda e: f"{e.path('refs')} = {e.value(0)}",
            missing=_no_policy(policy_id),
            explain=lambda old: errors.Conflict(
                f"IP policy '{policy_id}' is still used by {old.refs} IP policy rule(s) or "
                "edge(s); delete those rules and remove the policy from those edges first"
            ),
        )
    )


# ---- rules ------------------------------------------------------------------------------------
def render_rule(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{RULE_PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "cidr": data["cidr"],
        "ip_policy": c.ref(POLICY_PATH, data["ip_policy_id"]),
        "action": data["action"],
    }


def create_rule(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One transaction: the rule, and the policy's ``refs`` + 1 on condition that it exists
    (400 naming ``ip_policy_id`` otherwise); a concurrent delete of the policy, conditioned
    on ``refs`` = 0, either happens first (then this fails) or fails."""
    policy_id = fields["ip_policy_id"]
    bad_policy = errors.InvalidField(
        f"Field 'ip_policy_id': no IP policy with id '{policy_id[:64]}' exists in this account",
        details={"field": "ip_policy_id"},
    )
    if not ids.is_valid(policy_id, POLICY_PREFIX):
        raise bad_policy
    data = {"description": "", "metadata": "", **fields, "created_at": validation.now_rfc3339()}
    item = store.new_item(
        store.collection_pk(c.account_id, RULE_COLLECTION),
        ids.new_id(RULE_PREFIX),
        kind=RULE_COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit(
        [
            store.put_new(item),
            store.set_fields(
                store.collection_pk(c.account_id, POLICY_COLLECTION),
                policy_id,
                {},
                refs=1,
                missing=bad_policy,
            ),
        ]
    )
    return render_rule(c, item)


def get_rule_item(account_id: str, rule_id: str) -> store.Item:
    return store.get_by_id(account_id, RULE_COLLECTION, RULE_PREFIX, rule_id, "IP policy rule")


def get_rule(c: Ctx, rule_id: str) -> Dict[str, Any]:
    return render_rule(c, get_rule_item(c.account_id, rule_id))


def list_rules(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, RULE_COLLECTION, limit, before_id, render_rule)


def update_rule(c: Ctx, rule_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields."""
    if not fields or not ids.is_valid(rule_id, RULE_PREFIX):
        return get_rule(c, rule_id)
    return render_rule(
        c,
        store.write(
            store.set_fields(
                store.collection_pk(c.account_id, RULE_COLLECTION),
                rule_id,
                fields,
                missing=errors.NotFound(f"No IP policy rule with id '{rule_id}' exists"),
            )
        ),
    )


@store.retrying
def delete_rule(c: Ctx, rule_id: str) -> None:
    """Reads first (1 GetItem: which policy the rule counts in), then one transaction: the
    rule (unchanged since read) and its policy's ``refs`` - 1."""
    item = get_rule_item(c.account_id, rule_id)
    store.commit(
        [
            store.delete(item),
            store.set_fields(
                store.collection_pk(c.account_id, POLICY_COLLECTION),
                item.data["ip_policy_id"],
                {},
                refs=-1,
                missing=store.VersionConflict(),
            ),
        ]
    )


POLICY_OPS = rest.Ops(
    prefix=POLICY_PREFIX,
    list_key=POLICY_LIST_KEY,
    create=create_policy,
    get=get_policy,
    list_page=list_policies,
    update=update_policy,
    delete=delete_policy,
    create_fields=POLICY_FIELDS,
    update_fields=POLICY_FIELDS,
)
RULE_OPS = rest.Ops(
    prefix=RULE_PREFIX,
    list_key=RULE_LIST_KEY,
    create=create_rule,
    get=get_rule,
    list_page=list_rules,
    update=update_rule,
    delete=delete_rule,
    create_fields=RULE_CREATE_FIELDS,
    update_fields=RULE_UPDATE_FIELDS,
)
