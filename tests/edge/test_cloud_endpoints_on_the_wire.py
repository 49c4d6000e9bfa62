"""Cloud and internal endpoints through the running stack: cloud endpoints made with the
official ``ngrok-api`` client answer from their traffic policy with no agent, on the HTTP and
HTTPS listeners; internal endpoints bound by the official Python SDK (``domain=
"<name>.internal"``) are reached only through ``forward-internal`` from an endpoint of the
same account."""

import json
import time
import uuid

import ngrok
import pytest
import requests

from edge.edges import CACHE_SECONDS
from stacks.process import listens_on
from tests.edge.conftest import BASE_DOMAIN, tcp_round_trip
from tests.edge.support import metric, settled, wait
from tests.edge.test_edge_sdk import _bound, _credential, _host

# An API change must be in force on the next request after the edge's cache expires.
IN_FORCE_AFTER = CACHE_SECONDS + 0.5


def _answer(body, status=200):
    return json.dumps(
        {
            "on_http_request": [
                {
                    "actions": [
                        {
                            "type": "custom-response",
                            "config": {
                                "status_code": status,
                                "headers": {"content-type": "text/plain"},
                                "body": body,
                            },
                        }
                    ]
                }
            ]
        }
    )


def _forward(url, on_error="halt", then=None):
    actions = [{"type": "forward-internal", "config": {"url": url, "on_error": on_error}}]
    if then is not None:
        actions.append({"type": "custom-response", "config": {"status_code": 299, "body": then}})
    return json.dumps({"on_http_request": [{"actions": actions}]})


def _name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(api, account):
    return ngrok.Client(account.admin.token, base_url=api.base_url)


def _cloud(client, policy, host=None):
    host = host or f"{_name('cloud')}.{BASE_DOMAIN}"
    return client.endpoints.create(url=f"https://{host}", type="cloud", traffic_policy=policy)


def _internal_agent(edge, account, agents):
    name = f"{_name('svc')}.internal"
    _internal_agent_on(edge, account, agents, name)
    return name


def _internal_agent_on(edge, account, agents, name):
    """An official SDK agent of ``account`` serving the internal endpoint ``name``."""
    agent = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": name}])
    [bound] = _bound(agent.start())
    assert _host(bound["url"]) == name, bound
    return agent


def test_cloud_endpoint_answers_with_its_policy_over_http_and_https_with_no_agent(edge, client):
    ep = _cloud(client, _answer("hello from the cloud"))
    resp = edge.http("GET", ep.host, "/anything")
    assert (resp.status_code, resp.text) == (200, "hello from the cloud")
    assert resp.headers["content-type"] == "text/plain"
    https = edge.curl_https(ep.host, "/x")
    assert https.returncode == 0, https.stderr
    assert https.stdout == "hello from the cloud\n200"


def test_a_patched_policy_is_in_force_after_the_edge_cache_expires(edge, client):
    ep = _cloud(client, _answer("before"))
    assert edge.http("GET", ep.host).text == "before"
    client.endpoints.update(ep.id, traffic_policy=_answer("after", status=201))
    time.sleep(IN_FORCE_AFTER)
    resp = edge.http("GET", ep.host)
    assert (resp.status_code, resp.text) == (201, "after")


def test_deleting_a_cloud_endpoint_makes_its_host_offline(edge, client):
    ep = _cloud(client, _answer("here"))
    assert edge.http("GET", ep.host).status_code == 200
    client.endpoints.delete(ep.id)
    time.sleep(IN_FORCE_AFTER)
    gone = edge.http("GET", ep.host)
    assert gone.status_code == 404 and gone.json()["error_code"] == "ERR_NGROK_3200"


def test_a_policy_that_does_not_answer_is_6029(edge, client):
    headers_only = json.dumps(
        {
            "on_http_request": [
                {"actions": [{"type": "add-headers", "config": {"headers": {"x-a": "b"}}}]}
            ]
        }
    )
    for policy in (headers_only, ""):
        ep = _cloud(client, policy)
        resp = edge.http("GET", ep.host)
        assert resp.status_code == 502 and resp.json()["error_code"] == "ERR_NGROK_6029"
        assert ep.id in resp.json()["msg"]


