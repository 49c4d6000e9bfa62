"""edge/static.py's address rule and EDGE_STATIC_BACKEND_ALLOW (edge/config.py)."""

import ipaddress

import pytest

from edge import config, static


@pytest.mark.parametrize(
    "ip, ok",
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),
        ("::1", False),
        ("fd00::1", False),
        ("0.0.0.0", False),
    ],
)
def test_only_global_addresses_by_default(ip, ok):
    assert static.allowed(ip, []) is ok


def test_the_operator_may_allow_ranges():
    extra = [ipaddress.ip_network("127.0.0.0/8")]
    assert static.allowed("127.0.0.1", extra) and not static.allowed("10.0.0.1", extra)


def test_allow_setting_is_parsed_and_a_bad_cidr_stops_the_edge():
    assert config._cidrs({"X": "127.0.0.0/8, 10.0.0.1"}, "X") == ("127.0.0.0/8", "10.0.0.1/32")
    assert config._cidrs({}, "X") == ()
    with pytest.raises(SystemExit, match="X: 'nope'"):
        config._cidrs({"X": "nope"}, "X")
