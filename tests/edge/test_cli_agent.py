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

from stacks.agents import cli_binary
from tests.edge.conftest import tcp_round_trip
from tests.edge.test_edge_sdk import _credential, _host

PASSWORD = "s3cret-pass"


@pytest.fixture(scope="module")
def cli():
    if not cli_binary():
        pytest.skip(
            "the agent CLI 2.x is not available on this platform (see scripts/fetch_agent_cli.sh)"
        )


@pytest.fixture
def run_cli(edge, tmp_path, cli, cli_agents):
    def start(token, args, **kwargs):
        return cli_agents(edge, token, args, workdir=str(tmp_path), **kwargs)

    return start


class _Echo(http.server.BaseHTTPRequestHandler):
    """An upstream that answers what it received: method, path, Host, Authorization."""

    protocol_version = "HTTP/1.1"
    seen: list = []

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        info = {
            "name": self.server.name,
            "method": self.command,
            "path": self.path,
            "host": self.headers.get("host"),
            "body": body.decode("latin-1"),
            "authorization": self.headers.get("authorization"),
        }
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
def test_cli_logs_in_and_serves_http_and_https_of_one_generated_name(
    run_cli, edge, account, upstream
):
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


@pytest.mark.parametrize(
    "token,code",
    [
        ("not-a-token", "ERR_NGROK_105"),
        ("2abcdefghijklmnopqrstuvwxyz_0123456789ABCDEFGH", "ERR_NGROK_107"),
    ],
)
def test_a_bad_authtoken_is_refused_with_the_cli_showing_why(run_cli, token, code):
    agent = run_cli(token, ["http", "8080"])
    assert code in agent.refusal()
    assert agent.process.wait(timeout=20) != 0


def test_session_metadata_from_the_config_file(run_cli, account, upstream):
    agent = run_cli(
        _credential(account)["token"],
        ["http", _addr(upstream.server_port)],
        extra_config={"metadata": "cli-box-7"},
    )
    agent.wait_tunnels(2)
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert [s["metadata"] for s in sessions] == ["cli-box-7"]


def test_stop_through_the_api_ends_the_cli(run_cli, edge, account, upstream):
    agent = run_cli(_credential(account)["token"], ["http", _addr(upstream.server_port)])
    agent.wait_tunnels(2)
    session = account.admin.get("/tunnel_sessions").json["tunnel_sessions"][0]
    assert account.admin.post(f"/tunnel_sessions/{session['id']}/stop").status == 204
    agent.process.wait(timeout=30)
    deadline = time.time() + 20
    while time.time() < deadline and account.admin.get("/tunnel_sessions").json["tunnel_sessions"]:
        time.sleep(0.5)
    left = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    # run 26 of docs/TESTING.md: once, the stopped session was still listed 20 s after the
    # 204 (which the edge sends only once the session ended): what the edge said of it
    said = [line for line in edge.log().splitlines() if session["id"] in line][-12:]
    assert left == [], f"listed: {[s['id'] for s in left]} (stopped {session['id']}); {said}"
    assert account.admin.get("/endpoints").json["endpoints"] == []


def test_restart_through_the_api_brings_the_cli_back(run_cli, edge, account, upstream):
    sub = f"clirs{time.time_ns() % 10**9}"
    agent = run_cli(
        _credential(account)["token"],
        ["http", "-subdomain", sub, "-bind-tls", "false", _addr(upstream.server_port)],
    )
    agent.wait_tunnels(1)
    first = account.admin.get("/tunnel_sessions").json["tunnel_sessions"][0]["id"]
    assert account.admin.post(f"/tunnel_sessions/{first}/restart").status == 204
    agent.wait_log(lambda line: "restart" in str(line.get("msg", "")).lower(), timeout=30)
    deadline = time.time() + 30
    status = None
    while time.time() < deadline and status != 200:
        status = edge.http("GET", f"{sub}.tunnels.localhost", "/again").status_code
        time.sleep(0.3)
    assert status == 200, agent.output()


