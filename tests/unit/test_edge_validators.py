"""Pure validators of the edge-side resources: header names/values, hostports, CIDRs,
traffic policy documents."""

import pytest

from chalicelib import http_headers, traffic_policy
from chalicelib.core import errors
from chalicelib.edge_modules import check_hostport, check_hostports, module_body
from chalicelib.ip_policies import check_cidr


@pytest.mark.parametrize("name", ["X-A", "content-type", "a", "!#$%&'*+-.^_`|~09Az"])
def test_valid_header_names_are_lower_cased(name):
    assert http_headers.check_name("h", name) == name.lower()


@pytest.mark.parametrize("name", ["", "a b", "a:b", "é", "a\r", "(x)", "x" * 257, 5])
def test_invalid_header_names_are_refused(name):
    with pytest.raises(errors.InvalidField):
        http_headers.check_name("h", name)


def test_header_map_refuses_case_duplicates_and_bad_values():
    assert http_headers.check_map("h", {"A": "1", "B": ""}, 5) == {"a": "1", "b": ""}
    for bad in (
        {"A": "1", "a": "2"},
        {"A": "x\ny"},
        {"A": "x\ry"},
        {"A": "\x00"},
        {"A": None},
        {"A": "v" * 1025},
        {f"h{i}": "" for i in range(6)},
        ["A"],
    ):
        with pytest.raises(errors.InvalidField):
            http_headers.check_map("h", bad, 5)


def test_header_names_list_dedupes_ignoring_case():
    assert http_headers.check_names("r", ["Server", "server", "X-A"], 5) == ["server", "x-a"]
    with pytest.raises(errors.InvalidField):
        http_headers.check_names("r", ["a"] * 6, 5)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("Example.COM:443", "example.com:443"),
        ("1.tcp.ngrok.io:12345", "1.tcp.ngrok.io:12345"),
        ("localhost:1", "localhost:1"),
        ("a.b.c.:65535", "a.b.c:65535"),
        ("10.0.0.1:22", "10.0.0.1:22"),
    ],
)
def test_valid_hostports_are_normalised(value, expected):
    assert check_hostport("hp", value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "example.com",
        "example.com:",
        ":1",
        "example.com:0",
        "example.com:65536",
        "example.com:01",
        "example.com:+1",
        "ex_ample.com:1",
        "-a.com:1",
        "a-.com:1",
        "a..b:1",
        "a" * 64 + ".com:1",
        ("a" * 60 + ".") * 5 + "com:1",
        "[::1]:80",
        "example.com:\u00b2",
        "example.com:\u0663",
        None,
    ],
)
def test_invalid_hostports_are_refused(value):
    with pytest.raises(errors.InvalidField):
        check_hostport("hp", value)


def test_hostport_list_refuses_duplicates_after_normalising():
    with pytest.raises(errors.InvalidField):
        check_hostports("hp", ["A.com:1", "a.com:1"])


@pytest.mark.parametrize(
    "value, expected",
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("1.2.3.4", "1.2.3.4/32"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("::/0", "::/0"),
    ],
)
def test_cidrs_are_normalised(value, expected):
    assert check_cidr("cidr", value) == expected


@pytest.mark.parametrize("value", ["10.0.0.1/8", "1.2.3.4/33", "1.2.3", "x", "", "2001:db8::1/32"])
def test_invalid_cidrs_are_refused(value):
    with pytest.raises(errors.InvalidField):
        check_cidr("cidr", value)


@pytest.mark.parametrize(
    "doc",
    [
        "",
        "{}",
        "on_tcp_connect: []",
        '{"on_http_request": [{"actions": [{"type": "deny"}]}]}',
        "on_http_response:\n- name: h\n  expressions: ['true']\n  actions:\n  - type: add-headers\n"
        "    config:\n      headers: {x: y}\n",
    ],
)
def test_valid_traffic_policies(doc):
    assert traffic_policy.check_document("v", doc) == doc


