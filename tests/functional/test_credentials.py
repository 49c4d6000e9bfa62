"""/credentials at both levels, the token's secrecy, ownership and the bind decision."""

import json

import pytest

from chalicelib.core import errors, ids

CRED_FIELDS = {"id", "uri", "created_at", "description", "metadata", "token", "acl", "owner_id"}


def test_create_credential_returns_201_with_token_once(account):
    admin = account.admin
    created = admin.post(
        "/credentials", {"description": "agent", "metadata": "{}", "acl": ["bind:*.Example.com"]}
    )
    assert created.status == 201, created
    body = created.json
    assert set(body) == CRED_FIELDS
    assert ids.is_valid(body["id"], "cr") and body["owner_id"] == admin.id
    assert body["token"] and len(body["token"]) >= 22
    assert body["acl"] == ["bind:*.example.com"]  # canonical: lower-cased
    fetched = admin.get(f"/credentials/{body['id']}")
    assert fetched.status == 200 and fetched.json["token"] is None
    assert {k: v for k, v in fetched.json.items() if k != "token"} == {
        k: v for k, v in body.items() if k != "token"
    }
    listed = admin.get("/credentials").json["credentials"]
    assert [c["id"] for c in listed] == [body["id"]] and listed[0]["token"] is None
    updated = admin.patch(f"/credentials/{body['id']}", {"description": "x"})
    assert updated.status == 200 and updated.json["token"] is None
    assert body["token"] not in fetched.text + updated.text + json.dumps(listed)


def test_create_with_defaults_has_empty_acl(account):
    created = account.member.post("/credentials", {})
    assert created.status == 201
    assert created.json["acl"] == [] and created.json["description"] == ""
    assert created.json["metadata"] == "" and created.json["owner_id"] == account.member.id
    # what the reference client sends
    sent = account.member.post("/credentials", {"description": "", "metadata": "", "acl": []})
    assert sent.status == 201 and sent.json["acl"] == []


def test_token_is_stored_only_as_hash(api, account):
    token = account.admin.post("/credentials", {"acl": ["*"]}).json["token"]
    for item in _scan_table(api):
        assert token not in json.dumps(item, default=str)


def _scan_table(api):
    if api.level == "http":
        client = api.stack.store_client()
    else:
        from chalicelib.core import store

        client = store.connection().client
    items, kwargs = [], {"TableName": "tunnel-service"}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@pytest.mark.parametrize(
    "rule",
    [
        "bind:",
        "bind",
        "BIND:example.com",
        "allow:example.com",
        "bind:exa mple.com",
        "bind:a*.example.com",
        "bind:example.*.com",
        "bind:*example.com",
        "bind:-a.com",
        "bind:example..com",
        "bind:example.com:0",
        "bind:example.com:65536",
        "bind:host:abc",
        "bind::80",
        "bind:[zz]:80",
        "bind:a*=b",
        "bind:k=",
        "bind:=v",
        "bind:k=v v",
        "**",
        "bind:" + "a" * 64 + ".com",
        "bind:" + "a." * 300 + "com",
        "",
    ],
)
def test_bad_acl_rule_returns_400_naming_it(account, rule):
    resp = account.admin.post("/credentials", {"acl": ["bind:ok.example.com", rule]})
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == "acl"
    assert repr(rule)[:60] in resp.json["msg"] or rule[:40] in resp.json["msg"]
    assert account.admin.get("/credentials").json["credentials"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"acl": "bind:*"},
        {"acl": [5]},
        {"acl": ["*"] * 101},
        {"description": "x" * 256},
        {"metadata": "m" * 4097},
        {"owner_id": 5},
        {"token": "mine"},
    ],
)
def test_bad_create_body_returns_400(account, body):
    assert account.admin.post("/credentials", body).status == 400


@pytest.mark.parametrize(
    "path, body",
    [
        ("/credentials", {"description": "\ud800"}),
        ("/credentials", {"acl": ["bind:\udc00.com"]}),
        ("/bot_users", {"name": "bot\ud800"}),
        ("/reserved_domains", {"domain": "\ud800.example.com"}),
        ("/api_keys", {"metadata": "\udfff"}),
        ("/abuse_reports", {"urls": ["http://\ud800.com/"]}),
    ],
)
def test_unpaired_surrogate_escape_in_a_body_returns_400_not_500(api, path, body):
    caller = api.new_account(reporter=True).admin
    resp = caller.post(path, body)  # json.dumps sends the lone surrogate as a \u escape
    assert resp.status == 400, resp
    assert resp.json["error_code"] == errors.INVALID_JSON


