"""The hosted service's CEL macros this engine offers, and the CEL standard library."""

import pytest

from chalicelib.core.policy import Response
from tests.support.policy import conn, evaluate, request

REQ = request("/p?a=1&a=2&empty=", headers=[("X-Token", "t1"), ("Cookie", "sid=s1; sid=s2")])


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("inCidrRange('192.168.1.100', '192.168.1.0/24')", True),
        ("inCidrRange('192.168.2.1', '192.168.1.0/24')", False),
        ("inCidrRange('10.0.0.1', 'not-a-cidr')", False),
        ("inCidrRange('2001:db8::1', '2001:db8::/32')", True),
        ("inCidrRange(conn.client_ip, '66.249.66.1/24')", True),
        ("inCidrRanges('192.168.1.100', ['192.168.1.0/24', '10.0.0.0/8'])", True),
        ("inCidrRanges('172.16.0.1', ['bad', '10.0.0.0/8'])", False),
        ("'192.168.1.1'.isPrivateIp()", True),
        ("'8.8.8.8'.isPrivateIp()", False),
        ("'{\"a\": 1}'.isJson()", True),
        ("'nope'.isJson()", False),
        ("'https://a.example'.isURL()", True),
        ("'a=b&c=d'.isQueryString()", True),
        ("'not a query string'.isQueryString()", False),
        ("'MiXeD'.lower()", "mixed"),
        ("'MiXeD'.upper()", "MIXED"),
        ("'MiXeD'.lowerAscii()", "mixed"),
        ("'a b/c'.escapeUrl()", "a%20b%2Fc"),
        ("'a%20b'.unescapeUrl()", "a b"),
        ("url.escape('a b')", "a%20b"),
        ("url.unescape('a%2Fb')", "a/b"),
        ("'hello'.encodeBase64()", "aGVsbG8="),
        ("'aGVsbG8='.decodeBase64()", "hello"),
        ("'{\"k\": [1, 2]}'.decodeJson().k[1]", 2),
        ("json.decode('[1, 2]')[0]", 1),
        ("json.encode({'a': 'b'})", '{"a":"b"}'),
        ("'a=1&b=2'.decodeQueryString()['b'][0]", "2"),
        ("queryString.encode({'a': ['1']})", "a=1"),
        ("basic_auth.encode('user', 'pass')", "dXNlcjpwYXNz"),
        ("'abc'.sha256()", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("hash.md5('abc')", "900150983cd24fb0d6963f7d28e17f72"),
        ("'abc'.sha1()", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("'abc'.crc32()", "352441c2"),
        ("hash.crc64('abc')", "2cd8094a1a277627"),
        ("rand.int(5, 5)", 5),
        ("rand.double() < 1.0", True),
        ("'a,b'.split(',')", ["a", "b"]),
        ("['a', 'b'].join('-')", "a-b"),
        ("'  x '.trim()", "x"),
        ("'hello'.substring(1, 3)", "el"),
        ("'abc'.matches('^a.c$')", True),
        ("[1, 2, 3].exists(x, x > 2)", True),
        ("[1, 2, 3].filter(x, x > 1)", [2, 3]),
        ("size('abc')", 3),
        # request macros
        ("getReqHeader('X-Token')", ["t1"]),
        ("getReqHeader('x-absent')", []),
        ("hasReqHeader('x-token')", True),
        ("hasReqHeader('x-absent')", False),
        ("getQueryParam('a')", ["1", "2"]),
        ("hasQueryParam('empty')", True),
        ("hasQueryParam('zzz')", False),
        ("getReqCookie('sid').value", "s1"),
        ("hasReqCookie('sid')", True),
        ("hasReqCookie('nope')", False),
    ],
)
def test_macros_on_a_request(expression, expected):
    assert evaluate(expression, req=REQ, c=conn("66.249.66.20")) == expected


RES = Response(200, [("X-Up", "u"), ("Set-Cookie", "k=v; Path=/")])


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("getResHeader('X-Up')", ["u"]),
        ("hasResHeader('x-up')", True),
        ("hasResHeader('x-no')", False),
        ("getResCookie('k').value", "v"),
        ("hasResCookie('k')", True),
        ("hasResCookie('z')", False),
        ("getReqHeader('host')", ["app.example.com"]),
    ],
)
def test_macros_on_a_response(expression, expected):
    assert evaluate(expression, res=RES, phase="on_http_response") == expected


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("json.encode(['a', 1])", '["a",1]'),
        ("{'a': [1]}.encodeJson()", '{"a":[1]}'),
        ("[true].encodeJson()", "[true]"),
    ],
)
def test_json_encoding_of_maps_and_lists(expression, expected):
    assert evaluate(expression) == expected
