"""The edge instance registry: one item per running edge instance (docs/CLUSTER.md).

``pk = EDGE_INSTANCE``, ``sk = <instance id>``; ``data.address`` is the instance's internal
relay address (``host:port``, never a public listener), ``heartbeat_at`` its lease: an
instance renews it every :data:`RENEW_SECONDS` and counts as live while it is at most
:data:`LEASE_SECONDS` old. An instance that drains (SIGTERM) deletes its item first, so no
other instance relays to it any more; one killed (``kill -9``) stops renewing and is skipped
once its lease ends. One partition holds the whole fleet (100 instances: 100 items).

The same item is the lease that keeps the instance's online sessions, tunnels and endpoints
live (chalicelib.core.leases): ``data.since`` is when this process first registered the id.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import leases, online, store

PK = leases.PK
LEASE_SECONDS = 15.0
RENEW_SECONDS = 5.0
TTL_SECONDS = 3600
_since: Dict[str, float] = {}  # instance id -> first registration by this process


def renew_seconds() -> float:
    """How often a lease is renewed: RENEW_SECONDS, or a third of ONLINE_STALE_SECONDS when
    that is shorter (the online views hold an instance's sessions for ONLINE_STALE_SECONDS
    after its last renewal: two renewals may be late or lost before they flicker out)."""
    return min(RENEW_SECONDS, online.stale_seconds() / 3)


def register(instance_id: str, address: str, state: str = "serving") -> None:
    """Write (or renew) this instance's item: one PutItem."""
    at = online.now()
    since = _since.setdefault(instance_id, float(f"{at:.3f}"))  # ms, as items'
    online.raw_client().put_item(
        TableName=online.raw_table(),
        Item=online.raw_item(
            PK,
            instance_id,
            kind="edge_instance",
            account_id="",
            instance_id=instance_id,
            data={"address": address, "state": state, "since": since},
            heartbeat_at=at,
            expires_at=at + TTL_SECONDS,
        ),
    )


def deregister(instance_id: str) -> None:
    _since.pop(instance_id, None)
    online.raw_client().delete_item(
        TableName=online.raw_table(), Key=online.raw_key(PK, instance_id)
    )


def _live(raw: Dict[str, Any], at: float) -> bool:
    heartbeat = online.num_attr(raw, "heartbeat_at")
    return heartbeat is not None and heartbeat >= at - LEASE_SECONDS


def address_of(instance_id: str) -> Optional[str]:
    """The relay address of a live, serving instance, else None (one GetItem)."""
    lease = lease_of(instance_id)
    return lease[0] if lease is not None else None


def lease_of(instance_id: str) -> Optional[Tuple[str, float]]:
    """(relay address, last lease renewal in epoch seconds) of a live, serving instance, else
    None (one GetItem)."""
    raw = online.get_raw(online.raw_key(PK, instance_id))
    if raw is None or not _live(raw, online.now()):
        return None
    data = online.data_of(raw)
    if data.get("state") != "serving":
        return None
    address = data.get("address")
    if not isinstance(address, str) or not address:
        return None
    return address, float(online.num_attr(raw, "heartbeat_at") or 0.0)


def is_live(instance_id: str) -> bool:
    """True while ``instance_id``'s lease holds (draining instances count: their sessions
    still run until their agents moved)."""
    raw = online.get_raw(online.raw_key(PK, instance_id))
    return raw is not None and _live(raw, online.now())


def live_instances() -> List[Dict[str, Any]]:
    """Every instance whose lease holds: ``{"instance_id", "address", "state", "renewed_at"}``
    (``renewed_at``: the lease's last renewal, epoch seconds)."""
    at = online.now()
    out = []
    for item in store.query_all(PK):
        raw = (
            {"heartbeat_at": {"N": str(item.heartbeat_at)}}
            if getattr(item, "heartbeat_at", None) is not None
            else {}
        )
        if raw and _live(raw, at):
            out.append(
                {
                    "instance_id": item.sk,
                    "address": item.data.get("address"),
                    "state": item.data.get("state"),
                    "renewed_at": float(item.heartbeat_at),
                }
            )
    return out
