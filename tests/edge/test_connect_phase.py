"""An HTTP endpoint's ``on_tcp_connect`` rules (docs/CONTRACT.md, "Traffic policy"): run once
per client connection and endpoint, at the connection's first request to it; a refusal
(deny, close-connection, restrict-ips) closes the connection with no answer, and the agent
never sees the request. An internal HTTP endpoint's policy with the phase is refused
(ERR_NGROK_2262), and so is a forward-internal in it on an HTTP endpoint. Through the
official Python SDK and the API client as processes, on the wire."""

import json
import socket
import ssl
import time

import ngrok
import pytest

from stacks.agents import SdkAgent
from tests.edge.support import bound, credential, host as host_of, metric, refusal, settled, wait

BASE_DOMAIN = "tunnels.localhost"


def _agent(edge, api, policy):
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}]
    agent = SdkAgent(edge, credential(api.new_account())["token"], binds)
    return agent, host_of(bound(agent.start())[0]["url"])


def _exchange(port, host, requests=1, wrap=None):
    """``requests`` GETs on one connection (keep-alive): the status line of each answer
    (b"" once the connection closed before one came)."""
    lines = []
    with socket.create_connection(("127.0.0.1", port), timeout=15) as raw:
        conn = wrap(raw) if wrap is not None else raw
        got = b""
        for i in range(requests):
            conn.sendall(f"GET /echo/{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            while b"\r\n\r\n" not in got:
                try:
                    chunk = conn.recv(65536)
                except (ConnectionResetError, ssl.SSLError):
                    chunk = b""
                if not chunk:
                    lines.append(b"")
                    return lines
                got += chunk
            head, _, got = got.partition(b"\r\n\r\n")
            lines.append(head.split(b"\r\n", 1)[0])
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            while len(got) < length:
                got += conn.recv(65536)
            got = got[length:]
    return lines


def _allowing_ip_policy(admin):
    """An IP policy of ``admin``'s account whose one rule allows the loopback: (a document
    whose on_tcp_connect rules restrict to it, the rule's id, to turn it to deny)."""
    made = admin.post("/ip_policies", {})
    assert made.status == 201, made
    policy = made.json["id"]
    made = admin.post(
        "/ip_policy_rules", {"ip_policy_id": policy, "cidr": "127.0.0.1/32", "action": "allow"}
    )
    assert made.status == 201, made
    restrict = {"type": "restrict-ips", "config": {"ip_policies": [policy]}}
    return {"on_tcp_connect": [{"actions": [restrict]}]}, made.json["id"]


def _core_counts(edge):
    """(requests the compiled core served, connections it handed to Python)."""
    text = edge.metrics()
    return (
        metric(text, "edge_core_http_requests_total"),
        metric(text, "edge_core_http_handed_over_total"),
    )


def _cidrs(kind):
    return {
        "on_tcp_connect": [
            {"actions": [{"type": "restrict-ips", "config": {kind: ["127.0.0.0/8"]}}]}
        ]
    }


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_refused_client_is_closed_with_no_answer_and_an_allowed_one_served(edge, api, scheme):
    """restrict-ips in on_tcp_connect: the loopback denied gets its connection closed with
    no answer (no status line, on either listener), its decision counted; the loopback
    allowed is served on every request of its connection."""
    denied_agent, denied = _agent(edge, api, _cidrs("deny"))
    allowed_agent, allowed = _agent(edge, api, _cidrs("allow"))
    try:
        if scheme == "https":
            context = ssl.create_default_context(cafile=edge.ca_path)
            port = edge.https_port

            def wrap_for(name):
                return lambda raw: context.wrap_socket(raw, server_hostname=name)
        else:
            port = edge.http_port

            def wrap_for(name):
                return None

        def decided():
            text = edge.metrics()
            return metric(text, "edge_policy_decisions_total", action="restrict_ips")

        before = settled(decided)
        assert _exchange(port, denied, 1, wrap_for(denied)) == [b""]
        # the refusal counted (no record is made), by the events worker's next drain
        assert wait(lambda: decided() > before), "the refusal was not counted"
        assert settled(decided) == before + 1
        assert _exchange(port, allowed, 3, wrap_for(allowed)) == [b"HTTP/1.1 200 OK"] * 3
        if scheme == "https":  # HTTP/2: the stream ends with no answer
            out = edge.curl_https(denied, "/echo", "--http2")
            assert out.returncode != 0 and out.stdout.strip() == "000", out
            out = edge.curl_https(allowed, "/echo", "--http2", "-o", "/dev/null")
            assert out.stdout.strip() == "200", out
    finally:
        denied_agent.stop()
        allowed_agent.stop()


def test_the_phase_reads_the_connection_and_runs_before_the_request_phase(edge, api):
    """A deny whose expression reads ``conn.client_ip`` closes before on_http_request runs
    (its custom-response never answers); the same policy without the match lets the request
    phase answer."""

    def policy(ip):
        return {
            "on_tcp_connect": [
                {"expressions": [f"conn.client_ip == '{ip}'"], "actions": [{"type": "deny"}]}
            ],
            "on_http_request": [
                {"actions": [{"type": "custom-response", "config": {"status_code": 418}}]}
            ],
        }

    refused_agent, refused = _agent(edge, api, policy("127.0.0.1"))
    passed_agent, passed = _agent(edge, api, policy("192.0.2.1"))
    try:
        assert _exchange(edge.http_port, refused) == [b""]
        assert [line[:12] for line in _exchange(edge.http_port, passed, 2)] == [
            b"HTTP/1.1 418"
        ] * 2
    finally:
        refused_agent.stop()
        passed_agent.stop()


def test_an_internal_http_endpoint_with_the_phase_is_refused_at_bind(edge, account, agents):
    """ERR_NGROK_2262 for an internal endpoint (reached by a request's forward-internal,
    never by a connection of its own); ERR_NGROK_2201 for a forward-internal in the phase of
    a public HTTP endpoint; the same endpoints without them bind."""
    token = credential(account)["token"]
    name = f"svc-{time.time_ns()}.internal"
    connect = {"on_tcp_connect": [{"actions": [{"type": "log", "config": {"metadata": {}}}]}]}
    forward = {
        "on_tcp_connect": [
            {"actions": [{"type": "forward-internal", "config": {"url": f"https://{name}"}}]}
        ]
    }
    binds = [
        {"proto": "http", "domain": name, "options": {"traffic_policy": [json.dumps(connect)]}},
    ]
    assert "ERR_NGROK_2262" in refusal(agents(edge, token, binds).start(), "bind")
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(forward)]}}]
    assert "ERR_NGROK_2201" in refusal(agents(edge, token, binds).start(), "bind")
    binds = [
        {"proto": "http", "domain": name},
        {"proto": "http", "options": {"traffic_policy": [json.dumps(connect)]}},
    ]
    assert len(bound(agents(edge, token, binds).start())) == 2


