"""/agent_ingresses at both levels (in-process and over HTTP): the hosted fields, the domain's
rules (ERR_NGROK_6705 for the service's own domains, 409 for another account's or a second
ingress), the bound per account, and the index the edge reads (docs/DATA_PLANE.md, "Agent
ingresses")."""

import uuid

import pytest

from chalicelib import agent_ingresses as ai
from chalicelib.core import errors, ids, ingresses
from chalicelib.core.config import get_settings

FIELDS = {
    "id",
    "uri",
    "description",
    "metadata",
    "domain",
    "ns_targets",
    "region_domains",
    "created_at",
    "certificate_management_policy",
    "certificate_management_status",
}


def _domain():
    return f"connect-{uuid.uuid4().hex[:10]}.example.com"


def test_create_get_list_update_delete(account):
    admin = account.admin
    domain = _domain()
    made = admin.post(
        "/agent_ingresses",
        {"domain": domain.upper(), "description": "devices", "metadata": "{}"},
    )
    assert made.status == 201, made
    body = made.json
    assert set(body) == FIELDS and ids.is_valid(body["id"], "agin")
    assert body["uri"].endswith(f"/agent_ingresses/{body['id']}")
    zone = get_settings().cname_zone
    assert body["domain"] == domain and body["region_domains"] == [domain]
    assert body["ns_targets"] == [f"ns1.{zone}", f"ns2.{zone}"]
    assert body["certificate_management_policy"] is None
    assert body["certificate_management_status"] is None
    assert admin.get(f"/agent_ingresses/{body['id']}").json == body
    assert admin.get("/agent_ingresses").json["ingresses"] == [body]
    patched = admin.patch(f"/agent_ingresses/{body['id']}", {"description": "d"})
    assert patched.json == {**body, "description": "d"}
    assert admin.patch(f"/agent_ingresses/{body['id']}", {"domain": "x.example.com"}).status == 400
    assert account.member.delete(f"/agent_ingresses/{body['id']}").status == 204
    assert admin.get(f"/agent_ingresses/{body['id']}").status == 404
    # its domain is free again
    assert admin.post("/agent_ingresses", {"domain": domain}).status == 201


@pytest.mark.parametrize(
    "domain",
    ["{base}", "edge.{base}", "a.b.{base}", "EDGE.{base}"],
)
def test_the_services_own_domains_are_refused_with_6705(account, domain):
    base = get_settings().base_domain
    sent = domain.format(base=base)
    refused = account.admin.post("/agent_ingresses", {"domain": sent})
    assert refused.status == 400 and refused.json["error_code"] == errors.AGENT_INGRESS_DOMAIN
    assert "third party domain" in refused.json["msg"]


@pytest.mark.parametrize("domain", ["", "*.example.com", "nodots", "a..b.com", "1.2.3.4"])
def test_malformed_domains_are_refused(account, domain):
    refused = account.admin.post("/agent_ingresses", {"domain": domain})
    assert refused.status == 400 and refused.json["details"]["field"] == "domain", refused


def test_one_ingress_per_domain_and_not_on_another_accounts_domain(account, other_account):
    domain = _domain()
    assert account.admin.post("/agent_ingresses", {"domain": domain}).status == 201
    for who in (account, other_account):
        again = who.admin.post("/agent_ingresses", {"domain": domain})
        assert again.status == 409, again
    reserved = _domain()
    assert other_account.admin.post("/reserved_domains", {"domain": reserved}).status == 201
    taken = account.admin.post("/agent_ingresses", {"domain": reserved})
    assert taken.status == 409 and taken.json["error_code"] == errors.DOMAIN_RESERVED_BY_OTHER
    wildcard = _domain()
    assert other_account.admin.post("/reserved_domains", {"domain": f"*.{wildcard}"}).status == 201
    under = account.admin.post("/agent_ingresses", {"domain": f"connect.{wildcard}"})
    assert under.status == 409, under
    # the account's own reservation is its to use
    assert other_account.admin.post("/agent_ingresses", {"domain": reserved}).status == 201


def test_a_certificate_management_policy_is_refused_not_ignored(account):
    policy = {"authority": "letsencrypt", "private_key_type": "ecdsa"}
    refused = account.admin.post(
        "/agent_ingresses", {"domain": _domain(), "certificate_management_policy": policy}
    )
    assert refused.status == 400
    assert refused.json["details"]["field"] == "certificate_management_policy"
    made = account.admin.post(
        "/agent_ingresses", {"domain": _domain(), "certificate_management_policy": None}
    )
    assert made.status == 201
    assert (
        account.admin.patch(
            f"/agent_ingresses/{made.json['id']}", {"certificate_management_policy": policy}
        ).status
        == 400
    )


def test_at_most_ten_per_account(inprocess_api):
    account = inprocess_api.new_account()
    for _ in range(ai.MAX_PER_ACCOUNT):
        assert account.admin.post("/agent_ingresses", {"domain": _domain()}).status == 201
    refused = account.admin.post("/agent_ingresses", {"domain": _domain()})
    assert refused.status == 409 and "10 agent ingresses" in refused.json["msg"]
    assert ai.MAX_PER_ACCOUNT == 10  # docs/DATA_PLANE.md's number


def test_the_index_the_edge_reads(inprocess_api):
    account = inprocess_api.new_account()
    domain = _domain()
    made = account.admin.post("/agent_ingresses", {"domain": domain}).json
    assert ingresses.index()[domain] == {"account_id": account.id, "agent_ingress_id": made["id"]}
    assert account.admin.delete(f"/agent_ingresses/{made['id']}").status == 204
    assert domain not in ingresses.index()


def test_another_accounts_ingress_is_404(account, other_account):
    made = account.admin.post("/agent_ingresses", {"domain": _domain()}).json
    path = f"/agent_ingresses/{made['id']}"
    assert other_account.admin.get(path).status == 404
    assert other_account.admin.patch(path, {"description": "x"}).status == 404
    assert other_account.admin.delete(path).status == 404
    assert account.admin.get(path).status == 200
