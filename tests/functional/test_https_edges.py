"""/edges/https, its routes and the route modules at both levels."""

import itertools
import os

import pytest

from chalicelib.core import errors, ids
from chalicelib.core.config import get_settings

EDGE_FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "hostports",
    "mutual_tls",
    "tls_termination",
    "routes",
}
ROUTE_FIELDS = {
    "edge_id",
    "id",
    "created_at",
    "match_type",
    "match",
    "uri",
    "description",
    "metadata",
    "backend",
    "ip_restriction",
    "circuit_breaker",
    "compression",
    "request_headers",
    "response_headers",
    "webhook_verification",
    "oauth",
    "saml",
    "oidc",
    "websocket_tcp_converter",
    "user_agent_filter",
    "traffic_policy",
}
PATH = "/edges/https"
_counter = itertools.count()


def hostport():
    """A free name under the base domain (an HTTPS edge may serve those without reserving)."""
    return (
        f"h{os.getpid()}-{next(_counter)}-{ids.new_id('x')[-8:].lower()}."
        f"{get_settings().base_domain}:443"
    )


def create_edge(caller, **fields):
    resp = caller.post(PATH, fields)
    assert resp.status == 201, resp
    return resp.json


def create_route(caller, edge, **fields):
    body = {"match_type": "path_prefix", "match": "/", **fields}
    resp = caller.post(f"{PATH}/{edge}/routes", body)
    assert resp.status == 201, resp
    return resp.json


def test_edge_crud(account):
    admin = account.admin
    hp = hostport()
    edge = create_edge(admin, description="web", metadata="", hostports=[hp])
    assert set(edge) == EDGE_FIELDS and ids.is_valid(edge["id"], "edghts")
    assert edge["hostports"] == [hp] and edge["routes"] == []
    assert edge["mutual_tls"] is None and edge["tls_termination"] is None
    assert admin.get(f"{PATH}/{edge['id']}").json == edge
    assert admin.get(PATH).json["https_edges"] == [edge]
    updated = admin.patch(f"{PATH}/{edge['id']}", {"metadata": "m"})
    assert updated.status == 200 and updated.json == {**edge, "metadata": "m"}
    assert admin.patch(f"{PATH}/{edge['id']}", {"hostports": []}).json["hostports"] is None
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    assert admin.get(f"{PATH}/{edge['id']}").status == 404


def test_bare_edge_has_null_hostports(account):
    assert create_edge(account.admin)["hostports"] is None


def test_hostports_of_one_edge_kind_are_refused_to_the_other(account):
    hp = hostport()
    create_edge(account.admin, hostports=[hp])
    resp = account.admin.post("/edges/tcp", {"hostports": [hp]})
    assert resp.status == 400 and resp.json["details"]["hostport"] == hp
    assert account.admin.post(PATH, {"hostports": [hp]}).status == 409
    tcp_hp = account.admin.post("/reserved_addrs", {}).json["addr"]
    assert account.admin.post("/edges/tcp", {"hostports": [tcp_hp]}).status == 201
    resp = account.admin.post(PATH, {"hostports": [tcp_hp]})
    assert resp.status == 400 and resp.json["details"]["hostport"] == tcp_hp


