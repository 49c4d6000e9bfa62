"""conn.tls.client.* through the edge: real TLS clients with client certificates (made with
``cryptography``) reach an official agent's (Python SDK) mutual-TLS endpoint whose traffic
policy branches on the certificate's subject, SAN and serial number (HTTP/1.1 and HTTP/2); on a TLS endpoint the
rules after a terminate-tls action see the certificate the edge's handshake verified."""

import json
import socket
import ssl
import time

from stacks.certs import make_ca, make_client_cert, pem
from tests.edge.test_edge_sdk import _bound, _credential, _host
from tests.edge.test_edge_tls_on_the_wire import _get
from tests.edge.test_http2 import curl
from tests.edge.test_tls_endpoints import _certificate, domain  # noqa: F401 (a fixture)

SERIAL = 0x5EC0DE


def _policy(http: bool) -> dict:
    answer = "custom-response" if http else "deny"

    def respond(body):
        if not http:
            return {"type": "deny"}
        return {"type": answer, "config": {"status_code": 200, "body": body}}

    return {
        "on_http_request" if http else "on_tcp_connect": (
            []
            if http
            else [
                {
                    "actions": [
                        {
                            "type": "terminate-tls",
                            "config": {"mutual_tls_certificate_authorities": ["${CA}"]},
                        }
                    ]
                }
            ]
        )
        + [
            {
                "expressions": ["conn.tls.client.subject.common_name == 'admin'"],
                "actions": [respond("cn admin ${conn.tls.client.issuer.common_name}")],
            },
            {
                "expressions": ["'ops.example.com' in conn.tls.client.san.dns_names"],
                "actions": [respond("san ops ${conn.tls.client.san}")],
            },
            {
                "expressions": [f"conn.tls.client.serial_number == '{SERIAL:x}'"],
                "actions": [respond("serial ${conn.tls.client.serial_number}")],
            },
        ]
    }


def test_an_http_policy_branches_on_the_client_certificate(edge, account, agents, tmp_path):
    ca = make_ca("policy clients")
    policy = json.dumps(_policy(http=True))
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "http",
                "options": {"mutual_tlsca": [pem(ca[1])], "traffic_policy": [policy]},
            }
        ],
    )
    host = _host(_bound(agent.start())[0]["url"])

    def get(cert):
        return _get(edge, host, "/echo", cert=cert, tmp_path=tmp_path)

    assert get(make_client_cert(ca, "admin")) == (200, "cn admin policy clients")
    assert get(make_client_cert(ca, "admins")) != (200, "cn admin policy clients")
    assert get(make_client_cert(ca, "carol", dns_names=("x.example.com", "ops.example.com"))) == (
        200,
        "san ops DNS:x.example.com, DNS:ops.example.com",
    )
    assert get(make_client_cert(ca, "dave", serial=SERIAL)) == (200, f"serial {SERIAL:x}")
    # over HTTP/2 too (curl negotiates h2 by ALPN): the same connection's certificate
    chain, private = make_client_cert(ca, "carol", dns_names=("ops.example.com",))
    (tmp_path / "h2.pem").write_bytes(chain)
    (tmp_path / "h2.key").write_bytes(private)
    out = curl(
        edge,
        host,
        "/echo",
        "--http2",
        "-v",
        "--cert",
        str(tmp_path / "h2.pem"),
        "--key",
        str(tmp_path / "h2.key"),
    )
    assert "< HTTP/2 200" in out.stderr, out.stderr
    assert out.stdout == "san ops DNS:ops.example.com", out.stdout
    # no rule matches: the request goes on to the agent's upstream
    status, body = get(make_client_cert(ca, "erin", serial=SERIAL + 1))
    assert status == 200 and '"path": "/echo"' in body, body
    # a certificate from another CA never reaches the policy: the handshake fails
    assert get(make_client_cert(make_ca("strangers"), "admin"))[0] == "refused"


