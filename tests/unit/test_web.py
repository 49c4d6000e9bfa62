"""chalicelib.web's request-level rules that need no store."""

from types import SimpleNamespace

import pytest

from chalicelib import web
from chalicelib.core import errors


def _request(context=None, headers=None):
    return SimpleNamespace(context=context or {}, headers=headers or {})


def test_view_without_authorizer_context_refuses():
    with pytest.raises(errors.Unauthorized):
        web.principal(_request())


@pytest.mark.parametrize(
    "context",
    [
        {
            "account_id": "acct_1",
            "principal_id": "usr_1",
            "principal_kind": "user",
            "role": "root",
            "api_key_id": "ak_1",
        },
        {
            "account_id": "",
            "principal_id": "usr_1",
            "principal_kind": "user",
            "role": "admin",
            "api_key_id": "ak_1",
        },
        {"principal_id": "usr_1"},
    ],
)
def test_incomplete_or_odd_authorizer_context_refuses(context):
    with pytest.raises(errors.Unauthorized):
        web.principal(_request({"authorizer": context}))


def test_principal_from_authorizer_context():
    found = web.principal(
        _request(
            {
                "authorizer": {
                    "account_id": "acct_1",
                    "principal_id": "usr_1",
                    "principal_kind": "user",
                    "role": "member",
                    "api_key_id": "ak_1",
                    "principalId": "usr_1",
                }
            }
        )
    )
    assert found.account_id == "acct_1" and not found.is_admin
    with pytest.raises(errors.Forbidden):
        found.require_admin("do this")


def test_base_url_uses_forwarded_proto_host_and_stage():
    req = _request(
        {"stage": "api", "path": "/api/api_keys"},
        {"host": "abc.execute-api.us-east-1.amazonaws.com", "x-forwarded-proto": "https"},
    )
    assert web.base_url(req) == "https://abc.execute-api.us-east-1.amazonaws.com/api"
    local = _request({"path": "/api_keys"}, {"host": "127.0.0.1:8000"})
    assert web.base_url(local) == "http://127.0.0.1:8000"


def test_public_base_url_wins(monkeypatch):
    from chalicelib.core import config

    monkeypatch.setenv("PUBLIC_BASE_URL", "https://api.example.test/")
    config.reset_settings()
    try:
        assert web.base_url(_request({}, {"host": "x"})) == "https://api.example.test"
    finally:
        monkeypatch.delenv("PUBLIC_BASE_URL")
        config.reset_settings()


def test_page_continues_after_the_last_item_or_the_cursor_given():
    c = web.Ctx(principal=None, base_url="http://h")
    page = web.page(c, "/things", "things", [{"id": "t_2"}, {"id": "t_1"}], True, 2)
    assert page["next_page_uri"] == "http://h/things?before_id=t_1&limit=2"
    # a list that skipped items past its last one names where it stopped reading
    page = web.page(c, "/things", "things", [], True, 2, cursor="t_0")
    assert page == {
        "things": [],
        "uri": "http://h/things",
        "next_page_uri": "http://h/things?before_id=t_0&limit=2",
    }
    assert web.page(c, "/things", "things", [{"id": "t_1"}], False, 2)["next_page_uri"] is None


# ---- the request checks every route passes (headers, query, body size, content type) -------------
def _call(path="/things", headers=None, query=None, body=b"", resource="/things", method="GET"):
    return SimpleNamespace(
        path=path,
        headers={"service-version": "2", **(headers or {})},
        query_params=query,
        raw_body=body,
        method=method,
        context={"resourcePath": resource},
    )


def _refused_request(req, cls):
    with pytest.raises(cls) as info:
        web._check_request(req)
    assert type(info.value) is cls
    return info.value


