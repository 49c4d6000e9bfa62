"""The official Go SDK (golang.ngrok.com/ngrok/v2 v2.4.0: tests/edge/go, stacks.agents.GoAgent)
as a process against the edge: it names endpoints only by URL (``WithURL``), asks SrvInfo
without Auth (``Diagnose``), reads AgentSessionID and TunnelID from the replies, and retries a
refused Auth by itself (the test agent stops at the first refusal). Skipped where Go cannot
build the agent."""

import json
import socket
import ssl
import time

import pytest

from stacks.paths import BASE_DOMAIN
from tests.edge.conftest import tcp_round_trip
from tests.edge.support import bound, credential, host, refusal, wait
from tests.edge.test_tls_endpoints import TlsUpstream, _through_edge


def _session_of(account, session_id):
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    return next((s for s in sessions if s["id"] == session_id), None)


def _endpoint_of(account, url):
    endpoints = account.admin.get("/endpoints").json["endpoints"]
    return next((e for e in endpoints if e["public_url"] == url), None)


def _reserved_domain(account, prefix="go"):
    name = f"{prefix}-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


# ---- sessions and HTTP ---------------------------------------------------------------------
def test_a_generated_https_name_serves_and_the_api_lists_what_the_sdk_was_told(
    edge, account, go_agents
):
    agent = go_agents(
        edge,
        credential(account)["token"],
        [{"metadata": "go-meta", "description": "go endpoint"}],
    )
    (ep,) = bound(agent.start())
    url = ep["url"]
    assert url.startswith("https://") and host(url).endswith("." + BASE_DOMAIN)
    resp = edge.public("GET", url, "/hello?x=1", headers={"X-Forwarded-For": "203.0.113.9"})
    assert resp.status == 200, resp
    seen = resp.json
    assert (seen["sdk"], seen["method"], seen["path"]) == ("go", "GET", "/hello?x=1")
    assert seen["host"].split(":")[0] == host(url)
    assert seen["headers"]["X-Forwarded-For"].startswith("203.0.113.9, ")
    # what the SDK read from the replies: AgentSessionID (Auth) and TunnelID (Bind)
    assert ep["tunnel_id"] == ep["id"] and ep["id"].startswith("tn_")
    session = _session_of(account, ep["session_id"])
    assert session is not None, account.admin.get("/tunnel_sessions").json
    endpoint = _endpoint_of(account, url)
    assert endpoint["metadata"] == "go-meta" and endpoint["description"] == "go endpoint"
    assert endpoint["tunnel"]["id"] == ep["id"]


def test_a_reserved_domain_and_an_http_url_are_served_by_name(edge, account, go_agents):
    domain = _reserved_domain(account)
    sub = f"gohttp{time.time_ns() % 10**9}"
    agent = go_agents(
        edge,
        credential(account)["token"],
        [{"url": f"https://{domain}"}, {"url": f"http://{sub}.{BASE_DOMAIN}"}],
    )
    first, second = bound(agent.start())
    assert host(first["url"]) == domain and first["url"].startswith("https://")
    assert second["url"] == f"http://{sub}.{BASE_DOMAIN}:{edge.http_port}"
    assert edge.public("GET", first["url"], "/a").json["path"] == "/a"
    assert edge.http("GET", f"{sub}.{BASE_DOMAIN}", "/b").json()["path"] == "/b"


def test_traffic_policy_is_enforced_by_the_edge(edge, account, go_agents):
    policy = {
        "on_http_request": [
            {
                "expressions": ["req.url.path == '/hi'"],
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "go hi"}}
                ],
            },
            {
                "expressions": ["req.url.path.startsWith('/private')"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            },
        ]
    }
    agent = go_agents(edge, credential(account)["token"], [{"traffic_policy": json.dumps(policy)}])
    url = bound(agent.start())[0]["url"]
    assert edge.public("GET", url, "/hi").text == "go hi"
    assert edge.public("GET", url, "/private/x").status == 403
    assert edge.public("GET", url, "/open").json["sdk"] == "go"
    assert _endpoint_of(account, url)["traffic_policy"] == json.dumps(policy)


def test_pooled_go_agents_share_one_url(edge, account, go_agents):
    domain = _reserved_domain(account, "gopool")
    token = credential(account)["token"]
    for label in ("one", "two"):
        agent = go_agents(
            edge, token, [{"url": f"https://{domain}", "pooling": True}], label=label
        )
        assert host(bound(agent.start())[0]["url"]) == domain
    seen = {edge.public("GET", f"https://{domain}", "/").json["agent"] for _ in range(12)}
    assert seen == {"one", "two"}


