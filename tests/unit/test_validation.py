import pytest

from chalicelib.core import errors
from chalicelib.validation import DESCRIPTION, METADATA, Field, parse

FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("active", "boolean"),
    Field("count", "integer"),
    Field("name", "string", required=True),
    Field("tags", "string_list", max_items=2),
    Field("headers", "string_map"),
]


def test_parse_returns_only_sent_fields_and_drops_nulls():
    assert parse({"name": "a", "description": None}, FIELDS) == {"name": "a"}


def test_unknown_field_names_it_and_lists_accepted():
    with pytest.raises(errors.UnknownField) as info:
        parse({"name": "a", "nmae": 1}, FIELDS)
    assert "nmae" in info.value.msg and "description" in info.value.msg


def test_missing_required_field():
    with pytest.raises(errors.MissingField) as info:
        parse({}, FIELDS)
    assert "name" in info.value.msg


@pytest.mark.parametrize(
    "body",
    [
        {"name": 1},
        {"name": "a", "active": 1},
        {"name": "a", "count": True},
        {"name": "a", "count": 1.5},
        {"name": "a", "tags": "x"},
        {"name": "a", "tags": [1]},
        {"name": "a", "tags": ["a", "b", "c"]},
        {"name": "a", "headers": {"a": 1}},
        {"name": "a", "headers": []},
    ],
)
def test_wrong_types_are_400(body):
    with pytest.raises(errors.InvalidField):
        parse(body, FIELDS)


def test_byte_limits_count_utf8_bytes():
    assert parse({"name": "a", "description": "é" * 127}, FIELDS)
    with pytest.raises(errors.InvalidField) as info:
        parse({"name": "a", "description": "é" * 128}, FIELDS)
    assert "256 bytes" in info.value.msg and "255" in info.value.msg
    with pytest.raises(errors.InvalidField):
        parse({"name": "a", "metadata": "m" * 4097}, FIELDS)


def test_id_in_body_must_match_path():
    assert parse({"id": "ak_1", "name": "a"}, FIELDS, path_id="ak_1") == {"name": "a"}
    with pytest.raises(errors.InvalidField):
        parse({"id": "ak_2", "name": "a"}, FIELDS, path_id="ak_1")
    with pytest.raises(errors.InvalidField):
        parse({"id": "ak_1", "name": "a"}, FIELDS)


def test_error_body_has_contract_shape():
    body = errors.NotFound("gone", details={"field": 3}).body("op_x")
    assert body == {
        "error_code": errors.NOT_FOUND,
        "status_code": 404,
        "msg": "gone",
        "details": {"field": "3", "operation_id": "op_x"},
    }


def test_catalog_codes_are_unique_and_statuses_are_errors():
    constants = {
        name: value
        for name, value in vars(errors).items()
        if name.isupper() and isinstance(value, str) and value.startswith("ERR_")
    }
    assert len(set(constants.values())) == len(constants) == len(errors.CATALOG) == 60
    assert set(constants.values()) == set(errors.CATALOG)
    assert all(400 <= status <= 599 for status in errors.CATALOG.values())


# ---- the contract body of each refusal: error_code, msg naming the field and the rule, details --
def _refusal(body, fields=FIELDS, path_id=None):
    with pytest.raises(errors.ApiError) as info:
        parse(body, fields, path_id=path_id)
    return info.value


