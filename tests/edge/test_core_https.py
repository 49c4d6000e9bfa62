"""The public HTTPS listener in the compiled core (edge_core/src/https.rs, edge/fast_path.py),
through the official Python SDK as a process and Python's ssl as the client: a plain route's
connections are terminated by the core with the name's certificate and their requests served
there, over HTTP/1.1 or HTTP/2 (edge_core/src/h2front.rs: each stream as an HTTP/1.1
request); a name without a route goes to Python untouched; a request the core does not serve
on a connection it terminated goes to Python over the plaintext bridge with the handshake's
facts (on HTTP/2, that stream alone), and a Host that requires more of a handshake is
misdirected there."""

import http.client
import json
import socket
import ssl

import h2.config
import h2.connection
import h2.events
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from stacks.agents import SdkAgent
from stacks.certs import key_pem, make_ca, make_client_cert, pem
from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_core_http import _handed, _served
from tests.edge.support import bound, credential, host as host_of, wait


def _connect(edge, sni, alpn=("http/1.1",)) -> ssl.SSLSocket:
    """A TLS connection to the HTTPS listener for ``sni``, the edge's CA trusted (the name
    checked against the certificate)."""
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    raw = socket.create_connection(("127.0.0.1", edge.https_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname=sni)


def _request(conn, host, path="/echo"):
    """One keep-alive GET on ``conn``: (status, headers, body)."""
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    resp = http.client.HTTPResponse(conn)
    resp.begin()
    body = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


@pytest.fixture(scope="module")
def plain(edge, api):
    """An endpoint with no policy or options: a plain route on both listeners."""
    agent = SdkAgent(edge, credential(api.new_account())["token"], [{"proto": "http"}])
    host = host_of(bound(agent.start())[0]["url"])
    yield host
    agent.stop()


def _until_core_serves(edge, host):
    """The routes are pushed a moment after the bind: wait until a new connection's request
    is the core's."""

    def served_one():
        before = _served(edge)
        with _connect(edge, host) as conn:
            assert _request(conn, host)[0] == 200
        return _served(edge) > before

    assert wait(served_one)


def test_a_plain_routes_https_requests_are_served_by_the_core_with_its_certificate(edge, plain):
    _until_core_serves(edge, plain)
    served, handed = _served(edge), _handed(edge)
    with _connect(edge, plain) as conn:  # the name's certificate: verified by the client
        assert conn.version() == "TLSv1.3"
        assert conn.selected_alpn_protocol() == "http/1.1"
        for i in range(10):
            status, _, body = _request(conn, plain, f"/echo?i={i}")
            assert status == 200
            seen = json.loads(body)
            assert seen["path"] == f"/echo?i={i}"
            headers = {k.lower(): v for k, v in seen["headers"].items()}
            assert headers["x-forwarded-proto"] == "https"
            assert headers["x-forwarded-host"] == plain
    # all ten the core's, none handed to Python (both in one message: a miscount says which)
    assert (_served(edge) - served, _handed(edge) - handed) == (10, 0)
    # TLS 1.2 too (the edge's minimum)
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=plain) as conn:
            assert conn.version() == "TLSv1.2"
            assert _request(conn, plain)[0] == 200
    assert _served(edge) - served == 11