def test_a_request_without_a_version_header_is_err_ngrok_218_naming_both_headers():
    req = _call()
    del req.headers["service-version"]
    refusal = _refused_request(req, errors.MissingVersion)
    assert refusal.status_code == 400 and refusal.error_code == errors.MISSING_VERSION
    assert refusal.msg == (
        "Missing version header: send 'Service-Version: 2' (or 'Ngrok-Version: 2')"
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"service-version": "2"},
        {"ngrok-version": "2"},
        {"service-version": " 2 "},
        {"service-version": "2", "ngrok-version": "1"},
    ],
)
def test_version_2_in_either_header_passes(headers):
    req = _call()
    req.headers = headers
    web._check_request(req)


@pytest.mark.parametrize(
    "headers, sent",
    [
        ({"service-version": "3"}, "3"),
        ({"ngrok-version": "1"}, "1"),
        ({"service-version": ""}, ""),
        ({"service-version": "1", "ngrok-version": "2"}, "1"),
    ],
)
def test_another_version_is_err_ngrok_217_listing_the_supported_ones(headers, sent):
    req = _call()
    req.headers = headers
    refusal = _refused_request(req, errors.UnsupportedVersion)
    assert refusal.error_code == errors.UNSUPPORTED_VERSION and refusal.status_code == 400
    assert refusal.msg == f"Unsupported API version '{sent}'; supported versions: 2"


def test_the_openapi_document_needs_no_version_header():
    web._check_request(
        SimpleNamespace(
            path="/openapi.json",
            headers={},
            query_params=None,
            raw_body=None,
            method="GET",
            context=None,
        )
    )


def test_an_undeclared_query_parameter_is_err_ngrok_231_naming_it(monkeypatch):
    monkeypatch.setitem(web._query_allowed, ("/things", "GET"), frozenset({"limit", "filter"}))
    web._check_request(_call(query={"limit": "1", "filter": "x"}))
    refusal = _refused_request(
        _call(query={"zz": "1", "limit": "1", "aa": "2"}), errors.UnknownQuery
    )
    assert refusal.error_code == errors.UNKNOWN_QUERY and refusal.status_code == 400
    assert refusal.msg == "Unknown query parameter 'aa'; accepted: filter, limit"
    assert refusal.details == {"parameter": "aa"}


def test_a_route_that_takes_no_query_says_so(monkeypatch):
    monkeypatch.setitem(web._query_allowed, ("/things", "POST"), frozenset())
    refusal = _refused_request(_call(query={"x": "1"}, method="POST"), errors.UnknownQuery)
    assert refusal.msg == "Unknown query parameter 'x'; this operation takes no query parameters"
    assert refusal.details == {"parameter": "x"}


def test_query_checks_are_per_path_and_method(monkeypatch):
    monkeypatch.setitem(web._query_allowed, ("/things", "GET"), frozenset({"limit"}))
    monkeypatch.setitem(web._query_allowed, ("/things", "DELETE"), frozenset())
    web._check_request(_call(query={"limit": "1"}))
    _refused_request(_call(query={"limit": "1"}, method="DELETE"), errors.UnknownQuery)
    # a route that declared nothing is checked by its view (web.reject_query), not here
    web._check_request(_call(query={"x": "1"}, resource="/undeclared"))
    web.allow_query("/declared", ["GET", "PUT"], ["a"])
    try:
        assert web._query_allowed[("/declared", "PUT")] == frozenset({"a"})
        _refused_request(
            _call(query={"b": "1"}, resource="/declared", method="PUT"), errors.UnknownQuery
        )
    finally:
        web._query_allowed.pop(("/declared", "GET"))
        web._query_allowed.pop(("/declared", "PUT"))


def test_a_body_of_256_kib_passes_and_one_byte_more_is_413():
    limit = 256 * 1024
    web._check_request(_call(body=b" " * limit))
    web._check_request(
        _call(body=b"{" + b" " * (limit - 2) + b"}", headers={"content-type": "application/json"})
    )
    refusal = _refused_request(_call(body=b" " * (limit + 1)), errors.PayloadTooLarge)
    assert refusal.status_code == 413 and refusal.error_code == errors.BODY_TOO_LARGE
    assert refusal.msg == f"Request body is {limit + 1} bytes; the limit is {limit} bytes"