def test_valid_acl_rules_are_accepted(account):
    rules = [
        "*",
        "bind:*",
        "bind:example.com",
        "bind:*.example.com",
        "bind:x.example.com:443",
        "bind:1.tcp.example.com:12345",
        "bind:10.0.0.1:22",
        "bind:[::1]:8080",
        "bind:*=prod",
        "bind:env=*",
        "bind:env=prod",
        "bind:*=*",
        "bind:app/name=web_1",
    ]
    created = account.admin.post("/credentials", {"acl": rules})
    assert created.status == 201, created
    assert created.json["acl"] == rules
    assert account.admin.post("/credentials", {"acl": ["*"] * 100}).status == 201


def test_update_description_metadata_acl(account):
    cred = account.admin.post("/credentials", {"description": "d", "acl": ["*"]}).json
    updated = account.admin.patch(f"/credentials/{cred['id']}", {"acl": ["bind:a.example.com"]})
    assert updated.status == 200
    assert updated.json["acl"] == ["bind:a.example.com"] and updated.json["description"] == "d"
    cleared = account.admin.patch(f"/credentials/{cred['id']}", {"acl": [], "metadata": "m"})
    assert cleared.json["acl"] == [] and cleared.json["metadata"] == "m"
    bad = account.admin.patch(f"/credentials/{cred['id']}", {"acl": ["nope"]})
    assert bad.status == 400 and "nope" in bad.json["msg"]


def test_owner_id_cannot_be_updated(account):
    cred = account.admin.post("/credentials", {}).json
    for owner in (account.member.id, account.admin.id):
        resp = account.admin.patch(f"/credentials/{cred['id']}", {"owner_id": owner})
        assert resp.status == 400 and "owner_id" in resp.json["msg"]
    assert account.admin.get(f"/credentials/{cred['id']}").json["owner_id"] == account.admin.id


def test_member_naming_another_owner_gets_403(account):
    resp = account.member.post("/credentials", {"owner_id": account.admin.id})
    assert resp.status == 403 and resp.json["error_code"] == errors.FORBIDDEN
    bot = account.admin.post("/bot_users", {"name": "b"}).json
    assert account.member.post("/credentials", {"owner_id": bot["id"]}).status == 403
    own = account.member.post("/credentials", {"owner_id": account.member.id})
    assert own.status == 201 and own.json["owner_id"] == account.member.id


def test_admin_creates_credential_owned_by_bot_or_member(account):
    bot = account.admin.post("/bot_users", {"name": "agent"}).json
    for owner in (bot["id"], account.member.id):
        created = account.admin.post("/credentials", {"owner_id": owner, "acl": ["bind:*"]})
        assert created.status == 201, created
        assert created.json["owner_id"] == owner and created.json["token"]


