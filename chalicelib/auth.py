"""API key secrets and the authorizer's identity resolution.

An API key's token is 256 random bits (``secrets.token_urlsafe(32)``), shown once in the
create response. The store keeps only its SHA-256 digest: in the key item and in a lookup
item ``U#api_key_hash#<digest>`` that maps the digest to the key and its owner. A SHA-256 of
a 256-bit random secret needs no salt or slow hash (no dictionary to attack); the lookup is
by digest, and the digest read back is compared with ``hmac.compare_digest``.

:func:`resolve` is what the Chalice authorizer in app.py calls: header → principal, or
:class:`AuthFailed` (the gateway answers 401). Per request it costs two GetItems: the lookup
item and the owner (user or bot) item, so revoking a key, deactivating a bot or deleting an
owner takes effect on the next request (the authorizer's result is never cached).

Credentials (agent authtokens) hold a secret the same way, under their own lookup namespace,
so one cannot stand in for the other. What both share lives here: the owner rule of a create
(:func:`new_owner`), the secret with its item, lookup item and owner check
(:func:`new_secret_item`), the lookup and owner checks of a presented secret
(:func:`lookup_secret`, :func:`usable_owner`) and the owner-or-admin rule of changes.
"""
import hashlib
import hmac
import secrets
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import errors, ids, store, validation
from chalicelib.web import Ctx, Principal

API_KEY_HASH_NAMESPACE = "api_key_hash"
USER_COLLECTION = "user"
BOT_COLLECTION = "bot_user"


class AuthFailed(Exception):
    """The request carries no usable API key. The message must stay "Unauthorized": that is
    how a Lambda authorizer asks API Gateway for a 401 instead of a 500."""

    def __init__(self, reason: str) -> None:
        super().__init__("Unauthorized")
        self.reason = reason


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def bearer_token(header: Optional[str]) -> str:
    if not header:
        raise AuthFailed("missing Authorization header")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise AuthFailed("Authorization header must be 'Bearer <API key>'")
    return token


def owner_item(account_id: str, owner_id: str, owner_kind: str) -> Optional[store.Item]:
    collection = USER_COLLECTION if owner_kind == "user" else BOT_COLLECTION
    return store.get(store.collection_pk(account_id, collection), owner_id)


def lookup_secret(namespace: str, secret: str) -> Optional[Dict[str, Any]]:
    """The lookup item's data of a secret (account, owner, resource id); None when unknown."""
    wanted = digest(secret)
    lookup = store.get(store.unique_pk(namespace, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        return None
    return lookup.data


def usable_owner(data: Dict[str, Any]) -> Tuple[Optional[store.Item], str]:
    """The owner item named by a lookup's data, or (None, why) when it is gone or an
    inactive bot: then neither its API keys nor its credentials may be used."""
    owner = owner_item(data["account_id"], data["owner_id"], data["owner_kind"])
    if owner is None:
        return None, "the owner no longer exists"
    if data["owner_kind"] == "bot" and not owner.data.get("active", False):
        return None, "the owner is an inactive bot user"
    return owner, ""


def resolve(header: Optional[str]) -> Principal:
    """The principal an Authorization header speaks for, or AuthFailed."""
    data = lookup_secret(API_KEY_HASH_NAMESPACE, bearer_token(header))
    if data is None:
        raise AuthFailed("unknown API key")
    owner, why = usable_owner(data)
    if owner is None:
        raise AuthFailed(f"the key cannot be used: {why}")
    role = "member" if data["owner_kind"] == "bot" else owner.data.get("role", "member")
    return Principal(account_id=data["account_id"], id=data["owner_id"],
                     kind=data["owner_kind"], role=role, api_key_id=data["api_key_id"])


# ---- what API keys and credentials share: an owner and a secret -------------------------------
def owner_kind_of(owner_id: str) -> Optional[str]:
    """``user`` or ``bot`` for a user or bot user id; None for anything else."""
    if ids.is_valid(owner_id, ids.PREFIXES["user"]):
        return "user"
    if ids.is_valid(owner_id, ids.PREFIXES["bot_user"]):
        return "bot"
    return None


def _not_an_owner(owner_id: str) -> errors.InvalidField:
    return errors.InvalidField(f"owner_id '{owner_id}' is not a user or bot user of this "
                               "account", details={"field": "owner_id"})


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


def new_secret_item(account_id: str, collection: str, namespace: str, owner_id: str,
                    owner_kind: str, data: Dict[str, Any]
                    ) -> Tuple[store.Item, List[store.Op], str]:
    """A new resource of ``collection`` that holds a secret (an API key, a credential).

    Returns the item, the ops of its one transaction (the item; the lookup item
    ``U#<namespace>#<digest>`` holding account, owner and ``<collection>_id``; a check that
    the owner exists in the account) and the secret itself, to be shown once. Only the
    secret's SHA-256 digest is stored.
    """
    resource_id = ids.new_id(ids.PREFIXES[collection])
    token = new_secret()
    hashed = digest(token)
    owner = {"owner_id": owner_id, "owner_kind": owner_kind}
    item = store.new_item(store.collection_pk(account_id, collection), resource_id,
                          kind=collection, account_id=account_id,
                          data={**data, **owner, "digest": hashed,
                                "created_at": validation.now_rfc3339()})
    lookup = store.new_item(store.unique_pk(namespace, hashed), store.UNIQUE_SK, kind=namespace,
                            account_id=account_id,
                            data={"digest": hashed, "account_id": account_id,
                                  f"{collection}_id": resource_id, **owner})
    owners = USER_COLLECTION if owner_kind == "user" else BOT_COLLECTION
    ops = [store.put_new(item), store.put_new(lookup),
           store.check(store.collection_pk(account_id, owners), owner_id,
                       store.model().pk.exists(), _not_an_owner(owner_id))]
    return item, ops, token


def secret_delete_ops(item: store.Item, namespace: str) -> List[store.Op]:
    """The writes that delete a secret-holding item and its lookup item."""
    return [store.delete(item), store.release(namespace, item.data["digest"])]


def require_owner_or_admin(c: Ctx, item: store.Item, what: str) -> None:
    """Members and bots change only the ``what`` they own (403); admins change all."""
    if item.data["owner_id"] != c.principal.id:
        c.principal.require_admin(f"change {what} owned by another user or bot")


def owned_by(account_id: str, collection: str, owner_id: str) -> List[store.Item]:
    """Every item of the account's ``collection`` owned by ``owner_id`` (one Query)."""
    return [item for item in store.query_all(store.collection_pk(account_id, collection))
            if item.data.get("owner_id") == owner_id]
