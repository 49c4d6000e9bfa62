"""``/app/sessions`` and ``/app/users``: the people signed in through the ``openid-connect``
and ``oauth`` traffic policy actions (written by the edge: chalicelib/core/app_sessions.py).
List, get and delete (revoke). Deleting a session signs that person out of that session at
every edge instance within the edge's revocation bound (edge/identity.py,
REVOCATION_SECONDS); deleting a user deletes the user and every session of the user.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import rest, web
from chalicelib.core import app_sessions as core
from chalicelib.core import errors, ids, store
from chalicelib.web import Ctx

SESSION_PATH = "/app/sessions"
USER_PATH = "/app/users"


def render_session(c: Ctx, item: store.Item) -> Dict[str, Any]:
    d = item.data
    browser = d.get("browser_session") or {}
    agent = browser.get("user_agent") or {}
    return {
        "id": item.sk,
        "uri": c.uri(f"{SESSION_PATH}/{item.sk}"),
        "public_url": d.get("public_url", ""),
        "browser_session": {
            "user_agent": {
                "raw": agent.get("raw", ""),
                "browser_name": "",
                "browser_version": "",
                "device_type": "",
                "os_name": "",
                "os_version": "",
            },
            "ip_address": browser.get("ip_address", ""),
            "location": None,
        },
        "application_user": c.ref(USER_PATH, d["application_user_id"]),
        "created_at": d["created_at"],
        "last_active": d.get("last_active", ""),
        "expires_at": d.get("expires_at", ""),
        "endpoint": c.ref("/endpoints", d.get("endpoint_id", "")),
        "edge": None,
        "route": None,
    }


def render_user(c: Ctx, item: store.Item) -> Dict[str, Any]:
    d = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{USER_PATH}/{item.sk}"),
        "identity_provider": d.get("identity_provider") or {"name": "", "url": ""},
        "provider_user_id": d.get("provider_user_id", ""),
        "username": d.get("username", ""),
        "email": d.get("email", ""),
        "name": d.get("name", ""),
        "created_at": d["created_at"],
        "last_active": d.get("last_active", ""),
        "last_login": d.get("last_login", ""),
    }


def get_session(c: Ctx, session_id: str) -> Dict[str, Any]:
    return render_session(
        c,
        store.get_by_id(
            c.account_id, core.SESSIONS, core.SESSION_PREFIX, session_id, "application session"
        ),
    )


def list_sessions(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, core.SESSIONS, limit, before_id, render_session)


def delete_session(c: Ctx, session_id: str) -> None:
    missing = errors.NotFound(f"No application session with id '{session_id}' exists")
    if not ids.is_valid(session_id, core.SESSION_PREFIX):
        raise missing
    store.write(
        store.remove_item(
            store.collection_pk(c.account_id, core.SESSIONS), session_id, missing=missing
        )
    )


def get_user(c: Ctx, user_id: str) -> Dict[str, Any]:
    return render_user(
        c, store.get_by_id(c.account_id, core.USERS, core.USER_PREFIX, user_id, "application user")
    )


def list_users(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, core.USERS, limit, before_id, render_user)


def delete_user(c: Ctx, user_id: str) -> None:
    """The user, its identity's claim, and every session of the user (sessions first, in
    transactions of at most 25: a session left by a failure is deleted by a retry)."""
    item = store.get_by_id(c.account_id, core.USERS, core.USER_PREFIX, user_id, "application user")
    pk = store.collection_pk(c.account_id, core.SESSIONS)
    sessions = [s.sk for s in store.query_all(pk) if s.data.get("application_user_id") == user_id]
    for start in range(0, len(sessions), 25):
        store.commit([store.drop(pk, sk) for sk in sessions[start : start + 25]])
    provider = item.data.get("identity_provider") or {}
    store.commit(
        [
            store.drop(store.collection_pk(c.account_id, core.USERS), user_id),
            store.release(
                core.USER_NAMES,
                core.user_key(
                    c.account_id, provider.get("url", ""), item.data.get("provider_user_id", "")
                ),
            ),
        ]
    )


SESSION_OPS = rest.Ops(
    prefix=core.SESSION_PREFIX,
    list_key="application_sessions",
    get=get_session,
    list_page=list_sessions,
    delete=delete_session,
)
USER_OPS = rest.Ops(
    prefix=core.USER_PREFIX,
    list_key="application_users",
    get=get_user,
    list_page=list_users,
    delete=delete_user,
)
