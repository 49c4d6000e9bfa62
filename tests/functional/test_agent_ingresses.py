"""/agent_ingresses at both levels (in-process and over HTTP): the hosted fields, the domain's
rules (ERR_NGROK_6705 for the service's own domains, 409 for another account's or a second
ingress), the certificate management policy (a reserved domain's rules, the ACME queue entry,
the status, the issued certificate's served entry), the bound per account, and the index the
edge reads (docs/DATA_PLANE.md, "Agent ingresses")."""

import uuid

import pytest

from chalicelib import agent_ingresses as ai
from chalicelib.core import acme_orders as orders
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


def _queued(account_id, ingress_id):
    from chalicelib.core import store

    return store.get(orders.QUEUE_PK, orders.queue_sk(account_id, ingress_id))


def test_a_policy_is_taken_as_a_reserved_domains_and_queues_the_ingress(inprocess_api):
    account = inprocess_api.new_account()
    admin, domain = account.admin, _domain()
    made = admin.post(
        "/agent_ingresses",
        {"domain": domain, "certificate_management_policy": {"private_key_type": "rsa"}},
    )
    assert made.status == 201, made
    body = made.json
    assert body["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "rsa",
    }
    status = body["certificate_management_status"]
    assert set(status) == {"renews_at", "provisioning_job"} and status["renews_at"] is None
    assert status["provisioning_job"] == {
        "error_code": None,
        # this API has no ACME directory: the job says so, as a reserved domain's does
        "msg": orders.NO_ACME_FALLBACK_MSG,
        "started_at": body["created_at"],
        "retries_at": None,
    }
    assert admin.get(f"/agent_ingresses/{body['id']}").json == body
    entry = _queued(account.id, body["id"])
    assert entry is not None and entry.data["domain"] == domain and entry.data["due_at"] == 0
    # without a policy (or with a null one: "not sent") nothing is queued
    plain = admin.post(
        "/agent_ingresses", {"domain": _domain(), "certificate_management_policy": None}
    ).json
    assert plain["certificate_management_policy"] is None
    assert plain["certificate_management_status"] is None
    assert _queued(account.id, plain["id"]) is None


@pytest.mark.parametrize(
    "policy",
    [
        {"authority": "zerossl"},
        {"private_key_type": "dsa"},
        {"authority": "letsencrypt", "key": "x"},
        "letsencrypt",
    ],
)
def test_a_bad_policy_is_refused_on_create_and_update(account, policy):
    admin, domain = account.admin, _domain()
    refused = admin.post(
        "/agent_ingresses", {"domain": domain, "certificate_management_policy": policy}
    )
    assert refused.status == 400, refused
    assert refused.json["details"]["field"] == "certificate_management_policy"
    assert admin.get("/agent_ingresses").json["ingresses"] == []  # nothing written
    made = admin.post("/agent_ingresses", {"domain": domain}).json
    patched = admin.patch(
        f"/agent_ingresses/{made['id']}", {"certificate_management_policy": policy}
    )
    assert patched.status == 400
    assert patched.json["details"]["field"] == "certificate_management_policy"
    assert admin.get(f"/agent_ingresses/{made['id']}").json == made


def test_a_policy_set_changed_and_removed_by_update_and_delete(inprocess_api):
    account = inprocess_api.new_account()
    admin = account.admin
    made = admin.post("/agent_ingresses", {"domain": _domain()}).json
    path = f"/agent_ingresses/{made['id']}"
    managed = admin.patch(path, {"certificate_management_policy": {}})
    assert managed.status == 200, managed
    body = managed.json
    assert body["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "ecdsa",
    }
    job = body["certificate_management_status"]["provisioning_job"]
    assert job["started_at"] and job["error_code"] is None
    assert _queued(account.id, made["id"]) is not None
    # a new policy on a managed ingress keeps its job; a null one is "not sent"
    rsa = admin.patch(path, {"certificate_management_policy": {"private_key_type": "rsa"}}).json
    assert rsa["certificate_management_policy"]["private_key_type"] == "rsa"
    assert rsa["certificate_management_status"] == body["certificate_management_status"]
    kept = admin.patch(path, {"certificate_management_policy": None, "description": "d"}).json
    assert kept == {**rsa, "description": "d"}
    assert admin.delete(f"{path}/certificate_management_policy").status == 204
    gone = admin.get(path).json
    assert gone["certificate_management_policy"] is None
    assert gone["certificate_management_status"] is None
    assert _queued(account.id, made["id"]) is None
    assert admin.delete(f"{path}/certificate_management_policy").status == 204
    assert admin.delete("/agent_ingresses/agin_nope/certificate_management_policy").status == 404
    # deleting a managed ingress takes it off the queue
    admin.patch(path, {"certificate_management_policy": {}})
    assert _queued(account.id, made["id"]) is not None
    assert admin.delete(path).status == 204
    assert _queued(account.id, made["id"]) is None


def test_the_issued_certificate_is_the_agent_listeners_and_goes_with_the_policy(inprocess_api):
    """The worker's install (chalicelib.acme.worker._install, as after a finished order) for
    an ingress: its served index entry is ``agent_ingress#<domain>``, never the domain's own
    (the HTTPS listener's); removing the policy, or the ingress, deletes the certificate."""
    from chalicelib.acme import worker
    from chalicelib.core import certs, store
    from stacks.certs import SmallCA, key_pem, pem

    account = inprocess_api.new_account()
    admin, authority = account.admin, SmallCA("Issuing CA")
    for remove in ("policy", "ingress"):
        domain = _domain()
        made = admin.post(
            "/agent_ingresses", {"domain": domain, "certificate_management_policy": {}}
        ).json
        sk = orders.queue_sk(account.id, made["id"])
        entry = orders.claim(sk, "worker_test")
        cert, key = authority.leaf([domain])
        cert_id = worker._install(entry, "worker_test", pem(cert), key_pem(key))
        served = certs.served_index()
        assert domain not in served
        assert served[certs.ingress_served_sk(domain)]["agent_ingress_id"] == made["id"]
        assert served[certs.ingress_served_sk(domain)]["tls_certificate_id"] == cert_id
        now = admin.get(f"/agent_ingresses/{made['id']}").json
        status = now["certificate_management_status"]
        assert status["provisioning_job"] is None and status["renews_at"]
        assert admin.get(f"/tls_certificates/{cert_id}").status == 200
        assert store.get(orders.QUEUE_PK, sk).data["due_at"] > 0  # due again at renewal
        path = f"/agent_ingresses/{made['id']}"
        if remove == "policy":
            assert admin.delete(f"{path}/certificate_management_policy").status == 204
        else:
            assert admin.delete(path).status == 204
        assert certs.ingress_served_sk(domain) not in certs.served_index()
        assert admin.get(f"/tls_certificates/{cert_id}").status == 404
        assert store.get(orders.QUEUE_PK, sk) is None


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
