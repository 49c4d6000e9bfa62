"""API key secrets and the authorizer's identity resolution.

An API key's token is 256 random bits, written as 43 base62 characters (``0-9A-Za-z``:
62**43 > 2**256), shown once in the create response. Base62 and not base64url: a token
never starts with ``-`` (the agent CLI's ``ngrok authtoken -Xy…`` took such a token for an
unknown flag and saved nothing) and is selected whole by a double click. The store keeps only its SHA-256 digest: in the key item and in a lookup
item ``U#api_key_hash#<digest>`` that maps the digest to the key and its owner. A SHA-256 of
a 256-bit random secret needs no salt or slow hash (no dictionary to attack); the lookup is
by digest, and the digest read back is compared with ``hmac.compare_digest``.

:func:`resolve` is what the Chalice authorizer in app.py calls: header → principal, or
:class:`AuthFailed` (the gateway answers 401). Per request it costs one GetItem: the lookup
item, which carries what the authorizer needs about the owner (account, id, kind, ``role``,
``active``). Those copies are kept in step by the writes that change the owner: deactivating
or reactivating a bot and changing a user's role rewrite the lookups of the owner's keys in
the transaction that changes the owner (:func:`owner_change`), and deleting a bot deletes
them with it. So revoking a key, deactivating a bot or deleting it takes effect on the next
request (the authorizer's result is never cached). A lookup written before these copies
existed is resolved the old way (lookup + owner: two GetItems) until :mod:`chalicelib.
migrate` has rewritten it.

Every secret-holding item also has an *owner index* item ``A#<account>#owned#<owner>`` /
``<resource id>`` (collection, namespace, digest), so what an owner holds is one Query of
its own partition, never of a whole collection. Creating a secret bumps the owner's version
(condition: it exists, with the role/active state copied onto the lookup), so a change of
the owner that read the index before the create cannot miss the new secret: its
version-conditioned write fails and it reads again.

Credentials (agent authtokens) hold a secret the same way, under their own lookup namespace,
so one cannot stand in for the other. What both share lives here: the owner rule of a create
(:func:`new_owner`), the secret with its item, lookup item and owner check
(:func:`new_secret_item`), the lookup and owner checks of a presented secret
(:func:`lookup_secret`, :func:`usable_owner`) and the owner-or-admin rule of changes. SSH
credentials (chalicelib.ssh_credentials) share all of it but the secret: their lookup item
is keyed by the digest of their public key (``hashed``), so bot deletion and the owner
index treat them as they treat credentials.
"""

import secrets
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from chalicelib import validation
from chalicelib.core import errors, ids, store
from chalicelib.core.keys import (
    BOT_COLLECTION,
    USER_COLLECTION,
    digest,
    lookup_secret,
    usable_owner,
)
from chalicelib.web import Ctx, Principal

API_KEY_HASH_NAMESPACE = "api_key_hash"


class AuthFailed(Exception):
    """The request carries no usable API key. The message must stay "Unauthorized": that is
    how a Lambda authorizer asks API Gateway for a 401 instead of a 500."""

    def __init__(self, reason: str) -> None:
        super().__init__("Unauthorized")
        self.reason = reason


SECRET_LENGTH = 43  # base62 characters: 43 * log2(62) = 256.03 bits


def new_secret() -> str:
    return "".join(secrets.choice(ids.ALPHABET) for _ in range(SECRET_LENGTH))


def bearer_token(header: Optional[str]) -> str:
    if not header:
        raise AuthFailed("missing Authorization header")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise AuthFailed("Authorization header must be 'Bearer <API key>'")
    return token


def resolve(header: Optional[str]) -> Principal:
    """The principal an Authorization header speaks for, or AuthFailed (one GetItem)."""
    data = lookup_secret(API_KEY_HASH_NAMESPACE, bearer_token(header))
    if data is None:
        raise AuthFailed("unknown API key")
    if "active" in data and "role" in data:
        if not data["active"]:
            raise AuthFailed("the key cannot be used: the owner is an inactive bot user")
        role = data["role"]
    else:  # a lookup from before the copies: read the owner (see chalicelib.migrate)
        owner, why = usable_owner(data)
        if owner is None:
            raise AuthFailed(f"the key cannot be used: {why}")
        role = "member" if data["owner_kind"] == "bot" else owner.data.get("role", "member")
    reporter = data.get("abuse_reporter")
    audit_types = data.get("audit_types")
    ip_restricted = data.get("ip_restricted")
    return Principal(
        account_id=data["account_id"],
        id=data["owner_id"],
        kind=data["owner_kind"],
        role=role,
        api_key_id=data["api_key_id"],
        abuse_reporter=reporter if isinstance(reporter, bool) else None,
        audit_types=audit_types if isinstance(audit_types, str) else None,
        ip_restricted=ip_restricted if isinstance(ip_restricted, str) else None,
    )


