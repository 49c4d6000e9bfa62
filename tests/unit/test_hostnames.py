"""Hostname syntax (chalicelib.hostnames)."""
import pytest

from chalicelib import hostnames


@pytest.mark.parametrize("value, expected", [
    ("Example.COM", "example.com"), ("a-b.c0.io", "a-b.c0.io"), ("x", "x"),
    ("a" * 63 + ".com", "a" * 63 + ".com"),
])
def test_valid_names_are_lower_cased(value, expected):
    assert hostnames.parse(value) == expected


@pytest.mark.parametrize("value", [
    "", "a..b", ".a", "a.", "-a.com", "a-.com", "a_b.com", "a b.com", "é.com", "a*.com",
    "a.*.com", "*.a.com", "a" * 64 + ".com", ("a" * 62 + ".") * 4 + "com", 5, None,
])
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