# ---- TCP and TLS ---------------------------------------------------------------------------
def test_tcp_endpoints_reserved_and_generated(edge, account, go_agents):
    # the reserved address binds first: the edge learns of a new reservation within its cache's
    # refresh, so a free port chosen before then might be the one just reserved
    reservation = account.admin.post("/reserved_addrs", {}).json
    try:
        agent = go_agents(
            edge,
            credential(account)["token"],
            [{"url": f"tcp://{reservation['addr']}"}, {"url": "tcp://"}],
        )
        reserved, generated = bound(agent.start())
        assert reserved["url"] == f"tcp://{reservation['addr']}"
        assert generated["url"].startswith(f"tcp://{BASE_DOMAIN}:")
        for ep in (reserved, generated):
            port = int(ep["url"].rsplit(":", 1)[1])
            assert tcp_round_trip(port, b"go tcp bytes") == b"go tcp bytes"
        agent.stop()
    finally:  # the edge stack's TCP range is small and shared by the session's tests
        account.admin.delete(f"/reserved_addrs/{reservation['id']}")


def test_a_tcp_endpoint_with_the_upstream_proxy_protocol_gets_the_header(edge, account, go_agents):
    agent = go_agents(edge, credential(account)["token"], [{"url": "tcp://", "proxy_proto": "v1"}])
    port = int(bound(agent.start())[0]["url"].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        client = sock.getsockname()
        sock.sendall(b"payload")
        head = f"PROXY TCP4 {client[0]} 127.0.0.1 {client[1]} {port}\r\n".encode()
        got = b""
        while len(got) < len(head) + len(b"payload"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    assert got == head + b"payload"


def test_a_tls_endpoint_passes_the_handshake_through_to_the_upstream(
    edge, account, go_agents, tmp_path
):
    domain = _reserved_domain(account, "gotls")
    upstream = TlsUpstream(str(tmp_path), domain)
    try:
        agent = go_agents(
            edge,
            credential(account)["token"],
            [{"url": f"tls://{domain}", "upstream": f"tcp://127.0.0.1:{upstream.port}"}],
        )
        assert bound(agent.start())[0]["url"].startswith(f"tls://{domain}")
        assert _through_edge(edge, domain, upstream.cert, b"from go") == b"upstream:from go"
        with pytest.raises(ssl.SSLError):  # the edge's certificate is not what the client got
            _through_edge(edge, domain, edge.ca_path)
    finally:
        upstream.close()


def test_a_tls_endpoint_terminated_by_the_agent_itself(edge, account, go_agents):
    """WithAgentTLSTermination: the agent completes the handshake with its own certificate
    (CN go-agent), then forwards the plaintext to its TCP echo."""
    domain = _reserved_domain(account, "goagenttls")
    agent = go_agents(
        edge, credential(account)["token"], [{"url": f"tls://{domain}", "agent_tls": True}]
    )
    bound(agent.start())
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=domain) as tls:
            der = tls.getpeercert(binary_form=True)
            tls.sendall(b"echo me")
            assert tls.recv(4096) == b"echo me"
    assert b"go-agent" in der


# ---- refusals, as the SDK returns them -----------------------------------------------------
@pytest.mark.parametrize(
    "token, code", [("not-a-token", "ERR_NGROK_105"), ("A" * 43, "ERR_NGROK_107")]
)
def test_a_wrong_authtoken_is_refused_with_the_hosted_code(edge, go_agents, token, code):
    events = go_agents(edge, token, [{}]).start()
    error = [e for e in events if e["event"] == "error"][0]
    assert error["stage"] == "connect" and error["code"] == code, events
    assert error["args"][0].endswith(f"\n{code}")
    assert not [e for e in events if e["event"] == "bound"]


@pytest.mark.parametrize(
    "endpoint, code, says",
    [
        ({"url": "https://nobody-{n}.example.org"}, "ERR_NGROK_7117", "is not reserved"),
        ({"url": "https://{n}.tunnels.localhost/path"}, "ERR_NGROK_1602", "scheme://host only"),
        ({"bindings": ["internal"]}, "ERR_NGROK_1602", "needs a name under .internal"),
        ({"url": "tcp://tunnels.localhost:1"}, "ERR_NGROK_7113", "is not reserved"),
        (
            {"traffic_policy": '{"on_http_request": [{"actions": [{"type": "nope"}]}]}'},
            "ERR_NGROK_2201",
            "",
        ),
    ],
)
def test_a_refused_bind_reads_as_the_sdk_returns_it(
    edge, account, go_agents, endpoint, code, says
):
    endpoint = {
        k: v.replace("{n}", str(time.time_ns())) if isinstance(v, str) else v
        for k, v in endpoint.items()
    }
    agent = go_agents(edge, credential(account)["token"], [endpoint, {}])
    events = agent.start()
    error = [e for e in events if e["event"] == "error"][0]
    assert (error["stage"], error["code"], error["index"]) == ("bind", code, 0), events
    assert says in refusal(events, "bind") and error["args"][0].endswith(code)
    assert [e["index"] for e in bound(events)] == [1]  # the session lives on: the next binds


def test_a_bind_outside_the_acl_is_refused_with_err_ngrok_399(edge, account, go_agents):
    token = credential(account, acl=[f"bind:goacl.{BASE_DOMAIN}"])["token"]
    agent = go_agents(
        edge,
        token,
        [{"url": f"https://other.{BASE_DOMAIN}"}, {"url": f"https://goacl.{BASE_DOMAIN}"}],
    )
    events = agent.start()
    assert "ERR_NGROK_399" in refusal(events, "bind")
    assert host(bound(events)[0]["url"]) == f"goacl.{BASE_DOMAIN}"


# ---- SrvInfo -------------------------------------------------------------------------------
def test_srv_info_names_the_region_of_the_session(edge, account, go_agents):
    agent = go_agents(edge, credential(account)["token"], [{}])
    session_id = bound(agent.start())[0]["session_id"]
    agent.command("srvinfo")  # Diagnose: a new connection, SrvInfo without Auth
    info = agent.wait_for("srvinfo")
    assert info["region"] == _session_of(account, session_id)["region"]
    assert info["addr"] == edge.server_addr
    assert [s["id"] for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]] == [
        session_id
    ]  # the probe opened no session


