"""Tunnel credentials (agent authtokens): ``/credentials``.

Fields: id, uri, created_at, description, metadata, token (the authtoken, in the create
response only; ``null`` everywhere else), acl (list of rules, ``[]`` when none), owner_id.

Rules (where the spec is silent, decided here):
- The token is 256 random bits, shown once. The store keeps only its SHA-256 digest: in the
  credential item and in a lookup item ``U#credential_token#<digest>`` (credential id,
  account, owner), so an agent's token is found with one GetItem (:func:`credential_may_bind`).
  API keys work the same way; chalicelib.auth holds what the two share (owner rule, secret
  and lookup item, owner check).
- ``acl``: rules per the grammar in chalicelib.core.acl (at most 100 rules of at most 512 bytes;
  400 naming the first bad rule); stored and returned in canonical spelling
  (domains lower-cased).
- ``owner_id`` defaults to the caller (user or bot). Only admins may name another principal
  (403); it must name a user or bot user of the caller's account (400). It is set at
  creation only: sending it to PATCH is a 400. A credential may be created for an inactive
  bot (it binds nothing until the bot is reactivated).
- Every principal of the account may read every credential (the token is never readable).
  A member or bot may update or delete only the credentials it owns (403); admins all.
- Binding: :func:`credential_may_bind` is the one answer the tunnel side and device agents
  use. It refuses an unknown token, a credential whose owner no longer exists, and a
  credential owned by an inactive bot; otherwise the ACL decides (chalicelib.core.acl.may_bind).
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

from chalicelib import auth, web
from chalicelib.core import acl, errors, ids, keys, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = keys.CREDENTIAL_COLLECTION
PREFIX = ids.PREFIXES["credential"]
PATH = "/credentials"
LIST_KEY = "credentials"
TOKEN_NAMESPACE = keys.TOKEN_NAMESPACE

ACL = Field("acl", "string_list", check=acl.check_field)


def _owner_not_updatable(name: str, value: Any) -> Any:
    raise errors.InvalidField(
        "Field 'owner_id' is set at creation and cannot be changed", details={"field": name}
    )


CREATE_FIELDS = [DESCRIPTION, METADATA, ACL, Field("owner_id", "string")]
UPDATE_FIELDS = [DESCRIPTION, METADATA, ACL, Field("owner_id", "any", check=_owner_not_updatable)]


def render(c: Ctx, item: store.Item, token: Optional[str] = None) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        "token": token,
        "acl": list(data.get("acl") or []),
        "owner_id": data["owner_id"],
    }


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    owner_id, owner_kind = auth.new_owner(c, fields.get("owner_id"), "credentials")
    item, token = auth.create_secret(
        c.account_id,
        COLLECTION,
        TOKEN_NAMESPACE,
        owner_id,
        owner_kind,
        {
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "acl": fields.get("acl", []),
        },
    )
    return render(c, item, token)


def _get(c: Ctx, credential_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, credential_id, "credential")


def get(c: Ctx, credential_id: str) -> Dict[str, Any]:
    return render(c, _get(c, credential_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, credential_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (owner-conditioned for members and bots)."""
    return render(
        c,
        auth.update_owned(
            c, COLLECTION, PREFIX, credential_id, fields, "credential", "credentials"
        ),
    )


def delete_ops(item: store.Item) -> List[store.Op]:
    """The writes that delete a credential and its token lookup (bot deletion reuses them)."""
    return auth.secret_delete_ops(item, TOKEN_NAMESPACE)


@store.retrying
def delete(c: Ctx, credential_id: str) -> None:
    """Reads first (1 GetItem: owner rule and digest), then one transaction (credential,
    token lookup, owner index entry)."""
    item = _get(c, credential_id)
    auth.require_owner_or_admin(c, item, "credentials")
    store.commit(delete_ops(item))


def owned_by(account_id: str, owner_id: str) -> List[store.Item]:
    """Every credential of the account owned by ``owner_id`` (see auth.owned_by)."""
    return auth.owned_by(account_id, COLLECTION, owner_id)


def credential_may_bind(
    token: str,
    *,
    domain: Optional[str] = None,
    address: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
) -> bool:
    """May the agent holding ``token`` bind ``domain`` / ``address`` / ``labels``?

    False for an unknown or deleted token, a credential whose owner no longer exists, or one
    owned by an inactive bot; otherwise the credential's ACL decides (acl.may_bind). Reads the
    credential and its owner afresh (three GetItems), so ACL changes and bot deactivation take
    effect at once.
    """
    if domain is None and address is None and labels is None:
        raise ValueError("credential_may_bind needs a domain, an address or labels")
    if not isinstance(token, str) or not token:
        return False
    data = keys.lookup_secret(TOKEN_NAMESPACE, token)
    if data is None:
        return False
    item = store.get(store.collection_pk(data["account_id"], COLLECTION), data["credential_id"])
    if item is None or keys.usable_owner(data)[0] is None:
        return False
    return acl.may_bind(item.data.get("acl") or [], domain=domain, address=address, labels=labels)
