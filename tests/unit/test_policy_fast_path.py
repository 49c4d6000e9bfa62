"""The engine evaluates the commonest expression shapes without the CEL runtime; for every
shape the result must equal CEL's own on the same traffic."""

import pytest

from chalicelib.core.policy import celenv
from tests.support.policy import conn, request

EXPRESSIONS = [
    "req.method == 'GET'",
    'req.method != "POST"',
    "req.url.path.startsWith('/api')",
    "req.url.path.endsWith('.js')",
    "req.url.contains('debug')",
    "'x-key' in req.headers",
    "!('x-key' in req.headers)",
    "! ( 'X-Key' in req.headers )",
    "'a' in req.url.query_params",
    "req.content_length > 10",
    "req.content_length <= 10",
    "req.url.port == 0",
    "conn.client_port >= 1024",
    "conn.client_ip == '10.0.0.1'",
    "req.user_agent.is_bot",
    "req.url.path",
    "'gzip' in req.content_encoding",
    # conjunctions of those shapes
    "req.url.path.startsWith('/api') && !('x-block' in req.headers)",
    "req.method == 'GET' && req.content_length > 10 && 'X-Key' in req.headers",
    "req.method == 'POST'&&req.url.contains('a && b')",
]
FAST_SHAPES = set(EXPRESSIONS)
REQUESTS = [
    request("/api/x.js?a=1&debug", method="GET", headers=[("X-Key", "k")], content_length=11),
    request(
        "/web",
        method="POST",
        headers=[("User-Agent", "Googlebot/2.1"), ("Content-Encoding", "gzip")],
        content_length=10,
    ),
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_fast_path_matches_cel(text):
    program = celenv.Program(text, "on_http_request")
    assert program.fast is not None, "this shape should take the fast path"
    slow = celenv.Program(text, "on_http_request")
    slow.fast = None
    for req in REQUESTS:
        for c in (conn("10.0.0.1", 80), conn("10.0.0.2", 5000)):
            traffic = celenv.Traffic(c, req)
            assert program.evaluate(traffic) == slow.evaluate(celenv.Traffic(c, req)), (
                text,
                req.url,
            )


@pytest.mark.parametrize(
    "text",
    [
        "req.method == 'G\\'ET'",
        "req.method == r'GET'",
        "req.method == 'A' || true",
        "size(req.url.path) > 1",
        "req.url.path.startsWith(req.method)",
        "vars.x == 'a'",
        # a conjunction with one part CEL must run, or another operator at the top level
        "req.method == 'GET' && size(req.url.path) > 1",
        "req.method == 'GET' && req.url.path == '/' || true",
        "req.method == 'GET' && (req.url.path == '/' || true)",
        "req.method == 'GET' ? true : false",
        "req.method == 'G\\'ET' && true",
    ],
)
def test_other_shapes_go_to_cel(text):
    assert celenv.Program(text, "on_http_request").fast is None


def _fails(_traffic):
    raise celenv.EvalError("no such key")


@pytest.mark.parametrize(
    "closures, expected",
    [
        ([lambda t: True, lambda t: False], False),
        ([_fails, lambda t: False], False),  # false wins over an earlier failure (CEL)
        ([lambda t: False, _fails], False),
        ([lambda t: True, lambda t: True], True),
    ],
)
def test_conjunction_follows_cels_commutative_and(closures, expected):
    assert celenv._and(closures, None) is expected


def test_conjunction_with_a_failure_and_no_false_operand_fails():
    with pytest.raises(celenv.EvalError):
        celenv._and([lambda t: True, _fails], None)
