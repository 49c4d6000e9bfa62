"""The account's ``api`` and ``dashboard`` IP restrictions, enforced by the API itself
(chalicelib.web.check_ip_restrictions, chalicelib.ip_restrictions): each rule at its
boundary, in-process (the gateway's ``source_ip`` is the client address), the local
server's peer as the address (scripts/api_server.py), and once over real HTTP."""

import logging

import pytest

from chalicelib import ip_restrictions
from chalicelib.core import errors
from stacks.costs import StoreCalls

PATH = "/ip_restrictions"
DASHBOARD = {"Service-Client": "dashboard"}


@pytest.fixture
def api(inprocess_api):
    return inprocess_api


@pytest.fixture
def account(api):
    return api.new_account()


def _from(api, ip):
    """Requests from now on come from ``ip``."""
    api.client.http._local_gateway.source_ip = ip


def _policy(caller, *rules):
    policy = caller.post("/ip_policies", {}).json["id"]
    for action, cidr in rules:
        resp = caller.post(
            "/ip_policy_rules", {"ip_policy_id": policy, "action": action, "cidr": cidr}
        )
        assert resp.status == 201, resp
    return policy


def _restrict(caller, kind, *rules, enforced=True):
    resp = caller.post(
        PATH, {"type": kind, "ip_policy_ids": [_policy(caller, *rules)], "enforced": enforced}
    )
    assert resp.status == 201, resp
    return resp.json["id"]


def _refused(resp, code, ip):
    assert resp.status == 403, resp
    assert resp.json["error_code"] == code, resp.json
    assert resp.json["details"]["ip"] == ip
    return resp.json


def test_api_restriction_allows_its_range_and_refuses_the_next_address(api, account):
    admin = account.admin
    _from(api, "203.0.113.255")
    restriction = _restrict(admin, "api", ("allow", "203.0.113.0/24"))
    assert admin.get("/ip_policies").status == 200  # the last address of the range
    _from(api, "203.0.114.0")  # the first one after it
    body = _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "203.0.114.0")
    assert body["details"]["ip_restriction_id"] == restriction
    assert "203.0.114.0" in body["msg"]
    # refused before the view: nothing is changed, every route alike, members' keys too
    _refused(admin.post("/ip_policies", {}), errors.API_IP_RESTRICTED, "203.0.114.0")
    _refused(account.member.get("/api_keys"), errors.API_IP_RESTRICTED, "203.0.114.0")
    _refused(admin.delete(f"{PATH}/{restriction}"), errors.API_IP_RESTRICTED, "203.0.114.0")
    _from(api, "203.0.113.0")
    assert len(admin.get("/ip_policies").json["ip_policies"]) == 1
    # removing the restriction lifts the refusal
    assert admin.delete(f"{PATH}/{restriction}").status == 204
    _from(api, "203.0.114.0")
    assert admin.get("/ip_policies").status == 200


def test_deny_wins_then_allow_and_no_rule_allows_nothing(api, account):
    admin = account.admin
    _from(api, "10.1.2.4")
    _restrict(admin, "api", ("allow", "10.0.0.0/8"), ("deny", "10.1.2.3/32"))
    assert admin.get("/ip_policies").status == 200
    _from(api, "10.1.2.3")  # in both: the deny rule wins
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "10.1.2.3")
    _from(api, "11.0.0.0")  # in neither: no allow rule matches
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "11.0.0.0")
    _from(api, "2001:db8::1")  # another family: matches nothing
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "2001:db8::1")


def test_only_deny_rules_let_others_through_and_an_empty_policy_nothing(api, account):
    admin = account.admin
    _from(api, "192.0.2.1")
    _restrict(admin, "api", ("deny", "192.0.2.0/31"), enforced=False)
    empty = admin.post(PATH, {"type": "api", "ip_policy_ids": [_policy(admin)]}).json["id"]
    _from(api, "192.0.2.2")
    assert admin.get("/ip_policies").status == 200  # the deny-only one lets it through
    # every restriction must pass: one with a policy without rules allows nothing
    assert admin.patch(f"{PATH}/{empty}", {"enforced": True}).status == 200
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "192.0.2.2")


def test_unenforced_restriction_only_logs_and_enforcing_it_refuses(api, account, caplog):
    admin = account.admin
    _from(api, "198.51.100.1")
    restriction = _restrict(admin, "api", ("allow", "198.51.100.0/32"), enforced=False)
    with caplog.at_level(logging.INFO, logger="tunnel_service"):
        assert admin.get("/ip_policies").status == 200
    assert f"api IP restriction {restriction} would refuse 198.51.100.1" in caplog.text
    _from(api, "198.51.100.0")
    assert admin.patch(f"{PATH}/{restriction}", {"enforced": True}).status == 200
    _from(api, "198.51.100.1")  # the next request after the PATCH answered
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "198.51.100.1")


def test_a_dashboard_restriction_refuses_only_the_dashboards_requests(api, account):
    admin = account.admin
    _from(api, "203.0.113.7")
    _restrict(admin, "dashboard", ("deny", "203.0.113.7/32"))
    assert admin.get("/ip_policies").status == 200  # an API request: not restricted
    resp = admin.get("/ip_policies", headers=DASHBOARD)
    _refused(resp, errors.DASHBOARD_IP_RESTRICTED, "203.0.113.7")
    _from(api, "203.0.113.8")
    assert admin.get("/ip_policies", headers=DASHBOARD).status == 200


