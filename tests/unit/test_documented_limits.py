"""Every limit docs/CONTRACT.md ("Requests and responses", "Resource rules decided here") and
the modules' docstrings promise, checked at its boundary: the limit passes, one past it is a 400.

The numbers are written here as the documents write them, never read from the modules'
constants: a test that reads ``MAX_X`` keeps passing when someone changes ``MAX_X``. Errors are
asserted through the catalog's classes (chalicelib.core.errors), not their code strings.
"""

import pytest

from chalicelib import (
    edge_modules,
    http_headers,
    http_response_backends,
    https_edges,
    reserved_domains,
    traffic_policy,
)
from chalicelib.core import acl, errors, hostnames, ids, store
from chalicelib.validation import DESCRIPTION, METADATA, Field, parse


def _policy_ids(count):
    return [ids.new_id("ipp") for _ in range(count)]


def _refused(call, *args, cls=errors.InvalidField, field=None):
    """``call(*args)`` raises the catalog error ``cls`` (a 400) naming ``field`` in details."""
    with pytest.raises(cls) as info:
        call(*args)
    assert info.value.status_code == 400
    assert info.value.msg and info.value.msg != cls.default_msg, info.value.msg
    if field is not None:
        assert info.value.details.get("field") == field, info.value.details
        assert field.split("[")[0].split(".")[-1] in info.value.msg, info.value.msg
    return info.value


