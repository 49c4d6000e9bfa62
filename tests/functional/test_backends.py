"""/backends/tunnel_group, /backends/failover and /backends/weighted at both levels."""

import pytest

from chalicelib.core import errors, ids
from chalicelib.core import routing

COMMON = {"id", "uri", "created_at", "description", "metadata"}
TG, FO, WT = "/backends/tunnel_group", "/backends/failover", "/backends/weighted"
MISSING_TG = "bkdtg_0ERYqBR5B9RMvMY4cZCztl2IB7s"


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def group(caller, **labels):
    return created(caller.post(TG, {"labels": labels or {"app": "web"}}))


def response_backend(caller):
    return created(caller.post("/backends/http_response", {"body": "hi"}))


def test_tunnel_group_crud(account):
    admin = account.admin
    tg = created(
        admin.post(
            TG,
            {"description": "web", "metadata": "m", "labels": {"app": "Web", "dc/zone": "eu-1"}},
        )
    )
    assert set(tg) == COMMON | {"labels", "tunnels"} and ids.is_valid(tg["id"], "bkdtg")
    assert tg["labels"] == {"app": "Web", "dc/zone": "eu-1"} and tg["tunnels"] == []
    assert tg["uri"].endswith(f"{TG}/{tg['id']}")
    assert admin.get(f"{TG}/{tg['id']}").json == tg
    assert admin.get(TG).json["backends"] == [tg]
    # what the reference client sends on update: labels {} means "unchanged"
    updated = admin.patch(f"{TG}/{tg['id']}", {"description": "d2", "labels": {}})
    assert updated.status == 200 and updated.json == {**tg, "description": "d2"}
    replaced = admin.patch(f"{TG}/{tg['id']}", {"labels": {"app": "api"}}).json
    assert replaced["labels"] == {"app": "api"}
    assert admin.delete(f"{TG}/{tg['id']}").status == 204
    assert admin.get(f"{TG}/{tg['id']}").status == 404


def test_failover_and_weighted_crud(account):
    admin = account.admin
    a, b = group(admin), response_backend(admin)
    fo = created(admin.post(FO, {"backends": [a["id"], b["id"]]}))
    assert set(fo) == COMMON | {"backends"} and ids.is_valid(fo["id"], "bkdfo")
    assert fo["backends"] == [a["id"], b["id"]]
    assert admin.patch(f"{FO}/{fo['id']}", {"backends": []}).json["backends"] == fo["backends"]
    assert admin.patch(f"{FO}/{fo['id']}", {"backends": [b["id"], a["id"]]}).json["backends"] == [
        b["id"],
        a["id"],
    ]
    wt = created(admin.post(WT, {"backends": {a["id"]: 0, b["id"]: 10000}}))
    assert ids.is_valid(wt["id"], "bkdwt") and wt["backends"] == {a["id"]: 0, b["id"]: 10000}
    assert admin.patch(f"{WT}/{wt['id']}", {"backends": {}}).json["backends"] == wt["backends"]
    assert admin.get(FO).json["backends"][0]["id"] == fo["id"]
    assert admin.get(WT).json["backends"] == [admin.get(f"{WT}/{wt['id']}").json]
    assert admin.delete(f"{FO}/{fo['id']}").status == 204
    assert admin.delete(f"{WT}/{wt['id']}").status == 204


