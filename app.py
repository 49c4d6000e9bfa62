"""The tunnel management service: routes and the authorizer, nothing else.

Every view reads its path, query and body, calls one function of a resource module in
chalicelib/, and returns what it returns. Errors, version and media-type checks live in
chalicelib.web (installed as middleware); identity in chalicelib.auth.
"""
import logging

from chalice import AuthResponse, Chalice

from chalicelib import api_keys, auth, web
from chalicelib import abuse_reports, bot_users, credentials, reserved_domains  # issue 4
from chalicelib import http_response_backends, https_edges, ip_policies, tcp_edges  # issue 3

app = Chalice(app_name="tunnel-service")
app.log.setLevel(logging.INFO)
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
        "api_key_id": principal.api_key_id})


def route(path, methods, query=(), **kwargs):
    """An authorized route; ``query`` names the query parameters it accepts (others: 400)."""
    web.allow_query(path, methods, query)
    return app.route(path, methods=methods, authorizer=api_key_authorizer,
                     content_types=ANY, **kwargs)


# ---- API keys ------------------------------------------------------------------------------
@route("/api_keys", ["POST"])
def create_api_key():
    return web.created(api_keys.create(web.ctx(), web.body(api_keys.CREATE_FIELDS)))


@route("/api_keys", ["GET"], query=web.LIST_QUERY)
def list_api_keys():
    c = web.ctx()
    limit, before_id = web.list_params(api_keys.PREFIX)
    items, more = api_keys.list_page(c, limit, before_id)
    return web.page(c, api_keys.PATH, api_keys.LIST_KEY, items, more, limit)


@route("/api_keys/{key_id}", ["GET"])
def get_api_key(key_id):
    return api_keys.get(web.ctx(), key_id)


@route("/api_keys/{key_id}", ["PATCH"])
def update_api_key(key_id):
    return api_keys.update(web.ctx(), key_id, web.body(api_keys.UPDATE_FIELDS, path_id=key_id))


@route("/api_keys/{key_id}", ["DELETE"])
def delete_api_key(key_id):
    api_keys.delete(web.ctx(), key_id)
    return web.no_content()


# ==== Edges and backends (issue 3): backends, IP policies, TCP/HTTPS edges, routes, modules ====
# (routes of that issue go between this line and the next ==== marker)

# ---- HTTP response backends ----
@route("/backends/http_response", ["POST"])
def create_http_response_backend():
    return web.created(http_response_backends.create(
        web.ctx(), web.body(http_response_backends.CREATE_FIELDS)))


@route("/backends/http_response", ["GET"], query=web.LIST_QUERY)
def list_http_response_backends():
    c = web.ctx()
    limit, before_id = web.list_params(http_response_backends.PREFIX)
    items, more = http_response_backends.list_page(c, limit, before_id)
    return web.page(c, http_response_backends.PATH, http_response_backends.LIST_KEY, items,
                    more, limit)


@route("/backends/http_response/{backend_id}", ["GET"])
def get_http_response_backend(backend_id):
    return http_response_backends.get(web.ctx(), backend_id)


@route("/backends/http_response/{backend_id}", ["PATCH"])
def update_http_response_backend(backend_id):
    return http_response_backends.update(
        web.ctx(), backend_id,
        web.body(http_response_backends.UPDATE_FIELDS, path_id=backend_id))


@route("/backends/http_response/{backend_id}", ["DELETE"])
def delete_http_response_backend(backend_id):
    http_response_backends.delete(web.ctx(), backend_id)
    return web.no_content()


# ---- IP policies ----
@route("/ip_policies", ["POST"])
def create_ip_policy():
    return web.created(ip_policies.create_policy(web.ctx(), web.body(ip_policies.POLICY_FIELDS)))


@route("/ip_policies", ["GET"], query=web.LIST_QUERY)
def list_ip_policies():
    c = web.ctx()
    limit, before_id = web.list_params(ip_policies.POLICY_PREFIX)
    items, more = ip_policies.list_policies(c, limit, before_id)
    return web.page(c, ip_policies.POLICY_PATH, ip_policies.POLICY_LIST_KEY, items, more, limit)