def test_cloud_endpoint_forwards_to_an_sdk_internal_endpoint_of_its_account(
    edge, account, client, agents
):
    name = _internal_agent(edge, account, agents)
    policy = json.dumps(
        {
            "on_http_request": [
                {
                    "actions": [
                        {"type": "add-headers", "config": {"headers": {"x-via": "cloud"}}},
                        {"type": "forward-internal", "config": {"url": f"https://{name}"}},
                    ]
                }
            ]
        }
    )
    ep = _cloud(client, policy)
    resp = edge.http("GET", ep.host, "/echo?q=1")
    assert resp.status_code == 200, resp.text
    seen = resp.json()
    assert seen["path"] == "/echo?q=1"
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["x-via"] == "cloud" and headers["x-forwarded-for"] == "127.0.0.1"
    https = edge.curl_https(ep.host, "/echo")
    assert https.stdout.endswith("\n200") and '"path": "/echo"' in https.stdout
    # a body goes through too
    posted = edge.http("POST", ep.host, "/upload", data=b"x" * 100000)
    assert posted.json()["length"] == 100000
    # the agent's endpoint is listed as internal
    listed = {e.url: e for e in client.endpoints.list()}
    assert listed[f"https://{name}"].bindings == ["internal"]
    assert listed[f"https://{name}"].type == "agent"


def test_an_internal_endpoint_is_not_reachable_from_the_public_listeners(edge, account, agents):
    name = _internal_agent(edge, account, agents)
    for host in (name, f"{name}@{account.id}"):
        resp = edge.http("GET", host, "/echo")
        assert resp.status_code == 404 and resp.json()["error_code"] == "ERR_NGROK_3200"
    https = edge.curl_https(name, "/echo")
    assert https.stdout.endswith("\n404")


def test_another_accounts_cloud_endpoint_cannot_forward_into_it(edge, api, account, agents):
    name = _internal_agent(edge, account, agents)
    other = ngrok.Client(api.new_account().admin.token, base_url=api.base_url)
    halted = _cloud(other, _forward(f"https://{name}"))
    resp = edge.http("GET", halted.host, "/echo")
    assert resp.status_code == 502 and resp.json()["error_code"] == "ERR_NGROK_3200"
    # on_error: continue goes on with the next action, as for any offline internal endpoint
    went_on = _cloud(other, _forward(f"https://{name}", on_error="continue", then="fallback"))
    resp = edge.http("GET", went_on.host, "/echo")
    assert (resp.status_code, resp.text) == (299, "fallback")


def test_cloud_endpoint_forwards_to_an_internal_cloud_endpoint(edge, client):
    inner = client.endpoints.create(
        url=f"https://{_name('inner')}.internal",
        type="cloud",
        traffic_policy=_answer("from the inner endpoint"),
    )
    assert inner.bindings == ["internal"]
    outer = _cloud(client, _forward(inner.url))
    resp = edge.http("GET", outer.host)
    assert (resp.status_code, resp.text) == (200, "from the inner endpoint")
    assert edge.http("GET", _host(inner.url)).status_code == 404


def test_a_forward_loop_ends_with_an_error(edge, client):
    a_url = f"https://{_name('loop')}.internal"
    b = client.endpoints.create(
        url=f"https://{_name('loop')}.internal", type="cloud", traffic_policy=_forward(a_url)
    )
    client.endpoints.create(url=a_url, type="cloud", traffic_policy=_forward(b.url))
    outer = _cloud(client, _forward(a_url))
    resp = edge.http("GET", outer.host)
    assert resp.status_code == 502 and "forward-internal" in resp.json()["msg"]


def test_an_agent_cannot_bind_a_cloud_endpoints_host(edge, account, client, agents):
    ep = _cloud(client, _answer("mine"))
    agent = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": ep.host}])
    events = agent.start()
    assert any(e["event"] == "error" and "ERR_NGROK_334" in " ".join(e["args"]) for e in events), (
        events
    )
    assert edge.http("GET", ep.host).text == "mine"


