"""The reference client (``ngrok-api``) against the running service, over HTTP: backends, IP
policies and rules, TCP edges with modules, HTTPS edges, routes and route modules."""

import json

import ngrok
import pytest
from ngrok.datatypes import (
    EndpointBackendMutate,
    EndpointIPPolicyMutate,
    EndpointResponseHeaders,
    EndpointTrafficPolicy,
    EndpointUserAgentFilter,
)

from chalicelib.core import ids

POLICY = json.dumps({"on_tcp_connect": [{"name": "r", "actions": [{"type": "deny"}]}]})


@pytest.fixture
def client(http_api):
    account = http_api.new_account()
    return ngrok.Client(account.admin.token, base_url=http_api.base_url)


def test_backends_with_the_reference_client(client):
    created = client.backends.http_response.create(
        description="d", body="hi", headers={"X-A": "1"}, status_code=201
    )
    assert created.status_code == 201 and created.headers == {"x-a": "1"}
    plain = client.backends.http_response.create()
    assert plain.headers is None and plain.status_code == 200
    updated = client.backends.http_response.update(created.id, metadata="m")
    assert updated.metadata == "m" and updated.body == "hi" and updated.description == "d"
    assert client.backends.http_response.get(created.id).metadata == "m"
    listed = [b.id for b in client.backends.http_response.list()]
    assert listed == [plain.id, created.id]
    client.backends.http_response.delete(plain.id)
    with pytest.raises(ngrok.NotFoundError):
        client.backends.http_response.get(plain.id)


def test_ip_policies_and_rules_with_the_reference_client(client):
    policy = client.ip_policies.create(description="office")
    assert policy.description == "office" and policy.metadata == ""
    rule = client.ip_policy_rules.create(
        cidr="203.0.113.0/24", ip_policy_id=policy.id, action="allow"
    )
    assert rule.ip_policy.id == policy.id and rule.action == "allow"
    assert client.ip_policy_rules.update(rule.id, cidr="10.0.0.0/8").cidr == "10.0.0.0/8"
    assert [r.id for r in client.ip_policy_rules.list()] == [rule.id]
    assert client.ip_policies.update(policy.id, metadata="x").description == "office"
    with pytest.raises(ngrok.Error) as refused:
        client.ip_policies.delete(policy.id)
    assert refused.value.http_status_code == 409
    client.ip_policy_rules.delete(rule.id)
    client.ip_policies.delete(policy.id)
    assert list(client.ip_policies.list()) == []


def test_tcp_edges_with_the_reference_client(client):
    backend = client.backends.http_response.create(body="x")
    policy = client.ip_policies.create()
    hostport = client.reserved_addrs.create().addr
    edge = client.edges.tcp.create(
        description="db",
        hostports=[hostport],
        backend=EndpointBackendMutate(client, {"backend_id": backend.id}),
        ip_restriction=EndpointIPPolicyMutate(client, {"ip_policy_ids": [policy.id]}),
        traffic_policy=EndpointTrafficPolicy(client, {"enabled": True, "value": POLICY}),
    )
    assert edge.hostports == [hostport]
    assert edge.backend.enabled and edge.backend.backend.id == backend.id
    assert [p.id for p in edge.ip_restriction.ip_policies] == [policy.id]
    assert edge.traffic_policy.value == POLICY
    updated = client.edges.tcp.update(edge.id, metadata="m")
    assert updated.metadata == "m" and updated.backend.backend.id == backend.id
    assert updated.hostports == [hostport] and updated.traffic_policy.value == POLICY
    modules = client.edge_modules
    got = modules.tcp_edge_backend.get(edge.id)
    assert got.backend.id == backend.id
    replaced = modules.tcp_edge_backend.replace(
        edge.id, EndpointBackendMutate(client, {"enabled": False, "backend_id": backend.id})
    )
    assert replaced.enabled is False
    modules.tcp_edge_ip_restriction.delete(edge.id)
    with pytest.raises(ngrok.NotFoundError):
        modules.tcp_edge_ip_restriction.get(edge.id)
    tp = modules.tcp_edge_traffic_policy.replace(
        edge.id, EndpointTrafficPolicy(client, {"enabled": False, "value": POLICY})
    )
    assert tp.enabled is False
    assert [e.id for e in client.edges.tcp.list()] == [edge.id]
    client.edges.tcp.delete(edge.id)
    client.backends.http_response.delete(backend.id)
    client.ip_policies.delete(policy.id)


