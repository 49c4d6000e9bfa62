"""Bring a table written by an earlier version of the service to the current layout.

Layout version 2 (one store call per operation) changed three things:
1. an item's ``data`` is a DynamoDB map (``M``) instead of a JSON string (``S``), so a PATCH
   can set one field (chalicelib.core.store.set_fields);
2. an API key's lookup item carries its owner's ``role`` and ``active`` (the authorizer reads
   only that item), and every API key and credential has an owner index entry
   (``A#<account>#owned#<owner>`` / ``<id>``: bot deletion and role/active changes find what
   an owner holds without querying a whole collection);
3. HTTPS edge routes live in their edge's partition (``A#<account>#https_edge`` /
   ``<edge id>#<route id>``) instead of ``A#<account>#https_edge_route#<edge id>`` / ``<route id>``.

The service reads old items correctly without this (old ``data`` strings are parsed, an old
lookup makes the authorizer read the owner too), except for routes and owner index entries,
which must be moved or written.

Layout version 3 (TLS modules on the wire) adds the TLS index: one item per hostport
of an HTTPS edge whose ``tls_termination``/``mutual_tls`` ask something of the handshake
(:func:`chalicelib.edge_modules.tls_index_ops`); edges stored before it get their items here. :func:`run_if_needed` does it once (a marker item records the
layout version); ``make run`` calls it at every start, after restoring ``.data``, and
``python -m chalicelib.admin migrate`` runs it against any table. It is idempotent: running it
twice, or on a fresh table, changes nothing.

Layout version 4 (one owner per name) indexes each reserved domain under every name it is under
(:func:`chalicelib.core.reservations.under_index_ops`); domains reserved before it get theirs here.

It scans the table: an operator action, never a request path.
"""

from typing import Any, Dict, Iterator

from chalicelib import auth, edge_modules, reserved_domains
from chalicelib.core import errors, keys, store
from chalicelib.core import reservations

LAYOUT_VERSION = 4
MARKER_PK, MARKER_SK = "META", "LAYOUT"
_OLD_ROUTES = "#https_edge_route#"


def _scan() -> Iterator[Dict[str, Any]]:
    client = store.connection().client
    kwargs: Dict[str, Any] = {"TableName": store.get_settings().table_name, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def current_version() -> int:
    marker = store.get(MARKER_PK, MARKER_SK)
    return int((marker.data or {}).get("version", 1)) if marker is not None else 1


def run_if_needed() -> Dict[str, int]:
    if current_version() >= LAYOUT_VERSION:
        return {}
    return run()


def _put_if_absent(item: store.Item) -> bool:
    try:
        store.commit([store.put_new(item)])
        return True
    except errors.Conflict:
        return False


def run() -> Dict[str, int]:
    """Migrate every item; returns how many of each change were made."""
    counts = {
        "data_maps": 0,
        "lookups": 0,
        "owner_index": 0,
        "routes_moved": 0,
        "tls_index": 0,
        "under_index": 0,
    }
    Model_ = store.model()
    for raw in list(_scan()):
        if "S" in raw.get("data", {}):
            item = Model_.from_raw_data(raw)
            try:
                store.commit([store.save(item)])  # rewrites data as a map
                counts["data_maps"] += 1
            except store.VersionConflict:
                pass
    for raw in list(_scan()):
        item = Model_.from_raw_data(raw)
        data = item.data or {}
        if item.kind == auth.API_KEY_HASH_NAMESPACE and "abuse_reporter" not in data:
            owner = keys.owner_item(data["account_id"], data["owner_id"], data["owner_kind"])
            account = store.get(store.account_pk(data["account_id"]), store.ACCOUNT_SK)
            if owner is not None and account is not None:
                copies = {
                    **auth.owner_state(data["owner_kind"], owner.data),
                    "abuse_reporter": bool(account.data.get("abuse_reporter")),
                }
                store.commit(
                    [store.set_fields(item.pk, item.sk, copies, missing=store.VersionConflict())]
                )
                counts["lookups"] += 1
        elif item.kind in ("api_key", "credential") and "owner_id" in data:
            namespace = (
                auth.API_KEY_HASH_NAMESPACE if item.kind == "api_key" else "credential_token"
            )
            entry = store.new_item(
                auth.owned_pk(item.account_id, data["owner_id"]),
                item.sk,
                kind=auth.OWNED_COLLECTION,
                account_id=item.account_id,
                data={"collection": item.kind, "namespace": namespace, "digest": data["digest"]},
            )
            counts["owner_index"] += _put_if_absent(entry)
        elif (
            item.kind == edge_modules.HTTPS_EDGE
            and "#" not in item.sk
            and edge_modules.tls_of(data)
        ):
            ops = edge_modules.tls_index_ops(item.account_id, item.sk, {}, data)
            store.commit(ops)
            counts["tls_index"] += len(ops)
        elif item.kind == reserved_domains.COLLECTION and "domain" in data:
            ops = reservations.under_index_ops(data["domain"], item.account_id)
            if ops:
                store.commit(ops)
                counts["under_index"] += len(ops)
        elif _OLD_ROUTES in item.pk:
            account_part, _, edge_id = item.pk.partition(_OLD_ROUTES)
            moved = store.new_item(
                f"{account_part}#https_edge",
                f"{edge_id}#{item.sk}",
                kind=item.kind,
                account_id=item.account_id,
                data=data,
            )
            moved.refs = item.refs
            store.commit(
                [store.put_new(moved, errors.Conflict("moved")), store.drop(item.pk, item.sk)]
                if store.get(moved.pk, moved.sk) is None
                else [store.drop(item.pk, item.sk)]
            )
            counts["routes_moved"] += 1
    marker = store.get(MARKER_PK, MARKER_SK) or store.new_item(MARKER_PK, MARKER_SK, kind="meta")
    marker.data = {"version": LAYOUT_VERSION}
    store.commit([store.save(marker)])
    return counts
