"""Thousands of public connections through one official SDK session, of every kind: each one
answered, the SDK's session never dropped, and the edge's muxado stream table back to where it
was after each kind.

Why it matters: the official SDKs refuse a new stream past 512 open ones (ngrok-rust's muxado
drops the whole session then), and they count a stream open until their own forwarding of it
ends. A stream the edge leaves without a FIN is never closed in the SDK's eyes, so an endpoint
used to die after ~512 connections (edge/session.py says how streams end now). Each test sends
CONNECTIONS connections, half one after another and half in parallel batches, well past 512
through the one session the module's agent holds for all of them.

Why 1,500 (it was 5,000: about 500 s of the suite, in its run of 2026-11): a kind of
connection whose streams the SDK never sees end kills the session at its 513th, so a leak in
more than a third of the connections fails here; a rarer one is still caught, exactly, by the edge's
stream table, read after each kind (a stream the edge never ends stays in it). What 5,000
added was margin for leaks of one in four to one in ten on the SDK's side alone;
``EDGE_STREAM_CONNECTIONS`` sets the count back for a soak.

The edge's stream table is read from its operator endpoint (/sessions/<id>, edge/metrics.py);
the SDK's from its behaviour: its disconnect callback never fires and the endpoint keeps
serving.
"""

import base64
import dataclasses
import json
import os
import queue
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from stacks.agents import SdkAgent
from stacks.wire import GET_CLOSE
from stacks.wire import abort as _abort
from stacks.wire import http_once as _http
from stacks.wire import recv_all as _recv_all
from stacks.wire import status as _status
from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_edge_sdk import _bound, _credential, _host, _wait

CONNECTIONS = int(os.environ.get("EDGE_STREAM_CONNECTIONS", "1500"))
BATCH = 50


# ---- clients --------------------------------------------------------------------------------
def _disconnections(sdk):
    """The SDK's 'disconnected' events so far (its session error: why it reconnected)."""
    while True:
        try:
            sdk.seen.append(sdk.events.get_nowait())
        except queue.Empty:
            return [e for e in sdk.seen if e.get("event") == "disconnected"]


def _many(one, count=None):
    """``one(i)`` for ``count`` connections: half one after another, half in parallel
    batches of BATCH; every result."""
    count = CONNECTIONS if count is None else count
    half = count // 2
    results = [one(i) for i in range(half)]
    with ThreadPoolExecutor(BATCH) as pool:
        results += list(pool.map(one, range(half, count)))
    return results


# ---- the module's agent: one session, every kind of endpoint --------------------------------
class Agent:
    def __init__(self, edge, account, sdk):
        self.edge, self.account, self.sdk = edge, account, sdk
        self.urls = {}

    @property
    def session_id(self):
        sessions = self.account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
        assert len(sessions) == 1, sessions
        return sessions[0]["id"]

    def streams(self):
        return self.edge.session_streams(self.session_id)

    def host(self, name):
        return _host(self.urls[name])


@pytest.fixture(scope="module")
def agent(edge, api):
    account = api.new_account()
    token = _credential(account)["token"]
    internal = f"streams-{time.time_ns()}.internal"
    forwarding = {
        "on_http_request": [
            {"actions": [{"type": "forward-internal", "config": {"url": f"https://{internal}"}}]}
        ]
    }
    answering = {
        "on_http_request": [
            {"expressions": ["req.url.path == '/deny'"], "actions": [{"type": "deny"}]},
            {
                "expressions": ["req.url.path == '/answer'"],
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "policy"}}
                ],
            },
        ]
    }
    label = f"streams{time.time_ns()}"
    binds = [
        {"proto": "http"},
        {"proto": "tcp"},
        {"proto": "http", "domain": internal},
        {"proto": "http", "options": {"traffic_policy": [json.dumps(forwarding)]}},
        {"proto": "http", "options": {"traffic_policy": [json.dumps(answering)]}},
        {"proto": "http", "upstream": "dead"},
        {"proto": "labeled", "labels": {"app": label}},
    ]
    sdk = SdkAgent(edge, token, binds)
    events = sdk.start()
    bound = _bound(events)
    assert len(bound) == len(binds), events
    found = Agent(edge, account, sdk)
    for name, event in zip(("http", "tcp", "internal", "forwarding", "answering", "dead"), bound):
        found.urls[name] = event["url"]
    # the labeled tunnel, reached through an HTTPS edge whose backend is its tunnel group
    group = account.admin.post("/backends/tunnel_group", {"labels": {"app": label}}).json
    host = f"labeled-{time.time_ns()}.{BASE_DOMAIN}"
    https_edge = account.admin.post("/edges/https", {"hostports": [f"{host}:443"]}).json
    account.admin.post(
        f"/edges/https/{https_edge['id']}/routes",
        {"match_type": "path_prefix", "match": "/", "backend": {"backend_id": group["id"]}},
    )
    found.urls["labeled"] = f"https://{host}"
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 200, timeout=15)
    found.baseline = _wait(
        lambda: (lambda t: t if t and t["edge_opened"] == 0 else None)(found.streams())
    )
    assert found.baseline, found.streams()
    found.checked = len(sdk.seen)
    yield found
    sdk.stop()


