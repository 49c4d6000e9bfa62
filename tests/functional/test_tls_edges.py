"""/edges/tls and its module sub-resources at both levels (chalicelib.tls_edges)."""

import json

import pytest

from chalicelib.core import errors, ids, routing
from tests.functional.test_certificate_authorities import make_cert
from tests.functional.test_https_edges import hostport

FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "hostports",
    "backend",
    "ip_restriction",
    "mutual_tls",
    "tls_termination",
    "traffic_policy",
    "policy",
}
MODULES = ("backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy")
PATH = "/edges/tls"
TCP_POLICY = json.dumps({"on_tcp_connect": [{"actions": [{"type": "deny"}]}]})


def create_edge(caller, **fields):
    resp = caller.post(PATH, fields)
    assert resp.status == 201, resp
    return resp.json


def new_ca(caller):
    resp = caller.post("/certificate_authorities", {"ca_pem": make_cert()[0]})
    assert resp.status == 201, resp
    return resp.json["id"]


def test_bare_edge_has_every_module_null(account):
    edge = create_edge(account.admin)
    assert set(edge) == FIELDS and ids.is_valid(edge["id"], "edgtls")
    assert edge["uri"].endswith(f"{PATH}/{edge['id']}")
    assert all(edge[name] is None for name in MODULES + ("hostports", "policy"))
    assert account.admin.get(f"{PATH}/{edge['id']}").json == edge
    assert account.admin.get(PATH).json["tls_edges"] == [edge]


def copies(api):
    """The TLS listener's copies (a function over the store: read in-process only)."""
    return routing.tls_edges() if api.level == "inprocess" else None


def test_edge_crud_with_every_module(api, account):
    admin = account.admin
    backend = admin.post("/backends/tunnel_group", {"labels": {"app": "tls"}}).json["id"]
    policy = admin.post("/ip_policies", {}).json["id"]
    ca = new_ca(admin)
    hp = hostport()
    edge = create_edge(
        admin,
        hostports=[hp],
        backend={"backend_id": backend},
        ip_restriction={"ip_policy_ids": [policy]},
        tls_termination={"terminate_at": "edge", "min_version": "1.3"},
        mutual_tls={"certificate_authority_ids": [ca]},
        traffic_policy={"value": TCP_POLICY},
    )
    assert edge["hostports"] == [hp]
    assert edge["backend"]["backend"]["id"] == backend
    assert edge["ip_restriction"]["ip_policies"][0]["id"] == policy
    assert edge["mutual_tls"]["certificate_authorities"][0]["id"] == ca
    assert edge["tls_termination"] == {
        "enabled": True,
        "terminate_at": "edge",
        "min_version": "1.3",
    }
    assert edge["traffic_policy"] == {"enabled": True, "value": TCP_POLICY}
    # the copy the edge's TLS listener serves from
    if copies(api) is not None:
        copy = copies(api)[hp]
        assert copy["id"] == edge["id"] and copy["tls_termination"]["min_version"] == "1.3"
        assert copy["mutual_tls"]["certificate_authority_ids"] == [ca]
        assert copy["account_id"] == account.id
    # referenced resources cannot go while the edge uses them
    assert admin.delete(f"/backends/tunnel_group/{backend}").status == 409
    assert admin.delete(f"/certificate_authorities/{ca}").status == 409
    patched = admin.patch(f"{PATH}/{edge['id']}", {"metadata": "m", "hostports": []}).json
    assert patched["metadata"] == "m" and patched["hostports"] is None
    assert hp not in (copies(api) or {})
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    assert admin.get(f"{PATH}/{edge['id']}").status == 404
    assert admin.delete(f"/backends/tunnel_group/{backend}").status == 204
    assert admin.delete(f"/certificate_authorities/{ca}").status == 204


def test_hostports_share_the_namespace_of_https_edges(account):
    hp = hostport()
    create_edge(account.admin, hostports=[hp])
    assert account.admin.post("/edges/https", {"hostports": [hp]}).status == 409
    assert account.admin.post(PATH, {"hostports": [hp]}).status == 409
    tcp_hp = account.admin.post("/reserved_addrs", {}).json["addr"]
    resp = account.admin.post(PATH, {"hostports": [tcp_hp]})
    assert resp.status == 400 and "TLS edges can only be associated" in resp.json["msg"]
    assert resp.json["error_code"] == errors.TLS_EDGE_TCP_ADDRESS


