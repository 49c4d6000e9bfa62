"""Reference counters: the ``refs`` of an item counts the resources that refer to it.

A resource that refers to others (an edge to its backend and IP policies, a failover backend
to its members, an edge hostport to its reserved domain or address) describes what it uses as
a :class:`collections.Counter` of ``(collection, id)``; :func:`move` turns the change from
what it used to what it uses into ``refs`` updates that go into the resource's own
transaction. Nothing is read: each update is conditioned on the referenced item existing, so
a new reference to an item that does not exist fails the transaction with the caller's 400,
and a referenced item cannot be deleted meanwhile (its delete requires ``refs == 0``).
"""

from collections import Counter
from typing import Callable, List

from chalicelib.core import errors, store

Missing = Callable[[str, str], errors.ApiError]


def move(account_id: str, before: Counter, after: Counter, missing: Missing) -> List[store.Op]:
    """The ``refs`` updates from ``before`` to ``after``; ``missing(collection, id)`` is the
    error when a newly referenced item does not exist in ``account_id``. A counted item
    cannot vanish, so a failed decrement means a race: retried (VersionConflict)."""
    ops: List[store.Op] = []
    for key in sorted(set(before) | set(after)):
        delta = after[key] - before[key]
        if delta == 0:
            continue
        collection, resource_id = key
        error: Exception = (
            missing(collection, resource_id) if delta > 0 else store.VersionConflict()
        )
        ops.append(
            store.set_fields(
                store.collection_pk(account_id, collection),
                resource_id,
                {},
                refs=delta,
                missing=error,
            )
        )
    return ops


def delete_unreferenced(
    pk: str, sk: str, missing: errors.ApiError, in_use: errors.ApiError, version: int = 0
) -> store.Op:
    """Delete an item only while nothing refers to it: absent is ``missing``, ``refs`` not 0
    is ``in_use`` (one conditional DeleteItem, or one part of a transaction). With
    ``version`` the item must also be unchanged since it was read (else retried)."""

    def require(e: store.Expr) -> str:
        condition = f"{e.path('refs')} = {e.value(0)}"
        if version:
            condition += f" AND {e.path('version')} = {e.value(version)}"
        return condition

    def explain(old: store.Item) -> errors.ApiError:
        if old.refs:
            return in_use
        raise store.VersionConflict()

    return store.remove_item(pk, sk, require=require, missing=missing, explain=explain)