# ---- what API keys and credentials share: an owner and a secret -------------------------------
def owner_kind_of(owner_id: str) -> Optional[str]:
    """``user`` or ``bot`` for a user or bot user id; None for anything else."""
    if ids.is_valid(owner_id, ids.PREFIXES["user"]):
        return "user"
    if ids.is_valid(owner_id, ids.PREFIXES["bot_user"]):
        return "bot"
    return None


def _not_an_owner(owner_id: str) -> errors.InvalidField:
    return errors.InvalidField(
        f"owner_id '{owner_id}' is not a user or bot user of this account",
        details={"field": "owner_id"},
    )


def new_owner(c: Ctx, owner_id: Optional[str], what: str) -> Tuple[str, str]:
    """(id, kind) of the owner of a new ``what``: ``owner_id``, or the caller when unset.

    Only admins may name another principal (403); the id must be a user or bot user id
    (400). That it exists in the caller's account is checked by :func:`new_secret_item`'s
    ops, in the creating transaction.
    """
    owner_id = owner_id or c.principal.id
    if owner_id != c.principal.id:
        c.principal.require_admin(f"create {what} owned by another user or bot")
    kind = owner_kind_of(owner_id)
    if kind is None:
        raise _not_an_owner(owner_id)
    return owner_id, kind


OWNED_COLLECTION = "owned"


def owned_pk(account_id: str, owner_id: str) -> str:
    """The partition of the owner index of ``owner_id``."""
    return store.collection_pk(account_id, f"{OWNED_COLLECTION}#{owner_id}")


def owner_pk(account_id: str, owner_kind: str) -> str:
    return store.collection_pk(
        account_id, USER_COLLECTION if owner_kind == "user" else BOT_COLLECTION
    )


def owner_state(owner_kind: str, owner_data: Dict[str, Any]) -> Dict[str, Any]:
    """What an API key's lookup copies from its owner: ``role`` and ``active``."""
    if owner_kind == "bot":
        return {"role": "member", "active": bool(owner_data.get("active", False))}
    return {"role": owner_data.get("role", "member"), "active": True}


class OwnerChanged(Exception):
    """The owner's state was not the one assumed when copying it; retry with ``state``."""

    def __init__(self, state: Dict[str, Any]) -> None:
        super().__init__("owner changed")
        self.state = state


def new_secret_item(
    account_id: str,
    collection: str,
    namespace: str,
    owner_id: str,
    owner_kind: str,
    data: Dict[str, Any],
    state: Optional[Dict[str, Any]] = None,
    *,
    hashed: Optional[str] = None,
    taken: Optional[Callable[[Optional[store.Item]], Exception]] = None,
) -> Tuple[store.Item, List[store.Op], str]:
    """A new resource of ``collection`` that holds a secret (an API key, a credential), or
    is found by a digest it is given (``hashed``: an SSH credential's public key, where
    ``taken`` explains a lookup item that exists already; the secret returned is then "").

    Returns the item, the ops of its one transaction and the secret itself, to be shown once.
    The ops: the item; the lookup item ``U#<namespace>#<digest>`` holding account, owner,
    ``<collection>_id`` (and for API keys the owner's ``role``/``active`` as ``state`` says);
    the owner index item; and a version bump of the owner conditioned on its existence in the
    account (400 otherwise) and, for API keys, on ``state`` (else :class:`OwnerChanged`).
    Only the secret's SHA-256 digest is stored.
    """
    resource_id = ids.new_id(ids.PREFIXES[collection])
    token = "" if hashed else new_secret()
    hashed = hashed or digest(token)
    owner = {"owner_id": owner_id, "owner_kind": owner_kind}
    item = store.new_item(
        store.collection_pk(account_id, collection),
        resource_id,
        kind=collection,
        account_id=account_id,
        data={**data, **owner, "digest": hashed, "created_at": validation.now_rfc3339()},
    )
    lookup_data = {
        "digest": hashed,
        "account_id": account_id,
        f"{collection}_id": resource_id,
        **owner,
    }
    require = None
    extra: List[store.Op] = []
    if namespace == API_KEY_HASH_NAMESPACE:
        state = {
            "role": "member",
            "active": True,
            "abuse_reporter": False,
            "audit_types": None,
            "ip_restricted": "",
            **(state or {}),
        }
        lookup_data.update(
            role=state["role"], active=state["active"], abuse_reporter=state["abuse_reporter"]
        )
        reporter, audit_types = state["abuse_reporter"], state["audit_types"]
        if audit_types is not None:
            lookup_data["audit_types"] = audit_types
        restricted = state["ip_restricted"] or ""
        if restricted:
            lookup_data["ip_restricted"] = restricted

        def copied(e: Any) -> str:
            # the account's copied facts are the ones this lookup gets (else OwnerChanged)
            types = (
                f"attribute_not_exists({e.data('audit_types')})"
                if audit_types is None
                else f"{e.data('audit_types')} = {e.value(audit_types)}"
            )
            restricts = (
                f"{e.data('ip_restricted')} = {e.value(restricted)}"
                if restricted
                else f"(attribute_not_exists({e.data('ip_restricted')})"
                f" OR {e.data('ip_restricted')} = {e.value('')})"
            )
            return f"{e.data('abuse_reporter')} = {e.value(reporter)} AND {types} AND {restricts}"

        extra.append(
            store.require_item(
                store.account_pk(account_id),
                store.ACCOUNT_SK,
                require=copied,
                missing=_not_an_owner(owner_id),
                explain=lambda old: OwnerChanged(
                    {
                        **state,
                        "abuse_reporter": bool(old.data.get("abuse_reporter")),
                        "audit_types": old.data.get("audit_types"),
                        "ip_restricted": old.data.get("ip_restricted") or "",
                    }
                ),
            )
        )
        if owner_kind == "bot":
            require = lambda e: f"{e.data('active')} = {e.value(state['active'])}"  # noqa: E731
        else:
            require = lambda e: f"{e.data('role')} = {e.value(state['role'])}"  # noqa: E731
    lookup = store.new_item(
        store.unique_pk(namespace, hashed),
        store.UNIQUE_SK,
        kind=namespace,
        account_id=account_id,
        data=lookup_data,
    )
    index = store.new_item(
        owned_pk(account_id, owner_id),
        resource_id,
        kind=OWNED_COLLECTION,
        account_id=account_id,
        data={"collection": collection, "namespace": namespace, "digest": hashed},
    )
    claim = store.put_new(lookup)
    claim.explain = taken
    ops = [
        store.put_new(item),
        claim,
        store.put_new(index),
        store.set_fields(
            owner_pk(account_id, owner_kind),
            owner_id,
            {},
            require=require,
            missing=_not_an_owner(owner_id),
            explain=lambda old: OwnerChanged(
                {**(state or {}), **owner_state(owner_kind, old.data)}
            ),
        ),
    ]
    return item, ops + extra, token


