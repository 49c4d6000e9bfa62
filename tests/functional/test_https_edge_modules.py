"""HTTPS route modules backend, ip_restriction, request_headers, traffic_policy; the edge
modules tls_termination and mutual_tls; and the edge's reads (edge_for_hostport)."""

import itertools
import json
import os

import pytest

from chalicelib.core import ids
from chalicelib.core.config import get_settings
from chalicelib.core import routing

PATH = "/edges/https"
POLICY = json.dumps({"on_http_request": [{"name": "r", "actions": [{"type": "deny"}]}]})
_counter = itertools.count()


def hostport():
    return (
        f"m{os.getpid()}-{next(_counter)}-{ids.new_id('x')[-8:].lower()}."
        f"{get_settings().base_domain}:443"
    )


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def edge_and_route(caller, **route_fields):
    edge = created(caller.post(PATH, {"hostports": [hostport()]}))
    route = created(
        caller.post(
            f"{PATH}/{edge['id']}/routes",
            {"match_type": "path_prefix", "match": "/", **route_fields},
        )
    )
    return edge, route


def test_route_modules_in_create_and_as_sub_resources(account):
    admin = account.admin
    backend = created(admin.post("/backends/tunnel_group", {"labels": {"app": "web"}}))
    policy = created(admin.post("/ip_policies", {}))
    edge, route = edge_and_route(
        admin,
        backend={"backend_id": backend["id"]},
        ip_restriction={"ip_policy_ids": [policy["id"]]},
        request_headers={"add": {"X-From": "edge"}, "remove": ["Cookie"]},
        traffic_policy={"value": POLICY},
    )
    assert route["backend"] == {
        "enabled": True,
        "backend": {"id": backend["id"], "uri": backend["uri"]},
    }
    assert route["ip_restriction"] == {
        "enabled": True,
        "ip_policies": [{"id": policy["id"], "uri": policy["uri"]}],
    }
    assert route["request_headers"] == {
        "enabled": True,
        "add": {"x-from": "edge"},
        "remove": ["cookie"],
    }
    assert route["traffic_policy"] == {"enabled": True, "value": POLICY}
    base = f"{PATH}/{edge['id']}/routes/{route['id']}"
    for name in ("backend", "ip_restriction", "request_headers", "traffic_policy"):
        assert admin.get(f"{base}/{name}").json == route[name]
    rh = admin.put(
        f"{base}/request_headers",
        {"module": {"add": {}, "remove": ["x-a"]}, "edge_id": edge["id"], "id": route["id"]},
    )
    assert rh.status == 200 and rh.json == {"enabled": True, "add": {}, "remove": ["x-a"]}
    tp = admin.put(f"{base}/traffic_policy", {"enabled": False, "value": POLICY})
    assert tp.json == {"enabled": False, "value": POLICY}
    # the references are held by the route ...
    assert admin.delete(f"/backends/tunnel_group/{backend['id']}").status == 409
    assert admin.delete(f"/ip_policies/{policy['id']}").status == 409
    # ... and let go with the module, the route, or the edge
    assert admin.delete(f"{base}/backend").status == 204
    assert admin.get(f"{base}/backend").status == 404
    assert admin.delete(f"{base}/backend").status == 204
    assert admin.delete(f"/backends/tunnel_group/{backend['id']}").status == 204
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    assert admin.delete(f"/ip_policies/{policy['id']}").status == 204


def test_route_module_put_with_a_missing_reference_changes_nothing(account):
    admin = account.admin
    edge, route = edge_and_route(admin)
    base = f"{PATH}/{edge['id']}/routes/{route['id']}"
    missing = "bkdhr_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    resp = admin.put(f"{base}/backend", {"backend_id": missing})
    assert resp.status == 400 and resp.json["details"]["field"] == "backend_id"
    resp = admin.put(f"{base}/ip_restriction", {"ip_policy_ids": ["ipp_x"]})
    assert resp.status == 400 and resp.json["details"]["field"] == "ip_policy_ids[0]"
    assert admin.get(f"{PATH}/{edge['id']}/routes/{route['id']}").json == route
    assert admin.get(f"{base}/circuit_breaker").status == 404


def test_route_patch_moves_references(account):
    admin = account.admin
    b1 = created(admin.post("/backends/http_response", {}))
    b2 = created(admin.post("/backends/http_response", {}))
    edge, route = edge_and_route(admin, backend={"backend_id": b1["id"]})
    updated = admin.patch(
        f"{PATH}/{edge['id']}/routes/{route['id']}",
        {"backend": {"backend_id": b2["id"]}, "match": ""},
    )
    assert updated.status == 200 and updated.json["backend"]["backend"]["id"] == b2["id"]
    assert admin.delete(f"/backends/http_response/{b1['id']}").status == 204
    assert admin.delete(f"/backends/http_response/{b2['id']}").status == 409
    assert admin.delete(f"{PATH}/{edge['id']}/routes/{route['id']}").status == 204
    assert admin.delete(f"/backends/http_response/{b2['id']}").status == 204


