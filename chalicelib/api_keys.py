"""API keys: ``/api_keys``.

Fields: id, uri, description, metadata, created_at, owner_id, token (the secret, in the
create response only; ``null`` everywhere else).

Rules (where the spec is silent, decided here):
- ``owner_id`` defaults to the caller. Only admins may name another owner (403); the owner
  must be a user or bot user of the caller's account (400 otherwise).
- Every principal of the account may read every key of the account (no secret is ever
  readable). A member may update or delete only the keys it owns (403); admins manage all.
- Deleting a key revokes it at once (the next request with it gets 401). A principal may
  delete the key it is calling with.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import auth, web
from chalicelib.core import ids, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "api_key"
PREFIX = ids.PREFIXES["api_key"]
PATH = "/api_keys"
LIST_KEY = "keys"

CREATE_FIELDS = [DESCRIPTION, METADATA, Field("owner_id", "string")]
UPDATE_FIELDS = [DESCRIPTION, METADATA]


def render(c: Ctx, item: store.Item, token: Optional[str] = None) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "created_at": data["created_at"],
        "token": token,
        "owner_id": data["owner_id"],
    }


def create_for_owner(
    account_id: str,
    owner_id: str,
    owner_kind: str,
    description: str = "",
    metadata: str = "",
    role: Optional[str] = None,
    account: Optional[Dict[str, Any]] = None,
) -> Tuple[str, str]:
    """A new key for a known owner (admin command and bootstrap); (key id, token).
    ``account``: the account item's data when the caller has just read it, so the key's
    lookup copies its facts (abuse reporter, event types, IP restriction) at the first try."""
    state: Optional[Dict[str, Any]] = None
    if role:
        state = {"role": role, "active": True}
        if account is not None:
            state.update(
                abuse_reporter=bool(account.get("abuse_reporter")),
                audit_types=account.get("audit_types"),
                ip_restricted=account.get("ip_restricted") or "",
            )
    item, token = auth.create_secret(
        account_id,
        COLLECTION,
        auth.API_KEY_HASH_NAMESPACE,
        owner_id,
        owner_kind,
        {"description": description, "metadata": metadata},
        state=state,
    )
    return item.sk, token


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One transaction (key, lookup, owner index entry, owner check); one more when the owner
    is another principal whose role/active state differs from the first guess."""
    owner_id, owner_kind = auth.new_owner(c, fields.get("owner_id"), "API keys")
    item, token = auth.create_secret(
        c.account_id,
        COLLECTION,
        auth.API_KEY_HASH_NAMESPACE,
        owner_id,
        owner_kind,
        {"description": fields.get("description", ""), "metadata": fields.get("metadata", "")},
        state=auth.caller_state(c, owner_id),
    )
    return render(c, item, token)


def _get(c: Ctx, key_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, key_id, "API key")


def get(c: Ctx, key_id: str) -> Dict[str, Any]:
    return render(c, _get(c, key_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, key_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (owner-conditioned for members)."""
    return render(
        c, auth.update_owned(c, COLLECTION, PREFIX, key_id, fields, "API key", "API keys")
    )


def delete_ops(item: store.Item) -> List[store.Op]:
    """The writes that delete a key and its lookup item (bot deletion reuses them)."""
    return auth.secret_delete_ops(item, auth.API_KEY_HASH_NAMESPACE)


@store.retrying
def delete(c: Ctx, key_id: str) -> None:
    """Reads first (1 GetItem: the owner rule and the digest naming the lookup item), then
    one transaction deleting the key, its lookup and its owner index entry."""
    item = _get(c, key_id)
    auth.require_owner_or_admin(c, item, "API keys")
    store.commit(delete_ops(item))


def owned_by(account_id: str, owner_id: str) -> List[store.Item]:
    """Every key of the account owned by ``owner_id`` (see auth.owned_by)."""
    return auth.owned_by(account_id, COLLECTION, owner_id)
