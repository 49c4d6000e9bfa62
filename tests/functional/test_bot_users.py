"""/bot_users at both levels: CRUD, admin-only writes, unique names, deactivation, deletion."""

import threading

import pytest
import requests

from chalicelib.core import errors, ids

BOT_FIELDS = {"id", "uri", "name", "active", "created_at"}


def test_admin_creates_bot_with_active_default_true(account):
    created = account.admin.post("/bot_users", {"name": "ci-bot"})
    assert created.status == 201, created
    body = created.json
    assert set(body) == BOT_FIELDS
    assert ids.is_valid(body["id"], "bot") and body["active"] is True
    assert body["name"] == "ci-bot" and body["uri"].endswith(f"/bot_users/{body['id']}")
    fetched = account.admin.get(f"/bot_users/{body['id']}")
    assert fetched.status == 200 and fetched.json == body


def test_create_inactive_bot(account):
    created = account.admin.post("/bot_users", {"name": "off", "active": False})
    assert created.status == 201 and created.json["active"] is False


@pytest.mark.parametrize(
    "body, code",
    [
        ({}, errors.MISSING_FIELD),
        ({"name": ""}, errors.INVALID_FIELD),
        ({"name": "   "}, errors.INVALID_FIELD),
        ({"name": "x" * 256}, errors.INVALID_FIELD),
        ({"name": 5}, errors.INVALID_FIELD),
        ({"name": "a", "active": "yes"}, errors.INVALID_FIELD),
        ({"name": "a", "role": "admin"}, errors.UNKNOWN_FIELD),
    ],
)
def test_create_bot_with_bad_body_returns_400(account, body, code):
    resp = account.admin.post("/bot_users", body)
    assert resp.status == 400, resp
    assert resp.json["error_code"] == code


def test_name_limit_is_inclusive(account):
    assert account.admin.post("/bot_users", {"name": "é" * 127 + "x"}).status == 201


def test_member_cannot_manage_bots_but_can_read_them(account):
    assert account.member.post("/bot_users", {"name": "m"}).status == 403
    bot = account.admin.post("/bot_users", {"name": "b"}).json
    assert account.member.get(f"/bot_users/{bot['id']}").status == 200
    assert [b["id"] for b in account.member.get("/bot_users").json["bot_users"]] == [bot["id"]]
    assert account.member.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 403
    assert account.member.delete(f"/bot_users/{bot['id']}").status == 403
    assert account.admin.get(f"/bot_users/{bot['id']}").json["active"] is True


def test_duplicate_name_in_account_returns_409_but_other_account_may_use_it(
    account, other_account
):
    assert account.admin.post("/bot_users", {"name": "dup"}).status == 201
    again = account.admin.post("/bot_users", {"name": "dup"})
    assert again.status == 409 and again.json["error_code"] == errors.CONFLICT
    assert len(account.admin.get("/bot_users").json["bot_users"]) == 1
    assert other_account.admin.post("/bot_users", {"name": "dup"}).status == 201


def test_update_name_and_active(account):
    bot = account.admin.post("/bot_users", {"name": "one"}).json
    updated = account.admin.patch(f"/bot_users/{bot['id']}", {"name": "two", "active": False})
    assert updated.status == 200
    assert updated.json["name"] == "two" and updated.json["active"] is False
    assert updated.json["created_at"] == bot["created_at"]
    # the old name is free again, the new one is taken
    assert account.admin.post("/bot_users", {"name": "one"}).status == 201
    assert account.admin.post("/bot_users", {"name": "two"}).status == 409
    # id in the body equal to the path is accepted (clients of this family send it)
    same = account.admin.patch(f"/bot_users/{bot['id']}", {"id": bot["id"], "active": True})
    assert same.status == 200 and same.json["active"] is True
    # renaming to its own name is a no-op, not a conflict
    assert account.admin.patch(f"/bot_users/{bot['id']}", {"name": "two"}).status == 200


def test_rename_to_a_taken_name_returns_409_and_changes_nothing(account):
    first = account.admin.post("/bot_users", {"name": "a"}).json
    second = account.admin.post("/bot_users", {"name": "b"}).json
    resp = account.admin.patch(f"/bot_users/{second['id']}", {"name": "a", "active": False})
    assert resp.status == 409
    assert account.admin.get(f"/bot_users/{second['id']}").json == second
    assert account.admin.get(f"/bot_users/{first['id']}").json == first
    assert account.admin.patch(f"/bot_users/{second['id']}", {"name": ""}).status == 400


def test_delete_bot_frees_name_and_returns_404_after(account):
    bot = account.admin.post("/bot_users", {"name": "gone"}).json
    deleted = account.admin.delete(f"/bot_users/{bot['id']}")
    assert deleted.status == 204 and deleted.text == ""
    assert account.admin.get(f"/bot_users/{bot['id']}").status == 404
    assert account.admin.delete(f"/bot_users/{bot['id']}").status == 404
    assert account.admin.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 404
    assert account.admin.post("/bot_users", {"name": "gone"}).status == 201


def test_deactivated_bot_key_gets_401_and_reactivation_restores_it(api, account):
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    key = admin.post("/api_keys", {"owner_id": bot["id"]})
    assert key.status == 201 and key.json["owner_id"] == bot["id"]
    token = key.json["token"]
    assert api.request("GET", "/bot_users", key=token).status == 200
    assert admin.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 200
    refused = api.request("GET", "/bot_users", key=token)
    assert refused.status == 401 and refused.json["error_code"] == errors.UNAUTHORIZED
    assert admin.patch(f"/bot_users/{bot['id']}", {"active": True}).status == 200
    assert api.request("GET", "/bot_users", key=token).status == 200