@route("/ip_policies/{policy_id}", ["GET"])
def get_ip_policy(policy_id):
    return ip_policies.get_policy(web.ctx(), policy_id)


@route("/ip_policies/{policy_id}", ["PATCH"])
def update_ip_policy(policy_id):
    return ip_policies.update_policy(web.ctx(), policy_id,
                                     web.body(ip_policies.POLICY_FIELDS, path_id=policy_id))


@route("/ip_policies/{policy_id}", ["DELETE"])
def delete_ip_policy(policy_id):
    ip_policies.delete_policy(web.ctx(), policy_id)
    return web.no_content()


# ---- IP policy rules ----
@route("/ip_policy_rules", ["POST"])
def create_ip_policy_rule():
    return web.created(ip_policies.create_rule(web.ctx(),
                                               web.body(ip_policies.RULE_CREATE_FIELDS)))


@route("/ip_policy_rules", ["GET"], query=web.LIST_QUERY)
def list_ip_policy_rules():
    c = web.ctx()
    limit, before_id = web.list_params(ip_policies.RULE_PREFIX)
    items, more = ip_policies.list_rules(c, limit, before_id)
    return web.page(c, ip_policies.RULE_PATH, ip_policies.RULE_LIST_KEY, items, more, limit)


@route("/ip_policy_rules/{rule_id}", ["GET"])
def get_ip_policy_rule(rule_id):
    return ip_policies.get_rule(web.ctx(), rule_id)


@route("/ip_policy_rules/{rule_id}", ["PATCH"])
def update_ip_policy_rule(rule_id):
    return ip_policies.update_rule(web.ctx(), rule_id,
                                   web.body(ip_policies.RULE_UPDATE_FIELDS, path_id=rule_id))


@route("/ip_policy_rules/{rule_id}", ["DELETE"])
def delete_ip_policy_rule(rule_id):
    ip_policies.delete_rule(web.ctx(), rule_id)
    return web.no_content()



# ---- TCP edges ----
@route("/edges/tcp", ["POST"])
def create_tcp_edge():
    return web.created(tcp_edges.create(web.ctx(), web.body(tcp_edges.CREATE_FIELDS)))


@route("/edges/tcp", ["GET"], query=web.LIST_QUERY)
def list_tcp_edges():
    c = web.ctx()
    limit, before_id = web.list_params(tcp_edges.PREFIX)
    items, more = tcp_edges.list_page(c, limit, before_id)
    return web.page(c, tcp_edges.PATH, tcp_edges.LIST_KEY, items, more, limit)


@route("/edges/tcp/{edge_id}", ["GET"])
def get_tcp_edge(edge_id):
    return tcp_edges.get(web.ctx(), edge_id)


@route("/edges/tcp/{edge_id}", ["PATCH"])
def update_tcp_edge(edge_id):
    return tcp_edges.update(web.ctx(), edge_id,
                            web.body(tcp_edges.UPDATE_FIELDS, path_id=edge_id))


@route("/edges/tcp/{edge_id}", ["DELETE"])
def delete_tcp_edge(edge_id):
    tcp_edges.delete(web.ctx(), edge_id)
    return web.no_content()


def _tcp_edge_module_routes(module):
    """GET/PUT/DELETE /edges/tcp/{edge_id}/<module> (backend, ip_restriction, traffic_policy)."""
    path = "/edges/tcp/{edge_id}/" + module

    @route(path, ["GET"], name=f"get_tcp_edge_{module}")
    def get_module(edge_id):
        return tcp_edges.get_module(web.ctx(), edge_id, module)

    @route(path, ["PUT"], name=f"replace_tcp_edge_{module}")
    def replace_module(edge_id):
        return tcp_edges.put_module(web.ctx(), edge_id, module, web.json_object())

    @route(path, ["DELETE"], name=f"delete_tcp_edge_{module}")
    def delete_module(edge_id):
        tcp_edges.delete_module(web.ctx(), edge_id, module)
        return web.no_content()


