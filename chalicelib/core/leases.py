"""Edge instance leases as the liveness of the online state (docs/CLUSTER.md, "The online
state: leases").

Each running edge instance (one ``make run`` edge included) keeps one registry item,
``pk = EDGE_INSTANCE``, ``sk = <instance id>`` (chalicelib.core.instances writes it), renewed
every few seconds: ``heartbeat_at`` is its last renewal, ``data.since`` the moment this run of
the instance first registered. A session item written by that instance at or after ``since``
is live while the lease's last renewal is at most ``ONLINE_STALE_SECONDS`` old, so one write
per instance, not one per session, keeps every session of the instance online, and an
instance killed with -9 takes all its sessions offline together when its lease ends. A
session written by an earlier run of an instance id (``since`` later than the session) is
not held by the new run's lease.

Reads only; this module imports no other online module (chalicelib.core.online and
chalicelib.core.instances import it).
"""

from typing import Any, Dict, Iterable, NamedTuple, Optional

from chalicelib.core import store
from chalicelib.core.config import get_settings

PK = "EDGE_INSTANCE"
BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit


class Lease(NamedTuple):
    renewed_at: float  # epoch seconds of the last renewal
    since: float  # epoch seconds of this run's first registration

    def holds(self, written_at: Optional[float], at: float, stale_seconds: float) -> bool:
        """True when this lease keeps an item written at ``written_at`` live at ``at``."""
        return (
            written_at is not None
            and written_at >= self.since
            and self.renewed_at >= at - stale_seconds
        )


def key(instance_id: str) -> Dict[str, Any]:
    return {"pk": {"S": PK}, "sk": {"S": instance_id}}


def _lease_of(raw: Dict[str, Any]) -> Optional[Lease]:
    renewed = raw.get("heartbeat_at")
    if not renewed:
        return None
    data = raw.get("data", {}).get("M", {})
    since = data.get("since", {}).get("N")
    return Lease(float(renewed["N"]), float(since) if since is not None else 0.0)


def read(instance_ids: Iterable[str]) -> Dict[str, Lease]:
    """The leases of ``instance_ids`` that exist, by instance id: one BatchGetItem per 100
    (consistent reads); an empty set costs nothing."""
    pending = [key(i) for i in sorted({i for i in instance_ids if i})]
    client = store.connection().client
    table = get_settings().table_name
    found: Dict[str, Lease] = {}
    while pending:
        chunk, pending = pending[:BATCH_GET_KEYS], pending[BATCH_GET_KEYS:]
        request: Dict[str, Any] = {table: {"Keys": chunk, "ConsistentRead": True}}
        while request:
            answer = client.batch_get_item(RequestItems=request)
            for raw in answer.get("Responses", {}).get(table, []):
                lease = _lease_of(raw)
                if lease is not None:
                    found[raw["sk"]["S"]] = lease
            request = answer.get("UnprocessedKeys") or {}
    return found