def test_the_internal_endpoints_own_policy_runs_after_the_forward(edge, account, client, agents):
    name = f"{_name('guarded')}.internal"
    inner = json.dumps(
        {
            "on_http_request": [
                {
                    "expressions": ["req.url.path == '/secret'"],
                    "actions": [{"type": "deny", "config": {"status_code": 403}}],
                },
                {"actions": [{"type": "add-headers", "config": {"headers": {"x-inner": "yes"}}}]},
            ]
        }
    )
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "domain": name, "options": {"traffic_policy": [inner]}}],
    )
    _bound(agent.start())
    outer = _cloud(
        client,
        json.dumps(
            {
                "on_http_request": [
                    {
                        "actions": [
                            {"type": "add-headers", "config": {"headers": {"x-outer": "yes"}}},
                            {"type": "forward-internal", "config": {"url": f"https://{name}"}},
                        ]
                    }
                ]
            }
        ),
    )
    assert edge.http("GET", outer.host, "/secret").status_code == 403
    seen = {
        k.lower(): v for k, v in edge.http("GET", outer.host, "/echo").json()["headers"].items()
    }
    assert seen["x-outer"] == "yes" and seen["x-inner"] == "yes"
    assert "," not in seen["x-forwarded-for"]  # one hop of forwarding headers, not two


def test_the_docs_path_routing_policy_on_a_cloud_endpoint(edge, account, client, agents):
    """The hosted docs' "route requests by path" example, as published (internal names are
    per account, so its fixed names are this test account's own)."""
    from tests.unit.data.policy_docs_examples import PATH_ROUTING

    client.endpoints.create(
        url="https://api-v1.internal", type="cloud", traffic_policy=_answer("legacy v1")
    )
    agent = agents(
        edge, _credential(account)["token"], [{"proto": "http", "domain": "api-v2.internal"}]
    )
    _bound(agent.start())
    ep = _cloud(client, PATH_ROUTING[1])
    v1 = edge.http("GET", ep.host, "/api/v1/users")
    assert (v1.status_code, v1.text) == (200, "legacy v1")
    assert edge.http("GET", ep.host, "/api/v2/users").json()["path"] == "/api/v2/users"
    assert edge.http("GET", ep.host, "/api/users").json()["path"] == "/api/users"
    other = edge.http("GET", ep.host, "/elsewhere")
    assert other.status_code == 502 and other.json()["error_code"] == "ERR_NGROK_6029"


def _no_round_trip(edge, port, got):
    """Why a round trip through ``port`` did not come back (run 22 of docs/TESTING.md: once,
    in a whole run, after 10 s): what the tries read, whether the edge listens on the port,
    and what its log says of it."""
    lines = [line for line in edge.log().splitlines() if str(port) in line][-15:]
    return (
        f"no round trip through port {port} in 10 s; the tries read {got[-3:]!r} "
        f"({len(got)} tries); the edge listens on it: {listens_on(edge.process.pid, port)}; "
        f"its log on the port: {lines}"
    )


def test_tcp_cloud_endpoint_forwards_to_an_sdk_internal_tcp_endpoint(
    edge, account, client, agents
):
    from tests.edge.test_edge_sdk import _wait

    agent = agents(
        edge, _credential(account)["token"], [{"proto": "tcp", "remote_addr": "db.internal:5432"}]
    )
    [bound] = _bound(agent.start())
    assert bound["url"] == "tcp://db.internal:5432", bound
    tcp_forward = json.dumps(
        {
            "on_tcp_connect": [
                {
                    "actions": [
                        {"type": "forward-internal", "config": {"url": "tcp://db.internal:5432"}}
                    ]
                }
            ]
        }
    )
    ra = account.admin.post("/reserved_addrs", {}).json
    try:
        ep = client.endpoints.create(
            url=f"tcp://{ra['addr']}", type="cloud", traffic_policy=tcp_forward
        )
        port = int(ra["addr"].rsplit(":", 1)[1])
        got = []
        assert _wait(
            lambda: got.append(tcp_round_trip(port, b"through a cloud endpoint"))
            or got[-1] == b"through a cloud endpoint",
            timeout=10,
        ), _no_round_trip(edge, port, got)
        client.endpoints.update(
            ep.id, traffic_policy=json.dumps({"on_tcp_connect": [{"actions": [{"type": "deny"}]}]})
        )
        time.sleep(IN_FORCE_AFTER)
        assert tcp_round_trip(port, b"denied?") == b""
        client.endpoints.delete(ep.id)
    finally:
        account.admin.delete(f"/reserved_addrs/{ra['id']}")
    # an HTTP endpoint cannot forward to a TCP one (the hosted ERR_NGROK_3502)
    http_ep = _cloud(client, _forward("https://db.internal"))
    resp = edge.http("GET", http_ep.host)
    assert resp.status_code == 502 and resp.json()["error_code"] == "ERR_NGROK_3502"


