"""The field checks of the resource modules, where the rules live: each refusal is a 400
ERR_INVALID_FIELD whose ``details.field`` names the field and whose ``msg`` names the field, the
rule and (shortened) the value sent; each accepted value comes back normalised."""

import pytest

from chalicelib import (
    bot_users,
    http_response_backends,
    https_edges,
    ip_policies,
    reserved_domains,
)
from chalicelib.core import errors


def _refusal(call, *args):
    with pytest.raises(errors.InvalidField) as info:
        call(*args)
    assert info.value.status_code == 400 and info.value.error_code == errors.INVALID_FIELD
    return info.value


# ---- IP policy rules: cidr, action --------------------------------------------------------------
@pytest.mark.parametrize(
    "value, network",
    [
        (" 10.0.0.0/8 ", "10.0.0.0/8"),
        ("192.0.2.7", "192.0.2.7/32"),
        ("2001:DB8:0:0::/64", "2001:db8::/64"),
    ],
)
def test_a_cidr_is_stored_in_its_canonical_form(value, network):
    assert ip_policies.check_cidr("cidr", value) == network


@pytest.mark.parametrize(
    "value, reason",
    [
        ("10.0.0.1/8", "10.0.0.1/8 has host bits set"),
        ("1.2.3.4/33", "'1.2.3.4/33' does not appear to be an IPv4 or IPv6 network"),
        ("x", "does not appear to be an IPv4 or IPv6 network"),
    ],
)
def test_a_bad_cidr_names_the_field_the_value_and_the_reason(value, reason):
    refusal = _refusal(ip_policies.check_cidr, "cidr", value)
    assert refusal.details == {"field": "cidr"}
    assert refusal.msg.startswith(
        "Field 'cidr' must be an IPv4 or IPv6 network in CIDR notation (e.g. 203.0.113.0/24 or "
        f"2001:db8::/32), got '{value}': "
    )
    assert reason in refusal.msg


def test_a_bad_cidr_quotes_at_most_100_characters_of_it():
    refusal = _refusal(ip_policies.check_cidr, "cidr", "1" * 150)
    assert f"2001:db8::/32), got '{'1' * 100}': '{'1' * 150}' does not" in refusal.msg


@pytest.mark.parametrize("value", ["allow", "deny"])
def test_a_rule_action_is_allow_or_deny(value):
    assert ip_policies._check_action("action", value) == value


@pytest.mark.parametrize("value", ["Allow", "DENY", "block", "", "allow "])
def test_another_rule_action_is_refused_naming_it(value):
    refusal = _refusal(ip_policies._check_action, "action", value)
    assert refusal.msg == f"Field 'action' must be 'allow' or 'deny', got '{value}'"
    assert refusal.details == {"field": "action"}


def test_a_refused_action_is_quoted_up_to_50_characters():
    refusal = _refusal(ip_policies._check_action, "action", "x" * 60)
    assert refusal.msg == f"Field 'action' must be 'allow' or 'deny', got '{'x' * 50}'"


# ---- HTTPS edge routes: match_type, user agent patterns ---------------------------------------
@pytest.mark.parametrize("value", ["exact_path", "path_prefix"])
def test_a_route_match_type_is_exact_path_or_path_prefix(value):
    assert https_edges._match_type("match_type", value) == value


@pytest.mark.parametrize("value", ["EXACT_PATH", "prefix", "", "path_prefix "])
def test_another_match_type_is_refused_naming_it(value):
    refusal = _refusal(https_edges._match_type, "match_type", value)
    assert refusal.msg == (
        f"Field 'match_type' must be 'exact_path' or 'path_prefix', got '{value}'"
    )
    assert refusal.details == {"field": "match_type"}


def test_a_refused_match_type_is_quoted_up_to_64_characters():
    refusal = _refusal(https_edges._match_type, "match_type", "y" * 70)
    assert refusal.msg.endswith(f"got '{'y' * 64}'")


def test_valid_re2_patterns_are_kept_as_sent():
    patterns = ["(?i)curl/.*", "^Mozilla", "bot$", "a{1,3}", "[[:alpha:]]+"]
    assert https_edges._patterns("allow", patterns) is patterns


