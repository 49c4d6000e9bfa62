"""A cloud endpoint's URL names the port the edge serves it on, as an agent endpoint's does
(the edge writes those with its public port): the API reads the edge's public ports from the
settings both read (EDGE_PUBLIC_<SCHEME>_PORT, else EDGE_<SCHEME>_PORT; EDGE_PUBLIC_URL_PORTS=0:
never). In process, with the settings' environment set per test; the same through `make run`
and Chromium in tests/dashboard/test_resource_pages.py."""

from urllib.parse import quote

import pytest

from chalicelib.core import config, errors, ids
from tests.support.contract import assert_error

BASE = "tunnels.localhost"
POLICY = "on_http_request: [{actions: [{type: deny}]}]"
TCP_POLICY = "on_tcp_connect: [{actions: [{type: deny}]}]"


@pytest.fixture
def ports(monkeypatch):
    """``ports(**env)``: the edge's port settings are ``env`` and nothing else (until the
    next call; reset after the test)."""

    def set_env(**env: str) -> None:
        for name in (
            "EDGE_PUBLIC_HTTP_PORT",
            "EDGE_PUBLIC_HTTPS_PORT",
            "EDGE_HTTP_PORT",
            "EDGE_HTTPS_PORT",
            "EDGE_PUBLIC_URL_PORTS",
        ):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        config.reset_settings()

    yield set_env
    monkeypatch.undo()
    config.reset_settings()


@pytest.fixture
def admin(inprocess_api):
    return inprocess_api.new_account().admin


def _host() -> str:
    return f"p{ids.new_id('x')[-10:].lower()}.{BASE}"


def _create(admin, url, policy=POLICY):
    resp = admin.post("/endpoints", {"url": url, "type": "cloud", "traffic_policy": policy})
    assert resp.status == 201, resp
    return resp.json


def _shown(ep):
    return ep["url"], ep["public_url"], ep["port"], ep["hostport"]


def test_the_edges_listener_ports_are_in_cloud_endpoint_urls(ports, admin):
    ports(EDGE_HTTP_PORT="8080", EDGE_HTTPS_PORT="8443")
    host = _host()
    ep = _create(admin, f"https://{host}")
    want = (f"https://{host}:8443", f"https://{host}:8443", 8443, f"{host}:8443")
    assert _shown(ep) == want
    assert (ep["host"], ep["scheme"]) == (host, "https")
    assert _shown(admin.get(f"/endpoints/{ep['id']}").json) == want
    [listed] = [e for e in admin.get("/endpoints").json["endpoints"] if e["id"] == ep["id"]]
    assert _shown(listed) == want
    # the list's url filter compares the URL as shown
    found = admin.get(f"/endpoints?url={quote(f'https://{host}:8443')}").json["endpoints"]
    assert [e["id"] for e in found] == [ep["id"]]
    plain = _host()
    assert _shown(_create(admin, f"http://{plain}")) == (
        f"http://{plain}:8080",
        f"http://{plain}:8080",
        8080,
        f"{plain}:8080",
    )


def test_a_public_port_is_named_instead_of_the_listener_and_443_is_not(ports, admin):
    ports(EDGE_HTTPS_PORT="8443", EDGE_PUBLIC_HTTPS_PORT="9443")
    host = _host()
    assert _shown(_create(admin, f"https://{host}"))[0] == f"https://{host}:9443"
    ports(EDGE_HTTPS_PORT="8443", EDGE_PUBLIC_HTTPS_PORT="443")  # a load balancer on 443
    assert _shown(admin.get("/endpoints").json["endpoints"][0]) == (
        f"https://{host}",
        f"https://{host}",
        443,
        f"{host}:443",
    )
    ports(EDGE_HTTPS_PORT="8443", EDGE_PUBLIC_URL_PORTS="0")  # never a port
    assert admin.get("/endpoints").json["endpoints"][0]["url"] == f"https://{host}"


def test_without_the_edges_ports_the_schemes_own(ports, admin):
    ports()  # a deployed API: not told where the edge listens
    host = _host()
    assert _shown(_create(admin, f"https://{host}")) == (
        f"https://{host}",
        f"https://{host}",
        443,
        f"{host}:443",
    )


def test_tcp_and_internal_urls_keep_their_own_form(ports, admin):
    ports(EDGE_HTTPS_PORT="8443")
    addr = admin.post("/reserved_addrs", {}).json["addr"]
    tcp = _create(admin, f"tcp://{addr}", policy=TCP_POLICY)
    assert tcp["url"] == f"tcp://{addr}" and tcp["hostport"] == addr
    internal = _create(admin, "https://api.internal")
    assert internal["url"] == "https://api.internal"


def test_the_url_as_shown_is_accepted_back_and_other_ports_are_refused(ports, admin):
    """A client that sends back the URL it read (with the edge's port) is understood; the
    port is not stored (the URL stays the host's, whatever port the edge moves to)."""
    ports(EDGE_HTTPS_PORT="8443")
    host, other = _host(), _host()
    ep = _create(admin, f"https://{host}:8443")
    assert ep["url"] == f"https://{host}:8443"
    resp = admin.patch(f"/endpoints/{ep['id']}", {"url": f"https://{other}:8443"})
    assert resp.status == 200 and resp.json["url"] == f"https://{other}:8443", resp
    ports()  # the edge moved behind 443: the same endpoint without a port
    assert admin.get(f"/endpoints/{ep['id']}").json["url"] == f"https://{other}"
    ports(EDGE_HTTPS_PORT="8443")
    resp = admin.post(
        "/endpoints",
        {"url": f"https://{_host()}:9999", "type": "cloud", "traffic_policy": POLICY},
    )
    assert_error(resp, errors.InvalidField, field="url")
    assert resp.json["msg"] == (
        "Field 'url' may only use the scheme's own port (443) or the port the edge serves it "
        "on (8443), got 9999"
    )


@pytest.mark.parametrize(
    "env, want",
    [
        ({}, (80, 443)),
        ({"EDGE_HTTP_PORT": "8080", "EDGE_HTTPS_PORT": "8443"}, (8080, 8443)),
        ({"EDGE_HTTPS_PORT": "8443", "EDGE_PUBLIC_HTTPS_PORT": "1"}, (80, 1)),
        ({"EDGE_HTTPS_PORT": "65535"}, (80, 65535)),
        ({"EDGE_HTTPS_PORT": "8443", "EDGE_PUBLIC_URL_PORTS": "0"}, (80, 443)),
        ({"EDGE_HTTPS_PORT": " "}, (80, 443)),
    ],
)
def test_edge_public_port_setting(env, want):
    assert (config.edge_public_port(env, "http"), config.edge_public_port(env, "https")) == want


@pytest.mark.parametrize(
    "env, msg",
    [
        ({"EDGE_HTTPS_PORT": "0"}, "EDGE_HTTPS_PORT must be a port from 1 to 65535, got 0"),
        (
            {"EDGE_PUBLIC_HTTPS_PORT": "65536"},
            "EDGE_PUBLIC_HTTPS_PORT must be a port from 1 to 65535, got 65536",
        ),
        ({"EDGE_HTTPS_PORT": "x"}, "EDGE_HTTPS_PORT must be a port number, got 'x'"),
    ],
)
def test_edge_public_port_refuses_what_is_not_a_port(env, msg):
    with pytest.raises(ValueError) as exc:
        config.edge_public_port(env, "https")
    assert str(exc.value) == msg
