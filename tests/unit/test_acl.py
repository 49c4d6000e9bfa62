"""The ACL grammar and the bind decision (chalicelib.core.acl), as pure logic."""

import pytest

from chalicelib.core import acl, errors


@pytest.mark.parametrize(
    "rule, kind",
    [
        ("*", "all"),
        ("bind:*", "all"),
        ("bind:example.com", "domain"),
        ("bind:*.example.com", "domain"),
        ("bind:localhost", "domain"),
        ("bind:x.example.com:443", "address"),
        ("bind:*.tcp.example.com:1", "address"),
        ("bind:10.0.0.1:65535", "address"),
        ("bind:[2001:db8::1]:22", "address"),
        ("bind:env=prod", "label"),
        ("bind:*=prod", "label"),
        ("bind:env=*", "label"),
        ("bind:*=*", "label"),
        ("bind:app.io/tier=web_1", "label"),
        ("bind:_k=v:1@x", "label"),
    ],
)
def test_valid_rules_parse_to_their_kind(rule, kind):
    assert acl.parse_rule(rule).kind == kind


@pytest.mark.parametrize(
    "rule",
    [
        "",
        " ",
        "**",
        "bind",
        "bind:",
        "Bind:a.com",
        "bind: a.com",
        "bind:a.com ",
        "deny:a.com",
        "bind:a*.com",
        "bind:*a.com",
        "bind:a.*.com",
        "bind:*.*.com",
        "bind:*.",
        "bind:.a.com",
        "bind:a.com.",
        "bind:a..com",
        "bind:-a.com",
        "bind:a-.com",
        "bind:a_b.com",
        "bind:" + "a" * 64 + ".com",
        "bind:" + "a." * 127 + "com",
        "bind:a.com:0",
        "bind:a.com:65536",
        "bind:a.com:08",
        "bind:a.com:-1",
        "bind:a.com:",
        "bind::80",
        "bind:[::1]",
        "bind:[nope]:80",
        "bind:a.com:80:90x",
        "bind:=v",
        "bind:k=",
        "bind:a*=v",
        "bind:k=v*",
        "bind:k=v w",
        "bind:-k=v",
        "bind:k=v=w",
        "bind:" + "k" * 600 + "=v",
        5,
        None,
    ],
)
def test_invalid_rules_are_refused(rule):
    with pytest.raises(acl.InvalidRule):
        acl.parse_rule(rule)


def test_normalize_lower_cases_hosts_and_keeps_labels():
    assert acl.normalize(
        [
            "bind:*.EXAMPLE.com",
            "bind:A.com:80",
            "bind:Env=Prod",
            "bind:*",
            "*",
            "bind:[2001:DB8:0::1]:22",
        ]
    ) == [
        "bind:*.example.com",
        "bind:a.com:80",
        "bind:Env=Prod",
        "bind:*",
        "*",
        "bind:[2001:db8::1]:22",
    ]


def test_normalize_names_the_bad_rule_and_its_index():
    with pytest.raises(errors.InvalidField) as exc:
        acl.normalize(["*", "bind:exa mple.com"])
    assert "bind:exa mple.com" in exc.value.msg and "acl[1]" in exc.value.msg
    assert exc.value.details["field"] == "acl"
    assert exc.value.details["rule"] == "bind:exa mple.com"


def test_normalize_limits():
    assert len(acl.normalize(["*"] * acl.MAX_RULES)) == acl.MAX_RULES
    with pytest.raises(errors.InvalidField):
        acl.normalize(["*"] * (acl.MAX_RULES + 1))
    long_label = "bind:k=" + "v" * (acl.MAX_RULE_BYTES - len("bind:k="))
    assert acl.normalize([long_label]) == [long_label]
    with pytest.raises(errors.InvalidField):
        acl.normalize([long_label + "v"])


@pytest.mark.parametrize("rules", [[], None, ["*"], ["bind:*"], ["bind:a.com", "*"]])
def test_empty_acl_and_star_permit_everything(rules):
    assert acl.may_bind(rules, domain="anything.example.org")
    assert acl.may_bind(rules, address="1.tcp.example.com:12345")
    assert acl.may_bind(rules, labels={"any": "thing"})