def _settled(agent, timeout=20.0):
    """The edge's stream table back to the baseline (the agent's heartbeat stream), the SDK
    never disconnected, and the plain endpoint still serving."""
    table = _wait(
        lambda: (lambda t: t if t == agent.baseline else None)(agent.streams()), timeout=timeout
    )
    assert table == agent.baseline, (agent.streams(), agent.baseline)
    _drain(agent.sdk)
    dropped = [e for e in agent.sdk.seen[agent.checked :] if e["event"] == "disconnected"]
    agent.checked = len(agent.sdk.seen)
    assert not dropped, dropped
    assert (
        _status(
            _http(
                agent.edge.http_port,
                agent.host("http"),
                b"GET /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
            )
        )
        == 200
    )


def _drain(sdk):
    out = []
    while not sdk.events.empty():
        out.append(sdk.events.get_nowait())
    sdk.seen.extend(out)
    return out


# ---- the paths ------------------------------------------------------------------------------
def test_http_connections_with_connection_close(edge, agent):
    got = _many(lambda i: _status(_http(edge.http_port, agent.host("http"), GET_CLOSE)))
    assert got == [200] * CONNECTIONS
    _settled(agent)


def test_http_keep_alive_connections_of_three_requests(edge, agent):
    three = b"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n" * 2 + GET_CLOSE

    def one(i):
        return _http(edge.http_port, agent.host("http"), three).count(b"HTTP/1.1 200 OK")

    assert _many(one) == [3] * CONNECTIONS
    _settled(agent)


def test_https_connections(edge, agent):
    tls = ssl.create_default_context(cafile=edge.ca_path)
    got = _many(lambda i: _status(_http(edge.https_port, agent.host("http"), GET_CLOSE, tls)))
    assert got == [200] * CONNECTIONS
    _settled(agent)


def test_head_204_and_304_responses(edge, agent):
    kinds = [(b"HEAD /echo", 200), (b"GET /status/204", 204), (b"GET /status/304", 304)]

    def one(i):
        start, want = kinds[i % 3]
        # keep-alive: a bodiless response must leave the stream usable for the next request
        data = _http(
            edge.http_port,
            agent.host("http"),
            start + b" HTTP/1.1\r\nHost: {host}\r\n\r\n" + GET_CLOSE,
        )
        return (_status(data), data.count(b"HTTP/1.1 200 OK") + (want != 200)) == (want, 2)

    assert all(_many(one))
    _settled(agent)


def test_clients_that_abort_mid_request_body(edge, agent):
    def one(i):
        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"POST /upload HTTP/1.1\r\nHost: "
                + agent.host("http").encode()
                + b"\r\nContent-Length: 100000\r\n\r\n"
                + b"x" * 5000
            )
            time.sleep(0.001)
            _abort(sock)
        return True

    assert all(_many(one))
    _settled(agent)


def test_clients_that_abort_mid_response(edge, agent):
    def one(i):
        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"GET /stream?n=20&size=4096 HTTP/1.1\r\nHost: "
                + agent.host("http").encode()
                + b"\r\n\r\n"
            )
            first = sock.recv(4096)
            _abort(sock)
        return _status(first)

    assert _many(one) == [200] * CONNECTIONS
    _settled(agent)


def test_an_upstream_that_closes_mid_response(edge, agent):
    def one(i):
        data = _http(
            edge.http_port, agent.host("http"), b"GET /cut HTTP/1.1\r\nHost: {host}\r\n\r\n"
        )
        # the head and part of the body arrived, then the connection ended short of its length
        return _status(data) == 200 and len(data.split(b"\r\n\r\n", 1)[1]) < 1 << 20

    assert all(_many(one))
    _settled(agent)


def test_the_agents_own_502_when_its_upstream_is_down(edge, agent):
    got = _many(lambda i: _status(_http(edge.http_port, agent.host("dead"), GET_CLOSE)))
    assert got == [502] * CONNECTIONS
    _settled(agent)