@pytest.mark.parametrize(
    "body, msg, field",
    [
        ({"name": 1}, "Field 'name' must be a string, got integer", "name"),
        ({"name": None}, "Field 'name' is required", "name"),
        ({"name": "a", "active": 1}, "Field 'active' must be a boolean, got integer", "active"),
        (
            {"name": "a", "active": "true"},
            "Field 'active' must be a boolean, got string",
            "active",
        ),
        ({"name": "a", "count": True}, "Field 'count' must be an integer, got boolean", "count"),
        ({"name": "a", "count": 1.5}, "Field 'count' must be an integer, got number", "count"),
        ({"name": "a", "count": "1"}, "Field 'count' must be an integer, got string", "count"),
        (
            {"name": "a", "tags": "x"},
            "Field 'tags' must be an array of strings, got string",
            "tags",
        ),
        (
            {"name": "a", "tags": {}},
            "Field 'tags' must be an array of strings, got object",
            "tags",
        ),
        ({"name": "a", "tags": [1]}, "Field 'tags[0]' must be a string, got integer", "tags[0]"),
        (
            {"name": "a", "tags": ["a", [2]]},
            "Field 'tags[1]' must be a string, got array",
            "tags[1]",
        ),
        (
            {"name": "a", "tags": ["a", "b", "c"]},
            "Field 'tags' has 3 entries; the limit is 2",
            "tags",
        ),
        (
            {"name": "a", "headers": []},
            "Field 'headers' must be an object of string values, got array",
            "headers",
        ),
        (
            {"name": "a", "headers": {"k": 1}},
            "Field 'headers.k' must be a string, got integer",
            "headers.k",
        ),
        (
            {"name": "a", "headers": {"k": None}},
            "Field 'headers.k' must be a string, got null",
            "headers.k",
        ),
        (
            {"name": "a", "description": "é" * 128},
            "Field 'description' is 256 bytes; the limit is 255 bytes (UTF-8)",
            "description",
        ),
        (
            {"name": "a", "metadata": "m" * 4097},
            "Field 'metadata' is 4097 bytes; the limit is 4096 bytes (UTF-8)",
            "metadata",
        ),
    ],
)
def test_a_refused_field_answers_invalid_field_naming_it_and_the_rule(body, msg, field):
    refusal = _refusal(body)
    expected = errors.MissingField if msg.endswith("is required") else errors.InvalidField
    assert type(refusal) is expected and refusal.status_code == 400
    assert refusal.body("op_1") == {
        "error_code": expected.error_code,
        "status_code": 400,
        "msg": msg,
        "details": {"field": field, "operation_id": "op_1"},
    }


def test_other_python_types_are_named_by_their_type():
    refusal = _refusal({"name": ("a",)})
    assert refusal.msg == "Field 'name' must be a string, got tuple"


def test_an_object_field_refuses_a_non_object_naming_it():
    refusal = _refusal({"o": [1]}, [Field("o", "object")])
    assert refusal.msg == "Field 'o' must be an object, got array"
    assert refusal.details == {"field": "o"}
    assert parse({"o": {"a": [1]}}, [Field("o", "object")]) == {"o": {"a": [1]}}


def test_an_unknown_field_is_err_ngrok_214_listing_the_accepted_fields_sorted():
    refusal = _refusal({"name": "a", "nmae": 1}, [Field("name", "string"), DESCRIPTION])
    assert type(refusal) is errors.UnknownField
    assert refusal.error_code == errors.UnknownField.error_code and refusal.status_code == 400
    assert refusal.msg == "Unknown field 'nmae'; accepted fields: description, name"
    assert refusal.details == {"field": "nmae"}


def test_an_operation_without_fields_lists_none_as_accepted():
    refusal = _refusal({"x": 1}, [])
    assert refusal.msg == "Unknown field 'x'; accepted fields: none"


def test_the_first_unknown_field_in_body_order_is_named():
    refusal = _refusal({"zz": 1, "aa": 2}, [Field("name", "string")])
    assert refusal.details == {"field": "zz"}


def test_id_in_a_body_is_refused_naming_it_and_left_out_when_it_matches():
    assert parse({"id": "ak_1"}, [DESCRIPTION], path_id="ak_1") == {}
    wrong = _refusal({"id": "ak_2"}, [DESCRIPTION], path_id="ak_1")
    assert wrong.msg == "Field 'id' ('ak_2') does not match the id in the path"
    assert wrong.details == {"field": "id"} and type(wrong) is errors.InvalidField
    create = _refusal({"id": "ak_1"}, [DESCRIPTION])
    assert create.msg == "Field 'id' cannot be set by the caller"
    assert create.details == {"field": "id"}


def test_an_operation_that_declares_id_checks_it_as_a_field():
    assert parse({"id": "x"}, [Field("id", "string")], path_id="y") == {"id": "x"}