@pytest.mark.parametrize(
    "domain, allowed",
    [
        ("a.example.com", True),
        ("b.a.example.com", True),
        ("*.example.com", True),
        ("*.a.example.com", True),
        ("A.EXAMPLE.COM", True),
        ("a.example.com.", True),
        ("example.com", False),
        ("aexample.com", False),
        ("a.example.com.evil.org", False),
        ("example.org", False),
        ("", False),
    ],
)
def test_wildcard_domain_rule(domain, allowed):
    assert acl.may_bind(["bind:*.example.com"], domain=domain) is allowed


@pytest.mark.parametrize(
    "domain, allowed",
    [
        ("app.example.com", True),
        ("APP.example.com", True),
        ("x.app.example.com", False),
        ("example.com", False),
        ("*.app.example.com", False),
    ],
)
def test_exact_domain_rule(domain, allowed):
    assert acl.may_bind(["bind:app.example.com"], domain=domain) is allowed


def test_domain_rules_do_not_permit_addresses_or_labels():
    rules = ["bind:*.example.com"]
    assert not acl.may_bind(rules, address="a.example.com:80")
    assert not acl.may_bind(rules, labels={"edge": "a.example.com"})


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("1.tcp.example.com:12345", True),
        ("1.TCP.example.com:12345", True),
        ("1.tcp.example.com:12346", False),
        ("2.tcp.example.com:12345", False),
        ("x.y.example.com:22", True),
        ("y.example.com:22", True),
        ("example.com:22", False),
        ("10.0.0.1:8080", True),
        ("10.0.0.2:8080", False),
        ("[2001:db8:0::1]:443", True),
        ("no-port", False),
        ("host:", False),
        ("host:abc", False),
    ],
)
def test_address_rules(address, allowed):
    rules = [
        "bind:1.tcp.example.com:12345",
        "bind:*.example.com:22",
        "bind:10.0.0.1:8080",
        "bind:[2001:db8::1]:443",
    ]
    assert acl.may_bind(rules, address=address) is allowed


@pytest.mark.parametrize(
    "labels, allowed",
    [
        ({"env": "prod"}, True),
        ({"team": "prod"}, True),
        ({"region": "eu"}, True),
        ({"region": "anything"}, True),
        ({"env": "dev"}, False),
        ({"app": "web"}, True),
        ({"app": "api"}, False),
        ({"env": "prod", "region": "us"}, True),
        ({"env": "prod", "app": "api"}, False),
        ({}, True),
    ],
)
def test_label_rules_with_wildcard_key_or_value(labels, allowed):
    rules = ["bind:*=prod", "bind:region=*", "bind:app=web"]
    assert acl.may_bind(rules, labels=labels) is allowed


def test_label_wildcard_both():
    assert acl.may_bind(["bind:*=*"], labels={"k": "v", "x": "y"})
    assert not acl.may_bind(["bind:*=*"], domain="a.com")


def test_several_targets_must_all_be_permitted():
    rules = ["bind:a.example.com", "bind:env=prod"]
    assert acl.may_bind(rules, domain="a.example.com", labels={"env": "prod"})
    assert not acl.may_bind(rules, domain="a.example.com", labels={"env": "dev"})
    assert not acl.may_bind(rules, domain="b.example.com", labels={"env": "prod"})


def test_nothing_to_bind_is_a_programming_error():
    with pytest.raises(ValueError):
        acl.may_bind(["*"])


def test_an_unparsable_stored_rule_permits_nothing():
    assert not acl.may_bind(["bind:bad rule"], domain="bad")
    assert acl.may_bind(["bind:bad rule", "bind:ok.com"], domain="ok.com")