def create_secret(
    account_id: str,
    collection: str,
    namespace: str,
    owner_id: str,
    owner_kind: str,
    data: Dict[str, Any],
    state: Optional[Dict[str, Any]] = None,
    **found_by: Any,
) -> Tuple[store.Item, str]:
    """Create a secret-holding item in one transaction; (item, secret). ``found_by``:
    ``hashed`` and ``taken`` of :func:`new_secret_item`.

    ``state`` is the owner's role/active as the caller knows it (its own, from the
    authorizer); when the owner turns out to differ, the create is built again with the
    owner's actual state (one more call)."""
    for attempt in range(store.RETRIES):
        item, ops, token = new_secret_item(
            account_id, collection, namespace, owner_id, owner_kind, data, state, **found_by
        )
        try:
            store.commit(ops)
            return item, token
        except OwnerChanged as changed:
            state = changed.state
        except store.VersionConflict:  # another create bumped the owner at the same time
            time.sleep(store.backoff(attempt))
    raise errors.Conflict(
        "The owner was changed by another request at the same time; retry the request"
    )


def caller_state(c: Ctx, owner_id: str) -> Optional[Dict[str, Any]]:
    """What the caller knows of the owner's copied state: its own role/active when it is the
    owner (it just authenticated), and the account's abuse-reporter flag."""
    state: Dict[str, Any] = {}
    if c.principal.abuse_reporter is not None:
        state["abuse_reporter"] = c.principal.abuse_reporter
    if c.principal.audit_types is not None:
        state["audit_types"] = c.principal.audit_types
    state["ip_restricted"] = c.principal.ip_restricted or ""
    if owner_id == c.principal.id:
        state.update(role=c.principal.role, active=True)
    return state or None


def secret_delete_ops(item: store.Item, namespace: str) -> List[store.Op]:
    """The writes that delete a secret-holding item, its lookup item and its index item."""
    return [
        store.delete(item),
        store.release(namespace, item.data["digest"]),
        store.drop(owned_pk(item.account_id, item.data["owner_id"]), item.sk),
    ]


def owned(account_id: str, owner_id: str) -> List[store.Item]:
    """The owner index of ``owner_id``: one item per secret it holds (one Query of its own
    partition)."""
    return store.query_all(owned_pk(account_id, owner_id))


def owned_delete_ops(entry: store.Item) -> List[store.Op]:
    """The writes that delete what an index entry names: the resource, its lookup, the entry
    (none conditioned: deleting what is already gone is a no-op)."""
    data = entry.data
    return [
        store.drop(store.collection_pk(entry.account_id, data["collection"]), entry.sk),
        store.release(data["namespace"], data["digest"]),
        store.drop(entry.pk, entry.sk),
    ]


