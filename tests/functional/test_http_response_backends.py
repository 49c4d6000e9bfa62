"""/backends/http_response at both levels (in-process and over HTTP)."""

import pytest

from chalicelib.core import errors, ids

FIELDS = {"id", "uri", "created_at", "description", "metadata", "body", "headers", "status_code"}
PATH = "/backends/http_response"


def test_create_returns_201_with_every_field(account):
    resp = account.admin.post(
        PATH,
        {
            "description": "teapot",
            "metadata": '{"a":1}',
            "body": "I'm a teapot",
            "status_code": 418,
            "headers": {"Content-Type": "text/plain", "X-A": "1"},
        },
    )
    assert resp.status == 201, resp
    body = resp.json
    assert set(body) == FIELDS
    assert ids.is_valid(body["id"], "bkdhr")
    assert body["uri"].startswith("http") and body["uri"].endswith(f"{PATH}/{body['id']}")
    assert body["headers"] == {"content-type": "text/plain", "x-a": "1"}
    assert body["status_code"] == 418 and body["body"] == "I'm a teapot"
    assert account.admin.get(f"{PATH}/{body['id']}").json == body
    assert account.member.get(PATH).json["backends"] == [body]


def test_create_defaults_and_empty_headers_are_null(account):
    resp = account.admin.post(PATH, {"description": "", "metadata": "", "body": "", "headers": {}})
    assert resp.status == 201, resp
    assert resp.json["status_code"] == 200 and resp.json["headers"] is None
    assert resp.json["description"] == "" and resp.json["body"] == ""
    assert account.admin.post(PATH, {}).json["headers"] is None


def test_update_with_only_metadata_leaves_the_rest(account):
    created = account.admin.post(
        PATH, {"description": "d", "body": "b", "status_code": 503, "headers": {"A": "1"}}
    ).json
    updated = account.admin.patch(f"{PATH}/{created['id']}", {"metadata": "m"})
    assert updated.status == 200, updated
    assert updated.json == {**created, "metadata": "m"}


def test_update_replaces_headers_whole_and_empty_map_clears(account):
    created = account.admin.post(PATH, {"headers": {"A": "1", "B": "2"}}).json
    updated = account.admin.patch(f"{PATH}/{created['id']}", {"headers": {"C": "3"}}).json
    assert updated["headers"] == {"c": "3"}
    cleared = account.admin.patch(f"{PATH}/{created['id']}", {"headers": {}}).json
    assert cleared["headers"] is None


