"""The authorizer reads one item (the key's lookup); what it needs of the owner and the
account is copied there and must follow every change at once.

In-process only: the changes are operator actions on the store (chalicelib.accounts).
"""

import pytest

from chalicelib import accounts, auth
from chalicelib.core import store
from tests.support.api import Caller

REPORT = {"urls": ["https://bad.example.net/x"]}


@pytest.fixture
def acct(inprocess_api):
    return inprocess_api.new_account(reporter=True)


def test_turning_abuse_reporting_off_and_on_applies_to_existing_keys_at_once(acct):
    assert acct.member.post("/abuse_reports", REPORT).status == 201
    accounts.set_abuse_reporter(acct.id, False)
    assert acct.member.post("/abuse_reports", REPORT).status == 403
    assert acct.admin.post("/abuse_reports", REPORT).status == 403
    accounts.set_abuse_reporter(acct.id, True)
    assert acct.member.post("/abuse_reports", REPORT).status == 201


def test_a_key_created_after_the_flag_changed_copies_the_new_value(inprocess_api, acct):
    accounts.set_abuse_reporter(acct.id, False)
    # the creator's own copy says "reporter": the create is corrected by the account's value
    created = acct.admin.post("/api_keys", {}).json
    new = Caller(inprocess_api, acct.admin.id, created["token"])
    assert new.post("/abuse_reports", REPORT).status == 403


def test_changing_a_users_role_applies_to_its_keys_at_once(acct):
    assert acct.member.post("/bot_users", {"name": "b"}).status == 403
    accounts.set_role(acct.id, acct.member.id, "admin")
    assert acct.member.post("/bot_users", {"name": "b"}).status == 201
    accounts.set_role(acct.id, acct.member.id, "member")
    assert acct.member.post("/bot_users", {"name": "c"}).status == 403


def test_a_key_created_for_an_inactive_bot_does_not_authenticate(inprocess_api, acct):
    bot = acct.admin.post("/bot_users", {"name": "idle", "active": False}).json["id"]
    key = acct.admin.post("/api_keys", {"owner_id": bot}).json
    assert key["owner_id"] == bot
    caller = Caller(inprocess_api, bot, key["token"])
    assert caller.get("/api_keys").status == 401
    assert acct.admin.patch(f"/bot_users/{bot}", {"active": True}).status == 200
    assert caller.get("/api_keys").status == 200


def test_deleting_a_bot_with_more_keys_than_one_transaction_holds_revokes_all(inprocess_api, acct):
    bot = acct.admin.post("/bot_users", {"name": "busy"}).json["id"]
    tokens = [acct.admin.post("/api_keys", {"owner_id": bot}).json["token"] for _ in range(34)]
    acct.admin.post("/credentials", {"owner_id": bot})
    assert acct.admin.delete(f"/bot_users/{bot}").status == 204
    for token in (tokens[0], tokens[-1]):
        assert Caller(inprocess_api, bot, token).get("/api_keys").status == 401
    keys = acct.admin.get("/api_keys").json["keys"]
    assert all(k["owner_id"] != bot for k in keys)
    assert acct.admin.get("/credentials").json["credentials"] == []
    assert auth.owned(acct.id, bot) == []
    assert store.get(store.collection_pk(acct.id, "bot_user"), bot) is None