def test_a_body_without_a_content_type_is_err_ngrok_216():
    refusal = _refused_request(_call(body=b"{}"), errors.MissingMediaType)
    assert refusal.status_code == 415 and refusal.error_code == errors.MISSING_MEDIA_TYPE
    assert refusal.msg == (
        "A request body was sent without a Content-Type; send 'Content-Type: application/json'"
    )
    _refused_request(
        _call(body=b"{}", headers={"content-type": " ; charset=utf-8"}), errors.MissingMediaType
    )


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/json-patch", "application/x-www-form-urlencoded"]
)
def test_a_body_of_another_content_type_is_err_ngrok_210_naming_it(content_type):
    refusal = _refused_request(
        _call(body=b"{}", headers={"content-type": content_type}), errors.UnsupportedMediaType
    )
    assert refusal.status_code == 415 and refusal.error_code == errors.UNSUPPORTED_MEDIA_TYPE
    assert refusal.msg == (
        f"Request bodies must be sent with 'Content-Type: application/json', not '{content_type}'"
    )


@pytest.mark.parametrize(
    "content_type", ["application/json", "Application/JSON", " application/json ; charset=utf-8"]
)
def test_json_content_types_pass_in_any_case_and_with_parameters(content_type):
    web._check_request(_call(body=b"{}", headers={"content-type": content_type}))


def test_an_empty_or_blank_body_needs_no_content_type():
    web._check_request(_call(body=b""))
    web._check_request(_call(body=None))
    web._check_request(_call(body=b" \r\n\t"))


# ---- the body as a JSON object -----------------------------------------------------------------
@pytest.fixture
def current(monkeypatch):
    """Set the request the views read (web.request())."""

    def set_request(body=b"", query=None):
        req = SimpleNamespace(raw_body=body, query_params=query)
        monkeypatch.setattr(web, "_app", [SimpleNamespace(current_request=req)])

    return set_request


@pytest.mark.parametrize("raw", [b"", None, b"  \n"])
def test_no_body_is_an_empty_object(current, raw):
    current(raw)
    assert web.json_object() == {}


def test_a_json_object_body_is_returned(current):
    current(b' {"a": [1, {"b": "\\u00e9"}]} ')
    assert web.json_object() == {"a": [1, {"b": "é"}]}


@pytest.mark.parametrize(
    "raw, msg",
    [
        (b"[1]", "Request body must be a JSON object"),
        (b'"x"', "Request body must be a JSON object"),
        (b"[" * 100000, "Request body is nested too deeply"),
        (
            b'{"a": "\\ud800"}',
            "Request body holds a string with an unpaired UTF-16 surrogate escape "
            "(\\ud800-\\udfff); strings must be valid Unicode",
        ),
    ],
)
def test_a_body_that_is_not_a_json_object_is_err_ngrok_213(current, raw, msg):
    current(raw)
    with pytest.raises(errors.InvalidJson) as info:
        web.json_object()
    assert info.value.status_code == 400 and info.value.error_code == errors.INVALID_JSON
    assert info.value.msg == msg


@pytest.mark.parametrize("raw", [b"{", b"{'a': 1}", b"\xff\xfe{}", b"{} x"])
def test_a_body_that_is_not_json_is_err_ngrok_213_with_the_parser_s_reason(current, raw):
    current(raw)
    with pytest.raises(errors.InvalidJson) as info:
        web.json_object()
    assert info.value.msg.startswith("Request body is not valid JSON: ")
    assert len(info.value.msg) > len("Request body is not valid JSON: ")


def test_a_deeply_nested_object_that_parses_is_still_refused(current, monkeypatch):
    current(b'{"a": 1}')
    monkeypatch.setattr(web.json, "dumps", lambda *a, **k: (_ for _ in ()).throw(RecursionError))
    with pytest.raises(errors.InvalidJson) as info:
        web.json_object()
    assert info.value.msg == "Request body is nested too deeply"


