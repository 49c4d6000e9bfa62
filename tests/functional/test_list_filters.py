"""``filter`` on list routes (chalicelib.filters, chalicelib.rest.filtered_page), at both levels."""

from urllib.parse import parse_qs, quote, urlsplit

import pytest

from chalicelib import filters
from chalicelib.core import errors
from tests.functional.test_api_keys import assert_contract_error


def _make(caller, descriptions):
    """Credentials with these descriptions, oldest first; their ids newest first."""
    made = [caller.post("/credentials", {"description": d}).json["id"] for d in descriptions]
    return list(reversed(made))


def _walk(caller, first):
    """Every page from ``first`` on, following next_page_uri verbatim."""
    pages, url = [], first
    while url:
        resp = caller.get(url)
        assert resp.status == 200, resp
        pages.append(resp.json)
        url = resp.json["next_page_uri"]
    return pages


def test_filter_returns_only_matching_items_newest_first(account):
    admin = account.admin
    ids_ = _make(admin, ["web-1", "db-1", "web-2", "db-2", "web-3"])
    expr = quote('obj.description.startsWith("web")')
    body = admin.get(f"/credentials?filter={expr}").json
    assert [c["description"] for c in body["credentials"]] == ["web-3", "web-2", "web-1"]
    assert body["next_page_uri"] is None
    assert [c["id"] for c in body["credentials"]] == [
        i for i in ids_ if i in {c["id"] for c in body["credentials"]}
    ]


def test_filtered_pages_carry_the_filter_and_end_without_an_empty_page(account):
    admin = account.admin
    _make(admin, ["web-1", "db-1", "web-2", "db-2", "web-3", "web-4"])
    expr = 'obj.description.startsWith("web") && obj.metadata == ""'
    pages = _walk(admin, f"/credentials?limit=2&filter={quote(expr)}")
    assert [[c["description"] for c in p["credentials"]] for p in pages] == [
        ["web-4", "web-3"],
        ["web-2", "web-1"],
    ]
    query = parse_qs(urlsplit(pages[0]["next_page_uri"]).query)
    assert query["filter"] == [expr] and query["limit"] == ["2"]
    assert pages[-1]["next_page_uri"] is None


def test_filter_with_no_match_returns_an_empty_last_page(account):
    _make(account.admin, ["a", "b"])
    body = account.admin.get("/credentials?filter=" + quote('obj.description == "zzz"')).json
    assert body["credentials"] == [] and body["next_page_uri"] is None


def test_filter_on_created_at_with_time_now(account):
    _make(account.admin, ["new"])
    recent = quote('obj.created_at > timestamp(time.now).subtract("1h")')
    future = quote('obj.created_at > timestamp(time.now).add("1h")')
    assert len(account.admin.get(f"/credentials?filter={recent}").json["credentials"]) == 1
    assert account.admin.get(f"/credentials?filter={future}").json["credentials"] == []


@pytest.mark.parametrize(
    "expr", ["obj.description ==", "description == 'x'", "obj.nope == 1", "obj.description > 1"]
)
def test_bad_filter_returns_400_naming_the_error(account, expr):
    _make(account.admin, ["a"])
    resp = account.admin.get(f"/credentials?filter={quote(expr)}")
    assert_contract_error(resp, 400, errors.INVALID_FILTER)
    assert resp.json["msg"].startswith("Invalid filter")
    assert resp.json["details"]["parameter"] == "filter"


def test_filter_works_on_every_list_of_a_module_collection(account):
    """Filtering is in the shared list path: a nested collection (HTTPS edge routes) has it."""
    admin = account.admin
    edge = admin.post("/edges/https", {}).json
    for path in ("/a", "/b/c", "/b/d"):
        admin.post(
            f"/edges/https/{edge['id']}/routes", {"match_type": "path_prefix", "match": path}
        )
    expr = quote('obj.match.startsWith("/b")')
    routes = admin.get(f"/edges/https/{edge['id']}/routes?filter={expr}").json["routes"]
    assert sorted(r["match"] for r in routes) == ["/b/c", "/b/d"]


def test_before_id_may_be_sent_as_before_id_camel_case(account):
    admin = account.admin
    ids_ = _make(admin, ["1", "2", "3"])
    snake = admin.get(f"/credentials?before_id={ids_[0]}").json["credentials"]
    camel = admin.get(f"/credentials?beforeId={ids_[0]}").json["credentials"]
    assert [c["id"] for c in camel] == [c["id"] for c in snake] == ids_[1:]
    assert admin.get(f"/credentials?beforeId={ids_[0]}&before_id={ids_[0]}").status == 200
    resp = admin.get(f"/credentials?beforeId={ids_[0]}&before_id={ids_[1]}")
    assert_contract_error(resp, 400, errors.INVALID_QUERY)
    assert_contract_error(admin.get("/credentials?beforeId=nope"), 400, errors.INVALID_QUERY)


def test_filtered_page_reads_at_most_the_scan_limit(inprocess_api, monkeypatch):
    """A page stops after SCAN_LIMIT items read, matched or not, and the next page continues
    after the last item read; no item is skipped or repeated."""
    monkeypatch.setattr(filters, "SCAN_LIMIT", 3)
    admin = inprocess_api.new_account().admin
    ids_ = _make(admin, ["hit-old", "x1", "x2", "x3", "x4", "hit-new", "x5"])
    expr = quote('obj.description.startsWith("hit")')
    pages = _walk(admin, f"/credentials?limit=5&filter={expr}")
    # 7 items, 3 read per page: [x5 hit-new x4] [x3 x2 x1] [hit-old]
    assert [[c["description"] for c in p["credentials"]] for p in pages] == [
        ["hit-new"],
        [],
        ["hit-old"],
    ]
    assert parse_qs(urlsplit(pages[0]["next_page_uri"]).query)["before_id"] == [ids_[2]]
    assert parse_qs(urlsplit(pages[1]["next_page_uri"]).query)["before_id"] == [ids_[5]]


def test_filtered_page_stops_at_limit_matches(inprocess_api, monkeypatch):
    monkeypatch.setattr(filters, "SCAN_LIMIT", 100)
    admin = inprocess_api.new_account().admin
    ids_ = _make(admin, ["hit-1", "hit-2", "miss", "hit-3"])
    expr = quote('obj.description.startsWith("hit")')
    first = admin.get(f"/credentials?limit=2&filter={expr}").json
    assert [c["description"] for c in first["credentials"]] == ["hit-3", "hit-2"]
    assert parse_qs(urlsplit(first["next_page_uri"]).query)["before_id"] == [ids_[2]]
    last = admin.get(f"/credentials?limit=1&filter={expr}&before_id={ids_[2]}").json
    assert [c["description"] for c in last["credentials"]] == ["hit-1"]
    assert last["next_page_uri"] is None
