"""The edge with the official Python SDK as a process: sessions, binds, refusals, traffic,
revocation and the online views through the official API client."""

import base64
import hashlib
import json
import os
import socket
import struct
import threading
import time

import pytest

from tests.edge.conftest import BASE_DOMAIN

# the names other edge test files import from here
from tests.edge.support import bound as _bound, credential as _credential, host as _host
from tests.edge.support import metric, refusal as _refusal, wait as _wait


# ---- sessions ------------------------------------------------------------------------------
def test_sdk_connects_with_a_credential_token_and_gets_a_generated_https_url(
    edge, account, agents
):
    token = _credential(account)["token"]
    agent = agents(edge, token, [{"proto": "http"}])
    url = _bound(agent.start())[0]["url"]
    assert url.startswith("https://") and _host(url).endswith("." + BASE_DOMAIN)
    assert url.endswith(f":{edge.https_port}")


@pytest.mark.parametrize(
    "token, code", [("not-a-token", "ERR_NGROK_105"), ("A" * 43, "ERR_NGROK_107")]
)
def test_sdk_with_a_bad_token_is_refused_with_the_hosted_error_code(edge, agents, token, code):
    agent = agents(edge, token, [{"proto": "http"}])
    assert code in _refusal(agent.start(), "connect")


def test_token_of_a_deleted_credential_is_refused(edge, account, agents):
    cred = _credential(account)
    assert account.admin.delete(f"/credentials/{cred['id']}").status == 204
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    assert "ERR_NGROK_107" in _refusal(agent.start(), "connect")


def test_token_of_an_inactive_bot_is_refused(edge, account, agents):
    bot = account.admin.post("/bot_users", {"name": f"bot-{time.time_ns()}"}).json
    cred = _credential(account, owner_id=bot["id"])
    assert account.admin.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 200
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    assert "ERR_NGROK_107" in _refusal(agent.start(), "connect")


# ---- binds ---------------------------------------------------------------------------------
def test_bind_outside_the_acl_is_refused_with_err_ngrok_399(edge, account, agents):
    token = _credential(account, acl=[f"bind:allowed.{BASE_DOMAIN}"])["token"]
    agent = agents(
        edge,
        token,
        [
            {"proto": "http", "domain": f"other.{BASE_DOMAIN}"},
            {"proto": "http", "domain": f"allowed.{BASE_DOMAIN}"},
        ],
    )
    events = agent.start()
    assert "ERR_NGROK_399" in _refusal(events, "bind")
    assert _host(_bound(events)[0]["url"]) == f"allowed.{BASE_DOMAIN}"


def test_bind_of_another_accounts_reserved_domain_is_refused(edge, api, account, agents):
    other = api.new_account()
    domain = f"reserved-{time.time_ns()}.example.com"
    assert other.admin.post("/reserved_domains", {"domain": domain}).status == 201
    agent = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": domain}])
    assert "ERR_NGROK_320" in _refusal(agent.start(), "bind")


def test_bind_of_an_unreserved_custom_domain_is_refused(edge, account, agents):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "domain": f"nobody-{time.time_ns()}.example.org"}],
    )
    assert "ERR_NGROK_7117" in _refusal(agent.start(), "bind")


def test_bind_of_a_hostname_already_served_is_refused(edge, api, account, agents):
    name = f"taken-{time.time_ns()}.{BASE_DOMAIN}"
    first = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": name}])
    _bound(first.start())
    second = agents(
        edge, _credential(api.new_account())["token"], [{"proto": "http", "domain": name}]
    )
    assert "ERR_NGROK_334" in _refusal(second.start(), "bind")


def test_reserved_domain_and_wildcard_reservation_serve(edge, account, agents):
    exact = f"exact-{time.time_ns()}.example.com"
    wild = f"w{time.time_ns()}.example.net"
    assert account.admin.post("/reserved_domains", {"domain": exact}).status == 201
    assert account.admin.post("/reserved_domains", {"domain": f"*.{wild}"}).status == 201
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "domain": exact}, {"proto": "http", "domain": f"deep.api.{wild}"}],
    )
    bound = _bound(agent.start())
    assert [_host(b["url"]) for b in bound] == [exact, f"deep.api.{wild}"]
    for b in bound:
        assert edge.http("GET", _host(b["url"]), "/echo").status_code == 200


# ---- traffic -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(edge_stack):
    """One agent serving a generated name for the traffic tests."""
    from stacks.agents import SdkAgent
    from tests.support.api import HttpApi

    stack, edge = edge_stack.api, edge_stack.edge
    account = HttpApi(stack).new_account()
    agent = SdkAgent(edge, _credential(account)["token"], [{"proto": "http"}])
    url = _bound(agent.start())[0]["url"]
    yield edge, _host(url), account
    agent.stop()


