"""Store calls per route, pinned: a change that adds a DynamoDB call to a route fails here.

Counted on the botocore client (stacks/costs.py), in-process, the authorizer apart
from the view. The goal: the authorizer makes 1 call on every route; a view makes
1 call when its operation touches one item; the routes that must read first or change
several items say so in their docstrings, with the count pinned here. Nothing scans.
"""

import pytest

from stacks.costs import app_routes, measure_routes

# view calls per route (the authorizer: 1 GetItem everywhere). A create, update or delete of a
# collection that has API events (chalicelib.core.event_targets.AUDIT_RESOURCES) costs nothing
# more while the account's subscriptions name none of its events: the types they name come
# with the authorizer's GetItem (chalicelib/audit.py); the measured account's subscription
# names traffic events only. A change of an event subscription (or its sources) refreshes
# those types: one Query of the account's subscriptions and one GetItem of the account (+ the
# copies onto its key lookups when they changed: test_audit_types.py).
EXPECTED_VIEW_CALLS = {
    "POST /api_keys": 1,
    "GET /api_keys": 1,
    "GET /api_keys/{key_id}": 1,
    "PATCH /api_keys/{key_id}": 1,
    "DELETE /api_keys/{key_id}": 2,
    "POST /credentials": 1,
    "GET /credentials": 1,
    "GET /credentials/{credential_id}": 1,
    "PATCH /credentials/{credential_id}": 1,
    "DELETE /credentials/{credential_id}": 2,
    # one transaction (credential, key lookup, owner index, owner check); no API events
    # SSH CAs: a Query (the count) + a transaction (the CA and its key's lookup); certificates:
    # a GetItem (the CA), a Query (the count), a PutItem; a CA's delete: GetItem + transaction
    "POST /ssh_certificate_authorities": 2,
    "GET /ssh_certificate_authorities": 1,
    "GET /ssh_certificate_authorities/{ssh_certificate_authority_id}": 1,
    "PATCH /ssh_certificate_authorities/{ssh_certificate_authority_id}": 1,
    "DELETE /ssh_certificate_authorities/{ssh_certificate_authority_id}": 2,
    "POST /ssh_host_certificates": 3,
    "GET /ssh_host_certificates": 1,
    "GET /ssh_host_certificates/{ssh_host_certificate_id}": 1,
    "PATCH /ssh_host_certificates/{ssh_host_certificate_id}": 1,
    "DELETE /ssh_host_certificates/{ssh_host_certificate_id}": 2,
    "POST /ssh_user_certificates": 3,
    "GET /ssh_user_certificates": 1,
    "GET /ssh_user_certificates/{ssh_user_certificate_id}": 1,
    "PATCH /ssh_user_certificates/{ssh_user_certificate_id}": 1,
    "DELETE /ssh_user_certificates/{ssh_user_certificate_id}": 2,
    # agent ingresses: a Query (the count), the reservation reads of reservation_conflict (two
    # BatchGetItems, a Query), a
    # transaction (the ingress and the edge's index entry); delete, and delete of the
    # certificate management policy: GetItem + transaction
    "POST /agent_ingresses": 4,
    "GET /agent_ingresses": 1,
    "GET /agent_ingresses/{agent_ingress_id}": 1,
    "PATCH /agent_ingresses/{agent_ingress_id}": 1,
    "DELETE /agent_ingresses/{agent_ingress_id}": 2,
    "DELETE /agent_ingresses/{agent_ingress_id}/certificate_management_policy": 2,
    "POST /ssh_credentials": 1,
    "GET /ssh_credentials": 1,
    "GET /ssh_credentials/{ssh_credential_id}": 1,
    "PATCH /ssh_credentials/{ssh_credential_id}": 1,
    "DELETE /ssh_credentials/{ssh_credential_id}": 2,
    "POST /bot_users": 1,
    "GET /bot_users": 1,
    "GET /bot_users/{bot_id}": 1,
    "PATCH /bot_users/{bot_id}": 3,
    "DELETE /bot_users/{bot_id}": 3,
    # the same resource under its newer name
    "POST /service_users": 1,
    "GET /service_users": 1,
    "GET /service_users/{service_user_id}": 1,
    "PATCH /service_users/{service_user_id}": 3,
    "DELETE /service_users/{service_user_id}": 3,
    # the ownership reads (1 BatchGetItem: reservations over it and live claims; 1 Query:
    # reservations under it), then the write
    "POST /reserved_domains": 3,
    "GET /reserved_domains": 1,
    "GET /reserved_domains/{domain_id}": 1,
    "PATCH /reserved_domains/{domain_id}": 1,
    "DELETE /reserved_domains/{domain_id}": 2,
    "DELETE /reserved_domains/{domain_id}/certificate": 1,
    "DELETE /reserved_domains/{domain_id}/certificate_management_policy": 1,
    "POST /reserved_domains/{domain_id}/dns_check": 1,  # the domain; then DNS, no store
    "POST /ip_policies": 1,
    "GET /ip_policies": 1,
    "GET /ip_policies/{policy_id}": 1,
    "PATCH /ip_policies/{policy_id}": 1,
    "DELETE /ip_policies/{policy_id}": 1,
    "POST /ip_policy_rules": 1,
    "GET /ip_policy_rules": 1,
    "GET /ip_policy_rules/{rule_id}": 1,
    "PATCH /ip_policy_rules/{rule_id}": 1,
    "DELETE /ip_policy_rules/{rule_id}": 2,
    "POST /backends/http_response": 1,
    "GET /backends/http_response": 1,
    "GET /backends/http_response/{backend_id}": 1,
    "PATCH /backends/http_response/{backend_id}": 1,
    "DELETE /backends/http_response/{backend_id}": 1,
    "POST /edges/tcp": 2,
    "GET /edges/tcp": 1,
    "GET /edges/tcp/{edge_id}": 1,
    "PATCH /edges/tcp/{edge_id}": 1,
    "DELETE /edges/tcp/{edge_id}": 2,
    "PUT /edges/tcp/{edge_id}/backend": 2,
    "GET /edges/tcp/{edge_id}/backend": 1,
    "DELETE /edges/tcp/{edge_id}/backend": 2,
    "PUT /edges/tcp/{edge_id}/ip_restriction": 2,
    "GET /edges/tcp/{edge_id}/ip_restriction": 1,
    "DELETE /edges/tcp/{edge_id}/ip_restriction": 2,
    "PUT /edges/tcp/{edge_id}/traffic_policy": 2,
    "GET /edges/tcp/{edge_id}/traffic_policy": 1,
    "DELETE /edges/tcp/{edge_id}/traffic_policy": 2,
    # TLS edges (chalicelib/tls_edges.py): a create reads its hostports' reservations, then 1
    # transaction (edge, claims, the TLS listener's copies, refs); every change of a module
    # reads the edge first, then 1 transaction
    # IP restrictions (chalicelib/ip_restrictions.py): one transaction with the policies'
    # counters; a PATCH of enforced is one UpdateItem; a delete reads first
    "POST /ip_restrictions": 1,
    "GET /ip_restrictions": 1,
    "GET /ip_restrictions/{restriction_id}": 1,
    "PATCH /ip_restrictions/{restriction_id}": 1,
    "DELETE /ip_restrictions/{restriction_id}": 2,
    # static backends (chalicelib/backends.py): as a tunnel group's, no members to count
    "POST /backends/static": 1,
    "GET /backends/static": 1,
    "GET /backends/static/{backend_id}": 1,
    "PATCH /backends/static/{backend_id}": 1,
    "DELETE /backends/static/{backend_id}": 2,
    "POST /edges/tls": 3,
    "GET /edges/tls": 1,
    "GET /edges/tls/{edge_id}": 1,
    "PATCH /edges/tls/{edge_id}": 1,
    "DELETE /edges/tls/{edge_id}": 2,
    **{
        f"{method} /edges/tls/{{edge_id}}/{name}": calls
        for name in (
            "backend",
            "ip_restriction",
            "mutual_tls",
            "tls_termination",
            "traffic_policy",
        )
        for method, calls in (("PUT", 2), ("GET", 1), ("DELETE", 2))
    },
    "POST /edges/https": 3,
    "GET /edges/https": 1,
    "GET /edges/https/{edge_id}": 1,
    "PATCH /edges/https/{edge_id}": 2,
    "DELETE /edges/https/{edge_id}": 2,
    "POST /edges/https/{edge_id}/routes": 1,
    "GET /edges/https/{edge_id}/routes": 1,
    "GET /edges/https/{edge_id}/routes/{route_id}": 1,
    "PATCH /edges/https/{edge_id}/routes/{route_id}": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}": 2,
    "PUT /edges/https/{edge_id}/routes/{route_id}/user_agent_filter": 1,
    "GET /edges/https/{edge_id}/routes/{route_id}/user_agent_filter": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/user_agent_filter": 1,
    "PUT /edges/https/{edge_id}/routes/{route_id}/response_headers": 1,
    "GET /edges/https/{edge_id}/routes/{route_id}/response_headers": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/response_headers": 1,
    "POST /abuse_reports": 1,
    "GET /abuse_reports/{report_id}": 1,
    # Edges: claiming a hostport reads its reservation first (TCP: the port's
    # claim, 1 GetItem; HTTPS: 1 BatchGetItem of the exact and wildcard names + the online
    # claim of a base-domain name, 1 GetItem); a TCP edge's hostport items carry a copy of
    # its modules, so a traffic_policy change is a read + transaction like the others; a
    # route delete reads the route (its references) first.
    "POST /reserved_addrs": 2,  # the drawn port: its claim read (served now?), then the write
    "GET /reserved_addrs": 1,
    "GET /reserved_addrs/{addr_id}": 1,
    "PATCH /reserved_addrs/{addr_id}": 1,
    "DELETE /reserved_addrs/{addr_id}": 2,
    "POST /certificate_authorities": 1,
    "GET /certificate_authorities": 1,
    "GET /certificate_authorities/{ca_id}": 1,
    "PATCH /certificate_authorities/{ca_id}": 1,
    "DELETE /certificate_authorities/{ca_id}": 1,
    "POST /tls_certificates": 1,
    "GET /tls_certificates": 1,
    "GET /tls_certificates/{certificate_id}": 1,
    "PATCH /tls_certificates/{certificate_id}": 1,
    "DELETE /tls_certificates/{certificate_id}": 1,
    # a tunnel group renders its online tunnels: one Query of the account's tunnels (+ one
    # BatchGetItem of their sessions when any match)
    "POST /backends/tunnel_group": 2,
    "GET /backends/tunnel_group": 2,
    "GET /backends/tunnel_group/{backend_id}": 2,
    "PATCH /backends/tunnel_group/{backend_id}": 2,
    "DELETE /backends/tunnel_group/{backend_id}": 2,
    "POST /backends/failover": 1,
    "GET /backends/failover": 1,
    "GET /backends/failover/{backend_id}": 1,
    "PATCH /backends/failover/{backend_id}": 2,
    "DELETE /backends/failover/{backend_id}": 2,
    "POST /backends/weighted": 1,
    "GET /backends/weighted": 1,
    "GET /backends/weighted/{backend_id}": 1,
    "PATCH /backends/weighted/{backend_id}": 2,
    "DELETE /backends/weighted/{backend_id}": 2,
    "PUT /edges/https/{edge_id}/tls_termination": 2,
    "GET /edges/https/{edge_id}/tls_termination": 1,
    "DELETE /edges/https/{edge_id}/tls_termination": 2,
    "PUT /edges/https/{edge_id}/mutual_tls": 2,
    "GET /edges/https/{edge_id}/mutual_tls": 1,
    "DELETE /edges/https/{edge_id}/mutual_tls": 2,
    "PUT /edges/https/{edge_id}/routes/{route_id}/backend": 2,
    "GET /edges/https/{edge_id}/routes/{route_id}/backend": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/backend": 2,
    "PUT /edges/https/{edge_id}/routes/{route_id}/ip_restriction": 2,
    "GET /edges/https/{edge_id}/routes/{route_id}/ip_restriction": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/ip_restriction": 2,
    "PUT /edges/https/{edge_id}/routes/{route_id}/request_headers": 1,
    "GET /edges/https/{edge_id}/routes/{route_id}/request_headers": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/request_headers": 1,
    # the route modules that are policy actions: one UpdateItem each, as request_headers; saml
    # is refused by name after one read of the route (404 when it does not exist)
    **{
        f"{method} /edges/https/{{edge_id}}/routes/{{route_id}}/{name}": 1
        for name in (
            "circuit_breaker",
            "compression",
            "oauth",
            "oidc",
            "webhook_verification",
            "websocket_tcp_converter",
            "saml",
        )
        for method in ("PUT", "GET", "DELETE")
    },
    "PUT /edges/https/{edge_id}/routes/{route_id}/traffic_policy": 1,
    "GET /edges/https/{edge_id}/routes/{route_id}/traffic_policy": 1,
    "DELETE /edges/https/{edge_id}/routes/{route_id}/traffic_policy": 1,
    # online views: a tunnel or endpoint is live while its session is, so reading one reads
    # its session too (a list page: one Query + one BatchGetItem of the page's sessions);
    # stop/restart read the session (owner check), read it again where the flag is set (its
    # instance), flag it (1 UpdateItem), write the command its instance reads (1 PutItem),
    # then read the edge's answer every 0.5 s until it is there (1 GetItem when the edge
    # answers within the first 0.5 s, as here; at most 40 in the 20 s bound, + 1 DeleteItem
    # that withdraws a command no edge answered)
    "GET /tunnel_sessions": 1,
    "GET /tunnel_sessions/{session_id}": 1,
    "GET /tunnels": 2,
    "GET /tunnels/{tunnel_id}": 2,
    "GET /endpoints": 2,
    "GET /endpoints/{endpoint_id}": 2,
    # cloud endpoints (chalicelib.cloud_endpoints): POST reads the reservation covering the
    # host (1 BatchGetItem) and writes the endpoint and its host's claim in 1 transaction;
    # PATCH and DELETE read the endpoint (its claim, its version), then 1 transaction
    "POST /endpoints": 2,
    "PATCH /endpoints/{endpoint_id}": 2,
    "DELETE /endpoints/{endpoint_id}": 2,
    "POST /tunnel_sessions/{session_id}/stop": 5,
    "POST /tunnel_sessions/{session_id}/restart": 5,
    "POST /tunnel_sessions/{session_id}/update": 1,
    # vaults and secrets (chalicelib/vaults.py): a secret renders its vault's name (1 GetItem;
    # a list page: 1 BatchGetItem of the page's vaults); creating a secret reads its vault
    # first; PATCH and DELETE of a secret read it first (its name claim, its vault); a vault's
    # delete reads it (its name claim); its secrets are one Query of the account's secrets
    "POST /vaults": 1,
    "GET /vaults": 1,
    "GET /vaults/{vault_id}": 1,
    "PATCH /vaults/{vault_id}": 1,
    "DELETE /vaults/{vault_id}": 2,
    "GET /vaults/{vault_id}/secrets": 2,
    "POST /vault_secrets": 2,
    "GET /vault_secrets": 2,
    "GET /vault_secrets/{secret_id}": 2,
    "PATCH /vault_secrets/{secret_id}": 3,
    "DELETE /vault_secrets/{secret_id}": 2,
    # sign-ins (chalicelib/app_sessions.py): a user's delete reads the user and the account's
    # sessions (the user's to delete with it), then one transaction
    "GET /app/sessions": 1,
    "GET /app/sessions/{app_session_id}": 1,
    "DELETE /app/sessions/{app_session_id}": 1,
    "GET /app/users": 1,
    "GET /app/users/{app_user_id}": 1,
    "DELETE /app/users/{app_user_id}": 3,
    # event destinations and subscriptions: a create counts the account's items first (one
    # Query: at most 100 each); a subscription's create and delete move its destinations'
    # refs in one transaction; a source is a field of its subscription (read, then written)
    "POST /event_destinations": 2,
    "GET /event_destinations": 1,
    "GET /event_destinations/{destination_id}": 1,
    "PATCH /event_destinations/{destination_id}": 1,
    "DELETE /event_destinations/{destination_id}": 1,
    "POST /event_subscriptions": 4,
    "GET /event_subscriptions": 1,
    "GET /event_subscriptions/{subscription_id}": 1,
    "PATCH /event_subscriptions/{subscription_id}": 3,
    "DELETE /event_subscriptions/{subscription_id}": 5,
    "POST /event_subscriptions/{subscription_id}/sources": 4,
    "GET /event_subscriptions/{subscription_id}/sources": 1,
    "GET /event_subscriptions/{subscription_id}/sources/{type}": 1,
    "PATCH /event_subscriptions/{subscription_id}/sources/{type}": 4,  # read, then its filter/fields
    "DELETE /event_subscriptions/{subscription_id}/sources/{type}": 4,
    # the traffic inspector: a list and the capture setting read the endpoint (a cloud
    # endpoint: 1 GetItem) then its captured requests (1 Query) or setting (1 GetItem, +1
    # PutItem); a captured request and its replay are 1 GetItem
    "GET /endpoints/{endpoint_id}/captured_requests": 2,
    "GET /endpoints/{endpoint_id}/captured_requests/{request_id}": 1,
    "POST /endpoints/{endpoint_id}/captured_requests/{request_id}/replay": 1,
    "GET /endpoints/{endpoint_id}/capture": 2,
    "PUT /endpoints/{endpoint_id}/capture": 3,
}


