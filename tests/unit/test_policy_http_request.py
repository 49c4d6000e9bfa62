"""The http-request action's rules at their boundaries, sans-IO: its config schema (the hosted
limits), the call it renders, the per-request count, loop protection, the variables its answer
sets, the retry bound, and which destinations an edge may reach (the SSRF rule of
chalicelib/core/policy/httpcall.py). The calls themselves: tests/functional/
test_http_request_calls.py (a local server) and tests/edge/test_http_request.py (an agent)."""

import ipaddress

import pytest

from chalicelib.core.policy import HTTP_REQUEST, RESPOND, PolicyError, httpcall
from tests.support.policy import compile_doc, conn, request, rule

A0 = "on_http_request[0].actions[0].config"
URL = "https://svc.internal/x"


def call(**config):
    return {"type": "http-request", "config": {"url": URL, **config}}


def doc(*acts, phase="on_http_request"):
    return {phase: [rule(*acts)]}


def refused(d) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_doc(d)
    return info.value


@pytest.mark.parametrize(
    "config, path, words",
    [
        ({"url": None}, f"{A0}.url", "is required"),
        ({"url": "ftp://svc.internal/"}, f"{A0}.url", "http:// or https://"),
        ({"url": "https:///nohost"}, f"{A0}.url", "with a host"),
        ({"method": "get"}, f"{A0}.method", "must be one of GET, PUT"),
        ({"method": "HEAD"}, f"{A0}.method", "must be one of"),
        (
            {"query_params": [{"key": "k", "value": "v"}] * 33},
            f"{A0}.query_params",
            "has 33 entries; the limit is 32",
        ),
        ({"query_params": [{"key": ""}]}, f"{A0}.query_params[0].key", "1 to 128"),
        ({"query_params": [{"key": "k" * 129}]}, f"{A0}.query_params[0].key", "1 to 128"),
        (
            {"query_params": [{"key": "k", "value": "v" * 8193}]},
            f"{A0}.query_params[0].value",
            "longer than 8192",
        ),
        ({"query_params": ["k=v"]}, f"{A0}.query_params[0]", "key and value"),
        ({"query_params": [{"key": "k", "v": "x"}]}, f"{A0}.query_params[0].v", "unknown"),
        ({"headers": {f"h{i}": "v" for i in range(11)}}, f"{A0}.headers", "the limit is 10"),
        ({"headers": {"bad name": "v"}}, f"{A0}.headers.bad name", "not a valid header"),
        ({"max_redirects": -1}, f"{A0}.max_redirects", "from 0 to 100"),
        ({"max_redirects": 101}, f"{A0}.max_redirects", "from 0 to 100"),
        ({"timeout": "0s"}, f"{A0}.timeout", "from 1s to 30s"),
        ({"timeout": "31s"}, f"{A0}.timeout", "from 1s to 30s"),
        ({"timeout": "500ms"}, f"{A0}.timeout", "from 1s to 30s"),
        ({"timeout": 3}, f"{A0}.timeout", "must be a string"),
        ({"retry_condition": "attempts +"}, f"{A0}.retry_condition", "bad CEL"),
        ({"retry_condition": "req.url.path == '/'"}, f"{A0}.retry_condition", "bad CEL"),
        ({"on_error": "stop"}, f"{A0}.on_error", "continue or halt"),
        ({"retries": 2}, f"{A0}.retries", "unknown field"),
    ],
)
def test_configs_are_refused_at_the_element(config, path, words):
    error = refused(doc(call(**config)))
    assert error.path == path and words in error.message, error


@pytest.mark.parametrize(
    "config",
    [
        {"max_redirects": 0},
        {"max_redirects": 100},
        {"timeout": "1s"},
        {"timeout": "30s"},
        {"query_params": [{"key": "k" * 128, "value": "v" * 8192}]},
        {"query_params": [{"key": "k", "value": "v"}] * 32},
        {"headers": {f"h{i}": "v" for i in range(10)}},
    ]
    + [{"method": m} for m in httpcall.METHODS]
    + [{"retry_condition": "attempts < 2 && last_attempt.res.statusCode == 500"}],
)
def test_configs_at_their_bounds_are_accepted(config):
    compile_doc(doc(call(**config)))


