"""Error bodies, auth, version header, pagination and account isolation, over HTTP."""

import pytest

from chalicelib.core import errors
from tests.integration.helpers import assert_error, fake_id


# ---- error bodies --------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/nope", "/api_keys/ak_x/extra", "/"])
def test_unknown_paths_get_404_with_and_without_a_key(target, path):
    assert_error(target.request("GET", path), 404, errors.NOT_FOUND)
    assert_error(target.request("GET", path, key=None), 404, errors.NOT_FOUND)


@pytest.mark.parametrize(
    "data, content_type, status, code",
    [
        (b"{bad", "application/json", 400, errors.INVALID_JSON),
        (b"[1]", "application/json", 400, errors.INVALID_JSON),
        (b'{"description": "x"}', "text/plain", 415, errors.UNSUPPORTED_MEDIA_TYPE),
        (b"x" * (256 * 1024 + 1), "application/json", 413, errors.BODY_TOO_LARGE),
    ],
)
def test_bad_bodies_get_contract_errors(target, data, content_type, status, code):
    resp = target.request("POST", "/api_keys", data=data, headers={"Content-Type": content_type})
    assert_error(resp, status, code)


def test_unknown_field_is_named_with_the_accepted_ones(target):
    body = assert_error(
        target.request("POST", "/api_keys", json_body={"descripton": "x"}),
        400,
        errors.UNKNOWN_FIELD,
    )
    assert "descripton" in body["msg"] and "description" in body["msg"]
    assert body["details"]["field"] == "descripton"


def test_unknown_query_parameter_is_400(target):
    assert_error(
        target.request("GET", "/api_keys", params={"sort": "asc"}), 400, errors.UNKNOWN_QUERY
    )


def test_operation_id_is_returned_on_success(target):
    resp = target.request("GET", "/api_keys")
    assert resp.status_code == 200
    assert resp.headers.get("operation-id", "").startswith("op_")


# ---- auth ----------------------------------------------------------------------------
@pytest.mark.parametrize("header", ["Bearer not-a-key", "Basic abc", "Bearer", "Token x"])
def test_malformed_or_unknown_keys_get_401(target, header):
    resp = target.request("GET", "/api_keys", key=None, headers={"Authorization": header})
    assert_error(resp, 401, errors.UNAUTHORIZED)


def test_a_deleted_key_stops_working_at_once(target):
    key = target.create("/api_keys", {"description": "revoke me"})
    assert target.request("GET", "/api_keys", key=key["token"]).status_code == 200
    assert target.request("DELETE", key["uri"]).status_code == 204
    assert_error(target.request("GET", "/api_keys", key=key["token"]), 401, errors.UNAUTHORIZED)


def test_member_may_not_manage_others_keys(target, member_key):
    admin_key = target.create("/api_keys", {"description": "admin's"})
    resp = target.request("DELETE", admin_key["uri"], key=member_key)
    assert_error(resp, 403, errors.FORBIDDEN)
    assert target.request("GET", admin_key["uri"], key=member_key).status_code == 200


# ---- version header ------------------------------------------------------------------
def test_missing_version_header_is_400(target):
    assert_error(target.request("GET", "/api_keys", version=None), 400, errors.MISSING_VERSION)


@pytest.mark.parametrize("version", ["1", "3", "two"])
def test_unsupported_version_is_400_listing_supported(target, version):
    body = assert_error(
        target.request("GET", "/api_keys", version=version), 400, errors.UNSUPPORTED_VERSION
    )
    assert "2" in body["msg"]


def test_ngrok_version_header_is_accepted(target):
    resp = target.request("GET", "/api_keys", version=None, headers={"Ngrok-Version": "2"})
    assert resp.status_code == 200, resp.text


# ---- pagination ----------------------------------------------------------------------
def test_pages_follow_next_page_uri_newest_first_to_a_null_end(target):
    made = [target.create("/api_keys", {"description": f"page {i}"})["id"] for i in range(5)]
    seen, url, pages = [], "/api_keys?limit=2", 0
    while url:
        resp = target.request("GET", url)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert len(body["keys"]) <= 2 and body["keys"], body
        assert body["uri"].endswith("/api_keys")
        seen += [k["id"] for k in body["keys"]]
        url = body["next_page_uri"]
        if url:
            assert url.startswith("http") and "before_id=" in url and "limit=2" in url
        pages += 1
        assert pages < 100
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen, reverse=True)  # ids sort by creation time
    assert [i for i in seen if i in made] == list(reversed(made))


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "x"},
        {"before_id": "nope"},
        {"before_id": "cr_" + "A" * 27},
    ],
)
def test_bad_page_parameters_are_400(target, params):
    assert_error(target.request("GET", "/api_keys", params=params), 400, errors.INVALID_QUERY)


def test_limit_as_string_and_before_id_are_exclusive(target):
    made = [target.create("/api_keys", {})["id"] for _ in range(3)]
    resp = target.request("GET", "/api_keys", params={"limit": "1", "before_id": made[2]})
    assert [k["id"] for k in resp.json()["keys"]] == [made[1]]


# ---- isolation -----------------------------------------------------------------------
def test_other_accounts_cannot_see_or_touch_my_resources(target, other_key):
    key = target.create("/api_keys", {"description": "mine"})
    for method, body in (("GET", None), ("PATCH", {"description": "x"}), ("DELETE", None)):
        kwargs = {"json_body": body} if body is not None else {}
        assert_error(
            target.request(method, key["uri"], key=other_key, **kwargs), 404, errors.NOT_FOUND
        )
    listed = target.request("GET", "/api_keys", key=other_key).json()["keys"]
    assert key["id"] not in {k["id"] for k in listed}
    assert target.request("GET", key["uri"]).status_code == 200


def test_malformed_and_unknown_ids_are_404(target):
    for path in ("/api_keys/nope", "/api_keys/" + fake_id("ak"), "/api_keys/" + fake_id("cr")):
        assert_error(target.request("GET", path), 404, errors.NOT_FOUND)
