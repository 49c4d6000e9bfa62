"""What HTTPS names require of the TLS handshake, on the edge's HTTPS listener: an HTTPS edge's
``tls_termination.min_version`` and ``mutual_tls`` set through the reference client
(ngrok-api), and an SDK endpoint's ``mutual_tlsca`` Bind option; real TLS clients (Python's
ssl, capped at TLS 1.2, with and without client certificates made with ``cryptography``);
changes through the API in force on the next connection within 2 s."""

import socket
import ssl
import time

import ngrok  # the ngrok-api client (the service's venv)
from ngrok.datatypes import EndpointMutualTLSMutate, EndpointTLSTerminationAtEdge

from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_edge_sdk import _bound, _credential, _host
from stacks.certs import make_ca, make_client_cert, pem

CHANGE_WITHIN = 2.0


def _client(stack, account):
    return ngrok.Client(account.admin.token, base_url=stack.base_url)


def _fixed_edge(client, host, body):
    backend = client.backends.http_response.create(body=body, status_code=200)
    edge = client.edges.https.create(hostports=[f"{host}:443"])
    client.edges.https_routes.create(
        edge.id,
        match_type="path_prefix",
        match="/",
        backend=ngrok.datatypes.EndpointBackendMutate(client, {"backend_id": backend.id}),
    )
    return edge


def _get(edge, host, path="/", maximum=None, cert=None, tmp_path=None, sni=None):
    """One HTTPS request on a new connection: (status, body), or ("refused", why) when the
    handshake (or the first read after it, TLS 1.3 client certificates being checked then)
    fails."""
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    if maximum is not None:
        ctx.maximum_version = maximum
    if cert is not None:
        path_ = tmp_path / f"client-{time.time_ns()}.pem"
        path_.write_bytes(cert[0] + cert[1])
        ctx.load_cert_chain(str(path_))
    try:
        with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=sni or host) as conn:
                conn.sendall(
                    f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
                )
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
    except (ssl.SSLError, ConnectionError) as exc:
        return "refused", str(exc)
    if not data:
        return "refused", "closed without an answer"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode("utf-8", "replace")


def _until(predicate, timeout):
    """The time it took ``predicate`` to hold (checked on new connections), or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def test_min_version_1_3_refuses_a_tls_1_2_client_and_accepts_1_3(stack, edge, account):
    client = _client(stack, account)
    host = f"tls13-{time.time_ns()}.{BASE_DOMAIN}"
    https_edge = _fixed_edge(client, host, "modern")
    # before the module: TLS 1.2 is served
    assert _get(edge, host, maximum=ssl.TLSVersion.TLSv1_2) == (200, "modern")
    client.edge_modules.https_edge_tls_termination.replace(
        https_edge.id, EndpointTLSTerminationAtEdge(client, {"min_version": "1.3"})
    )
    took = _until(
        lambda: _get(edge, host, maximum=ssl.TLSVersion.TLSv1_2)[0] == "refused", CHANGE_WITHIN + 1
    )
    assert took is not None and took <= CHANGE_WITHIN, took
    status, why = _get(edge, host, maximum=ssl.TLSVersion.TLSv1_2)
    assert status == "refused" and "VERSION" in why.upper(), why
    assert _get(edge, host) == (200, "modern")  # TLS 1.3
    # 1.2 is the default: the same as no module
    client.edge_modules.https_edge_tls_termination.replace(
        https_edge.id, EndpointTLSTerminationAtEdge(client, {"min_version": "1.2"})
    )
    took = _until(
        lambda: _get(edge, host, maximum=ssl.TLSVersion.TLSv1_2) == (200, "modern"),
        CHANGE_WITHIN + 1,
    )
    assert took is not None and took <= CHANGE_WITHIN, took


def test_mutual_tls_requires_a_client_certificate_from_the_edge_cas(
    stack, edge, account, tmp_path
):
    client = _client(stack, account)
    host = f"mtls-{time.time_ns()}.{BASE_DOMAIN}"
    https_edge = _fixed_edge(client, host, "upstream answer")
    allowed, other = make_ca("allowed clients"), make_ca("other clients")
    ca = client.certificate_authorities.create(ca_pem=pem(allowed[1]))
    client.edge_modules.https_edge_mutual_tls.replace(
        https_edge.id, EndpointMutualTLSMutate(client, {"certificate_authority_ids": [ca.id]})
    )
    good, stranger = make_client_cert(allowed), make_client_cert(other)
    took = _until(lambda: _get(edge, host)[0] == "refused", CHANGE_WITHIN + 1)
    assert took is not None and took <= CHANGE_WITHIN, took
    for maximum in (None, ssl.TLSVersion.TLSv1_2):
        assert _get(edge, host, maximum=maximum)[0] == "refused"
        assert _get(edge, host, maximum=maximum, cert=stranger, tmp_path=tmp_path)[0] == "refused"
        assert _get(edge, host, maximum=maximum, cert=good, tmp_path=tmp_path) == (
            200,
            "upstream answer",
        )
    # the protected name reached through another name's handshake, or plain HTTP: refused
    status, body = _get(edge, host, sni=f"elsewhere-{time.time_ns()}.{BASE_DOMAIN}")
    assert status == 421 and "ERR_NGROK_3002" in body, body
    plain = edge.http("GET", host, "/")
    assert plain.status_code == 421 and plain.json()["error_code"] == "ERR_NGROK_3002"
    # the module removed through the API: the next connections need no certificate
    client.edge_modules.https_edge_mutual_tls.delete(https_edge.id)
    took = _until(lambda: _get(edge, host) == (200, "upstream answer"), CHANGE_WITHIN + 1)
    assert took is not None and took <= CHANGE_WITHIN, took
    assert edge.http("GET", host, "/").text == "upstream answer"
    client.certificate_authorities.delete(ca.id)


def test_sdk_mutual_tlsca_option_is_enforced_on_the_endpoint(edge, account, agents, tmp_path):
    allowed, other = make_ca("sdk clients"), make_ca("other")
    cred = _credential(account)
    agent = agents(
        edge, cred["token"], [{"proto": "http", "options": {"mutual_tlsca": [pem(allowed[1])]}}]
    )
    host = _host(_bound(agent.start())[0]["url"])
    assert _get(edge, host, "/echo")[0] == "refused"
    assert (
        _get(edge, host, "/echo", cert=make_client_cert(other), tmp_path=tmp_path)[0] == "refused"
    )
    status, body = _get(edge, host, "/echo", cert=make_client_cert(allowed), tmp_path=tmp_path)
    assert status == 200 and '"path": "/echo"' in body, body


def test_sdk_mutual_tlsca_that_is_not_a_certificate_refuses_the_bind(edge, account, agents):
    cred = _credential(account)
    agent = agents(
        edge,
        cred["token"],
        [{"proto": "http", "options": {"mutual_tlsca": ["not a certificate"]}}],
    )
    events = agent.start()
    errors = [e for e in events if e["event"] == "error" and e["stage"] == "bind"]
    assert errors and "ERR_NGROK_1602" in " ".join(errors[0]["args"]), events
