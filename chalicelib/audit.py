"""The API's side of its resource-change events: chalicelib.rest calls these around each
create, update and delete of a collection (one call per write); the events themselves, the
outbox and the delivery hand-over are chalicelib/core/audit_events.py's.

Cost of a change of a resource that has an event type (chalicelib.core.event_targets
``AUDIT_RESOURCES``): one Query of the account's subscriptions after the change; when one
of them names the type, one PutItem into the outbox (and, for a delete, one GetItem of the
resource before it goes, as the event's object). A change of any other collection costs
nothing more.

The change is made first; an outbox write that fails is logged and does not fail the
request (the change stands; its event is lost and the log says so).
"""

import logging
from typing import Any, Callable, Dict, Optional

from chalicelib.core import audit_events
from chalicelib.web import Ctx

log = logging.getLogger("chalicelib.audit")


def _principal(c: Ctx) -> Dict[str, Any]:
    p = c.principal
    return {"id": p.id, "kind": p.kind, "api_key_id": p.api_key_id}


def _emit(c: Ctx, kind: str, obj: Any, subscriptions: Optional[list] = None) -> None:
    try:
        subs = (
            subscriptions
            if subscriptions is not None
            else audit_events.subscribed(c.account_id, kind)
        )
        if subs and isinstance(obj, dict):
            audit_events.emit(c.account_id, kind, obj, _principal(c), subs)
    except Exception:  # noqa: BLE001 - the change stands; its event is lost, and said so
        log.exception("event %s of account %s not written", kind, c.account_id)


def changed(c: Ctx, path: str, action: str, obj: Any) -> Any:
    """After a create or update of the collection at ``path``: its event, when subscribed.
    Returns ``obj`` (the view's result) unchanged."""
    kind = audit_events.event_type(path, action)
    if kind is not None:
        _emit(c, kind, obj)
    return obj


def changed_part(c: Ctx, path: str, read: Callable[[], Any], result: Any) -> Any:
    """After a change of a part of a resource of the collection at ``path`` (an event
    subscription's source): that resource's ``updated`` event, when subscribed (``read()``
    renders it then: one GetItem). Returns ``result`` unchanged."""
    kind = audit_events.event_type(path, "updated")
    if kind is None:
        return result
    try:
        subs = audit_events.subscribed(c.account_id, kind)
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
        return delete()
    try:
        subs = audit_events.subscribed(c.account_id, kind)
    except Exception:  # noqa: BLE001 - the delete goes on; its event is lost, and said so
        log.exception("subscriptions of account %s not read", c.account_id)
        subs = []
    before = read() if subs else None
    result = delete()
    if subs:
        _emit(c, kind, before, subs)
    return result