def test_a_policy_without_mutual_tls_sees_no_certificate(edge, account, agents, tmp_path):
    policy = {
        "on_http_request": [
            {
                "expressions": ["conn.tls.client.pem == '' && conn.tls.client.subject == ''"],
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "none"}}
                ],
            }
        ]
    }
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}],
    )
    host = _host(_bound(agent.start())[0]["url"])
    # a client that offers a certificate anyway: no mutual TLS asked for, none is read
    cert = make_client_cert(make_ca("unasked"), "admin")
    assert _get(edge, host, cert=cert, tmp_path=tmp_path) == (200, "none")
    assert edge.http("GET", host, "/").text == "none"  # plain HTTP


def test_a_tls_endpoint_denies_by_certificate_after_terminate_tls(
    edge,
    account,
    agents,
    domain,  # noqa: F811
    tmp_path,
):
    ca = make_ca("tls policy clients")
    doc = json.dumps(_policy(http=False)).replace('"${CA}"', json.dumps(pem(ca[1])))
    # deny admin, ops.example.com and the serial; let the others through to the agent
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "tls",
                "domain": domain,
                "upstream": "tcp",
                "options": {"traffic_policy": [doc]},
            }
        ],
    )
    _bound(agent.start())
    edge_ca = edge.ca_path

    def attempt(client):
        ctx = ssl.create_default_context(cafile=edge_ca)
        if client is not None:
            path = tmp_path / f"c-{time.time_ns()}.pem"
            path.write_bytes(client[0] + client[1])
            ctx.load_cert_chain(str(path))
        try:
            with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname=domain) as conn:
                    conn.sendall(b"hello")
                    return conn.recv(100) or b"closed"
        except (ssl.SSLError, OSError):
            return b"closed"

    assert attempt(make_client_cert(ca, "erin")) == b"hello"  # the TCP echo, through the agent
    assert attempt(make_client_cert(ca, "admin")) == b"closed"
    assert attempt(make_client_cert(ca, "carol", dns_names=("ops.example.com",))) == b"closed"
    assert attempt(make_client_cert(ca, "dave", serial=SERIAL)) == b"closed"
    assert attempt(make_client_cert(ca, "dave", serial=SERIAL + 1)) == b"hello"
    assert attempt(None) == b"closed"  # the handshake requires a certificate


def test_a_tls_endpoint_terminated_by_its_bind_option_reads_the_certificate(
    edge,
    account,
    agents,
    domain,  # noqa: F811
    tmp_path,
):
    """The SDK's ``termination`` and ``mutual_tlsca`` options, and a policy whose
    on_tcp_connect reads conn.tls.client: the edge makes the handshake first, then runs the
    phase with the verified certificate."""
    ca = make_ca("bind option clients")
    cert, key = _certificate(str(tmp_path), domain)
    policy = {
        "on_tcp_connect": [
            {
                "expressions": [
                    "conn.tls.client.subject.common_name == 'admin' || "
                    f"conn.tls.client.serial_number == '{SERIAL:x}' || "
                    "conn.tls.version == ''"
                ],
                "actions": [{"type": "deny"}],
            }
        ]
    }
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
                    "mutual_tlsca": [pem(ca[1])],
                    "traffic_policy": [json.dumps(policy)],
                },
            }
        ],
    )
    _bound(agent.start())

    def attempt(client):
        ctx = ssl.create_default_context(cafile=cert)
        path = tmp_path / f"c-{time.time_ns()}.pem"
        path.write_bytes(client[0] + client[1])
        ctx.load_cert_chain(str(path))
        try:
            with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname=domain) as conn:
                    conn.sendall(b"bind")
                    return conn.recv(100) or b"closed"
        except (ssl.SSLError, OSError):
            return b"closed"

    assert attempt(make_client_cert(ca, "erin")) == b"bind"
    assert attempt(make_client_cert(ca, "admin")) == b"closed"
    assert attempt(make_client_cert(ca, "dave", serial=SERIAL)) == b"closed"
    assert attempt(make_client_cert(make_ca("strangers"), "erin")) == b"closed"


