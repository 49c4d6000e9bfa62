"""Pure validators of the edge-side resources: header names/values, hostports, CIDRs,
traffic policy documents."""
import pytest

from chalicelib import errors, http_headers, traffic_policy
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
    for bad in ({"A": "1", "a": "2"}, {"A": "x\ny"}, {"A": "x\ry"}, {"A": "\x00"}, {"A": None},
                {"A": "v" * 1025}, {f"h{i}": "" for i in range(6)}, ["A"]):
        with pytest.raises(errors.InvalidField):
            http_headers.check_map("h", bad, 5)


def test_header_names_list_dedupes_ignoring_case():
    assert http_headers.check_names("r", ["Server", "server", "X-A"], 5) == ["server", "x-a"]
    with pytest.raises(errors.InvalidField):
        http_headers.check_names("r", ["a"] * 6, 5)


@pytest.mark.parametrize("value, expected", [
    ("Example.COM:443", "example.com:443"), ("1.tcp.ngrok.io:12345", "1.tcp.ngrok.io:12345"),
    ("localhost:1", "localhost:1"), ("a.b.c.:65535", "a.b.c:65535"),
    ("10.0.0.1:22", "10.0.0.1:22")])
def test_valid_hostports_are_normalised(value, expected):
    assert check_hostport("hp", value) == expected


@pytest.mark.parametrize("value", ["example.com", "example.com:", ":1", "example.com:0",
                                   "example.com:65536", "example.com:01", "example.com:+1",
                                   "ex_ample.com:1", "-a.com:1", "a-.com:1", "a..b:1",
                                   "a" * 64 + ".com:1", ("a" * 60 + ".") * 5 + "com:1",
                                   "[::1]:80", "example.com:\u00b2", "example.com:\u0663",
                                   None])
def test_invalid_hostports_are_refused(value):
    with pytest.raises(errors.InvalidField):
        check_hostport("hp", value)


def test_hostport_list_refuses_duplicates_after_normalising():
    with pytest.raises(errors.InvalidField):
        check_hostports("hp", ["A.com:1", "a.com:1"])


@pytest.mark.parametrize("value, expected", [("10.0.0.0/8", "10.0.0.0/8"),
                                             ("1.2.3.4", "1.2.3.4/32"),
                                             ("2001:DB8::/32", "2001:db8::/32"),
                                             ("::/0", "::/0")])
def test_cidrs_are_normalised(value, expected):
    assert check_cidr("cidr", value) == expected


@pytest.mark.parametrize("value", ["10.0.0.1/8", "1.2.3.4/33", "1.2.3", "x", "", "2001:db8::1/32"])
def test_invalid_cidrs_are_refused(value):
    with pytest.raises(errors.InvalidField):
        check_cidr("cidr", value)


@pytest.mark.parametrize("doc", [
    "", "{}", "on_tcp_connect: []",
    '{"on_http_request": [{"actions": [{"type": "deny"}]}]}',
    "on_http_response:\n- name: h\n  expressions: ['true']\n  actions:\n  - type: add-headers\n"
    "    config:\n      headers: {x: y}\n",
])
def test_valid_traffic_policies(doc):
    assert traffic_policy.check_document("v", doc) == doc


@pytest.mark.parametrize("doc", [
    "[]", "just text", "{bad", '{"on_connect": []}', '{"on_tcp_connect": {}}',
    '{"on_tcp_connect": [1]}', '{"on_tcp_connect": [{"actions": []}]}',
    '{"on_tcp_connect": [{"name": 1, "actions": [{"type": "x"}]}]}',
    '{"on_tcp_connect": [{"expressions": "x", "actions": [{"type": "x"}]}]}',
    '{"on_tcp_connect": [{"actions": [{"type": ""}]}]}',
    '{"on_tcp_connect": [{"actions": [{"type": "x", "config": []}]}]}',
    '{"on_tcp_connect": [{"actions": [{"type": "x", "other": 1}]}]}',
    '{"on_tcp_connect": [{"actions": [{"type": "x"}], "other": 1}]}',
    '{"on_tcp_connect": [' + ",".join(['{"actions": [{"type": "x"}]}'] * 65) + "]}",
    "x: " + "y" * 16384, "[" * 16000, "on_tcp_connect: " + "[" * 5000,
])
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
_TOKEN_RULE = ("(a token of letters, digits and !#$%&'*+-.^_`|~, at most 256 bytes)")


@pytest.mark.parametrize("call, args, msg", [
    (http_headers.check_name, ("h", 5), "Field 'h': header names must be strings"),
    (http_headers.check_name, ("h", "a b"),
     f"Field 'h': 'a b' is not a valid HTTP header name {_TOKEN_RULE}"),
    (http_headers.check_name, ("h", "x" * 257),
     f"Field 'h': '{'x' * 64}' is not a valid HTTP header name {_TOKEN_RULE}"),
    (http_headers.check_value, ("h", "x-a", 1), "Field 'h': the value of header 'x-a' must be "
                                                "a string"),
    (http_headers.check_value, ("h", "x-a", "a\x00"), "Field 'h': the value of header 'x-a' "
                                                      "must not contain CR, LF or NUL"),
    (http_headers.check_value, ("h", "x-a", "é" * 513), "Field 'h': the value of header 'x-a' "
                                                        "is longer than 1024 bytes"),
    (http_headers.check_map, ("h", ["a"], 5), "Field 'h': must be an object mapping header "
                                              "names to values"),
    (http_headers.check_map, ("h", {"a": "1", "b": "2", "c": "3"}, 2),
     "Field 'h': has 3 headers; the limit is 2"),
    (http_headers.check_map, ("h", {"X-A": "1", "x-a": "2"}, 5),
     "Field 'h': header 'x-a' appears more than once (names are case-insensitive)"),
    (http_headers.check_map, ("h", {"X-A": 1}, 5),
     "Field 'h': the value of header 'x-a' must be a string"),
    (http_headers.check_names, ("h", {"a": 1}, 5), "Field 'h': must be an array of header "
                                                   "names"),
    (http_headers.check_names, ("h", ["a", "b", "c"], 2),
     "Field 'h': has 3 entries; the limit is 2"),
])
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
