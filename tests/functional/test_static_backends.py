"""/backends/static at both levels: address and tls, references from edges (chalicelib.backends);
what the edge reads (chalicelib.core.routing.resolve_backend)."""

import pytest

from chalicelib.core import ids, routing

PATH = "/backends/static"


def test_static_backend_crud(account):
    admin = account.admin
    resp = admin.post(PATH, {"address": "Origin.Example.com:443", "tls": {"enabled": True}})
    assert resp.status == 201, resp
    backend = resp.json
    assert ids.is_valid(backend["id"], "bkdsa")
    assert backend["address"] == "origin.example.com:443"
    assert backend["tls"] == {"enabled": True}
    assert admin.get(f"{PATH}/{backend['id']}").json == backend
    assert backend["id"] in [b["id"] for b in admin.get(PATH).json["backends"]]
    patched = admin.patch(f"{PATH}/{backend['id']}", {"address": "origin.example.com:80"}).json
    assert patched["address"] == "origin.example.com:80" and patched["tls"] == {"enabled": True}
    plain = admin.post(PATH, {"address": "origin.example.com:80"}).json
    assert plain["tls"] == {"enabled": False}
    # an edge's backend, and a failover member: counted, so not deletable while used
    edge = admin.post("/edges/tcp", {"backend": {"backend_id": backend["id"]}}).json
    assert edge["backend"]["backend"]["uri"].endswith(f"{PATH}/{backend['id']}")
    failover = admin.post("/backends/failover", {"backends": [plain["id"]]})
    assert failover.status == 201, failover
    assert admin.delete(f"{PATH}/{backend['id']}").status == 409
    assert admin.delete(f"/edges/tcp/{edge['id']}").status == 204
    assert admin.delete(f"{PATH}/{backend['id']}").status == 204
    assert admin.get(f"{PATH}/{backend['id']}").status == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "address"),
        ({"address": "no-port.example.com"}, "address"),
        ({"address": "a.example.com:0"}, "address"),
        ({"address": "a b:80"}, "address"),
        ({"address": "a.example.com:80", "tls": {"enabled": "yes"}}, "tls.enabled"),
        ({"address": "a.example.com:80", "tls": {"verify": False}}, "tls.verify"),
    ],
)
def test_bad_static_backend_is_400(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp.json


def test_the_edge_reads_address_and_tls(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    backend = account.admin.post(PATH, {"address": "o.example.com:8443", "tls": {"enabled": True}})
    found = routing.resolve_backend(account.id, backend.json["id"])
    assert found == {
        "kind": "static",
        "id": backend.json["id"],
        "address": "o.example.com:8443",
        "tls": True,
    }