def test_https_edges_routes_and_modules_with_the_reference_client(client):
    edge = client.edges.https.create(description="web")
    assert edge.routes == [] and edge.mutual_tls is None and edge.tls_termination is None
    route = client.edges.https_routes.create(
        edge.id,
        match_type="path_prefix",
        match="/",
        user_agent_filter=EndpointUserAgentFilter(
            client, {"enabled": True, "allow": [], "deny": ["curl"]}
        ),
    )
    assert route.edge_id == edge.id and route.user_agent_filter.deny == ["curl"]
    assert route.response_headers is None and route.backend is None
    # the client sends match_type="" and match="" unless told otherwise
    updated = client.edges.https_routes.update(edge.id, route.id, metadata="m")
    assert updated.match == "/" and updated.match_type == "path_prefix"
    assert updated.user_agent_filter.deny == ["curl"] and updated.metadata == "m"
    modules = client.edge_modules
    rh = modules.https_edge_route_response_headers.replace(
        edge.id,
        route.id,
        EndpointResponseHeaders(
            client, {"enabled": True, "add": {"X-A": "1"}, "remove": ["Server"]}
        ),
    )
    assert rh.add == {"x-a": "1"} and rh.remove == ["server"]
    assert modules.https_edge_route_response_headers.get(edge.id, route.id).add == {"x-a": "1"}
    ua = modules.https_edge_route_user_agent_filter.replace(
        edge.id, route.id, EndpointUserAgentFilter(client, {"allow": ["Mozilla"]})
    )
    assert ua.enabled is True and ua.allow == ["Mozilla"] and ua.deny == []
    modules.https_edge_route_user_agent_filter.delete(edge.id, route.id)
    with pytest.raises(ngrok.NotFoundError):
        modules.https_edge_route_user_agent_filter.get(edge.id, route.id)
    fetched = client.edges.https.get(edge.id)
    assert [r.id for r in fetched.routes] == [route.id]
    assert fetched.routes[0].response_headers.remove == ["server"]
    assert [e.id for e in client.edges.https.list()] == [edge.id]
    assert client.edges.https.update(edge.id, metadata="x").description == "web"
    client.edges.https.delete(edge.id)
    with pytest.raises(ngrok.NotFoundError):
        client.edges.https_routes.get(edge.id, route.id)


# ---- backends edges route to, reserved addresses, CAs, the newer modules -----------------------
def test_routing_backends_with_the_reference_client(client):
    tg = client.backends.tunnel_group.create(description="web", labels={"app": "web"})
    assert tg.labels == {"app": "web"} and tg.tunnels == [] and tg.id.startswith("bkdtg_")
    hr = client.backends.http_response.create(body="sorry", status_code=503)
    fo = client.backends.failover.create(backends=[tg.id, hr.id])
    assert fo.backends == [tg.id, hr.id]
    wt = client.backends.weighted.create(backends={tg.id: 90, hr.id: 10})
    assert wt.backends == {tg.id: 90, hr.id: 10}
    # the client's update sends labels={} / backends=[] / {} unless told: unchanged
    assert client.backends.tunnel_group.update(tg.id, metadata="m").labels == {"app": "web"}
    assert client.backends.failover.update(fo.id, description="d").backends == [tg.id, hr.id]
    assert client.backends.weighted.update(wt.id, metadata="m").backends == {tg.id: 90, hr.id: 10}
    assert client.backends.tunnel_group.update(tg.id, labels={"app": "api"}).labels == {
        "app": "api"
    }
    assert [b.id for b in client.backends.tunnel_group.list()] == [tg.id]
    assert client.backends.failover.get(fo.id).backends == [tg.id, hr.id]
    with pytest.raises(ngrok.Error) as refused:
        client.backends.tunnel_group.delete(tg.id)
    assert refused.value.http_status_code == 409
    client.backends.failover.delete(fo.id)
    client.backends.weighted.delete(wt.id)
    client.backends.tunnel_group.delete(tg.id)
    with pytest.raises(ngrok.NotFoundError):
        client.backends.tunnel_group.get(tg.id)


def test_reserved_addrs_and_tcp_edges_with_the_reference_client(client):
    addr = client.reserved_addrs.create(description="db")
    assert addr.id.startswith("ra_") and addr.description == "db" and ":" in addr.addr
    assert client.reserved_addrs.update(addr.id, metadata="m").metadata == "m"
    assert [a.id for a in client.reserved_addrs.list()] == [addr.id]
    tg = client.backends.tunnel_group.create(labels={"app": "db"})
    edge = client.edges.tcp.create(
        hostports=[addr.addr], backend=EndpointBackendMutate(client, {"backend_id": tg.id})
    )
    assert edge.hostports == [addr.addr] and edge.backend.backend.id == tg.id
    with pytest.raises(ngrok.Error) as refused:
        client.reserved_addrs.delete(addr.id)
    assert refused.value.http_status_code == 409
    with pytest.raises(ngrok.Error) as refused:
        client.edges.tcp.create(hostports=["1.tcp.example.com:12345"])
    assert refused.value.http_status_code == 400
    client.edges.tcp.delete(edge.id)
    client.reserved_addrs.delete(addr.id)
    with pytest.raises(ngrok.NotFoundError):
        client.reserved_addrs.get(addr.id)


