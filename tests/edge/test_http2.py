"""HTTP/2 to clients on the HTTPS listener (edge/h2front.py), with real clients as processes:
curl (nghttp2) negotiating ``h2`` by ALPN against an official SDK agent, HTTP/1.1 still
negotiated for clients that offer only it, multiplexed streams, flow control both ways, and the
request path's rules (traffic policy, errors) as over HTTP/1.1."""

import hashlib
import json
import os
import subprocess
import tempfile

import pytest

from tests.edge import support
from tests.edge.conftest import BASE_DOMAIN


@pytest.fixture(autouse=True)
def no_edge_traceback(edge):
    """Nothing the test did made an exception escape in the edge (its log from here on)."""
    yield from support.no_traceback_after(edge)


def _credential(account):
    return support.credential(account, description="h2 test")["token"]


def _agent(edge, account, agents, binds=None):
    agent = agents(edge, _credential(account), binds or [{"proto": "http"}])
    events = agent.start()
    bound = [e for e in events if e["event"] == "bound"]
    assert bound, events
    return agent, [support.host(b["url"]) for b in bound]


def curl(edge, host, path="/", *args, timeout=60):
    return subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "30",
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{host}:{edge.https_port}:127.0.0.1",
            *args,
            f"https://{host}:{edge.https_port}{path}",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_curl_negotiates_h2_and_gets_the_agents_answer(edge, account, agents):
    _, (host,) = _agent(edge, account, agents)
    out = curl(edge, host, "/echo?x=1", "--http2", "-v", "-H", "X-Test: yes")
    assert out.returncode == 0, out.stderr
    assert "ALPN: server accepted h2" in out.stderr, out.stderr
    assert "< HTTP/2 200" in out.stderr, out.stderr
    body = json.loads(out.stdout)
    assert body["path"] == "/echo?x=1"
    headers = {k.lower(): v for k, v in body["headers"].items()}
    assert headers["host"] == f"{host}:{edge.https_port}"
    assert headers["x-test"] == "yes"
    assert headers["x-forwarded-proto"] == "https"
    assert headers["x-forwarded-for"] == "127.0.0.1"


def test_a_client_offering_only_http11_gets_http11(edge, account, agents):
    _, (host,) = _agent(edge, account, agents)
    out = curl(edge, host, "/echo", "--http1.1", "-v")
    assert out.returncode == 0, out.stderr
    assert "< HTTP/1.1 200" in out.stderr, out.stderr


def test_upload_and_streamed_download_over_h2(edge, account, agents):
    _, (host,) = _agent(edge, account, agents)
    data = os.urandom(3 * 1024 * 1024 + 17)
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        out = curl(edge, host, "/upload", "--http2", "--data-binary", f"@{f.name}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2",
            "--max-time",
            "30",
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{host}:{edge.https_port}:127.0.0.1",
            f"https://{host}:{edge.https_port}/flood?mb=8",
        ],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout) == 8 << 20


def test_many_streams_on_one_connection(edge, account, agents):
    """curl multiplexes --parallel transfers over one connection: every answer is right."""
    _, (host,) = _agent(edge, account, agents)
    urls = [f"https://{host}:{edge.https_port}/echo?n={i}" for i in range(40)]
    args = []
    for url in urls:
        args += ["-o", "/dev/null", url]
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2",
            "--parallel",
            "--parallel-max",
            "40",
            "--max-time",
            "60",
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{host}:{edge.https_port}:127.0.0.1",
            "-w",
            "%{http_version} %{http_code} %{num_connects}\n",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    lines = [line for line in lines if line.strip()]
    assert len(lines) == 40 and all(line.startswith("2 200") for line in lines), out.stdout
    assert sum(int(line.split()[2]) for line in lines) <= 2, out.stdout


def test_offline_endpoint_over_h2_is_the_contract_error(edge):
    out = curl(edge, f"nothing-here.{BASE_DOMAIN}", "/", "--http2", "-v")
    assert "< HTTP/2 404" in out.stderr, out.stderr
    assert json.loads(out.stdout)["error_code"] == "ERR_NGROK_3200"


