"""The HTTPS route modules that are policy actions here (circuit_breaker, compression, oauth,
oidc, webhook_verification) and websocket_tcp_converter, at both levels; saml refused by name
(chalicelib.core.route_modules: one translation for the API's checks and the edge)."""

import json

import pytest

from chalicelib.core import errors, route_modules, routing
from chalicelib.core.policy import compile_policy
from tests.functional.test_https_edge_modules import created, edge_and_route, hostport

PATH = "/edges/https"
OAUTH = {
    "provider": {
        "google": {
            "client_id": "cid",
            "client_secret": "shh",
            "scopes": ["email"],
            "email_addresses": ["a@example.com"],
            "email_domains": ["example.org"],
        }
    },
    "cookie_prefix": "app",
    "inactivity_timeout": 600,
    "maximum_duration": 3600,
}
OIDC = {
    "issuer": "https://issuer.example.com",
    "client_id": "cid",
    "client_secret": "shh",
    "scopes": ["openid", "email"],
}
BODIES = {
    "circuit_breaker": ({"error_threshold_percentage": 0.25, "volume_threshold": 5}, None),
    "compression": ({}, {"enabled": True}),
    "websocket_tcp_converter": ({"enabled": False}, {"enabled": False}),
    "webhook_verification": (
        {"provider": "SLACK", "secret": "s3cret"},
        {"enabled": True, "provider": "SLACK", "secret": None},
    ),
    "oauth": (OAUTH, None),
    "oidc": (OIDC, None),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_module_put_get_delete_and_in_the_route(account, name):
    admin = account.admin
    edge, route = edge_and_route(admin)
    path = f"{PATH}/{edge['id']}/routes/{route['id']}/{name}"
    assert route[name] is None
    assert admin.get(path).status == 404
    body, expected = BODIES[name]
    put = admin.put(path, {"module": body, "edge_id": edge["id"], "id": route["id"]})
    assert put.status == 200, put
    if expected is not None:
        assert put.json == expected
    assert admin.get(path).json == put.json
    assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").json[name] == put.json
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 404


def test_defaults_and_write_only_secrets(account):
    admin = account.admin
    _, route = edge_and_route(
        admin, circuit_breaker={"error_threshold_percentage": 0.5}, oauth=OAUTH, oidc=OIDC
    )
    assert route["circuit_breaker"] == {
        "enabled": True,
        "tripped_duration": 10,
        "rolling_window": 10,
        "num_buckets": 10,
        "volume_threshold": 10,
        "error_threshold_percentage": 0.5,
    }
    assert route["oauth"]["provider"]["google"]["client_secret"] is None
    assert route["oauth"]["provider"]["google"]["client_id"] == "cid"
    assert route["oidc"]["client_secret"] is None and route["oidc"]["issuer"] == OIDC["issuer"]


@pytest.mark.parametrize(
    "name, body, field",
    [
        ("circuit_breaker", {"error_threshold_percentage": 1.5}, "error_threshold_percentage"),
        ("circuit_breaker", {"num_buckets": 20}, "num_buckets"),
        ("circuit_breaker", {"rolling_window": 999}, "rolling_window"),
        ("circuit_breaker", {"error_threshold_percentage": "x"}, "error_threshold_percentage"),
        ("webhook_verification", {"provider": "nope", "secret": "s"}, "provider"),
        ("webhook_verification", {"provider": "github"}, "secret"),
        ("oauth", {"provider": {}}, "provider"),
        ("oauth", {"provider": {"google": {"client_id": "x"}}}, "provider.google.client_secret"),
        ("oauth", {"provider": {"myspace": {"client_id": "x", "client_secret": "y"}}}, "provider"),
        (
            "oauth",
            {"provider": {"github": {"client_id": "x", "client_secret": "y", "teams": ["t"]}}},
            "provider.github.teams",
        ),
        ("oidc", {**OIDC, "issuer": "not a url"}, "issuer"),
        ("oidc", {**OIDC, "cookie_prefix": "a b"}, "cookie_prefix"),
        ("oidc", {"issuer": OIDC["issuer"], "client_id": "x"}, "client_secret"),
        ("compression", {"level": 9}, "level"),
    ],
)
def test_bad_module_is_a_400_naming_the_field_and_keeps_the_module(account, name, body, field):
    admin = account.admin
    good = BODIES[name][0]
    edge, route = edge_and_route(admin, **{name: good})
    path = f"{PATH}/{edge['id']}/routes/{route['id']}/{name}"
    before = admin.get(path).json
    resp = admin.put(path, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp.json
    assert admin.get(path).json == before


def test_saml_is_refused_by_name(account):
    admin = account.admin
    edge, route = edge_and_route(admin)
    path = f"{PATH}/{edge['id']}/routes/{route['id']}/saml"
    resp = admin.put(path, {"idp_metadata": "<xml/>"})
    assert resp.status == 400 and resp.json["error_code"] == errors.MODULE_NOT_SUPPORTED
    assert "saml" in resp.json["msg"]
    assert admin.get(path).status == 404
    assert admin.delete(path).status == 204
    resp = admin.patch(f"{PATH}/{edge['id']}/routes/{route['id']}", {"saml": {}})
    assert resp.status == 400 and resp.json["error_code"] == errors.MODULE_NOT_SUPPORTED
    missing = f"{PATH}/{edge['id']}/routes/edghtsrt_0ERYqBR5B9RMvMY4cZCztl2IB7s/saml"
    assert admin.put(missing, {}).status == 404
    assert admin.delete(missing).status == 404


def test_the_edge_reads_the_modules_and_they_compile_as_the_edge_runs_them(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    hp = hostport()
    edge = created(account.admin.post(PATH, {"hostports": [hp]}))
    modules = {name: body for name, (body, _) in BODIES.items()}
    created(
        account.admin.post(
            f"{PATH}/{edge['id']}/routes",
            {"match_type": "path_prefix", "match": "/", **modules},
        )
    )
    _, routes = routing.https_edge_for_hostport(hp)
    route = routes[0]
    assert route["oauth"]["provider"]["google"]["client_secret"] == "shh"  # stored, not shown
    phases = {
        "on_http_request": route_modules.sign_in_rules(route) + route_modules.breaker_rules(route),
        "on_http_response": route_modules.response_rules(route),
    }
    kinds = [a["type"] for rules in phases.values() for r in rules for a in r["actions"]]
    assert kinds == [
        "oauth",
        "deny",  # the allowed emails
        "openid-connect",
        "verify-webhook",
        "circuit-breaker",
        "compress-response",
    ]
    compile_policy(json.dumps(phases))
    assert route_modules.converts_websockets(route) is False  # enabled: false
