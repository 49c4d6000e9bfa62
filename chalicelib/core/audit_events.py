"""The API's resource-change events (the hosted "audit" events, ``ip_policy_created.v0`` …)
and how the API hands them to the edge's delivery: an **outbox** in the store.

The API is a Lambda-shaped request handler with no background work of its own, so a change
made through it is handed over as one store item, written right after the change succeeded:

1. :func:`subscribed` — one Query of the account's event subscriptions (at most 100: one page,
   the same read the edge makes), keeping those whose sources name the event's type. None:
   nothing more is done (no item, no read of a deleted resource).
2. :func:`emit` — one PutItem under :data:`OUTBOX_PK`: the event (the hosted envelope,
   ``object`` the resource as the API returns it, secrets removed, ``principal``) and the ids
   of the subscriptions that named its type *at the change*. ``expires_at`` (TTL) is
   :data:`OUTBOX_TTL_SECONDS`: an outbox nobody reads does not grow without bound.
3. Every edge instance's delivery (edge/audit_outbox.py) reads the outbox (one Query, oldest
   first, :data:`CLAIM_BATCH` items) every second; an instance **claims** an item by deleting
   it (a conditional DeleteItem returning the item: exactly one instance gets it), then sends
   it through the same path as traffic events (the subscriptions' filters and fields, the
   destinations' batches, retries and bounds).

Account scoping: the Query reads the changing account's own subscriptions partition, and
the delivery routes an item only to subscriptions of the item's account that it names.

Secrets never appear in an event: :func:`scrub` removes every field named in
:data:`SECRET_FIELDS` (API key and credential tokens, private keys, AWS secret keys), at any
depth, before the item is written.
"""

import time
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import event_targets, ids, store

OUTBOX_PK = "EVOUTBOX"
OUTBOX_KIND = "event_outbox"
OUTBOX_TTL_SECONDS = 24 * 3600
CLAIM_BATCH = 100
SECRET_FIELDS = frozenset(
    (
        "token",
        "aws_secret_access_key",
        "private_key",
        "private_key_pem",
        "secret",
        "client_secret",
        "password",
    )
)


def event_type(path: str, action: str) -> Optional[str]:
    """The hosted type of a change of the collection at ``path`` (None: not an API event)."""
    resource = event_targets.AUDIT_RESOURCES.get(path)
    if resource is None or action not in event_targets.AUDIT_ACTIONS:
        return None
    return f"{resource}_{action}.v0"


def scrub(value: Any) -> Any:
    """``value`` without secrets: every field named in SECRET_FIELDS becomes null."""
    if isinstance(value, dict):
        return {k: (None if k in SECRET_FIELDS else scrub(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def subscribed(account_id: str, kind: str) -> List[str]:
    """Ids of the account's subscriptions whose sources name ``kind`` (one Query)."""
    items, _ = store.query_page(
        store.collection_pk(account_id, event_targets.COLLECTION_SUBSCRIPTION),
        event_targets.MAX_PER_ACCOUNT,
    )
    return [item.sk for item in items if kind in item.data.get("sources", [])]


def rfc3339_now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def envelope(
    account_id: str, kind: str, obj: Dict[str, Any], principal: Dict[str, Any]
) -> Dict[str, Any]:
    return {
        "event_id": ids.new_id(ids.PREFIXES["event"]),
        "event_type": kind,
        "event_timestamp": rfc3339_now(),
        "account_id": account_id,
        "principal": principal,
        "object": scrub(obj),
    }


def emit(
    account_id: str,
    kind: str,
    obj: Dict[str, Any],
    principal: Dict[str, Any],
    subscriptions: List[str],
) -> Dict[str, Any]:
    """Write the event to the outbox for ``subscriptions`` (one PutItem); the event."""
    event = envelope(account_id, kind, obj, principal)
    item = store.new_item(
        OUTBOX_PK,
        event["event_id"],
        kind=OUTBOX_KIND,
        account_id=account_id,
        data={"event": event, "subscriptions": subscriptions},
    )
    item.expires_at = int(time.time()) + OUTBOX_TTL_SECONDS
    store.commit([store.put_new(item)])
    return event


# ---- the delivery side (edge/audit_outbox.py) -----------------------------------------------
def pending(limit: int = CLAIM_BATCH) -> List[Tuple[str, str]]:
    """(event id, account) of the oldest outbox items (one Query)."""
    items = list(
        store.model().query(
            OUTBOX_PK, scan_index_forward=True, limit=limit, page_size=limit, consistent_read=True
        )
    )
    return [(item.sk, item.account_id or "") for item in items]


def claim(event_id: str) -> Optional[Tuple[Dict[str, Any], List[str]]]:
    """Take one outbox item: (event, subscription ids), or None when another instance took
    it first (one conditional DeleteItem returning the item)."""
    try:
        item = store.write(store.remove_item(OUTBOX_PK, event_id, missing=_Taken()))
    except _Taken:
        return None
    if item is None:
        return None
    return item.data["event"], list(item.data.get("subscriptions", []))


class _Taken(Exception):
    """Another instance claimed the item first."""
