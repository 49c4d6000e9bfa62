"""Event subscriptions ``/event_subscriptions`` and their sources
``/event_subscriptions/{id}/sources`` (the hosted API's *event sources*).

Subscription fields: id, uri, created_at, metadata, description, sources (``[{type, uri}]``),
destinations (Refs). Source fields: type, uri.

Rules (where the spec is silent, decided here):
- ``sources`` are ``[{"type": …}]`` of the event types this service emits
  (chalicelib.core.event_targets.EVENT_TYPES: ``http_request_complete.v0``,
  ``tcp_connection_closed.v0``), each at most once; another type is a 400 listing them.
- ``destination_ids``: 0–10 distinct ids of the account's event destinations (400 naming
  the id otherwise). A subscription without sources or destinations is kept and delivers
  nothing.
- A PATCH's ``sources`` / ``destination_ids`` replace the lists when sent. The reference
  client sends ``sources: []`` on every update, so an empty ``sources`` means unchanged
  (remove sources with ``DELETE …/sources/{type}``); ``destination_ids: []`` removes every
  destination (the client leaves it out when not updating it).
- At most 100 subscriptions per account (one Query before the write): the edge reads an
  account's subscriptions in one Query page.
- Sources: ``POST …/sources`` adds a type (409 when present), ``GET …/sources`` lists,
  ``GET/PATCH …/sources/{type}`` reads (PATCH changes nothing: a source has no field but its
  type), ``DELETE …/sources/{type}`` removes (404 when absent).

Store calls: create 1 Query + 1 TransactWriteItems (the subscription, each destination's
``refs`` + 1); update 1 GetItem + 1 TransactWriteItems (moved ``refs``) or 1 UpdateItem;
delete 1 GetItem + 1 TransactWriteItems; sources 1 GetItem (+ 1 conditional UpdateItem).
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from chalicelib import validation, web
from chalicelib.core import errors, event_targets, ids, store
from chalicelib import event_destinations
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = event_targets.COLLECTION_SUBSCRIPTION
PREFIX = ids.PREFIXES["event_subscription"]
PATH = "/event_subscriptions"
LIST_KEY = "event_subscriptions"


def _check_ids(name: str, value: List[str]) -> List[str]:
    if len(set(value)) != len(value):
        raise errors.InvalidField(f"Field '{name}' repeats an id", details={"field": name})
    return value


SOURCES = Field("sources", "any", check=event_targets.check_sources)
DESTINATION_IDS = Field(
    "destination_ids",
    "string_list",
    max_bytes=64,
    max_items=event_targets.MAX_DESTINATIONS,
    check=_check_ids,
)
CREATE_FIELDS = [DESCRIPTION, METADATA, SOURCES, DESTINATION_IDS]
UPDATE_FIELDS = CREATE_FIELDS


def source_uri(c: Ctx, subscription_id: str, kind: str) -> str:
    return c.uri(f"{PATH}/{subscription_id}/sources/{kind}")


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "sources": [_source(c, item.sk, t, data) for t in data.get("sources", [])],
        "destinations": [
            c.ref(event_destinations.PATH, d) for d in data.get("destination_ids", [])
        ],
    }


def _bad_destination(destination_id: str) -> errors.InvalidField:
    return errors.InvalidField(
        f"Field 'destination_ids': no event destination with id "
        f"'{destination_id[:64]}' exists in this account",
        details={"field": "destination_ids"},
    )


def _refs(account_id: str, destination_ids: List[str], step: int) -> List[store.Op]:
    ops = []
    for destination_id in destination_ids:
        if not ids.is_valid(destination_id, event_destinations.PREFIX):
            raise _bad_destination(destination_id)
        missing = _bad_destination(destination_id) if step > 0 else store.VersionConflict()
        ops.append(
            store.set_fields(
                store.collection_pk(account_id, event_destinations.COLLECTION),
                destination_id,
                {},
                refs=step,
                missing=missing,
            )
        )
    return ops


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One Query (the account's count), then one transaction: the subscription and each
    destination's ``refs`` + 1 on condition that it exists (400 naming it otherwise)."""
    destinations = fields.get("destination_ids") or []
    if "sources" in fields:  # checked entries -> the stored types and their filter/fields
        fields.update(event_targets.split_sources(fields.pop("sources")))
    refs = _refs(c.account_id, destinations, 1)
    event_destinations.require_room(c.account_id, COLLECTION, "event subscription")
    data = {
        "description": "",
        "metadata": "",
        "sources": [],
        "destination_ids": [],
        **fields,
        "created_at": validation.now_rfc3339(),
    }
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        ids.new_id(PREFIX),
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit([store.put_new(item)] + refs)
    return render(c, item)


def get_item(account_id: str, subscription_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, subscription_id, "event subscription")