def test_an_internal_http_cloud_endpoint_with_the_phase_is_refused(api, account):
    """Through the official API client: 400 ERR_NGROK_2262 for an internal HTTPS cloud
    endpoint whose policy has on_tcp_connect rules, at create and at update; a public one
    with the same policy is made."""
    client = ngrok.Client(account.admin.token, base_url=api.base_url)
    connect = json.dumps(
        {
            "on_tcp_connect": [{"actions": [{"type": "log", "config": {"metadata": {}}}]}],
            "on_http_request": [
                {"actions": [{"type": "custom-response", "config": {"status_code": 200}}]}
            ],
        }
    )
    answer = json.dumps(
        {
            "on_http_request": [
                {"actions": [{"type": "custom-response", "config": {"status_code": 200}}]}
            ]
        }
    )
    internal = f"https://svc-{time.time_ns()}.internal"
    with pytest.raises(ngrok.Error) as refused:
        client.endpoints.create(url=internal, type="cloud", traffic_policy=connect)
    assert refused.value.error_code == "ERR_NGROK_2262", refused.value
    made = client.endpoints.create(url=internal, type="cloud", traffic_policy=answer)
    with pytest.raises(ngrok.Error) as refused:
        client.endpoints.update(made.id, traffic_policy=connect)
    assert refused.value.error_code == "ERR_NGROK_2262", refused.value
    public = client.endpoints.create(
        url=f"https://pub-{time.time_ns()}.{BASE_DOMAIN}", type="cloud", traffic_policy=connect
    )
    assert public.traffic_policy == connect