def test_get_through_http_reaches_the_upstream_with_forwarded_headers(served):
    edge, host, _ = served
    resp = edge.http("GET", host, "/echo?x=1", headers={"X-Forwarded-For": "203.0.113.9"})
    assert resp.status_code == 200
    seen = resp.json()
    assert seen["path"] == "/echo?x=1"
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["host"] == host
    assert headers["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-host"] == host


def test_keep_alive_connection_carries_many_requests(served):
    import requests

    edge, host, _ = served
    with requests.Session() as session:
        for i in range(20):
            resp = session.get(
                f"http://127.0.0.1:{edge.http_port}/echo?i={i}", headers={"Host": host}, timeout=10
            )
            assert resp.json()["path"] == f"/echo?i={i}"


def test_post_with_a_large_body_arrives_whole(served):
    edge, host, _ = served
    body = os.urandom(5 * 1024 * 1024 + 7)
    resp = edge.http("POST", host, "/upload", data=body)
    assert resp.status_code == 200
    assert resp.json() == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_chunked_request_body_is_streamed(served):
    edge, host, _ = served
    parts = [os.urandom(100_000) for _ in range(8)]
    resp = edge.http("POST", host, "/upload", data=iter(parts))
    assert resp.json()["length"] == 800_000


def test_streaming_response_arrives_in_pieces(served):
    edge, host, _ = served
    resp = edge.http("GET", host, "/stream?n=20&size=100000", stream=True)
    total = sum(len(chunk) for chunk in resp.iter_content(65536))
    assert total == 2_000_000


def test_https_with_the_edge_ca_serves_the_same_endpoint(served):
    edge, host, _ = served
    done = edge.curl_https(host, "/echo")
    body, status = done.stdout.rsplit("\n", 1)
    assert status == "200", done.stderr
    assert json.loads(body)["headers"]["X-Forwarded-Proto"] == "https"


def test_websocket_upgrade_echoes_through_the_edge(served):
    edge, host, _ = served
    sock = socket.create_connection(("127.0.0.1", edge.http_port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    payload = b"hello edge"
    mask = os.urandom(4)
    sock.sendall(
        bytes([0x81, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )
    frame = head.split(b"\r\n\r\n", 1)[1]
    while len(frame) < 2 or len(frame) < 2 + frame[1]:
        frame += sock.recv(4096)
    assert frame[0] == 0x81 and frame[2 : 2 + frame[1]] == b"echo:hello edge"
    sock.close()


def test_unknown_host_is_a_404_in_the_contract_shape(edge):
    resp = edge.http("GET", f"nothing-here.{BASE_DOMAIN}", "/")
    assert resp.status_code == 404
    body = resp.json()
    assert body["error_code"] == "ERR_NGROK_3200" and body["status_code"] == 404
    assert body["details"]["operation_id"].startswith("op_")


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nHost: {host}\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: 1\r\n\r\n",  # no Host
        b"POST / HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\nTransfer-Encoding: chunked"
        b"\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: {host}\r\nX: " + b"a" * (64 * 1024) + b"\r\n\r\n",  # > 64 KiB
    ],
    ids=["bad-header", "no-host", "gzip-te", "cl-and-te", "head-over-64k"],
)
def test_malformed_http_is_a_400_and_the_edge_keeps_serving(served, head):
    edge, host, _ = served
    sock = socket.create_connection(("127.0.0.1", edge.http_port), timeout=10)
    try:
        sock.sendall(head.replace(b"{host}", host.encode()))
    except OSError:
        pass  # the edge may answer and close before the whole head is sent
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400") and b"ERR_NGROK_3002" in answer, answer[:200]
    sock.close()
    assert edge.http("GET", host, "/echo").status_code == 200


# ---- tcp -----------------------------------------------------------------------------------
def test_tcp_endpoint_carries_raw_bytes(edge, account, agents):
    agent = agents(edge, _credential(account)["token"], [{"proto": "tcp"}])
    url = _bound(agent.start())[0]["url"]
    assert url.startswith("tcp://")
    port = int(url.rsplit(":", 1)[1])
    assert edge.tcp_low <= port <= edge.tcp_low + 4
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"ping over tcp")
        got = b""
        while len(got) < 13:
            got += sock.recv(100)
    assert got == b"ping over tcp"


# ---- revocation and the online views ---------------------------------------------------------
def test_deleting_the_credential_ends_the_session_and_its_endpoints(edge, account, agents):
    cred = _credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    host = _host(_bound(agent.start())[0]["url"])
    assert edge.http("GET", host, "/echo").status_code == 200
    assert account.admin.delete(f"/credentials/{cred['id']}").status == 204
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 404, timeout=10)


