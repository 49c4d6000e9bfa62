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
"""
import hashlib
import hmac
import secrets
from typing import Optional

from chalicelib import store
from chalicelib.web import Principal

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


def resolve(header: Optional[str]) -> Principal:
    """The principal an Authorization header speaks for, or AuthFailed."""
    token = bearer_token(header)
    wanted = digest(token)
    lookup = store.get(store.unique_pk(API_KEY_HASH_NAMESPACE, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        raise AuthFailed("unknown API key")
    data = lookup.data
    owner = owner_item(data["account_id"], data["owner_id"], data["owner_kind"])
    if owner is None:
        raise AuthFailed("the key's owner no longer exists")
    if data["owner_kind"] == "bot":
        if not owner.data.get("active", False):
            raise AuthFailed("the key's bot user is inactive")
        role = "member"
    else:
        role = owner.data.get("role", "member")
    return Principal(account_id=data["account_id"], id=data["owner_id"],
                     kind=data["owner_kind"], role=role, api_key_id=data["api_key_id"])