POLICY = {
    "on_http_request": [
        {
            "expressions": ["req.url.path.startsWith('/admin')"],
            "actions": [
                {
                    "type": "custom-response",
                    "config": {"status_code": 418, "body": "no admin for ${conn.client_ip}"},
                }
            ],
        },
        {"expressions": ["req.url.path.startsWith('/denied')"], "actions": [{"type": "deny"}]},
        {"actions": [{"type": "add-headers", "config": {"headers": {"x-policy": "applied"}}}]},
    ],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"x-served-by": "edge"}}}]},
    ],
}


def test_traffic_policy_over_h2_as_over_http11(edge, account, agents):
    _, (host,) = _agent(
        edge,
        account,
        agents,
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(POLICY)]}}],
    )
    for version in ("--http2", "--http1.1"):
        out = curl(edge, host, "/admin/x", version, "-i")
        assert out.stdout.split()[1] == "418", out.stdout
        assert out.stdout.endswith("no admin for 127.0.0.1"), out.stdout
        out = curl(edge, host, "/denied", version, "-i")
        assert out.stdout.split()[1] == "403", out.stdout
        out = curl(edge, host, "/echo", version, "-i")
        head, body = out.stdout.split("\n\n", 1)
        assert "x-served-by: edge" in head.lower(), head
        assert {k.lower(): v for k, v in json.loads(body)["headers"].items()}[
            "x-policy"
        ] == "applied"


def test_modules_over_h2(edge, account, agents):
    _, (auth, gz, denied) = _agent(
        edge,
        account,
        agents,
        [
            {"proto": "http", "options": {"basic_auth": ["user", "s3cret-pass"]}},
            {"proto": "http", "options": {"compression": []}},
            {"proto": "http", "options": {"deny_cidr": ["127.0.0.1/32"]}},
        ],
    )
    assert (
        curl(edge, auth, "/echo", "--http2", "-o", "/dev/null", "-w", "%{http_code}").stdout
        == "401"
    )
    assert (
        curl(
            edge,
            auth,
            "/echo",
            "--http2",
            "-u",
            "user:s3cret-pass",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ).stdout
        == "200"
    )
    out = curl(
        edge, gz, "/echo", "--http2", "-H", "Accept-Encoding: gzip", "-D", "-", "-o", "/dev/null"
    )
    assert "content-encoding: gzip" in out.stdout.lower(), out.stdout
    assert (
        curl(edge, denied, "/echo", "--http2", "-o", "/dev/null", "-w", "%{http_code}").stdout
        == "403"
    )


def test_head_and_bodiless_statuses_over_h2(edge, account, agents):
    _, (host,) = _agent(edge, account, agents)
    out = curl(edge, host, "/echo", "--http2", "-I")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("HTTP/2 200"), out.stdout
    for code in ("204", "304"):
        out = curl(
            edge,
            host,
            f"/status/{code}",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        )
        assert out.returncode == 0 and out.stdout == f"2 {code}", (out.stdout, out.stderr)


def test_trailers_of_an_http11_upstream_reach_h2_and_http11_clients(edge, account, agents):
    _, (host,) = _agent(edge, account, agents, [{"proto": "http", "upstream": "trailers"}])
    out = curl(edge, host, "/", "--http2", "-v")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello"
    assert "< x-checksum: abc123" in out.stderr.lower(), out.stderr
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http1.1",
            "--raw",
            "--max-time",
            "30",
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{host}:{edge.https_port}:127.0.0.1",
            "-H",
            "TE: trailers",
            f"https://{host}:{edge.https_port}/",
        ],
        capture_output=True,
        timeout=60,
    )
    # field names are case-insensitive: the compiled core relays the upstream's spelling (as it
    # does a response head's), Python's path its lower case
    assert out.stdout.lower().endswith(b"0\r\nx-checksum: abc123\r\n\r\n"), out.stdout
