"""restrict-ips ``ip_policies`` in traffic policies the API stores: each id must name an IP
policy of the caller's account (400 naming the element otherwise, as the hosted service
refuses a policy that "does not exist on your account"); and the edge's read of the rules
(``ip_policies.rules_of``) leaves out ids the account does not have."""

import json

import pytest

from chalicelib.core import errors
from tests.functional.test_https_edge_modules import created, edge_and_route
from tests.functional.test_tcp_edges import hostport as tcp_hostport
from chalicelib.core import ip_rules


def _doc(phase, *ids):
    return json.dumps(
        {phase: [{"actions": [{"type": "restrict-ips", "config": {"ip_policies": list(ids)}}]}]}
    )


def _refused(resp, field, element, policy_id):
    assert resp.status == 400, resp
    assert resp.json["error_code"] == errors.InvalidField.error_code
    assert resp.json["details"]["field"] == field
    assert f"at {element}:" in resp.json["msg"] and policy_id in resp.json["msg"], resp.json


ELEMENT = "on_tcp_connect[0].actions[0].config.ip_policies[1]"


def test_tcp_edge_traffic_policy_naming_the_accounts_ip_policies_is_accepted(account):
    admin = account.admin
    p1, p2 = (created(admin.post("/ip_policies", {}))["id"] for _ in range(2))
    doc = _doc("on_tcp_connect", p1, p2)
    edge = created(
        admin.post(
            "/edges/tcp", {"hostports": [tcp_hostport(admin)], "traffic_policy": {"value": doc}}
        )
    )
    assert edge["traffic_policy"]["value"] == doc


def test_tcp_edge_traffic_policy_naming_an_unknown_ip_policy_returns_400(account):
    admin = account.admin
    mine = created(admin.post("/ip_policies", {}))["id"]
    unknown = "ipp_" + "0" * 27
    resp = admin.post(
        "/edges/tcp", {"traffic_policy": {"value": _doc("on_tcp_connect", mine, unknown)}}
    )
    _refused(resp, "traffic_policy.value", ELEMENT, unknown)
    assert admin.get("/edges/tcp").json["tcp_edges"] == []  # nothing was created


def test_traffic_policy_naming_another_accounts_ip_policy_returns_400(account, other_account):
    theirs = created(other_account.admin.post("/ip_policies", {}))["id"]
    mine = created(account.admin.post("/ip_policies", {}))["id"]
    edge = created(account.admin.post("/edges/tcp", {}))
    resp = account.admin.patch(
        f"/edges/tcp/{edge['id']}",
        {"traffic_policy": {"value": _doc("on_tcp_connect", mine, theirs)}},
    )
    _refused(resp, "traffic_policy.value", ELEMENT, theirs)
    resp = account.admin.put(
        f"/edges/tcp/{edge['id']}/traffic_policy", {"value": _doc("on_tcp_connect", mine, theirs)}
    )
    _refused(resp, "value", ELEMENT, theirs)
    assert account.admin.get(f"/edges/tcp/{edge['id']}").json["traffic_policy"] is None


def test_https_route_traffic_policy_ip_policies_are_checked_on_create_update_and_put(
    account, other_account
):
    admin = account.admin
    mine = created(admin.post("/ip_policies", {}))["id"]
    theirs = created(other_account.admin.post("/ip_policies", {}))["id"]
    element = "on_http_request[0].actions[0].config.ip_policies[1]"
    edge, route = edge_and_route(admin, traffic_policy={"value": _doc("on_http_request", mine)})
    resp = admin.post(
        f"/edges/https/{edge['id']}/routes",
        {
            "match_type": "path_prefix",
            "match": "/b",
            "traffic_policy": {"value": _doc("on_http_request", mine, theirs)},
        },
    )
    _refused(resp, "traffic_policy.value", element, theirs)
    base = f"/edges/https/{edge['id']}/routes/{route['id']}"
    resp = admin.patch(base, {"traffic_policy": {"value": _doc("on_http_request", mine, theirs)}})
    _refused(resp, "traffic_policy.value", element, theirs)
    resp = admin.put(f"{base}/traffic_policy", {"value": _doc("on_http_request", mine, theirs)})
    _refused(resp, "value", element, theirs)
    assert admin.get(base).json["traffic_policy"]["value"] == _doc("on_http_request", mine)


def test_rules_of_leaves_out_ids_the_account_does_not_have(api, account, other_account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    mine = created(account.admin.post("/ip_policies", {}))["id"]
    empty = created(account.admin.post("/ip_policies", {}))["id"]
    theirs = created(other_account.admin.post("/ip_policies", {}))["id"]
    for policy, caller in ((mine, account), (theirs, other_account)):
        created(
            caller.admin.post(
                "/ip_policy_rules",
                {"ip_policy_id": policy, "cidr": "127.0.0.1/32", "action": "allow"},
            )
        )
    unknown = "ipp_" + "0" * 27
    assert ip_rules.rules_of(account.id, [mine, empty, theirs, unknown]) == {
        mine: [("allow", "127.0.0.1/32")],
        empty: [],
    }
    assert ip_rules.missing_of(account.id, [mine, theirs, unknown, theirs]) == [theirs, unknown]
