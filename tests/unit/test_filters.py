"""The list filter language (chalicelib.filters): the hosted docs' CEL subset."""

from datetime import datetime, timedelta, timezone

import pytest

from chalicelib import filters
from chalicelib.core import errors

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
OBJ = {
    "id": "cr_1",
    "description": "ci agent",
    "metadata": "",
    "token": None,
    "created_at": "2026-11-20T10:00:00Z",
    "acl": ["bind:a.example.com"],
    "active": True,
    "status_code": 201,
    "owner": {"id": "usr_1", "uri": "http://x/users/usr_1"},
    "backend": None,
    "headers": {"x-a": "1"},
}


def matches(text, obj=OBJ):
    return filters.compile_filter(text, now=NOW).matches(obj)


@pytest.mark.parametrize(
    "text",
    [
        'obj.description == "ci agent"',
        "obj.description == 'ci agent'",
        'obj.description != "other"',
        'obj.metadata == ""',
        "obj.token == null",
        'obj.description.startsWith("ci")',
        'obj.description.endsWith("agent")',
        'obj.description.contains(" ")',
        '!obj.description.contains("zzz")',
        'obj.id in ["cr_0", "cr_1"]',
        '"bind:a.example.com" in obj.acl',
        '"x-a" in obj.headers',
        "size(obj.acl) == 1",
        "obj.acl.size() == 1",
        "size(obj.description) == 8",
        "obj.active",
        "obj.active == true",
        "!(obj.active == false)",
        "obj.status_code >= 200 && obj.status_code < 300",
        "obj.status_code == 201",
        "obj.status_code > 200.5",
        "-1 < obj.status_code",
        'obj.owner.id == "usr_1"',
        "obj.backend.id == null",
        'obj.acl[0].startsWith("bind:")',
        'obj.created_at > timestamp("2026-11-20T09:59:59Z")',
        'obj.created_at <= timestamp("2026-11-20T10:00:00+00:00")',
        'obj.created_at > timestamp(time.now).subtract("7d")',
        'obj.created_at < timestamp(time.now).add("1h30m")',
        'obj.created_at > timestamp(time.now).subtract("51h")',
        'obj.description == "x" || obj.active && obj.metadata == ""',  # && binds tighter
        'obj.description == "a\\"b" || true',
    ],
)
def test_filter_accepts_matching_objects(text):
    assert matches(text) is True


@pytest.mark.parametrize(
    "text",
    [
        'obj.description == "CI agent"',
        'obj.description.startsWith("agent")',
        'obj.id in ["cr_2"]',
        "size(obj.acl) == 0",
        "obj.created_at > timestamp(time.now)",
        'obj.created_at > timestamp(time.now).subtract("1d")',  # 2 days old: boundary is exclusive
        "obj.token > 3",
        'obj.token.startsWith("a")',
        "obj.status_code == true",
        'obj.status_code == "201"',
        "obj.metadata == null",
    ],
)
def test_filter_rejects_other_objects(text):
    assert matches(text) is False


def test_time_now_is_the_request_time():
    exactly_two_days = 'obj.created_at >= timestamp(time.now).subtract("50h")'
    assert matches(exactly_two_days)
    later = filters.compile_filter(exactly_two_days, now=NOW + timedelta(seconds=1))
    assert later.matches(OBJ) is False


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "empty"),
        ("x", "unknown name 'x'"),
        ("obj.", "expected a name"),
        ("obj.description ==", "expected a value"),
        ("foo(1)", "unknown function 'foo'"),
        ("obj.description.lower()", "unknown method 'lower'"),
        ('timestamp("yesterday")', "RFC 3339"),
        ('timestamp("2026-01-01T00:00:00")', "RFC 3339"),
        ('timestamp(time.now).subtract("7 days")', "duration"),
        ("timestamp(time.now).subtract(obj.description)", "duration"),
        ('"open', "unexpected character"),
        ("obj.a + 1", "unexpected character '+'"),
        ("obj.a == 1 obj.b", "after a complete expression"),
        ("time.then", "time.now"),
        ('"\\q" == obj.a', "unknown escape"),
        ("obj.description.startsWith()", "argument"),
        ("size(obj.acl, 1) == 1", "argument"),
    ],
)
def test_bad_filter_is_a_400_naming_the_problem(text, fragment):
    with pytest.raises(errors.InvalidFilter) as raised:
        filters.compile_filter(text, now=NOW)
    assert raised.value.status_code == 400 and raised.value.error_code == errors.INVALID_FILTER
    assert fragment in raised.value.msg


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("obj.nope == 1", "no field 'nope'"),
        ("obj.description > 3", "cannot compare"),
        ("obj.description", "must be a condition"),
        ('"a" in obj.description', "'in' needs"),
        ("obj.active && obj.description", "expected a boolean"),
    ],
)
def test_filter_that_cannot_be_evaluated_is_a_400(text, fragment):
    compiled = filters.compile_filter(text, now=NOW)
    with pytest.raises(errors.InvalidFilter) as raised:
        compiled.matches(OBJ)
    assert fragment in raised.value.msg


def test_filter_length_limit_boundary():
    padding = 'obj.description != "'
    text = padding + "x" * (filters.MAX_LENGTH - len(padding) - 1) + '"'
    assert len(text.encode()) == filters.MAX_LENGTH
    assert matches(text)
    with pytest.raises(errors.InvalidFilter):
        filters.compile_filter(text[:-1] + 'x"')


def test_filter_nesting_limit_boundary():
    depth = filters.MAX_DEPTH
    assert matches("(" * depth + "obj.active" + ")" * depth)
    with pytest.raises(errors.InvalidFilter) as raised:
        filters.compile_filter("(" * (depth + 1) + "obj.active" + ")" * (depth + 1))
    assert "nested deeper" in raised.value.msg


def test_durations_parse_like_go_with_days():
    assert filters.parse_duration("7d") == timedelta(days=7)
    assert filters.parse_duration("1h30m") == timedelta(minutes=90)
    assert filters.parse_duration("250ms") == timedelta(milliseconds=250)
    assert filters.parse_duration("-2h") == timedelta(hours=-2)
    for bad in ("", "7", "d", "7 d", "1h 30m", "7w"):
        assert filters.parse_duration(bad) is None
