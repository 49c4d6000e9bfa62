"""A CRUD pass per resource over HTTP (the resources' own functional tests cover their rules).

Each resource that the app serves is created, read, listed, updated and deleted; deleted
resources are 404. Resources whose routes do not exist yet are skipped.
"""

import pytest

from app import app
from chalicelib.core import errors, ids
from tests.integration.helpers import assert_error

SERVED = {(m, p) for p, by_method in app.routes.items() for m in by_method}


def _needs(*paths):
    missing = [p for p in paths if ("POST", p) not in SERVED]
    if missing:
        pytest.skip(f"not served yet: {', '.join(missing)}")


def crud(target, path, list_key, kind, body, update, fields):
    created = target.create(path, body)
    assert ids.is_valid(created["id"], ids.PREFIXES[kind]), created
    assert created["uri"].startswith("http") and created["uri"].endswith(created["id"])
    assert fields <= set(created), fields - set(created)
    got = target.request("GET", created["uri"])
    assert got.status_code == 200, got.text
    listed = target.request("GET", path, params={"limit": "100"})
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert created["id"] in {item["id"] for item in page[list_key]}
    assert set(page) == {list_key, "uri", "next_page_uri"}
    if update is not None:
        patched = target.request("PATCH", created["uri"], json_body=update)
        assert patched.status_code == 200, patched.text
        for name, value in update.items():
            assert patched.json()[name] == value, (name, patched.json())
        assert target.request("GET", created["uri"]).json() == patched.json()
    deleted = target.request("DELETE", created["uri"])
    assert deleted.status_code == 204 and deleted.text == "", deleted.text
    assert_error(target.request("GET", created["uri"]), 404, errors.NOT_FOUND)
    return created


COMMON = {"id", "uri", "created_at", "description", "metadata"}


def test_api_keys_crud(target):
    created = crud(
        target,
        "/api_keys",
        "keys",
        "api_key",
        {"description": "it", "metadata": "m"},
        {"description": "it2"},
        COMMON | {"token", "owner_id"},
    )
    assert created["token"]


def test_http_response_backends_crud(target):
    _needs("/backends/http_response")
    created = crud(
        target,
        "/backends/http_response",
        "backends",
        "http_response_backend",
        {"body": "hi", "status_code": 201, "headers": {"X-It": "yes"}},
        {"description": "d", "status_code": 202},
        COMMON | {"body", "headers", "status_code"},
    )
    assert created["headers"] == {"x-it": "yes"}


def test_ip_policies_and_rules_crud(target):
    _needs("/ip_policies", "/ip_policy_rules")
    crud(
        target,
        "/ip_policies",
        "ip_policies",
        "ip_policy",
        {"description": "p"},
        {"metadata": "m"},
        COMMON,
    )
    policy = target.create("/ip_policies", {"description": "for rules"})
    rule = crud(
        target,
        "/ip_policy_rules",
        "ip_policy_rules",
        "ip_policy_rule",
        {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"]},
        {"action": "deny"},
        COMMON | {"cidr", "action", "ip_policy"},
    )
    assert rule["ip_policy"]["id"] == policy["id"]


def test_credentials_crud(target):
    _needs("/credentials")
    created = crud(
        target,
        "/credentials",
        "credentials",
        "credential",
        {"description": "agent", "acl": ["bind:*.example.com"]},
        {"acl": ["bind:x.example.com"]},
        COMMON | {"token", "acl", "owner_id"},
    )
    assert created["token"]


def test_bot_users_crud(target):
    _needs("/bot_users")
    crud(
        target,
        "/bot_users",
        "bot_users",
        "bot_user",
        {"name": target.unique("bot")},
        {"active": False},
        {"id", "uri", "name", "active", "created_at"},
    )


def test_tcp_edges_crud_and_modules(target):
    _needs("/edges/tcp", "/backends/http_response")
    crud(
        target,
        "/edges/tcp",
        "tcp_edges",
        "tcp_edge",
        {"description": "e"},
        {"metadata": "m"},
        COMMON | {"hostports", "backend", "ip_restriction", "traffic_policy", "policy"},
    )
    backend = target.create("/backends/http_response", {"body": "b"})
    edge = target.create("/edges/tcp", {"description": "with modules"})
    url = edge["uri"] + "/backend"
    assert_error(target.request("GET", url), 404, errors.NOT_FOUND)
    put = target.request("PUT", url, json_body={"backend_id": backend["id"]})
    assert put.status_code == 200, put.text
    assert put.json()["backend"]["id"] == backend["id"] and put.json()["enabled"] is True
    assert target.request("GET", url).json() == put.json()
    assert target.request("DELETE", url).status_code == 204
    assert_error(target.request("GET", url), 404, errors.NOT_FOUND)
    policy = target.create("/ip_policies", {})
    url = edge["uri"] + "/ip_restriction"
    put = target.request("PUT", url, json_body={"ip_policy_ids": [policy["id"]]})
    assert put.status_code == 200, put.text
    assert target.request("DELETE", url).status_code == 204
    url = edge["uri"] + "/traffic_policy"
    value = '{"on_tcp_connect": [{"name": "r", "expressions": [], "actions": []}]}'
    put = target.request("PUT", url, json_body={"value": value})
    assert put.status_code in (200, 400), put.text  # the policy engine may refuse it
    target.request("DELETE", url)


def test_https_edges_routes_and_route_modules(target):
    _needs("/edges/https", "/edges/https/{edge_id}/routes")
    crud(
        target,
        "/edges/https",
        "https_edges",
        "https_edge",
        {"description": "h"},
        {"metadata": "m"},
        COMMON | {"hostports", "routes", "mutual_tls", "tls_termination"},
    )
    edge = target.create("/edges/https", {"description": "with routes"})
    routes = edge["uri"] + "/routes"
    crud(
        target,
        routes,
        "routes",
        "https_edge_route",
        {"match_type": "path_prefix", "match": "/"},
        {"description": "r"},
        COMMON | {"match_type", "match", "user_agent_filter", "response_headers"},
    )
    route = target.create(routes, {"match_type": "exact_path", "match": "/x"})
    for module, body in (
        ("user_agent_filter", {"allow": ["^curl/"], "deny": []}),
        ("response_headers", {"add": {"X-A": "b"}, "remove": ["server"]}),
    ):
        url = route["uri"] + "/" + module
        put = target.request("PUT", url, json_body=body)
        assert put.status_code == 200, put.text
        assert target.request("GET", url).json() == put.json()
        assert target.request("DELETE", url).status_code == 204
        assert_error(target.request("GET", url), 404, errors.NOT_FOUND)


def test_abuse_reports_create_and_get(target):
    _needs("/abuse_reports")
    created = target.create("/abuse_reports", {"urls": ["https://Bad.Example.com:8443/x"]})
    assert created["hostnames"] == [{"hostname": "bad.example.com", "status": "PENDING"}]
    assert created["status"] == "PENDING"
    got = target.request("GET", created["uri"])
    assert got.status_code == 200 and got.json()["id"] == created["id"]


def test_reserved_domains_crud(target):
    _needs("/reserved_domains")
    crud(
        target,
        "/reserved_domains",
        "reserved_domains",
        "reserved_domain",
        {"domain": f"{target.unique('it')}.example.org"},
        {"description": "d"},
        COMMON | {"domain", "cname_target"},
    )
