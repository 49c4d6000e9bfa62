"""Idempotent creates with ``Idempotency-Key`` (chalicelib.idempotency), at both levels."""

import threading
import uuid

import requests

from chalicelib import idempotency
from chalicelib.core import errors
from tests.functional.test_api_keys import assert_contract_error


def _post(caller, path, body, key):
    return caller.post(path, body, headers={"Idempotency-Key": key})


def test_same_key_and_body_returns_the_first_response_and_creates_once(account):
    admin, key = account.admin, str(uuid.uuid4())
    first = _post(admin, "/reserved_domains", {"domain": "a.customer-example.com"}, key)
    assert first.status == 201 and "idempotent-replayed" not in first.headers
    again = _post(admin, "/reserved_domains", {"domain": "a.customer-example.com"}, key)
    assert again.status == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json == first.json
    assert len(admin.get("/reserved_domains").json["reserved_domains"]) == 1


def test_same_key_with_another_body_returns_409_and_changes_nothing(account):
    admin, key = account.admin, str(uuid.uuid4())
    assert _post(admin, "/ip_policies", {"description": "a"}, key).status == 201
    other = _post(admin, "/ip_policies", {"description": "b"}, key)
    assert_contract_error(other, 409, errors.IDEMPOTENCY_CONFLICT)
    other_path = _post(admin, "/backends/http_response", {"description": "a"}, key)
    assert_contract_error(other_path, 409, errors.IDEMPOTENCY_CONFLICT)
    assert [p["description"] for p in admin.get("/ip_policies").json["ip_policies"]] == ["a"]


def test_body_key_order_does_not_make_another_request(account):
    admin, key = account.admin, str(uuid.uuid4())
    first = admin.request(
        "POST",
        "/ip_policies",
        data=b'{"description":"a","metadata":"m"}',
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    again = admin.request(
        "POST",
        "/ip_policies",
        data=b'{"metadata": "m", "description": "a"}',
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    assert first.status == again.status == 201 and first.json == again.json


def test_key_is_scoped_to_the_principal_and_account(account, other_account):
    key = str(uuid.uuid4())
    mine = _post(account.admin, "/ip_policies", {}, key)
    theirs = _post(other_account.admin, "/ip_policies", {}, key)
    assert mine.status == theirs.status == 201 and mine.json["id"] != theirs.json["id"]
    member = _post(account.member, "/ip_policies", {}, key)
    assert_contract_error(member, 409, errors.IDEMPOTENCY_CONFLICT)


def test_without_a_key_every_post_creates(account):
    admin = account.admin
    assert admin.post("/ip_policies", {}).json["id"] != admin.post("/ip_policies", {}).json["id"]


def test_a_4xx_first_response_is_replayed(account):
    admin, key = account.admin, str(uuid.uuid4())
    first = _post(admin, "/reserved_domains", {"domain": "not a domain"}, key)
    assert first.status == 400
    again = _post(admin, "/reserved_domains", {"domain": "not a domain"}, key)
    assert again.status == 400 and again.headers["idempotent-replayed"] == "true"
    assert {k: v for k, v in again.json.items() if k != "details"} == {
        k: v for k, v in first.json.items() if k != "details"
    }
    assert again.json["details"]["operation_id"] != first.json["details"]["operation_id"]


def test_secrets_are_not_stored_so_a_replay_shows_no_token(account):
    admin, key = account.admin, str(uuid.uuid4())
    first = _post(admin, "/credentials", {"description": "agent"}, key)
    assert first.status == 201 and first.json["token"]
    again = _post(admin, "/credentials", {"description": "agent"}, key)
    assert again.status == 201 and again.json["token"] is None
    assert {k: v for k, v in again.json.items() if k != "token"} == {
        k: v for k, v in first.json.items() if k != "token"
    }


def test_key_length_boundary(account):
    admin = account.admin
    longest = "k" * idempotency.MAX_KEY_LENGTH
    assert _post(admin, "/ip_policies", {}, longest).status == 201
    too_long = _post(admin, "/ip_policies", {}, longest + "k")
    assert_contract_error(too_long, 400, errors.INVALID_FIELD)
    assert too_long.json["details"]["header"] == "Idempotency-Key"
    assert len(admin.get("/ip_policies").json["ip_policies"]) == 1


def test_an_expired_key_is_forgotten(inprocess_api, monkeypatch):
    from chalicelib.core import config

    monkeypatch.setenv("IDEMPOTENCY_TTL_SECONDS", "0")
    config.reset_settings()
    try:
        admin = inprocess_api.new_account().admin
        key = str(uuid.uuid4())
        first = _post(admin, "/ip_policies", {}, key)
        again = _post(admin, "/ip_policies", {}, key)
        assert first.status == again.status == 201 and first.json["id"] != again.json["id"]
    finally:
        monkeypatch.delenv("IDEMPOTENCY_TTL_SECONDS")
        config.reset_settings()


def test_concurrent_duplicates_create_one(http_api):
    admin = http_api.new_account().admin
    key, body = str(uuid.uuid4()), {"domain": "race.customer-example.com"}
    barrier = threading.Barrier(8)
    results = [None] * 8

    def call(index):
        barrier.wait()
        resp = requests.post(
            http_api.base_url + "/reserved_domains",
            json=body,
            timeout=60,
            headers={
                "Authorization": f"Bearer {admin.token}",
                "Service-Version": "2",
                "Idempotency-Key": key,
            },
        )
        results[index] = (resp.status_code, resp.json().get("id"))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {status for status, _ in results} == {201}, results
    assert len({rid for _, rid in results}) == 1
    assert len(admin.get("/reserved_domains").json["reserved_domains"]) == 1
