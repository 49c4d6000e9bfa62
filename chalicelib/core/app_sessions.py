"""The people signed in through the ``openid-connect`` / ``oauth`` actions, in the store: the
edge writes them (edge/identity.py), the API lists and revokes them (``/app/sessions``,
``/app/users``: chalicelib/app_sessions.py).

Layout (docs/IDENTITY.md, "Sessions and users"):
- an application user: ``A#<account>#app_users`` / ``appusr_…``; data identity_provider
  {name, url}, provider_user_id, username, email, name, created_at, last_active,
  last_login; one per (account, provider URL, provider user id), claimed by the unique item
  ``U#app_user#<account>#<sha256 of provider URL and user id>``;
- an application session: ``A#<account>#app_sessions`` / ``appses_…``; data public_url,
  browser_session {user_agent {raw, …}, ip_address}, application_user_id, endpoint_id,
  created_at, last_active, expires_at; the item's TTL attribute is its end, so the store
  deletes ended sessions (DynamoDB: within days of the end; the edge refuses them at once).

A session cookie names its session id: the edge serves a signed-in request only while that
item exists (:func:`is_live`, cached at the edge for at most REVOCATION_SECONDS), so
deleting the session (or its user) through the API signs the person out at every edge
instance within that bound.
"""

import hashlib
from datetime import datetime, timezone
from typing import Any, Dict, Optional, Tuple

from chalicelib.core import errors, ids, store

USERS = "app_users"
SESSIONS = "app_sessions"
USER_PREFIX = ids.PREFIXES["app_user"]
SESSION_PREFIX = ids.PREFIXES["app_session"]
USER_NAMES = "app_user"


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def user_key(account_id: str, provider_url: str, provider_user_id: str) -> str:
    digest = hashlib.sha256(f"{provider_url}\0{provider_user_id}".encode()).hexdigest()
    return f"{account_id}#{digest}"


def _user(account_id: str, provider: Tuple[str, str], identity: Dict[str, str], now: float) -> str:
    """The id of the account's user for this identity, created on first sign-in; its
    profile and last login brought up to date."""
    name, url = provider
    key = user_key(account_id, url, identity["sub"])
    pk = store.collection_pk(account_id, USERS)
    profile = {
        "email": identity.get("em", ""),
        "name": identity.get("nm", ""),
        "username": identity.get("em", "") or identity.get("nm", ""),
        "last_login": _rfc3339(now),
        "last_active": _rfc3339(now),
    }
    for _ in range(3):
        owner = store.get(store.unique_pk(USER_NAMES, key), store.UNIQUE_SK)
        user_id = None if owner is None else (owner.data or {}).get("app_user_id")
        if user_id:
            try:
                store.write(
                    store.set_fields(pk, user_id, profile, missing=errors.NotFound("gone"))
                )
                return user_id
            except errors.NotFound:  # deleted meanwhile: its claim goes too
                store.commit([store.release(USER_NAMES, key)])
                continue
        user_id = ids.new_id(USER_PREFIX)
        item = store.new_item(
            pk,
            user_id,
            kind=USERS,
            account_id=account_id,
            data={
                "identity_provider": {"name": name, "url": url},
                "provider_user_id": identity["sub"],
                "created_at": _rfc3339(now),
                **profile,
            },
        )
        try:
            store.commit(
                [
                    store.put_new(item),
                    store.unique(
                        USER_NAMES, key, {"app_user_id": user_id}, errors.Conflict("taken")
                    ),
                ]
            )
            return user_id
        except errors.Conflict:
            continue  # signed in twice at once: the other one created it
    raise errors.Conflict("the application user could not be recorded")


def record_signin(
    account_id: str,
    endpoint_id: str,
    public_url: str,
    provider: Tuple[str, str],
    identity: Dict[str, str],
    user_agent: str,
    ip_address: str,
    now: float,
    expires_at: float,
) -> Tuple[str, str]:
    """(session id, user id) of a new session for a person who just signed in."""
    user_id = _user(account_id, provider, identity, now)
    session_id = ids.new_id(SESSION_PREFIX)
    item = store.new_item(
        store.collection_pk(account_id, SESSIONS),
        session_id,
        kind=SESSIONS,
        account_id=account_id,
        data={
            "public_url": public_url,
            "application_user_id": user_id,
            "endpoint_id": endpoint_id,
            "browser_session": {"user_agent": {"raw": user_agent[:512]}, "ip_address": ip_address},
            "created_at": _rfc3339(now),
            "last_active": _rfc3339(now),
            "expires_at": _rfc3339(expires_at),
        },
    )
    item.expires_at = int(expires_at)  # DynamoDB's TTL deletes the session after it ends
    store.commit([store.put_new(item)])
    return session_id, user_id


def is_live(account_id: str, session_id: str) -> bool:
    """The session was not revoked (one GetItem)."""
    if not ids.is_valid(session_id, SESSION_PREFIX):
        return False
    return store.get(store.collection_pk(account_id, SESSIONS), session_id) is not None


def session_item(account_id: str, session_id: str) -> Optional[store.Item]:
    return store.get(store.collection_pk(account_id, SESSIONS), session_id)


def render_time(epoch: float) -> str:
    return _rfc3339(epoch)


def touch(account_id: str, session_id: str, now: float) -> Any:
    """last_active of a session (and its user) moved to now (best effort)."""
    try:
        item = store.write(
            store.set_fields(
                store.collection_pk(account_id, SESSIONS),
                session_id,
                {"last_active": _rfc3339(now)},
                missing=errors.NotFound("gone"),
            )
        )
    except errors.NotFound:
        return None
    if item is not None:
        try:
            store.write(
                store.set_fields(
                    store.collection_pk(account_id, USERS),
                    item.data["application_user_id"],
                    {"last_active": _rfc3339(now)},
                    missing=errors.NotFound("gone"),
                )
            )
        except errors.NotFound:
            pass
    return item


def end(account_id: str, session_id: str) -> None:
    """The session deleted (a visitor's logout): its cookie, replayed, serves no more."""
    if ids.is_valid(session_id, SESSION_PREFIX):
        store.commit([store.drop(store.collection_pk(account_id, SESSIONS), session_id)])
