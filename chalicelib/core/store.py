"""The one DynamoDB table, through PynamoDB.

Layout (single table, ``pk`` hash key + ``sk`` range key, both strings):

| item                    | pk                                   | sk            |
|-------------------------|--------------------------------------|---------------|
| account                 | ``ACCOUNT#<account id>``             | ``ACCOUNT``   |
| resource                | ``A#<account id>#<collection>``      | ``<id>``      |
| uniqueness / lookup     | ``U#<namespace>#<value>``            | ``U``         |
| idempotency record      | ``I#<account id>#<key digest>``      | ``I``         |
| rate-limit window       | ``RL#<account id>``                  | ``<window>``  |
| HTTPS edge route        | ``A#<account id>#https_edge``        | ``<edge id>#<route id>`` |
| owner index entry       | ``A#<account id>#owned#<owner id>``  | ``<key or credential id>`` |
| layout marker           | ``META``                             | ``LAYOUT``    |
| served certificate      | ``TLS#domain_certificate``           | ``<domain>``  |
| ACME queue / challenge / account / DNS-01 TXT | ``ACME#queue`` / ``ACME#challenge`` / ``ACME#account`` / ``ACME#dns`` | see chalicelib.acme |

Idempotency records and rate-limit windows carry ``expires_at`` (epoch seconds, the table's
TTL attribute): DynamoDB deletes them some time after it passes; readers treat an expired one
as absent.

Online items (sessions, tunnels, endpoints, served-hostname claims; chalicelib.core.online) use
the same keys and carry ``instance_id``, ``owner``, ``heartbeat_at`` and ``expires_at`` (the
table's TTL attribute) at the top level.

A *collection* is a resource type (``api_key``, ``bot_user``, …). Ids are time-sortable,
so a list is one Query on the collection's ``pk`` with ``ScanIndexForward=False`` (newest
first) and ``sk < before_id``; a get is one GetItem. No request path scans.

Uniqueness (domains, hostports, bot names) and lookups (API key hash → key) are items of their
own, written in the same transaction as the resource they belong to. An item's own fields are
``data``, a DynamoDB map (:class:`DataAttribute`; items of the earlier layout hold a JSON
string and are read as they are, see chalicelib.migrate).

One store call per operation — what a resource module calls:

- read: :func:`get` / :func:`get_by_id` (one GetItem), :func:`query_page` (one Query);
- create: ``commit([put_new(item)])`` — one conditional PutItem; with claims or counters of
  other items (``unique()``, ``set_fields(..., refs=1)``) one TransactWriteItems;
- update: ``write(set_fields(pk, sk, fields, missing=NotFound(...)))`` — one UpdateItem of
  just those fields, returning the item as it is now (``ReturnValues``); ``require`` adds a
  condition (``lambda e: f"{e.data('owner_id')} = {e.value(me)}"``) and ``explain(old)``
  turns its failure into the right error, from the item as it was (no read before);
- delete: ``write(remove_item(pk, sk, require=..., missing=..., explain=...))`` — one
  conditional DeleteItem (e.g. ``refs`` = 0, else 409);
- several items together: ``commit([...])`` — one transaction of ops (at most 100), all or
  nothing; a single op is sent as a plain write, never as a transaction.

Every write bumps the item's ``version`` (PynamoDB's VersionAttribute). Read-modify-write
code (``get`` then ``save``/``delete``/``update`` of the read item) is conditioned on it, so
two writers never silently overwrite each other: a lost race surfaces as
:class:`VersionConflict`, which :func:`retrying` turns into a fresh attempt after a jittered
backoff. Use it only where a write needs what it read (what to release, references to move).

``refs`` counts the resources that refer to an item (an edge to its backend); an item whose
``refs`` is not 0 cannot be deleted (see the conditions resource modules put on deletes).
"""

import functools
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Type, TypeVar

from botocore.exceptions import ClientError
from pynamodb.attributes import (
    Attribute,
    NumberAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
    VersionAttribute,
)
from pynamodb.connection import Connection
from pynamodb.constants import MAP
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.core import errors, ids
from chalicelib.core.config import get_settings

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


IDEMPOTENCY_SK = "I"


def idempotency_pk(account_id: str, key_digest: str) -> str:
    return f"I#{account_id}#{key_digest}"


