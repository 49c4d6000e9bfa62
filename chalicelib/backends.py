"""Backends the edges route to: ``/backends/tunnel_group``, ``/backends/failover`` and
``/backends/weighted`` (HTTP response backends are :mod:`chalicelib.http_response_backends`),
every backend kind's id rules; what the edge reads to act on a backend is
:func:`chalicelib.core.routing.resolve_backend`.

Fields (every one always present):
- tunnel group: id, uri, created_at, description, metadata, ``labels`` (map key → value),
  ``tunnels`` (read-only: Refs of the online tunnels whose labels include all of ``labels``,
  from :func:`chalicelib.core.online.online_tunnels`).
- failover: id, uri, created_at, description, metadata, ``backends`` (ids, in order).
- weighted: id, uri, created_at, description, metadata, ``backends`` (map id → weight).
- static: id, uri, created_at, description, metadata, ``address`` (``host:port``, the edge
  forwards the route's HTTP to it: edge/static.py), ``tls`` ``{enabled}`` (false when unset:
  plain TCP; true: TLS to the address, its certificate verified for its host).

Rules (the hosted docs give the weight range 0–10000 and name limits without numbers;
the numbers here are decided):
- ``labels``: 1 to :data:`MAX_LABELS` pairs; keys 1–:data:`MAX_LABEL_KEY_BYTES` bytes of
  letters, digits, ``_ . / -`` (not starting with ``.``, ``/`` or ``-``), values
  1–:data:`MAX_LABEL_VALUE_BYTES` bytes of letters, digits and ``_ . / : @ -`` (the label
  grammar of credential ACLs, without its ``*``). Keys and values keep their case.
- failover ``backends``: 1 to :data:`MAX_MEMBERS` distinct ids, tried in order.
- weighted ``backends``: 1 to :data:`MAX_MEMBERS` ids, each weight an integer 0–10000, at
  least one weight above 0 (else no request could be sent anywhere).
- Members of failover and weighted backends are tunnel group, HTTP response or static backends of
  the caller's account (400 naming the field and id otherwise). Failover and weighted
  backends do not nest, so no cycle can be built and
  :func:`chalicelib.core.routing.resolve_backend` is two reads at most.
- Create requires the labels / backends. In a PATCH an absent, null or *empty* ``labels`` /
  ``backends`` leaves them unchanged: the reference client sends ``{}`` / ``[]`` on every
  update; a non-empty value replaces them whole.
- ``tunnels`` is read when a tunnel group is rendered: one Query of the account's tunnels and
  one BatchGetItem of their sessions per tunnel group (so a list page costs that per item).
- References are counted like every other: each member's ``refs`` moves in the composite
  backend's transaction, edges' ``backend`` modules count too, and a backend whose ``refs``
  is not 0 cannot be deleted (409) until nothing uses it.
"""

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import rest, validation, web
from chalicelib.core import acl, errors, ids, refs, routing, store
from chalicelib.core.routing import (
    FAILOVER,
    KINDS,
    MEMBER_KINDS,
    STATIC,
    TUNNEL_GROUP,
    WEIGHTED,
    Kind,
    kind_of,
)
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

MAX_LABELS = 10
MAX_LABEL_KEY_BYTES = 64
MAX_LABEL_VALUE_BYTES = 256
MAX_MEMBERS = 10
MAX_WEIGHT = 10000


def _bad(field: str, msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}' {msg}", details={"field": field})


def check_backend_id(
    name: str, value: Any, kinds: Tuple[Kind, ...] = tuple(KINDS.values())
) -> str:
    """A well-formed id of one of ``kinds`` (400 naming ``name`` otherwise)."""
    kind = kind_of(value)
    if kind is None or kind not in kinds:
        allowed = ", ".join(f"{k.what} ({k.prefix}_…)" for k in kinds)
        raise _bad(name, f"must be the id of a backend: {allowed}; got '{str(value)[:64]}'")
    return value


def missing_backend(field: str) -> refs.Missing:
    def error(collection: str, resource_id: str) -> errors.ApiError:
        what = next((k.what for k in KINDS.values() if k.collection == collection), "backend")
        return errors.InvalidField(
            f"Field '{field}': no {what} with id '{resource_id}' exists in this account",
            details={"field": field},
        )

    return error


# ---- fields -------------------------------------------------------------------------------------
_LABEL_KEY_RE = acl.LABEL_KEY_RE
_LABEL_VALUE_RE = acl.LABEL_VALUE_RE