def test_bot_is_a_member_principal(api, account):
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    token = admin.post("/api_keys", {"owner_id": bot["id"]}).json["token"]
    own = api.request("POST", "/credentials", key=token, json_body={"description": "mine"})
    assert own.status == 201 and own.json["owner_id"] == bot["id"]
    assert api.request("POST", "/bot_users", key=token, json_body={"name": "x"}).status == 403
    other = api.request("POST", "/credentials", key=token, json_body={"owner_id": admin.id})
    assert other.status == 403


def test_delete_bot_deletes_its_keys_and_credentials(api, account):
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    key = admin.post("/api_keys", {"owner_id": bot["id"]}).json
    cred = admin.post("/credentials", {"owner_id": bot["id"]}).json
    mine = admin.post("/credentials", {}).json
    assert admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert admin.get(f"/api_keys/{key['id']}").status == 404
    assert admin.get(f"/credentials/{cred['id']}").status == 404
    assert admin.get(f"/credentials/{mine['id']}").status == 200
    assert api.request("GET", "/api_keys", key=key["token"]).status == 401
    assert cred["id"] not in [c["id"] for c in admin.get("/credentials").json["credentials"]]


def test_other_accounts_bots_are_not_found(account, other_account):
    bot = account.admin.post("/bot_users", {"name": "mine"}).json
    other = other_account.admin
    assert other.get(f"/bot_users/{bot['id']}").status == 404
    assert other.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 404
    assert other.delete(f"/bot_users/{bot['id']}").status == 404
    assert other.get("/bot_users").json["bot_users"] == []
    assert other.post("/api_keys", {"owner_id": bot["id"]}).status == 400
    assert other.post("/credentials", {"owner_id": bot["id"]}).status == 400
    assert account.admin.get(f"/bot_users/{bot['id']}").json["active"] is True


@pytest.mark.parametrize(
    "bot_id",
    ["bot_x", "nope", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", "bot_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_malformed_or_unknown_bot_id_returns_404(account, bot_id):
    assert account.admin.get(f"/bot_users/{bot_id}").status == 404
    assert account.admin.delete(f"/bot_users/{bot_id}").status == 404
    assert account.admin.patch(f"/bot_users/{bot_id}", {"name": "x"}).status == 404


def test_list_paginates_with_limit_and_before_id(account):
    admin = account.admin
    created = [admin.post("/bot_users", {"name": f"b{i}"}).json["id"] for i in range(7)]
    seen, url, pages = [], "/bot_users?limit=3", 0
    while url:
        page = admin.get(url)
        assert page.status == 200, page
        assert page.json["uri"].endswith("/bot_users")
        seen += [b["id"] for b in page.json["bot_users"]]
        url = page.json["next_page_uri"]
        pages += 1
        if url:
            assert "before_id=" in url and "limit=3" in url and url.startswith("http")
    assert seen == list(reversed(created)) and pages == 3
    assert admin.get("/bot_users?limit=0").status == 400
    assert admin.get("/bot_users?before_id=cr_0ERYqBR5B9RMvMY4cZCztl2IB7s").status == 400


def test_concurrent_creates_of_one_bot_name_give_one_201(api, account):
    """20 concurrent creates of the same name in one account: one 201, nineteen 409."""
    statuses = _concurrently(api, [(account.admin.token, "/bot_users", {"name": "race"})] * 20)
    assert None not in statuses, api.stack.log() if api.level == "http" else ""
    assert sorted(statuses) == [201] + [409] * 19
    assert len(account.admin.get("/bot_users").json["bot_users"]) == 1


def _concurrently(api, calls):
    """POST each (token, path, body) at once; over HTTP with threads, in-process in turn."""
    if api.level != "http":
        return [
            api.request("POST", path, key=token, json_body=body).status
            for token, path, body in calls
        ]
    barrier = threading.Barrier(len(calls))
    statuses = [None] * len(calls)

    def call(index, token, path, body):
        barrier.wait()
        resp = requests.post(
            api.base_url + path,
            json=body,
            timeout=60,
            headers={"Authorization": f"Bearer {token}", "Service-Version": "2"},
        )
        statuses[index] = resp.status_code

    threads = [threading.Thread(target=call, args=(i, *args)) for i, args in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def test_key_and_credential_created_while_the_bot_is_deleted_are_deleted_too(
    inprocess_api, monkeypatch
):
    """GIVEN a key and a credential created for the bot after the delete listed what it owns
    (their owner check passes: the bot still exists), THEN the delete still removes them."""
    from chalicelib import api_keys, auth, credentials

    account = inprocess_api.new_account()
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "racing"}).json
    listed = auth.owned
    late = {}

    def owned_then_a_create_lands(account_id, bot_id):
        entries = listed(account_id, bot_id)
        if not late:
            late["key"] = api_keys.create_for_owner(account_id, bot_id, "bot")[1]
            late["cred"] = admin.post("/credentials", {"owner_id": bot_id}).json
        return entries

    monkeypatch.setattr(auth, "owned", owned_then_a_create_lands)
    assert admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert late["cred"]["id"]
    assert api_keys.owned_by(account.id, bot["id"]) == []
    assert credentials.owned_by(account.id, bot["id"]) == []
    assert not credentials.credential_may_bind(late["cred"]["token"], domain="a.example.com")
    assert inprocess_api.request("GET", "/bot_users", key=late["key"]).status == 401