# ---- bodies: description, metadata, UTF-8 bytes --------------------------------------------------
@pytest.mark.parametrize("field, limit", [(DESCRIPTION, 255), (METADATA, 4096)])
def test_description_and_metadata_limits_are_utf8_bytes(field, limit):
    assert parse({field.name: "a" * limit}, [field]) == {field.name: "a" * limit}
    error = _refused(parse, {field.name: "a" * (limit + 1)}, [field])
    assert error.details["field"] == field.name
    # bytes, not characters: limit/2 two-byte characters fit, one more does not
    parse({field.name: "é" * (limit // 2)}, [field])
    _refused(parse, {field.name: "é" * (limit // 2 + 1)}, [field])


def test_integer_and_boolean_fields_refuse_the_other_json_type():
    fields = [Field("n", "integer"), Field("b", "boolean")]
    assert parse({"n": 0, "b": False}, fields) == {"n": 0, "b": False}
    _refused(parse, {"n": True}, fields)
    _refused(parse, {"b": 1}, fields)
    _refused(parse, {"n": 1.0}, fields)


def test_unknown_field_missing_field_and_null_means_not_sent():
    fields = [Field("name", "string", required=True), DESCRIPTION]
    _refused(parse, {"name": "x", "other": 1}, fields, cls=errors.UnknownField)
    _refused(parse, {"description": "x"}, fields, cls=errors.MissingField)
    assert parse({"name": "x", "description": None}, fields) == {"name": "x"}


def test_body_id_must_equal_the_path_id():
    assert parse({"id": "ak_1", "description": "d"}, [DESCRIPTION], path_id="ak_1") == {
        "description": "d"
    }
    assert _refused(parse, {"id": "ak_2"}, [DESCRIPTION], "ak_1").details["field"] == "id"
    _refused(parse, {"id": "ak_1"}, [DESCRIPTION])


# ---- edges: hostports, ip_restriction, traffic policy ----------------------------------------
def test_an_edge_takes_ten_hostports_not_eleven():
    ten = [f"h{i}.example.com:443" for i in range(10)]
    assert edge_modules.check_hostports("hostports", ten) == ten
    _refused(edge_modules.check_hostports, "hostports", ten + ["h10.example.com:443"])


def test_hostports_are_distinct_lower_cased_with_ports_1_to_65535():
    assert edge_modules.check_hostports(
        "hostports", ["A.Example.COM:1", "b.example.com:65535"]
    ) == ["a.example.com:1", "b.example.com:65535"]
    _refused(edge_modules.check_hostports, "hostports", ["a.example.com:1", "A.example.com:1"])
    for bad in (
        "a.example.com:0",
        "a.example.com:65536",
        "a.example.com:01",
        "a.example.com",
        ":80",
        "a..example.com:80",
    ):
        _refused(edge_modules.check_hostport, "hostports[0]", bad)


def test_ip_restriction_takes_one_to_ten_policies():
    ten = _policy_ids(10)
    parsed = edge_modules.parse_ip_restriction("ip_restriction", {"ip_policy_ids": ten})
    assert parsed == {"enabled": True, "ip_policy_ids": ten}
    error = _refused(
        edge_modules.parse_ip_restriction,
        "ip_restriction",
        {"ip_policy_ids": ten + _policy_ids(1)},
    )
    assert error.details["field"] == "ip_restriction.ip_policy_ids"
    _refused(edge_modules.parse_ip_restriction, "ip_restriction", {"ip_policy_ids": []})
    assert (
        edge_modules.parse_ip_restriction(None, {"ip_policy_ids": ten[:1]})["ip_policy_ids"]
        == ten[:1]
    )


def test_ip_restriction_policies_are_distinct():
    one = _policy_ids(1)[0]
    error = _refused(
        edge_modules.parse_ip_restriction, "ip_restriction", {"ip_policy_ids": [one, one]}
    )
    assert error.details["field"] == "ip_restriction.ip_policy_ids"


def test_ip_restriction_policy_ids_must_be_ip_policy_ids():
    _refused(
        edge_modules.parse_ip_restriction,
        "ip_restriction",
        {"ip_policy_ids": [ids.new_id("bkdhr")]},
    )


def _document(rules_per_phase=1, expressions=0, actions=1, name="r", expression="true"):
    import json

    rule = {"name": name, "actions": [{"type": "deny"}] * actions}
    if expressions:
        rule["expressions"] = [expression] * expressions
    return json.dumps({"on_http_request": [rule] * rules_per_phase})


def test_traffic_policy_allows_64_rules_per_phase_not_65():
    traffic_policy.check_document("value", _document(rules_per_phase=64))
    _refused(traffic_policy.check_document, "value", _document(rules_per_phase=65))


def test_traffic_policy_document_is_at_most_16_kib():
    base = _document(name="")
    padded = base.replace('"name": ""', '"name": ""' + " " * (16384 - len(base)))
    assert len(padded.encode()) == 16384
    assert traffic_policy.check_document("value", padded) == padded
    _refused(traffic_policy.check_document, "value", padded + " ")


def test_traffic_policy_rule_limits():
    check = traffic_policy.check_document
    check("value", _document(expressions=32))
    _refused(check, "value", _document(expressions=33))
    check("value", _document(actions=32))
    _refused(check, "value", _document(actions=33))
    # a valid CEL expression of exactly 1024 bytes, then one byte longer
    check("value", _document(expressions=1, expression="'" + "x" * 1016 + "' != ''"))
    _refused(check, "value", _document(expressions=1, expression="'" + "x" * 1017 + "' != ''"))
    check("value", _document(name="n" * 255))
    _refused(check, "value", _document(name="n" * 256))
    _refused(check, "value", _document(actions=0))
    _refused(check, "value", '{"on_http_request": [{"actions": [{"type": " "}]}]}')
    _refused(check, "value", '{"on_connect": []}')
    _refused(check, "value", '{"on_http_request": [{"actions": [{"type": "x"}], "when": 1}]}')


def test_traffic_policy_accepts_yaml_and_the_empty_document():
    assert traffic_policy.check_document("value", "") == ""
    yaml_doc = "on_tcp_connect:\n  - actions:\n      - type: deny\n"
    assert traffic_policy.check_document("value", yaml_doc) == yaml_doc


# ---- HTTPS edge route modules ----------------------------------------------------------------
def test_user_agent_filter_takes_20_patterns_of_512_bytes():
    parse_ua = https_edges.parse_user_agent_filter
    assert parse_ua(None, {"allow": ["a"] * 20})["allow"] == ["a"] * 20
    _refused(parse_ua, None, {"allow": ["a"] * 21})
    _refused(parse_ua, None, {"deny": ["a"] * 21})
    parse_ua(None, {"deny": ["x" * 512]})
    _refused(parse_ua, None, {"deny": ["x" * 513]})
    _refused(parse_ua, None, {"allow": ["(unclosed"]})
    assert parse_ua(None, {}) == {"enabled": True, "allow": [], "deny": []}


def test_response_headers_take_20_to_add_and_20_to_remove_lower_cased():
    parse_rh = https_edges.parse_response_headers
    add = {f"X-H{i}": "v" for i in range(20)}
    parsed = parse_rh(None, {"add": add, "remove": [f"X-R{i}" for i in range(20)]})
    assert set(parsed["add"]) == {f"x-h{i}" for i in range(20)}
    assert parsed["remove"] == [f"x-r{i}" for i in range(20)]
    _refused(parse_rh, None, {"add": {**add, "X-H20": "v"}})
    _refused(parse_rh, None, {"remove": [f"x-r{i}" for i in range(21)]})
    assert parse_rh(None, {"add": {"a": "b"}})["remove"] == []


# ---- HTTP headers and response backends -------------------------------------------------------
def test_header_names_are_tokens_of_at_most_256_bytes_and_values_1024():
    assert http_headers.check_name("headers", "A" * 256) == "a" * 256
    _refused(http_headers.check_name, "headers", "A" * 257)
    _refused(http_headers.check_name, "headers", "bad name")
    assert http_headers.check_value("headers", "x", "v" * 1024) == "v" * 1024
    _refused(http_headers.check_value, "headers", "x", "v" * 1025)
    for bad in ("a\rb", "a\nb", "a\x00b"):
        _refused(http_headers.check_value, "headers", "x", bad)


def test_a_header_map_refuses_names_equal_ignoring_case():
    assert http_headers.check_map("headers", {"X-A": "1"}, 5) == {"x-a": "1"}
    _refused(http_headers.check_map, "headers", {"X-A": "1", "x-a": "2"}, 5)


def test_a_backend_takes_50_headers_and_a_64_kib_body():
    fields = http_response_backends.CREATE_FIELDS
    headers = {f"h{i}": "v" for i in range(50)}
    assert len(parse({"headers": headers}, fields)["headers"]) == 50
    _refused(parse, {"headers": {**headers, "h50": "v"}}, fields)
    assert parse({"body": "b" * 65536}, fields)["body"] == "b" * 65536
    _refused(parse, {"body": "b" * 65537}, fields)


def test_a_backend_status_code_is_100_to_599():
    fields = http_response_backends.CREATE_FIELDS
    for ok in (100, 599):
        assert parse({"status_code": ok}, fields) == {"status_code": ok}
    for bad in (99, 600):
        _refused(parse, {"status_code": bad}, fields)


# ---- credentials' ACL -----------------------------------------------------------------------
def test_an_acl_takes_100_rules_of_512_bytes():
    hundred = [f"bind:h{i}.example.com" for i in range(100)]
    assert acl.normalize(hundred) == hundred
    _refused(acl.normalize, hundred + ["bind:x.example.com"])
    rule_512 = "bind:k=" + "v" * (512 - len("bind:k="))
    assert acl.normalize([rule_512]) == [rule_512]
    _refused(acl.normalize, [rule_512 + "v"])


# ---- reserved domains ------------------------------------------------------------------------
def test_resolves_to_takes_ten_entries_not_eleven():
    ten = [{"value": "global"}] * 5 + [{"value": r} for r in ("au", "eu", "ap", "us", "jp")]
    fields = reserved_domains.UPDATE_FIELDS
    assert parse({"resolves_to": ten}, fields)["resolves_to"] == ten
    error = _refused(parse, {"resolves_to": ten + [{"value": "in"}]}, fields)
    assert error.details["field"] == "resolves_to"
    assert parse({"resolves_to": []}, fields) == {"resolves_to": []}
    _refused(parse, {"resolves_to": [{"value": "mars"}]}, fields)
    _refused(parse, {"resolves_to": [{"value": "eu", "extra": 1}]}, fields)


def test_reserved_domain_regions():
    fields = reserved_domains.CREATE_FIELDS
    for region in ("", "au", "eu", "ap", "us", "jp", "in", "sa"):
        assert parse({"domain": "a.example.com", "region": region}, fields)["region"] == region
    for bad in ("EU", "global", "xx"):
        _refused(parse, {"domain": "a.example.com", "region": bad}, fields)


# ---- hostnames -------------------------------------------------------------------------------
def test_a_hostname_is_at_most_253_bytes_with_labels_of_63():
    label63 = "a" * 63
    assert hostnames.parse(f"{label63}.com") == f"{label63}.com"
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse(f"a{label63}.com")
    name253 = ("a" * 63 + ".") * 3 + "b" * 61  # 3*64 + 61 = 253
    assert len(name253) == 253
    assert hostnames.parse(name253) == name253
    with pytest.raises(hostnames.InvalidHostname):
        hostnames.parse(name253 + "b")


# ---- secrets and ids -------------------------------------------------------------------------
def test_a_secret_is_256_random_bits_in_43_base62_characters():
    from chalicelib import auth

    drawn = [auth.new_secret() for _ in range(400)]
    assert all(len(secret) == 43 for secret in drawn)
    # 43 base62 characters hold 256.03 bits; 42 would hold only 250
    assert 62**43 >= 2**256 > 62**42
    # base62 only: a token never starts with "-", which a command line takes for a flag (400
    # base64url tokens would hold "-" or "_" with a probability of 1 - (62/64)**(43*400))
    assert set("".join(drawn)) <= set(ids.ALPHABET)
    # no place is fixed: the first and the last characters range over the alphabet
    assert min(len({secret[0] for secret in drawn}), len({secret[-1] for secret in drawn})) > 50
    assert len(set(drawn)) == len(drawn)


def test_an_id_is_the_prefix_and_27_base62_characters():
    value = ids.new_id("ak")
    prefix, _, rest = value.partition("_")
    assert prefix == "ak" and len(rest) == 27
    assert set(rest) <= set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


# ---- the store's retry ----------------------------------------------------------------------
def _flaky(losses):
    calls = []

    @store.retrying
    def write():
        calls.append(1)
        if len(calls) <= losses:
            raise store.VersionConflict()
        return "written"

    return write, calls


def test_the_store_retries_eight_times():
    assert store.RETRIES == 8  # chalicelib/core/store.py: after RETRIES lost races, 409


def test_a_write_that_loses_all_but_one_race_succeeds_on_the_last_attempt(monkeypatch):
    monkeypatch.setattr(store, "backoff", lambda attempt: 0)
    write, calls = _flaky(store.RETRIES - 1)
    assert write() == "written"
    assert len(calls) == store.RETRIES


def test_a_write_that_loses_every_race_is_a_409(monkeypatch):
    monkeypatch.setattr(store, "backoff", lambda attempt: 0)
    write, calls = _flaky(store.RETRIES)
    with pytest.raises(errors.Conflict) as info:
        write()
    assert info.value.status_code == 409
    assert len(calls) == store.RETRIES


# ---- the 400 names the field (details.field), for each rule's error ------------------------
@pytest.mark.parametrize(
    "call, args, field",
    [
        (http_headers.check_name, ("hdr", "bad name"), "hdr"),
        (http_headers.check_name, ("hdr", 5), "hdr"),
        (http_headers.check_value, ("hdr", "x", 5), "hdr"),
        (http_headers.check_value, ("hdr", "x", "a\nb"), "hdr"),
        (http_headers.check_value, ("hdr", "x", "v" * 1025), "hdr"),
        (http_headers.check_map, ("hdr", [], 5), "hdr"),
        (http_headers.check_map, ("hdr", {"a": "1", "b": "2"}, 1), "hdr"),
        (http_headers.check_map, ("hdr", {"a": "1", "A": "2"}, 5), "hdr"),
        (http_headers.check_map, ("hdr", {"bad name": "1"}, 5), "hdr"),
        (http_headers.check_map, ("hdr", {"a": "\r"}, 5), "hdr"),
        (http_headers.check_names, ("hdr", "x-a", 5), "hdr"),
        (http_headers.check_names, ("hdr", ["a", "b"], 1), "hdr"),
        (http_headers.check_names, ("hdr", ["bad name"], 5), "hdr"),
        (edge_modules.check_hostports, ("hostports", "a.example.com:1"), "hostports"),
        (edge_modules.check_hostports, ("hostports", ["a.example.com:1"] * 2), "hostports"),
        (edge_modules.check_hostports, ("hostports", ["x:1"] * 11), "hostports"),
        (edge_modules.check_hostport, ("hostports[0]", 5), "hostports[0]"),
        (edge_modules.check_hostport, ("hostports[0]", "nohost"), "hostports[0]"),
        (edge_modules.check_hostport, ("hostports[0]", "a.com:0"), "hostports[0]"),
        (edge_modules.check_hostport, ("hostports[0]", "a_b.com:1"), "hostports[0]"),
        (edge_modules.parse_module, ("backend", [], edge_modules.BACKEND_FIELDS), "backend"),
        (edge_modules.parse_module, (None, [], edge_modules.BACKEND_FIELDS), "module"),
        (edge_modules.parse_backend, ("backend", {"backend_id": "x"}), "backend.backend_id"),
        (edge_modules.parse_backend, (None, {"backend_id": "x"}), "backend_id"),
        (
            edge_modules.parse_ip_restriction,
            ("ip_restriction", {"ip_policy_ids": []}),
            "ip_restriction.ip_policy_ids",
        ),
        (
            edge_modules.parse_ip_restriction,
            ("ip_restriction", {"ip_policy_ids": ["x"]}),
            "ip_restriction.ip_policy_ids[0]",
        ),
        (acl.normalize, (["x"] * 101, "acl"), "acl"),
        (acl.normalize, (["nope"], "acl"), "acl"),
        (
            https_edges.parse_user_agent_filter,
            ("user_agent_filter", {"deny": ["a", "("]}),
            "user_agent_filter.deny[1]",
        ),
        (https_edges.parse_user_agent_filter, (None, {"allow": ["("]}), "allow[0]"),
    ],
)
def test_a_refused_value_names_its_field(call, args, field):
    _refused(call, *args, field=field)


@pytest.mark.parametrize(
    "fields, body, field",
    [
        (http_response_backends.CREATE_FIELDS, {"status_code": 600}, "status_code"),
        (http_response_backends.CREATE_FIELDS, {"headers": {"a b": "1"}}, "headers"),
        (reserved_domains.CREATE_FIELDS, {"domain": "a.example.com", "region": "xx"}, "region"),
        (reserved_domains.CREATE_FIELDS, {"domain": "nodot"}, "domain"),
        (reserved_domains.UPDATE_FIELDS, {"resolves_to": "eu"}, "resolves_to"),
        (reserved_domains.UPDATE_FIELDS, {"resolves_to": [{"value": "x"}]}, "resolves_to"),
        (reserved_domains.UPDATE_FIELDS, {"resolves_to": [{"value": "eu"}] * 11}, "resolves_to"),
        (reserved_domains.UPDATE_FIELDS, {"certificate_id": "cert_1"}, "certificate_id"),
        (
            reserved_domains.UPDATE_FIELDS,
            {"certificate_management_policy": {"authority": "other"}},
            "certificate_management_policy",
        ),
        (
            reserved_domains.UPDATE_FIELDS,
            {"certificate_management_policy": {"private_key_type": "dsa"}},
            "certificate_management_policy",
        ),
        (
            reserved_domains.UPDATE_FIELDS,
            {"certificate_management_policy": {"other": "x"}},
            "certificate_management_policy",
        ),
        ([Field("n", "integer")], {"n": "1"}, "n"),
        ([Field("b", "boolean")], {"b": "true"}, "b"),
        ([Field("s", "string")], {"s": 1}, "s"),
        ([Field("l", "string_list")], {"l": "x"}, "l"),
        ([Field("l", "string_list")], {"l": [1]}, "l[0]"),
        ([Field("l", "string_list", max_items=1)], {"l": ["a", "b"]}, "l"),
        ([Field("m", "string_map")], {"m": []}, "m"),
        ([Field("m", "string_map", max_items=1)], {"m": {"a": "1", "b": "2"}}, "m"),
        ([Field("m", "string_map")], {"m": {"k": 1}}, "m.k"),
        ([Field("o", "object")], {"o": []}, "o"),
    ],
)
def test_a_refused_body_field_is_named_in_details(fields, body, field):
    _refused(parse, body, fields, field=field)


def test_a_certificate_policy_fills_in_the_defaults():
    fields = reserved_domains.UPDATE_FIELDS
    assert parse({"certificate_management_policy": {}}, fields)[
        "certificate_management_policy"
    ] == {"authority": "letsencrypt", "private_key_type": "ecdsa"}
    assert parse(
        {"certificate_management_policy": {"private_key_type": "rsa", "authority": ""}}, fields
    )["certificate_management_policy"] == {"authority": "letsencrypt", "private_key_type": "rsa"}


def test_a_hostport_host_is_at_most_253_bytes():
    host = ("a" * 63 + ".") * 3 + "b" * 61
    assert edge_modules.check_hostport("hostports[0]", f"{host}:80") == f"{host}:80"
    _refused(edge_modules.check_hostport, "hostports[0]", f"{host}b:80")


def test_a_domain_must_end_in_a_name_not_a_number():
    assert hostnames.parse("a.1.example.com", numeric_tld=False) == "a.1.example.com"
    for bad in ("a.b.123", "example.123"):
        with pytest.raises(hostnames.InvalidHostname):
            hostnames.parse(bad, numeric_tld=False)
    assert hostnames.parse("10.0.0.1") == "10.0.0.1"


@pytest.mark.parametrize("rule", ["bind:[::1:80", "bind:::1]:80", "bind:[zz]:80"])
def test_an_acl_address_host_in_brackets_must_be_ipv6(rule):
    _refused(acl.normalize, [rule], field="acl")


def test_an_acl_ipv6_address_is_stored_compressed():
    assert acl.normalize(["bind:[2001:DB8:0:0::1]:443"]) == ["bind:[2001:db8::1]:443"]


@pytest.mark.parametrize(
    "url", ["https://a.example.com/\x01", "https://a.exam\tple.com/", "https://a.example.com/ x"]
)
def test_an_abuse_url_with_control_characters_or_spaces_is_400(url):
    from chalicelib import abuse_reports

    with pytest.raises(errors.InvalidField) as info:
        abuse_reports.url_host("urls[0]", url)
    assert info.value.details == {"field": "urls", "url": url}


def test_an_id_decodes_to_its_creation_millisecond():
    import time

    before = int(time.time() * 1000)
    value = ids.new_id("bot")
    after = int(time.time() * 1000)
    assert before <= ids.timestamp_millis(value) <= after
    assert ids.timestamp_millis("cr_" + "0" * 27) == 0
    assert ids.timestamp_millis("ak_" + "z" * 27) == (62**27 - 1) >> 112


# ---- TLS certificates (chalicelib/tls_certificates.py, docs/CERTIFICATES.md) ---------------------
def test_tls_certificate_pem_sizes_and_chain_length():
    from chalicelib import tls_certificates
    from stacks.certs import SmallCA, pem

    fields = tls_certificates.CREATE_FIELDS
    body = {"private_key_pem": "k"}
    assert parse({**body, "certificate_pem": "a" * 65536}, fields)
    _refused(parse, {**body, "certificate_pem": "a" * 65537}, fields, field="certificate_pem")
    assert parse({"certificate_pem": "c", "private_key_pem": "k" * 16384}, fields)
    _refused(
        parse,
        {"certificate_pem": "c", "private_key_pem": "k" * 16385},
        fields,
        field="private_key_pem",
    )
    ca = SmallCA()
    leaf = pem(ca.leaf(["a.example.com"])[0])
    chain, _ = tls_certificates.parse_chain(leaf + ca.pem * 9)
    assert len(chain) == 10
    _refused(tls_certificates.parse_chain, leaf + ca.pem * 10, field="certificate_pem")