for _module in tcp_edges.MODULES:
    _tcp_edge_module_routes(_module)


# ---- HTTPS edges ----
@route("/edges/https", ["POST"])
def create_https_edge():
    return web.created(https_edges.create(web.ctx(), web.body(https_edges.EDGE_FIELDS)))


@route("/edges/https", ["GET"], query=web.LIST_QUERY)
def list_https_edges():
    c = web.ctx()
    limit, before_id = web.list_params(https_edges.PREFIX)
    items, more = https_edges.list_page(c, limit, before_id)
    return web.page(c, https_edges.PATH, https_edges.LIST_KEY, items, more, limit)


@route("/edges/https/{edge_id}", ["GET"])
def get_https_edge(edge_id):
    return https_edges.get(web.ctx(), edge_id)


@route("/edges/https/{edge_id}", ["PATCH"])
def update_https_edge(edge_id):
    return https_edges.update(web.ctx(), edge_id,
                              web.body(https_edges.EDGE_FIELDS, path_id=edge_id))


@route("/edges/https/{edge_id}", ["DELETE"])
def delete_https_edge(edge_id):
    https_edges.delete(web.ctx(), edge_id)
    return web.no_content()


# ---- HTTPS edge routes ----
@route("/edges/https/{edge_id}/routes", ["POST"])
def create_https_edge_route(edge_id):
    return web.created(https_edges.create_route(web.ctx(), edge_id, web.json_object()))


@route("/edges/https/{edge_id}/routes", ["GET"], query=web.LIST_QUERY)
def list_https_edge_routes(edge_id):
    c = web.ctx()
    limit, before_id = web.list_params(https_edges.ROUTE_PREFIX)
    items, more = https_edges.list_routes(c, edge_id, limit, before_id)
    return web.page(c, https_edges.routes_path(edge_id), https_edges.ROUTE_LIST_KEY, items,
                    more, limit)


@route("/edges/https/{edge_id}/routes/{route_id}", ["GET"])
def get_https_edge_route(edge_id, route_id):
    return https_edges.get_route(web.ctx(), edge_id, route_id)


@route("/edges/https/{edge_id}/routes/{route_id}", ["PATCH"])
def update_https_edge_route(edge_id, route_id):
    return https_edges.update_route(web.ctx(), edge_id, route_id, web.json_object())


@route("/edges/https/{edge_id}/routes/{route_id}", ["DELETE"])
def delete_https_edge_route(edge_id, route_id):
    https_edges.delete_route(web.ctx(), edge_id, route_id)
    return web.no_content()


def _https_route_module_routes(module):
    """GET/PUT/DELETE /edges/https/{edge_id}/routes/{route_id}/<module>."""
    path = "/edges/https/{edge_id}/routes/{route_id}/" + module

    @route(path, ["GET"], name=f"get_https_edge_route_{module}")
    def get_module(edge_id, route_id):
        return https_edges.get_module(web.ctx(), edge_id, route_id, module)

    @route(path, ["PUT"], name=f"replace_https_edge_route_{module}")
    def replace_module(edge_id, route_id):
        return https_edges.put_module(web.ctx(), edge_id, route_id, module, web.json_object())

    @route(path, ["DELETE"], name=f"delete_https_edge_route_{module}")
    def delete_module(edge_id, route_id):
        https_edges.delete_module(web.ctx(), edge_id, route_id, module)
        return web.no_content()


for _module in https_edges.ROUTE_MODULES:
    _https_route_module_routes(_module)


# ==== Identity and domains (issue 4): credentials, bot users, abuse reports, reserved domains ====
# (routes of that issue go between this line and the next ==== marker)

# ---- credentials ---------------------------------------------------------------------------
@route("/credentials", ["POST"])
def create_credential():
    return web.created(credentials.create(web.ctx(), web.body(credentials.CREATE_FIELDS)))