def _h2_exchanges(conn, requests, body=None):
    """``requests`` ((authority, path) each) sent at once as streams of a new HTTP/2
    connection on the TLS connection ``conn`` (python-hyper's h2 as the client), each a POST
    of ``body`` when given: their answers in order, (status, headers, body, trailers)
    each."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    ids, pending = [], {}
    for authority, path in requests:
        sid = client.get_next_available_stream_id()
        method = "POST" if body is not None else "GET"
        client.send_headers(
            sid,
            [
                (":method", method),
                (":scheme", "https"),
                (":authority", authority),
                (":path", path),
            ],
            end_stream=body is None,
        )
        if body is not None:
            pending[sid] = body
        ids.append(sid)

    def send_bodies():  # as the windows let them through
        for sid, rest in list(pending.items()):
            room = min(client.local_flow_control_window(sid), client.max_outbound_frame_size)
            while rest and room > 0:
                client.send_data(sid, rest[:room])
                rest = rest[room:]
                room = min(client.local_flow_control_window(sid), client.max_outbound_frame_size)
            pending[sid] = rest
            if not rest:
                client.end_stream(sid)
                del pending[sid]

    send_bodies()
    conn.sendall(client.data_to_send())
    answers = {sid: [0, {}, b"", {}] for sid in ids}
    open_ids = set(ids)
    while open_ids:
        data = conn.recv(65536)
        assert data, f"the connection ended with streams {open_ids} open"
        for event in client.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                fields = {k.decode(): v.decode() for k, v in event.headers}
                answers[event.stream_id][0] = int(fields.pop(":status"))
                answers[event.stream_id][1] = fields
            elif isinstance(event, h2.events.DataReceived):
                answers[event.stream_id][2] += event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                answers[event.stream_id][3] = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                open_ids.discard(event.stream_id)
        send_bodies()
        conn.sendall(client.data_to_send())
    return [tuple(answers[sid]) for sid in ids]


def test_an_http2_clients_streams_are_served_by_the_core(edge, plain):
    """ALPN h2 on a plain route's name: the core terminates it and serves each stream by
    the HTTP/1.1 path (the records, the forwarded fields), several streams at once, none
    handed to Python; a request body without a length goes on chunked."""
    _until_core_serves(edge, plain)
    served, handed = _served(edge), _handed(edge)
    with _connect(edge, plain, alpn=("h2", "http/1.1")) as conn:
        assert conn.selected_alpn_protocol() == "h2"
        answers = _h2_exchanges(conn, [(plain, f"/echo?i={i}") for i in range(10)])
    with _connect(edge, plain, alpn=("h2", "http/1.1")) as conn:
        sent = bytes(range(256)) * 400  # 100 KiB: past the stream's 64 KiB window
        posted = _h2_exchanges(conn, [(plain, "/upload"), (plain, "/reflect?chunks=4")], sent)
    for i, (status, fields, body, _) in enumerate(answers):
        assert status == 200, (status, body)
        seen = json.loads(body)
        assert seen["path"] == f"/echo?i={i}"
        headers = {k.lower(): v for k, v in seen["headers"].items()}
        assert headers["x-forwarded-proto"] == "https"
        assert headers["host"] == plain
        assert "connection" not in fields and "transfer-encoding" not in fields
    (status, _, uploaded, _), (reflected_status, fields, reflected, _) = posted
    assert status == 200 and json.loads(uploaded)["length"] == len(sent), uploaded
    # the upstream saw no length (sent chunked), answered in pieces (chunked, de-chunked here)
    assert reflected_status == 200 and reflected == sent
    assert fields["x-request-length"] == "none"
    assert (_served(edge) - served, _handed(edge) - handed) == (12, 0)


def test_another_host_on_the_cores_http2_connection_is_pythons_for_its_stream_alone(
    edge, api, plain
):
    """A stream for a name the core has no route for (here: a policy that rewrites
    server-sent events beside a response body's read: not decidable) goes to Python over the
    bridge as an HTTP/1.1 request with the handshake's facts; the connection's other streams
    stay the core's."""
    policy = {
        "on_http_response": [
            {
                "actions": [
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
    }
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}],
    )
    other = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, plain)
        served, handed = _served(edge), _handed(edge)
        with _connect(edge, plain, alpn=("h2",)) as conn:
            answers = _h2_exchanges(conn, [(plain, "/echo"), (other, "/echo"), (plain, "/echo")])
        assert [a[0] for a in answers] == [200, 200, 200], answers
        assert json.loads(answers[1][2])["path"] == "/echo"
        assert (_served(edge) - served, _handed(edge) - handed) == (2, 1)
    finally:
        agent.stop()


def test_another_host_on_the_cores_connection_goes_to_python_with_the_handshakes_facts(
    edge, api, plain
):
    policy = {
        "on_http_response": [
            {
                "actions": [
                    {
                        "type": "add-headers",
                        "config": {
                            "headers": {
                                "x-tls": "${conn.tls.version} ${conn.tls.cipher_suite}",
                                "x-client": "${conn.client_ip}",
                            }
                        },
                    },
                    {
                        "type": "response-body-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    },
                ]
            }
        ],
        # events rewritten beside the body's read: the route stays Python's (edge/decided.py)
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"from": "no-such-text", "to": "x"}]},
                    }
                ]
            }
        ],
    }
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}],
    )
    other = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, plain)
        # the policy's host on its own connection: Python's TLS from the start
        with _connect(edge, other) as conn:
            status, direct, _ = _request(conn, other)
        assert status == 200 and direct["x-client"] == "127.0.0.1"
        handed = _handed(edge)
        with _connect(edge, plain) as conn:
            assert _request(conn, plain)[0] == 200  # the core's
            status, bridged, body = _request(conn, other)  # Python's, over the bridge
            assert status == 200 and json.loads(body)["path"] == "/echo"
            assert (bridged["x-tls"], bridged["x-client"]) == (direct["x-tls"], "127.0.0.1")
            assert _request(conn, plain)[0] == 200  # the rest of the connection is Python's
        assert _handed(edge) == handed + 1
    finally:
        agent.stop()


