"""HTTP response backends: ``/backends/http_response``.

Fields: id, uri, created_at, description, metadata, body, headers, status_code.

Rules (where the spec is silent, decided here):
- ``status_code`` is an integer from 100 to 599; 200 when not sent at creation.
- ``body`` is at most 65536 bytes (UTF-8); "" when not sent. A status that forbids a body
  (1xx, 204, 304) together with a non-empty body is a 400 — checked on the result of an
  update too, so a PATCH of only ``status_code: 204`` on a backend with a body is refused.
- ``headers``: at most 50 headers; names are HTTP tokens of at most 256 bytes, returned
  lower-cased, no two differing only in case; values at most 1024 bytes, without CR/LF/NUL.
  ``headers: {}`` (the reference client sends it on create) stores no headers, and no headers
  is returned as ``null``. A PATCH that sends ``headers`` replaces the whole map.
- With these limits an item stays below ~135 KB, far under DynamoDB's 400 KB.
- A backend used by an edge's ``backend`` module, or by a failover or weighted backend, cannot
  be deleted (409) until nothing uses it (its ``refs`` counter is kept by their writes).
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import http_headers, validation, web
from chalicelib.core import errors, ids, routing, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = routing.HTTP_RESPONSE.collection
PREFIX = ids.PREFIXES["http_response_backend"]
PATH = "/backends/http_response"
LIST_KEY = "backends"

MAX_BODY_BYTES = 65536
MAX_HEADERS = 50
DEFAULT_STATUS = routing.DEFAULT_RESPONSE_STATUS


def _status(name: str, value: int) -> int:
    if not 100 <= value <= 599:
        raise errors.InvalidField(
            f"Field '{name}' must be from 100 to 599, got {value}", details={"field": name}
        )
    return value


def _headers(name: str, value: Dict[str, str]) -> Dict[str, str]:
    return http_headers.check_map(name, value, MAX_HEADERS)


FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("body", "string", max_bytes=MAX_BODY_BYTES),
    Field("headers", "object", check=_headers),
    Field("status_code", "integer", check=_status),
]
CREATE_FIELDS = FIELDS
UPDATE_FIELDS = FIELDS


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        "body": data.get("body", ""),
        "headers": data.get("headers") or None,
        "status_code": data.get("status_code", DEFAULT_STATUS),
    }


def _check_body_allowed(data: Dict[str, Any]) -> None:
    status = data.get("status_code", DEFAULT_STATUS)
    if data.get("body") and (status < 200 or status in (204, 304)):
        raise errors.InvalidField(
            f"A backend with status_code {status} cannot have a body: HTTP forbids a body "
            "with 1xx, 204 and 304 responses",
            details={"field": "body"},
        )


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    data = {
        "description": "",
        "metadata": "",
        "body": "",
        "status_code": DEFAULT_STATUS,
        **fields,
        "created_at": validation.now_rfc3339(),
    }
    _check_body_allowed(data)
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        ids.new_id(PREFIX),
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit([store.put_new(item)])
    return render(c, item)


def get_item(account_id: str, backend_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, backend_id, "HTTP response backend")


def get(c: Ctx, backend_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, backend_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def _body_rule(fields: Dict[str, Any]):
    """The condition that keeps "no body with 1xx/204/304" true for the stored fields a PATCH
    does not send (None when the sent fields decide it alone, or it cannot break)."""
    if "status_code" in fields and "body" in fields:
        return None
    status = fields.get("status_code")
    if status is not None and (status < 200 or status in (204, 304)):
        return lambda e: (
            f"attribute_not_exists({e.data('body')}) OR {e.data('body')} = {e.value('')}"
        )
    if fields.get("body"):
        return lambda e: (
            f"attribute_not_exists({e.data('status_code')}) OR "
            f"({e.data('status_code')} >= {e.value(200)} AND "
            f"{e.data('status_code')} <> {e.value(204)} AND "
            f"{e.data('status_code')} <> {e.value(304)})"
        )
    return None


def _missing(backend_id: str) -> errors.NotFound:
    return errors.NotFound(f"No HTTP response backend with id '{backend_id}' exists")


def update(c: Ctx, backend_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields, conditioned on the body rule for the fields it does
    not send (the stored status or body); the 400 names the merged result."""
    if not fields or not ids.is_valid(backend_id, PREFIX):
        return get(c, backend_id)
    if "status_code" in fields and "body" in fields:
        _check_body_allowed(fields)

    def explain(old: store.Item) -> Exception:
        _check_body_allowed({**old.data, **fields})
        return store.VersionConflict()

    item = store.write(
        store.set_fields(
            store.collection_pk(c.account_id, COLLECTION),
            backend_id,
            fields,
            require=_body_rule(fields),
            explain=explain,
            missing=_missing(backend_id),
        )
    )
    return render(c, item)


def delete(c: Ctx, backend_id: str) -> None:
    """One conditional DeleteItem: absent is 404, still used by an edge (``refs`` > 0) 409."""
    if not ids.is_valid(backend_id, PREFIX):
        raise _missing(backend_id)
    store.write(
        store.remove_item(
            store.collection_pk(c.account_id, COLLECTION),
            backend_id,
            require=lambda e: f"{e.path('refs')} = {e.value(0)}",
            missing=_missing(backend_id),
            explain=lambda old: errors.Conflict(
                f"HTTP response backend '{backend_id}' is still used by an edge or another "
                "backend; remove it from there first"
            ),
        )
    )