@pytest.fixture(scope="module")
def measured():
    from moto import mock_aws

    from chalicelib.core import config, store

    with mock_aws():
        config.reset_settings()
        store.reset()
        store.create_table()
        from chalice.test import Client

        from app import app
        from chalicelib.gateway import ContractGateway
        from stacks.paths import PROJECT_DIR
        from tests.support.api import InProcessApi

        with Client(app, stage_name="dev", project_dir=PROJECT_DIR) as client:
            client.http._local_gateway = ContractGateway(app, client.http._config)
            api = InProcessApi(client)
            yield measure_routes(api, api.new_account(reporter=True))
        store.reset()


def test_every_route_is_measured_and_pinned(measured):
    routes = {f"{m} {p}" for m, p in app_routes()}
    assert routes == set(measured) == set(EXPECTED_VIEW_CALLS)


@pytest.mark.parametrize("route", sorted(EXPECTED_VIEW_CALLS))
def test_authorizer_makes_one_get_item(measured, route):
    assert measured[route]["authorizer_ops"] == {"GetItem": 1}


@pytest.mark.parametrize("route", sorted(EXPECTED_VIEW_CALLS))
def test_view_makes_its_pinned_number_of_store_calls(measured, route):
    row = measured[route]
    assert row["view"] == EXPECTED_VIEW_CALLS[route], row["view_ops"]
    assert "Scan" not in row["view_ops"]


def test_single_item_writes_are_not_transactions(measured):
    singles = [
        r
        for r, n in EXPECTED_VIEW_CALLS.items()
        if n == 1
        and r.split()[0] in ("PATCH", "PUT")
        or r.startswith(("DELETE /ip_policies/", "DELETE /backends/http_response"))
    ]
    for route in singles:
        assert "TransactWriteItems" not in measured[route]["view_ops"], (route, measured[route])