# ---- ngrok http's flags --------------------------------------------------------------------
@pytest.mark.parametrize(
    "bind_tls,schemes", [("both", {"http", "https"}), ("true", {"https"}), ("false", {"http"})]
)
def test_subdomain_with_each_bind_tls(run_cli, edge, account, upstream, bind_tls, schemes):
    """``-subdomain`` under the base domain; ``-bind-tls``: both endpoints, the https one
    alone, or the http one alone; the scheme not bound is not served on that name."""
    sub = f"cli{bind_tls}{time.time_ns() % 10**9}"
    agent = run_cli(
        _credential(account)["token"],
        ["http", "-subdomain", sub, "-bind-tls", bind_tls, _addr(upstream.server_port)],
    )
    urls = _by_scheme(agent.wait_tunnels(len(schemes)))
    assert set(urls) == schemes
    host = f"{sub}.tunnels.localhost"
    assert {_host(u) for u in urls.values()} == {host}
    plain = edge.http("GET", host, "/x")
    status, _ = _https(edge, f"https://{host}", "/x")
    assert (plain.status_code == 200) == ("http" in schemes), plain.text
    assert (status == 200) == ("https" in schemes)
    if "http" not in schemes:
        assert "ERR_NGROK_3200" in plain.text
    if schemes == {"http", "https"}:  # one name, one owner: a second agent is refused
        other = run_cli(
            _credential(account)["token"], ["http", "-subdomain", sub, _addr(upstream.server_port)]
        )
        assert "ERR_NGROK_334" in other.refusal()
        assert other.process.wait(timeout=15) != 0


def test_hostname_reserved_exact_and_under_a_wildcard(run_cli, edge, account, upstream):
    exact = f"cli-exact-{time.time_ns()}.example.com"
    wild = f"cliw{time.time_ns()}.example.net"
    assert account.admin.post("/reserved_domains", {"domain": exact}).status == 201
    assert account.admin.post("/reserved_domains", {"domain": f"*.{wild}"}).status == 201
    token = _credential(account)["token"]
    for name in (exact, f"app.{wild}"):
        agent = run_cli(token, ["http", "-hostname", name, _addr(upstream.server_port)])
        urls = _by_scheme(agent.wait_tunnels(2))
        assert {_host(u) for u in urls.values()} == {name}
        assert edge.http("GET", name, "/h").json()["path"] == "/h"
        assert _https(edge, urls["https"], "/h")[0] == 200
        agent.stop()


def test_hostname_not_reserved_is_refused_with_the_cli_showing_why(run_cli, account):
    agent = run_cli(
        _credential(account)["token"], ["http", "-hostname", "not-mine.example.org", "8080"]
    )
    error = agent.refusal()
    assert "ERR_NGROK_7117" in error and "not-mine.example.org" in error
    assert agent.process.wait(timeout=15) != 0
    assert "ERR_NGROK_7117" in agent.output()


def test_auth_is_basic_auth_at_the_edge(run_cli, edge, account, upstream):
    agent = run_cli(
        _credential(account)["token"],
        ["http", "-auth", f"alice:{PASSWORD}", _addr(upstream.server_port)],
    )
    urls = _by_scheme(agent.wait_tunnels(2))
    host = _host(urls["http"])
    before = len(upstream.seen)
    refused = edge.http("GET", host, "/private")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Basic")
    assert edge.http("GET", host, "/private", auth=("alice", "wrong-password")).status_code == 401
    assert len(upstream.seen) == before  # nothing reached the upstream
    ok = edge.http("GET", host, "/private", auth=("alice", PASSWORD))
    assert ok.status_code == 200 and ok.json()["path"] == "/private"
    assert _https(edge, urls["https"], "/private", "-u", f"alice:{PASSWORD}")[0] == 200
    assert _https(edge, urls["https"], "/private")[0] == 401


