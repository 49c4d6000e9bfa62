"""The secrets callers present (API keys, authtokens), the SSH public keys of SSH credentials,
and the users and bots that own them.

A secret is never stored: a uniqueness item keyed by its SHA-256 digest in a namespace
(``api_key_hash``, ``credential_token``) names the account, the owner and the resource. An
SSH credential's public key is stored (it is public), and its lookup item is keyed the same
way by the SHA-256 of the key's blob (``ssh_public_key``; chalicelib.core.ssh_keys), which
also makes a key one credential's service-wide. The API's authorizer (``chalicelib.auth``)
and the edge's session authentication (``chalicelib.core.binding``) both look them up here.
"""

import hashlib
import hmac
from typing import Any, Dict, Optional, Tuple

from chalicelib.core import ssh_keys, store

CREDENTIAL_COLLECTION = "credential"
TOKEN_NAMESPACE = "credential_token"
SSH_CREDENTIAL_COLLECTION = "ssh_credential"
SSH_KEY_NAMESPACE = "ssh_public_key"
# SSH certificate authorities (chalicelib.ssh_certificates): the edge finds a CA, and so the
# account, by the SHA-256 of its public key's blob (the key that signed a certificate)
SSH_CA_COLLECTION = "ssh_certificate_authority"
SSH_CA_KEY_NAMESPACE = "ssh_ca_key"
SSH_HOST_CERT_COLLECTION = "ssh_host_certificate"
SSH_USER_CERT_COLLECTION = "ssh_user_certificate"


USER_COLLECTION = "user"


BOT_COLLECTION = "bot_user"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def owner_item(account_id: str, owner_id: str, owner_kind: str) -> Optional[store.Item]:
    return store.get(*owner_key(account_id, owner_id, owner_kind))


def lookup_secret(namespace: str, secret: str) -> Optional[Dict[str, Any]]:
    """The lookup item's data of a secret (account, owner, resource id); None when unknown."""
    wanted = digest(secret)
    lookup = store.get(store.unique_pk(namespace, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        return None
    return lookup.data


def lookup_ssh_key(blob: bytes) -> Optional[Dict[str, Any]]:
    """The lookup item's data of an SSH public key (account, owner, ``ssh_credential_id``),
    by its wire blob; None when no SSH credential has it (one GetItem)."""
    wanted = ssh_keys.digest(blob)
    lookup = store.get(store.unique_pk(SSH_KEY_NAMESPACE, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        return None
    return lookup.data


def lookup_ssh_ca_key(blob: bytes) -> Optional[Dict[str, Any]]:
    """The lookup item's data of an SSH CA's public key (``account_id``,
    ``ssh_certificate_authority_id``), by its wire blob; None when no CA has it (one GetItem)."""
    wanted = ssh_keys.digest(blob)
    lookup = store.get(store.unique_pk(SSH_CA_KEY_NAMESPACE, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        return None
    return lookup.data


def owner_key(account_id: str, owner_id: str, owner_kind: str) -> Tuple[str, str]:
    """(pk, sk) of the owner item (a user or a bot user)."""
    collection = USER_COLLECTION if owner_kind == "user" else BOT_COLLECTION
    return store.collection_pk(account_id, collection), owner_id


def usable_owner(data: Dict[str, Any]) -> Tuple[Optional[store.Item], str]:
    """The owner item named by a lookup's data, or (None, why) when it is gone or an
    inactive bot: then neither its API keys nor its credentials may be used."""
    owner = owner_item(data["account_id"], data["owner_id"], data["owner_kind"])
    return owner_usable(owner, data["owner_kind"])


def owner_usable(owner: Optional[store.Item], owner_kind: str) -> Tuple[Optional[store.Item], str]:
    """:func:`usable_owner`'s rule on an owner item already read (None: it does not exist)."""
    if owner is None:
        return None, "the owner no longer exists"
    if owner_kind == "bot" and not owner.data.get("active", False):
        return None, "the owner is an inactive bot user"
    return owner, ""
