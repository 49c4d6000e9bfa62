"""/api_keys at both levels (in-process and over HTTP), and the cross-cutting rules."""

import pytest

from chalicelib.core import errors, ids

KEY_FIELDS = {"id", "uri", "description", "metadata", "created_at", "token", "owner_id"}


def test_create_api_key_returns_201_with_token_once(account):
    admin = account.admin
    created = admin.post("/api_keys", {"description": "ci", "metadata": '{"a":1}'})
    assert created.status == 201, created
    body = created.json
    assert set(body) == KEY_FIELDS
    assert ids.is_valid(body["id"], "ak")
    assert body["token"] and len(body["token"]) >= 22
    assert body["owner_id"] == admin.id
    assert body["uri"].endswith(f"/api_keys/{body['id']}") and body["uri"].startswith("http")
    fetched = admin.get(f"/api_keys/{body['id']}")
    assert fetched.status == 200 and fetched.json["token"] is None
    assert {k: v for k, v in fetched.json.items() if k != "token"} == {
        k: v for k, v in body.items() if k != "token"
    }
    listed = admin.get("/api_keys").json["keys"]
    assert all(key["token"] is None for key in listed)
    # the new key works
    new_key = admin.api.request("GET", "/api_keys", key=body["token"])
    assert new_key.status == 200


def test_create_accepts_reference_client_defaults(account):
    created = account.admin.post("/api_keys", {"description": "", "metadata": ""})
    assert created.status == 201
    assert created.json["description"] == "" and created.json["metadata"] == ""


def test_update_changes_only_sent_fields(account):
    admin = account.admin
    key = admin.post("/api_keys", {"description": "d", "metadata": "m"}).json
    updated = admin.patch(f"/api_keys/{key['id']}", {"metadata": "m2"})
    assert updated.status == 200
    assert updated.json["description"] == "d" and updated.json["metadata"] == "m2"
    assert updated.json["token"] is None
    again = admin.patch(f"/api_keys/{key['id']}", {"id": key["id"], "description": "d2"})
    assert again.status == 200 and again.json["description"] == "d2"
    wrong_id = admin.patch(f"/api_keys/{key['id']}", {"id": "ak_other", "description": "x"})
    assert wrong_id.status == 400 and "id" in wrong_id.json["msg"]


def test_delete_returns_204_and_revokes_the_key(account):
    admin = account.admin
    key = admin.post("/api_keys", {}).json
    deleted = admin.delete(f"/api_keys/{key['id']}")
    assert deleted.status == 204 and deleted.text == ""
    assert admin.get(f"/api_keys/{key['id']}").status == 404
    assert admin.delete(f"/api_keys/{key['id']}").status == 404
    revoked = admin.api.request("GET", "/api_keys", key=key["token"])
    assert revoked.status == 401 and revoked.json["error_code"] == errors.UNAUTHORIZED


@pytest.mark.parametrize(
    "body, field",
    [
        ({"description": "x" * 256}, "description"),
        ({"description": "é" * 128}, "description"),  # 256 bytes in UTF-8
        ({"metadata": "x" * 4097}, "metadata"),
        ({"description": 5}, "description"),
        ({"owner_id": ["usr_x"]}, "owner_id"),
    ],
)
def test_create_with_bad_field_returns_400_naming_it(account, body, field):
    resp = account.admin.post("/api_keys", body)
    assert resp.status == 400, resp
    assert field in resp.json["msg"] and resp.json["details"]["field"] == field
    assert len(account.admin.get("/api_keys").json["keys"]) == 2  # nothing written


def test_limits_are_inclusive(account):
    resp = account.admin.post(
        "/api_keys", {"description": "é" * 127 + "x", "metadata": "m" * 4096}
    )
    assert resp.status == 201


def test_unknown_field_returns_400_listing_accepted_fields(account):
    resp = account.admin.post("/api_keys", {"descripton": "typo"})
    assert resp.status == 400
    assert resp.json["error_code"] == errors.UNKNOWN_FIELD
    assert "descripton" in resp.json["msg"] and "description" in resp.json["msg"]