def _check_labels(name: str, value: Dict[str, Any]) -> Dict[str, str]:
    if len(value) > MAX_LABELS:
        raise _bad(name, f"has {len(value)} labels; the limit is {MAX_LABELS}")
    for key, label in value.items():
        if not (0 < validation.utf8_len(key) <= MAX_LABEL_KEY_BYTES) or not _LABEL_KEY_RE.match(
            key
        ):
            raise _bad(
                f"{name}.{key[:64]}",
                f"key '{key[:64]}' must be 1 to "
                f"{MAX_LABEL_KEY_BYTES} bytes of letters, digits, '_', '.', '/', '-' "
                "(starting with a letter, digit or '_')",
            )
        if (
            not isinstance(label, str)
            or not (0 < validation.utf8_len(label) <= MAX_LABEL_VALUE_BYTES)
            or not _LABEL_VALUE_RE.match(label)
        ):
            raise _bad(
                f"{name}.{key}",
                f"value must be a string of 1 to "
                f"{MAX_LABEL_VALUE_BYTES} bytes of letters, digits, '_', '.', '/', "
                "':', '@', '-'",
            )
    return dict(value)


def _check_failover_members(name: str, value: List[Any]) -> List[str]:
    if len(value) > MAX_MEMBERS:
        raise _bad(name, f"has {len(value)} backends; the limit is {MAX_MEMBERS}")
    for index, entry in enumerate(value):
        check_backend_id(f"{name}[{index}]", entry, MEMBER_KINDS)
    if len(set(value)) != len(value):
        raise _bad(name, "lists a backend more than once")
    return list(value)


def _check_weights(name: str, value: Dict[str, Any]) -> Dict[str, int]:
    if len(value) > MAX_MEMBERS:
        raise _bad(name, f"has {len(value)} backends; the limit is {MAX_MEMBERS}")
    for backend_id, weight in value.items():
        check_backend_id(f"{name}.{backend_id[:64]}", backend_id, MEMBER_KINDS)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int)
            or not 0 <= weight <= MAX_WEIGHT
        ):
            raise _bad(
                f"{name}.{backend_id}",
                f"weight must be an integer from 0 to {MAX_WEIGHT}, got {json_repr(weight)}",
            )
    if value and not any(value.values()):
        raise _bad(name, "needs at least one backend with a weight above 0")
    return dict(value)


def json_repr(value: Any) -> str:
    return "null" if value is None else repr(value)[:32]


def _check_failover_field(name: str, value: Any) -> List[str]:
    if not isinstance(value, list):
        raise _bad(name, "must be an array of backend ids")
    return _check_failover_members(name, value)


def _check_address(name: str, value: str) -> str:
    from chalicelib import edge_modules  # it imports this module

    return edge_modules.check_hostport(name, value)


def _check_tls(name: str, value: Dict[str, Any]) -> Dict[str, bool]:
    for key, flag in value.items():
        if key != "enabled":
            raise errors.UnknownField(
                f"Unknown field '{name}.{key}'; accepted fields: enabled",
                details={"field": f"{name}.{key}"},
            )
        if not isinstance(flag, bool):
            raise _bad(f"{name}.enabled", "must be a boolean")
    return {"enabled": bool(value.get("enabled", False))}


LABELS = Field("labels", "object", check=_check_labels)
ADDRESS = Field("address", "string", max_bytes=300, check=_check_address)
STATIC_TLS = Field("tls", "object", check=_check_tls)
FAILOVER_MEMBERS = Field("backends", "any", check=_check_failover_field)
WEIGHTS = Field("backends", "object", check=_check_weights)


_SPEC_FIELD = {
    TUNNEL_GROUP: "labels",
    FAILOVER: "backends",
    WEIGHTED: "backends",
    STATIC: "address",
}
PLAIN_KINDS = (TUNNEL_GROUP, STATIC)  # refer to nothing: an update is one UpdateItem


def _online_tunnels(account_id: str, labels: Dict[str, str]) -> List[str]:
    """Ids of the account's online tunnels whose labels include ``labels``
    (:func:`chalicelib.core.online.online_tunnels`: one Query and one BatchGetItem)."""
    from chalicelib.core import online

    return [t["tunnel_id"] for t in online.online_tunnels(account_id, labels)]


def render(c: Ctx, kind: Kind, item: store.Item) -> Dict[str, Any]:
    data = item.data
    body = web.resource_fields(c, kind.path, item)
    if kind is TUNNEL_GROUP:
        labels = dict(data.get("labels") or {})
        body["labels"] = labels
        body["tunnels"] = [c.ref("/tunnels", t) for t in _online_tunnels(c.account_id, labels)]
    elif kind is STATIC:
        body["address"] = data.get("address", "")
        body["tls"] = {"enabled": bool((data.get("tls") or {}).get("enabled"))}
    elif kind is FAILOVER:
        body["backends"] = list(data.get("backends") or [])
    else:
        body["backends"] = dict(data.get("backends") or {})
    return body


