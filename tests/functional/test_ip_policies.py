"""/ip_policies and /ip_policy_rules at both levels."""

import pytest

from chalicelib.core import errors, ids
from chalicelib.core import ip_rules

POLICY_FIELDS = {"id", "uri", "created_at", "description", "metadata"}
RULE_FIELDS = {"id", "uri", "created_at", "description", "metadata", "cidr", "ip_policy", "action"}


def new_policy(caller, **fields):
    resp = caller.post("/ip_policies", fields)
    assert resp.status == 201, resp
    return resp.json


def test_policy_crud(account):
    admin = account.admin
    policy = new_policy(admin, description="office", metadata="m")
    assert set(policy) == POLICY_FIELDS and ids.is_valid(policy["id"], "ipp")
    assert policy["uri"].endswith(f"/ip_policies/{policy['id']}")
    assert admin.get(f"/ip_policies/{policy['id']}").json == policy
    assert admin.get("/ip_policies").json["ip_policies"] == [policy]
    updated = admin.patch(f"/ip_policies/{policy['id']}", {"metadata": "m2"})
    assert updated.status == 200 and updated.json == {**policy, "metadata": "m2"}
    assert admin.delete(f"/ip_policies/{policy['id']}").status == 204
    assert admin.get(f"/ip_policies/{policy['id']}").status == 404
    assert admin.delete(f"/ip_policies/{policy['id']}").status == 404


def test_rule_crud(account):
    admin = account.admin
    policy = new_policy(admin)
    resp = admin.post(
        "/ip_policy_rules",
        {
            "cidr": "203.0.113.0/24",
            "action": "allow",
            "ip_policy_id": policy["id"],
            "description": "",
            "metadata": "",
        },
    )
    assert resp.status == 201, resp
    rule = resp.json
    assert set(rule) == RULE_FIELDS and ids.is_valid(rule["id"], "ipr")
    assert rule["ip_policy"] == {"id": policy["id"], "uri": policy["uri"]}
    assert rule["cidr"] == "203.0.113.0/24" and rule["action"] == "allow"
    assert admin.get(f"/ip_policy_rules/{rule['id']}").json == rule
    assert admin.get("/ip_policy_rules").json["ip_policy_rules"] == [rule]
    updated = admin.patch(f"/ip_policy_rules/{rule['id']}", {"metadata": "x"}).json
    assert updated == {**rule, "metadata": "x"}
    updated = admin.patch(
        f"/ip_policy_rules/{rule['id']}", {"cidr": "2001:DB8::/32", "action": "deny"}
    ).json
    assert updated["cidr"] == "2001:db8::/32" and updated["action"] == "deny"
    assert admin.delete(f"/ip_policy_rules/{rule['id']}").status == 204
    assert admin.get(f"/ip_policy_rules/{rule['id']}").status == 404


@pytest.mark.parametrize(
    "cidr, expected",
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("192.0.2.7", "192.0.2.7/32"),
        ("::1", "::1/128"),
        ("0.0.0.0/0", "0.0.0.0/0"),
    ],
)
def test_rule_cidr_forms(account, cidr, expected):
    policy = new_policy(account.admin)
    resp = account.admin.post(
        "/ip_policy_rules", {"cidr": cidr, "action": "deny", "ip_policy_id": policy["id"]}
    )
    assert resp.status == 201, resp
    assert resp.json["cidr"] == expected