def _core_counts(edge):
    """(requests the core served, connections it handed to Python)."""
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def test_a_cloud_endpoints_requests_are_carried_by_the_core_once_it_served_one(
    edge, account, client, agents
):
    """A cloud endpoint whose policy answers or forward-internals on the head alone becomes a
    route of the compiled core once Python served its first request: each request then
    decided by its policy in Python, answered by the core or carried to the internal SDK
    agent's session, on both listeners, nothing handed over; a request its policy lets
    through is still 6029; a policy patched is in force after the cache."""
    name = _internal_agent(edge, account, agents)
    policy = {
        "on_http_request": [
            {
                "expressions": ["req.url.path == '/fixed'"],
                "actions": [{"type": "custom-response", "config": {"body": "${endpoint.id}"}}],
            },
            {
                "expressions": ["req.url.path == '/through'"],
                "actions": [{"type": "add-headers", "config": {"headers": {"x-a": "b"}}}],
            },
            {
                "expressions": ["req.url.path.startsWith('/echo')"],
                "actions": [
                    {"type": "add-headers", "config": {"headers": {"x-via": "${endpoint.id}"}}},
                    {"type": "forward-internal", "config": {"url": f"https://{name}"}},
                ],
            },
        ]
    }
    ep = _cloud(client, json.dumps(policy))

    def carried():
        before = _core_counts(edge)
        assert edge.http("GET", ep.host, "/fixed").text == ep.id
        after = _core_counts(edge)
        return after[0] > before[0] and after[1] == before[1]

    assert wait(carried)
    served, handed = settled(lambda: _core_counts(edge))
    for i in range(5):
        got = edge.http("GET", ep.host, f"/echo/{i}")
        assert got.status_code == 200, got.text
        headers = {k.lower(): v for k, v in got.json()["headers"].items()}
        assert headers["x-via"] == ep.id and got.json()["path"] == f"/echo/{i}"
    through = edge.http("GET", ep.host, "/through")
    assert through.status_code == 502 and through.json()["error_code"] == "ERR_NGROK_6029"
    assert settled(lambda: _core_counts(edge)) == (served + 6, handed)
    https = edge.curl_https(ep.host, "/echo/s")
    assert https.returncode == 0 and '"path": "/echo/s"' in https.stdout, https.stderr

    client.endpoints.update(ep.id, traffic_policy=_answer("patched", status=201))
    time.sleep(IN_FORCE_AFTER)
    patched = edge.http("GET", ep.host, "/echo/1")
    assert (patched.status_code, patched.text) == (201, "patched")


def test_a_cloud_endpoints_forward_is_held_and_follows_its_target_to_a_new_agent(
    edge, account, client, agents
):
    """A cloud endpoint whose policy only forwards to an agent's internal endpoint: past the
    inspector's window its route is quiet, and the core holds the decision (it names the
    target's session): most requests go there without asking Python. The target's agent
    replaced by another on the same name, the held decision goes with the old one (the
    account's internal endpoints changed): the next requests reach the new agent."""
    name = f"{_name('svc')}.internal"
    first = _internal_agent_on(edge, account, agents, name)
    ep = _cloud(client, _forward(f"https://{name}"))

    def held():
        return settled(lambda: metric(edge.metrics(), "edge_core_http_held_total"))

    assert wait(lambda: edge.http("GET", ep.host, "/echo").status_code == 200)
    before = held()
    with requests.Session() as session:  # one connection: the core's once the route is up
        for _ in range(300):  # the inspector's window (120 a minute), then quiet and held
            got = session.get(
                f"http://127.0.0.1:{edge.http_port}/echo", headers={"Host": ep.host}, timeout=10
            )
            assert got.status_code == 200, got.text
    assert held() > before, "no decision was held"

    first.stop()
    assert wait(lambda: edge.http("GET", ep.host, "/echo").status_code == 502)
    _internal_agent_on(edge, account, agents, name)
    assert wait(lambda: edge.http("GET", ep.host, "/echo").status_code == 200)
    handed = settled(lambda: _core_counts(edge)[1])
    with requests.Session() as session:  # none to the old agent's session, handed over
        for _ in range(20):
            got = session.get(
                f"http://127.0.0.1:{edge.http_port}/echo", headers={"Host": ep.host}, timeout=10
            )
            assert got.status_code == 200, got.text
    assert settled(lambda: _core_counts(edge)[1]) == handed