@pytest.mark.parametrize(
    "doc",
    [
        "[]",
        "just text",
        "{bad",
        '{"on_connect": []}',
        '{"on_tcp_connect": {}}',
        '{"on_tcp_connect": [1]}',
        '{"on_tcp_connect": [{"actions": []}]}',
        '{"on_tcp_connect": [{"name": 1, "actions": [{"type": "x"}]}]}',
        '{"on_tcp_connect": [{"expressions": "x", "actions": [{"type": "x"}]}]}',
        '{"on_tcp_connect": [{"actions": [{"type": ""}]}]}',
        '{"on_tcp_connect": [{"actions": [{"type": "x", "config": []}]}]}',
        '{"on_tcp_connect": [{"actions": [{"type": "x", "other": 1}]}]}',
        '{"on_tcp_connect": [{"actions": [{"type": "x"}], "other": 1}]}',
        '{"on_tcp_connect": [' + ",".join(['{"actions": [{"type": "x"}]}'] * 65) + "]}",
        "x: " + "y" * 16384,
        "[" * 16000,
        "on_tcp_connect: " + "[" * 5000,
    ],
)
def test_invalid_traffic_policies_name_the_field(doc):
    with pytest.raises(errors.InvalidField) as raised:
        traffic_policy.check_document("traffic_policy.value", doc)
    assert raised.value.details["field"] == "traffic_policy.value"
    assert "traffic_policy.value" in raised.value.msg


def test_module_body_accepts_plain_and_wrapped_shapes():
    assert module_body({"enabled": True}, {"id": "e"}) == {"enabled": True}
    assert module_body({"module": {"a": 1}, "id": "e"}, {"id": "e"}) == {"a": 1}
    for bad in ({"module": {}, "id": "other"}, {"module": {}, "x": 1}, {"module": []}):
        with pytest.raises(errors.BadRequest):
            module_body(bad, {"id": "e"})


# ---- header refusals: msg names the field and the header, details.field the field ---------------
_TOKEN_RULE = "(a token of letters, digits and !#$%&'*+-.^_`|~, at most 256 bytes)"


@pytest.mark.parametrize(
    "call, args, msg",
    [
        (http_headers.check_name, ("h", 5), "Field 'h': header names must be strings"),
        (
            http_headers.check_name,
            ("h", "a b"),
            f"Field 'h': 'a b' is not a valid HTTP header name {_TOKEN_RULE}",
        ),
        (
            http_headers.check_name,
            ("h", "x" * 257),
            f"Field 'h': '{'x' * 64}' is not a valid HTTP header name {_TOKEN_RULE}",
        ),
        (
            http_headers.check_value,
            ("h", "x-a", 1),
            "Field 'h': the value of header 'x-a' must be a string",
        ),
        (
            http_headers.check_value,
            ("h", "x-a", "a\x00"),
            "Field 'h': the value of header 'x-a' must not contain CR, LF or NUL",
        ),
        (
            http_headers.check_value,
            ("h", "x-a", "é" * 513),
            "Field 'h': the value of header 'x-a' is longer than 1024 bytes",
        ),
        (
            http_headers.check_map,
            ("h", ["a"], 5),
            "Field 'h': must be an object mapping header names to values",
        ),
        (
            http_headers.check_map,
            ("h", {"a": "1", "b": "2", "c": "3"}, 2),
            "Field 'h': has 3 headers; the limit is 2",
        ),
        (
            http_headers.check_map,
            ("h", {"X-A": "1", "x-a": "2"}, 5),
            "Field 'h': header 'x-a' appears more than once (names are case-insensitive)",
        ),
        (
            http_headers.check_map,
            ("h", {"X-A": 1}, 5),
            "Field 'h': the value of header 'x-a' must be a string",
        ),
        (
            http_headers.check_names,
            ("h", {"a": 1}, 5),
            "Field 'h': must be an array of header names",
        ),
        (
            http_headers.check_names,
            ("h", ["a", "b", "c"], 2),
            "Field 'h': has 3 entries; the limit is 2",
        ),
    ],
)
def test_a_refused_header_names_the_field_and_the_header(call, args, msg):
    with pytest.raises(errors.InvalidField) as info:
        call(*args)
    assert info.value.msg == msg
    assert info.value.details == {"field": "h"}