def test_deactivating_the_bot_ends_its_sessions(edge, account, agents):
    bot = account.admin.post("/bot_users", {"name": f"bot-{time.time_ns()}"}).json
    cred = _credential(account, owner_id=bot["id"])
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    host = _host(_bound(agent.start())[0]["url"])
    assert account.admin.patch(f"/bot_users/{bot['id']}", {"active": False}).status == 200
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 404, timeout=10)


def test_malformed_frames_end_one_session_not_the_edge(edge, served):
    """Garbage after TLS: the edge answers GOAWAY and closes that connection only."""
    import ssl as ssl_module

    _, host, _ = served
    ctx = ssl_module.create_default_context(cafile=edge.ca_path)
    raw = socket.create_connection(("127.0.0.1", edge.agent_port), timeout=10)
    conn = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(b"\x00\x00\x04\xf0\x00\x00\x00\x01abcd")  # frame type 15: unknown
    got = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        got += chunk
    assert got[3] >> 4 == 3, got  # GOAWAY
    conn.close()
    assert edge.http("GET", host, "/echo").status_code == 200


def test_a_client_that_stops_reading_stops_the_agents_upstream(served):
    """Backpressure end to end: the edge relays no faster than the client reads, so the
    muxado window stops the SDK, which stops reading its upstream. A client that reads the
    head of a 64 MiB response and then nothing leaves the upstream at a few MiB (the socket
    buffers and one stream window on the path), not 64."""
    edge, host, _ = served
    sock = socket.create_connection(("127.0.0.1", edge.http_port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    try:
        sock.sendall(f"GET /flood?mb=64 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        written = []
        for _ in range(3):  # the upstream stops, whatever the time given
            time.sleep(1)
            written.append(edge.http("GET", host, "/flooded").json()["bytes"])
        assert written[-1] < 16 << 20, f"{written} bytes written for a client reading none"
        assert written[-1] == written[-2], f"the upstream is still writing: {written}"
    finally:
        sock.close()


def _public_connections(edge):
    return metric(edge.metrics(), "edge_public_connections")


def test_a_client_that_goes_away_while_the_agent_is_silent_ends_the_upstreams_request(
    edge, account, agents
):
    """A client that resets its connection while the agent sends nothing (a long poll, quiet
    server-sent events) ends the exchange at once: the edge finishes the proxy stream, the SDK
    half-closes its upstream connection, which reads its end, and the client's connection
    slot is given back. Before, both were held until the agent next sent, here never."""
    upstream = socket.create_server(("127.0.0.1", 0))
    seen = {}

    def serve():
        conn, _ = upstream.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n7\r\nhello\n\n\r\n"
            )
            conn.settimeout(60)
            try:
                seen["end"] = conn.recv(4096)  # b"": the SDK's half-close
            except OSError as exc:
                seen["end"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "upstream_addr": f"127.0.0.1:{upstream.getsockname()[1]}"}],
    )
    host = _host(_bound(agent.start())[0]["url"])
    before = _public_connections(edge)
    sock = socket.create_connection(("127.0.0.1", edge.http_port), timeout=10)
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    got = b""
    while b"hello" not in got:
        got += sock.recv(4096)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert _public_connections(edge) == before + 1
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST, the agent silent
    thread.join(timeout=15)
    assert "end" in seen, "the upstream's request was never ended for a client gone"
    assert seen["end"] == b"" or isinstance(seen["end"], OSError), seen
    assert _wait(lambda: _public_connections(edge) == before, timeout=5), edge.metrics()
    upstream.close()


def test_a_client_that_goes_away_mid_response_stops_the_agents_upstream(served):
    """A client that resets its connection after the head of a 64 MiB response ends the
    exchange at the edge's next piece of it: the proxy stream ends, the SDK's copy fails and
    the upstream stops at a few MiB (what was on the path), not 64. Before, the edge wrote
    the rest into the closed connection, which never pushes back, and so drew the whole
    response from the agent for nobody (and held the client's connection slot meanwhile)."""
    edge, host, _ = served
    sock = socket.create_connection(("127.0.0.1", edge.http_port))
    sock.sendall(f"GET /flood?mb=64 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST
    written = [-1]
    for _ in range(30):  # until the upstream stops (or has written it all)
        time.sleep(0.5)
        written.append(edge.http("GET", host, "/flooded").json()["bytes"])
        if written[-1] == written[-2]:
            break
    assert written[-1] == written[-2], f"the upstream is still writing: {written}"
    assert written[-1] < 16 << 20, f"{written} bytes drawn from the agent for a client gone"