# Derived copies of HTTPS edges' TLS modules, one item per hostport (sk): what the edge's
# TLS listener needs before a handshake, read in one Query (chalicelib.https_edges.tls_index).
EDGE_TLS_PK = "TLS#https_edge"
# Copies of TLS edges, one item per hostport (sk): what the edge's TLS listener needs to serve
# a name by SNI (chalicelib.core.routing.tls_edges), read in the background in one Query.
TLS_EDGE_PK = "TLS#tls_edge"


def rate_limit_pk(account_id: str) -> str:
    return f"RL#{account_id}"


# ---- the data attribute: a DynamoDB map, so one field can be written alone ---------------------
def to_av(value: Any) -> Dict[str, Any]:
    """A JSON value as a typed DynamoDB attribute value."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float)):
        return {"N": repr(value) if isinstance(value, float) else str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, (list, tuple)):
        return {"L": [to_av(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {str(k): to_av(v) for k, v in value.items()}}
    raise TypeError(f"cannot store {type(value).__name__}")


def from_av(av: Dict[str, Any]) -> Any:
    """The JSON value of a typed DynamoDB attribute value (numbers: int when integral)."""
    ((kind, value),) = av.items()
    if kind == "S":
        return value
    if kind == "N":
        return int(value) if value.lstrip("-").isdigit() else float(value)
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "L":
        return [from_av(v) for v in value]
    if kind == "M":
        return {k: from_av(v) for k, v in value.items()}
    raise TypeError(f"unexpected attribute type {kind}")


class DataAttribute(Attribute[Dict[str, Any]]):
    """A resource's own fields, stored as a DynamoDB map (``M``).

    Items written before this layout hold the same fields as a JSON string (``S``); they are
    read as they are, and :func:`migrate` (or the first single-field update of the item)
    rewrites them as maps.
    """

    attr_type = MAP

    def serialize(self, value: Dict[str, Any]) -> Dict[str, Any]:
        return to_av(value)["M"]

    def get_value(self, value: Dict[str, Any]) -> Dict[str, Any]:
        return value  # the typed value: {"M": …} now, {"S": "<json>"} before

    def deserialize(self, value: Dict[str, Any]) -> Dict[str, Any]:
        if "S" in value:
            return json.loads(value["S"])
        return from_av({"M": value["M"]})


class Item(Model):
    """Every item of the table. ``data`` holds the resource's own fields as JSON."""

    class Meta:
        table_name = "tunnel-service"  # replaced by configure() before first use
        region = "us-east-1"
        host: Optional[str] = None

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(null=True)
    account_id = UnicodeAttribute(null=True)
    data = DataAttribute(null=True)
    refs = NumberAttribute(default=0)
    version = VersionAttribute()
    # Online state (chalicelib.core.online): top-level so that one UpdateItem can refresh them and
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


def model() -> Type[Item]:
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
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )
    return created


TTL_ATTRIBUTE = "expires_at"