# ---- list parameters ---------------------------------------------------------------------------
def _list_refusal(current, query, cls=errors.InvalidQuery):
    current(query=query)
    with pytest.raises(cls) as info:
        web.list_params("ak")
    assert type(info.value) is cls and info.value.status_code == 400
    return info.value


@pytest.mark.parametrize(
    "query, limit",
    [
        (None, 100),
        ({}, 100),
        ({"limit": "1"}, 1),
        ({"limit": "100"}, 100),
        ({"limit": " 7 "}, 7),
        ({"limit": "007"}, 7),
        ({"filter": "x"}, 100),
    ],
)
def test_limit_is_1_to_100_and_defaults_to_100(current, query, limit):
    current(query=query)
    assert web.list_params("ak") == (limit, None)


@pytest.mark.parametrize("raw", ["0", "101", "-1", "+5", "1.5", "", "x", "\u0663", "1e2"])
def test_a_limit_outside_1_to_100_is_err_ngrok_215_naming_it(current, raw):
    refusal = _list_refusal(current, {"limit": raw})
    assert refusal.error_code == errors.INVALID_QUERY
    assert refusal.msg == f"Query parameter 'limit' must be an integer from 1 to 100, got '{raw}'"
    assert refusal.details == {"parameter": "limit"}


def test_before_id_must_be_an_id_of_the_listed_resource(current):
    good = web.ids.new_id("ak")
    current(query={"before_id": good})
    assert web.list_params("ak") == (100, good)
    other = web.ids.new_id("cr")
    refusal = _list_refusal(current, {"before_id": other})
    assert (
        refusal.msg == f"Query parameter 'before_id' must be an id of the form 'ak_…', "
        f"got '{other}'"
    )
    assert refusal.details == {"parameter": "before_id"}


def test_before_id_camel_case_is_the_same_parameter(current):
    good = web.ids.new_id("ak")
    current(query={"beforeId": good, "limit": "5"})
    assert web.list_params("ak") == (5, good)
    current(query={"beforeId": good, "before_id": good})
    assert web.list_params("ak") == (100, good)
    refusal = _list_refusal(current, {"beforeId": good, "before_id": web.ids.new_id("ak")})
    assert refusal.msg == (
        "Query parameters 'before_id' and 'beforeId' are the same parameter "
        "and were sent with different values"
    )
    assert refusal.details == {"parameter": "beforeId"}
    assert _list_refusal(current, {"beforeId": "x"}).details == {"parameter": "before_id"}


def test_a_list_refuses_other_query_parameters_listing_its_own(current):
    refusal = _list_refusal(current, {"limit": "1", "page": "2"}, errors.UnknownQuery)
    assert refusal.error_code == errors.UNKNOWN_QUERY
    assert (
        refusal.msg == "Unknown query parameter 'page'; accepted: beforeId, before_id, "
        "filter, limit"
    )
    assert refusal.details == {"parameter": "page"}


def test_reject_query_with_nothing_allowed_names_the_parameter(current):
    current(query={"x": "1"})
    with pytest.raises(errors.UnknownQuery) as info:
        web.reject_query()
    assert info.value.msg == "Unknown query parameter 'x'"
    assert info.value.details == {"parameter": "x"}
    current(query={"a": "1"})
    assert web.reject_query(["a", "b"]) == {"a": "1"}
    current(query=None)
    assert web.reject_query() == {}


def test_the_next_page_repeats_extra_parameters_with_spaces_as_percent_20():
    c = web.Ctx(principal=None, base_url="http://h")
    page = web.page(
        c, "/things", "things", [{"id": "t_2"}], True, 1, extra={"filter": 'obj.a == "b c"'}
    )
    assert (
        page["next_page_uri"]
        == "http://h/things?before_id=t_2&limit=1&filter=obj.a%20%3D%3D%20%22b%20c%22"
    )
    assert web.page(c, "/things", "things", [], True, 1)["next_page_uri"] is None
    assert web.page(c, "/things", "things", [], False, 1, cursor="t_0")["next_page_uri"] is None
