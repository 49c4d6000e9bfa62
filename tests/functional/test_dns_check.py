"""POST /reserved_domains/{id}/dns_check against a DNS server of the tests' own on the
loopback (DNS_CHECK_RESOLVER): found, missing and wrong target per CNAME record; the bound on
a resolver that never answers, measured."""

import time

import pytest

from chalicelib import dns_check
from chalicelib.core import config, ids
from stacks.dns_server import LoopbackDns


def _unique(name):
    return f"{name}.{ids.new_id('x').split('_')[1].lower()}.example.com"


@pytest.fixture
def resolver_env(monkeypatch):
    def point_at(server):
        monkeypatch.setenv("DNS_CHECK_RESOLVER", server.address)
        config.reset_settings()

    yield point_at
    config.reset_settings()


@pytest.fixture
def admin(inprocess_api):
    return inprocess_api.new_account().admin


def test_missing_found_and_wrong_target(admin, resolver_env):
    domain = _unique("app")
    rd = admin.post("/reserved_domains", {"domain": domain}).json
    with LoopbackDns() as server:
        resolver_env(server)
        report = admin.post(f"/reserved_domains/{rd['id']}/dns_check")
        assert report.status == 200, report
        body = report.json
        assert body["id"] == rd["id"] and body["domain"] == domain and body["ok"] is False
        assert body["uri"].endswith(f"/reserved_domains/{rd['id']}/dns_check")
        [record] = body["records"]
        assert record["type"] == "CNAME" and record["name"] == domain
        assert record["expected_target"] == rd["cname_target"]
        assert record["status"] == "missing" and record["found_targets"] == []
        server.cnames[domain] = rd["cname_target"].upper() + "."
        body = admin.post(f"/reserved_domains/{rd['id']}/dns_check").json
        assert body["ok"] is True and body["records"][0]["status"] == "found"
        server.cnames[domain] = "elsewhere.example.net"
        record = admin.post(f"/reserved_domains/{rd['id']}/dns_check").json["records"][0]
        assert record["status"] == "wrong_target"
        assert record["found_targets"] == ["elsewhere.example.net"]
        assert "elsewhere.example.net" in record["msg"]


def test_wildcard_needs_two_records(admin, resolver_env):
    suffix = _unique("wild")
    rd = admin.post("/reserved_domains", {"domain": f"*.{suffix}"}).json
    with LoopbackDns({f"*.{suffix}": rd["cname_target"]}) as server:
        resolver_env(server)
        body = admin.post(f"/reserved_domains/{rd['id']}/dns_check").json
        assert [(r["name"], r["status"]) for r in body["records"]] == [
            (f"*.{suffix}", "found"),
            (f"_acme-challenge.{suffix}", "missing"),
        ]
        assert body["records"][1]["expected_target"] == rd["acme_challenge_cname_target"]
        server.cnames[f"_acme-challenge.{suffix}"] = rd["acme_challenge_cname_target"]
        assert admin.post(f"/reserved_domains/{rd['id']}/dns_check").json["ok"] is True


def test_a_domain_under_the_base_domain_needs_no_record(admin, resolver_env):
    name = ids.new_id("x").split("_")[1].lower() + ".tunnels.localhost"
    rd = admin.post("/reserved_domains", {"domain": name}).json
    with LoopbackDns() as server:
        resolver_env(server)
        body = admin.post(f"/reserved_domains/{rd['id']}/dns_check").json
        assert body["records"] == [] and body["ok"] is True
        assert server.questions == 0


def test_a_silent_resolver_costs_at_most_the_stated_bound(admin, resolver_env):
    suffix = _unique("slow")
    rd = admin.post("/reserved_domains", {"domain": f"*.{suffix}"}).json
    with LoopbackDns(silent=True) as server:
        resolver_env(server)
        started = time.monotonic()
        body = admin.post(f"/reserved_domains/{rd['id']}/dns_check").json
        took = time.monotonic() - started
    assert [r["status"] for r in body["records"]] == ["unknown", "unknown"]
    assert "did not answer" in body["records"][0]["msg"]
    bound = dns_check.MAX_RECORDS * dns_check.QUERY_TIMEOUT
    assert took < bound + 1.0, took  # the stated bound (plus the request's own time)


def test_unknown_domain_body_and_other_account(admin, inprocess_api, resolver_env):
    missing = admin.post(f"/reserved_domains/{ids.new_id('rd')}/dns_check")
    assert missing.status == 404, missing
    rd = admin.post("/reserved_domains", {"domain": _unique("mine")}).json
    assert admin.post(f"/reserved_domains/{rd['id']}/dns_check", {"x": 1}).status == 400
    other = inprocess_api.new_account().admin
    assert other.post(f"/reserved_domains/{rd['id']}/dns_check").status == 404
    assert admin.get(f"/reserved_domains/{rd['id']}/dns_check").status == 405


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("10.0.0.2", ("10.0.0.2", 53)),
        ("[::1]:54", ("::1", 54)),
    ],
)
def test_resolver_setting(raw, expected):
    assert dns_check.parse_resolver(raw) == expected


@pytest.mark.parametrize("raw", ["host:port", "h:0", ":53"])
def test_resolver_setting_refused(raw):
    with pytest.raises(ValueError):
        dns_check.parse_resolver(raw)
