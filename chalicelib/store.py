"""The one DynamoDB table, through PynamoDB.

Layout (single table, ``pk`` hash key + ``sk`` range key, both strings):

| item                    | pk                                   | sk            |
|-------------------------|--------------------------------------|---------------|
| account                 | ``ACCOUNT#<account id>``             | ``ACCOUNT``   |
| resource                | ``A#<account id>#<collection>``      | ``<id>``      |
| uniqueness / lookup     | ``U#<namespace>#<value>``            | ``U``         |

Online items (sessions, tunnels, endpoints, served-hostname claims; chalicelib.online) use
the same keys and carry ``instance_id``, ``owner``, ``heartbeat_at`` and ``expires_at`` (the
table's TTL attribute) at the top level.

A *collection* is a resource type (``api_key``, ``bot_user``, …), or a type under a parent
(``https_edge_route#<edge id>``). Ids are time-sortable, so a list is one Query on the
collection's ``pk`` with ``ScanIndexForward=False`` (newest first) and ``sk < before_id``;
a get is one GetItem. No request path scans.

Uniqueness (domains, hostports, bot names) and lookups (API key hash → key) are items of their
own, written in the same transaction as the resource they belong to. Every item carries a
``version`` (PynamoDB's VersionAttribute): saves, updates and deletes of an item read earlier
are conditioned on it, so two writers never silently overwrite each other. A lost race
surfaces as :class:`VersionConflict`, which :func:`retrying` turns into a fresh attempt.

``refs`` counts the resources that refer to an item (an edge to its backend); an item whose
``refs`` is not 0 cannot be deleted (see the conditions resource modules put on deletes).

Resource modules build their writes as a list of :class:`Op` and hand them to :func:`commit`:
one TransactWriteItems call (at most 100 ops), all or nothing.
"""
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

from pynamodb.attributes import (JSONAttribute, NumberAttribute, UnicodeAttribute,
                                 UnicodeSetAttribute, VersionAttribute)
from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib import errors, ids
from chalicelib.config import get_settings

ACCOUNT_SK = "ACCOUNT"
UNIQUE_SK = "U"
MAX_TRANSACTION_OPS = 100


# ---- keys: the only place that spells them ------------------------------------------------
def collection_pk(account_id: str, collection: str) -> str:
    return f"A#{account_id}#{collection}"


def account_pk(account_id: str) -> str:
    return f"ACCOUNT#{account_id}"


def unique_pk(namespace: str, value: str) -> str:
    return f"U#{namespace}#{value}"


class Item(Model):
    """Every item of the table. ``data`` holds the resource's own fields as JSON."""

    class Meta:
        table_name = "tunnel-service"  # replaced by configure() before first use
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(null=True)
    account_id = UnicodeAttribute(null=True)
    data = JSONAttribute(null=True)
    refs = NumberAttribute(default=0)
    version = VersionAttribute()
    # Online state (chalicelib.online): top-level so that one UpdateItem can refresh them and
    # DynamoDB's TTL can expire the item (``expires_at``, epoch seconds).
    instance_id = UnicodeAttribute(null=True)
    owner = UnicodeAttribute(null=True)
    heartbeat_at = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)
    children = UnicodeSetAttribute(null=True)


_configured: List[Any] = []


def configure() -> None:
    """Point the model at the configured table, endpoint and region (idempotent).

    PynamoDB reads Meta when a model's connection is first built, so this runs before any
    call and again after tests change the environment (see reset()).
    """
    settings = get_settings()
    key = (settings.table_name, settings.endpoint_url, settings.region)
    if _configured and _configured[0] == key:
        return
    Item.Meta.table_name = settings.table_name
    Item.Meta.host = settings.endpoint_url
    Item.Meta.region = settings.region
    Item._connection = None
    _configured[:] = [key]


def reset() -> None:
    """Forget the model's connection so the next call re-reads the configuration."""
    _configured.clear()
    Item._connection = None


def model() -> type:
    configure()
    return Item


def connection() -> Connection:
    configure()
    return Item._get_connection().connection


def create_table(point_in_time_recovery: bool = False) -> bool:
    """Create the table (on-demand billing) when it does not exist. True when created."""
    configure()
    created = False
    if not Item.exists():
        Item.create_table(billing_mode="PAY_PER_REQUEST", wait=True)
        created = True
        enable_ttl()
    if point_in_time_recovery:
        client = connection().client
        client.update_continuous_backups(
            TableName=get_settings().table_name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
    return created


TTL_ATTRIBUTE = "expires_at"


def enable_ttl() -> None:
    """Let DynamoDB delete items whose ``expires_at`` (epoch seconds) has passed: online
    items of an edge that died (chalicelib.online). Stores without TTL support ignore it."""
    from botocore.exceptions import ClientError
    try:
        connection().client.update_time_to_live(
            TableName=get_settings().table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE})
    except ClientError:
        pass


# ---- reads -------------------------------------------------------------------------------
def get(pk: str, sk: str) -> Optional[Item]:
    """One GetItem (strongly consistent); None when absent."""
    try:
        return model().get(pk, sk, consistent_read=True)
    except DoesNotExist:
        return None


def get_resource(account_id: str, collection: str, resource_id: str) -> Item:
    """The resource item, or NotFound (also for another account's id: same key miss)."""
    item = get(collection_pk(account_id, collection), resource_id)
    if item is None:
        raise errors.NotFound(f"No {collection.split('#')[0].replace('_', ' ')} with id "
                              f"'{resource_id}' exists")
    return item


