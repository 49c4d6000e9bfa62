"""The API's resource-change events, read from the store's outbox and sent through the edge's
event delivery (edge/events.py): the other end of chalicelib/core/audit_events.py.

Every :data:`POLL_SECONDS` each edge instance reads the waiting events, each account's
share of ``audit_events.CLAIM_BATCH`` (``audit_events.pending``: one account's backlog never
holds another's events back), claims each (a conditional DeleteItem: one instance wins, the
others skip it), and hands the claimed events to its :class:`edge.events.Hub`:
the account's subscriptions (the hub's cache, refreshed when the item names a subscription
the cache does not know yet), restricted to the subscriptions the item names (those whose
sources named the type when the change was made), their sources' filters and fields, the
destinations' batches, retries and bounds. Store reads run in a worker thread.

A claimed event is in this instance's memory from then on, like a traffic event: an instance
that dies before sending it loses it (at-least-once holds for the send, not across a crash).
"""

import asyncio
import logging
import time
from typing import Any, Dict, List, Tuple

from chalicelib.core import audit_events
from edge import events, observe

log = logging.getLogger("edge.audit_outbox")

POLL_SECONDS = 1.0


class Poller:
    """Where this instance's polls are in the accounts with events waiting."""

    def __init__(self) -> None:
        self.after = ""

    def claim_pending(self) -> List[Tuple[Dict[str, Any], List[str]]]:
        """The events this instance claimed (store calls: run in a worker thread)."""
        waiting, self.after = audit_events.pending(self.after)
        claimed = []
        for account_id, event_id in waiting:
            got = audit_events.claim(account_id, event_id)
            if got is not None:
                claimed.append(got)
        return claimed


async def deliver(hub: Any, claimed: List[Tuple[Dict[str, Any], List[str]]]) -> int:
    """Route claimed events through ``hub``; how many reached at least one destination."""
    now = time.monotonic()
    wanted: List[Tuple[Tuple[Dict[str, Any], float], List[Any]]] = []
    for event, subscriptions in claimed:
        account_id = event.get("account_id") or ""
        account = await hub.subscriptions(account_id, now)
        routes = (account.routes.get(event["event_type"]) if account else None) or []
        known = {sub for sub, _, _ in routes}
        if account is not None and not set(subscriptions) <= known:
            hub.accounts.pop(account_id, None)  # newer than the cache: read again, once
            account = await hub.subscriptions(account_id, now)
            routes = (account.routes.get(event["event_type"]) if account else None) or []
        chosen = [route for route in routes if route[0] in subscriptions]
        if chosen:
            wanted.append(((event, time.time()), chosen))
    if wanted:
        await hub.offer_built(wanted)
    return len(wanted)


async def run(edge: Any) -> None:
    """Poll the outbox for the life of the edge process (unless ``EDGE_EVENTS_API=0``)."""
    if not events.load_settings().api_events:
        return
    loop = asyncio.get_running_loop()
    poller = Poller()
    while True:
        try:
            claimed = await loop.run_in_executor(None, poller.claim_pending)
            if claimed:
                await deliver(observe.hub_of(edge), claimed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store is down: try again at the next poll
            log.warning("event outbox: %s", exc)
        await asyncio.sleep(POLL_SECONDS)


def start(edge: Any) -> "asyncio.Task[None]":
    return asyncio.ensure_future(run(edge))