def test_another_accounts_reserved_domain_is_refused(account, other_account):
    domain = f"tls-{ids.new_id('x')[-8:].lower()}.customer-example.com"
    assert other_account.admin.post("/reserved_domains", {"domain": domain}).status == 201
    resp = account.admin.post(PATH, {"hostports": [f"{domain}:443"]})
    assert resp.status == 400 and resp.json["details"]["hostport"] == f"{domain}:443"
    assert other_account.admin.post(PATH, {"hostports": [f"{domain}:443"]}).status == 201


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tls_termination": {"terminate_at": "agent"}}, "tls_termination.terminate_at"),
        ({"tls_termination": {"min_version": "1.4"}}, "tls_termination.min_version"),
        (
            {"tls_termination": {"terminate_at": "upstream", "min_version": "1.2"}},
            "tls_termination.min_version",
        ),
        (
            {"mutual_tls": {"certificate_authority_ids": []}},
            "mutual_tls.certificate_authority_ids",
        ),
        (
            {
                "tls_termination": {},
                "mutual_tls": {"certificate_authority_ids": ["ca_0ERYqBR5B9RMvMY4cZCztl2IB7s"]},
            },
            "mutual_tls.certificate_authority_ids",
        ),
        (
            {
                "traffic_policy": {
                    "value": json.dumps({"on_http_request": [{"actions": [{"type": "deny"}]}]})
                }
            },
            "traffic_policy.value",
        ),
        ({"policy": {"inbound": [], "outbound": [{"actions": []}]}}, "policy.outbound"),
        ({"routes": []}, "routes"),
    ],
)
def test_bad_edge_returns_400(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp.json


def test_mutual_tls_requires_termination_at_the_edge(account):
    admin = account.admin
    ca = new_ca(admin)
    mtls = {"certificate_authority_ids": [ca]}
    for termination in (None, {"terminate_at": "upstream"}, {"enabled": False}):
        body = {"mutual_tls": mtls}
        if termination:
            body["tls_termination"] = termination
        resp = admin.post(PATH, body)
        assert resp.status == 400 and "requires TLS termination at edge" in resp.json["msg"]
        assert resp.json["error_code"] == errors.MUTUAL_TLS_NEEDS_TERMINATION
    edge = create_edge(admin, mutual_tls=mtls, tls_termination={})
    assert edge["tls_termination"]["terminate_at"] == "edge"
    path = f"{PATH}/{edge['id']}"
    # removing or turning the termination to upstream under mutual_tls is refused
    assert admin.delete(f"{path}/tls_termination").status == 400
    resp = admin.put(f"{path}/tls_termination", {"terminate_at": "upstream"})
    assert resp.status == 400 and resp.json["details"]["field"] == "tls_termination"
    assert admin.delete(f"{path}/mutual_tls").status == 204
    assert admin.put(f"{path}/tls_termination", {"terminate_at": "upstream"}).json == {
        "enabled": True,
        "terminate_at": "upstream",
        "min_version": None,
    }


@pytest.mark.parametrize("name", MODULES)
def test_module_put_get_delete(api, account, name):
    admin = account.admin
    bodies = {
        "backend": lambda: {"backend_id": admin.post("/backends/http_response", {}).json["id"]},
        "ip_restriction": lambda: {"ip_policy_ids": [admin.post("/ip_policies", {}).json["id"]]},
        "mutual_tls": lambda: {"certificate_authority_ids": [new_ca(admin)]},
        "tls_termination": lambda: {"terminate_at": "edge", "min_version": "1.2"},
        "traffic_policy": lambda: {"value": TCP_POLICY},
    }
    edge = create_edge(admin, tls_termination={}, hostports=[hostport()])
    path = f"{PATH}/{edge['id']}/{name}"
    if name != "tls_termination":
        assert admin.get(path).status == 404
    put = admin.put(path, {"module": bodies[name](), "id": edge["id"]})
    assert put.status == 200, put
    assert admin.get(path).json == put.json
    assert admin.get(f"{PATH}/{edge['id']}").json[name] == put.json
    if copies(api) is not None:
        assert copies(api)[edge["hostports"][0]][name] is not None
    assert admin.delete(path).status == 204
    assert admin.get(path).status == 404
    assert admin.delete(path).status == 204  # not set: the same result
    assert admin.get(f"{PATH}/edgtls_0ERYqBR5B9RMvMY4cZCztl2IB7s/{name}").status == 404


def test_other_accounts_edges_are_not_found(account, other_account):
    edge = create_edge(account.admin)
    assert other_account.admin.get(f"{PATH}/{edge['id']}").status == 404
    assert other_account.admin.delete(f"{PATH}/{edge['id']}").status == 404
    assert other_account.admin.get(f"{PATH}/{edge['id']}/backend").status == 404