def get_item(account_id: str, kind: Kind, backend_id: str) -> store.Item:
    return store.get_by_id(account_id, kind.collection, kind.prefix, backend_id, kind.what)


def _create(c: Ctx, kind: Kind, fields: Dict[str, Any]) -> Dict[str, Any]:
    spec = _SPEC_FIELD[kind]
    if not fields.get(spec):
        raise errors.MissingField(
            f"Field '{spec}' is required and must not be empty", details={"field": spec}
        )
    data = {"description": "", "metadata": "", **fields, "created_at": validation.now_rfc3339()}
    item = store.new_item(
        store.collection_pk(c.account_id, kind.collection),
        ids.new_id(kind.prefix),
        kind=kind.collection,
        account_id=c.account_id,
        data=data,
    )
    store.commit(
        [store.put_new(item)]
        + refs.move(c.account_id, Counter(), routing.members(kind, data), missing_backend(spec))
    )
    return render(c, kind, item)


def _update(c: Ctx, kind: Kind, backend_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """description/metadata (and labels, which refer to nothing): one UpdateItem; members of
    a failover or weighted backend: GetItem + one write moving the members' counters."""
    spec = _SPEC_FIELD[kind]
    changes = {k: v for k, v in fields.items() if not (k == spec and not v)}
    if changes and (kind in PLAIN_KINDS or spec not in changes):
        missing = errors.NotFound(f"No {kind.what} with id '{backend_id}' exists")
        if not ids.is_valid(backend_id, kind.prefix):
            raise missing
        return render(
            c,
            kind,
            store.write(
                store.set_fields(
                    store.collection_pk(c.account_id, kind.collection),
                    backend_id,
                    changes,
                    missing=missing,
                )
            ),
        )
    item = get_item(c.account_id, kind, backend_id)
    if changes:
        new = {**item.data, **changes}
        ops = refs.move(
            c.account_id,
            routing.members(kind, item.data),
            routing.members(kind, new),
            missing_backend(spec),
        )
        item.data = new
        store.commit([store.save(item)] + ops)
    return render(c, kind, item)


def _delete(c: Ctx, kind: Kind, backend_id: str) -> None:
    """GetItem (its members), then one transaction: the backend, if unchanged and unused
    (409 while ``refs`` is not 0), and its members' counters - 1."""
    item = get_item(c.account_id, kind, backend_id)
    in_use = errors.Conflict(
        f"The {kind.what} '{backend_id}' is still used by an edge or "
        "another backend; remove it from there first"
    )
    missing = errors.NotFound(f"No {kind.what} with id '{backend_id}' exists")
    store.commit(
        [refs.delete_unreferenced(item.pk, item.sk, missing, in_use, version=item.version or 0)]
        + refs.move(
            c.account_id,
            routing.members(kind, item.data),
            Counter(),
            missing_backend(_SPEC_FIELD[kind]),
        )
    )


TUNNEL_GROUP_FIELDS = [DESCRIPTION, METADATA, LABELS]
FAILOVER_FIELDS = [DESCRIPTION, METADATA, FAILOVER_MEMBERS]
WEIGHTED_FIELDS = [DESCRIPTION, METADATA, WEIGHTS]
STATIC_FIELDS = [DESCRIPTION, METADATA, ADDRESS, STATIC_TLS]


def _ops(kind: Kind, create_fields: List[Field]) -> rest.Ops:
    def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
        return store.retrying(_create)(c, kind, fields)

    def get(c: Ctx, backend_id: str) -> Dict[str, Any]:
        return render(c, kind, get_item(c.account_id, kind, backend_id))

    def list_page(
        c: Ctx, limit: int, before_id: Optional[str]
    ) -> Tuple[List[Dict[str, Any]], bool]:
        return web.rendered_page(
            c, kind.collection, limit, before_id, lambda c_, item: render(c_, kind, item)
        )

    def update(c: Ctx, backend_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
        return store.retrying(_update)(c, kind, backend_id, fields)

    def delete(c: Ctx, backend_id: str) -> None:
        store.retrying(_delete)(c, kind, backend_id)

    return rest.Ops(
        prefix=kind.prefix,
        list_key="backends",
        create=create,
        get=get,
        list_page=list_page,
        update=update,
        delete=delete,
        create_fields=create_fields,
        update_fields=create_fields,
    )


TUNNEL_GROUP_OPS = _ops(TUNNEL_GROUP, TUNNEL_GROUP_FIELDS)
FAILOVER_OPS = _ops(FAILOVER, FAILOVER_FIELDS)
WEIGHTED_OPS = _ops(WEIGHTED, WEIGHTED_FIELDS)
STATIC_OPS = _ops(STATIC, STATIC_FIELDS)
