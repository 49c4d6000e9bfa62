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
    assert (
        proxyproto.header(1, "[::1]:5000", "127.0.0.1:80")
        == b"PROXY TCP6 ::1 ::ffff:7f00:1 5000 80\r\n"
    )
    assert proxyproto.header(2, "[::1]:1", "[::2]:2")[13] == 0x21
    for bad in (3, "x", True, -1):
        with pytest.raises(binding.Refused):
            proxyproto.version_of({"ProxyProto": bad})
    assert proxyproto.version_of({"ProxyProto": 0, "Addr": "a"}) == (0, {"Addr": "a"})
