"""The official agent CLI 2.x (agent 2.3.41, tests/edge/cli_agent.py) as a process against the
edge, configured only by its config file: its auth and session, ``ngrok http`` with its
flags, ``ngrok tcp``, ``ngrok start``, its local inspector and replay, its error text on
refusals, and its reconnect after the edge restarts (last in this module: it restarts the
session's edge)."""
import http.server
import json
import socket
import threading
import time

import pytest
import requests

from tests.edge.cli_agent import CliAgent, cli_binary
from tests.edge.conftest import tcp_round_trip
from tests.edge.test_edge_sdk import _credential, _host

PASSWORD = "s3cret-pass"


@pytest.fixture(scope="module")
def cli():
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform (see "
                    "scripts/fetch_agent_cli.sh)")


@pytest.fixture
def run_cli(edge, tmp_path, cli):
    started = []

    def start(token, args, **kwargs):
        agent = CliAgent(edge, token, args, workdir=str(tmp_path), **kwargs)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


class _Echo(http.server.BaseHTTPRequestHandler):
    """An upstream that answers what it received: method, path, Host, Authorization."""
    protocol_version = "HTTP/1.1"
    seen: list = []

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        info = {"name": self.server.name, "method": self.command, "path": self.path,
                "host": self.headers.get("host"), "body": body.decode("latin-1"),
                "authorization": self.headers.get("authorization")}
        self.server.seen.append(info)
        out = json.dumps(info).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def _upstream(name):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.name, server.seen = name, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def upstream():
    server = _upstream("one")
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def upstream_two():
    server = _upstream("two")
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def tcp_echo():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=_echo_conn, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield sock.getsockname()[1]
    sock.close()


def _echo_conn(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            conn.sendall(data)


def _https(edge, url, path="/", *args):
    """(status, body) of a request over the edge's HTTPS listener (curl, the edge's CA)."""
    done = edge.curl_https(_host(url), path, *args)
    body, _, status = done.stdout.rpartition("\n")
    return int(status or 0), body


def _by_scheme(urls):
    return {u.split("://", 1)[0]: u for u in urls.values()}


def _addr(port):
    return f"127.0.0.1:{port}"


# ---- the session ---------------------------------------------------------------------------
def test_cli_logs_in_and_serves_http_and_https_of_one_generated_name(run_cli, edge, account,
                                                                     upstream):
    """Plain ``ngrok http``: the CLI binds https, then http, asking no name; both get one
    generated name (hosted), each listener routes to its own endpoint; the session shows
    the CLI's version and OS."""
    agent = run_cli(_credential(account)["token"], ["http", _addr(upstream.server_port)])
    urls = _by_scheme(agent.wait_tunnels(2))
    assert _host(urls["http"]) == _host(urls["https"])
    resp = edge.http("GET", _host(urls["http"]), "/plain")
    assert resp.status_code == 200 and resp.json()["path"] == "/plain"
    status, body = _https(edge, urls["https"], "/secure")
    assert status == 200 and json.loads(body)["path"] == "/secure"
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert [(s["agent_version"], s["os"]) for s in sessions] == [("2.3.41", "linux")]
    endpoints = account.admin.get("/endpoints").json["endpoints"]
    assert sorted(e["public_url"] for e in endpoints) == sorted(urls.values())