def test_header_limits_pass_at_the_limit():
    assert http_headers.check_name("h", "X" * 256) == "x" * 256
    assert http_headers.check_value("h", "x-a", "é" * 512) == "é" * 512
    assert http_headers.check_map("h", {"A": "1", "B": "2"}, 2) == {"a": "1", "b": "2"}
    assert http_headers.check_names("h", ["A", "B"], 2) == ["a", "b"]
    assert http_headers.is_token("a") and not http_headers.is_token(None)
    assert not http_headers.is_token("x" * 257) and http_headers.is_token("x" * 256)


# ---- hostports and module refusals: msg and details name the field (and the element) -----------
from chalicelib import edge_modules
from chalicelib.core import ids


@pytest.mark.parametrize(
    "call, args, msg, field",
    [
        (check_hostport, ("hp", 5), "Field 'hp' must be a string 'host:port'", "hp"),
        (check_hostport, ("hp", "a.com"), "Field 'hp' must be 'host:port', got 'a.com'", "hp"),
        (check_hostport, ("hp", ".:80"), "Field 'hp' must be 'host:port', got '.:80'", "hp"),
        (
            check_hostport,
            ("hp", "a.com:0"),
            "Field 'hp' must have a port from 1 to 65535, got 'a.com:0'",
            "hp",
        ),
        (
            check_hostport,
            ("hp", "a.com:65536"),
            "Field 'hp' must have a port from 1 to 65535, got 'a.com:65536'",
            "hp",
        ),
        (
            check_hostport,
            ("hp", "a.com:08"),
            "Field 'hp' must have a port from 1 to 65535, got 'a.com:08'",
            "hp",
        ),
        (
            check_hostport,
            ("hp", "a_b.com:1"),
            "Field 'hp' must have a valid hostname as host, got 'a_b.com:1'",
            "hp",
        ),
        (
            check_hostport,
            ("hp", "a" * 400 + ":1"),
            f"Field 'hp' must have a valid hostname as host, got '{'a' * 300}'",
            "hp",
        ),
        (
            check_hostports,
            ("hps", "a.com:1"),
            "Field 'hps' must be an array of 'host:port' strings",
            "hps",
        ),
        (
            check_hostports,
            ("hps", ["a.com:1"] * 11),
            "Field 'hps' has 11 entries; the limit is 10",
            "hps",
        ),
        (
            check_hostports,
            ("hps", ["a.com:1", "b.com:2", "A.com:1"]),
            "Field 'hps' lists 'a.com:1' more than once",
            "hps",
        ),
        (
            check_hostports,
            ("hps", ["a.com:1", 5]),
            "Field 'hps[1]' must be a string 'host:port'",
            "hps[1]",
        ),
        (
            edge_modules.parse_module,
            ("backend", "x", edge_modules.BACKEND_FIELDS),
            "Field 'backend' must be an object",
            "backend",
        ),
        (
            edge_modules.parse_module,
            (None, "x", edge_modules.BACKEND_FIELDS),
            "Field 'module' must be an object",
            "module",
        ),
        (
            edge_modules.parse_module,
            ("backend", {"enabled": 1}, edge_modules.BACKEND_FIELDS),
            "Field 'backend.enabled' must be a boolean, got integer",
            "backend.enabled",
        ),
        (
            edge_modules.parse_module,
            (None, {"enabled": 1}, edge_modules.BACKEND_FIELDS),
            "Field 'enabled' must be a boolean, got integer",
            "enabled",
        ),
        (
            edge_modules.parse_ip_restriction,
            ("ipr", {"ip_policy_ids": []}),
            "Field 'ipr.ip_policy_ids' must name at least one IP policy",
            "ipr.ip_policy_ids",
        ),
        (
            edge_modules.parse_ip_restriction,
            ("ipr", {"ip_policy_ids": ["ipp_1"]}),
            "Field 'ipr.ip_policy_ids[0]' must be the id of an IP policy (ipp_…), got 'ipp_1'",
            "ipr.ip_policy_ids[0]",
        ),
    ],
)
def test_a_refused_hostport_or_module_names_the_field(call, args, msg, field):
    with pytest.raises(errors.InvalidField) as info:
        call(*args)
    assert info.value.msg == msg
    assert info.value.details == {"field": field}