def test_it_runs_in_the_http_phases_only():
    error = refused(doc(call(), phase="on_tcp_connect"))
    assert "cannot run in on_tcp_connect" in error.message
    compile_doc(doc(call(), phase="on_http_response"))


def test_its_config_is_rendered_into_the_call_and_the_phase_pauses():
    p = compile_doc(
        doc(
            call(
                url="https://svc.internal/find?a=1",
                method="POST",
                query_params=[{"key": "path", "value": "${req.url.path}"}],
                headers={"x-user": "${req.headers['x-user'][0]}"},
                body='{"ip": "${conn.client_ip}"}',
                timeout="7s",
                max_redirects=2,
                on_error="halt",
            )
        )
    )
    state = p.new_state()
    out = p.on_http_request(conn(), request("/a b", headers=[("x-user", "ann")]), state)
    assert out.kind == HTTP_REQUEST
    c = out.call
    assert c.url == "https://svc.internal/find?a=1&path=%2Fa+b"
    assert c.method == "POST" and c.headers == [("x-user", "ann")]
    assert c.body == b'{"ip": "203.0.113.7"}' and c.client_ip == "203.0.113.7"
    assert (c.timeout, c.max_redirects, c.on_error, c.hops) == (7.0, 2, "halt", 1)


def _answer(p, state, req, values):
    state.http_request_done("on_http_request", values)
    return p.on_http_request(conn(), req, state)


def test_the_answer_sets_the_variables_and_the_phase_resumes_after_the_action():
    show = {
        "type": "custom-response",
        "config": {
            "body": "${actions.ngrok.http_request.res.status_code} "
            "${actions.ngrok.http_request.res.body} "
            "${actions.ngrok.http_request.attempts[0].response_status_code}"
        },
    }
    p = compile_doc(doc(call(), show))
    state, req = p.new_state(), request()
    assert p.on_http_request(conn(), req, state).kind == HTTP_REQUEST
    res = httpcall.response_record(201, [("X-A", "1")], b"made", "10.0.0.5", 12)
    values = httpcall.result_vars({"url": URL}, res, [res], None)
    out = _answer(p, state, req, values)
    assert out.kind == RESPOND and out.body == b"201 made 201"
    assert res["header"] == {"x-a": ["1"]} and res["time_ms"] == "12"


def test_an_eleventh_call_in_one_request_is_an_error_without_a_call():
    show = {
        "type": "custom-response",
        "config": {"body": "${actions.ngrok.http_request.error.message}"},
    }
    p = compile_doc(doc(*[call()] * 11, show))
    state, req = p.new_state(), request()
    out = p.on_http_request(conn(), req, state)
    for _ in range(10):
        assert out.kind == HTTP_REQUEST
        out = _answer(p, state, req, httpcall.result_vars({}, None, [], None))
    assert out.kind == RESPOND
    assert out.body == b"more than 10 http-request actions for one request"
    assert "http-request: more than 10" in out.errors[-1]


def test_a_request_that_came_through_three_calls_makes_no_fourth():
    p = compile_doc(doc(call()))
    two = p.on_http_request(conn(), request(headers=[("ngrok-req-hops", "2")]), p.new_state())
    assert two.kind == HTTP_REQUEST and two.call.hops == 3
    three = p.on_http_request(conn(), request(headers=[("ngrok-req-hops", "3")]), p.new_state())
    assert three.kind != HTTP_REQUEST and "loop protection" in three.errors[-1]
    forged = p.on_http_request(conn(), request(headers=[("ngrok-req-hops", "x")]), p.new_state())
    assert forged.kind != HTTP_REQUEST  # not a number: counted as the limit