@pytest.mark.parametrize(
    "path, body, field",
    [
        (TG, {}, "labels"),
        (TG, {"labels": {}}, "labels"),
        (TG, {"labels": ["app=web"]}, "labels"),
        (TG, {"labels": {"app": 1}}, "labels.app"),
        (TG, {"labels": {"app": ""}}, "labels.app"),
        (TG, {"labels": {"app": "a b"}}, "labels.app"),
        (TG, {"labels": {"-app": "x"}}, "labels.-app"),
        (TG, {"labels": {"k" * 65: "x"}}, "labels." + "k" * 64),
        (TG, {"labels": {"app": "v" * 257}}, "labels.app"),
        (TG, {"labels": {"app": "*"}}, "labels.app"),
        (TG, {"labels": {f"k{i}": "v" for i in range(11)}}, "labels"),
        (TG, {"labels": {"a": "b"}, "tunnels": []}, "tunnels"),
        (FO, {}, "backends"),
        (FO, {"backends": []}, "backends"),
        (FO, {"backends": "bkdtg_x"}, "backends"),
        (FO, {"backends": ["nope"]}, "backends[0]"),
        (FO, {"backends": ["ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}, "backends[0]"),
        (FO, {"backends": ["bkdfo_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}, "backends[0]"),
        (FO, {"backends": [MISSING_TG]}, "backends"),
        (FO, {"backends": [MISSING_TG, MISSING_TG]}, "backends"),
        (FO, {"backends": [f"bkdtg_{'0' * 26}{i}" for i in range(11)]}, "backends"),
        (WT, {"backends": {MISSING_TG: 10001}}, f"backends.{MISSING_TG}"),
        (WT, {"backends": {MISSING_TG: -1}}, f"backends.{MISSING_TG}"),
        (WT, {"backends": {MISSING_TG: True}}, f"backends.{MISSING_TG}"),
        (WT, {"backends": {MISSING_TG: 1.5}}, f"backends.{MISSING_TG}"),
        (WT, {"backends": {MISSING_TG: 0}}, "backends"),
        (
            WT,
            {"backends": {"bkdwt_0ERYqBR5B9RMvMY4cZCztl2IB7s": 1}},
            "backends.bkdwt_0ERYqBR5B9RMvMY4cZCztl2IB7s",
        ),
        (WT, {"backends": {MISSING_TG: 1}}, "backends"),
        (WT, {"backends": [MISSING_TG]}, "backends"),
    ],
)
def test_bad_backend_bodies_return_400_and_write_nothing(account, path, body, field):
    resp = account.admin.post(path, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp
    assert account.admin.get(path).json["backends"] == []


def test_limits_are_inclusive(account):
    admin = account.admin
    labels = {f"k{i}": "v" * 256 for i in range(9)}
    labels["k" * 64] = "x"
    assert created(admin.post(TG, {"labels": labels}))["labels"] == labels
    members = [group(admin)["id"] for _ in range(10)]
    assert created(admin.post(FO, {"backends": members}))["backends"] == members
    weights = {m: 10000 for m in members}
    assert created(admin.post(WT, {"backends": weights}))["backends"] == weights
    more = members + [group(admin)["id"]]
    assert admin.post(FO, {"backends": more}).status == 400
    assert admin.post(WT, {"backends": {m: 1 for m in more}}).status == 400


def test_another_accounts_backend_is_a_bad_reference(account, other_account):
    theirs = group(other_account.admin)
    resp = account.admin.post(FO, {"backends": [theirs["id"]]})
    assert resp.status == 400 and theirs["id"] in resp.json["msg"]
    resp = account.admin.post(WT, {"backends": {theirs["id"]: 1}})
    assert resp.status == 400 and theirs["id"] in resp.json["msg"]
    assert account.admin.get(f"{TG}/{theirs['id']}").status == 404


def test_members_cannot_be_deleted_while_referenced(account):
    admin = account.admin
    a, b, c = group(admin), response_backend(admin), group(admin)
    fo = created(admin.post(FO, {"backends": [a["id"], b["id"]]}))
    wt = created(admin.post(WT, {"backends": {a["id"]: 1}}))
    for path, member in ((TG, a), ("/backends/http_response", b)):
        resp = admin.delete(f"{path}/{member['id']}")
        assert resp.status == 409 and resp.json["error_code"] == errors.Conflict.error_code
    # the failover lets go of a (replaced by c); the weighted one still holds it
    admin.patch(f"{FO}/{fo['id']}", {"backends": [c["id"], b["id"]]})
    assert admin.delete(f"{TG}/{a['id']}").status == 409
    assert admin.delete(f"{WT}/{wt['id']}").status == 204
    assert admin.delete(f"{TG}/{a['id']}").status == 204
    assert admin.delete(f"{TG}/{c['id']}").status == 409
    assert admin.delete(f"{FO}/{fo['id']}").status == 204
    assert admin.delete(f"{TG}/{c['id']}").status == 204
    assert admin.delete(f"/backends/http_response/{b['id']}").status == 204


def test_a_bad_patch_changes_no_counter(account):
    admin = account.admin
    a = group(admin)
    fo = created(admin.post(FO, {"backends": [a["id"]]}))
    resp = admin.patch(f"{FO}/{fo['id']}", {"backends": [a["id"], MISSING_TG]})
    assert resp.status == 400 and MISSING_TG in resp.json["msg"]
    assert admin.get(f"{FO}/{fo['id']}").json == fo
    assert admin.delete(f"{FO}/{fo['id']}").status == 204
    assert admin.delete(f"{TG}/{a['id']}").status == 204  # its count went back to 0


def test_edges_use_every_backend_kind_and_hold_them(account):
    admin = account.admin
    tg = group(admin)
    fo = created(admin.post(FO, {"backends": [tg["id"]]}))
    wt = created(admin.post(WT, {"backends": {tg["id"]: 5}}))
    edge = created(admin.post("/edges/https", {}))
    for target, path in ((tg, TG), (fo, FO), (wt, WT)):
        route = created(
            admin.post(
                f"/edges/https/{edge['id']}/routes",
                {
                    "match_type": "path_prefix",
                    "match": f"/{target['id']}",
                    "backend": {"backend_id": target["id"]},
                },
            )
        )
        assert route["backend"] == {
            "enabled": True,
            "backend": {"id": target["id"], "uri": target["uri"]},
        }
        assert admin.delete(f"{path}/{target['id']}").status == 409
    tcp = created(admin.post("/edges/tcp", {"backend": {"backend_id": tg["id"]}}))
    assert tcp["backend"]["backend"]["uri"] == tg["uri"]
    assert admin.delete(f"/edges/tcp/{tcp['id']}").status == 204
    assert admin.delete(f"/edges/https/{edge['id']}").status == 204
    for path, target in ((FO, fo), (WT, wt), (TG, tg)):
        assert admin.delete(f"{path}/{target['id']}").status == 204


def test_list_paginates(account):
    made = [group(account.admin)["id"] for _ in range(3)]
    page = account.admin.get(f"{TG}?limit=2").json
    seen = [b["id"] for b in page["backends"]]
    assert page["next_page_uri"]
    seen += [b["id"] for b in account.admin.get(page["next_page_uri"]).json["backends"]]
    assert seen == made[::-1]


def test_members_and_other_accounts_see_their_own(account, other_account):
    tg = group(account.member)
    assert account.admin.get(f"{TG}/{tg['id']}").status == 200
    assert other_account.admin.get(f"{TG}/{tg['id']}").status == 404
    assert other_account.admin.delete(f"{TG}/{tg['id']}").status == 404


# ---- the edge's read: backends.resolve -------------------------------------------------------
def test_resolve_gives_the_edge_plain_dicts(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    admin = account.admin
    tg = group(admin, app="web")
    hr = created(
        admin.post(
            "/backends/http_response",
            {"body": "down", "status_code": 503, "headers": {"X-A": "1"}},
        )
    )
    fo = created(admin.post(FO, {"backends": [tg["id"], hr["id"]]}))
    wt = created(admin.post(WT, {"backends": {tg["id"]: 3, hr["id"]: 1}}))
    plain_tg = {"kind": "tunnel_group", "id": tg["id"], "labels": {"app": "web"}}
    plain_hr = {
        "kind": "http_response",
        "id": hr["id"],
        "status_code": 503,
        "headers": {"x-a": "1"},
        "body": "down",
    }
    assert routing.resolve_backend(account.id, tg["id"]) == plain_tg
    assert routing.resolve_backend(account.id, hr["id"]) == plain_hr
    assert routing.resolve_backend(account.id, fo["id"]) == {
        "kind": "failover",
        "id": fo["id"],
        "backends": [plain_tg, plain_hr],
    }
    assert routing.resolve_backend(account.id, wt["id"]) == {
        "kind": "weighted",
        "id": wt["id"],
        "backends": [{"weight": 3, "backend": plain_tg}, {"weight": 1, "backend": plain_hr}],
    }
    assert routing.resolve_backend("acct_0ERYqBR5B9RMvMY4cZCztl2IB7s", tg["id"]) is None
    assert routing.resolve_backend(account.id, MISSING_TG) is None
    assert routing.resolve_backend(account.id, "nope") is None


def test_tunnel_group_shows_its_online_labeled_tunnels(api, account):
    if api.level != "inprocess":
        pytest.skip("online items are written by the edge: written here in-process")
    from chalicelib.core import online

    admin = account.admin
    sid = online.new_session_id()
    online.session_started(
        account_id=account.id,
        session_id=sid,
        credential_id="cr_x",
        instance_id="edge-a",
        agent_version="1",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id=account.admin.id,
    )

    def labeled(labels, account_id=account.id):
        tid = online.new_tunnel_id()
        online.tunnel_started(
            account_id=account_id,
            session_id=sid,
            tunnel_id=tid,
            instance_id="edge-a",
            proto="",
            labels=labels,
        )
        return tid

    web = labeled({"app": "web", "dc": "eu"})
    labeled({"app": "api"})
    tg = group(admin, app="web")
    assert tg["tunnels"] == [
        {
            "id": web,
            "uri": tg["uri"].replace(f"/backends/tunnel_group/{tg['id']}", f"/tunnels/{web}"),
        }
    ]
    assert group(admin, app="web", dc="us")["tunnels"] == []
    online.tunnel_stopped(account.id, web)
    assert admin.get(f"{TG}/{tg['id']}").json["tunnels"] == []