@pytest.mark.parametrize(
    "pattern, reason",
    [
        ("(", "missing ): ("),
        ("a**", "bad repetition operator: **"),
        ("(?<=x)y", "invalid perl operator: (?<="),
        ("\\1", "invalid escape sequence: \\1"),
        ("a{1001}", "invalid repetition size: {1001}"),
    ],
)
def test_a_pattern_re2_refuses_is_a_400_naming_its_index_and_re2_s_reason(pattern, reason):
    refusal = _refusal(https_edges._patterns, "user_agent_filter.deny", ["ok", pattern])
    assert refusal.details == {"field": "user_agent_filter.deny[1]"}
    prefix = (
        f"Field 'user_agent_filter.deny[1]': pattern '{pattern}' is not a valid RE2 "
        "regular expression ("
    )
    assert refusal.msg.startswith(prefix) and refusal.msg.endswith(")")
    assert refusal.msg[len(prefix) : -1] == reason  # RE2's own reason, decoded


def test_re2_errors_are_not_logged_to_stderr(capfd):
    _refusal(https_edges._patterns, "allow", ["("])
    assert capfd.readouterr().err == ""


# ---- bot users: name ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["a", " padded ", "Bot-1"])
def test_a_bot_name_with_a_visible_character_is_kept_as_sent(value):
    assert bot_users._check_name("name", value) == value


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_a_blank_bot_name_is_refused_naming_the_field(value):
    refusal = _refusal(bot_users._check_name, "name", value)
    assert refusal.msg == "Field 'name' must not be empty"
    assert refusal.details == {"field": "name"}


# ---- HTTP response backends: status_code, headers -----------------------------------------------
@pytest.mark.parametrize("value", [100, 200, 599])
def test_a_backend_status_from_100_to_599_is_kept(value):
    assert http_response_backends._status("status_code", value) == value


@pytest.mark.parametrize("value", [99, 600, 0, -200])
def test_a_backend_status_outside_100_to_599_is_refused_naming_it(value):
    refusal = _refusal(http_response_backends._status, "status_code", value)
    assert refusal.msg == f"Field 'status_code' must be from 100 to 599, got {value}"
    assert refusal.details == {"field": "status_code"}


def test_backend_headers_take_50_lower_cased_and_not_51():
    headers = {f"X-H{i}": str(i) for i in range(50)}
    assert http_response_backends._headers("headers", headers) == {
        name.lower(): value for name, value in headers.items()
    }
    refusal = _refusal(http_response_backends._headers, "headers", {**headers, "X-More": "1"})
    assert refusal.details == {"field": "headers"} and "50" in refusal.msg


# ---- reserved domains: region, certificate policy, resolves_to, certificate_id ------------------
@pytest.mark.parametrize("value", ["", "au", "eu", "ap", "us", "jp", "in", "sa"])
def test_a_reserved_domain_region_is_empty_or_a_region(value):
    assert reserved_domains._check_region("region", value) == value


def test_another_region_is_refused_listing_the_regions():
    refusal = _refusal(reserved_domains._check_region, "region", "mars")
    assert refusal.msg == "Field 'region' must be \"\" or one of au, eu, ap, us, jp, in, sa"
    assert refusal.details == {"field": "region"}


def test_a_certificate_policy_keeps_what_is_sent_and_defaults_the_rest():
    check = reserved_domains._check_policy
    assert check("p", {}) == {"authority": "letsencrypt", "private_key_type": "ecdsa"}
    assert check("p", {"private_key_type": "rsa"}) == {
        "authority": "letsencrypt",
        "private_key_type": "rsa",
    }
    assert check("p", {"authority": "", "private_key_type": None}) == {
        "authority": "letsencrypt",
        "private_key_type": "ecdsa",
    }
    assert reserved_domains.DEFAULT_POLICY == {
        "authority": "letsencrypt",
        "private_key_type": "ecdsa",
    }


@pytest.mark.parametrize(
    "value, msg",
    [
        (
            {"other": 1, "zeta": 2},
            "Field 'p.other' is unknown; accepted: authority, private_key_type",
        ),
        (
            {"authority": "zerossl"},
            "Field 'p.authority' must be one of letsencrypt, got 'zerossl'",
        ),
        (
            {"private_key_type": "dsa"},
            "Field 'p.private_key_type' must be one of ecdsa, rsa, got 'dsa'",
        ),
        ({"private_key_type": 1}, "Field 'p.private_key_type' must be one of ecdsa, rsa, got 1"),
    ],
)
def test_a_bad_certificate_policy_names_the_key(value, msg):
    refusal = _refusal(reserved_domains._check_policy, "p", value)
    assert refusal.msg == msg and refusal.details == {"field": "p"}


