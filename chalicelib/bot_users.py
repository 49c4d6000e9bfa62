"""Bot users: ``/bot_users``.

Fields: id, uri, name, active, created_at.

Rules (where the spec is silent, decided here):
- Only admins create, update and delete bot users (403 otherwise). Every principal of the
  account (members and bots too) may read them (get, list): a bot's name and state are not
  secret, and members need the ids to see who owns a credential.
- ``name`` is required, non-empty (not only whitespace), at most ``NAME_MAX_BYTES`` (255)
  bytes, and unique in the account, compared exactly (case-sensitive): 409 for a second bot
  with the same name. The claim is a uniqueness item ``U#bot_name#<account>#<name>`` written
  in the same transaction as the bot; a rename claims the new name and releases the old one
  in one transaction; deleting the bot frees the name.
- ``active`` defaults to true. While a bot is inactive its API keys get 401 (the authorizer
  reads ``active``) and its credentials do not bind (chalicelib.credentials); reactivating
  restores both, nothing else changes.
- Deleting a bot deletes its API keys and credentials. The bot and its name go first with as
  many owned items as fit in one transaction (100 writes); then whatever the bot still owns
  (the rest, and any key or credential created for it while the delete ran) goes in further
  transactions of at most 100. Nothing new can be created for a deleted bot (creates check
  that the owner exists), and an owned item left behind by an interrupted delete can neither
  authenticate nor bind (its owner is gone).
"""
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import api_keys, auth, credentials, errors, ids, store, validation, web
from chalicelib.validation import Field
from chalicelib.web import Ctx

COLLECTION = auth.BOT_COLLECTION
PREFIX = ids.PREFIXES["bot_user"]
PATH = "/bot_users"
LIST_KEY = "bot_users"
NAME_NAMESPACE = "bot_name"
NAME_MAX_BYTES = 255


def _check_name(name: str, value: str) -> str:
    if not value.strip():
        raise errors.InvalidField(f"Field '{name}' must not be empty", details={"field": name})
    return value


NAME = Field("name", "string", max_bytes=NAME_MAX_BYTES, check=_check_name)
CREATE_FIELDS = [Field("name", "string", required=True, max_bytes=NAME_MAX_BYTES,
                       check=_check_name),
                 Field("active", "boolean")]
UPDATE_FIELDS = [NAME, Field("active", "boolean")]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "name": data["name"],
        "active": bool(data.get("active", False)),
        "created_at": data["created_at"],
    }


def _name_taken(name: str) -> errors.Conflict:
    return errors.Conflict(f"A bot user named '{name}' already exists in this account",
                           details={"field": "name"})


def _claim(account_id: str, bot_id: str, name: str) -> store.Op:
    return store.unique(NAME_NAMESPACE, f"{account_id}#{name}",
                        {"account_id": account_id, "bot_user_id": bot_id}, _name_taken(name))


def _release(account_id: str, name: str) -> store.Op:
    return store.release(NAME_NAMESPACE, f"{account_id}#{name}")


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    c.principal.require_admin("create bot users")
    bot_id = ids.new_id(PREFIX)
    name = fields["name"]
    item = store.new_item(store.collection_pk(c.account_id, COLLECTION), bot_id,
                          kind=COLLECTION, account_id=c.account_id,
                          data={"id": bot_id, "name": name, "active": fields.get("active", True),
                                "created_at": validation.now_rfc3339()})
    store.commit([store.put_new(item), _claim(c.account_id, bot_id, name)])
    return render(c, item)


def _get(c: Ctx, bot_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, bot_id, "bot user")


def get(c: Ctx, bot_id: str) -> Dict[str, Any]:
    return render(c, _get(c, bot_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


@store.retrying
def update(c: Ctx, bot_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    c.principal.require_admin("change bot users")
    item = _get(c, bot_id)
    if not fields:
        return render(c, item)
    old_name = item.data["name"]
    item.data = {**item.data, **fields}
    ops = [store.save(item)]
    new_name = item.data["name"]
    if new_name != old_name:
        ops += [_claim(c.account_id, bot_id, new_name), _release(c.account_id, old_name)]
    store.commit(ops)
    return render(c, item)


def _owned_ops(account_id: str, bot_id: str) -> List[store.Op]:
    ops: List[store.Op] = []
    for key in api_keys.owned_by(account_id, bot_id):
        ops += api_keys.delete_ops(key)
    for credential in credentials.owned_by(account_id, bot_id):
        ops += credentials.delete_ops(credential)
    return ops


@store.retrying
def delete(c: Ctx, bot_id: str) -> None:
    c.principal.require_admin("delete bot users")
    item = _get(c, bot_id)
    bot_ops = [store.delete(item), _release(c.account_id, item.data["name"])]
    owned = _owned_ops(c.account_id, bot_id)
    room = store.MAX_TRANSACTION_OPS - len(bot_ops)
    # An item's ops come in pairs (item + lookup); keep each pair in one transaction.
    room -= room % 2
    store.commit(bot_ops + owned[:room])
    # Always sweep, not only when the first transaction was full: a key or credential created
    # for the bot between the query above and that commit passed its owner check and is
    # found only now. With the bot gone, no further one can be created.
    _sweep(c.account_id, bot_id)


def _sweep(account_id: str, bot_id: str, rounds: int = 5) -> None:
    """Delete what a deleted bot still owns, at most 100 writes a transaction.

    The bot is gone, so no new key or credential can be created for it: the set is final.
    An item changed meanwhile (a lost race) is picked up by the next round.
    """
    for _ in range(rounds):
        owned = _owned_ops(account_id, bot_id)
        if not owned:
            return
        for start in range(0, len(owned), store.MAX_TRANSACTION_OPS):
            try:
                store.commit(owned[start:start + store.MAX_TRANSACTION_OPS])
            except store.VersionConflict:
                continue
