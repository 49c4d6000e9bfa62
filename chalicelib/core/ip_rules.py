"""The rules of IP policies, as the edge applies them (an ``ip_restriction`` module's policies,
a ``restrict-ips`` action's ``ip_policies``) and as the API applies the account's ``api`` and
``dashboard`` IP restrictions to its own requests. Written by ``chalicelib.ip_policies``.

The decision itself is :func:`decide`, the one implementation: the policy engine's
``restrict-ips`` (chalicelib.core.policy.actions) and the API's check (:func:`refusing`) both
call it. Deny rules win, then allow rules; only deny rules lets every other address through;
no rule at all allows nothing.
"""

import functools
import ipaddress
from typing import Any, Dict, List, Optional, Sequence, Tuple

from chalicelib.core import ids, store

POLICY_COLLECTION = "ip_policy"
RULE_COLLECTION = "ip_policy_rule"
RESTRICTION_COLLECTION = "ip_restriction"
POLICY_PREFIX = ids.PREFIXES["ip_policy"]


# ---- the decision -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def rule_network(cidr: str) -> Any:
    """An IP policy rule's CIDR, parsed once (the same rules come back on every request); None
    when it is not one."""
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except (TypeError, ValueError):
        return None


def decide(ip: Any, allow: Sequence[Any], deny: Sequence[Any]) -> Tuple[bool, Any]:
    """Whether the address ``ip`` (an ``ipaddress`` address, or None when it is not one) passes
    the ``allow`` and ``deny`` networks, and the network that decided (None: none matched).
    A deny match refuses; otherwise an allow match, or an empty allow set when the deny set
    is not empty, lets the address through; with both sets empty nothing is allowed."""
    matched_deny = next(
        (n for n in deny if ip is not None and ip.version == n.version and ip in n), None
    )
    matched_allow = next(
        (n for n in allow if ip is not None and ip.version == n.version and ip in n), None
    )
    allowed = matched_deny is None and (matched_allow is not None or (not allow and bool(deny)))
    return allowed, matched_deny or matched_allow


# ---- the edge's read ----------------------------------------------------------------------------
def rules_of(account_id: str, policy_ids: List[str]) -> Dict[str, List[Tuple[str, str]]]:
    """The rules of each of ``policy_ids`` that exists in the account (an ``ip_restriction``
    module's policies, a ``restrict-ips`` action's ``ip_policies``) as ``{policy_id:
    [(action "allow"|"deny", cidr), ...]}``, oldest rule first; a policy without rules maps
    to ``[]``, and an id the account does not have (another account's, a deleted one) is left
    out. One Query of the account's rules (rules are stored per account, each naming its
    policy), so its cost grows with the account's rule count, not with the request; plus one
    GetItem per named policy that has no rules (a policy with rules exists: it cannot be
    deleted while they do)."""
    wanted: Dict[str, List[Tuple[str, str]]] = {policy_id: [] for policy_id in policy_ids}
    for item in store.query_all(store.collection_pk(account_id, RULE_COLLECTION)):
        policy_id = item.data.get("ip_policy_id")
        if policy_id in wanted:
            wanted[policy_id].append((item.data["action"], item.data["cidr"]))
    return {
        policy_id: rules
        for policy_id, rules in wanted.items()
        if rules or exists(account_id, policy_id)
    }


def exists(account_id: str, policy_id: str) -> bool:
    return (
        ids.is_valid(policy_id, POLICY_PREFIX)
        and store.get(store.collection_pk(account_id, POLICY_COLLECTION), policy_id) is not None
    )


def missing_of(account_id: str, policy_ids: List[str]) -> List[str]:
    """Those of ``policy_ids`` the account has no IP policy with (one GetItem each)."""
    return [
        policy_id for policy_id in dict.fromkeys(policy_ids) if not exists(account_id, policy_id)
    ]


def restrictions_of(account_id: str) -> List[Dict[str, Any]]:
    """The account's IP restrictions (/ip_restrictions, chalicelib.ip_restrictions) as the edge
    enforces them: ``[{"id", "type": "agent" | "endpoints", "enforced", "ip_policy_ids"}]``.
    One Query of the account's collection."""
    return [
        {
            "id": item.sk,
            "type": (item.data or {}).get("type", ""),
            "enforced": bool((item.data or {}).get("enforced", False)),
            "ip_policy_ids": list((item.data or {}).get("ip_policy_ids") or []),
        }
        for item in store.query_all(store.collection_pk(account_id, RESTRICTION_COLLECTION))
    ]


# ---- the API's own requests (``api`` and ``dashboard`` restrictions) ----------------------------
API, DASHBOARD = "api", "dashboard"
REQUEST_TYPES = (API, DASHBOARD)


def marker_of(restrictions: List[Dict[str, Any]]) -> str:
    """The copy the account item and its API key lookups carry of which request types it
    restricts: ``"api"``, ``"dashboard"``, ``"api,dashboard"`` or ``""`` (none)."""
    return ",".join(t for t in REQUEST_TYPES if any(r.get("type") == t for r in restrictions))


def governing(kind: str, marker: Optional[str]) -> Optional[str]:
    """The restriction type a request of ``kind`` (``api`` or ``dashboard``) is checked against
    when the account's marker is ``marker``; None: the account has none that applies, so
    nothing is read. A dashboard request is checked against the ``dashboard`` restrictions
    when the account has any, else against its ``api`` restrictions (the dashboard holds an
    API key, and its header can be sent by any holder of one: it must not be a way around an
    ``api`` restriction)."""
    types = (marker or "").split(",")
    if kind == DASHBOARD and DASHBOARD in types:
        return DASHBOARD
    return API if API in types else None


def refusing(account_id: str, kind: str, ip: str) -> List[Dict[str, Any]]:
    """The account's restrictions of type ``kind`` that refuse the address ``ip`` (each as
    :func:`restrictions_of` gives it: ``enforced`` says whether it refuses or only logs).
    Each is its policies' rules through :func:`decide`; a policy that no longer exists or a
    rule that is not a CIDR refuses (fail closed, as ``restrict-ips`` does). One Query of the
    restrictions, and when one of ``kind`` has policies, :func:`rules_of` (one Query + one
    GetItem per policy without rules)."""
    mine = [r for r in restrictions_of(account_id) if r["type"] == kind and r["ip_policy_ids"]]
    if not mine:
        return []
    wanted = list(dict.fromkeys(p for r in mine for p in r["ip_policy_ids"]))
    rules = rules_of(account_id, wanted)
    try:
        address = ipaddress.ip_address(ip.strip())
    except ValueError:
        address = None
    refused = []
    for restriction in mine:
        allow: List[Any] = []
        deny: List[Any] = []
        broken = False
        for policy_id in restriction["ip_policy_ids"]:
            if policy_id not in rules:
                broken = True
                continue
            for action, cidr in rules[policy_id]:
                network = rule_network(cidr)
                if network is None:
                    broken = True
                    continue
                (allow if action == "allow" else deny).append(network)
        passed, _ = decide(address, allow, deny)
        if broken or not passed:
            refused.append(restriction)
    return refused
