"""The wire contract's own rules at their boundaries (docs/CONTRACT.md): body size, list
page size, the operation id in every error, no internals in a 500, secrets of 256 bits, bot
names unique and case-sensitive.

In-process only, on one table for the module (``module_api``): these rules live in chalicelib
and run the same at both levels; each test makes its own account, so tests do not see each
other's resources. The numbers are the documented ones, written out (not read from the modules).
"""

import json
import re

import pytest

from chalicelib.core import errors
from tests.support.contract import assert_error

KIB = 1024


@pytest.fixture
def account(module_api):
    return module_api.new_account()


def _sized_body(size):
    """A valid JSON object body of exactly ``size`` bytes (whitespace padding)."""
    body = b'{"description": "sized"}'
    return body[:-1] + b" " * (size - len(body)) + b"}"


def _post_raw(account, path, data, content_type="application/json"):
    return account.admin.api.request(
        "POST", path, key=account.admin.token, data=data, headers={"Content-Type": content_type}
    )


# ---- body size: 256 KiB passes, one byte more is a 413 that writes nothing ----------------
def test_a_body_of_exactly_256_kib_is_accepted(account):
    resp = _post_raw(account, "/ip_policies", _sized_body(256 * KIB))
    assert resp.status == 201, resp
    assert resp.json["description"] == "sized"


def test_a_body_one_byte_over_256_kib_returns_413_and_creates_nothing(account):
    before = account.admin.get("/ip_policies").json["ip_policies"]
    resp = _post_raw(account, "/ip_policies", _sized_body(256 * KIB + 1))
    assert_error(resp, errors.PayloadTooLarge)
    assert account.admin.get("/ip_policies").json["ip_policies"] == before


def test_a_body_that_is_not_json_by_content_type_returns_415(account):
    assert_error(
        _post_raw(account, "/ip_policies", b"{}", "text/plain"), errors.UnsupportedMediaType
    )
    assert account.admin.get("/ip_policies").json["ip_policies"] == []


# ---- lists: default page 100, limit 1..100 -------------------------------------------------
def test_a_list_without_limit_returns_pages_of_100(account):
    created = [account.admin.post("/ip_policies", {}).json["id"] for _ in range(101)]
    first = account.admin.get("/ip_policies").json
    assert [p["id"] for p in first["ip_policies"]] == created[::-1][:100]
    assert first["next_page_uri"].endswith(f"/ip_policies?before_id={created[1]}&limit=100")
    second = account.admin.get(first["next_page_uri"]).json
    assert [p["id"] for p in second["ip_policies"]] == [created[0]]
    assert second["next_page_uri"] is None
    assert len(account.admin.get("/ip_policies?limit=100").json["ip_policies"]) == 100
    assert len(account.admin.get("/ip_policies?limit=1").json["ip_policies"]) == 1


@pytest.mark.parametrize(
    "query",
    [
        "limit=101",
        "limit=0",
        "limit=-1",
        "limit=ten",
        "limit=",
        "before_id=ak_" + "0" * 27,
        "before_id=x",
    ],
)
def test_a_list_with_a_bad_query_value_returns_400(account, query):
    assert_error(account.admin.get(f"/ip_policies?{query}"), errors.InvalidQuery)


def test_a_list_with_an_unknown_query_parameter_returns_400(account):
    assert_error(account.admin.get("/ip_policies?page=2"), errors.UnknownQuery, parameter="page")


# ---- errors: operation id everywhere, nothing internal in a 500 -----------------------------
def test_every_kind_of_error_carries_its_operation_id(module_api, account, monkeypatch):
    admin, member = account.admin, account.member
    cases = [
        (admin.post("/ip_policies", {"description": 1}), errors.InvalidField),
        (admin.post("/ip_policies", {"nope": 1}), errors.UnknownField),
        (admin.post("/bot_users", {}), errors.MissingField),
        (_post_raw(account, "/ip_policies", b"{"), errors.InvalidJson),
        (admin.get("/ip_policies?limit=0"), errors.InvalidQuery),
        (admin.get("/ip_policies", version=None), errors.MissingVersion),
        (admin.get("/ip_policies", version="1"), errors.UnsupportedVersion),
        (module_api.request("GET", "/ip_policies", key="nope"), errors.Unauthorized),
        (member.post("/bot_users", {"name": "b"}), errors.Forbidden),
        (admin.get("/ip_policies/ipp_" + "0" * 27), errors.NotFound),
        (admin.get("/no_such_path"), errors.NotFound),
        (admin.put("/ip_policies"), errors.MethodNotAllowed),
        (_post_raw(account, "/ip_policies", _sized_body(256 * KIB + 1)), errors.PayloadTooLarge),
        (_post_raw(account, "/ip_policies", b"{}", "text/plain"), errors.UnsupportedMediaType),
    ]
    admin.post("/bot_users", {"name": "twice"})
    cases.append((admin.post("/bot_users", {"name": "twice"}), errors.Conflict))
    seen = set()
    for resp, cls in cases:
        body = assert_error(resp, cls)
        operation_id = body["details"]["operation_id"]
        assert resp.headers["operation-id"] == operation_id
        seen.add(operation_id)
    assert len(seen) == len(cases), "every request gets its own operation id"