def test_resolves_to_takes_ten_known_values_and_returns_them_bare():
    entries = [
        {"value": v} for v in ("global", "us", "eu", "ap", "au", "sa", "jp", "in", "us", "eu")
    ]
    assert reserved_domains._check_resolves_to("r", entries) == entries
    refusal = _refusal(reserved_domains._check_resolves_to, "r", entries + [{"value": "us"}])
    assert refusal.msg == "Field 'r' has 11 entries; the limit is 10"
    assert refusal.details == {"field": "r"}


@pytest.mark.parametrize(
    "value, msg",
    [
        ("eu", "Field 'r' must be an array of {\"value\": …} objects"),
        ({"value": "eu"}, "Field 'r' must be an array of {\"value\": …} objects"),
        (
            [{"value": "eu"}, "eu"],
            "Field 'r[1]' must be {\"value\": v} with v one of global, au, eu, ap, us, jp, in, sa",
        ),
        (
            [{"value": "mars"}],
            "Field 'r[0]' must be {\"value\": v} with v one of global, au, eu, ap, us, jp, in, sa",
        ),
        (
            [{"value": "eu", "x": 1}],
            "Field 'r[0]' must be {\"value\": v} with v one of global, au, eu, ap, us, jp, in, sa",
        ),
        (
            [{}],
            "Field 'r[0]' must be {\"value\": v} with v one of global, au, eu, ap, us, jp, in, sa",
        ),
    ],
)
def test_a_bad_resolves_to_names_the_entry(value, msg):
    refusal = _refusal(reserved_domains._check_resolves_to, "r", value)
    assert refusal.msg == msg and refusal.details == {"field": "r"}


def test_a_certificate_id_must_be_a_tls_certificate_id():
    """A malformed id (or another resource's) is refused before any read; a well-formed one
    passes here and is looked up in the account when the domain is written."""
    for bad in ("cert_1", "ca_" + "0" * 27, ""):
        refusal = _refusal(reserved_domains._check_certificate_id, "certificate_id", bad)
        assert refusal.msg == f"Field 'certificate_id': no TLS certificate with id '{bad}' exists"
        assert refusal.details == {"field": "certificate_id"}
    good = "cert_" + "0" * 27
    assert reserved_domains._check_certificate_id("certificate_id", good) == good


# ---- reserved domains: domain ------------------------------------------------------------------
@pytest.fixture
def base_domain(monkeypatch):
    from chalicelib.core import config

    monkeypatch.setenv("BASE_DOMAIN", "tunnels.example.test")
    config.reset_settings()
    yield "tunnels.example.test"
    monkeypatch.delenv("BASE_DOMAIN")
    config.reset_settings()


@pytest.mark.parametrize(
    "value, domain",
    [
        ("App.Example.COM", "app.example.com"),
        ("*.example.com", "*.example.com"),
        ("a.b", "a.b"),
        ("x.tunnels.example.test", "x.tunnels.example.test"),
        ("*.x.tunnels.example.test", "*.x.tunnels.example.test"),
        ("a.1.example", "a.1.example"),
    ],
)
def test_a_reserved_domain_is_a_lower_cased_name_of_two_labels_or_a_wildcard(
    base_domain, value, domain
):
    assert reserved_domains._check_domain("domain", value) == domain


@pytest.mark.parametrize(
    "value, reason",
    [
        ("com", "must have at least 2 labels"),
        ("*.com", "must have at least 2 labels"),
        ("example.123", "must end in a name, not a number"),
        ("10.0.0.1", "must end in a name, not a number"),
        ("a.*.com", "may use a wildcard only as a leading '*.'"),
    ],
)
def test_a_bad_reserved_domain_names_the_field_the_value_and_the_reason(
    base_domain, value, reason
):
    refusal = _refusal(reserved_domains._check_domain, "domain", value)
    assert refusal.msg == f"Field 'domain' ({value!r}) {reason}"
    assert refusal.details == {"field": "domain"}


