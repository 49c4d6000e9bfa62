"""PROXY protocol towards the agent (edge/proxyproto.py): the Python SDK's ``proxy_proto`` as
a process; its upstream (an echo) gets the PROXY header first, naming the public client."""

import socket

import pytest

from chalicelib.core import binding
from edge import proxyproto
from tests.edge.test_edge_sdk import _bound, _credential


@pytest.mark.parametrize("version", ["1", "2"])
def test_tcp_endpoint_gets_the_proxy_header(edge, account, agents, version):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "tcp", "options": {"proxy_proto": [version]}}],
    )
    url = _bound(agent.start())[0]["url"]
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        client = sock.getsockname()
        sock.sendall(b"payload")
        expected = (
            proxyproto.header(int(version), f"{client[0]}:{client[1]}", f"127.0.0.1:{port}")
            + b"payload"
        )
        got = b""
        while len(got) < len(expected):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    assert got == expected
    if version == "1":
        assert got.startswith(f"PROXY TCP4 {client[0]} 127.0.0.1 {client[1]} {port}\r\n".encode())


def test_headers_v1_and_v2_by_the_spec():
    assert (
        proxyproto.header(1, "10.0.0.1:5000", "10.0.0.2:443")
        == b"PROXY TCP4 10.0.0.1 10.0.0.2 5000 443\r\n"
    )
    v2 = proxyproto.header(2, "10.0.0.1:5000", "10.0.0.2:443")
    assert v2 == proxyproto.V2_SIGNATURE + bytes(
        [0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x13, 0x88, 0x01, 0xBB]
    )
    assert (  # a mapped address as inet_ntop writes it (the spec's textual form)
        proxyproto.header(1, "[::1]:5000", "127.0.0.1:80")
        == b"PROXY TCP6 ::1 ::ffff:127.0.0.1 5000 80\r\n"
    )
    assert proxyproto.header(2, "[::1]:1", "[::2]:2")[13] == 0x21
    for bad in (3, "x", True, -1):
        with pytest.raises(binding.Refused):
            proxyproto.version_of({"ProxyProto": bad})
    assert proxyproto.version_of({"ProxyProto": 0, "Addr": "a"}) == (0, {"Addr": "a"})


@pytest.mark.parametrize("version", ["1", "2"])
def test_an_http_endpoints_requests_carried_by_the_core_get_the_header_first(
    edge, account, agents, version
):
    """An HTTP endpoint with ``proxy_proto``: its route is the compiled core's, which writes
    the header (edge_core/src/proxyproto.rs) after the proxy stream's own and before the
    request; the upstream (the test's, recording what it got) reads the public client."""
    import threading
    import time

    from tests.edge import support

    got, listener = [], socket.create_server(("127.0.0.1", 0))

    def upstream():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                # a version 2 header starts with CRLF CRLF: read to the request head's end
                data = b""
                while not (b" HTTP/1.1\r\n" in data and data.endswith(b"\r\n\r\n")):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                got.append(data)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                )

    threading.Thread(target=upstream, daemon=True).start()
    agent = agents(
        edge,
        _credential(account)["token"],
        [
            {
                "proto": "http",
                "upstream_addr": f"127.0.0.1:{listener.getsockname()[1]}",
                "options": {"proxy_proto": [version]},
            }
        ],
    )
    host = support.host(_bound(agent.start())[0]["url"])

    def served() -> float:
        return support.metric(edge.metrics(), "edge_core_http_requests_total")

    try:

        def by_the_core():
            before = served()
            assert edge.http("GET", host, "/first").text == "ok"
            time.sleep(0.2)
            return served() > before

        assert support.wait(by_the_core)
        with socket.create_connection(("127.0.0.1", edge.http_port), timeout=10) as sock:
            client = sock.getsockname()
            sock.sendall(f"GET /pp HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(b"ok"):
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
        header = proxyproto.header(
            int(version), f"{client[0]}:{client[1]}", f"127.0.0.1:{edge.http_port}"
        )
        mine = [g for g in got if b"GET /pp " in g]
        assert len(mine) == 1 and mine[0].startswith(header + b"GET /pp HTTP/1.1\r\n"), mine
    finally:
        listener.close()
