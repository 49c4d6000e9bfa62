"""The http-request action through the edge, the policies set by the official Python SDK. The
called service is an internal endpoint of the same account served by the SDK
(tests/edge/sdk_agent.py: /echo answers the request it saw as JSON, /reflect its body or
``?size=N`` bytes, /status/N that status, /slow?s=N after N seconds). The rules
(chalicelib/core/policy/httpcall.py, docs/SECURITY.md "http-request"): the answer sets
``actions.ngrok.http_request.*``; a response body of at most 256 KiB; the whole call within
``timeout``; at most 3 retries; at most 10 calls per request; only ``.internal`` URLs unless
the operator opens networks with EDGE_HTTP_REQUEST_ALLOW."""

import http.server
import json
import threading
import time
import uuid

import pytest

from stacks.agents import SdkAgent
from tests.edge.support import metric, settled, wait
from tests.edge.test_edge_sdk import _bound, _credential, _host

KIB = 1024
SVC = f"lookup-{uuid.uuid4().hex[:10]}.internal"
CALL = "actions.ngrok.http_request"


def _call(path, **config):
    return {"type": "http-request", "config": {"url": f"https://{SVC}{path}", **config}}


def _show(body, **headers):
    return {"type": "custom-response", "config": {"body": body, "headers": headers}}


POLICIES = {
    "answer": [
        _call(
            "/echo",
            query_params=[{"key": "from", "value": "${req.url.path}"}],
            headers={"x-probe": "yes"},
        ),
        _show(f"${{{CALL}.res.status_code}}|${{{CALL}.res.body}}|${{{CALL}.req.url}}"),
    ],
    "post": [
        _call(
            "/reflect",
            method="POST",
            headers={"content-type": "text/plain"},
            body="hello ${req.url.query_params['n'][0]}",
        ),
        _show(f"${{{CALL}.res.body}}"),
    ],
    "retry": [
        _call("/status/503", retry_condition="last_attempt.res.status_code == 503"),
        _show(f"${{size({CALL}.attempts)}}|${{{CALL}.res.status_code}}|${{{CALL}.error.code}}"),
    ],
    "size": [
        {
            "type": "http-request",
            "config": {"url": f"https://{SVC}/reflect?size=${{req.url.query_params['size'][0]}}"},
        },
        _show(f"${{{CALL}.error.message}}", **{"x-length": f"${{size({CALL}.res.body)}}"}),
    ],
    "timeout": [
        _call("/slow?s=3", timeout="1s"),
        _show(f"${{{CALL}.error.message}}"),
    ],
    "offline": [
        {"type": "http-request", "config": {"url": "https://nothing-here.internal/x"}},
        _show(f"${{{CALL}.error.code}}|${{{CALL}.error.message}}"),
    ],
    "halt": [
        {
            "type": "http-request",
            "config": {"url": "https://nothing-here.internal/x", "on_error": "halt"},
        },
        _show("never"),
    ],
    "external": [
        {"type": "http-request", "config": {"url": "http://127.0.0.1:9/"}},
        _show(f"${{{CALL}.error.message}}"),
    ],
    "count": [_call("/echo") for _ in range(11)] + [_show(f"${{{CALL}.error.message}}")],
}


def _binds(actions):
    return [
        {
            "proto": "http",
            "options": {
                "traffic_policy": [json.dumps({"on_http_request": [{"actions": actions}]})]
            },
        }
    ]


@pytest.fixture(scope="module")
def hosts(edge, api):
    """One agent: the internal endpoint called, and one public endpoint per policy."""
    binds = [{"proto": "http", "domain": SVC}]
    for actions in POLICIES.values():
        binds += _binds(actions)
    agent = SdkAgent(edge, _credential(api.new_account())["token"], binds)
    bound = _bound(agent.start())
    assert bound[0]["url"] == f"https://{SVC}", bound
    yield dict(zip(POLICIES, (_host(b["url"]) for b in bound[1:])))
    agent.stop()