@pytest.mark.parametrize(
    "body, field",
    [
        ({"hostports": ["nope"]}, "hostports[0]"),
        ({"hostports": "a.com:1"}, "hostports"),
        (
            {"mutual_tls": {"certificate_authority_ids": []}},
            "mutual_tls.certificate_authority_ids",
        ),
        ({"mutual_tls": {}}, "mutual_tls.certificate_authority_ids"),
        (
            {"mutual_tls": {"certificate_authority_ids": ["ca_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}},
            "mutual_tls.certificate_authority_ids",
        ),
        ({"tls_termination": {"min_version": "1.4"}}, "tls_termination.min_version"),
        ({"tls_termination": {"terminate_at": "upstream"}}, "tls_termination.terminate_at"),
        ({"tls_termination": "1.2"}, "tls_termination"),
        ({"description": "x" * 256}, "description"),
        ({"routes": []}, "routes"),
    ],
)
def test_bad_edge_returns_400(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field
    assert account.admin.get(PATH).json["https_edges"] == []


def test_route_crud_and_edge_embeds_routes(account):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(
        admin, edge["id"], match_type="exact_path", match="/blog", description="blog", metadata=""
    )
    assert set(route) == ROUTE_FIELDS and ids.is_valid(route["id"], "edghtsrt")
    assert route["edge_id"] == edge["id"]
    assert route["uri"].endswith(f"{PATH}/{edge['id']}/routes/{route['id']}")
    for name in ROUTE_FIELDS - {
        "edge_id",
        "id",
        "created_at",
        "match_type",
        "match",
        "uri",
        "description",
        "metadata",
    }:
        assert route[name] is None
    assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").json == route
    listed = admin.get(f"{PATH}/{edge['id']}/routes").json
    assert listed["routes"] == [route] and listed["next_page_uri"] is None
    assert listed["uri"].endswith(f"{PATH}/{edge['id']}/routes")
    second = create_route(admin, edge["id"], match="/api")
    assert admin.get(f"{PATH}/{edge['id']}").json["routes"] == [route, second]
    updated = admin.patch(f"{PATH}/{edge['id']}/routes/{route['id']}", {"metadata": "m"})
    assert updated.status == 200 and updated.json == {**route, "metadata": "m"}
    # what the reference client sends by default on update: empty match fields
    updated = admin.patch(
        f"{PATH}/{edge['id']}/routes/{route['id']}",
        {"match_type": "", "match": "", "description": "d2"},
    ).json
    assert updated["match_type"] == "exact_path" and updated["match"] == "/blog"
    assert updated["description"] == "d2"
    changed = admin.patch(
        f"{PATH}/{edge['id']}/routes/{route['id']}", {"match_type": "path_prefix", "match": "/b"}
    ).json
    assert changed["match_type"] == "path_prefix" and changed["match"] == "/b"
    assert admin.delete(f"{PATH}/{edge['id']}/routes/{route['id']}").status == 204
    assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").status == 404
    assert [r["id"] for r in admin.get(f"{PATH}/{edge['id']}").json["routes"]] == [second["id"]]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"match_type": "regex"}, "match_type"),
        ({"match_type": None}, "match_type"),
        ({"match": ""}, "match"),
        ({"match": None}, "match"),
        ({"match": "x" * 1025}, "match"),
        ({"backend": {"backend_id": "bkdhr_x"}}, "backend.backend_id"),
        ({"backend": {"backend_id": "bkdtg_0ERYqBR5B9RMvMY4cZCztl2IB7s"}}, "backend.backend_id"),
        ({"ip_restriction": {"ip_policy_ids": []}}, "ip_restriction.ip_policy_ids"),
        ({"request_headers": {"remove": ["a b"]}}, "request_headers.remove"),
        ({"traffic_policy": {"value": "[1]"}}, "traffic_policy.value"),
        ({"oauth": {}}, "oauth.provider"),
        ({"saml": {}}, "saml"),
        ({"oidc": {"issuer": "x", "client_id": "i", "client_secret": "s"}}, "oidc.issuer"),
        (
            {"circuit_breaker": {"error_threshold_percentage": 2}},
            "circuit_breaker.error_threshold_percentage",
        ),
        (
            {"webhook_verification": {"provider": "nope", "secret": "s"}},
            "webhook_verification.provider",
        ),
        ({"user_agent_filter": {"allow": ["("]}}, "user_agent_filter.allow[0]"),
        ({"response_headers": {"add": {"a b": "1"}}}, "response_headers.add"),
        ({"edge_id": "edghts_other"}, "edge_id"),
        ({"nope": 1}, "nope"),
    ],
)
def test_bad_route_returns_400_and_writes_nothing(account, body, field):
    edge = create_edge(account.admin)
    full = {
        k: v
        for k, v in {"match_type": "path_prefix", "match": "/", **body}.items()
        if v is not None
    }
    resp = account.admin.post(f"{PATH}/{edge['id']}/routes", full)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp
    assert account.admin.get(f"{PATH}/{edge['id']}").json["routes"] == []


def test_route_with_modules_in_create_and_patch(account):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(
        admin,
        edge["id"],
        edge_id=edge["id"],
        user_agent_filter={"deny": ["(?i)curl/.*"]},
        response_headers={"add": {"X-Frame-Options": "DENY"}},
    )
    assert route["user_agent_filter"] == {"enabled": True, "allow": [], "deny": ["(?i)curl/.*"]}
    assert route["response_headers"] == {
        "enabled": True,
        "add": {"x-frame-options": "DENY"},
        "remove": [],
    }
    patched = admin.patch(
        f"{PATH}/{edge['id']}/routes/{route['id']}", {"response_headers": {"remove": ["Server"]}}
    ).json
    assert patched["response_headers"] == {"enabled": True, "add": {}, "remove": ["server"]}
    assert patched["user_agent_filter"] == route["user_agent_filter"]
    only_meta = admin.patch(f"{PATH}/{edge['id']}/routes/{route['id']}", {"metadata": "x"}).json
    assert only_meta == {**patched, "metadata": "x"}


