"""A header change (add-headers, remove-headers) keeps the policy's cached values that no header
alters (celenv.HEADER_FREE: the URL's, the connection's) and recomputes every other one: a
later rule sees the headers as the earlier rules left them."""

from chalicelib.core import policy as tp
from chalicelib.core.policy import celenv

CONN = tp.Conn(
    client_ip="127.0.0.1",
    client_port=1,
    server_ip="127.0.0.1",
    server_port=80,
    endpoint=tp.Endpoint(
        id="ep_1", url="http://h", host="h", port=80, protocol="http", account_id="ac"
    ),
    server_region="us",
)


def _run(rules, headers):
    policy = tp.compile_policy({"on_http_request": rules})
    req = tp.Request.from_target("GET", "http", "h", "/p?q=1", headers)
    state = policy.new_state()
    policy.on_http_request(CONN, req, state)
    return req


def _added(name):
    return {"type": "add-headers", "config": {"headers": {name: "1"}}}


def test_a_later_rule_sees_a_header_an_earlier_rule_added_and_the_same_url():
    req = _run(
        [
            {"expressions": ["req.url.path == '/p'"], "actions": [_added("x-a")]},
            {
                "expressions": ["'x-a' in req.headers && req.url.path == '/p'"],
                "actions": [_added("x-b")],
            },
            {
                "expressions": ["req.host == 'h' && 'x-b' in req.headers"],
                "actions": [_added("x-c")],
            },
        ],
        [("Host", "h")],
    )
    assert [n for n, _ in req.headers] == ["Host", "x-a", "x-b", "x-c"]


def test_a_later_rule_sees_a_header_an_earlier_rule_removed_as_gone():
    req = _run(
        [
            {"expressions": ["'x-gone' in req.headers"], "actions": [_added("x-seen")]},
            {"actions": [{"type": "remove-headers", "config": {"headers": ["x-gone"]}}]},
            {"expressions": ["!('x-gone' in req.headers)"], "actions": [_added("x-after")]},
            {"expressions": ["'x-gone' in req.headers"], "actions": [_added("x-wrong")]},
        ],
        [("Host", "h"), ("x-gone", "1")],
    )
    names = [n for n, _ in req.headers]
    assert "x-after" in names and "x-seen" in names and "x-wrong" not in names


def test_only_values_no_header_alters_stay_cached():
    traffic = celenv.Traffic(CONN)
    traffic.cache.update({"req.url.path": "/p", "conn.client_ip": "1", "req.headers": {}})
    traffic.cache.update({"req.host": "h", "req.user_agent": "x", "req.cookies": {}})
    traffic.invalidate(headers_only=True)
    assert traffic.cache == {"req.url.path": "/p", "conn.client_ip": "1"}
    traffic.invalidate()
    assert traffic.cache == {}
    assert not any(name.startswith(("req.headers", "req.cookies")) for name in celenv.HEADER_FREE)
    assert "req.host" not in celenv.HEADER_FREE and "req.user_agent" not in celenv.HEADER_FREE
