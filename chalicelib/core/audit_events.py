"""The API's resource-change events (the hosted "audit" events, ``ip_policy_created.v0`` …)
and how the API hands them to the edge's delivery: an **outbox** in the store.

The API is a Lambda-shaped request handler with no background work of its own, so a change
made through it is handed over as one store item, written right after the change succeeded:

1. :func:`subscribed` — one Query of the account's event subscriptions (at most 100: one page,
   the same read the edge makes), keeping those whose sources name the event's type. None:
   nothing more is done (no item, no read of a deleted resource).
2. :func:`emit` — one transaction of two writes: the event, in **the account's own outbox**
   (partition :func:`outbox_pk`; the hosted envelope, ``object`` the resource as the API
   returns it, secrets removed, ``principal``, and the ids of the subscriptions that named its
   type *at the change*; ``expires_at`` (TTL) :data:`OUTBOX_TTL_SECONDS`: an outbox nobody
   reads does not grow without bound), and the account's **mark** in :data:`OUTBOX_PK` (sort
   key the account id, the last event id): the accounts with events waiting.
3. Every edge instance's delivery (edge/audit_outbox.py) reads, every second, the marks (one
   Query, at most :data:`ACCOUNTS_PER_POLL`, in turn from where the last poll stopped) and each
   marked account's oldest events (one Query each, an equal share of :data:`CLAIM_BATCH`, at
   least one): an account with a large backlog takes its share of a poll, never another
   account's (:func:`pending`). An account whose outbox is empty loses its mark (a conditional
   delete: not if an event came meanwhile). An instance **claims** an event by deleting it (a
   conditional DeleteItem returning the item: exactly one instance gets it), then sends it
   through the same path as traffic events (the subscriptions' filters and fields, the
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

OUTBOX_PK = "EVOUTBOX"  # the marks: one item per account with events waiting
OUTBOX_KIND = "event_outbox"
MARK_KIND = "event_outbox_mark"
OUTBOX_TTL_SECONDS = 24 * 3600
CLAIM_BATCH = 100  # events one poll of one instance reads, shared out among the accounts
ACCOUNTS_PER_POLL = 100  # marked accounts one poll reads (the next poll goes on after them)
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
    """Write the event to the account's outbox for ``subscriptions``, and the account's mark
    (one transaction of two writes); the event."""
    event = envelope(account_id, kind, obj, principal)
    item = store.new_item(
        outbox_pk(account_id),
        event["event_id"],
        kind=OUTBOX_KIND,
        account_id=account_id,
        data={"event": event, "subscriptions": subscriptions},
    )
    item.expires_at = int(time.time()) + OUTBOX_TTL_SECONDS
    mark = store.put_raw(OUTBOX_PK, account_id, MARK_KIND, {"last": event["event_id"]})
    store.commit([store.put_new(item), mark])
    return event


def outbox_pk(account_id: str) -> str:
    """The partition of one account's waiting events (sort key the event id: oldest first)."""
    return f"{OUTBOX_PK}#{account_id}"


# ---- the delivery side (edge/audit_outbox.py) -----------------------------------------------
def pending(after: str = "", limit: int = CLAIM_BATCH) -> Tuple[List[Tuple[str, str]], str]:
    """(account, event id) of waiting events, oldest first within each account, and the
    account the next poll starts after ("": from the first). One Query of the marks (at most
    ACCOUNTS_PER_POLL, after ``after``), then one per marked account for its share of
    ``limit`` (``limit`` // accounts, at least one); a marked account whose outbox is empty
    loses its mark, unless an event came since the mark was read (one conditional delete)."""
    Model_ = store.model()  # queries read in key order (DynamoDB's default), one page each
    marks = list(
        Model_.query(
            OUTBOX_PK,
            Model_.sk > after if after else None,
            limit=ACCOUNTS_PER_POLL,
            consistent_read=True,
        )
    )
    if not marks:
        return [], ""
    share = max(1, limit // len(marks))
    out: List[Tuple[str, str]] = []
    for mark in marks:
        account_id = mark.sk
        items = list(Model_.query(outbox_pk(account_id), limit=share, consistent_read=True))
        out += [(account_id, item.sk) for item in items]
        if not items:
            unmark(account_id, mark.data["last"])
    return out, (marks[-1].sk if len(marks) == ACCOUNTS_PER_POLL else "")


def unmark(account_id: str, last: str) -> None:
    """Remove the account's mark if it still names ``last`` (its outbox was found empty)."""
    try:
        store.write(
            store.remove_item(
                OUTBOX_PK,
                account_id,
                require=lambda e: f"{e.data('last')} = {e.value(last)}",
                explain=lambda old: _Taken(),
                missing=_Taken(),
            )
        )
    except _Taken:  # an event came meanwhile (the mark names it), or another instance did it
        pass


def claim(account_id: str, event_id: str) -> Optional[Tuple[Dict[str, Any], List[str]]]:
    """Take one waiting event: (event, subscription ids), or None when another instance took
    it first (one conditional DeleteItem returning the item)."""
    try:
        item = store.write(store.remove_item(outbox_pk(account_id), event_id, missing=_Taken()))
    except _Taken:
        return None
    if item is None:
        return None
    return item.data["event"], list(item.data["subscriptions"])


class _Taken(Exception):
    """Another instance claimed the item first."""
