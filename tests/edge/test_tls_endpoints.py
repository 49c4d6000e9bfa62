"""TLS endpoints (``tls://``): the HTTPS listener routes a connection by its ClientHello's
SNI name to the agent without terminating it, so the client completes its handshake with the
agent's upstream and sees that upstream's own certificate (the edge's CA is not trusted by
these clients at all). Through the CLI 2.x (``ngrok tls -hostname``) and the Python SDK
(``tls_endpoint()``)."""

import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from stacks.agents import CliAgent, cli_binary
from tests.edge.test_edge_sdk import _bound, _credential, _host


def _certificate(folder, name):
    cert, key = os.path.join(folder, f"{name}.crt"), os.path.join(folder, f"{name}.key")
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
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
            "-keyout",
            key,
            "-out",
            cert,
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class TlsUpstream:
    """A TLS server with its own certificate for ``name``: answers each line with
    ``upstream:<line>``."""

    def __init__(self, folder, name):
        self.cert, key = _certificate(folder, name)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(self.cert, key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                data = tls.recv(4096)
                tls.sendall(b"upstream:" + data)
        except (OSError, ssl.SSLError):
            pass

    def close(self):
        self.sock.close()


def _through_edge(edge, name, cafile, payload=b"hello"):
    """A TLS client to the edge's HTTPS listener with SNI ``name``, trusting ``cafile`` only."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(payload)
            return tls.recv(4096)


@pytest.fixture
def domain(account):
    name = f"tls-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


@pytest.fixture
def upstream(tmp_path, domain):
    server = TlsUpstream(str(tmp_path), domain)
    yield server
    server.close()


def test_cli_tls_passthrough_by_sni(edge, account, domain, upstream, tmp_path):
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform")
    agent = CliAgent(
        edge,
        _credential(account)["token"],
        ["tls", "-hostname", domain, f"127.0.0.1:{upstream.port}"],
        workdir=str(tmp_path),
    )
    try:
        urls = agent.wait_tunnels(1)
        assert list(urls.values())[0].startswith(f"tls://{domain}")
        assert _through_edge(edge, domain, upstream.cert) == b"upstream:hello"
        # the edge's own certificate is not what the client got: trusting the edge's CA only
        # fails the handshake
        with pytest.raises(ssl.SSLError):
            _through_edge(edge, domain, edge.ca_path)
        # no HTTP on a TLS endpoint's name
        assert edge.http("GET", domain, "/").status_code == 404
    finally:
        agent.stop()


def test_cli_tls_without_a_reserved_name_is_refused(edge, account, tmp_path):
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform")
    agent = CliAgent(
        edge,
        _credential(account)["token"],
        ["tls", "-hostname", "tls-not-mine.example.org", "127.0.0.1:9"],
        workdir=str(tmp_path),
    )
    try:
        assert "ERR_NGROK_7117" in agent.refusal()
    finally:
        agent.stop()


def test_sdk_tls_endpoint_passthrough(edge, account, agents, domain, upstream):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "tls", "domain": domain, "upstream_addr": f"127.0.0.1:{upstream.port}"}],
    )
    bound = _bound(agent.start())
    assert bound[0]["url"].startswith(f"tls://{domain}")
    assert _through_edge(edge, domain, upstream.cert, b"from sdk") == b"upstream:from sdk"
    endpoints = account.admin.get("/endpoints").json["endpoints"]
    assert [e["proto"] for e in endpoints if _host(e["public_url"]) == domain] == ["tls"]


def test_sdk_tls_endpoint_ip_restriction(edge, account, agents, domain, upstream):
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "options": {"deny_cidr": ["127.0.0.0/8"]},
                "upstream_addr": f"127.0.0.1:{upstream.port}",
            }
        ],
    )
    _bound(agent.start())
    with pytest.raises((ssl.SSLError, OSError)):
        _through_edge(edge, domain, upstream.cert)


def test_sdk_tls_termination_at_the_edge_with_the_agents_pair(
    edge, account, agents, domain, tmp_path
):
    """``termination(cert, key)``: the edge completes the handshake with the agent's
    certificate; the agent's upstream (a plain TCP echo) gets the plaintext."""
    cert, key = _certificate(str(tmp_path), domain)
    cert_pem, key_pem = open(cert).read(), open(key).read()
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {"termination": [cert_pem, key_pem]},
            }
        ],
    )
    _bound(agent.start())
    assert _through_edge(edge, domain, cert, b"plain at the agent") == b"plain at the agent"


def test_sdk_tls_termination_with_a_key_that_is_not_the_certificates_is_refused(
    edge, account, agents, domain, tmp_path
):
    cert, _ = _certificate(str(tmp_path), domain)
    _, other_key = _certificate(str(tmp_path), "other.example")
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {"termination": [open(cert).read(), open(other_key).read()]},
            }
        ],
    )
    events = agent.start()
    assert any("ERR_NGROK_1602" in " ".join(e.get("args", [])) for e in events), events


def test_sdk_mutual_tlsca_on_a_terminated_tls_endpoint(edge, account, agents, domain, tmp_path):
    """``mutual_tlsca`` with ``termination``: the edge's handshake requires a client
    certificate from those CAs; without termination the option is refused."""
    from stacks.certs import make_ca, make_client_cert, pem

    allowed, other = make_ca("tls clients"), make_ca("other")
    cert, key = _certificate(str(tmp_path), domain)
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {
                    "termination": [open(cert).read(), open(key).read()],
                    "mutual_tlsca": [pem(allowed[1])],
                },
            }
        ],
    )
    _bound(agent.start())

    def attempt(client):
        ctx = ssl.create_default_context(cafile=cert)
        if client is not None:
            chain, private = client
            (tmp_path / "c.pem").write_bytes(chain)
            (tmp_path / "k.pem").write_bytes(private)
            ctx.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
        try:
            with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname=domain) as conn:
                    conn.sendall(b"mtls")
                    # TLS 1.3: the client's handshake ends before the edge checks its
                    # certificate; a refusal is then an alert, read as EOF or an error
                    return conn.recv(100) or b"refused"
        except (ssl.SSLError, OSError):
            return b"refused"

    assert attempt(make_client_cert(allowed)) == b"mtls"
    assert attempt(make_client_cert(other)) == b"refused"
    assert attempt(None) == b"refused"
    passthrough = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {"mutual_tlsca": [pem(allowed[1])]},
            }
        ],
    )
    events = passthrough.start()
    assert any(
        "MutualTLSAtEdge needs TLSTermination" in " ".join(e.get("args", [])) for e in events
    ), events
