"""/ip_restrictions at both levels (chalicelib.ip_restrictions): types, policies (counted),
enforced; what the edge reads (chalicelib.core.ip_rules.restrictions_of). The API's own
enforcement of ``api`` and ``dashboard``: test_api_ip_restrictions.py."""

import pytest

from chalicelib.core import ids, ip_rules

PATH = "/ip_restrictions"


def _policy(caller):
    resp = caller.post("/ip_policies", {})
    assert resp.status == 201, resp
    return resp.json["id"]


def test_ip_restriction_crud(api, account):
    admin = account.admin
    p1, p2 = _policy(admin), _policy(admin)
    resp = admin.post(PATH, {"type": "endpoints", "ip_policy_ids": [p1], "description": "office"})
    assert resp.status == 201, resp
    r = resp.json
    assert ids.is_valid(r["id"], "ipx") and r["uri"].endswith(f"{PATH}/{r['id']}")
    assert r["type"] == "endpoints" and r["enforced"] is False
    assert [p["id"] for p in r["ip_policies"]] == [p1]
    assert admin.get(f"{PATH}/{r['id']}").json == r
    assert r["id"] in [x["id"] for x in admin.get(PATH).json["ip_restrictions"]]
    assert admin.delete(f"/ip_policies/{p1}").status == 409  # used
    patched = admin.patch(f"{PATH}/{r['id']}", {"enforced": True, "ip_policy_ids": [p2]}).json
    assert patched["enforced"] is True and [p["id"] for p in patched["ip_policies"]] == [p2]
    assert admin.delete(f"/ip_policies/{p1}").status == 204  # released by the change
    if api.level == "inprocess":
        assert ip_rules.restrictions_of(account.id) == [
            {"id": r["id"], "type": "endpoints", "enforced": True, "ip_policy_ids": [p2]}
        ]
    assert admin.delete(f"{PATH}/{r['id']}").status == 204
    assert admin.get(f"{PATH}/{r['id']}").status == 404
    assert admin.delete(f"/ip_policies/{p2}").status == 204


@pytest.mark.parametrize(
    "body, field",
    [
        ({"ip_policy_ids": ["ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}, "type"),
        ({"type": "everything"}, "type"),
        ({"type": "agent"}, "ip_policy_ids"),
        ({"type": "agent", "ip_policy_ids": []}, "ip_policy_ids"),
        ({"type": "agent", "ip_policy_ids": ["nope"]}, "ip_policy_ids[0]"),
        ({"type": "agent", "ip_policy_ids": ["ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}, "ip_policy_ids"),
        (
            {"type": "agent", "ip_policy_ids": ["ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"], "enforced": 1},
            "enforced",
        ),
    ],
)
def test_bad_ip_restriction_is_400(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp.json


def test_type_cannot_change_and_other_accounts_do_not_see_it(account, other_account):
    r = account.admin.post(PATH, {"type": "agent", "ip_policy_ids": [_policy(account.admin)]}).json
    resp = account.admin.patch(f"{PATH}/{r['id']}", {"type": "endpoints"})
    assert resp.status == 400 and resp.json["details"]["field"] == "type"
    assert other_account.admin.get(f"{PATH}/{r['id']}").status == 404
    assert other_account.admin.delete(f"{PATH}/{r['id']}").status == 404
    theirs = _policy(other_account.admin)
    resp = account.admin.post(PATH, {"type": "agent", "ip_policy_ids": [theirs]})
    assert resp.status == 400 and resp.json["details"]["field"] == "ip_policy_ids"