SECRET = "secret-internal-detail at /var/task/chalicelib/core/store.py line 42"


def _crash(*args, **kwargs):
    raise RuntimeError(SECRET)


def _assert_clean_500(resp):
    body = assert_error(resp, errors.Internal)
    assert body["msg"] == errors.Internal.default_msg
    assert set(body["details"]) == {"operation_id"}
    for internal in ("secret", "RuntimeError", "store.py", "Traceback"):
        assert internal not in resp.text, resp.text


@pytest.mark.parametrize("debug", [False, True])
def test_a_crash_inside_a_view_is_a_500_without_internals(account, monkeypatch, debug):
    """Chalice turns a view's crash into its own 500 (with the traceback when debug is on);
    the middleware must still answer with the contract's generic body."""
    from app import app
    from chalicelib import web

    monkeypatch.setattr(app, "debug", debug)
    monkeypatch.setattr(web, "page", _crash)  # every list view ends in web.page
    _assert_clean_500(account.admin.get("/ip_policies"))


def test_a_crash_outside_the_view_is_a_500_without_internals(account, monkeypatch):
    from chalicelib import web

    monkeypatch.setattr(web, "_check_request", _crash)
    _assert_clean_500(account.admin.get("/ip_policies"))


def test_an_internal_api_error_keeps_its_message_out_of_the_wire(account, monkeypatch):
    """Even an ApiError of status 500 raised with a message only logs that message."""
    from chalicelib import web

    def internal(*args, **kwargs):
        raise errors.Internal()

    monkeypatch.setattr(web, "page", internal)
    _assert_clean_500(account.admin.get("/ip_policies"))


# ---- secrets: 256 random bits, shown once ---------------------------------------------------
@pytest.mark.parametrize("path", ["/api_keys", "/credentials"])
def test_a_created_secret_is_256_random_bits_shown_once(account, path):
    tokens = []
    for _ in range(2):
        created = account.admin.post(path, {}).json
        token = created["token"]
        assert re.fullmatch(r"[0-9A-Za-z]{43}", token), token
        tokens.append(token)
        assert account.admin.get(f"{path}/{created['id']}").json["token"] is None
        listed = account.admin.get(path).json
        assert all(
            item["token"] is None
            for item in next(v for k, v in listed.items() if isinstance(v, list))
        )
    assert tokens[0] != tokens[1]


# ---- bot users: names unique in the account, case-sensitive, at most 255 bytes ---------------
def test_bot_names_are_case_sensitive_and_unique(account):
    admin = account.admin
    assert admin.post("/bot_users", {"name": "Deploy"}).status == 201
    assert admin.post("/bot_users", {"name": "deploy"}).status == 201
    assert_error(admin.post("/bot_users", {"name": "Deploy"}), errors.Conflict)
    other = admin.post("/bot_users", {"name": "other"}).json
    assert_error(admin.patch(f"/bot_users/{other['id']}", {"name": "deploy"}), errors.Conflict)
    assert admin.get(f"/bot_users/{other['id']}").json["name"] == "other"


def test_bot_names_are_at_most_255_bytes(account):
    assert account.admin.post("/bot_users", {"name": "b" * 255}).status == 201
    assert_error(
        account.admin.post("/bot_users", {"name": "b" * 256}), errors.InvalidField, field="name"
    )


def test_a_bot_name_is_unique_per_account_not_across_accounts(module_api, account):
    other = module_api.new_account()
    assert account.admin.post("/bot_users", {"name": "shared"}).status == 201
    assert other.admin.post("/bot_users", {"name": "shared"}).status == 201


def test_a_freed_bot_name_can_be_taken_again(account):
    bot = account.admin.post("/bot_users", {"name": "reused"}).json
    assert account.admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert account.admin.post("/bot_users", {"name": "reused"}).status == 201
    renamed = account.admin.post("/bot_users", {"name": "old"}).json
    account.admin.patch(f"/bot_users/{renamed['id']}", {"name": "new"})
    assert account.admin.post("/bot_users", {"name": "old"}).status == 201


# ---- JSON bodies ----------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"[]", b"1", b'"x"', b"{bad", b'{"description": "\\ud800"}'])
def test_a_body_that_is_not_a_json_object_returns_400_and_writes_nothing(account, data):
    assert_error(_post_raw(account, "/ip_policies", data), errors.InvalidJson)
    assert account.admin.get("/ip_policies").json["ip_policies"] == []


def test_an_empty_body_is_an_empty_object(account):
    resp = account.admin.api.request(
        "POST",
        "/ip_policies",
        key=account.admin.token,
        data=b"",
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 201, resp
    assert json.loads(resp.text)["description"] == ""