# ---- PatchTunnelState ----------------------------------------------------------------------
def test_update_changes_the_endpoint_in_place(edge, account, go_agents):
    """EndpointForwarder.Update (PatchTunnelState): metadata, description and traffic policy
    changed on the bound endpoint, in force for the next request; pooling may not change."""
    agent = go_agents(edge, credential(account)["token"], [{"metadata": "m0"}])
    url = bound(agent.start())[0]["url"]
    assert edge.public("GET", url, "/p").json["sdk"] == "go"
    policy = json.dumps(
        {
            "on_http_request": [
                {
                    "expressions": ["req.url.path == '/p'"],
                    "actions": [
                        {"type": "custom-response", "config": {"status_code": 200, "body": "new"}}
                    ],
                }
            ]
        }
    )
    change = {"metadata": "m1", "description": "d1", "traffic_policy": policy}
    agent.command(f"update 0 {json.dumps(change)}")
    assert agent.wait_for("updated")["index"] == 0
    assert edge.public("GET", url, "/p").text == "new"
    assert edge.public("GET", url, "/other").json["sdk"] == "go"
    endpoint = _endpoint_of(account, url)
    assert (endpoint["metadata"], endpoint["description"]) == ("m1", "d1")
    assert endpoint["traffic_policy"] == policy
    agent.command('update 0 {"pooling": true}')
    error = agent.wait_for("error")
    assert (error["stage"], error["code"]) == ("update", "ERR_NGROK_1602"), error
    assert "PoolingEnabled cannot change" in error["args"][0]
    agent.command('update 0 {"traffic_policy": ""}')
    agent.wait_for("updated")
    assert edge.public("GET", url, "/p").json["sdk"] == "go"


# ---- the edge restarts (its own edge: the session's is shared) -----------------------------
@pytest.fixture
def own_edge(another_edge):
    return another_edge()


def test_the_sdk_reconnects_after_the_edge_restarts_and_serves_the_same_urls(
    own_edge, edge_stack, account, go_agents
):
    edge = own_edge
    agent = go_agents(
        edge, credential(account)["token"], [{}, {"url": "tcp://"}], log_level="info"
    )
    https, tcp = (ep["url"] for ep in bound(agent.start()))
    assert edge.public("GET", https, "/before").status == 200
    edge.stop()
    agent.wait_for("disconnected")
    edge.start({**edge_stack.api.store_env(), "BASE_DOMAIN": BASE_DOMAIN})
    agent.wait_for("connected", timeout=60)  # its back-off: 0.5 s doubling

    def serves():
        try:
            return edge.public("GET", https, "/after").status == 200
        except OSError:
            return False

    assert wait(serves, timeout=30), "".join(agent.stderr_tail)[-3000:]
    port = int(tcp.rsplit(":", 1)[1])
    assert tcp_round_trip(port, b"again") == b"again"
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert len(sessions) == 1