def owner_change(
    owner: store.Item, owner_kind: str, new_data: Dict[str, Any], extra_ops: List[store.Op]
) -> None:
    """Save an owner read earlier with ``new_data`` (version-conditioned), with ``extra_ops``,
    and when its role/active change, rewrite the copies on the lookups of its API keys.

    Cost: when the copies change, one Query of the owner index; then one transaction when
    owner + ops + lookups fit in 100 writes, else the lookups in transactions of 100 first
    and the owner last (so an interruption leaves the owner unchanged, to be retried). A key
    created meanwhile bumps the owner's version, so the owner's write fails and the caller's
    retry reads again.
    """
    old_state = owner_state(owner_kind, owner.data)
    new_state = owner_state(owner_kind, new_data)
    lookups: List[store.Op] = []
    if old_state != new_state:
        for entry in owned(owner.account_id, owner.sk):
            if entry.data.get("namespace") == API_KEY_HASH_NAMESPACE:
                lookups.append(
                    store.set_fields(
                        store.unique_pk(API_KEY_HASH_NAMESPACE, entry.data["digest"]),
                        store.UNIQUE_SK,
                        new_state,
                        missing=store.VersionConflict(),
                    )
                )
    owner.data = new_data
    head = [store.save(owner)] + extra_ops
    room = store.MAX_TRANSACTION_OPS - len(head)
    while len(lookups) > room:
        store.commit(lookups[: store.MAX_TRANSACTION_OPS])
        lookups = lookups[store.MAX_TRANSACTION_OPS :]
    store.commit(head + lookups)


def update_owned(
    c: Ctx,
    collection: str,
    prefix: str,
    resource_id: str,
    fields: Dict[str, Any],
    what: str,
    plural: str,
) -> store.Item:
    """Set ``fields`` of a secret-holding item: one UpdateItem returning the item, conditioned
    on the owner for members and bots (403 when another principal owns it, 404 when absent)."""
    missing = errors.NotFound(f"No {what} with id '{resource_id}' exists")
    if not ids.is_valid(resource_id, prefix):
        raise missing
    pk = store.collection_pk(c.account_id, collection)
    if not fields:
        item = store.get(pk, resource_id)
        if item is None:
            raise missing
        require_owner_or_admin(c, item, plural)
        return item
    require = None
    if not c.principal.is_admin:
        me = c.principal.id
        require = lambda e: f"{e.data('owner_id')} = {e.value(me)}"  # noqa: E731
    return store.write(
        store.set_fields(
            pk,
            resource_id,
            fields,
            require=require,
            missing=missing,
            explain=lambda old: errors.Forbidden(
                f"Only admins may change {plural} owned by another user or bot"
            ),
        )
    )


def require_owner_or_admin(c: Ctx, item: store.Item, what: str) -> None:
    """Members and bots change only the ``what`` they own (403); admins change all."""
    if item.data["owner_id"] != c.principal.id:
        c.principal.require_admin(f"change {what} owned by another user or bot")


def set_account_copies(account_id: str, fields: Dict[str, Any]) -> int:
    """Write account-wide facts (``abuse_reporter``, ``audit_types``, ``ip_restricted``) onto
    every API key lookup of the account, after the account item itself was changed: keys
    created from then on copy the new value (their creation is conditioned on the account's
    value), keys created before are in an owner index by now. One Query per user and bot
    partition and per owner, one UpdateItem per key: an operator action. Returns the number
    of lookups written."""
    written = 0
    for collection in (USER_COLLECTION, BOT_COLLECTION):
        for owner in store.query_all(store.collection_pk(account_id, collection)):
            for entry in owned(account_id, owner.sk):
                if entry.data.get("namespace") != API_KEY_HASH_NAMESPACE:
                    continue
                try:
                    store.write(
                        store.set_fields(
                            store.unique_pk(API_KEY_HASH_NAMESPACE, entry.data["digest"]),
                            store.UNIQUE_SK,
                            fields,
                            missing=store.VersionConflict(),
                        )
                    )
                    written += 1
                except store.VersionConflict:
                    pass  # the key was deleted meanwhile
    return written


def owned_by(account_id: str, collection: str, owner_id: str) -> List[store.Item]:
    """Every item of the account's ``collection`` owned by ``owner_id``: one Query of the
    owner index, then one GetItem per entry (not a Query of the whole collection)."""
    items = []
    for entry in owned(account_id, owner_id):
        if entry.data.get("collection") == collection:
            item = store.get(store.collection_pk(account_id, collection), entry.sk)
            if item is not None:
                items.append(item)
    return items