def test_tls_termination_module(account):
    admin = account.admin
    edge = created(admin.post(PATH, {"tls_termination": {"min_version": "1.3"}}))
    assert edge["tls_termination"] == {
        "enabled": True,
        "terminate_at": "edge",
        "min_version": "1.3",
    }
    base = f"{PATH}/{edge['id']}/tls_termination"
    assert admin.get(base).json == edge["tls_termination"]
    for version in ("1.0", "1.1", "1.2", "1.3"):
        assert admin.put(base, {"min_version": version}).json["min_version"] == version
    assert admin.put(base, {}).json == {
        "enabled": True,
        "terminate_at": "edge",
        "min_version": None,
    }
    for bad in ("1.4", "TLSv1.2", "0.9"):
        resp = admin.put(base, {"min_version": bad})
        assert resp.status == 400 and resp.json["details"]["field"] == "min_version"
    # what a GET shows can be PUT back; TLS pass-through is refused, saying so
    assert admin.put(base, {"terminate_at": "edge", "min_version": "1.3"}).json == {
        "enabled": True,
        "terminate_at": "edge",
        "min_version": "1.3",
    }
    for bad in ("upstream", "agent"):
        resp = admin.put(base, {"terminate_at": bad, "min_version": "1.2"})
        assert resp.status == 400 and resp.json["details"]["field"] == "terminate_at", resp
        assert admin.get(base).json["min_version"] == "1.3"
    assert "not supported" in admin.put(base, {"terminate_at": "upstream"}).json["msg"]
    admin.put(base, {})
    assert (
        admin.patch(f"{PATH}/{edge['id']}", {"metadata": "m"}).json["tls_termination"][
            "min_version"
        ]
        is None
    )
    assert admin.delete(base).status == 204
    assert admin.get(base).status == 404
    assert admin.get(f"{PATH}/{edge['id']}").json["tls_termination"] is None


def test_mutual_tls_limits(account):
    from tests.functional.test_certificate_authorities import make_cert

    admin = account.admin
    cas = [
        created(admin.post("/certificate_authorities", {"ca_pem": make_cert()[0]}))["id"]
        for _ in range(11)
    ]
    edge = created(admin.post(PATH, {}))
    base = f"{PATH}/{edge['id']}/mutual_tls"
    ok = admin.put(base, {"certificate_authority_ids": cas[:10]})
    assert ok.status == 200 and len(ok.json["certificate_authorities"]) == 10
    for bad in (cas, [], [cas[0], cas[0]]):
        resp = admin.put(base, {"certificate_authority_ids": bad})
        assert resp.status == 400 and resp.json["details"]["field"].startswith(
            "certificate_authority_ids"
        )
    assert admin.get(base).json == ok.json