def test_the_answer_sets_the_variables(edge, hosts):
    got = edge.http("GET", hosts["answer"], "/hello")
    assert got.status_code == 200, got.text
    status, body, url = got.text.split("|")
    assert status == "200" and url == f"https://{SVC}/echo?from=%2Fhello"
    seen = json.loads(body)
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert seen["method"] == "GET" and seen["path"] == "/echo?from=%2Fhello"
    assert headers["x-probe"] == "yes" and headers["ngrok-req-type"] == "http-request"
    assert headers["user-agent"] == "ngrok/cloud" and headers["ngrok-req-hops"] == "1"
    assert "127.0.0.1" in headers["x-forwarded-for"]


def test_a_post_sends_its_rendered_body(edge, hosts):
    got = edge.http("GET", hosts["post"], "/?n=world")
    assert got.text == "hello world"


def test_a_retry_condition_retries_at_most_three_times(edge, hosts):
    got = edge.http("GET", hosts["retry"], "/")
    # 4 attempts (1 + 3 retries), the last answer kept; a 503 answer is not a failed call
    assert got.text == "4|503|"


def test_a_response_body_of_256_kib_is_kept_and_one_byte_more_fails_the_call(edge, hosts):
    got = edge.http("GET", hosts["size"], f"/?size={256 * KIB}")
    assert got.headers["x-length"] == str(256 * KIB)
    over = edge.http("GET", hosts["size"], f"/?size={256 * KIB + 1}")
    assert "response size exceeded" in over.text
    assert over.headers["x-length"] == ""  # no response kept


def test_the_timeout_bounds_the_whole_call(edge, hosts):
    started = time.monotonic()
    got = edge.http("GET", hosts["timeout"], "/")
    took = time.monotonic() - started
    assert got.text == "timed out after 1s"
    assert 1.0 <= took < 2.9, took  # the upstream answers after 3 s


def test_an_offline_internal_endpoint_is_an_error_and_halt_answers_502(edge, hosts):
    got = edge.http("GET", hosts["offline"], "/")
    assert got.text == "ERR_NGROK_2300|the internal endpoint nothing-here.internal is offline"
    halted = edge.http("GET", hosts["halt"], "/")
    assert halted.status_code == 502
    assert halted.headers["ngrok-error-code"] == "ERR_NGROK_2300"
    assert "never" not in halted.text


def test_external_urls_are_refused_unless_the_operator_opens_them(edge, hosts):
    got = edge.http("GET", hosts["external"], "/")
    assert "requests to external URLs are disabled on this edge" in got.text


def test_at_most_ten_calls_run_for_one_request(edge, hosts):
    got = edge.http("GET", hosts["count"], "/")
    assert got.text == "more than 10 http-request actions for one request"


def test_in_the_response_phase_the_answer_reaches_the_response(edge, account, agents):
    policy = {
        "on_http_response": [
            {
                "actions": [
                    _call("/status/204"),
                    {
                        "type": "add-headers",
                        "config": {"headers": {"x-lookup": f"${{{CALL}.res.status_code}}"}},
                    },
                ]
            }
        ]
    }
    name = f"resp-{uuid.uuid4().hex[:8]}.internal"
    policy["on_http_response"][0]["actions"][0]["config"]["url"] = f"https://{name}/status/204"
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {"proto": "http", "domain": name},
            {"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}},
        ],
    )
    host = _host(_bound(agent.start())[1]["url"])

    def counts():
        text = edge.metrics()
        return (
            metric(text, "edge_core_http_requests_total"),
            metric(text, "edge_core_http_handed_over_total"),
        )

    def core_serves():  # the route is pushed a moment after the bind
        before = settled(counts)[0]
        assert edge.http("GET", host, "/echo").headers["x-lookup"] == "204"
        return settled(counts)[0] > before

    assert wait(core_serves)
    before = settled(counts)
    got = edge.http("GET", host, "/echo")
    assert got.status_code == 200 and got.headers["x-lookup"] == "204"
    # carried by the core, the call awaited by Python's decision (edge/decided.py)
    after = settled(counts)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