@pytest.mark.parametrize(
    "body, field",
    [
        ({"status_code": 99}, "status_code"),
        ({"status_code": 600}, "status_code"),
        ({"status_code": "200"}, "status_code"),
        ({"status_code": True}, "status_code"),
        ({"status_code": 204, "body": "x"}, "body"),
        ({"status_code": 304, "body": "x"}, "body"),
        ({"status_code": 101, "body": "x"}, "body"),
        ({"headers": {"bad name": "x"}}, "headers"),
        ({"headers": {"": "x"}}, "headers"),
        ({"headers": {"X-A": "1", "x-a": "2"}}, "headers"),
        ({"headers": {"X-A": "a\r\nInjected: 1"}}, "headers"),
        ({"headers": {"X-A": 1}}, "headers"),
        ({"headers": ["X-A"]}, "headers"),
        ({"headers": {f"h{i}": "v" for i in range(51)}}, "headers"),
        ({"headers": {"X-A": "v" * 1025}}, "headers"),
        ({"body": "x" * 65537}, "body"),
        ({"description": "x" * 256}, "description"),
        ({"metadata": "x" * 4097}, "metadata"),
    ],
)
def test_create_with_bad_field_returns_400_and_writes_nothing(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field and field in resp.json["msg"]
    assert account.admin.get(PATH).json["backends"] == []


def test_body_limits_are_inclusive(account):
    resp = account.admin.post(
        PATH,
        {
            "body": "x" * 65536,
            "status_code": 200,
            "headers": {f"h{i}": "v" * 1024 for i in range(50)},
        },
    )
    assert resp.status == 201, resp
    assert account.admin.post(PATH, {"status_code": 204}).status == 201
    assert account.admin.post(PATH, {"status_code": 100}).status == 201
    assert account.admin.post(PATH, {"status_code": 599, "body": "x"}).status == 201


def test_update_to_bodyless_status_with_existing_body_returns_400(account):
    created = account.admin.post(PATH, {"body": "hello"}).json
    resp = account.admin.patch(f"{PATH}/{created['id']}", {"status_code": 204})
    assert resp.status == 400 and resp.json["details"]["field"] == "body"
    assert account.admin.get(f"{PATH}/{created['id']}").json == created
    ok = account.admin.patch(f"{PATH}/{created['id']}", {"status_code": 204, "body": ""})
    assert ok.status == 200 and ok.json["status_code"] == 204


def test_update_with_bad_field_leaves_state(account):
    created = account.admin.post(PATH, {"headers": {"A": "1"}}).json
    for bad in (
        {"headers": {"a b": "1"}},
        {"status_code": 1000},
        {"nope": 1},
        {"id": "bkdhr_other", "metadata": "x"},
    ):
        assert account.admin.patch(f"{PATH}/{created['id']}", bad).status == 400
    assert account.admin.get(f"{PATH}/{created['id']}").json == created
    same_id = account.admin.patch(
        f"{PATH}/{created['id']}", {"id": created["id"], "metadata": "x"}
    )
    assert same_id.status == 200


def test_delete_returns_204_then_404(account):
    created = account.admin.post(PATH, {}).json
    resp = account.admin.delete(f"{PATH}/{created['id']}")
    assert resp.status == 204 and resp.text == ""
    assert account.admin.get(f"{PATH}/{created['id']}").status == 404
    assert account.admin.delete(f"{PATH}/{created['id']}").status == 404


@pytest.mark.parametrize(
    "backend_id",
    ["bkdhr_x", "nope", "edgtcp_0ERYqBR5B9RMvMY4cZCztl2IB7s", "bkdhr_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_unknown_or_malformed_id_returns_404(account, backend_id):
    assert account.admin.get(f"{PATH}/{backend_id}").status == 404
    assert account.admin.patch(f"{PATH}/{backend_id}", {"metadata": "x"}).status == 404
    resp = account.admin.delete(f"{PATH}/{backend_id}")
    assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND


def test_other_accounts_backend_is_not_found(account, other_account):
    created = account.admin.post(PATH, {"body": "mine"}).json
    other = other_account.admin
    assert other.get(f"{PATH}/{created['id']}").status == 404
    assert other.patch(f"{PATH}/{created['id']}", {"body": "x"}).status == 404
    assert other.delete(f"{PATH}/{created['id']}").status == 404
    assert other.get(PATH).json["backends"] == []
    assert account.admin.get(f"{PATH}/{created['id']}").json == created


def test_list_paginates_250_backends_newest_first(api, account):
    if api.level != "http":
        pytest.skip("pagination across 250 items runs once, over HTTP (the logic is shared)")
    created = [account.admin.post(PATH, {"description": str(i)}).json["id"] for i in range(250)]
    seen, url, pages = [], PATH, 0
    while url:
        page = account.admin.get(url)
        assert page.status == 200, page
        seen += [b["id"] for b in page.json["backends"]]
        url = page.json["next_page_uri"]
        pages += 1
    assert seen == list(reversed(created)) and pages == 3
    seen, url = [], f"{PATH}?limit=50"
    while url:
        page = account.admin.get(url).json
        seen += [b["id"] for b in page["backends"]]
        url = page["next_page_uri"]
    assert seen == list(reversed(created))


def test_bad_list_query_returns_400(account):
    for query in ("limit=0", "limit=x", "before_id=ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s", "a=b"):
        assert account.admin.get(f"{PATH}?{query}").status == 400
