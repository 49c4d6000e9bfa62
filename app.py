"""The tunnel management service: routes and the authorizer, nothing else.

Every view reads its path, query and body, calls one function of a resource module in
chalicelib/, and returns what it returns. Errors, version and media-type checks live in
chalicelib.web (installed as middleware); identity in chalicelib.auth.
"""
import logging

from chalice import AuthResponse, Chalice

from chalicelib import api_keys, auth, web

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


def route(path, methods, **kwargs):
    return app.route(path, methods=methods, authorizer=api_key_authorizer,
                     content_types=ANY, **kwargs)


# ---- API keys ------------------------------------------------------------------------------
@route("/api_keys", ["POST"])
def create_api_key():
    return web.created(api_keys.create(web.ctx(), web.body(api_keys.CREATE_FIELDS)))


@route("/api_keys", ["GET"])
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


# ==== Identity and domains (issue 4): credentials, bot users, abuse reports, reserved domains ====
# (routes of that issue go between this line and the next ==== marker)


# ==== Docs (issue 6): /openapi.json ====
# (routes of that issue go between this line and the next ==== marker)


# ---- every other method of a known path: 405 with the contract's body ------------------------
web.add_method_not_allowed_routes(app)
