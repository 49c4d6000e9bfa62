"""Event destinations ``/event_destinations``: where an account's events are delivered.

Fields: id, uri, created_at, metadata, description, format, target (the hosted API's).

Rules (where the spec is silent, decided here; the target's rules are in
chalicelib.core.event_targets):
- ``format`` is ``json`` (the only format the hosted API accepts; ``JSON`` is the same;
  ``""``, what the reference client sends by default, and absent mean ``json``).
- ``target`` is required at creation: exactly one of ``kinesis``, ``firehose`` or
  ``cloudwatch_logs``, with ``auth`` (an AssumeRole ARN or an access key pair); ``datadog``,
  ``azure_logs_ingestion`` and ``s3`` are a 400 saying they are not offered. A PATCH's
  ``target`` replaces the whole target; the secret access key may be left out when the key
  id is unchanged (a client that read the destination has none to send back).
- The secret access key is sealed at rest (chalicelib.core.keywrap, bound to account and
  destination) and never returned: ``creds.aws_secret_access_key`` is always ``null``.
- At most 100 destinations per account (checked with one Query before the write).
- A destination used by a subscription cannot be deleted (409; ``refs`` counts the
  subscriptions naming it, moved in their transactions).
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import validation, web
from chalicelib.core import errors, event_targets, ids, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = event_targets.COLLECTION_DESTINATION
PREFIX = ids.PREFIXES["event_destination"]
PATH = "/event_destinations"
LIST_KEY = "event_destinations"


def _check_format(name: str, value: str) -> str:
    if value.lower() not in ("json", ""):  # "": the reference client's default
        raise errors.InvalidField(
            f"Field '{name}' must be 'json' (the only format offered)", details={"field": name}
        )
    return "json"


FORMAT = Field("format", "string", max_bytes=16, check=_check_format)
TARGET = Field("target", "object")
CREATE_FIELDS = [DESCRIPTION, METADATA, FORMAT, Field("target", "object", required=True)]
UPDATE_FIELDS = [DESCRIPTION, METADATA, FORMAT, TARGET]


def _sealed(account_id: str, destination_id: str, target: Dict[str, Any]) -> Dict[str, Any]:
    """The target as stored: a creds secret sealed (``aws_secret_access_key_sealed``)."""
    return event_targets.seal_target(account_id, destination_id, target)


open_target = event_targets.open_target


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "format": data.get("format", "json"),
        "target": event_targets.rendered_target(data["target"]),
    }


def require_room(account_id: str, collection: str, what: str) -> None:
    items, _ = store.query_page(
        store.collection_pk(account_id, collection), event_targets.MAX_PER_ACCOUNT
    )
    if len(items) >= event_targets.MAX_PER_ACCOUNT:
        raise errors.Conflict(
            f"This account has {event_targets.MAX_PER_ACCOUNT} {what}s, the "
            "most it may have; delete one first"
        )


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    target = event_targets.check_target(fields.pop("target"))
    require_room(c.account_id, COLLECTION, "event destination")
    destination_id = ids.new_id(PREFIX)
    data = {
        "description": "",
        "metadata": "",
        "format": "json",
        **fields,
        "target": _sealed(c.account_id, destination_id, target),
        "created_at": validation.now_rfc3339(),
    }
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        destination_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit([store.put_new(item)])
    return render(c, item)


def get_item(account_id: str, destination_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, destination_id, "event destination")


def get(c: Ctx, destination_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, destination_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def _missing(destination_id: str) -> errors.NotFound:
    return errors.NotFound(f"No event destination with id '{destination_id}' exists")


def update(c: Ctx, destination_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields; with a ``target``, one GetItem first (the stored
    secret is kept when the same key id comes without one)."""
    if not fields or not ids.is_valid(destination_id, PREFIX):
        return get(c, destination_id)
    if "target" in fields:
        # the stored target: its sealed secret is kept as it is when the key id is unchanged
        old = get_item(c.account_id, destination_id).data["target"]
        fields["target"] = _sealed(
            c.account_id, destination_id, event_targets.check_target(fields["target"], old)
        )
    return render(
        c,
        store.write(
            store.set_fields(
                store.collection_pk(c.account_id, COLLECTION),
                destination_id,
                fields,
                missing=_missing(destination_id),
            )
        ),
    )


def delete(c: Ctx, destination_id: str) -> None:
    """One conditional DeleteItem: 404 when absent, 409 while subscriptions use it."""
    if not ids.is_valid(destination_id, PREFIX):
        raise _missing(destination_id)
    store.write(
        store.remove_item(
            store.collection_pk(c.account_id, COLLECTION),
            destination_id,
            require=lambda e: f"{e.path('refs')} = {e.value(0)}",
            missing=_missing(destination_id),
            explain=lambda old: errors.Conflict(
                f"Event destination '{destination_id}' is still used by {old.refs} event "
                "subscription(s); remove it from them first"
            ),
        )
    )
