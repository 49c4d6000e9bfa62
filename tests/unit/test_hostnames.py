"""Hostname syntax (chalicelib.core.hostnames)."""

import pytest

from chalicelib.core import hostnames


@pytest.mark.parametrize(
    "value, expected",
    [
        ("Example.COM", "example.com"),
        ("a-b.c0.io", "a-b.c0.io"),
        ("x", "x"),
        ("a" * 63 + ".com", "a" * 63 + ".com"),
    ],
)
def test_valid_names_are_lower_cased(value, expected):
    assert hostnames.parse(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "a..b",
        ".a",
        "a.",
        "-a.com",
        "a-.com",
        "a_b.com",
        "a b.com",
        "é.com",
        "a*.com",
        "a.*.com",
        "*.a.com",
        "a" * 64 + ".com",
        ("a" * 62 + ".") * 4 + "com",
        5,
        None,
    ],
)
def test_invalid_names_are_refused(value):
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse(value)


def test_wildcard_only_when_allowed_and_only_leading():
    assert hostnames.parse("*.Example.com", wildcard=True) == "*.example.com"
    for value in ("*", "*.", "*.*.a.com", "a.*.com", "**.a.com"):
        with pytest.raises(hostnames.InvalidHostname):
            hostnames.parse(value, wildcard=True)


def test_min_labels_and_numeric_tld():
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse("localhost", min_labels=2)
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse("*.com", wildcard=True, min_labels=2)
    assert hostnames.parse("*.a.com", wildcard=True, min_labels=2) == "*.a.com"
    assert hostnames.parse("10.0.0.1") == "10.0.0.1"
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse("10.0.0.1", numeric_tld=False)


def test_is_within():
    assert hostnames.is_within("a.b.com", "b.com")
    assert hostnames.is_within("b.com", "b.com")
    assert not hostnames.is_within("ab.com", "b.com")


# ---- the reason each refusal gives (callers put it into the 400's msg after the field) ----------
@pytest.mark.parametrize(
    "value, kwargs, reason",
    [
        ("", {}, "must be a non-empty hostname"),
        (None, {}, "must be a non-empty hostname"),
        (
            "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62,
            {},
            "is longer than 253 bytes",
        ),
        ("*.example.com", {}, "may not be a wildcard"),
        ("a.*.com", {"wildcard": True}, "may use a wildcard only as a leading '*.'"),
        ("*.*.com", {"wildcard": True}, "may use a wildcard only as a leading '*.'"),
        ("a..com", {}, "has an empty label (leading, trailing or double dot)"),
        ("example.com.", {}, "has an empty label (leading, trailing or double dot)"),
        ("a" * 64 + ".com", {}, "has a label longer than 63 bytes"),
        (
            "a_b.com",
            {},
            "has an invalid label 'a_b' (letters, digits and '-' only, not at either end)",
        ),
        (
            "-ab.com",
            {},
            "has an invalid label '-ab' (letters, digits and '-' only, not at either end)",
        ),
        (
            "ab-.com",
            {},
            "has an invalid label 'ab-' (letters, digits and '-' only, not at either end)",
        ),
        (
            "a*.com",
            {"wildcard": True},
            "has an invalid label 'a*' (letters, digits and '-' only, not at either end)",
        ),
        ("localhost", {"min_labels": 2}, "must have at least 2 labels"),
        ("*.com", {"wildcard": True, "min_labels": 2}, "must have at least 2 labels"),
        ("10.0.0.1", {"numeric_tld": False}, "must end in a name, not a number"),
    ],
)
def test_a_refused_hostname_says_why(value, kwargs, reason):
    with pytest.raises(hostnames.InvalidHostname) as info:
        hostnames.parse(value, **kwargs)
    assert str(info.value) == reason


@pytest.mark.parametrize(
    "value, kwargs",
    [
        ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61, {}),  # 253 bytes
        ("a" * 63 + ".com", {}),
        ("a-b.c0m", {}),
        ("0.1", {}),
        ("x", {}),
        ("*.Example.COM", {"wildcard": True, "min_labels": 2}),
        ("a.example.com", {"min_labels": 3}),
        ("a.b2", {"numeric_tld": False}),
    ],
)
def test_hostnames_at_the_limits_pass_lower_cased(value, kwargs):
    assert hostnames.parse(value, **kwargs) == value.lower()


def test_wildcards_and_suffixes():
    assert hostnames.is_wildcard("*.a.com") and not hostnames.is_wildcard("a.*.com")
    assert hostnames.suffix_of_wildcard("*.a.com") == "a.com"
    assert hostnames.suffix_of_wildcard("a.com") is None
    assert hostnames.is_within("a.com", "a.com") and hostnames.is_within("b.a.com", "a.com")
    assert not hostnames.is_within("ba.com", "a.com") and not hostnames.is_within(
        "a.com", "b.a.com"
    )


def test_a_63_byte_label_with_a_bad_character_is_called_invalid_not_too_long():
    label = "a" * 62 + "_"
    with pytest.raises(hostnames.InvalidHostname) as info:
        hostnames.parse(label + ".com")
    assert str(info.value) == (
        f"has an invalid label '{label}' (letters, digits and '-' only, not at either end)"
    )


def test_only_the_last_label_must_not_be_a_number():
    assert hostnames.parse("a.1.com", numeric_tld=False) == "a.1.com"
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse("a.b.1", numeric_tld=False)