def test_route_modules_put_get_delete(account):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(admin, edge["id"], description="keep")
    base = f"{PATH}/{edge['id']}/routes/{route['id']}"
    for module in ("user_agent_filter", "response_headers"):
        resp = admin.get(f"{base}/{module}")
        assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND
    ua = admin.put(
        f"{base}/user_agent_filter",
        {"enabled": False, "allow": ["^Mozilla/.*$"], "deny": ["bot", "(?i)spider"]},
    )
    assert ua.status == 200, ua
    assert ua.json == {"enabled": False, "allow": ["^Mozilla/.*$"], "deny": ["bot", "(?i)spider"]}
    assert admin.get(f"{base}/user_agent_filter").json == ua.json
    defaults = admin.put(f"{base}/user_agent_filter", {})
    assert defaults.json == {"enabled": True, "allow": [], "deny": []}  # replaced whole
    rh = admin.put(
        f"{base}/response_headers",
        {
            "edge_id": edge["id"],
            "id": route["id"],
            "module": {"add": {"X-A": "1", "Cache-Control": "no-store"}},
        },
    )
    assert rh.status == 200, rh
    assert rh.json == {
        "enabled": True,
        "add": {"x-a": "1", "cache-control": "no-store"},
        "remove": [],
    }
    full = admin.get(base).json
    assert full["user_agent_filter"] == defaults.json and full["response_headers"] == rh.json
    assert full["description"] == "keep"
    assert admin.get(f"{PATH}/{edge['id']}").json["routes"] == [full]
    for module in ("user_agent_filter", "response_headers"):
        resp = admin.delete(f"{base}/{module}")
        assert resp.status == 204 and resp.text == ""
        assert admin.get(f"{base}/{module}").status == 404
        assert admin.delete(f"{base}/{module}").status == 204
    assert admin.get(base).json == {**full, "user_agent_filter": None, "response_headers": None}