def test_the_phase_runs_once_a_connection_its_next_requests_pass_unchecked(edge, account, agents):
    """restrict-ips ``ip_policies`` in on_tcp_connect: a kept-alive connection the rule
    allowed stays served once the rule turns to deny (the phase ran at its first request, not
    at each), while each new connection is refused within the cache's 2 s. All of it by the
    compiled core's route (decided: the row says which request is its connection's first),
    nothing handed to Python once the route is pushed."""
    admin = account.admin
    doc, rule = _allowing_ip_policy(admin)
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}]
    host = host_of(bound(agents(edge, credential(account)["token"], binds).start())[0]["url"])

    def counts():
        return _core_counts(edge)

    def carried():
        before = settled(counts)
        ok = _exchange(edge.http_port, host) == [b"HTTP/1.1 200 OK"]
        after = settled(counts)
        return ok and after[0] > before[0] and after[1] == before[1]

    assert wait(carried), "the core never carried the route"
    served, handed = settled(counts)
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=15) as kept:

        def get():
            kept.sendall(f"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = kept.recv(65536)
                assert chunk, got
                got += chunk
            head, _, body = got.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            while len(body) < length:
                body += kept.recv(65536)
            return head.split(b"\r\n", 1)[0][:12]

        assert get() == b"HTTP/1.1 200"
        assert admin.patch(f"/ip_policy_rules/{rule}", {"action": "deny"}).status == 200
        deadline = time.monotonic() + 2.0
        while _exchange(edge.http_port, host) != [b""]:
            assert time.monotonic() < deadline, "new connections still served 2 s after"
            time.sleep(0.1)
        assert get() == b"HTTP/1.1 200"  # the kept connection: checked at its start only
    now = settled(counts)
    assert now[1] == handed and now[0] >= served + 2, (served, handed, now)


def test_an_https_edges_route_runs_its_own_rules_after_another_routes_request(
    edge, account, agents
):
    """An HTTPS edge's routes share its endpoint, each with a policy of its own: on one
    kept-alive connection, a request of a route whose on_tcp_connect rules let it through
    first does not spare the next request of a route whose rules refuse it (closed, no
    answer, its decision counted: the edge is the Python path's)."""
    label = f"c{time.time_ns()}"
    host = f"connect-edge-{time.time_ns()}.{BASE_DOMAIN}"

    def post(path, body):
        made = account.admin.post(path, body)
        assert made.status == 201, made
        return made.json

    group = post("/backends/tunnel_group", {"labels": {"app": label}})
    made = post("/edges/https", {"hostports": [f"{host}:443"]})
    deny = {
        "on_tcp_connect": [
            {"actions": [{"type": "restrict-ips", "config": {"deny": ["127.0.0.0/8"]}}]}
        ]
    }
    logs = {"on_tcp_connect": [{"actions": [{"type": "log", "config": {"metadata": {}}}]}]}
    for match, policy in (("/admin", deny), ("/", logs)):
        route = {
            "match_type": "path_prefix",
            "match": match,
            "backend": {"backend_id": group["id"]},
        }
        if policy is not None:
            route["traffic_policy"] = {"value": json.dumps(policy)}
        post(f"/edges/https/{made['id']}/routes", route)
    binds = [{"proto": "labeled", "labels": {"app": label}}]
    bound(agents(edge, credential(account)["token"], binds).start())

    def decided():
        text = edge.metrics()
        return metric(text, "edge_policy_decisions_total", action="restrict_ips")

    before = settled(decided)
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=15) as conn:
        got = b""
        for path, answered in (("/public", True), ("/admin", False)):
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            while b"\r\n\r\n" not in got:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += chunk
            head, _, got = got.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") == answered, (path, head)
            if answered:
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n")[0])
                while len(got) < length:
                    got += conn.recv(65536)
                got = got[length:]
        assert head == b"" and conn.recv(1) == b""
    # the Python path's refusal counted (no record), by the events worker's next drain
    assert wait(lambda: decided() > before), "the refusal was not counted"
    assert settled(decided) == before + 1