@pytest.mark.parametrize(
    "value",
    [
        "tunnels.example.test",
        "Tunnels.Example.Test",
        "example.test",
        "*.example.test",
        "*.tunnels.example.test",
    ],
)
def test_a_domain_that_covers_the_service_s_own_domain_is_refused(base_domain, value):
    refusal = _refusal(reserved_domains._check_domain, "domain", value)
    assert refusal.msg == (
        f"Field 'domain': '{value.lower()}' covers the service's own domain "
        "'tunnels.example.test' and cannot be reserved"
    )
    assert refusal.details == {"field": "domain"}


# ---- HTTPS edges' TLS modules: tls_termination, mutual_tls ---------------------------------------
@pytest.mark.parametrize("value", ["1.0", "1.1", "1.2", "1.3"])
def test_a_min_version_is_a_supported_tls_version(value):
    assert https_edges.check_min_version("min_version", value) == value
    assert https_edges.parse_tls_termination("tls_termination", {"min_version": value}) == {
        "enabled": True,
        "min_version": value,
    }


@pytest.mark.parametrize("value", ["1.4", "TLS1.2", "", "1.2 ", "1.3" * 10])
def test_another_min_version_is_refused_listing_the_supported_ones(value):
    refusal = _refusal(https_edges.check_min_version, "min_version", value)
    assert refusal.msg == (
        f"Field 'min_version': '{value[:16]}' is not a supported TLS "
        "version; supported: 1.0, 1.1, 1.2, 1.3"
    )
    assert refusal.details == {"field": "min_version"}


def test_tls_terminates_at_the_edge_and_the_choice_is_not_stored():
    assert https_edges._check_terminate_at("terminate_at", "edge") == "edge"
    assert https_edges.parse_tls_termination(None, {"terminate_at": "edge", "enabled": False}) == {
        "enabled": False,
        "min_version": None,
    }
    refusal = _refusal(https_edges._check_terminate_at, "terminate_at", "upstream")
    assert refusal.msg == (
        "Field 'terminate_at': 'upstream' is not supported: this edge terminates TLS itself "
        "(passing TLS through to the agent is not served, and the HTTPS edge's routes and "
        "mutual_tls need the decrypted traffic); send 'edge' or leave it out"
    )
    assert refusal.details == {"field": "terminate_at"}
    for value in ("Edge", "agent", "x" * 20):
        refusal = _refusal(https_edges._check_terminate_at, "terminate_at", value)
        assert refusal.msg == f"Field 'terminate_at' must be 'edge', got '{value[:16]}'"
        assert refusal.details == {"field": "terminate_at"}


def test_mutual_tls_takes_one_to_ten_distinct_certificate_authorities():
    from chalicelib.core import ids

    cas = [ids.new_id("ca") for _ in range(10)]
    assert https_edges._check_ca_ids("c", cas) is cas
    assert https_edges.parse_mutual_tls("mutual_tls", {"certificate_authority_ids": cas}) == {
        "enabled": True,
        "certificate_authority_ids": cas,
    }
    with pytest.raises(errors.InvalidField) as info:
        https_edges.parse_mutual_tls(
            "mutual_tls", {"certificate_authority_ids": cas + [ids.new_id("ca")]}
        )
    assert info.value.details == {"field": "mutual_tls.certificate_authority_ids"}
    refusal = _refusal(https_edges._check_ca_ids, "c", [])
    assert refusal.msg == "Field 'c' must name at least one certificate authority"
    assert refusal.details == {"field": "c"}
    refusal = _refusal(https_edges._check_ca_ids, "c", [cas[0], cas[1], cas[0]])
    assert refusal.msg == "Field 'c' lists a certificate authority more than once"
    assert refusal.details == {"field": "c"}
    other = ids.new_id("ipp")
    refusal = _refusal(https_edges._check_ca_ids, "c", [cas[0], other])
    assert refusal.msg == (
        f"Field 'c[1]' must be the id of a certificate authority (ca_…), got '{other}'"
    )
    assert refusal.details == {"field": "c[1]"}
    long = "ca_" + "x" * 61 + "TAIL"  # an id is quoted up to 64 characters
    refusal = _refusal(https_edges._check_ca_ids, "c", [long])
    assert refusal.msg.endswith(f"got '{long[:64]}'")