def test_a_host_requiring_a_client_certificate_is_misdirected_on_the_cores_connection(
    edge, api, plain
):
    allowed = make_ca("core bridge clients")
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [{"proto": "http", "options": {"mutual_tlsca": [pem(allowed[1])]}}],
    )
    protected = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, plain)
        with _connect(edge, plain) as conn:
            assert _request(conn, plain)[0] == 200
            status, _, body = _request(conn, protected)
        assert status == 421 and json.loads(body)["error_code"] == "ERR_NGROK_3002"
    finally:
        agent.stop()


def _connect_with(edge, sni, cert, tmp_path) -> ssl.SSLSocket:
    """:func:`_connect` presenting ``cert`` (make_client_cert's pair; None: no certificate)."""
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    ctx.set_alpn_protocols(["http/1.1"])
    if cert is not None:
        chain, key = tmp_path / "client.pem", tmp_path / "client.key"
        chain.write_bytes(cert[0])
        key.write_bytes(cert[1])
        ctx.load_cert_chain(str(chain), str(key))
    raw = socket.create_connection(("127.0.0.1", edge.https_port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname=sni)


def _refused(edge, host, cert, tmp_path) -> bool:
    """The handshake fails, or the connection ends without an answer (TLS 1.3: the client's
    certificate is checked after the client's side of the handshake is done)."""
    try:
        with _connect_with(edge, host, cert, tmp_path) as conn:
            _request(conn, host)
    except (ssl.SSLError, OSError, http.client.HTTPException):
        return True
    return False


def test_a_name_requiring_a_client_certificate_is_the_cores_and_its_policy_reads_it(
    edge, api, tmp_path
):
    """A name whose endpoint asks for client certificates (the SDK's ``mutual_tlsca``) is
    terminated by the core with a configuration that requires one from its CA: a client
    without one, or with another CA's, fails the handshake there (nothing handed to
    Python); a verified client's requests are the core's, and a decided policy reading
    ``conn.tls.client.*`` gets the certificate the core verified."""
    ca = make_ca("core mtls clients")
    policy = {
        "on_http_request": [
            {
                "expressions": ["conn.tls.client.subject.common_name == 'admin'"],
                "actions": [
                    {
                        "type": "custom-response",
                        "config": {
                            "status_code": 200,
                            "body": "cn ${conn.tls.client.subject.common_name}",
                        },
                    }
                ],
            }
        ]
    }
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [
            {
                "proto": "http",
                "options": {"mutual_tlsca": [pem(ca[1])], "traffic_policy": [json.dumps(policy)]},
            }
        ],
    )
    host = host_of(bound(agent.start())[0]["url"])
    admin, erin = make_client_cert(ca, "admin"), make_client_cert(ca, "erin")
    try:

        def served_one():
            before = _served(edge)
            with _connect_with(edge, host, admin, tmp_path) as conn:
                assert _request(conn, host)[:3:2] == (200, b"cn admin")
            return _served(edge) > before

        assert wait(served_one)
        served, handed = _served(edge), _handed(edge)
        with _connect_with(edge, host, erin, tmp_path) as conn:
            for _ in range(3):  # no rule matches: on to the agent
                status, _, body = _request(conn, host)
                assert status == 200 and json.loads(body)["path"] == "/echo", body
        with _connect_with(edge, host, admin, tmp_path) as conn:
            assert _request(conn, host)[:3:2] == (200, b"cn admin")
        assert _refused(edge, host, None, tmp_path)
        assert _refused(edge, host, make_client_cert(make_ca("strangers"), "admin"), tmp_path)
        assert (_served(edge) - served, _handed(edge) - handed) == (4, 0)
    finally:
        agent.stop()