def get_by_id(account_id: str, collection: str, prefix: str, resource_id: str,
              what: str) -> Item:
    """The resource whose id came from a path, or NotFound "No <what> with id …".

    A malformed id, or one with another type's prefix, is the same 404 as an unknown one
    (and costs no read)."""
    item = get(collection_pk(account_id, collection), resource_id) \
        if ids.is_valid(resource_id, prefix) else None
    if item is None:
        raise errors.NotFound(f"No {what} with id '{resource_id}' exists")
    return item


def query_page(pk: str, limit: int, before_id: Optional[str] = None) -> Tuple[List[Item], bool]:
    """Newest-first page of a collection: at most ``limit`` items and whether more exist.

    One Query of ``limit + 1`` items; its cost does not depend on the collection's size.
    """
    Model_ = model()
    condition = Model_.sk < before_id if before_id else None
    items = list(Model_.query(pk, condition, scan_index_forward=False, limit=limit + 1,
                              page_size=limit + 1, consistent_read=True))
    return items[:limit], len(items) > limit


def query_all(pk: str) -> List[Item]:
    """Every item of one partition (used for bounded child collections, e.g. an edge's routes)."""
    return list(model().query(pk, consistent_read=True))


# ---- writes ------------------------------------------------------------------------------
class VersionConflict(Exception):
    """An item changed between our read and our write; retrying() reads again."""


@dataclass
class Op:
    """One write of a transaction. ``error`` is raised when its condition fails; None means
    "someone else changed this item meanwhile" (a VersionConflict, retried)."""

    action: str  # "check" | "delete" | "put" | "update"
    item: Item
    condition: Any = None
    actions: List[Any] = field(default_factory=list)
    error: Optional[errors.ApiError] = None


def new_item(pk: str, sk: str, *, kind: Optional[str] = None, account_id: Optional[str] = None,
             data: Optional[Dict[str, Any]] = None) -> Item:
    return model()(pk, sk, kind=kind, account_id=account_id, data=data, refs=0)


def put_new(item: Item, error: Optional[errors.ApiError] = None) -> Op:
    """Create an item that must not exist yet (version is None: PynamoDB conditions on that)."""
    return Op("put", item, error=error or errors.Conflict("Resource already exists"))


def unique(namespace: str, value: str, owner: Dict[str, str], error: errors.ApiError) -> Op:
    """Claim a unique value (domain, hostport, bot name); ``error`` when someone holds it."""
    return put_new(new_item(unique_pk(namespace, value), UNIQUE_SK, kind="unique", data=owner), error)


def release(namespace: str, value: str) -> Op:
    """Free a unique value claimed by unique() (idempotent: no condition)."""
    item = new_item(unique_pk(namespace, value), UNIQUE_SK)
    return Op("delete", item, condition=None, error=None)


def save(item: Item, error: Optional[errors.ApiError] = None, condition: Any = None) -> Op:
    """Overwrite an item read earlier, if it has not changed since (version condition)."""
    return Op("put", item, condition=condition, error=error)


def update(item: Item, actions: List[Any], condition: Any = None,
           error: Optional[errors.ApiError] = None) -> Op:
    """Update attributes of an item read earlier (e.g. ``Item.refs.add(1)``)."""
    return Op("update", item, condition=condition, actions=actions, error=error)


def delete(item: Item, condition: Any = None, error: Optional[errors.ApiError] = None) -> Op:
    """Delete an item read earlier, if unchanged (and ``condition`` holds)."""
    return Op("delete", item, condition=condition, error=error)


def check(pk: str, sk: str, condition: Any, error: errors.ApiError) -> Op:
    """Require ``condition`` on an item without writing it."""
    return Op("check", new_item(pk, sk), condition=condition, error=error)


_ORDER = {"check": 0, "delete": 1, "put": 2, "update": 3}


def commit(ops: Iterable[Op]) -> None:
    """Write all ops in one transaction, or none of them.

    PynamoDB sends condition checks, deletes, puts and updates in that order, so the ops are
    sorted the same way to match DynamoDB's cancellation reasons back to them.
    """
    ordered = sorted(ops, key=lambda op: _ORDER[op.action])
    if not ordered:
        return
    if len(ordered) > MAX_TRANSACTION_OPS:
        raise errors.BadRequest("Too many items changed in one request")
    Model_ = model()
    try:
        with TransactWrite(connection=Model_._get_connection().connection) as tx:
            for op in ordered:
                if op.action == "check":
                    tx.condition_check(Model_, op.item.pk, op.item.sk, condition=op.condition)
                elif op.action == "delete":
                    tx.delete(op.item, condition=op.condition,
                              add_version_condition=op.item.version is not None)
                elif op.action == "put":
                    tx.save(op.item, condition=op.condition)
                else:
                    tx.update(op.item, op.actions, condition=op.condition)
    except TransactWriteError as exc:
        reasons = exc.cancellation_reasons or []
        for op, reason in zip(ordered, reasons):
            if reason is not None and reason.code == "ConditionalCheckFailed":
                if op.error is not None:
                    raise op.error from None
                raise VersionConflict() from None
        if exc.cause_response_code == "TransactionCanceledException" and any(
                r is not None and r.code == "TransactionConflict" for r in reasons):
            raise VersionConflict() from None
        raise


T = TypeVar("T")

RETRIES = 5


def retrying(func: Callable[..., T]) -> Callable[..., T]:
    """Run a read-modify-write function again when it lost a race (VersionConflict).

    After RETRIES lost races the caller gets 409 rather than a write based on stale data.
    """
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        for _ in range(RETRIES):
            try:
                return func(*args, **kwargs)
            except VersionConflict:
                continue
        raise errors.Conflict("The resource was changed by another request at the same time; "
                              "retry the request")
    return wrapper