def test_limits_pass_at_the_limit_and_fail_one_past_it():
    fields = [
        Field("s", "string", max_bytes=3),
        Field("l", "string_list", max_items=2, max_bytes=2),
        Field("m", "string_map", max_items=1, max_bytes=1),
    ]
    assert parse({"s": "abc", "l": ["ab", "cd"], "m": {"k": "v"}}, fields) == {
        "s": "abc",
        "l": ["ab", "cd"],
        "m": {"k": "v"},
    }
    assert _refusal({"s": "abcd"}, fields).details == {"field": "s"}
    assert _refusal({"l": ["ab", "cde"]}, fields).details == {"field": "l[1]"}
    assert _refusal({"l": ["a", "b", "c"]}, fields).details == {"field": "l"}
    assert _refusal({"m": {"k": "vv"}}, fields).details == {"field": "m.k"}
    refusal = _refusal({"m": {"a": "1", "b": "2"}}, fields)
    assert refusal.msg == "Field 'm' has 2 entries; the limit is 1"
    assert refusal.details == {"field": "m"}


def test_a_field_check_gets_the_name_and_value_and_its_result_is_kept():
    seen = []
    fields = [
        Field("n", "integer", check=lambda name, value: seen.append((name, value)) or 7),
        Field("a", "any", check=lambda name, value: [name, value]),
    ]
    assert parse({"n": 1, "a": {"x": 1}}, fields) == {"n": 7, "a": ["a", {"x": 1}]}
    assert seen == [("n", 1)]


def test_a_body_of_none_is_an_empty_body_and_is_not_changed():
    assert parse(None, [DESCRIPTION]) == {}
    body = {"id": "ak_1", "description": "d"}
    parse(body, [DESCRIPTION], path_id="ak_1")
    assert body == {"id": "ak_1", "description": "d"}


def test_require_non_empty_names_the_field():
    from chalicelib.validation import require_non_empty

    assert require_non_empty("urls", ["a"]) == ["a"]
    with pytest.raises(errors.InvalidField) as info:
        require_non_empty("urls", [])
    assert info.value.msg == "Field 'urls' must not be empty"
    assert info.value.details == {"field": "urls"}


def test_now_is_rfc3339_utc_to_the_second():
    import re
    from datetime import datetime, timezone
    from chalicelib.validation import now_rfc3339

    value = now_rfc3339()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value)
    parsed = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - parsed).total_seconds()) < 5


def test_utf8_len_counts_bytes():
    from chalicelib.validation import utf8_len

    assert utf8_len("aé€😀") == 1 + 2 + 3 + 4


def test_now_is_utc_whatever_the_machine_s_time_zone(monkeypatch):
    import time
    from datetime import datetime, timezone
    from chalicelib.validation import now_rfc3339

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        parsed = datetime.strptime(now_rfc3339(), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=timezone.utc
        )
        assert abs((datetime.now(timezone.utc) - parsed).total_seconds()) < 5
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


# ---- the catalog's error classes (chalicelib.core.errors) ------------------------------------------
def test_an_error_keeps_its_message_code_and_details_as_strings():
    error = errors.InvalidField("bad", error_code="ERR_NGROK_9999", details={"field": "f", "n": 3})
    assert (error.msg, error.error_code, error.details) == (
        "bad",
        "ERR_NGROK_9999",
        {"field": "f", "n": "3"},
    )
    assert str(error) == "bad"
    assert errors.InvalidField("bad").error_code == errors.INVALID_FIELD
    default = errors.NotFound()
    assert default.msg == errors.NotFound.default_msg and str(default) == default.msg


def test_a_rate_limited_error_is_429_with_a_retry_after_of_at_least_one_second():
    error = errors.RateLimited("slow down", retry_after=7.9)
    assert (error.status_code, error.error_code, error.msg, error.retry_after) == (
        429,
        errors.RATE_LIMITED,
        "slow down",
        7,
    )
    assert str(error) == "slow down"
    assert errors.RateLimited(retry_after=0).retry_after == 1
    assert errors.RateLimited(retry_after=-5).retry_after == 1
    assert errors.RateLimited(retry_after=1).retry_after == 1
    assert errors.RateLimited(retry_after=2).retry_after == 2
    default = errors.RateLimited()
    assert default.retry_after == 1 and default.msg == "Too many requests"


def test_the_gateway_s_error_body_has_the_contract_shape():
    assert errors.error_body(404, errors.NOT_FOUND, "Resource not found", "op_1") == {
        "error_code": errors.NOT_FOUND,
        "status_code": 404,
        "msg": "Resource not found",
        "details": {"operation_id": "op_1"},
    }