def test_websocket_upgrades(edge, agent):
    key = base64.b64encode(os.urandom(16))

    def one(i):
        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=20) as sock:
            sock.sendall(
                b"GET /ws HTTP/1.1\r\nHost: "
                + agent.host("http").encode()
                + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n"
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            mask = os.urandom(4)
            payload = bytes(b ^ mask[j % 4] for j, b in enumerate(b"hi"))
            sock.sendall(b"\x81\x82" + mask + payload)  # masked text frame "hi"
            reply = head.split(b"\r\n\r\n", 1)[1]
            while len(reply) < 9:
                reply += sock.recv(4096)
            sock.sendall(b"\x88\x80" + mask)  # close frame
            return _status(head) == 101 and reply[2:9] == b"echo:hi"

    assert all(_many(one))
    _settled(agent)


def test_tcp_endpoint_connections(edge, agent):
    port = int(agent.urls["tcp"].rsplit(":", 1)[1])

    def one(i):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(b"ping %d" % i)
            sock.shutdown(socket.SHUT_WR)
            return _recv_all(sock) == b"ping %d" % i

    assert all(_many(one))
    _settled(agent)


def test_forward_internal_hops(edge, agent):
    got = _many(lambda i: _status(_http(edge.http_port, agent.host("forwarding"), GET_CLOSE)))
    assert got == [200] * CONNECTIONS
    _settled(agent)


def test_policy_denied_and_policy_answered_requests(edge, agent):
    def one(i):
        path = b"/deny" if i % 2 else b"/answer"
        return _status(
            _http(
                edge.http_port,
                agent.host("answering"),
                b"GET " + path + b" HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
            )
        )

    assert _many(one) == [403 if i % 2 else 200 for i in range(CONNECTIONS)]
    _settled(agent)


def test_labeled_tunnels_of_an_https_edge(edge, agent):
    host = agent.host("labeled")
    got = _many(lambda i: _status(_http(edge.http_port, host, GET_CLOSE)))
    assert got == [200] * CONNECTIONS
    _settled(agent)


# ---- the session drops anyway: the endpoint comes back --------------------------------------
class Relay:
    """A TCP relay between the SDK and the edge's agent port; ``cut()`` closes every
    connection through it (a network failure as the agent sees it)."""

    def __init__(self, target_port):
        self.target = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            for sock in self.sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.sockets = []

    def close(self):
        self.server.close()
        self.cut()


@pytest.mark.parametrize("proto", ["http", "tcp"])
def test_an_endpoint_comes_back_at_its_url_when_the_agents_session_drops(
    edge, account, agents, proto
):
    """The SDK reconnects (same session id) and re-binds the same tunnel id; a generated name
    or port is served again at the URL the program still shows, within seconds."""
    relay = Relay(edge.agent_port)
    try:
        token = _credential(account)["token"]
        sdk = agents(dataclasses.replace(edge, agent_port=relay.port), token, [{"proto": proto}])
        url = _bound(sdk.start())[0]["url"]

        def serves():
            if proto == "http":
                return _status(_http(edge.http_port, _host(url), GET_CLOSE)) == 200
            with socket.create_connection(
                ("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5
            ) as sock:
                sock.sendall(b"x")
                sock.shutdown(socket.SHUT_WR)
                return _recv_all(sock) == b"x"

        assert serves()
        relay.cut()
        sdk.wait_for("disconnected", timeout=15)
        cut_at = time.monotonic()
        came_back = _wait(lambda: _safe(serves), timeout=20, step=0.1)
        took = time.monotonic() - cut_at
        assert came_back, f"{url} did not serve again: {edge.log()[-2000:]}"
        assert took < 10, took
        endpoints = account.admin.get("/endpoints").json["endpoints"]
        assert [e["url"] for e in endpoints] == [url]
    finally:
        relay.close()


def _safe(check):
    try:
        return check()
    except OSError:
        return False


def test_a_burst_of_1000_concurrent_requests_is_answered_and_the_session_stays(edge, agent):
    """More concurrent requests than the edge keeps streams open towards one agent
    (MAX_LOCAL_STREAMS, under the SDK's 512): the rest wait for a slot (OPEN_WAIT) instead of
    making the SDK drop its session; each is answered, served or with the hosted code, none
    hangs."""
    slow = b"GET /stream?n=10&size=100 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    barrier = threading.Barrier(1000, timeout=60)

    def one(i):
        barrier.wait()  # 1,000 clients from 4 addresses (one address holds at most 512)
        with socket.socket() as raw:
            raw.bind((f"127.0.5.{i % 4 + 1}", 0))
            raw.settimeout(20)
            raw.connect(("127.0.0.1", edge.http_port))
            raw.sendall(slow.replace(b"{host}", agent.host("http").encode()))
            try:
                data = _recv_all(raw)
            except TimeoutError:  # reported with the logs below, not as a bare timeout
                return ("no answer within 20 s", i)
        status = _status(data)
        return (
            status
            if status == 200
            else (status, data.split(b'"error_code": "', 1)[-1].split(b'"', 1)[0])
        )

    with ThreadPoolExecutor(1000) as pool:
        got = list(pool.map(one, range(1000)))
    # 429: no slot within OPEN_WAIT; 502 ERR_NGROK_8012: the SDK could not reach its upstream
    # (an aiohttp server taking 480 new connections at once on a loaded machine, rarely)
    answers = (200, (429, b"ERR_NGROK_702"), (502, b"ERR_NGROK_8012"))
    assert all(g in answers for g in got), (
        [g for g in got if g not in answers][:3],
        sum(1 for g in got if g not in answers),
        _disconnections(agent.sdk),
        "".join(agent.sdk.stderr_tail)[-1500:],
        edge.log()[-3000:],
    )
    assert got.count(200) >= 900, [g for g in got if g != 200][:5]
    _settled(agent)