@pytest.mark.parametrize(
    "body, field",
    [
        ({"cidr": "10.0.0.1/8"}, "cidr"),
        ({"cidr": "10.0.0.0/33"}, "cidr"),
        ({"cidr": "300.0.0.0/8"}, "cidr"),
        ({"cidr": "example.com"}, "cidr"),
        ({"cidr": ""}, "cidr"),
        ({"cidr": 10}, "cidr"),
        ({"action": "block"}, "action"),
        ({"action": None}, "action"),
        ({"ip_policy_id": "ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"}, "ip_policy_id"),
        ({"ip_policy_id": "nope"}, "ip_policy_id"),
        ({"ip_policy_id": None}, "ip_policy_id"),
        ({"description": "x" * 256}, "description"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_rule_returns_400_and_writes_nothing(account, body, field):
    policy = new_policy(account.admin)
    full = {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"], **body}
    full = {k: v for k, v in full.items() if v is not None}
    resp = account.admin.post("/ip_policy_rules", full)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field and field in resp.json["msg"]
    assert account.admin.get("/ip_policy_rules").json["ip_policy_rules"] == []
    assert account.admin.delete(f"/ip_policies/{policy['id']}").status == 204


def test_rule_update_rejects_bad_values_and_policy_change(account):
    policy = new_policy(account.admin)
    rule = account.admin.post(
        "/ip_policy_rules", {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"]}
    ).json
    for bad in ({"cidr": "x"}, {"action": "x"}, {"ip_policy_id": policy["id"]}):
        assert account.admin.patch(f"/ip_policy_rules/{rule['id']}", bad).status == 400
    assert account.admin.get(f"/ip_policy_rules/{rule['id']}").json == rule


def test_policy_with_rules_cannot_be_deleted(account):
    admin = account.admin
    policy = new_policy(admin)
    rule = admin.post(
        "/ip_policy_rules", {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"]}
    ).json
    resp = admin.delete(f"/ip_policies/{policy['id']}")
    assert resp.status == 409 and resp.json["error_code"] == errors.CONFLICT
    assert admin.get(f"/ip_policies/{policy['id']}").status == 200
    assert admin.delete(f"/ip_policy_rules/{rule['id']}").status == 204
    assert admin.delete(f"/ip_policies/{policy['id']}").status == 204


def test_other_accounts_policies_and_rules_are_invisible(account, other_account):
    policy = new_policy(account.admin)
    rule = account.admin.post(
        "/ip_policy_rules", {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"]}
    ).json
    other = other_account.admin
    assert other.get(f"/ip_policies/{policy['id']}").status == 404
    assert other.patch(f"/ip_policies/{policy['id']}", {"metadata": "x"}).status == 404
    assert other.delete(f"/ip_policies/{policy['id']}").status == 404
    assert other.get(f"/ip_policy_rules/{rule['id']}").status == 404
    assert other.delete(f"/ip_policy_rules/{rule['id']}").status == 404
    assert other.get("/ip_policies").json["ip_policies"] == []
    assert other.get("/ip_policy_rules").json["ip_policy_rules"] == []
    # a rule may not join another account's policy
    resp = other.post(
        "/ip_policy_rules", {"cidr": "10.0.0.0/8", "action": "allow", "ip_policy_id": policy["id"]}
    )
    assert resp.status == 400 and policy["id"] in resp.json["msg"]


@pytest.mark.parametrize(
    "path",
    [
        "/ip_policies/ipr_0ERYqBR5B9RMvMY4cZCztl2IB7s",
        "/ip_policies/x",
        "/ip_policy_rules/ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s",
    ],
)
def test_malformed_ids_are_404(account, path):
    assert account.admin.get(path).status == 404


def test_lists_paginate(account):
    created = [new_policy(account.admin)["id"] for _ in range(5)]
    page = account.admin.get("/ip_policies?limit=3").json
    assert [p["id"] for p in page["ip_policies"]] == created[::-1][:3]
    rest = account.admin.get(page["next_page_uri"]).json
    assert [p["id"] for p in rest["ip_policies"]] == created[::-1][3:]
    assert rest["next_page_uri"] is None


def test_rules_of_gives_the_edge_each_policys_rules(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    admin = account.admin
    p1 = admin.post("/ip_policies", {}).json["id"]
    p2 = admin.post("/ip_policies", {}).json["id"]
    empty = admin.post("/ip_policies", {}).json["id"]
    for policy, cidr, action in (
        (p1, "10.0.0.0/8", "allow"),
        (p2, "2001:db8::/32", "deny"),
        (p1, "192.0.2.1", "deny"),
    ):
        assert (
            admin.post(
                "/ip_policy_rules", {"ip_policy_id": policy, "cidr": cidr, "action": action}
            ).status
            == 201
        )
    assert ip_rules.rules_of(account.id, [p1, empty]) == {
        p1: [("allow", "10.0.0.0/8"), ("deny", "192.0.2.1/32")],
        empty: [],
    }
    assert ip_rules.rules_of(account.id, [p2]) == {p2: [("deny", "2001:db8::/32")]}
