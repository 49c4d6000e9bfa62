"""The tunnel management service: routes and the authorizer, nothing else.

Every view reads its path, query and body, calls one function of a resource module in
chalicelib/, and returns what it returns. Errors, version and media-type checks live in
chalicelib.web (installed as middleware); identity in chalicelib.auth.
"""
import logging

from chalice import AuthResponse, Chalice

from chalicelib import auth, cors, rest, web
from chalicelib import abuse_reports, api_keys, bot_users, credentials, reserved_domains
from chalicelib import http_response_backends, https_edges, ip_policies, tcp_edges
from chalicelib import dns_check, endpoints, tunnel_sessions, tunnels
from chalicelib import backends, certificate_authorities, reserved_addrs, tls_certificates
from chalicelib import event_routes

app = Chalice(app_name="tunnel-service")
app.log.setLevel(logging.INFO)
cors.install(app)  # the outer middleware: DASHBOARD_ORIGIN only
web.install(app)

ANY = ["*/*"]  # media types are checked by chalicelib.web, not by Chalice's router


@app.authorizer(ttl_seconds=0)
def api_key_authorizer(auth_request):
    """`Authorization: Bearer <API key>` → the key's principal, as string context."""
    try:
        principal = auth.resolve(auth_request.token)
    except auth.AuthFailed as exc:
        app.log.info("authorizer refused a request: %s", exc.reason)
        raise
    return AuthResponse(routes=["*"], principal_id=principal.id, context={
        "account_id": principal.account_id, "principal_id": principal.id,
        "principal_kind": principal.kind, "role": principal.role,
        "api_key_id": principal.api_key_id, **principal.extra_context()})


def route(path, methods, query=(), **kwargs):
    """An authorized route; ``query`` names the query parameters it accepts (others: 400)."""
    web.allow_query(path, methods, query)
    register = app.route(path, methods=methods, authorizer=api_key_authorizer,
                         content_types=ANY, **kwargs)
    return lambda fn: register(web.view(fn))


# ---- the resources: one line each (chalicelib.rest registers the routes) ------------------
# Identity
rest.collection(route, "/api_keys", api_keys, "key_id", name="api_key")
rest.collection(route, "/credentials", credentials, "credential_id", name="credential")
rest.collection(route, "/bot_users", bot_users, "bot_id", name="bot_user")
rest.collection(route, "/service_users", bot_users.SERVICE_USER_OPS, "service_user_id",
                name="service_user")
rest.collection(route, "/abuse_reports", abuse_reports.OPS, "report_id", name="abuse_report",
                ops=("create", "get"))
# Domains
rest.collection(route, "/reserved_domains", reserved_domains, "domain_id", name="reserved_domain")
rest.modules(route, "/reserved_domains/{domain_id}", reserved_domains.PARTS,
             owner="reserved_domain", delete=reserved_domains.delete_part)


@route("/reserved_domains/{domain_id}/dns_check", ["POST"])
def dns_check_reserved_domain(domain_id):
    """Resolve the domain's CNAME records: found / missing / wrong target, per record."""
    web.body([], path_id=domain_id)
    return dns_check.check(web.ctx(), domain_id)


rest.collection(route, "/reserved_addrs", reserved_addrs, "addr_id", name="reserved_addr")
# Certificate authorities (for HTTPS edges' mutual_tls)
rest.collection(route, "/certificate_authorities", certificate_authorities, "ca_id",
                name="certificate_authority", plural="certificate_authorities")
# TLS certificates (uploaded, or issued by ACME for reserved domains: docs/CERTIFICATES.md)
rest.collection(route, "/tls_certificates", tls_certificates, "certificate_id",
                name="tls_certificate")
# IP policies
rest.collection(route, "/ip_policies", ip_policies.POLICY_OPS, "policy_id", name="ip_policy",
                plural="ip_policies")
rest.collection(route, "/ip_policy_rules", ip_policies.RULE_OPS, "rule_id", name="ip_policy_rule")
# Backends
rest.collection(route, "/backends/http_response", http_response_backends, "backend_id",
                name="http_response_backend")
rest.collection(route, "/backends/tunnel_group", backends.TUNNEL_GROUP_OPS, "backend_id",
                name="tunnel_group_backend")
rest.collection(route, "/backends/failover", backends.FAILOVER_OPS, "backend_id",
                name="failover_backend")
rest.collection(route, "/backends/weighted", backends.WEIGHTED_OPS, "backend_id",
                name="weighted_backend")
# Edges, routes and modules
rest.collection(route, "/edges/tcp", tcp_edges, "edge_id", name="tcp_edge")
rest.modules(route, "/edges/tcp/{edge_id}", tcp_edges.MODULES, owner="tcp_edge",
             get=tcp_edges.get_module, put=tcp_edges.put_module, delete=tcp_edges.delete_module)
rest.collection(route, "/edges/https", https_edges.EDGE_OPS, "edge_id", name="https_edge")
rest.modules(route, "/edges/https/{edge_id}", https_edges.EDGE_MODULES, owner="https_edge",
             get=https_edges.get_edge_module, put=https_edges.put_edge_module,
             delete=https_edges.delete_edge_module)
rest.collection(route, "/edges/https/{edge_id}/routes", https_edges.ROUTE_OPS, "route_id",
                name="https_edge_route")
rest.modules(route, "/edges/https/{edge_id}/routes/{route_id}", https_edges.ROUTE_MODULES,
             owner="https_edge_route", get=https_edges.get_module, put=https_edges.put_module,
             delete=https_edges.delete_module)
# Online (written by the edge; read-only here, plus commands to a session's agent)
rest.collection(route, "/tunnel_sessions", tunnel_sessions, "session_id", name="tunnel_session",
                ops=("list", "get"))
rest.actions(route, "/tunnel_sessions/{session_id}", tunnel_sessions.ACTIONS,
             owner="tunnel_session")
rest.collection(route, "/tunnels", tunnels, "tunnel_id", name="tunnel", ops=("list", "get"))
rest.collection(route, "/endpoints", endpoints, "endpoint_id", name="endpoint")
# Event destinations, subscriptions, sources; the traffic inspector (chalicelib/event_routes.py)
event_routes.register(route)


# ---- docs ----------------------------------------------------------------------------------
@app.route("/openapi.json", methods=["GET"], content_types=ANY)
@web.view
def get_openapi_document():
    """The OpenAPI 3 document of this API: public (no authorizer, no version header)."""
    from chalicelib import openapi  # built on first request, not at cold start
    web.reject_query()
    return openapi.document(app, web.base_url())



# ---- every other method of a known path: 405 with the contract's body ------------------------
web.add_method_not_allowed_routes(app)
cors.add_preflight_routes(app)
