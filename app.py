"""The tunnel management service: routes and the authorizer, nothing else.

Every view reads its path, query and body, calls one function of a resource module in
chalicelib/, and returns what it returns. Errors, version and media-type checks live in
chalicelib.web (installed as middleware); identity in chalicelib.auth.
"""

import logging

from chalice import AuthResponse, Chalice, Rate

from chalicelib import auth, cors, resources, web

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
    return AuthResponse(
        routes=["*"],
        principal_id=principal.id,
        context={
            "account_id": principal.account_id,
            "principal_id": principal.id,
            "principal_kind": principal.kind,
            "role": principal.role,
            "api_key_id": principal.api_key_id,
            **principal.extra_context(),
        },
    )


def route(path, methods, query=(), **kwargs):
    """An authorized route; ``query`` names the query parameters it accepts (others: 400)."""
    web.allow_query(path, methods, query)
    register = app.route(
        path, methods=methods, authorizer=api_key_authorizer, content_types=ANY, **kwargs
    )
    return lambda fn: register(web.view(fn))


# ---- the resources: chalicelib/resources.py lists them all, with their shapes -------------
resources.register(route)


# ---- docs ----------------------------------------------------------------------------------
@app.route("/openapi.json", methods=["GET"], content_types=ANY)
@web.view
def get_openapi_document():
    """The OpenAPI 3 document of this API: public (no authorizer, no version header)."""
    from chalicelib import openapi  # built on first request, not at cold start

    web.reject_query()
    return openapi.document(app, web.base_url())


# ---- managed certificates (AWS: a scheduled function; `make run`: a process) ---------------
@app.schedule(Rate(1, unit=Rate.MINUTES), name="acme_worker")
def acme_worker(event):
    """One pass of the ACME worker (docs/CERTIFICATES.md). Its libraries (acme, cryptography)
    are not in the API's package: the function has its own layer (scripts/deploy_stack.py)."""
    from chalicelib.acme import worker  # imported here: the API's functions never load it

    return worker.scheduled_pass()


# ---- every other method of a known path: 405 with the contract's body ------------------------
web.add_method_not_allowed_routes(app)
cors.add_preflight_routes(app)