@pytest.mark.parametrize(
    "data, content_type, status, code",
    [
        (b"{bad", "application/json", 400, errors.INVALID_JSON),
        (b"[1, 2]", "application/json", 400, errors.INVALID_JSON),
        (b'"text"', "application/json", 400, errors.INVALID_JSON),
        (b'{"description": "x"}', "text/plain", 415, errors.UNSUPPORTED_MEDIA_TYPE),
        (b"x" * (256 * 1024 + 1), "application/json", 413, errors.BODY_TOO_LARGE),
        (
            b'{"description": ' + b"[" * 50000 + b"]" * 50000 + b"}",
            "application/json",
            400,
            errors.INVALID_JSON,
        ),
    ],
)
def test_bad_bodies_get_contract_errors(api, account, data, content_type, status, code):
    resp = api.request(
        "POST",
        "/api_keys",
        key=account.admin.token,
        data=data,
        headers={"Content-Type": content_type},
    )
    assert resp.status == status, resp
    assert resp.json["error_code"] == code and resp.json["status_code"] == status


def assert_contract_error(resp, status, code):
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"error_code", "status_code", "msg", "details"}
    assert body["error_code"] == code and body["status_code"] == status and body["msg"]
    assert ids.is_valid(body["details"]["operation_id"], "op")
    assert all(isinstance(v, str) for v in body["details"].values())


def test_missing_key_returns_401(api):
    assert_contract_error(api.request("GET", "/api_keys"), 401, errors.UNAUTHORIZED)


@pytest.mark.parametrize(
    "header", ["Bearer not-a-key", "Basic abc", "Bearer", "bearer  ", "Token x"]
)
def test_wrong_or_malformed_key_returns_401(api, account, header):
    resp = api.request("GET", "/api_keys", headers={"Authorization": header})
    assert_contract_error(resp, 401, errors.UNAUTHORIZED)


def test_missing_version_header_returns_400(api, account):
    resp = api.request("GET", "/api_keys", key=account.admin.token, version=None)
    assert_contract_error(resp, 400, errors.MISSING_VERSION)


@pytest.mark.parametrize("version", ["1", "3", "two", ""])
def test_wrong_version_returns_400_listing_supported(api, account, version):
    resp = api.request("GET", "/api_keys", key=account.admin.token, version=version)
    assert_contract_error(resp, 400, errors.UNSUPPORTED_VERSION)
    assert "2" in resp.json["msg"]


def test_ngrok_version_header_is_accepted(api, account):
    resp = api.request(
        "GET", "/api_keys", key=account.admin.token, version=None, headers={"Ngrok-Version": "2"}
    )
    assert resp.status == 200


@pytest.mark.parametrize("path", ["/nope", "/api_keys/ak_x/extra", "/"])
def test_unknown_path_returns_404(api, account, path):
    assert_contract_error(api.request("GET", path, key=account.admin.token), 404, errors.NOT_FOUND)
    assert_contract_error(api.request("GET", path), 404, errors.NOT_FOUND)


@pytest.mark.parametrize(
    "method, path",
    [
        ("PUT", "/api_keys"),
        ("DELETE", "/api_keys"),
        ("POST", "/api_keys/ak_x"),
        ("PUT", "/api_keys/ak_x"),
    ],
)
def test_wrong_method_returns_405(api, account, method, path):
    resp = api.request(method, path, key=account.admin.token)
    assert_contract_error(resp, 405, errors.METHOD_NOT_ALLOWED)


