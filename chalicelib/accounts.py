"""Accounts and their users: created by the admin command, never over the API.

An account is the tenant every resource belongs to. Its users have a role, ``admin`` or
``member``. Bot users (chalicelib.bot_users) are the other kind of principal. An account may
be marked as an abuse reporter, which opens ``/abuse_reports`` to it.
"""

from typing import Any, Dict, Optional, Tuple

from chalicelib import api_keys, auth, validation
from chalicelib.core import errors, ids, store
from chalicelib.core.keys import USER_COLLECTION

ROLES = ("admin", "member")


def create_account(name: str = "", abuse_reporter: bool = False) -> str:
    account_id = ids.new_id(ids.PREFIXES["account"])
    item = store.new_item(
        store.account_pk(account_id),
        store.ACCOUNT_SK,
        kind="account",
        account_id=account_id,
        data={
            "name": name,
            "abuse_reporter": abuse_reporter,
            "audit_types": "",  # no event subscriptions yet (chalicelib.audit)
            "created_at": validation.now_rfc3339(),
        },
    )
    store.commit([store.put_new(item)])
    return account_id


def get_account(account_id: str) -> store.Item:
    item = store.get(store.account_pk(account_id), store.ACCOUNT_SK)
    if item is None:
        raise errors.NotFound(f"No account with id '{account_id}' exists")
    return item


def is_abuse_reporter(account_id: str) -> bool:
    item = store.get(store.account_pk(account_id), store.ACCOUNT_SK)
    return bool(item and item.data.get("abuse_reporter"))


def set_abuse_reporter(account_id: str, enabled: bool) -> None:
    """Set the flag on the account, then on the lookups of the account's API keys (the abuse
    report views read it from the caller's key: chalicelib.auth). Until a concurrent change
    of the flag is settled, the copies are rewritten with the account's value again."""
    _set_flag(account_id, enabled)
    while True:
        auth.set_account_copies(account_id, {"abuse_reporter": enabled})
        now = bool(get_account(account_id).data.get("abuse_reporter"))
        if now == enabled:
            return
        enabled = now


@store.retrying
def _set_flag(account_id: str, enabled: bool) -> None:
    item = get_account(account_id)
    item.data = {**item.data, "abuse_reporter": enabled}
    store.commit([store.save(item)])


def create_user(account_id: str, role: str, name: str = "") -> str:
    return _create_user(account_id, role, name)[0]


def _create_user(account_id: str, role: str, name: str) -> Tuple[str, store.Item]:
    """(the new user's id, the account item read to check the account exists)."""
    if role not in ROLES:
        raise errors.InvalidField(f"role must be one of {', '.join(ROLES)}")
    account = get_account(account_id)
    user_id = ids.new_id(ids.PREFIXES["user"])
    item = store.new_item(
        store.collection_pk(account_id, USER_COLLECTION),
        user_id,
        kind="user",
        account_id=account_id,
        data={"id": user_id, "role": role, "name": name, "created_at": validation.now_rfc3339()},
    )
    store.commit([store.put_new(item)])
    return user_id, account


@store.retrying
def set_role(account_id: str, user_id: str, role: str) -> None:
    """Change a user's role; the lookups of the user's API keys are rewritten with it
    (auth.owner_change), so the next request with any of its keys has the new role."""
    if role not in ROLES:
        raise errors.InvalidField(f"role must be one of {', '.join(ROLES)}")
    item = store.get(store.collection_pk(account_id, USER_COLLECTION), user_id)
    if item is None:
        raise errors.NotFound(f"No user with id '{user_id}' exists in account '{account_id}'")
    auth.owner_change(item, "user", {**item.data, "role": role}, [])


def user_with_key(
    account_id: str, role: str, name: str = "", description: str = ""
) -> Dict[str, Any]:
    """A new user of the account with one API key; the key's token is in the result. The
    key's lookup gets the account's copied facts as the account item read for the user says
    them (a lookup built on a guess is refused by its transaction and built again)."""
    user_id, account = _create_user(account_id, role, name)
    key_id, token = api_keys.create_for_owner(
        account_id,
        user_id,
        "user",
        description=description or f"{role} key",
        role=role,
        account=account.data,
    )
    return {
        "account_id": account_id,
        "user_id": user_id,
        "role": role,
        "api_key_id": key_id,
        "token": token,
    }


def bootstrap(
    name: str = "", abuse_reporter: bool = False, admin_name: Optional[str] = None
) -> Dict[str, Any]:
    """A new account with an admin user and that user's first API key."""
    account_id = create_account(name, abuse_reporter)
    return user_with_key(account_id, "admin", admin_name or "admin", "bootstrap admin key")