# ---- the edge's reads -------------------------------------------------------------------------
def test_edge_for_hostport_is_the_current_edge_and_ordered_routes(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    admin = account.admin
    hp = hostport()
    edge = created(admin.post(PATH, {"hostports": [hp], "tls_termination": {}}))
    routes = {}
    for match_type, match in (
        ("path_prefix", "/"),
        ("path_prefix", "/api/v1"),
        ("exact_path", "/health"),
        ("path_prefix", "/api"),
    ):
        routes[match] = created(
            admin.post(f"{PATH}/{edge['id']}/routes", {"match_type": match_type, "match": match})
        )["id"]
    found, found_routes = routing.https_edge_for_hostport(hp)
    assert found["id"] == edge["id"] and found["account_id"] == account.id
    assert found["hostports"] == [hp] and found["mutual_tls"] is None
    assert found["tls_termination"] == {"enabled": True, "min_version": None}
    assert "hostport_refs" not in found
    assert [r["match"] for r in found_routes] == ["/health", "/api/v1", "/api", "/"]
    assert found_routes[0]["id"] == routes["/health"] and found_routes[0]["backend"] is None
    # a change is in the very next read
    admin.put(f"{PATH}/{edge['id']}/tls_termination", {"min_version": "1.3"})
    admin.put(f"{PATH}/{edge['id']}/routes/{routes['/']}/request_headers", {"add": {"x-a": "1"}})
    found, found_routes = routing.https_edge_for_hostport(hp)
    assert found["tls_termination"]["min_version"] == "1.3"
    assert found_routes[-1]["request_headers"] == {
        "enabled": True,
        "add": {"x-a": "1"},
        "remove": [],
    }
    other = hostport()
    admin.patch(f"{PATH}/{edge['id']}", {"hostports": [other]})
    assert routing.https_edge_for_hostport(hp) is None
    assert routing.https_edge_for_hostport(other)[0]["hostports"] == [other]
    assert routing.tcp_edge_for_hostport(other) is None
    admin.delete(f"{PATH}/{edge['id']}")
    assert routing.https_edge_for_hostport(other) is None


def test_tls_index_follows_the_tls_modules_hostports_and_deletes(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    from stacks.costs import StoreCalls
    from stacks.certs import make_ca, pem

    admin = account.admin
    hp, other = hostport(), hostport()
    edge = created(admin.post(PATH, {"hostports": [hp], "tls_termination": {}}))
    assert hp not in routing.tls_index()  # no min_version: nothing asked
    admin.put(f"{PATH}/{edge['id']}/tls_termination", {"min_version": "1.3"})
    assert routing.tls_index()[hp] == {
        "account_id": account.id,
        "edge_id": edge["id"],
        "min_version": "1.3",
    }
    ca = created(admin.post("/certificate_authorities", {"ca_pem": pem(make_ca("i")[1])}))
    admin.put(f"{PATH}/{edge['id']}/mutual_tls", {"certificate_authority_ids": [ca["id"]]})
    admin.patch(f"{PATH}/{edge['id']}", {"hostports": [hp, other]})
    index = routing.tls_index()
    assert (
        index[hp]
        == index[other]
        == {
            "account_id": account.id,
            "edge_id": edge["id"],
            "min_version": "1.3",
            "certificate_authority_ids": [ca["id"]],
        }
    )
    admin.delete(f"{PATH}/{edge['id']}/tls_termination")
    admin.patch(f"{PATH}/{edge['id']}", {"hostports": [other]})
    index = routing.tls_index()
    assert hp not in index and "min_version" not in index[other]
    calls = StoreCalls()
    with calls.active():
        routing.tls_index()
    assert dict(calls.view) == {"Query": 1}
    admin.delete(f"{PATH}/{edge['id']}")
    assert other not in routing.tls_index()


def test_tcp_edge_for_hostport(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    admin = account.admin
    addr = created(admin.post("/reserved_addrs", {}))["addr"]
    edge = created(admin.post("/edges/tcp", {"hostports": [addr]}))
    found = routing.tcp_edge_for_hostport(addr)
    assert found["id"] == edge["id"] and found["account_id"] == account.id
    assert found["backend"] is None and found["ip_restriction"] is None
    tg = created(admin.post("/backends/tunnel_group", {"labels": {"app": "db"}}))
    admin.put(f"/edges/tcp/{edge['id']}/backend", {"backend_id": tg["id"]})
    assert routing.tcp_edge_for_hostport(addr)["backend"] == {
        "enabled": True,
        "backend_id": tg["id"],
    }
    assert routing.https_edge_for_hostport(addr) is None
    admin.delete(f"/edges/tcp/{edge['id']}")
    assert routing.tcp_edge_for_hostport(addr) is None


def test_edge_reads_cost_one_get_and_one_query(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    from stacks.costs import StoreCalls

    admin = account.admin
    hp = hostport()
    edge = created(admin.post(PATH, {"hostports": [hp]}))
    created(admin.post(f"{PATH}/{edge['id']}/routes", {"match_type": "exact_path", "match": "/"}))
    addr = created(admin.post("/reserved_addrs", {}))["addr"]
    created(admin.post("/edges/tcp", {"hostports": [addr]}))
    calls = StoreCalls()
    with calls.active():
        assert routing.https_edge_for_hostport(hp)[0]["id"] == edge["id"]
    assert dict(calls.view) == {"GetItem": 1, "Query": 1}
    calls.reset()
    with calls.active():
        assert routing.tcp_edge_for_hostport(addr) is not None
    assert dict(calls.view) == {"GetItem": 1}


def test_edge_with_more_references_than_a_transaction_holds_still_deletes(api, account):
    if api.level != "inprocess":
        pytest.skip("the transaction limit is logic, not transport: checked once, in-process")
    admin = account.admin
    edge = created(admin.post(PATH, {"hostports": [hostport()]}))
    backends = []
    for i in range(50):
        backend = created(admin.post("/backends/http_response", {}))["id"]
        backends.append(backend)
        created(
            admin.post(
                f"{PATH}/{edge['id']}/routes",
                {"match_type": "exact_path", "match": f"/{i}", "backend": {"backend_id": backend}},
            )
        )
    # 1 edge + 50 routes + 1 hostport + 50 backend counters > 100 operations
    assert admin.delete(f"/backends/http_response/{backends[0]}").status == 409
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    assert admin.get(f"{PATH}/{edge['id']}").status == 404
    for backend in backends:
        assert admin.delete(f"/backends/http_response/{backend}").status == 204