def test_auth_with_a_short_password_is_refused(run_cli, account):
    agent = run_cli(_credential(account)["token"], ["http", "-auth", "alice:short", "8080"])
    error = agent.refusal()
    assert "ERR_NGROK_360" in error and "between 8 and 128 characters, got 5" in error, error


@pytest.mark.parametrize(
    "flag,expected", [("rewrite", "upstream"), ("example.test", "example.test")]
)
def test_host_header(run_cli, edge, account, upstream, flag, expected):
    agent = run_cli(
        _credential(account)["token"], ["http", "-host-header", flag, _addr(upstream.server_port)]
    )
    urls = _by_scheme(agent.wait_tunnels(2))
    got = edge.http("GET", _host(urls["http"]), "/hh").json()["host"]
    want = _addr(upstream.server_port) if expected == "upstream" else expected
    assert got == want


def test_inspect_false_serves_without_the_inspector(run_cli, edge, account, upstream):
    agent = run_cli(
        _credential(account)["token"],
        ["http", "-inspect=false", "-bind-tls", "false", _addr(upstream.server_port)],
    )
    urls = _by_scheme(agent.wait_tunnels(1))
    assert edge.http("GET", _host(urls["http"]), "/ni").status_code == 200
    assert agent.inspected() == []


def test_the_inspector_shows_requests_and_replays_them(run_cli, edge, account, upstream):
    agent = run_cli(
        _credential(account)["token"], ["http", "-bind-tls", "false", _addr(upstream.server_port)]
    )
    urls = _by_scheme(agent.wait_tunnels(1))
    assert edge.http("POST", _host(urls["http"]), "/inspected", data=b"hello").status_code == 200
    deadline = time.time() + 10
    while time.time() < deadline and not agent.inspected():
        time.sleep(0.2)
    captured = agent.inspected()
    assert [r["request"]["uri"] for r in captured] == ["/inspected"]
    before = len(upstream.seen)
    agent.replay(captured[0]["id"])
    deadline = time.time() + 10
    while time.time() < deadline and len(upstream.seen) == before:
        time.sleep(0.2)
    assert upstream.seen[-1]["path"] == "/inspected" and upstream.seen[-1]["body"] == "hello"


def test_file_server(run_cli, edge, account, tmp_path):
    """``ngrok http file:///dir``: the CLI's own file server, through the edge. (``-region``
    is refused by the CLI itself next to a ``server_addr``: it never reaches an edge.)"""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "hello.txt").write_text("served by the CLI")
    agent = run_cli(
        _credential(account)["token"], ["http", "-bind-tls", "false", f"file://{folder}"]
    )
    urls = _by_scheme(agent.wait_tunnels(1))
    resp = edge.http("GET", _host(urls["http"]), "/hello.txt")
    assert resp.status_code == 200 and resp.text == "served by the CLI"