def get(c: Ctx, subscription_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, subscription_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


@store.retrying
def update(c: Ctx, subscription_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Plain fields: one UpdateItem. New ``destination_ids``: read, then one transaction of
    the subscription (unchanged since read) and the moved ``refs``."""
    if not fields.get("sources"):
        fields.pop("sources", None)  # the reference client sends [] when not updating them
    else:
        fields.update(event_targets.split_sources(fields.pop("sources")))
    if not ids.is_valid(subscription_id, PREFIX) or not fields:
        return get(c, subscription_id)
    pk = store.collection_pk(c.account_id, COLLECTION)
    missing = errors.NotFound(f"No event subscription with id '{subscription_id}' exists")
    if "destination_ids" not in fields:
        return render(
            c, store.write(store.set_fields(pk, subscription_id, fields, missing=missing))
        )
    item = get_item(c.account_id, subscription_id)
    old = item.data.get("destination_ids", [])
    new = fields["destination_ids"]
    added = [d for d in new if d not in old]
    removed = [d for d in old if d not in new]
    item.data = {**item.data, **fields}
    store.commit(
        [store.save(item)] + _refs(c.account_id, added, 1) + _refs(c.account_id, removed, -1)
    )
    return render(c, item)


@store.retrying
def delete(c: Ctx, subscription_id: str) -> None:
    """Read (which destinations it counts in), then one transaction: the subscription and
    each destination's ``refs`` - 1."""
    item = get_item(c.account_id, subscription_id)
    store.commit(
        [store.delete(item)] + _refs(c.account_id, item.data.get("destination_ids", []), -1)
    )


# ---- sources ------------------------------------------------------------------------------
def _source(
    c: Ctx, subscription_id: str, kind: str, data: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """A source as the API returns it: type and uri, and its filter and fields when set."""
    out: Dict[str, Any] = {"type": kind, "uri": source_uri(c, subscription_id, kind)}
    options = event_targets.source_options(data or {}, kind)
    if options["filter"] or options["fields"]:
        out.update(options)
    return out


def _no_source(subscription_id: str, kind: str) -> errors.NotFound:
    return errors.NotFound(
        f"Event subscription '{subscription_id}' has no source of type '{kind[:64]}'"
    )


SOURCE_FIELDS = [
    Field("type", "string", required=True, max_bytes=64, check=event_targets.check_source_type),
    Field("filter", "any"),  # checked with the type: event_targets.check_options
    Field("fields", "any"),
]
SOURCE_UPDATE_FIELDS = SOURCE_FIELDS[1:]


@store.retrying
def create_source(
    c: Ctx, subscription_id: str, fields: Callable[[], Dict[str, Any]]
) -> Dict[str, Any]:
    """Read the subscription (404 first), then the body (``fields()``), then one write."""
    item = get_item(c.account_id, subscription_id)
    body = fields()
    kind = body["type"]
    checked = event_targets.check_options("", kind, body)
    sources = list(item.data.get("sources", []))
    if kind in sources:
        raise errors.Conflict(
            f"Event subscription '{subscription_id}' already has a source of type '{kind}'"
        )
    item.data = {**item.data, **_with_source(item.data, checked, sources + [kind])}
    store.commit([store.save(item)])
    return _source(c, subscription_id, kind, item.data)


def _with_source(
    data: Dict[str, Any], checked: Dict[str, Any], sources: List[str]
) -> Dict[str, Any]:
    options = {k: v for k, v in (data.get("source_options") or {}).items() if k in sources}
    options.pop(checked["type"], None)
    if checked["filter"] or checked["fields"]:
        options[checked["type"]] = {"filter": checked["filter"], "fields": checked["fields"]}
    return {"sources": sources, "source_options": options}


@store.retrying
def update_source(
    c: Ctx, subscription_id: str, kind: str, fields: Callable[[], Dict[str, Any]]
) -> Dict[str, Any]:
    """Replace a source's ``filter`` and ``fields`` (those sent; the others stay)."""
    item = get_item(c.account_id, subscription_id)
    if kind not in item.data.get("sources", []):
        raise _no_source(subscription_id, kind)
    body = {**event_targets.source_options(item.data, kind), **fields()}
    checked = event_targets.check_options("", kind, body)
    item.data = {**item.data, **_with_source(item.data, checked, item.data["sources"])}
    store.commit([store.save(item)])
    return _source(c, subscription_id, kind, item.data)


def list_sources(c: Ctx, subscription_id: str) -> Dict[str, Any]:
    item = get_item(c.account_id, subscription_id)
    return {
        "sources": [
            _source(c, subscription_id, t, item.data) for t in item.data.get("sources", [])
        ],
        "uri": c.uri(f"{PATH}/{subscription_id}/sources"),
    }


def get_source(c: Ctx, subscription_id: str, kind: str) -> Dict[str, Any]:
    item = get_item(c.account_id, subscription_id)
    if kind not in item.data.get("sources", []):
        raise _no_source(subscription_id, kind)
    return _source(c, subscription_id, kind, item.data)


@store.retrying
def delete_source(c: Ctx, subscription_id: str, kind: str) -> None:
    item = get_item(c.account_id, subscription_id)
    sources = list(item.data.get("sources", []))
    if kind not in sources:
        raise _no_source(subscription_id, kind)
    sources.remove(kind)
    options = dict(item.data.get("source_options") or {})
    options.pop(kind, None)
    item.data = {**item.data, "sources": sources, "source_options": options}
    store.commit([store.save(item)])