def test_https_edge_modules_with_the_reference_client(client):
    from ngrok.datatypes import (
        EndpointMutualTLSMutate,
        EndpointRequestHeaders,
        EndpointTLSTerminationAtEdge,
    )

    from chalicelib.core.config import get_settings
    from tests.functional.test_certificate_authorities import make_cert

    pem, _ = make_cert("Client CA")
    ca = client.certificate_authorities.create(ca_pem=pem, description="clients")
    assert ca.subject_common_name == "Client CA" and ca.ca_pem == pem
    assert [c.id for c in client.certificate_authorities.list()] == [ca.id]
    domain = f"{ids.new_id('x')[-12:].lower()}.example.org"
    client.reserved_domains.create(domain=f"*.{domain}")
    hostport = f"www.{domain}:443"
    edge = client.edges.https.create(
        hostports=[hostport],
        tls_termination=EndpointTLSTerminationAtEdge(client, {"min_version": "1.2"}),
        mutual_tls=EndpointMutualTLSMutate(client, {"certificate_authority_ids": [ca.id]}),
    )
    assert edge.hostports == [hostport]
    assert edge.tls_termination.min_version == "1.2"
    assert edge.tls_termination.terminate_at == "edge"
    assert [c.id for c in edge.mutual_tls.certificate_authorities] == [ca.id]
    with pytest.raises(ngrok.Error) as refused:
        client.edges.https.create(hostports=[f"www.unreserved-{domain}:443"])
    assert refused.value.http_status_code == 400
    free = client.edges.https.create(
        hostports=[f"{ids.new_id('x')[-12:].lower()}.{get_settings().base_domain}:443"]
    )
    modules = client.edge_modules
    tls = modules.https_edge_tls_termination.replace(
        edge.id, EndpointTLSTerminationAtEdge(client, {"min_version": "1.3"})
    )
    assert tls.min_version == "1.3"
    assert modules.https_edge_tls_termination.get(edge.id).min_version == "1.3"
    assert modules.https_edge_mutual_tls.get(edge.id).enabled is True
    backend = client.backends.http_response.create(body="hi")
    policy = client.ip_policies.create()
    route = client.edges.https_routes.create(
        edge.id,
        match_type="path_prefix",
        match="/",
        backend=EndpointBackendMutate(client, {"backend_id": backend.id}),
        ip_restriction=EndpointIPPolicyMutate(client, {"ip_policy_ids": [policy.id]}),
        request_headers=EndpointRequestHeaders(client, {"add": {"X-A": "1"}, "remove": []}),
        traffic_policy=EndpointTrafficPolicy(client, {"value": POLICY}),
    )
    assert route.backend.backend.id == backend.id
    assert [p.id for p in route.ip_restriction.ip_policies] == [policy.id]
    assert route.request_headers.add == {"x-a": "1"}
    assert route.traffic_policy.value == POLICY
    got = modules.https_edge_route_backend.get(edge.id, route.id)
    assert got.backend.id == backend.id
    rh = modules.https_edge_route_request_headers.replace(
        edge.id, route.id, EndpointRequestHeaders(client, {"remove": ["cookie"]})
    )
    assert rh.remove == ["cookie"] and rh.add == {}
    modules.https_edge_route_ip_restriction.delete(edge.id, route.id)
    with pytest.raises(ngrok.NotFoundError):
        modules.https_edge_route_ip_restriction.get(edge.id, route.id)
    tp = modules.https_edge_route_traffic_policy.replace(
        edge.id, route.id, EndpointTrafficPolicy(client, {"enabled": False, "value": POLICY})
    )
    assert tp.enabled is False
    updated = client.edges.https_routes.update(edge.id, route.id, metadata="m")
    assert updated.backend.backend.id == backend.id and updated.match == "/"
    modules.https_edge_mutual_tls.delete(edge.id)
    client.certificate_authorities.delete(ca.id)
    client.edges.https.delete(edge.id)
    client.edges.https.delete(free.id)
    client.backends.http_response.delete(backend.id)
    client.ip_policies.delete(policy.id)
