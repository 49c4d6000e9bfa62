"""TLS edges (/edges/tls) carrying connections: served by SNI on the edge's TLS listener to a
labeled tunnel of their tunnel-group backend (the official Python SDK's labeled listener),
passed through by default, terminated at the edge by their tls_termination module or a
terminate-tls action (one implementation: edge/passthrough.py), with mutual TLS, minimum
version and IP restriction enforced; changes through the API in force within seconds."""

import socket
import ssl
import time

import pytest

from stacks.certs import make_ca, make_client_cert, pem
from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_edge_sdk import _bound, _credential, _wait
from tests.edge.test_tls_endpoints import TlsUpstream

REFUSED = b"refused"


def _post(account, path, body):
    resp = account.admin.post(path, body)
    assert resp.status == 201, resp
    return resp.json


def _connect(edge, name, cafile, payload, client=None, tmp_path=None, max_version=None):
    """One TLS connection with SNI ``name`` trusting ``cafile``: what comes back, or REFUSED
    (handshake failed, or closed before an answer: TLS 1.3 refuses a client certificate
    after the client's side of the handshake ended)."""
    ctx = ssl.create_default_context(cafile=cafile)
    if max_version is not None:
        ctx.maximum_version = max_version
    if client is not None:
        chain, private = client
        (tmp_path / "c.pem").write_bytes(chain)
        (tmp_path / "k.pem").write_bytes(private)
        ctx.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    try:
        with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as tls:
                tls.sendall(payload)
                return tls.recv(4096) or REFUSED
    except (ssl.SSLError, OSError):
        return REFUSED


def _labeled(agents, edge, account, label, **bind):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "labeled", "labels": {"tls": label}, **bind}],
    )
    _bound(agent.start())
    return agent


def _group(account, label):
    return _post(account, "/backends/tunnel_group", {"labels": {"tls": label}})["id"]


@pytest.fixture
def domain(account):
    name = f"tlsedge-{time.time_ns()}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": name}).status == 201
    return name


def test_passthrough_by_sni_to_a_labeled_tunnel(edge, account, agents, domain, tmp_path):
    """No tls_termination: the client's handshake is the upstream's (its own certificate;
    the edge's CA is not trusted by this client)."""
    upstream = TlsUpstream(str(tmp_path), domain)
    try:
        label = f"p{time.time_ns()}"
        _post(
            account,
            "/edges/tls",
            {"hostports": [f"{domain}:443"], "backend": {"backend_id": _group(account, label)}},
        )
        # no tunnel of the group online: the connection is closed
        time.sleep(1.5)
        assert _connect(edge, domain, upstream.cert, b"early") == REFUSED
        _labeled(agents, edge, account, label, upstream_addr=f"127.0.0.1:{upstream.port}")
        assert _wait(
            lambda: _connect(edge, domain, upstream.cert, b"hi") == b"upstream:hi", timeout=10
        ), edge.log()[-3000:]
        assert _connect(edge, domain, edge.ca_path, b"hi") == REFUSED  # not the edge's
    finally:
        upstream.close()


def test_termination_at_the_edge_with_mutual_tls_and_min_version(edge, account, agents, tmp_path):
    """tls_termination at the edge: the edge's certificate for the name, the plaintext to the
    agent's upstream (a TCP echo); mutual_tls: a client certificate from the stored CA
    only; min_version 1.3: a TLS 1.2 client is refused; deleting the modules restores
    passthrough (the echo then gets the ClientHello, never a handshake)."""
    name = f"tlsterm-{time.time_ns()}.{BASE_DOMAIN}"
    label = f"t{time.time_ns()}"
    allowed, other = make_ca("tls edge clients"), make_ca("other")
    ca = _post(account, "/certificate_authorities", {"ca_pem": pem(allowed[1])})["id"]
    tls_edge = _post(
        account,
        "/edges/tls",
        {
            "hostports": [f"{name}:443"],
            "backend": {"backend_id": _group(account, label)},
            "tls_termination": {"terminate_at": "edge", "min_version": "1.3"},
            "mutual_tls": {"certificate_authority_ids": [ca]},
        },
    )
    _labeled(agents, edge, account, label, upstream="tcp")
    good = make_client_cert(allowed)

    def through(**kwargs):
        return _connect(edge, name, edge.ca_path, b"plain", tmp_path=tmp_path, **kwargs)

    assert _wait(lambda: through(client=good) == b"plain", timeout=10), edge.log()[-3000:]
    assert through(client=make_client_cert(other)) == REFUSED
    assert through() == REFUSED
    assert through(client=good, max_version=ssl.TLSVersion.TLSv1_2) == REFUSED
    # mutual TLS off: any client; min_version 1.2: TLS 1.2 clients too
    path = f"/edges/tls/{tls_edge['id']}"
    assert account.admin.delete(f"{path}/mutual_tls").status == 204
    assert account.admin.put(f"{path}/tls_termination", {"min_version": "1.2"}).status == 200
    assert _wait(lambda: through(max_version=ssl.TLSVersion.TLSv1_2) == b"plain", timeout=5)
    # termination off: passed through to the echo, so the client's handshake never completes
    assert account.admin.delete(f"{path}/tls_termination").status == 204
    assert _wait(lambda: through() == REFUSED, timeout=5)


def test_ip_restriction_and_a_terminate_tls_policy(edge, account, agents):
    """The traffic_policy's terminate-tls action terminates as the module does (the same
    implementation); the ip_restriction module refuses before any handshake, and a rule
    change is in force within seconds."""
    name = f"tlspol-{time.time_ns()}.{BASE_DOMAIN}"
    label = f"i{time.time_ns()}"
    policy = _post(account, "/ip_policies", {})
    rule = _post(
        account,
        "/ip_policy_rules",
        {"ip_policy_id": policy["id"], "cidr": "127.0.0.0/8", "action": "deny"},
    )
    _post(
        account,
        "/edges/tls",
        {
            "hostports": [f"{name}:443"],
            "backend": {"backend_id": _group(account, label)},
            "ip_restriction": {"ip_policy_ids": [policy["id"]]},
            "traffic_policy": {
                "value": '{"on_tcp_connect": [{"actions": [{"type": "terminate-tls"}]}]}'
            },
        },
    )
    _labeled(agents, edge, account, label, upstream="tcp")
    time.sleep(1.5)
    assert _connect(edge, name, edge.ca_path, b"x") == REFUSED
    assert account.admin.patch(f"/ip_policy_rules/{rule['id']}", {"action": "allow"}).status == 200
    assert _wait(lambda: _connect(edge, name, edge.ca_path, b"x") == b"x", timeout=10)


def test_terminate_tls_in_a_tls_endpoints_policy(edge, account, agents, domain, tmp_path):
    """An agent's TLS endpoint whose traffic policy terminates: the edge's handshake (its
    own certificate for the name), the plaintext to the agent's upstream."""
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {
                    "traffic_policy": [
                        '{"on_tcp_connect": [{"actions": [{"type": "terminate-tls", '
                        '"config": {"min_version": "1.3"}}]}]}'
                    ]
                },
            }
        ],
    )
    _bound(agent.start())
    assert _connect(edge, domain, edge.ca_path, b"ended here") == b"ended here"
    assert (
        _connect(edge, domain, edge.ca_path, b"x", max_version=ssl.TLSVersion.TLSv1_2) == REFUSED
    )