def test_authtoken_command_saves_the_token_the_cli_then_uses(
    cli, edge, account, tmp_path, upstream
):
    import subprocess
    from stacks.agents import CLI_BIN

    token = _credential(account)["token"]
    config = tmp_path / "saved.yml"
    config.write_text(f"server_addr: {edge.server_addr}\nroot_cas: {edge.ca_path}\n")
    done = subprocess.run(
        [CLI_BIN, "authtoken", "-config", str(config), token],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert token in config.read_text()
    proc = subprocess.Popen(
        [
            CLI_BIN,
            "http",
            "-config",
            str(config),
            "-log",
            "stdout",
            "-bind-tls",
            "false",
            _addr(upstream.server_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not account.admin.get("/endpoints").json["endpoints"]:
            time.sleep(0.3)
        url = account.admin.get("/endpoints").json["endpoints"][0]["public_url"]
        assert edge.http("GET", _host(url), "/saved").json()["path"] == "/saved"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_local_https_upstream(run_cli, edge, account, tmp_path):
    """``ngrok http https://127.0.0.1:port``: LocalURLScheme https, the CLI speaks TLS to its
    upstream itself (it does not verify the local certificate, as documented for 2.x)."""
    import ssl
    import subprocess

    cert, key = str(tmp_path / "local.crt"), str(tmp_path / "local.key")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
            key,
            "-out",
            cert,
        ],
        check=True,
        capture_output=True,
    )
    server = _upstream("tls")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    try:
        agent = run_cli(
            _credential(account)["token"],
            ["http", "-bind-tls", "false", f"https://127.0.0.1:{server.server_port}"],
        )
        urls = _by_scheme(agent.wait_tunnels(1))
        got = edge.http("GET", _host(urls["http"]), "/over-tls").json()
        assert got["name"] == "tls" and got["path"] == "/over-tls"
    finally:
        server.shutdown()


# ---- ngrok tcp -----------------------------------------------------------------------------
def test_tcp_with_a_reserved_remote_addr(run_cli, edge, account, tcp_echo):
    addr = account.admin.post("/reserved_addrs", {}).json["addr"]
    agent = run_cli(_credential(account)["token"], ["tcp", "-remote-addr", addr, _addr(tcp_echo)])
    urls = agent.wait_tunnels(1)
    assert list(urls.values()) == [f"tcp://{addr}"]
    port = int(addr.rsplit(":", 1)[1])
    assert tcp_round_trip(port, b"ping over tcp") == b"ping over tcp"


def test_tcp_remote_addr_not_reserved_is_refused(run_cli, edge, account, tcp_echo):
    agent = run_cli(
        _credential(account)["token"],
        ["tcp", "-remote-addr", "tunnels.localhost:1", _addr(tcp_echo)],
    )
    assert "ERR_NGROK_7113" in agent.refusal()


def test_plain_tcp(run_cli, edge, account, tcp_echo):
    agent = run_cli(_credential(account)["token"], ["tcp", _addr(tcp_echo)])
    url = list(agent.wait_tunnels(1).values())[0]
    assert tcp_round_trip(int(url.rsplit(":", 1)[1]), b"x" * 1000) == b"x" * 1000


# ---- ngrok start ---------------------------------------------------------------------------
def test_start_names_and_all_from_the_config_file(
    run_cli, edge, account, upstream, upstream_two, tcp_echo
):
    sub = f"clistart{time.time_ns() % 10**9}"
    tunnels = {
        "web": {"proto": "http", "addr": _addr(upstream.server_port), "subdomain": sub},
        "api": {"proto": "http", "addr": _addr(upstream_two.server_port), "bind_tls": False},
        "raw": {"proto": "tcp", "addr": _addr(tcp_echo)},
    }
    token = _credential(account)["token"]
    one = run_cli(token, ["start", "web"], tunnels=tunnels)
    urls = one.wait_tunnels(2)
    assert {_host(u) for u in urls.values()} == {f"{sub}.tunnels.localhost"}
    assert edge.http("GET", f"{sub}.tunnels.localhost", "/").json()["name"] == "one"
    one.stop()
    # the first CLI's session ends when the edge reads its connection's close: until then its
    # name is still held (a second session asking for it would be refused as in use, and the
    # CLI's `start --all` exits on that). The name stops being served first and its claim goes
    # after (edge/binds.py drop_tunnel: registry, then claim, then the endpoint's item): wait
    # for the account's endpoints to be gone, not for a 404 (a loaded fresh-clone run met the
    # gap once)
    deadline = time.time() + 30
    while time.time() < deadline and account.admin.get("/endpoints").json["endpoints"]:
        time.sleep(0.2)
    assert edge.http("GET", f"{sub}.tunnels.localhost", "/").status_code == 404
    every = run_cli(token, ["start", "--all"], tunnels=tunnels)
    urls = every.wait_tunnels(4)
    by_name = {name.split(" ")[0]: url for name, url in urls.items()}
    assert set(by_name) == {"web", "api", "raw"}
    api_url = [u for n, u in urls.items() if n.startswith("api")][0]
    assert edge.http("GET", _host(api_url), "/").json()["name"] == "two"
    assert edge.http("GET", f"{sub}.tunnels.localhost", "/").json()["name"] == "one"
    raw = [u for n, u in urls.items() if n.startswith("raw")][0]
    assert tcp_round_trip(int(raw.rsplit(":", 1)[1]), b"all") == b"all"


def test_start_all_with_two_unnamed_tunnels_routes_each_url_to_its_own_upstream(
    run_cli, edge, account, upstream, upstream_two
):
    """``ngrok start --all`` binds its tunnels at once and its Binds carry nothing that ties
    a tunnel's http bind to its https bind: each URL the CLI shows reaches that tunnel's
    upstream, over its own scheme."""
    tunnels = {
        "a": {"proto": "http", "addr": _addr(upstream.server_port)},
        "b": {"proto": "http", "addr": _addr(upstream_two.server_port)},
    }
    agent = run_cli(_credential(account)["token"], ["start", "--all"], tunnels=tunnels)
    urls = agent.wait_tunnels(4)
    for name, url in urls.items():
        want = "one" if name.split(" ")[0] == "a" else "two"
        if url.startswith("http://"):
            assert edge.http("GET", _host(url), "/").json()["name"] == want, (name, urls)
        else:
            status, body = _https(edge, url, "/")
            assert status == 200 and json.loads(body)["name"] == want, (name, urls)


# ---- the edge restarts (last: it restarts the session's edge) ------------------------------
def test_cli_reconnects_after_the_edge_restarts(run_cli, stack, edge, account, upstream):
    sub = f"clire{time.time_ns() % 10**9}"
    agent = run_cli(
        _credential(account)["token"], ["http", "-subdomain", sub, _addr(upstream.server_port)]
    )
    urls = _by_scheme(agent.wait_tunnels(2))
    host = _host(urls["http"])
    assert edge.http("GET", host, "/before").status_code == 200
    edge.stop()
    edge.start({**stack.store_env(), "BASE_DOMAIN": "tunnels.localhost"})
    deadline = time.time() + 60
    status = None
    while time.time() < deadline:
        try:
            status = edge.http("GET", host, "/after").status_code
        except requests.RequestException:
            status = None
        if status == 200 and _https(edge, urls["https"], "/after")[0] == 200:
            break
        time.sleep(0.5)
    assert status == 200, agent.output()
    assert _by_scheme(agent.wait_tunnels(2)) == urls
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert len(sessions) == 1


def test_deleting_one_endpoint_through_the_api_leaves_the_cli_serving_the_other(
    run_cli, edge, account, upstream
):
    """DELETE /endpoints/{id} of the CLI's https endpoint: the edge stops serving it (the CLI
    2.x has no StopTunnel: it is not sent one); the CLI's session and its http endpoint of
    the same name serve on."""
    agent = run_cli(_credential(account)["token"], ["http", _addr(upstream.server_port)])
    urls = _by_scheme(agent.wait_tunnels(2))
    endpoints = account.admin.get("/endpoints").json["endpoints"]
    https = next(e for e in endpoints if e["public_url"] == urls["https"])
    assert account.admin.delete(f"/endpoints/{https['id']}").status == 204
    listed = [e["public_url"] for e in account.admin.get("/endpoints").json["endpoints"]]
    assert listed == [urls["http"]], listed
    resp = edge.http("GET", _host(urls["http"]), "/still")
    assert resp.status_code == 200 and resp.json()["path"] == "/still"
    assert _https(edge, urls["https"], "/gone")[0] == 404
    assert agent.process.poll() is None
    sessions = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert len(sessions) == 1
    # the CLI 2.x knows no StopTunnel (it would log a broken proxy stream): none was sent
    assert not [x for x in list(agent.lines) if x.get("msg") == "error reading proxy header"]