def test_the_cores_client_certificate_check_agrees_with_openssls(edge, api, tmp_path):
    """The cases where rustls' own verifier disagreed with OpenSSL (which checked client
    certificates on the Python path) and Go (the hosted service's): a P-521 client key and a
    self-signed certificate trusted as its own CA are accepted, a certificate whose CA has
    expired is refused; all on the core's TLS (edge_core/src/client_cert.rs), none handed to
    Python."""
    ca, expired = make_ca("p-521 clients"), make_ca("expired clients", expired=True)
    own_key, own = make_ca("its own CA")
    p521 = make_client_cert(ca, "p521", curve=ec.SECP521R1())
    itself = (pem(own).encode(), key_pem(own_key).encode())
    agent = SdkAgent(
        edge,
        credential(api.new_account())["token"],
        [
            {"proto": "http", "options": {"mutual_tlsca": [pem(c)]}}
            for c in (ca[1], own, expired[1])
        ],
    )
    hosts = [host_of(t["url"]) for t in bound(agent.start())]
    try:

        def served(host, cert):
            before = _served(edge)
            with _connect_with(edge, host, cert, tmp_path) as conn:
                assert _request(conn, host)[0] == 200
            return _served(edge) > before

        assert wait(lambda: served(hosts[0], p521))
        assert wait(lambda: served(hosts[1], itself))
        handed = _handed(edge)
        assert served(hosts[0], p521) and served(hosts[1], itself)
        assert _refused(edge, hosts[2], make_client_cert(expired, "late"), tmp_path)
        assert _handed(edge) == handed
    finally:
        agent.stop()


def test_a_name_without_a_route_is_pythons_from_its_clienthello(edge):
    handed, name = _handed(edge), f"no-such-endpoint.{BASE_DOMAIN}"
    with _connect(edge, name) as conn:  # Python's TLS, with the local CA's certificate
        status, _, body = _request(conn, name)
    assert status == 404 and b"ERR_NGROK_3200" in body
    assert _handed(edge) == handed + 1


def test_a_clienthello_without_a_name_is_served_by_the_core_routed_by_host(edge, plain):
    """As edge/tls.py does for such a client (one given an address): the base domain's
    certificate, each request routed by its Host."""
    _until_core_serves(edge, plain)
    served = _served(edge)
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as conn:  # no server_hostname: no SNI
            cert = conn.getpeercert()
            names = [value for kind, value in cert["subjectAltName"] if kind == "DNS"]
            assert BASE_DOMAIN in names or f"*.{BASE_DOMAIN}" in names, names
            assert _request(conn, plain)[0] == 200
    assert _served(edge) == served + 1


def test_a_request_the_core_served_is_in_the_inspector_with_its_heads(edge, api):
    """The core's records reach the inspector as Python's do (the heads read from the core's
    Exchange only for the records made): method, target, host, status, headers, the client's
    address, scheme https."""
    account = api.new_account()
    url = bound(SdkAgent(edge, credential(account)["token"], [{"proto": "http"}]).start())[0][
        "url"
    ]
    host = host_of(url)
    endpoint_id = [
        e["id"]
        for e in account.admin.get("/endpoints").json["endpoints"]
        if e["public_url"] == url
    ][0]
    _until_core_serves(edge, host)
    served = _served(edge)
    with _connect(edge, host) as conn:
        port = conn.getsockname()[1]
        conn.sendall(f"GET /echo?core=1 HTTP/1.1\r\nHost: {host}\r\nX-Trace: abc\r\n\r\n".encode())
        resp = http.client.HTTPResponse(conn)
        resp.begin()
        assert resp.status == 200 and resp.read()
    assert _served(edge) == served + 1

    def captured():
        listed = account.admin.get(f"/endpoints/{endpoint_id}/captured_requests").json
        return [r for r in listed["captured_requests"] if r["target"] == "/echo?core=1"]

    assert wait(captured)
    record = captured()[0]
    assert (record["method"], record["status_code"], record["host"]) == ("GET", 200, host)
    assert record["client_addr"] == f"127.0.0.1:{port}"
    assert record["request_headers"]["x-trace"] == ["abc"]
    assert record["response_headers"]["content-type"]


def test_the_cores_http2_connections_are_told_goaway_when_the_edge_stops(another_edge, api):
    """As Python's HTTP/2 connections are (test_http2_attacks.py): the edge's stop closes the
    core's HTTPS listener, and its HTTP/2 connections get GOAWAY NO_ERROR."""
    from tests.edge.test_http2_attacks import PREFACE, goaway_code, read_frames
    from hyperframe.frame import SettingsFrame

    edge = another_edge()
    agent = SdkAgent(edge, credential(api.new_account())["token"], [{"proto": "http"}])
    host = host_of(bound(agent.start())[0]["url"])
    try:
        _until_core_serves(edge, host)
        handed = _handed(edge)
        sock = _connect(edge, host, alpn=("h2",))
        sock.sendall(PREFACE + SettingsFrame(0).serialize())
        assert any(f != "closed" and f[0] == 0x4 for f in read_frames(sock, 1))  # SETTINGS
        assert _handed(edge) == handed  # the core's connection
        edge.process.terminate()
        frames = read_frames(sock, 10)
        sock.close()
        assert goaway_code(frames) == 0, frames  # NO_ERROR
    finally:
        agent.stop()
        edge.stop()