@pytest.mark.parametrize(
    "key_id", ["ak_x", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", "nope", "ak_0ERYqBR5B9RMvMY4cZCztl2IB7s"]
)
def test_malformed_or_unknown_id_returns_404(account, key_id):
    for method in ("GET", "DELETE"):
        assert_contract_error(
            account.admin.request(method, f"/api_keys/{key_id}"), 404, errors.NOT_FOUND
        )
    assert_contract_error(account.admin.patch(f"/api_keys/{key_id}", {}), 404, errors.NOT_FOUND)


@pytest.mark.parametrize(
    "query,code",
    [
        ("limit=0", errors.INVALID_QUERY),
        ("limit=101", errors.INVALID_QUERY),
        ("limit=abc", errors.INVALID_QUERY),
        ("limit=-1", errors.INVALID_QUERY),
        ("limit=%C2%B2", errors.INVALID_QUERY),
        ("limit=1&bogus=2", errors.UNKNOWN_QUERY),
        ("before_id=nope", errors.INVALID_QUERY),
        ("before_id=cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", errors.INVALID_QUERY),
        ("filter=x", errors.INVALID_FILTER),
    ],
)
def test_bad_list_query_returns_400(account, query, code):
    resp = account.admin.get(f"/api_keys?{query}")
    assert_contract_error(resp, 400, code)


def test_member_cannot_create_key_for_another_owner(account):
    resp = account.member.post("/api_keys", {"owner_id": account.admin.id})
    assert_contract_error(resp, 403, errors.FORBIDDEN)


def test_admin_can_create_key_for_member_and_member_uses_it(account):
    created = account.admin.post("/api_keys", {"owner_id": account.member.id})
    assert created.status == 201 and created.json["owner_id"] == account.member.id
    own = account.member.api.request(
        "POST", "/api_keys", key=created.json["token"], json_body={"owner_id": account.admin.id}
    )
    assert own.status == 403  # the new key speaks for the member, not the admin


def test_member_cannot_change_keys_of_others_but_can_change_own(account):
    admin_key = account.admin.post("/api_keys", {}).json
    assert account.member.patch(f"/api_keys/{admin_key['id']}", {"metadata": "x"}).status == 403
    assert account.member.delete(f"/api_keys/{admin_key['id']}").status == 403
    assert account.member.get(f"/api_keys/{admin_key['id']}").status == 200
    own = account.member.post("/api_keys", {}).json
    assert account.member.patch(f"/api_keys/{own['id']}", {"metadata": "x"}).status == 200
    assert account.member.delete(f"/api_keys/{own['id']}").status == 204
    assert account.admin.get(f"/api_keys/{admin_key['id']}").json["metadata"] == ""


def test_owner_must_be_a_principal_of_the_account(account, other_account):
    resp = account.admin.post("/api_keys", {"owner_id": other_account.admin.id})
    assert resp.status == 400 and "owner_id" in resp.json["msg"]
    resp = account.admin.post("/api_keys", {"owner_id": "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s"})
    assert resp.status == 400


def test_other_accounts_keys_are_not_found(account, other_account):
    key = account.admin.post("/api_keys", {"description": "mine"}).json
    other = other_account.admin
    assert other.get(f"/api_keys/{key['id']}").status == 404
    assert other.patch(f"/api_keys/{key['id']}", {"metadata": "x"}).status == 404
    assert other.delete(f"/api_keys/{key['id']}").status == 404
    assert key["id"] not in [k["id"] for k in other.get("/api_keys").json["keys"]]
    assert account.admin.get(f"/api_keys/{key['id']}").json["metadata"] == ""


def test_list_paginates_newest_first_without_gaps(account):
    admin = account.admin
    created = [admin.post("/api_keys", {"description": str(i)}).json["id"] for i in range(25)]
    expected = list(reversed([account.admin.api_key_id, account.member.api_key_id] + created))
    seen, url, pages = [], "/api_keys?limit=7", 0
    while url:
        page = admin.get(url)
        assert page.status == 200, page
        seen += [k["id"] for k in page.json["keys"]]
        assert page.json["uri"].endswith("/api_keys")
        url = page.json["next_page_uri"]
        pages += 1
        if url:
            assert url.startswith("http") and "before_id=" in url and "limit=7" in url
    assert seen == expected  # newest first, no duplicates, no gaps
    assert pages == 4  # 27 keys, 7 a page, no empty last page


def test_limit_may_arrive_as_string_and_defaults_to_100(account):
    for _ in range(3):
        account.admin.post("/api_keys", {})
    page = account.admin.get("/api_keys?limit=2")
    assert len(page.json["keys"]) == 2 and page.json["next_page_uri"]
    page = account.admin.get("/api_keys")
    assert len(page.json["keys"]) == 5 and page.json["next_page_uri"] is None


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/api_keys/{id}"),
        ("PATCH", "/api_keys/{id}"),
        ("DELETE", "/api_keys/{id}"),
        ("POST", "/api_keys"),
    ],
)
def test_unknown_query_parameter_on_any_route_returns_400_and_changes_nothing(
    account, method, path
):
    key = account.admin.post("/api_keys", {"description": "before"}).json
    body = {"description": "after"} if method in ("PATCH", "POST") else None
    resp = account.admin.request(
        method,
        path.format(id=key["id"]) + "?bogus=1",
        **({"json_body": body} if body is not None else {}),
    )
    assert_contract_error(resp, 400, errors.UNKNOWN_QUERY)
    assert "bogus" in resp.json["msg"]
    keys = account.admin.get("/api_keys").json["keys"]
    assert len(keys) == 3 and key["id"] in [k["id"] for k in keys]
    assert account.admin.get(f"/api_keys/{key['id']}").json["description"] == "before"