def test_an_https_edge_route_policy_reads_the_certificate_of_its_mutual_tls(
    edge, account, tmp_path
):
    """An HTTPS edge (no agent: an http_response backend) with the ``mutual_tls`` module and a
    route ``traffic_policy`` answering with the client certificate's subject and serial."""
    from tests.edge.conftest import BASE_DOMAIN
    from tests.edge.test_edge_tls_on_the_wire import _until

    ca = make_ca("edge clients")
    host = f"emtls-{time.time_ns()}.{BASE_DOMAIN}"
    authority = account.admin.post("/certificate_authorities", {"ca_pem": pem(ca[1])})
    assert authority.status == 201, authority.json
    fixed = account.admin.post("/backends/http_response", {"status_code": 200, "body": "edge"})
    made = account.admin.post(
        "/edges/https",
        {
            "hostports": [f"{host}:443"],
            "mutual_tls": {"certificate_authority_ids": [authority.json["id"]]},
        },
    )
    assert made.status == 201, made.json
    policy = {
        "on_http_request": [
            {
                "expressions": ["conn.tls.client.issuer.common_name == 'edge clients'"],
                "actions": [
                    {
                        "type": "custom-response",
                        "config": {
                            "status_code": 200,
                            "body": "${conn.tls.client.subject.common_name} "
                            "${conn.tls.client.serial_number}",
                        },
                    }
                ],
            }
        ]
    }
    route = account.admin.post(
        f"/edges/https/{made.json['id']}/routes",
        {
            "match_type": "path_prefix",
            "match": "/",
            "backend": {"backend_id": fixed.json["id"]},
            "traffic_policy": {"enabled": True, "value": json.dumps(policy)},
        },
    )
    assert route.status == 201, route.json
    cert = make_client_cert(ca, "frank", serial=SERIAL)
    took = _until(
        lambda: _get(edge, host, cert=cert, tmp_path=tmp_path) == (200, f"frank {SERIAL:x}"), 5
    )
    assert took is not None, _get(edge, host, cert=cert, tmp_path=tmp_path)
    assert _get(edge, host)[0] == "refused"  # no certificate: the handshake fails


def test_a_tls_edges_policy_reads_the_certificate_its_mutual_tls_module_verified(
    edge, account, agents, tmp_path
):
    """A TLS edge (``/edges/tls``): its tls_termination and mutual_tls modules run as a
    terminate-tls action first, so its traffic_policy's on_tcp_connect rules see the
    verified certificate: subject CN 'admin' is closed, another passes to the labeled tunnel."""
    from tests.edge.conftest import BASE_DOMAIN
    from tests.edge.test_edge_sdk import _wait
    from tests.edge.test_tls_edges_on_the_wire import REFUSED, _connect, _group, _labeled, _post

    name = f"tlsvar-{time.time_ns()}.{BASE_DOMAIN}"
    label = f"v{time.time_ns()}"
    ca = make_ca("tls edge policy clients")
    authority = _post(account, "/certificate_authorities", {"ca_pem": pem(ca[1])})["id"]
    deny_admin = {
        "on_tcp_connect": [
            {
                "expressions": ["conn.tls.client.subject.common_name == 'admin'"],
                "actions": [{"type": "deny"}],
            }
        ]
    }
    _post(
        account,
        "/edges/tls",
        {
            "hostports": [f"{name}:443"],
            "backend": {"backend_id": _group(account, label)},
            "tls_termination": {"terminate_at": "edge"},
            "mutual_tls": {"certificate_authority_ids": [authority]},
            "traffic_policy": {"value": json.dumps(deny_admin)},
        },
    )
    _labeled(agents, edge, account, label, upstream="tcp")

    def through(cn):
        client = make_client_cert(ca, cn)
        return _connect(edge, name, edge.ca_path, b"plain", client=client, tmp_path=tmp_path)

    assert _wait(lambda: through("erin") == b"plain", timeout=10), edge.log()[-3000:]
    assert through("admin") == REFUSED
    assert through("erin") == b"plain"