def test_a_failure_before_the_call_halts_with_502_when_asked():
    p = compile_doc(doc(call(url="${req.headers['x-to'][0]}", on_error="halt")))
    out = p.on_http_request(conn(), request(headers=[("x-to", "gopher://x")]), p.new_state())
    assert out.kind == RESPOND and out.status_code == 502
    assert ("ngrok-error-code", "ERR_NGROK_2300") in out.headers
    go_on = compile_doc(doc(call(url="${req.headers['x-to'][0]}")))
    out = go_on.on_http_request(conn(), request(headers=[("x-to", "gopher://x")]), p.new_state())
    assert out.kind != RESPOND and out.kind != HTTP_REQUEST


def test_a_rendered_body_over_256_kib_is_an_error():
    p = compile_doc(doc(call(method="POST", body="${req.headers['x-b'][0]}", on_error="halt")))
    at = p.on_http_request(conn(), request(headers=[("x-b", "b" * (256 * 1024))]), p.new_state())
    assert at.kind == HTTP_REQUEST and len(at.call.body) == 256 * 1024
    over = p.on_http_request(
        conn(), request(headers=[("x-b", "b" * (256 * 1024 + 1))]), p.new_state()
    )
    assert over.kind == RESPOND and b"the limit is 262144" in over.body


def test_the_retry_condition_allows_three_retries_at_most():
    p = compile_doc(doc(call(retry_condition="last_attempt.res.status_code >= 500")))
    c = p.on_http_request(conn(), request(), p.new_state()).call
    failed = {"res": {"status_code": 503}}
    assert [c.wants_retry(n, failed) for n in (1, 2, 3, 4)] == [True, True, True, False]
    assert not c.wants_retry(1, {"res": {"status_code": 404}})
    # a condition that fails to evaluate (no response: no status_code) does not retry
    assert not c.wants_retry(1, {"error": "refused"})
    assert "retry_condition" in c.errors[-1]
    never = compile_doc(doc(call()))
    assert not never.on_http_request(conn(), request(), never.new_state()).call.wants_retry(
        1, failed
    )


IP = ipaddress.ip_address


@pytest.mark.parametrize(
    "allow, address, words",
    [
        ("", "93.184.216.34", "disabled on this edge"),
        ("8.8.8.0/24", "93.184.216.34", "not in a network"),
        ("0.0.0.0/0", "93.184.216.34", None),
        ("0.0.0.0/0", "127.0.0.1", "loopback, private or reserved"),
        ("0.0.0.0/0", "10.1.2.3", "loopback, private or reserved"),
        ("0.0.0.0/0", "169.254.169.254", "loopback, private or reserved"),
        ("0.0.0.0/0", "100.64.0.1", "loopback, private or reserved"),
        ("0.0.0.0/0", "0.0.0.0", "loopback, private or reserved"),
        ("0.0.0.0/1", "10.1.2.3", "loopback, private or reserved"),
        ("::/0", "::1", "loopback, private or reserved"),
        ("::/0", "fd00::1", "loopback, private or reserved"),
        ("0.0.0.0/0", "::ffff:127.0.0.1", "loopback, private or reserved"),
        ("::/0", "2606:4700::1", None),
        ("127.0.0.1/32", "127.0.0.1", None),
        ("127.0.0.1", "127.0.0.2", "not in a network"),
        ("10.0.0.0/8", "10.1.2.3", None),
        ("10.1.0.0/16,0.0.0.0/0", "10.1.2.3", None),
        ("10.1.0.0/16,0.0.0.0/0", "10.2.0.1", "loopback, private or reserved"),
        ("127.0.0.0/8", "::ffff:127.0.0.1", None),
    ],
)
def test_which_destinations_an_edge_may_reach(allow, address, words):
    reason = httpcall.refused_destination(IP(address), httpcall.parse_allow(allow))
    if words is None:
        assert reason is None
    else:
        assert reason is not None and words in reason, reason


def test_a_bad_allow_list_names_its_entry():
    with pytest.raises(ValueError, match="'10.0.0/33' is not a CIDR"):
        httpcall.parse_allow("127.0.0.1/32, 10.0.0/33")
