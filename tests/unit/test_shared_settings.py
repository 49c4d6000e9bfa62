"""The settings both planes read (EDGE_TCP_PORTS, EDGE_TCP_HOST, BASE_DOMAIN) come from one
reader, chalicelib.core.config: the edge's settings equal the API's for every form of them,
and a value the reader refuses stops the edge with the reader's reason. The edge's public
ports, read by both, make the same URLs."""

import pytest

from chalicelib.core import config as core_config
from edge import config as edge_config


@pytest.fixture
def env(monkeypatch):
    def set_env(**values):
        for name in ("EDGE_TCP_PORTS", "EDGE_TCP_HOST", "BASE_DOMAIN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        core_config.reset_settings()

    yield set_env
    core_config.reset_settings()


@pytest.mark.parametrize(
    "values, ports, host",
    [
        ({}, (20000, 20099), "tunnels.localhost"),
        ({"EDGE_TCP_PORTS": " 30000 - 30009 "}, (30000, 30009), "tunnels.localhost"),
        ({"EDGE_TCP_HOST": "TCP.Example.COM"}, (20000, 20099), "tcp.example.com"),
        ({"EDGE_TCP_HOST": "", "BASE_DOMAIN": "Edge.Test"}, (20000, 20099), "edge.test"),
    ],
)
def test_the_edge_reads_the_shared_settings_as_the_api_does(env, values, ports, host):
    env(**values)
    api, edge = core_config.get_settings(), edge_config.load()
    assert (api.edge_tcp_ports, api.edge_tcp_host) == (ports, host)
    assert (edge.tcp_ports, edge.tcp_host, edge.base_domain) == (ports, host, api.base_domain)


@pytest.mark.parametrize("raw", ["20000", "9-8", "0-10", "a-b", "1-65536"])
def test_a_port_range_the_reader_refuses_stops_the_edge_with_its_reason(env, raw):
    env(EDGE_TCP_PORTS=raw)
    with pytest.raises(SystemExit, match="EDGE_TCP_PORTS"):
        edge_config.load()


@pytest.mark.parametrize(
    "values",
    [
        {"EDGE_HTTP_PORT": "8080", "EDGE_HTTPS_PORT": "8443"},
        {"EDGE_HTTP_PORT": "80", "EDGE_HTTPS_PORT": "443"},
        {
            "EDGE_HTTPS_PORT": "8443",
            "EDGE_PUBLIC_HTTPS_PORT": "443",
            "EDGE_PUBLIC_HTTP_PORT": "81",
        },
        {"EDGE_HTTPS_PORT": "8443", "EDGE_HTTP_PORT": "8080", "EDGE_PUBLIC_URL_PORTS": "0"},
    ],
)
def test_cloud_endpoints_urls_name_the_port_the_edge_names(monkeypatch, env, values):
    """Given the edge's listeners, the API shows a cloud endpoint's URL as the edge writes an
    agent endpoint's (chalicelib.cloud_endpoints.public_url, edge.config http_url)."""
    from chalicelib import cloud_endpoints

    for scheme in ("HTTP", "HTTPS"):
        monkeypatch.delenv(f"EDGE_{scheme}_PORT", raising=False)
        monkeypatch.delenv(f"EDGE_PUBLIC_{scheme}_PORT", raising=False)
    monkeypatch.delenv("EDGE_PUBLIC_URL_PORTS", raising=False)
    env(**values)
    edge = edge_config.load()
    for scheme in ("http", "https"):
        assert cloud_endpoints.public_url(f"{scheme}://a.example.com") == edge.http_url(
            "a.example.com", scheme
        )
