"""Tunnel credentials (agent authtokens): ``/credentials``.

Fields: id, uri, created_at, description, metadata, token (the authtoken, in the create
response only; ``null`` everywhere else), acl (list of rules, ``[]`` when none), owner_id.

Rules (where the spec is silent, decided here):
- The token is 256 random bits (``auth.new_secret()``), shown once. The store keeps only its
  SHA-256 digest: in the credential item and in a lookup item
  ``U#credential_token#<digest>`` (credential id, account, owner), so an agent's token is
  found with one GetItem (:func:`credential_may_bind`).
- ``acl``: rules per the grammar in chalicelib.acl (at most 100 rules of at most 512 bytes;
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
  credential owned by an inactive bot; otherwise the ACL decides (chalicelib.acl.may_bind).
"""
import hmac
from typing import Any, Dict, List, Mapping, Optional, Tuple

from chalicelib import acl, auth, errors, ids, store, validation
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "credential"
PREFIX = ids.PREFIXES["credential"]
PATH = "/credentials"
LIST_KEY = "credentials"
TOKEN_NAMESPACE = "credential_token"

ACL = Field("acl", "string_list", check=acl.check_field)


def _owner_not_updatable(name: str, value: Any) -> Any:
    raise errors.InvalidField("Field 'owner_id' is set at creation and cannot be changed",
                              details={"field": name})


CREATE_FIELDS = [DESCRIPTION, METADATA, ACL, Field("owner_id", "string")]
UPDATE_FIELDS = [DESCRIPTION, METADATA, ACL, Field("owner_id", "any", check=_owner_not_updatable)]


def render(c: Ctx, item: store.Item, token: Optional[str] = None) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "token": token,
        "acl": list(data.get("acl") or []),
        "owner_id": data["owner_id"],
    }


def _owner_kind(owner_id: str) -> Optional[str]:
    if ids.is_valid(owner_id, ids.PREFIXES["user"]):
        return "user"
    if ids.is_valid(owner_id, ids.PREFIXES["bot_user"]):
        return "bot"
    return None


def _bad_owner(owner_id: str) -> errors.InvalidField:
    return errors.InvalidField(f"owner_id '{owner_id}' is not a user or bot user of this "
                               "account", details={"field": "owner_id"})


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    owner_id = fields.get("owner_id") or c.principal.id
    if owner_id != c.principal.id:
        c.principal.require_admin("create credentials owned by another user or bot")
    owner_kind = _owner_kind(owner_id)
    if owner_kind is None:
        raise _bad_owner(owner_id)
    account_id = c.account_id
    credential_id = ids.new_id(PREFIX)
    token = auth.new_secret()
    digest = auth.digest(token)
    item = store.new_item(store.collection_pk(account_id, COLLECTION), credential_id,
                          kind=COLLECTION, account_id=account_id,
                          data={"description": fields.get("description", ""),
                                "metadata": fields.get("metadata", ""),
                                "acl": fields.get("acl", []),
                                "owner_id": owner_id, "owner_kind": owner_kind,
                                "digest": digest, "created_at": validation.now_rfc3339()})
    lookup = store.new_item(store.unique_pk(TOKEN_NAMESPACE, digest), store.UNIQUE_SK,
                            kind="credential_token", account_id=account_id,
                            data={"digest": digest, "account_id": account_id,
                                  "credential_id": credential_id, "owner_id": owner_id,
                                  "owner_kind": owner_kind})
    owner_collection = auth.USER_COLLECTION if owner_kind == "user" else auth.BOT_COLLECTION
    store.commit([store.put_new(item), store.put_new(lookup),
                  store.check(store.collection_pk(account_id, owner_collection), owner_id,
                              store.model().pk.exists(), _bad_owner(owner_id))])
    return render(c, item, token)


def _get(c: Ctx, credential_id: str) -> store.Item:
    if not ids.is_valid(credential_id, PREFIX):
        raise errors.NotFound(f"No credential with id '{credential_id}' exists")
    return store.get_resource(c.account_id, COLLECTION, credential_id)


def _require_manage(c: Ctx, item: store.Item) -> None:
    if item.data["owner_id"] != c.principal.id:
        c.principal.require_admin("change credentials owned by another user or bot")


def get(c: Ctx, credential_id: str) -> Dict[str, Any]:
    return render(c, _get(c, credential_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    items, more = store.query_page(store.collection_pk(c.account_id, COLLECTION), limit,
                                   before_id)
    return [render(c, item) for item in items], more


@store.retrying
def update(c: Ctx, credential_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    item = _get(c, credential_id)
    _require_manage(c, item)
    if fields:
        item.data = {**item.data, **fields}
        store.commit([store.save(item)])
    return render(c, item)


def delete_ops(item: store.Item) -> List[store.Op]:
    """The writes that delete a credential and its token lookup (bot deletion reuses them)."""
    return [store.delete(item), store.release(TOKEN_NAMESPACE, item.data["digest"])]


@store.retrying
def delete(c: Ctx, credential_id: str) -> None:
    item = _get(c, credential_id)
    _require_manage(c, item)
    store.commit(delete_ops(item))


def owned_by(account_id: str, owner_id: str) -> List[store.Item]:
    """Every credential of the account owned by ``owner_id`` (one Query of the collection)."""
    return [item for item in store.query_all(store.collection_pk(account_id, COLLECTION))
            if item.data.get("owner_id") == owner_id]


def credential_may_bind(token: str, *, domain: Optional[str] = None,
                        address: Optional[str] = None,
                        labels: Optional[Mapping[str, str]] = None) -> bool:
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
    wanted = auth.digest(token)
    lookup = store.get(store.unique_pk(TOKEN_NAMESPACE, wanted), store.UNIQUE_SK)
    if lookup is None or not hmac.compare_digest(lookup.data.get("digest", ""), wanted):
        return False
    data = lookup.data
    item = store.get(store.collection_pk(data["account_id"], COLLECTION), data["credential_id"])
    if item is None:
        return False
    owner = auth.owner_item(data["account_id"], data["owner_id"], data["owner_kind"])
    if owner is None:
        return False
    if data["owner_kind"] == "bot" and not owner.data.get("active", False):
        return False
    return acl.may_bind(item.data.get("acl") or [], domain=domain, address=address,
                        labels=labels)