def test_an_api_restriction_refuses_the_dashboard_only_without_a_dashboard_one(api, account):
    admin = account.admin
    _from(api, "203.0.113.9")
    api_only = _restrict(admin, "api", ("allow", "203.0.113.9/32"))
    _from(api, "198.51.100.9")
    # the header is not a way around it: the account has no dashboard restriction
    resp = admin.get("/ip_policies", headers=DASHBOARD)
    _refused(resp, errors.API_IP_RESTRICTED, "198.51.100.9")
    _from(api, "203.0.113.9")
    _restrict(admin, "dashboard", ("allow", "198.51.100.0/24"))
    _from(api, "198.51.100.9")
    # now the dashboard's requests are the dashboard restriction's, the API's the api one's
    assert admin.get("/ip_policies", headers=DASHBOARD).status == 200
    _refused(admin.get("/ip_policies"), errors.API_IP_RESTRICTED, "198.51.100.9")
    assert admin.delete(f"{PATH}/{api_only}", headers=DASHBOARD).status == 204
    assert admin.get("/ip_policies").status == 200


def test_keys_made_before_and_after_carry_the_copy_and_lose_it_with_the_last(api, account):
    admin = account.admin
    _from(api, "192.0.2.10")
    restriction = _restrict(admin, "api", ("allow", "192.0.2.10/32"))
    later = admin.post("/api_keys", {"owner_id": account.member.id}).json["token"]
    _from(api, "192.0.2.11")
    _refused(api.request("GET", "/ip_policies", key=later), errors.API_IP_RESTRICTED, "192.0.2.11")
    _from(api, "192.0.2.10")
    assert admin.delete(f"{PATH}/{restriction}").status == 204
    _from(api, "192.0.2.11")
    calls = StoreCalls()
    with calls.active():
        assert api.request("GET", "/ip_policies", key=later).status == 200
    assert calls.view == {"Query": 1}  # the copy is gone: the restrictions are not read


def test_no_store_call_without_an_api_or_dashboard_restriction(api, account):
    """An account with only edge restrictions pays nothing per request; one with an api
    restriction pays its Query and its rules' Query, and only for the type that applies."""
    admin = account.admin
    _restrict(admin, "endpoints", ("deny", "127.0.0.1/32"))
    calls = StoreCalls()
    with calls.active():
        assert admin.get("/ip_policies").status == 200
        assert admin.get("/ip_policies", headers=DASHBOARD).status == 200
    assert calls.authorizer == {"GetItem": 2} and calls.view == {"Query": 2}
    _restrict(admin, "dashboard", ("allow", "127.0.0.1/32"))
    calls.reset()
    with calls.active():
        assert admin.get("/ip_policies").status == 200  # an API request: not its type
    assert calls.view == {"Query": 1}
    calls.reset()
    with calls.active():
        assert admin.get("/ip_policies", headers=DASHBOARD).status == 200
    assert calls.view == {"Query": 3}  # the restrictions, their rules, then the view's


def test_the_local_server_takes_the_connections_peer_as_the_address(api, account):
    from scripts import api_server, http_server
    from stacks.paths import PROJECT_DIR

    _restrict(account.admin, "api", ("deny", "198.51.100.7/32"))
    app = api_server.make_app(PROJECT_DIR, "dev")

    def get(peer):
        headers = [("Authorization", f"Bearer {account.admin.token}"), ("Ngrok-Version", "2")]
        request = http_server.Request("GET", "/ip_policies", (1, 1), headers, client=(peer, 4))
        return app(request)

    refused = get("198.51.100.7")
    assert refused.status == 403 and b'"ip": "198.51.100.7"' in refused.body
    assert get("198.51.100.8").status == 200


def test_the_operator_lifts_a_lock_out(api, account, capsys):
    from chalicelib import admin

    _from(api, "192.0.2.20")
    restriction = _restrict(account.admin, "api", ("allow", "192.0.2.21/32"))
    _refused(account.admin.get(PATH), errors.API_IP_RESTRICTED, "192.0.2.20")  # locked out
    assert admin.main(["lift-ip-restrictions", "--account", account.id]) == 0
    assert restriction in capsys.readouterr().out
    assert account.admin.get(f"{PATH}/{restriction}").json["enforced"] is False
    assert ip_restrictions.lift(account.id) == []  # nothing left to lift


def test_over_http(http_api):
    """The real local server: its peer (127.0.0.1) is the address; no lock-out on the way."""
    account = http_api.new_account()
    admin = account.admin
    _restrict(admin, "api", ("allow", "127.0.0.1/32"))
    dashboard = _restrict(admin, "dashboard", ("deny", "127.0.0.0/8"))
    assert admin.get("/ip_policies").status == 200
    _refused(
        admin.get("/ip_policies", headers=DASHBOARD), errors.DASHBOARD_IP_RESTRICTED, "127.0.0.1"
    )
    assert admin.delete(f"{PATH}/{dashboard}").status == 204
    assert admin.get("/ip_policies", headers=DASHBOARD).status == 200  # the api one's now
