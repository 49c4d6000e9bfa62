"""Bot users: ``/bot_users``, also served as ``/service_users``.

The hosted service renamed bot users to service users (its newest clients call
``/service_users``, list key ``service_users``). Both paths serve the same resource from the
same store: same ids (``bot_…``), same rules; a bot created through one path is read, changed
and deleted through the other. Only ``uri`` follows the path used (``/service_users/<id>``
when read through ``/service_users``). :data:`SERVICE_USER_OPS` is that second face.

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
- Deleting a bot deletes its API keys and credentials, found through the bot's owner index
  (chalicelib.auth: one Query of the bot's own partition, never of a whole collection). When
  bot, name and owned items fit in one transaction (100 writes: 32 keys or credentials),
  that is all; otherwise the owned items go first in transactions of at most 100 and the bot
  last, so an interrupted delete leaves a bot with fewer keys, never a key without its bot.
  A key or credential created for the bot meanwhile bumps the bot's version, so the bot's
  version-conditioned delete fails and the delete starts over (retried with backoff).

Store calls: create 1 (transaction: bot + name claim); get 1; list 1 Query; update of
``active`` alone 3 (GetItem, Query of the owner index, one transaction with the key lookups:
the authorizer reads ``active`` from them), a rename 2 (GetItem for the old name, one
transaction claiming the new name and releasing the old), both 3; delete 3 (GetItem, Query
of the owner index, one transaction) while the bot owns at most 32 items.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import auth, validation, web
from chalicelib.core import errors, ids, keys, store
from chalicelib.validation import Field
from chalicelib.web import Ctx

COLLECTION = keys.BOT_COLLECTION
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
CREATE_FIELDS = [
    Field("name", "string", required=True, max_bytes=NAME_MAX_BYTES, check=_check_name),
    Field("active", "boolean"),
]
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
    return errors.Conflict(
        f"A bot user named '{name}' already exists in this account", details={"field": "name"}
    )


def _claim(account_id: str, bot_id: str, name: str) -> store.Op:
    return store.unique(
        NAME_NAMESPACE,
        f"{account_id}#{name}",
        {"account_id": account_id, "bot_user_id": bot_id},
        _name_taken(name),
    )


def _release(account_id: str, name: str) -> store.Op:
    return store.release(NAME_NAMESPACE, f"{account_id}#{name}")


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    c.principal.require_admin("create bot users")
    bot_id = ids.new_id(PREFIX)
    name = fields["name"]
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        bot_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data={
            "id": bot_id,
            "name": name,
            "active": fields.get("active", True),
            "created_at": validation.now_rfc3339(),
        },
    )
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
    new_data = {**item.data, **fields}
    new_name = new_data["name"]
    ops: List[store.Op] = []
    if new_name != old_name:
        ops += [_claim(c.account_id, bot_id, new_name), _release(c.account_id, old_name)]
    auth.owner_change(item, "bot", new_data, ops)
    return render(c, item)


@store.retrying
def delete(c: Ctx, bot_id: str) -> None:
    c.principal.require_admin("delete bot users")
    item = _get(c, bot_id)
    owned: List[store.Op] = []
    for entry in auth.owned(c.account_id, bot_id):
        owned += auth.owned_delete_ops(entry)
    bot_ops = [store.delete(item), _release(c.account_id, item.data["name"])]
    per_item = 3  # resource, lookup, index entry: kept in one transaction
    room = store.MAX_TRANSACTION_OPS - len(bot_ops)
    room -= room % per_item
    chunk = store.MAX_TRANSACTION_OPS - store.MAX_TRANSACTION_OPS % per_item
    while len(owned) > room:
        store.commit(owned[:chunk])
        owned = owned[chunk:]
    store.commit(bot_ops + owned)


# ---- /service_users: the same resource under the hosted service's newer name ------------------
SERVICE_PATH = "/service_users"
SERVICE_LIST_KEY = "service_users"


def _as_service_user(c: Ctx, rendered: Dict[str, Any]) -> Dict[str, Any]:
    return {**rendered, "uri": c.uri(f"{SERVICE_PATH}/{rendered['id']}")}


def _service_create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    return _as_service_user(c, create(c, fields))


def _service_get(c: Ctx, bot_id: str) -> Dict[str, Any]:
    return _as_service_user(c, get(c, bot_id))


def _service_list_page(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    items, more = list_page(c, limit, before_id)
    return [_as_service_user(c, item) for item in items], more


def _service_update(c: Ctx, bot_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    return _as_service_user(c, update(c, bot_id, fields))


def _service_ops() -> Any:
    from chalicelib import rest

    return rest.Ops(
        prefix=PREFIX,
        list_key=SERVICE_LIST_KEY,
        create=_service_create,
        get=_service_get,
        list_page=_service_list_page,
        update=_service_update,
        delete=delete,
        create_fields=CREATE_FIELDS,
        update_fields=UPDATE_FIELDS,
    )


SERVICE_USER_OPS = _service_ops()
