"""conn.geo.* and conn.client_ip.* (chalicelib/core/policy/ipintel.py): the bundled country and
AS database read for real addresses, the operator's category lists with their boundaries and
bound, and what a policy may name (finer-than-country geo and the AS number are refused)."""

import pytest

from chalicelib.core.policy import PolicyError, RESPOND, ipintel
from tests.support.policy import compile_doc, conn, on_request, request, rule


@pytest.fixture
def lists(tmp_path, monkeypatch):
    (tmp_path / "proxy.anonymous.tor.txt").write_text(
        "# exit nodes\n203.0.113.0/25\n203.0.113.128/25  # merged with the one above\n"
        "2001:db8::/32\nnot a network\n\n"
    )
    (tmp_path / "blocklist.example.txt").write_text("198.51.100.7\n")
    (tmp_path / "com.example.txt").write_text("198.51.100.0/24\n")
    (tmp_path / "README").write_text("not a list: no .txt")
    monkeypatch.setenv("EDGE_IP_CATEGORIES_DIR", str(tmp_path))
    ipintel.reset()
    yield tmp_path
    ipintel.reset()


@pytest.mark.parametrize(
    "ip, want",
    [
        ("8.8.8.8", ("US", "United States", "GOOGLE")),
        ("81.2.69.160", ("GB", "United Kingdom", "Andrews & Arnold Ltd")),
        ("2a00:1450:4001:80b::200e", ("DE", "Germany", "GOOGLE")),
        ("127.0.0.1", ("", "", "")),
        ("10.1.2.3", ("", "", "")),
        ("not an address", ("", "", "")),
    ],
)
def test_geo_and_as_of_real_addresses(ip, want):
    assert ipintel.geo(ip) == want


def test_categories_at_their_boundaries(lists):
    assert ipintel.categories("203.0.113.0") == ("proxy.anonymous.tor",)
    assert ipintel.categories("203.0.113.255") == ("proxy.anonymous.tor",)
    assert ipintel.categories("203.0.114.0") == ()
    assert ipintel.categories("203.0.112.255") == ()
    assert ipintel.categories("2001:db8:ffff::1") == ("proxy.anonymous.tor",)
    assert ipintel.categories("2001:db9::") == ()
    assert ipintel.categories("::cb00:7100") == ()  # 203.0.113.0's bits, as IPv6: not it
    assert ipintel.categories("198.51.100.7") == ("blocklist.example", "com.example")
    assert ipintel.categories("198.51.100.8") == ("com.example",)


def test_without_lists_no_address_has_a_category(monkeypatch):
    monkeypatch.delenv("EDGE_IP_CATEGORIES_DIR", raising=False)
    ipintel.reset()
    assert ipintel.categories("203.0.113.1") == ()


def test_a_list_past_the_bound_is_refused_whole(lists, monkeypatch):
    monkeypatch.setattr(ipintel, "MAX_CATEGORY_NETWORKS", 3)
    ipintel.reset()
    # sorted: blocklist.example (1), com.example (1) fit; the tor list (3 networks) does not
    assert ipintel.categories("198.51.100.7") == ("blocklist.example", "com.example")
    assert ipintel.categories("203.0.113.1") == ()


def _deny(expression):
    return {"on_http_request": [rule({"type": "deny"}, expressions=[expression])]}


@pytest.mark.parametrize(
    "expression, ip, denied",
    [
        ("conn.geo.country_code == 'US'", "8.8.8.8", True),
        ("conn.geo.country_code == 'US'", "81.2.69.160", False),
        ("conn.geo.country == 'United Kingdom'", "81.2.69.160", True),
        ("conn.client_ip.as.organization == 'GOOGLE'", "8.8.8.8", True),
        ("conn.client_ip.is_tor_node", "203.0.113.9", True),
        ("conn.client_ip.is_tor_node", "198.51.100.7", False),
        ("conn.client_ip.is_on_blocklist", "198.51.100.7", True),
        ("conn.client_ip.is_on_blocklist", "203.0.113.9", False),
        ("'com.example' in conn.client_ip.categories", "198.51.100.99", True),
        ("'com.example' in conn.client_ip.categories", "192.0.2.1", False),
    ],
)
def test_the_variables_in_expressions(lists, expression, ip, denied):
    out, _ = on_request(_deny(expression), request(), conn(ip=ip))
    assert (out.kind == RESPOND) is denied


@pytest.mark.parametrize(
    "name",
    ["conn.geo.city", "conn.geo.latitude", "conn.geo.postal_code", "conn.client_ip.as.number"],
)
def test_what_the_database_does_not_hold_is_refused_at_creation(name):
    with pytest.raises(PolicyError) as info:
        compile_doc(_deny(f"string({name}) == 'x'"))
    assert name.rsplit(".", 1)[1] in info.value.message