class _Plain(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = f"external {self.path} {self.headers.get('ngrok-req-type')}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_edge_that_opens_a_network_calls_an_address_in_it(edge_stack, another_edge, api):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        opened = another_edge({"EDGE_HTTP_REQUEST_ALLOW": "127.0.0.1/32"})
        actions = [
            {"type": "http-request", "config": {"url": f"http://127.0.0.1:{port}/ext"}},
            _show(f"${{{CALL}.res.body}}|${{{CALL}.res.resolved_ip}}|${{{CALL}.error.message}}"),
        ]
        agent = SdkAgent(opened, _credential(api.new_account())["token"], _binds(actions))
        try:
            host = _host(_bound(agent.start())[0]["url"])
            got = opened.http("GET", host, "/")
            assert got.text == "external /ext http-request|127.0.0.1|", got.text
        finally:
            agent.stop()
    finally:
        server.shutdown()


def test_an_internal_cloud_endpoint_of_the_account_answers_the_call(edge, api):
    """``https://<name>.internal`` reaches the account's internal cloud endpoint too: its
    on_http_request answers the call (custom-response, deny), a policy that lets the request
    through is the non-terminating 502; another account's internal names stay offline, also
    when it has one of the same name (internal names are per account)."""
    mine, theirs = api.new_account(), api.new_account()
    tag = uuid.uuid4().hex[:8]
    svc, open_, secret = f"csvc-{tag}.internal", f"copen-{tag}.internal", f"csec-{tag}.internal"
    fans = f"cfan-{tag}.internal"  # its policy would make a call of its own: not made
    answer = {
        "on_http_request": [
            {
                "expressions": ["req.url.path == '/deny'"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            },
            {
                "actions": [
                    {
                        "type": "custom-response",
                        "config": {
                            "status_code": 201,
                            "headers": {"x-from": "cloud"},
                            "body": "cloud ${req.method} ${req.url.path} "
                            "${getReqHeader('x-probe')[0]} ${endpoint.url}",
                        },
                    }
                ]
            },
        ]
    }
    for account, url, policy in (
        (mine, svc, answer),
        (
            mine,
            open_,
            {
                "on_http_request": [
                    {"actions": [{"type": "log", "config": {"metadata": {"a": "b"}}}]}
                ]
            },
        ),
        (
            mine,
            fans,
            {"on_http_request": [{"actions": [_call("/echo"), _show("fanned out")]}]},
        ),
        (theirs, svc, {"on_http_request": [{"actions": [_show("other account")]}]}),
        (theirs, secret, {"on_http_request": [{"actions": [_show("other account")]}]}),
    ):
        made = account.admin.post(
            "/endpoints", {"url": f"https://{url}", "traffic_policy": json.dumps(policy)}
        )
        assert made.status == 201, made.json
    shown = _show(
        f"${{{CALL}.res.status_code}}|${{{CALL}.res.body}}|"
        f"${{{CALL}.res.header['x-from'][0]}}|${{{CALL}.error.message}}"
    )
    shown_error = _show(f"${{{CALL}.res.status_code}}|${{{CALL}.error.message}}")

    def calling(url, show, **config):
        return [{"type": "http-request", "config": {"url": url, **config}}, show]

    cases = {
        "answer": calling(f"https://{svc}/hi", shown, headers={"x-probe": "p1"}),
        "post": calling(f"https://{svc}/posted", shown, method="POST", body="b"),
        "deny": calling(f"https://{svc}/deny", shown_error),
        "open": calling(f"https://{open_}/x", shown_error),
        "theirs": calling(f"https://{secret}/x", shown_error),
        "fans": calling(f"https://{fans}/x", shown_error),
    }
    binds = [b for actions in cases.values() for b in _binds(actions)]
    agent = SdkAgent(edge, _credential(mine)["token"], binds)
    try:
        names = dict(zip(cases, (_host(b["url"]) for b in _bound(agent.start()))))
        got = edge.http("GET", names["answer"], "/")
        assert got.text == f"201|cloud GET /hi p1 https://{svc}|cloud|", got.text
        assert edge.http("GET", names["post"], "/").text == (
            f"201|cloud POST /posted  https://{svc}|cloud|"
        )
        assert edge.http("GET", names["deny"], "/").text == "403|"
        status, message = edge.http("GET", names["open"], "/").text.split("|")
        assert status == "502", message  # the non-terminating answer is the call's response
        # another account's internal name: not found, as an offline endpoint
        assert edge.http("GET", names["theirs"], "/").text == (
            f"|the internal endpoint {secret} is offline"
        )
        assert edge.http("GET", names["fans"], "/").text == (
            f"|the internal cloud endpoint {fans}'s traffic policy asked for an http-request, "
            "which a call does not make"
        )
    finally:
        agent.stop()