def test_each_http2_stream_runs_the_rules_as_a_connection_of_its_own(edge, account, agents):
    """On one HTTP/2 connection, a stream after the endpoint's IP policy turned to deny is
    refused (no answer on it), as a new connection is: each stream runs the rules, on the
    core's path as on Python's."""
    from tests.edge.test_http2_attacks import connect, headers, read_frames, request_block

    admin = account.admin
    doc, rule = _allowing_ip_policy(admin)
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}]
    host = host_of(bound(agents(edge, credential(account)["token"], binds).start())[0]["url"])

    def counts():
        return _core_counts(edge)

    def carried():  # (over HTTP/2: the core's h2 front, each stream decided by Python)
        before = settled(counts)
        ok = edge.curl_https(host, "/echo", "--http2", "-o", "/dev/null").stdout.strip()
        after = settled(counts)
        return ok == "200" and after[0] > before[0] and after[1] == before[1]

    assert wait(carried), "the core never carried the route"
    served, handed = settled(counts)

    def answered(frames, sid):
        return any(f != "closed" and f[0] == 0x1 and f[2] == sid for f in frames)

    sock = connect(edge, host)
    try:
        sock.sendall(headers(1, request_block(host)))
        assert answered(read_frames(sock, 3), 1)
        assert admin.patch(f"/ip_policy_rules/{rule}", {"action": "deny"}).status == 200
        deadline = time.monotonic() + 2.0
        while edge.curl_https(host, "/echo", "--http2").stdout.strip() != "000":
            assert time.monotonic() < deadline, "new connections still served 2 s after"
            time.sleep(0.1)
        sock.sendall(headers(3, request_block(host)))
        assert not answered(read_frames(sock, 3), 3)
    finally:
        sock.close()
    now = settled(counts)
    assert now[1] == handed and now[0] > served, (served, handed, now)


def test_http2_streams_python_serves_each_run_the_rules(edge, account, agents):
    """A route whose policy reads the response's body has each HTTP/2 stream of the core's
    handed to Python (its virtual connection bridged there); the core never keeps such a
    virtual connection for the next stream (Python would serve it as one keep-alive
    connection, its rules run once): a stream after the IP policy turned to deny is refused,
    on the same connection."""
    from tests.edge.test_http2_attacks import connect, headers, read_frames, request_block

    admin = account.admin
    doc, rule = _allowing_ip_policy(admin)
    doc = {
        **doc,
        "on_http_response": [
            {
                "actions": [
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "nothing-here", "to": "x"}]},
                    }
                ]
            }
        ],
    }
    binds = [{"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}]
    host = host_of(bound(agents(edge, credential(account)["token"], binds).start())[0]["url"])

    def handed_back():
        return metric(edge.metrics(), "edge_core_http_decisions_handed_back_total")

    def asked():  # the route pushed: the core asks, and hands the HTTP/2 stream to Python
        before = settled(handed_back)
        ok = edge.curl_https(host, "/echo", "--http2", "-o", "/dev/null").stdout.strip()
        return ok == "200" and settled(handed_back) > before

    assert wait(asked), "the core never asked about the route's streams"

    def answered(frames, sid):
        return any(f != "closed" and f[0] == 0x1 and f[2] == sid for f in frames)

    sock = connect(edge, host)
    try:
        sock.sendall(headers(1, request_block(host)))
        assert answered(read_frames(sock, 5), 1)
        assert admin.patch(f"/ip_policy_rules/{rule}", {"action": "deny"}).status == 200
        deadline = time.monotonic() + 2.0
        while edge.curl_https(host, "/echo", "--http2").stdout.strip() != "000":
            assert time.monotonic() < deadline, "new connections still served 2 s after"
            time.sleep(0.1)
        sock.sendall(headers(3, request_block(host)))
        assert not answered(read_frames(sock, 3), 3)
    finally:
        sock.close()