@route("/credentials", ["GET"], query=web.LIST_QUERY)
def list_credentials():
    c = web.ctx()
    limit, before_id = web.list_params(credentials.PREFIX)
    items, more = credentials.list_page(c, limit, before_id)
    return web.page(c, credentials.PATH, credentials.LIST_KEY, items, more, limit)


@route("/credentials/{credential_id}", ["GET"])
def get_credential(credential_id):
    return credentials.get(web.ctx(), credential_id)


@route("/credentials/{credential_id}", ["PATCH"])
def update_credential(credential_id):
    return credentials.update(web.ctx(), credential_id,
                              web.body(credentials.UPDATE_FIELDS, path_id=credential_id))


@route("/credentials/{credential_id}", ["DELETE"])
def delete_credential(credential_id):
    credentials.delete(web.ctx(), credential_id)
    return web.no_content()


# ---- bot users -----------------------------------------------------------------------------
@route("/bot_users", ["POST"])
def create_bot_user():
    return web.created(bot_users.create(web.ctx(), web.body(bot_users.CREATE_FIELDS)))


@route("/bot_users", ["GET"], query=web.LIST_QUERY)
def list_bot_users():
    c = web.ctx()
    limit, before_id = web.list_params(bot_users.PREFIX)
    items, more = bot_users.list_page(c, limit, before_id)
    return web.page(c, bot_users.PATH, bot_users.LIST_KEY, items, more, limit)


@route("/bot_users/{bot_id}", ["GET"])
def get_bot_user(bot_id):
    return bot_users.get(web.ctx(), bot_id)


@route("/bot_users/{bot_id}", ["PATCH"])
def update_bot_user(bot_id):
    return bot_users.update(web.ctx(), bot_id, web.body(bot_users.UPDATE_FIELDS, path_id=bot_id))


@route("/bot_users/{bot_id}", ["DELETE"])
def delete_bot_user(bot_id):
    bot_users.delete(web.ctx(), bot_id)
    return web.no_content()


# ---- reserved domains ----------------------------------------------------------------------
@route("/reserved_domains", ["POST"])
def create_reserved_domain():
    return web.created(reserved_domains.create(web.ctx(),
                                               web.body(reserved_domains.CREATE_FIELDS)))


@route("/reserved_domains", ["GET"], query=web.LIST_QUERY)
def list_reserved_domains():
    c = web.ctx()
    limit, before_id = web.list_params(reserved_domains.PREFIX)
    items, more = reserved_domains.list_page(c, limit, before_id)
    return web.page(c, reserved_domains.PATH, reserved_domains.LIST_KEY, items, more, limit)


@route("/reserved_domains/{domain_id}", ["GET"])
def get_reserved_domain(domain_id):
    return reserved_domains.get(web.ctx(), domain_id)


@route("/reserved_domains/{domain_id}", ["PATCH"])
def update_reserved_domain(domain_id):
    return reserved_domains.update(web.ctx(), domain_id,
                                   web.body(reserved_domains.UPDATE_FIELDS, path_id=domain_id))


@route("/reserved_domains/{domain_id}", ["DELETE"])
def delete_reserved_domain(domain_id):
    reserved_domains.delete(web.ctx(), domain_id)
    return web.no_content()


# ---- abuse reports (create and get only) ---------------------------------------------------
@route("/abuse_reports", ["POST"])
def create_abuse_report():
    return web.created(abuse_reports.create(web.ctx(), web.json_object()))


@route("/abuse_reports/{report_id}", ["GET"])
def get_abuse_report(report_id):
    return abuse_reports.get(web.ctx(), report_id)



# ==== Docs (issue 6): /openapi.json ====
# (routes of that issue go between this line and the next ==== marker)
@app.route("/openapi.json", methods=["GET"], content_types=ANY)
def get_openapi_document():
    """The OpenAPI 3 document of this API: public (no authorizer, no version header)."""
    from chalicelib import openapi  # built on first request, not at cold start
    web.reject_query()
    return openapi.document(app, web.base_url())



# ---- every other method of a known path: 405 with the contract's body ------------------------
web.add_method_not_allowed_routes(app)
