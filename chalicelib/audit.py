"""The API's side of its resource-change events: chalicelib.rest calls these around each
create, update and delete of a collection (one call per write); the events themselves, the
outbox and the delivery hand-over are chalicelib/core/audit_events.py's.

Cost of a change of a resource that has an event type (chalicelib.core.event_targets
``AUDIT_RESOURCES``): nothing more when the account's subscriptions name no event of that
type. The API event types they name are kept on the account item (``audit_types``,
comma-separated) and copied onto every API key lookup of the account, so the authorizer's
one GetItem hands them to the view (``Principal.audit_types``). When the type is among them,
one Query of the account's subscriptions after the change (which of them), one PutItem into
the outbox (and, for a delete, one GetItem of the resource before it goes, as the event's
object). A principal whose lookup has no copy (written before it: ``None``) Queries as before.

The copies' rule: every change of an event subscription (create, update, delete, its
sources) recomputes the types from one Query of the account's subscriptions and, when the
account item holds other ones, writes them there and then onto every key lookup
(``auth.set_account_copies``; the account marked ``audit_copying`` meanwhile, so a refresh
cut short is redone by the next), again until a Query after the copies agrees (two changes
at once settle on the later one), before its response. A key created meanwhile is conditioned on
the account's value (``auth.new_secret_item``). So a request authorized after a
subscription change has answered sees it; one authorized before may miss it, as a change
committed before the subscription would.

The change is made first; an outbox write that fails is logged and does not fail the
request (the change stands; its event is lost and the log says so).
"""

import logging
from typing import Any, Callable, Dict, List, Optional

from chalicelib import auth
from chalicelib.core import audit_events, event_targets, store
from chalicelib.web import Ctx

log = logging.getLogger("chalicelib.audit")


def _principal(c: Ctx) -> Dict[str, Any]:
    p = c.principal
    return {"id": p.id, "kind": p.kind, "api_key_id": p.api_key_id}


SUBSCRIPTIONS_PATH = "/event_subscriptions"


def _subscribed(c: Ctx, kind: str) -> List[str]:
    """The subscriptions naming ``kind``: none without a call when the caller's copy of the
    account's types leaves it out, else one Query."""
    known = c.principal.audit_types
    if known is not None and kind not in known.split(","):
        return []
    return audit_events.subscribed(c.account_id, kind)


def types_of(subscriptions: List[store.Item]) -> str:
    """The API event types ``subscriptions`` name, as the copies hold them."""
    audit_types = set(event_targets.AUDIT_TYPES)
    named = {t for item in subscriptions for t in item.data.get("sources", [])}
    return ",".join(sorted(named & audit_types))


def refresh_types(account_id: str) -> List[store.Item]:
    """After a change of the account's subscriptions: their types on the account item and
    every key lookup (the rule in the module docstring). Returns the subscriptions as the
    last Query read them."""
    while True:
        items, _ = store.query_page(
            store.collection_pk(account_id, event_targets.COLLECTION_SUBSCRIPTION),
            event_targets.MAX_PER_ACCOUNT,
        )
        types = types_of(items)
        account = store.get(store.account_pk(account_id), store.ACCOUNT_SK)
        if account is None or (
            account.data.get("audit_types") == types and not account.data.get("audit_copying")
        ):
            return items
        # marked until the copies are written: a refresh cut short is redone by the next one
        store.write(
            store.set_fields(account.pk, account.sk, {"audit_types": types, "audit_copying": True})
        )
        auth.set_account_copies(account_id, {"audit_types": types})
        store.write(store.set_fields(account.pk, account.sk, {"audit_copying": False}))


def _refreshed(c: Ctx, path: str, kind: Optional[str]) -> Optional[List[str]]:
    """After a change at ``path``: for a subscription, the copies refreshed and the
    subscriptions naming ``kind`` as that read them (its own event sees the change); for
    anything else None (``_subscribed`` decides)."""
    if path != SUBSCRIPTIONS_PATH:
        return None
    items = refresh_types(c.account_id)
    return [item.sk for item in items if kind in item.data.get("sources", [])]


def _emit(c: Ctx, kind: str, obj: Any, subscriptions: Optional[list] = None) -> None:
    try:
        subs = subscriptions if subscriptions is not None else _subscribed(c, kind)
        if subs and isinstance(obj, dict):
            audit_events.emit(c.account_id, kind, obj, _principal(c), subs)
    except Exception:  # noqa: BLE001 - the change stands; its event is lost, and said so
        log.exception("event %s of account %s not written", kind, c.account_id)


def changed(c: Ctx, path: str, action: str, obj: Any) -> Any:
    """After a create or update of the collection at ``path``: its event, when subscribed.
    Returns ``obj`` (the view's result) unchanged."""
    kind = audit_events.event_type(path, action)
    subs = _refreshed(c, path, kind)
    if kind is not None:
        _emit(c, kind, obj, subs)
    return obj


def changed_part(c: Ctx, path: str, read: Callable[[], Any], result: Any) -> Any:
    """After a change of a part of a resource of the collection at ``path`` (an event
    subscription's source): that resource's ``updated`` event, when subscribed (``read()``
    renders it then: one GetItem). Returns ``result`` unchanged."""
    kind = audit_events.event_type(path, "updated")
    fresh = _refreshed(c, path, kind)
    if kind is None:
        return result
    try:
        subs = fresh if fresh is not None else _subscribed(c, kind)
        if subs:
            _emit(c, kind, read(), subs)
    except Exception:  # noqa: BLE001 - the change stands; its event is lost, and said so
        log.exception("event %s of account %s not written", kind, c.account_id)
    return result


def deleting(c: Ctx, path: str, read: Callable[[], Any], delete: Callable[[], Any]) -> Any:
    """A delete of the collection at ``path``: when subscribed, the resource is read first
    (the event's object), then ``delete()`` runs, then the event is written."""
    kind = audit_events.event_type(path, "deleted")
    if kind is None:
        result = delete()
        _refreshed(c, path, kind)
        return result
    try:
        # a subscription's own delete: Query (the caller's copy may predate a change)
        subs = (
            audit_events.subscribed(c.account_id, kind)
            if path == SUBSCRIPTIONS_PATH
            else _subscribed(c, kind)
        )
    except Exception:  # noqa: BLE001 - the delete goes on; its event is lost, and said so
        log.exception("subscriptions of account %s not read", c.account_id)
        subs = []
    before = read() if subs else None
    result = delete()
    _refreshed(c, path, kind)
    if subs:
        _emit(c, kind, before, subs)
    return result