def test_hostports_at_the_limits_pass_normalised():
    assert check_hostports("hps", [f"H{i}.com:{i + 1}" for i in range(10)]) == [
        f"h{i}.com:{i + 1}" for i in range(10)
    ]
    host = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 bytes
    assert check_hostport("hp", f" {host}.:65535 ") == f"{host}:65535"
    with pytest.raises(errors.InvalidField):
        check_hostport("hp", f"{host}b:1")


def test_an_ip_restriction_takes_ten_distinct_policies():
    policies = [ids.new_id("ipp") for _ in range(10)]
    assert edge_modules.parse_ip_restriction("ipr", {"ip_policy_ids": policies}) == {
        "enabled": True,
        "ip_policy_ids": policies,
    }
    with pytest.raises(errors.InvalidField) as info:
        edge_modules.parse_ip_restriction("ipr", {"ip_policy_ids": policies[:2] + policies[:1]})
    assert info.value.msg == "Field 'ipr.ip_policy_ids' lists an IP policy more than once"
    assert info.value.details == {"field": "ipr.ip_policy_ids"}


def test_a_module_keeps_enabled_false_and_fills_defaults():
    backend = ids.new_id("bkdhr")
    assert edge_modules.parse_module(
        "b", {"enabled": False, "backend_id": backend}, edge_modules.BACKEND_FIELDS, extra=1
    ) == {"enabled": False, "backend_id": backend, "extra": 1}
    assert edge_modules.parse_backend(None, {"backend_id": backend}) == {
        "enabled": True,
        "backend_id": backend,
    }


def test_a_header_value_may_hold_any_character_but_cr_lf_and_nul():
    value = "XML; q=0.5 \t\u00e9" + "".join(chr(c) for c in range(1, 32) if c not in (10, 13))
    assert http_headers.check_value("h", "x-a", value) == value
    for bad in ("\r", "\n", "\x00"):
        with pytest.raises(errors.InvalidField):
            http_headers.check_value("h", "x-a", f"a{bad}b")


def test_a_hostport_refusal_quotes_at_most_300_characters():
    for value, rule in (
        ("a" * 400, "must be 'host:port'"),
        ("a.com:" + "1" * 400, "must have a port from 1 to 65535"),
    ):
        with pytest.raises(errors.InvalidField) as info:
            check_hostport("hp", value)
        assert info.value.msg == f"Field 'hp' {rule}, got '{value[:300]}'"


def test_a_hostport_splits_at_its_last_colon():
    with pytest.raises(errors.InvalidField) as info:
        check_hostport("hp", "a:b:80")
    assert info.value.msg == "Field 'hp' must have a valid hostname as host, got 'a:b:80'"


def test_a_module_prefixes_only_the_first_mention_of_a_field_and_only_when_named():
    from chalicelib.validation import Field

    def twice(name, value):
        raise errors.InvalidField(
            f"Field '{name}' must differ from '{name}'", details={"field": name}
        )

    def unnamed(name, value):
        raise errors.InvalidField("no field here")

    with pytest.raises(errors.InvalidField) as info:
        edge_modules.parse_module("m", {"a": 1}, [Field("a", "any", check=twice)])
    assert info.value.msg == "Field 'm.a' must differ from 'a'"
    assert info.value.details == {"field": "m.a"}
    with pytest.raises(errors.InvalidField) as info:
        edge_modules.parse_module("m", {"a": 1}, [Field("a", "any", check=unnamed)])
    assert info.value.msg == "no field here" and info.value.details == {}


def test_an_edge_s_traffic_policy_module_is_checked_for_the_account_s_ip_policies(monkeypatch):
    from chalicelib import traffic_policy as tp

    calls = []
    monkeypatch.setattr(tp, "check_ip_policies", lambda *args: calls.append(args))
    edge_modules.check_policy_refs("acct_1", {"traffic_policy": {"value": "doc"}})
    edge_modules.check_policy_refs("acct_2", {"traffic_policy": {"value": "doc2"}}, nested=False)
    assert calls == [("acct_1", "traffic_policy.value", "doc"), ("acct_2", "value", "doc2")]
    for fields in (
        {},
        {"traffic_policy": None},
        {"traffic_policy": {"value": ""}},
        {"backend": {"value": "doc"}},
    ):
        edge_modules.check_policy_refs("acct_1", fields)
    assert len(calls) == 2