@pytest.mark.parametrize(
    "module, body, field",
    [
        ("user_agent_filter", {"allow": ["("]}, "allow[0]"),
        ("user_agent_filter", {"allow": ["[a-"]}, "allow[0]"),
        ("user_agent_filter", {"deny": ["ok", "(?<=x)y"]}, "deny[1]"),
        ("user_agent_filter", {"allow": "x"}, "allow"),
        ("user_agent_filter", {"allow": [f"p{i}" for i in range(21)]}, "allow"),
        ("user_agent_filter", {"allow": ["x" * 513]}, "allow[0]"),
        ("user_agent_filter", {"enabled": "true"}, "enabled"),
        ("user_agent_filter", {"extra": 1}, "extra"),
        ("response_headers", {"add": {"X-A": "1", "x-a": "2"}}, "add"),
        ("response_headers", {"add": {"X-A": "a\nb"}}, "add"),
        ("response_headers", {"add": {"X A": "1"}}, "add"),
        ("response_headers", {"add": {f"h{i}": "v" for i in range(21)}}, "add"),
        ("response_headers", {"add": ["x"]}, "add"),
        ("response_headers", {"remove": ["bad header"]}, "remove"),
        ("response_headers", {"remove": "server"}, "remove"),
        ("response_headers", {"remove": [f"h{i}" for i in range(21)]}, "remove"),
        ("response_headers", {"module": {"add": {"a b": "1"}}}, "add"),
        ("response_headers", {"module": {}, "id": "edghtsrt_other"}, "id"),
    ],
)
def test_bad_module_put_returns_400_and_keeps_module(account, module, body, field):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(admin, edge["id"])
    base = f"{PATH}/{edge['id']}/routes/{route['id']}/{module}"
    assert admin.put(base, {}).status == 200
    before = admin.get(base).json
    resp = admin.put(base, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp
    if "RE2" in resp.json["msg"]:
        assert body[field.split("[")[0]][int(field[-2])] in resp.json["msg"]  # names the pattern
    assert admin.get(base).json == before


def test_module_limits_are_inclusive(account):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(admin, edge["id"])
    base = f"{PATH}/{edge['id']}/routes/{route['id']}"
    resp = admin.put(
        f"{base}/user_agent_filter",
        {"allow": ["a" * 512] * 20, "deny": [f"d{i}" for i in range(20)]},
    )
    assert resp.status == 200
    assert (
        admin.put(
            f"{base}/response_headers",
            {
                "add": {f"h{i}": "v" * 1024 for i in range(20)},
                "remove": [f"r{i}" for i in range(20)],
            },
        ).status
        == 200
    )


def test_missing_edge_or_route_is_404_for_routes_and_modules(account):
    admin = account.admin
    edge = create_edge(admin)
    route = create_route(admin, edge["id"])
    other_edge = create_edge(admin)
    missing_edge = "edghts_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    missing_route = "edghtsrt_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    for edge_id, route_id in (
        (missing_edge, route["id"]),
        (edge["id"], missing_route),
        (other_edge["id"], route["id"]),
        ("x", route["id"]),
        (edge["id"], "edghts_0ERYqBR5B9RMvMY4cZCztl2IB7s"),
    ):
        base = f"{PATH}/{edge_id}/routes/{route_id}"
        assert admin.get(base).status == 404
        assert admin.patch(base, {"metadata": "x"}).status == 404
        assert admin.delete(base).status == 404
        for module in ("user_agent_filter", "response_headers"):
            assert admin.get(f"{base}/{module}").status == 404
            assert admin.put(f"{base}/{module}", {}).status == 404
            assert admin.delete(f"{base}/{module}").status == 404
    assert admin.get(f"{PATH}/{missing_edge}/routes").status == 404
    assert (
        admin.post(
            f"{PATH}/{missing_edge}/routes", {"match_type": "exact_path", "match": "/"}
        ).status
        == 404
    )
    assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").status == 200


def test_deleting_an_edge_deletes_its_routes_and_frees_hostports(account):
    admin = account.admin
    hp = hostport()
    edge = create_edge(admin, hostports=[hp])
    routes = [create_route(admin, edge["id"], match=f"/{i}") for i in range(3)]
    admin.put(f"{PATH}/{edge['id']}/routes/{routes[0]['id']}/user_agent_filter", {})
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    for route in routes:
        assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").status == 404
    assert admin.get(f"{PATH}/{edge['id']}/routes").status == 404
    assert create_edge(admin, hostports=[hp])["hostports"] == [hp]


def test_route_limit_per_edge(api, account):
    if api.level != "inprocess":
        pytest.skip("the limit is logic, not transport: checked once, in-process")
    admin = account.admin
    edge = create_edge(admin, hostports=[hostport()])
    for i in range(50):
        create_route(admin, edge["id"], match=f"/{i}")
    resp = admin.post(f"{PATH}/{edge['id']}/routes", {"match_type": "exact_path", "match": "/x"})
    assert resp.status == 400 and "50" in resp.json["msg"]
    assert len(admin.get(f"{PATH}/{edge['id']}").json["routes"]) == 50
    # the largest edge still deletes in one transaction
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204


def test_other_accounts_edges_and_routes_are_not_found(account, other_account):
    edge = create_edge(account.admin)
    route = create_route(account.admin, edge["id"])
    other = other_account.admin
    base = f"{PATH}/{edge['id']}"
    assert other.get(base).status == 404
    assert other.patch(base, {"metadata": "x"}).status == 404
    assert other.delete(base).status == 404
    assert other.get(f"{base}/routes").status == 404
    assert other.post(f"{base}/routes", {"match_type": "exact_path", "match": "/"}).status == 404
    assert other.get(f"{base}/routes/{route['id']}").status == 404
    assert other.put(f"{base}/routes/{route['id']}/response_headers", {}).status == 404
    assert other.delete(f"{base}/routes/{route['id']}").status == 404
    assert other.get(PATH).json["https_edges"] == []
    assert account.admin.get(base).json["routes"] == [route]


def test_lists_paginate(account):
    admin = account.admin
    edges = [create_edge(admin)["id"] for _ in range(3)]
    page = admin.get(f"{PATH}?limit=2").json
    assert [e["id"] for e in page["https_edges"]] == edges[::-1][:2]
    assert [e["id"] for e in admin.get(page["next_page_uri"]).json["https_edges"]] == [edges[0]]
    routes = [create_route(admin, edges[0], match=f"/{i}")["id"] for i in range(3)]
    page = admin.get(f"{PATH}/{edges[0]}/routes?limit=2").json
    rest = admin.get(page["next_page_uri"]).json
    assert [r["id"] for r in page["routes"] + rest["routes"]] == routes[::-1]
    assert rest["next_page_uri"] is None
