"""conn.geo.* and conn.client_ip.* (chalicelib/core/policy/ipintel.py): the bundled country and
AS database read for real addresses, the operator's category lists with their boundaries and
bound, and what a policy may name (finer-than-country geo and the AS number are refused)."""

import ipaddress

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


def _load(folder, monkeypatch):
    monkeypatch.setenv("EDGE_IP_CATEGORIES_DIR", str(folder))
    ipintel.reset()


def test_lists_are_read_as_written(tmp_path, monkeypatch, caplog):
    (tmp_path / "a.txt").write_text(
        "10.0.0.0/32\n10.0.0.2/32   # a gap of one address: not merged over it\n"
        "192.0.2.77/24 # host bits set: the network\n"
        "not a network\n"
        "198.51.100.9 # the line after a bad one still counts # and a second hash\n"
        "::cb00:7100/120\n"
    )
    _load(tmp_path, monkeypatch)
    with caplog.at_level("WARNING", logger="policy.ipintel"):
        assert ipintel.categories("10.0.0.0") == ("a",)
        assert ipintel.categories("10.0.0.1") == ()
        assert ipintel.categories("10.0.0.2") == ("a",)
        assert ipintel.categories("192.0.2.1") == ("a",)
        assert ipintel.categories("198.51.100.9") == ("a",)
        assert ipintel.categories("203.0.113.0") == ()  # an IPv6 entry with these low bits
        assert ipintel.categories("::cb00:7101") == ("a",)
    assert [r.getMessage() for r in caplog.records] == [
        "IP categories: a.txt line 4 is not a network"
    ]
    ipintel.reset()


def test_the_bound_counts_every_list_and_a_refused_one_does_not_stop_the_next(
    tmp_path, monkeypatch, caplog
):
    (tmp_path / "a.txt").write_text("10.0.0.1\n10.0.0.2\n")
    (tmp_path / "b.txt").write_text("10.0.1.0/24\n10.0.2.0/24\n10.0.3.0/24\n")
    (tmp_path / "c.txt").write_text("10.0.9.9\n")
    monkeypatch.setattr(ipintel, "MAX_CATEGORY_NETWORKS", 6)
    _load(tmp_path, monkeypatch)
    assert ipintel.categories("10.0.2.5") == ("b",)  # 2 + 3 + 1 = 6: every list fits
    assert ipintel.categories("10.0.9.9") == ("c",)
    monkeypatch.setattr(ipintel, "MAX_CATEGORY_NETWORKS", 5)
    ipintel.reset()
    with caplog.at_level("WARNING", logger="policy.ipintel"):
        assert ipintel.categories("10.0.2.5") == ("b",)  # 2 + 3 = 5 fits; c (one more) does not
        assert ipintel.categories("10.0.0.2") == ("a",)
        assert ipintel.categories("10.0.9.9") == ()
    assert [r.getMessage() for r in caplog.records] == [
        "IP categories: c.txt refused: 6 networks, more than 5 in all"
    ]
    monkeypatch.setattr(ipintel, "MAX_CATEGORY_NETWORKS", 4)
    ipintel.reset()
    assert ipintel.categories("10.0.2.5") == ()  # b refused (2 + 3 > 4) ...
    assert ipintel.categories("10.0.9.9") == ("c",)  # ... and c, read after it, fits (2 + 1)
    ipintel.reset()


def test_an_unreadable_directory_or_list_is_logged_and_skipped(tmp_path, monkeypatch, caplog):
    missing = tmp_path / "nowhere"
    _load(missing, monkeypatch)
    with caplog.at_level("WARNING", logger="policy.ipintel"):
        assert ipintel.categories("10.0.0.1") == ()
    assert caplog.records[0].getMessage().startswith(f"IP categories: cannot read {missing}: ")
    assert "FileNotFoundError" in caplog.records[0].getMessage()
    caplog.clear()
    (tmp_path / "x.txt").mkdir()  # a list that cannot be opened
    (tmp_path / "y.txt").write_text("10.0.0.1\n")
    _load(tmp_path, monkeypatch)
    with caplog.at_level("WARNING", logger="policy.ipintel"):
        assert ipintel.categories("10.0.0.1") == ("y",)
    assert caplog.records[0].getMessage().startswith("IP categories: cannot read x.txt: ")
    assert "IsADirectoryError" in caplog.records[0].getMessage()
    ipintel.reset()


def test_the_table_holds_sorted_ranges_with_overlapping_and_adjacent_ones_merged(tmp_path):
    """What the lists cost in memory: one (start, end) per run of addresses, however many
    networks wrote it. A line whose bytes are not UTF-8 is one that is not a network."""
    (tmp_path / "a.txt").write_bytes(
        b"10.0.1.0/24\n10.0.0.0/24\n"  # adjacent (written out of order): one range
        b"10.0.0.128/25\n"  # inside it: nothing added
        b"10.0.3.0/24\n"  # a gap of 10.0.2.0/24: a range of its own
        b"10.0.4.\xff/24\n"  # not UTF-8: skipped
        b"::1\n"
    )
    v4 = int(ipaddress.ip_address("10.0.0.0"))
    v6 = 1 << 32
    assert ipintel.load_categories(str(tmp_path)) == {
        "a": ([v4, v4 + 0x300, v6 + 1], [v4 + 0x1FF, v4 + 0x3FF, v6 + 1])
    }