# ---- the reason of each refusal (the 400's msg after "Invalid ACL rule '…' in 'acl[i]': ") ------
@pytest.mark.parametrize(
    "rule, reason",
    [
        (5, "rules must be strings"),
        ("bind:k=" + "v" * 506, "a rule may be at most 512 bytes"),
        ("bind:k=" + "é" * 253, "a rule may be at most 512 bytes"),
        ("a.example.com", "a rule must be '*' or 'bind:<domain|address|label>'"),
        ("Bind:a.com", "a rule must be '*' or 'bind:<domain|address|label>'"),
        ("bind:", "'bind:' needs a target (a domain, an address, a label or '*')"),
        ("bind:a .com", "rules may not contain whitespace"),
        ("bind:a.com\t", "rules may not contain whitespace"),
        (
            "bind:-k=v",
            "label key '-k' must be '*' or letters, digits, '_', '.', '/', '-' (starting "
            "with a letter, digit or '_')",
        ),
        (
            "bind:=v",
            "label key '' must be '*' or letters, digits, '_', '.', '/', '-' (starting "
            "with a letter, digit or '_')",
        ),
        (
            "bind:k=v!",
            "label value 'v!' must be '*' or letters, digits and '_', '.', '/', ':', '@', '-'",
        ),
        (
            "bind:k=",
            "label value '' must be '*' or letters, digits and '_', '.', '/', ':', '@', '-'",
        ),
        ("bind::80", "an address must be 'host:port'"),
        ("bind:[abc", "an address must be 'host:port'"),
        ("bind:[1.2.3.4]:80", "'[1.2.3.4]' is not an IPv6 address in brackets"),
        (
            "bind:a_b.com:80",
            "address host 'a_b.com' has an invalid label 'a_b' (letters, digits "
            "and '-' only, not at either end)",
        ),
        ("bind:a.com:0", "port '0' must be a number from 1 to 65535"),
        ("bind:a.com:65536", "port '65536' must be a number from 1 to 65535"),
        ("bind:a.com:080", "port '080' must be a number from 1 to 65535"),
        ("bind:a.com:", "port '' must be a number from 1 to 65535"),
        ("bind:a..com", "domain 'a..com' has an empty label (leading, trailing or double dot)"),
    ],
)
def test_a_refused_rule_says_why(rule, reason):
    with pytest.raises(acl.InvalidRule) as info:
        acl.parse_rule(rule)
    assert str(info.value) == reason


@pytest.mark.parametrize(
    "rule, text",
    [
        ("bind:k=" + "v" * 505, "bind:k=" + "v" * 505),
        ("bind:a.com:1", "bind:a.com:1"),
        ("bind:A.com:65535", "bind:a.com:65535"),
        ("bind:[2001:DB8::1]:9", "bind:[2001:db8::1]:9"),
        ("bind:*=*", "bind:*=*"),
        ("bind:K=V:x@y", "bind:K=V:x@y"),
        ("bind:*.A.com", "bind:*.a.com"),
        ("bind:*", "bind:*"),
        ("*", "*"),
        ("bind:*.a.com:22", "bind:*.a.com:22"),
    ],
)
def test_rules_at_the_limits_pass_in_canonical_spelling(rule, text):
    assert acl.parse_rule(rule).text == text


def test_a_refused_rule_is_a_400_naming_the_rule_its_index_and_the_reason():
    with pytest.raises(errors.InvalidField) as info:
        acl.normalize(["*", "bind:a.com:0"], "acl")
    assert info.value.status_code == 400 and info.value.error_code == errors.INVALID_FIELD
    assert info.value.msg == (
        "Invalid ACL rule 'bind:a.com:0' in 'acl[1]': port '0' must be a number from 1 to 65535"
    )
    assert info.value.details == {"field": "acl", "rule": "bind:a.com:0"}
    assert acl.check_field("x", ["bind:A.com"]) == ["bind:a.com"]
    with pytest.raises(errors.InvalidField) as info:
        acl.check_field("x", ["*"] * 101)
    assert info.value.msg == "Field 'x' has 101 rules; the limit is 100"
    assert info.value.details == {"field": "x"}
    assert acl.normalize(["*"] * 100) == ["*"] * 100


def test_a_label_with_two_equals_signs_is_refused_for_its_value():
    with pytest.raises(acl.InvalidRule) as info:
        acl.parse_rule("bind:a=b=c")
    assert str(info.value) == (
        "label value 'b=c' must be '*' or letters, digits and '_', '.', '/', ':', '@', '-'"
    )


def test_a_bracketed_address_host_must_close_its_bracket_to_match():
    assert acl.may_bind(["bind:[::1]:80"], address="[::1]:80")
    assert acl.may_bind(["bind:[::1]:80"], address="[0:0::1]:80")
    assert not acl.may_bind(["bind:[::1]:80"], address="[::1x:80")
    assert not acl.may_bind(["bind:[::1]:80"], address="x::1]:80")


def test_may_bind_without_anything_to_bind_says_so():
    with pytest.raises(ValueError) as info:
        acl.may_bind(["*"])
    assert str(info.value) == "may_bind needs a domain, an address or labels"