@pytest.mark.parametrize(
    "owner",
    ["bot_0ERYqBR5B9RMvMY4cZCztl2IB7s", "cr_x", "nobody", "usr_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_owner_must_be_a_principal_of_the_account(account, owner):
    resp = account.admin.post("/credentials", {"owner_id": owner})
    assert resp.status == 400 and resp.json["details"]["field"] == "owner_id"


def test_member_may_change_only_own_credentials(account):
    admin_cred = account.admin.post("/credentials", {}).json
    assert account.member.get(f"/credentials/{admin_cred['id']}").status == 200
    assert account.member.patch(f"/credentials/{admin_cred['id']}", {"acl": []}).status == 403
    assert account.member.delete(f"/credentials/{admin_cred['id']}").status == 403
    own = account.member.post("/credentials", {}).json
    assert account.member.patch(f"/credentials/{own['id']}", {"metadata": "x"}).status == 200
    assert account.admin.patch(f"/credentials/{own['id']}", {"metadata": "y"}).status == 200
    assert account.member.delete(f"/credentials/{own['id']}").status == 204


def test_delete_returns_204_then_404(account):
    cred = account.admin.post("/credentials", {}).json
    deleted = account.admin.delete(f"/credentials/{cred['id']}")
    assert deleted.status == 204 and deleted.text == ""
    assert account.admin.get(f"/credentials/{cred['id']}").status == 404
    assert account.admin.delete(f"/credentials/{cred['id']}").status == 404


def test_other_accounts_credentials_are_not_found(account, other_account):
    cred = account.admin.post("/credentials", {"description": "mine"}).json
    other = other_account.admin
    assert other.get(f"/credentials/{cred['id']}").status == 404
    assert other.patch(f"/credentials/{cred['id']}", {"metadata": "x"}).status == 404
    assert other.delete(f"/credentials/{cred['id']}").status == 404
    assert other.get("/credentials").json["credentials"] == []
    assert account.admin.get(f"/credentials/{cred['id']}").json["metadata"] == ""


@pytest.mark.parametrize(
    "cred_id",
    ["cr_x", "nope", "bot_0ERYqBR5B9RMvMY4cZCztl2IB7s", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_malformed_or_unknown_credential_id_returns_404(account, cred_id):
    assert account.admin.get(f"/credentials/{cred_id}").status == 404
    assert account.admin.patch(f"/credentials/{cred_id}", {}).status == 404
    assert account.admin.delete(f"/credentials/{cred_id}").status == 404


def test_list_paginates_newest_first(account):
    created = [account.admin.post("/credentials", {}).json["id"] for _ in range(5)]
    first = account.admin.get("/credentials?limit=2").json
    assert [c["id"] for c in first["credentials"]] == created[:-3:-1]
    assert "before_id=" in first["next_page_uri"]
    seen, url = [], "/credentials?limit=2"
    while url:
        page = account.admin.get(url).json
        seen += [c["id"] for c in page["credentials"]]
        url = page["next_page_uri"]
    assert seen == list(reversed(created))


# ---- the bind decision (store-backed; in-process, where the test shares the store) -----------
@pytest.fixture
def inproc_account(inprocess_api):
    return inprocess_api.new_account()


def test_credential_may_bind_follows_the_acl(inproc_account):
    from chalicelib.credentials import credential_may_bind

    admin = inproc_account.admin
    cred = admin.post("/credentials", {"acl": ["bind:*.example.com", "bind:env=prod"]}).json
    token = cred["token"]
    assert credential_may_bind(token, domain="a.example.com")
    assert credential_may_bind(token, domain="*.example.com")
    assert not credential_may_bind(token, domain="example.com")
    assert not credential_may_bind(token, domain="a.example.org")
    assert credential_may_bind(token, labels={"env": "prod"})
    assert not credential_may_bind(token, labels={"env": "dev"})
    assert not credential_may_bind(token, address="a.example.com:80")
    # ACL changes take effect at once
    admin.patch(f"/credentials/{cred['id']}", {"acl": []})
    assert credential_may_bind(token, address="a.example.com:80")
    # an unknown or deleted token binds nothing
    assert not credential_may_bind("not-a-token", domain="a.example.com")
    assert not credential_may_bind("", domain="a.example.com")
    admin.delete(f"/credentials/{cred['id']}")
    assert not credential_may_bind(token, domain="a.example.com")
    with pytest.raises(ValueError):
        credential_may_bind(token)


def test_inactive_bot_credentials_stop_binding_and_reactivation_restores(inproc_account):
    from chalicelib.credentials import credential_may_bind

    admin = inproc_account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    token = admin.post("/credentials", {"owner_id": bot["id"]}).json["token"]
    assert credential_may_bind(token, domain="x.example.com")
    admin.patch(f"/bot_users/{bot['id']}", {"active": False})
    assert not credential_may_bind(token, domain="x.example.com")
    admin.patch(f"/bot_users/{bot['id']}", {"active": True})
    assert credential_may_bind(token, domain="x.example.com")
    admin.delete(f"/bot_users/{bot['id']}")
    assert not credential_may_bind(token, domain="x.example.com")


def test_deleting_a_bot_with_many_credentials_deletes_them_all(inproc_account):
    """More owned items than one transaction holds (2 writes each): chunked deletion."""
    from chalicelib import credentials
    from chalicelib.core import store

    admin = inproc_account.admin
    bot = admin.post("/bot_users", {"name": "busy"}).json
    for _ in range(60):
        assert admin.post("/credentials", {"owner_id": bot["id"]}).status == 201
    for _ in range(5):
        assert admin.post("/api_keys", {"owner_id": bot["id"]}).status == 201
    assert admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert credentials.owned_by(inproc_account.id, bot["id"]) == []
    assert admin.get("/credentials").json["credentials"] == []
    leftovers = [
        i
        for i in store.model().scan()
        if i.kind in ("credential_token", "unique") and (i.data or {}).get("owner_id") == bot["id"]
    ]
    assert leftovers == []