def enable_ttl() -> None:
    """Let DynamoDB delete items whose ``expires_at`` (epoch seconds) has passed: online
    items of an edge that died (chalicelib.core.online). Stores without TTL support ignore it."""
    from botocore.exceptions import ClientError

    try:
        connection().client.update_time_to_live(
            TableName=get_settings().table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
    except ClientError:
        pass


# ---- reads -------------------------------------------------------------------------------
def get(pk: str, sk: str) -> Optional[Item]:
    """One GetItem (strongly consistent); None when absent."""
    try:
        return model().get(pk, sk, consistent_read=True)
    except DoesNotExist:
        return None


def get_many(keys: Sequence[Tuple[str, str]]) -> Dict[Tuple[str, str], Item]:
    """The items of up to 100 ``(pk, sk)`` keys, by key (absent ones left out): one
    BatchGetItem (strongly consistent; unprocessed keys asked again)."""
    if len(keys) > 100:
        raise ValueError("get_many reads at most 100 keys")
    found = model().batch_get(list(dict.fromkeys(keys)), consistent_read=True)
    return {(item.pk, item.sk): item for item in found}


def get_resource(account_id: str, collection: str, resource_id: str) -> Item:
    """The resource item, or NotFound (also for another account's id: same key miss)."""
    item = get(collection_pk(account_id, collection), resource_id)
    if item is None:
        raise errors.NotFound(
            f"No {collection.split('#')[0].replace('_', ' ')} with id '{resource_id}' exists"
        )
    return item


def get_by_id(account_id: str, collection: str, prefix: str, resource_id: str, what: str) -> Item:
    """The resource whose id came from a path, or NotFound "No <what> with id …".

    A malformed id, or one with another type's prefix, is the same 404 as an unknown one
    (and costs no read)."""
    item = (
        get(collection_pk(account_id, collection), resource_id)
        if ids.is_valid(resource_id, prefix)
        else None
    )
    if item is None:
        raise errors.NotFound(f"No {what} with id '{resource_id}' exists")
    return item


def query_page(pk: str, limit: int, before_id: Optional[str] = None) -> Tuple[List[Item], bool]:
    """Newest-first page of a collection: at most ``limit`` items and whether more exist.

    One Query of ``limit + 1`` items; its cost does not depend on the collection's size.
    """
    Model_ = model()
    condition = Model_.sk < before_id if before_id else None
    items = list(
        Model_.query(
            pk,
            condition,
            scan_index_forward=False,
            limit=limit + 1,
            page_size=limit + 1,
            consistent_read=True,
        )
    )
    return items[:limit], len(items) > limit


def query_all(pk: str) -> List[Item]:
    """Every item of one partition (used for bounded child collections, e.g. an edge's routes)."""
    return list(model().query(pk, consistent_read=True))


def increment(pk: str, sk: str, expires_at: int) -> int:
    """Add 1 to the counter item (``refs``), creating it with ``expires_at``; the new count.
    One UpdateItem, atomic under concurrency.

    Written with AttributeUpdates (ADD refs, PUT expires_at), DynamoDB's other form of the
    same update (``ADD refs :1 SET expires_at = :e``): the embedded store (moto) applies it
    without parsing and validating an update expression, a third of its CPU for this call
    (bench/edge_bench/admission.py; the counters run on every Auth and API request)."""
    result = connection().client.update_item(
        TableName=model().Meta.table_name,
        Key={"pk": {"S": pk}, "sk": {"S": sk}},
        AttributeUpdates={
            "refs": {"Action": "ADD", "Value": {"N": "1"}},
            "expires_at": {"Action": "PUT", "Value": {"N": str(int(expires_at))}},
        },
        ReturnValues="UPDATED_NEW",
    )
    return int(result["Attributes"]["refs"]["N"])


# ---- writes ------------------------------------------------------------------------------
class VersionConflict(Exception):
    """An item changed between our read and our write; retrying() reads again."""


Explain = Callable[[Item], Exception]  # the item as it was -> the error to raise
_Why = Callable[[Optional[Item]], Exception]  # the same, told also of a missing item


@dataclass
class Op:
    """One write. ``error`` is raised when its condition fails; None means "someone else
    changed this item meanwhile" (a VersionConflict, retried). ``explain``, when set, is
    called instead with the item as it was when the condition failed (None: it did not exist)
    and returns the error to raise: one write can then fail for several reasons (absent,
    forbidden, in use) without a read before it. ``raw`` holds the request of a write built by
    :func:`set_fields`, :func:`remove_item` or :func:`put_raw` (no PynamoDB item)."""

    action: str  # "check" | "delete" | "put" | "update"
    item: Optional[Item]
    condition: Any = None
    actions: List[Any] = field(default_factory=list)
    error: Optional[errors.ApiError] = None
    explain: Optional[_Why] = None
    raw: Optional[Dict[str, Any]] = None


def new_item(
    pk: str,
    sk: str,
    *,
    kind: Optional[str] = None,
    account_id: Optional[str] = None,
    data: Optional[Dict[str, Any]] = None,
) -> Item:
    return model()(pk, sk, kind=kind, account_id=account_id, data=data, refs=0)


def put_new(item: Item, error: Optional[errors.ApiError] = None) -> Op:
    """Create an item that must not exist yet (version is None: PynamoDB conditions on that)."""
    return Op("put", item, error=error or errors.Conflict("Resource already exists"))


def unique(namespace: str, value: str, owner: Dict[str, str], error: errors.ApiError) -> Op:
    """Claim a unique value (domain, hostport, bot name); ``error`` when someone holds it."""
    return put_new(
        new_item(unique_pk(namespace, value), UNIQUE_SK, kind="unique", data=owner), error
    )


def release(namespace: str, value: str) -> Op:
    """Free a unique value claimed by unique() (idempotent: no condition)."""
    item = new_item(unique_pk(namespace, value), UNIQUE_SK)
    return Op("delete", item, condition=None, error=None)


def put_raw(pk: str, sk: str, kind: str, data: Dict[str, Any]) -> Op:
    """Write an item whatever it held before (no condition): for derived copies rewritten
    in the transaction of the item they copy, which orders them."""
    request = {
        "Item": {
            **_key(pk, sk),
            "kind": {"S": kind},
            "data": to_av(data),
            "refs": {"N": "0"},
            "version": {"N": "1"},
        }
    }
    return Op("put", None, raw=request)


def save(item: Item, error: Optional[errors.ApiError] = None, condition: Any = None) -> Op:
    """Overwrite an item read earlier, if it has not changed since (version condition)."""
    return Op("put", item, condition=condition, error=error)


def update(
    item: Item, actions: List[Any], condition: Any = None, error: Optional[errors.ApiError] = None
) -> Op:
    """Update attributes of an item read earlier (e.g. ``Item.refs.add(1)``)."""
    return Op("update", item, condition=condition, actions=actions, error=error)


def delete(item: Item, condition: Any = None, error: Optional[errors.ApiError] = None) -> Op:
    """Delete an item read earlier, if unchanged (and ``condition`` holds)."""
    return Op("delete", item, condition=condition, error=error)


def drop(pk: str, sk: str) -> Op:
    """Delete an item by its key, whatever it holds (idempotent: no condition)."""
    return Op("delete", new_item(pk, sk), condition=None, error=None)


def check(pk: str, sk: str, condition: Any, error: errors.ApiError) -> Op:
    """Require ``condition`` on an item without writing it."""
    return Op("check", new_item(pk, sk), condition=condition, error=error)


# ---- writes without a read before them (one call each) -------------------------------------
class Expr:
    """Placeholders of one request's expressions: ``e.path("data", "owner_id")`` → ``#n0.#n1``,
    ``e.value(3)`` → ``:v0``. Conditions of :func:`set_fields` and friends are written with it:
    ``lambda e: f"{e.path('refs')} = {e.value(0)}"``."""

    def __init__(self) -> None:
        self.names: Dict[str, str] = {}
        self.values: Dict[str, Any] = {}

    def path(self, *parts: str) -> str:
        out = []
        for part in parts:
            key = next((k for k, v in self.names.items() if v == part), None)
            if key is None:
                key = f"#n{len(self.names)}"
                self.names[key] = part
            out.append(key)
        return ".".join(out)

    def value(self, value: Any) -> str:
        key = f":v{len(self.values)}"
        self.values[key] = to_av(value)
        return key

    def data(self, name: str) -> str:
        """The path of a field of the item's data."""
        return self.path("data", name)

    def finish(self, request: Dict[str, Any]) -> Dict[str, Any]:
        if self.names:
            request["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            request["ExpressionAttributeValues"] = dict(self.values)
        return request


Condition = Optional[Callable[[Expr], str]]


def _key(pk: str, sk: str) -> Dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def at_version(version: int) -> Condition:
    """A ``require`` for :func:`set_fields`: the item is still at ``version`` (a
    read-modify-write that lost a race gets VersionConflict and runs again)."""
    return lambda e: f"{e.path('version')} = {e.value(version)}"


def set_fields(
    pk: str,
    sk: str,
    fields: Dict[str, Any],
    *,
    refs: int = 0,
    require: Condition = None,
    explain: Optional[Explain] = None,
    missing: Optional[Exception] = None,
) -> Op:
    """Set some fields of an existing item's data (and move its ``refs`` by ``refs``), leaving
    every other field as it is: two writers of different fields never conflict. Bumps the
    version, so a read-modify-write of the same item elsewhere notices the change.

    Condition: the item exists (else ``missing``), and ``require`` holds (else
    ``explain(item as it was)``). With :func:`write` it is one UpdateItem returning the new
    item; in :func:`commit` one part of a transaction.
    """
    e = Expr()
    sets = [f"{e.data(name)} = {e.value(value)}" for name, value in fields.items()]
    adds = [f"{e.path('version')} {e.value(1)}"]
    if refs:
        adds.append(f"{e.path('refs')} {e.value(refs)}")
    expression = (f"SET {', '.join(sets)} " if sets else "") + f"ADD {', '.join(adds)}"
    condition = f"attribute_exists({e.path('pk')})"
    if fields:
        # An item still in the old layout (data as a JSON string) is upgraded first.
        condition += f" AND attribute_type({e.path('data')}, {e.value('M')})"
    if require is not None:
        condition += f" AND ({require(e)})"
    request = e.finish(
        {"Key": _key(pk, sk), "UpdateExpression": expression, "ConditionExpression": condition}
    )
    return Op("update", None, raw=request, explain=_explain(missing, explain))


def remove_item(
    pk: str,
    sk: str,
    *,
    require: Condition = None,
    explain: Optional[Explain] = None,
    missing: Optional[Exception] = None,
) -> Op:
    """Delete an existing item (else ``missing``) if ``require`` holds (else ``explain``)."""
    return _on_existing("delete", pk, sk, require, explain, missing)


def require_item(
    pk: str,
    sk: str,
    *,
    require: Condition = None,
    explain: Optional[Explain] = None,
    missing: Optional[Exception] = None,
) -> Op:
    """A transaction part that only checks: the item exists and ``require`` holds."""
    return _on_existing("check", pk, sk, require, explain, missing)


def _on_existing(
    kind: str,
    pk: str,
    sk: str,
    require: Condition,
    explain: Optional[Explain],
    missing: Optional[Exception],
) -> Op:
    """An operation on an item that must exist and meet ``require`` (delete, check)."""
    e = Expr()
    condition = f"attribute_exists({e.path('pk')})"
    if require is not None:
        condition += f" AND ({require(e)})"
    request = e.finish({"Key": _key(pk, sk), "ConditionExpression": condition})
    return Op(kind, None, raw=request, explain=_explain(missing, explain))


def _explain(missing: Optional[Exception], explain: Optional[Explain]) -> _Why:
    def why(old: Optional[Item]) -> Exception:
        if old is None:
            return missing or errors.NotFound("No such resource exists")
        if explain is not None:
            return explain(old)
        raise VersionConflict()

    return why


class _Legacy(Exception):
    """The item still has its data as a JSON string: upgrade it, then write again."""

    def __init__(self, item: Item) -> None:
        super().__init__("legacy item")
        self.item = item


def _request(op: Op) -> Tuple[str, Dict[str, Any]]:
    """(DynamoDB action, request) of one op; PynamoDB builds those of item-based ops."""
    if op.raw is not None:
        request = dict(op.raw)
    elif op.item is None:
        raise ValueError(f"a {op.action} op needs an item or a raw request")
    elif op.action == "check":
        request = model().get_operation_kwargs_from_class(
            op.item.pk, op.item.sk, condition=op.condition
        )
    elif op.action == "delete":
        request = op.item.get_delete_kwargs_from_instance(
            condition=op.condition, add_version_condition=op.item.version is not None
        )
    elif op.action == "put":
        request = op.item.get_save_kwargs_from_instance(condition=op.condition)
    else:
        request = op.item.get_update_kwargs_from_instance(list(op.actions), condition=op.condition)
    request.pop("ReturnValuesOnConditionCheckFailure", None)
    request["TableName"] = get_settings().table_name
    action = {"check": "ConditionCheck", "delete": "Delete", "put": "Put", "update": "Update"}[
        op.action
    ]
    return action, request


def _failed(op: Op, old_av: Optional[Dict[str, Any]]) -> Exception:
    """The error for an op whose condition failed; ``old_av`` is the item as it was (typed),
    when the store said (else it is read now: a failure path, not a request's normal cost)."""
    if op.explain is None:
        return op.error if op.error is not None else VersionConflict()
    if old_av is None and op.raw is not None:
        old_av = (
            connection()
            .client.get_item(
                TableName=get_settings().table_name, Key=op.raw["Key"], ConsistentRead=True
            )
            .get("Item")
        )
    old = model().from_raw_data(old_av) if old_av else None
    if (
        old is not None
        and old_av
        and "S" in old_av.get("data", {})
        and op.raw is not None
        and "attribute_type" in op.raw.get("ConditionExpression", "")
    ):
        return _Legacy(old)
    try:
        return op.explain(old)
    except VersionConflict as exc:
        return exc


def _upgrade(item: Item) -> None:
    """Rewrite an old-layout item (data as JSON) as a map, if unchanged since it was read."""
    try:
        commit([save(item)])
    except VersionConflict:
        pass


def write(op: Op) -> Optional[Item]:
    """One op as one plain (non-transactional) call: PutItem, UpdateItem or DeleteItem.

    Returns the item as it is now for an update (``ALL_NEW``), as it was for a delete
    (``ALL_OLD``), None for a put. A failed condition raises the op's error (see :class:`Op`);
    the store hands back the item as it was with the failure (``ReturnValuesOnCondition-
    CheckFailure``), so explaining it costs no further read.
    """
    for _ in range(2):
        try:
            return _write_once(op)
        except _Legacy as legacy:
            _upgrade(legacy.item)
    return _write_once(op)


def _write_once(op: Op) -> Optional[Item]:
    action, request = _request(op)
    client = connection().client
    request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    try:
        if action == "Put":
            client.put_item(**request)
            if op.item is not None:
                op.item.update_local_version_attribute()
            return None
        if action == "Update":
            response = client.update_item(ReturnValues="ALL_NEW", **request)
        elif action == "Delete":
            response = client.delete_item(ReturnValues="ALL_OLD", **request)
        else:
            raise ValueError("a lone condition check writes nothing; use get()")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            raise _failed(op, exc.response.get("Item")) from None
        raise
    attributes = response.get("Attributes")
    item = model().from_raw_data(attributes) if attributes else None
    if op.item is not None and item is not None and action == "Update":
        op.item.data, op.item.refs, op.item.version = item.data, item.refs, item.version
    return item


def commit(ops: Iterable[Op]) -> None:
    """Write all ops at once, or none of them.

    One op is one plain write (PutItem/UpdateItem/DeleteItem: half the cost of a
    transactional one); two or more are one TransactWriteItems call (at most 100 ops).
    """
    ops = list(ops)
    if not ops:
        return
    if len(ops) == 1 and ops[0].action != "check":
        write(ops[0])
        return
    if len(ops) > MAX_TRANSACTION_OPS:
        raise errors.BadRequest("Too many items changed in one request")
    for _ in range(2):
        try:
            _transact(ops)
            return
        except _Legacy as legacy:
            _upgrade(legacy.item)
    _transact(ops)


def _transact(ops: List[Op]) -> None:
    items = []
    for op in ops:
        action, request = _request(op)
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        items.append({action: request})
    try:
        connection().client.transact_write_items(TransactItems=items)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") != "TransactionCanceledException":
            if error.get("Code") in (
                "TransactionConflictException",
                "TransactionInProgressException",
            ):
                raise VersionConflict() from None
            raise
        reasons = exc.response.get("CancellationReasons") or []
        for op, reason in zip(ops, reasons):
            if reason.get("Code") == "ConditionalCheckFailed":
                raise _failed(op, reason.get("Item")) from None
        if any(
            r.get("Code") in ("TransactionConflict", "ConditionalCheckFailed") for r in reasons
        ):
            raise VersionConflict() from None
        raise
    for op in ops:
        if op.item is not None and op.action in ("put", "update"):
            op.item.update_local_version_attribute()


T = TypeVar("T")

RETRIES = 8
BACKOFF_BASE = 0.005  # seconds
BACKOFF_CAP = 0.25


def backoff(attempt: int) -> float:
    """Full-jitter exponential backoff: a random wait in [0, min(cap, base * 2**attempt))."""
    return random.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * (2**attempt)))


def retrying(func: Callable[..., T]) -> Callable[..., T]:
    """Run a read-modify-write function again when it lost a race (VersionConflict), after a
    jittered backoff, so racing writers spread out instead of colliding again.

    After RETRIES lost races the caller gets 409 rather than a write based on stale data.
    Writes of single fields (:func:`set_fields`) do not race, so they rarely get here.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        for attempt in range(RETRIES):
            try:
                return func(*args, **kwargs)
            except VersionConflict:
                if attempt + 1 < RETRIES:
                    time.sleep(backoff(attempt))
        raise errors.Conflict(
            "The resource was changed by another request at the same time; retry the request"
        )

    return wrapper
