import pytest

from chalicelib import errors
from chalicelib.validation import DESCRIPTION, METADATA, Field, parse

FIELDS = [DESCRIPTION, METADATA, Field("active", "boolean"), Field("count", "integer"),
          Field("name", "string", required=True), Field("tags", "string_list", max_items=2),
          Field("headers", "string_map")]


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


@pytest.mark.parametrize("body", [
    {"name": 1}, {"name": "a", "active": 1}, {"name": "a", "count": True},
    {"name": "a", "count": 1.5}, {"name": "a", "tags": "x"}, {"name": "a", "tags": [1]},
    {"name": "a", "tags": ["a", "b", "c"]}, {"name": "a", "headers": {"a": 1}},
    {"name": "a", "headers": []},
])
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
    assert body == {"error_code": errors.NOT_FOUND, "status_code": 404, "msg": "gone",
                    "details": {"field": "3", "operation_id": "op_x"}}


def test_catalog_codes_are_unique_and_statuses_are_errors():
    constants = {name: value for name, value in vars(errors).items()
                 if name.isupper() and isinstance(value, str) and value.startswith("ERR_")}
    assert len(set(constants.values())) == len(constants) == len(errors.CATALOG) == 34
    assert set(constants.values()) == set(errors.CATALOG)
    assert all(400 <= status <= 599 for status in errors.CATALOG.values())
