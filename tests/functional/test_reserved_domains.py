"""/reserved_domains at both levels: validation, global uniqueness, CNAME and cert fields."""

import re
from datetime import datetime, timezone

import pytest

from chalicelib.core import acme_orders as orders
from chalicelib.core import config, errors, ids
from tests.functional.test_bot_users import _concurrently

RD_FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "domain",
    "region",
    "cname_target",
    "http_endpoint_configuration",
    "https_endpoint_configuration",
    "certificate",
    "certificate_management_policy",
    "certificate_management_status",
    "acme_challenge_cname_target",
    "resolves_to",
}
ZONE = "cname.example.test"  # config defaults (BASE_DOMAIN tunnels.localhost)
BASE = "tunnels.localhost"


def _unique(name):
    return f"{name}.{ids.new_id('x').split('_')[1].lower()}.example.com"


def test_create_wildcard_domain_outside_base(account):
    domain = "*." + _unique("app")
    created = account.admin.post("/reserved_domains", {"domain": domain.upper(), "region": ""})
    assert created.status == 201, created
    body = created.json
    assert set(body) == RD_FIELDS
    assert ids.is_valid(body["id"], "rd") and body["uri"].endswith(
        f"/reserved_domains/{body['id']}"
    )
    assert body["domain"] == domain and body["region"] == ""
    assert re.fullmatch(r"[a-z0-9]+\.[a-z0-9]+\." + re.escape(ZONE), body["cname_target"])
    assert re.fullmatch(
        r"[a-z0-9]+\.acme-challenge\." + re.escape(ZONE), body["acme_challenge_cname_target"]
    )
    assert body["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "ecdsa",
    }
    status = body["certificate_management_status"]
    assert status["renews_at"] is None
    job = status["provisioning_job"]
    assert job["error_code"] is None and job["retries_at"] is None
    # this service has no ACME directory (ACME_DIRECTORY_URL unset): the job says so
    assert job["msg"] == orders.NO_ACME_FALLBACK_MSG
    started = datetime.strptime(job["started_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc
    )
    assert abs((datetime.now(timezone.utc) - started).total_seconds()) < 120
    for key in ("http_endpoint_configuration", "https_endpoint_configuration", "certificate"):
        assert body[key] is None
    assert body["resolves_to"] == [] and body["description"] == "" and body["metadata"] == ""
    assert account.admin.get(f"/reserved_domains/{body['id']}").json == body


def test_non_wildcard_domain_has_no_acme_target_and_policy_may_be_rsa(account):
    created = account.member.post(
        "/reserved_domains",
        {
            "domain": _unique("www"),
            "certificate_management_policy": {"private_key_type": "rsa"},
            "description": "site",
            "metadata": "m",
            "resolves_to": [{"value": "eu"}],
        },
    )
    assert created.status == 201, created
    body = created.json
    assert body["acme_challenge_cname_target"] is None and body["cname_target"]
    assert body["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "rsa",
    }
    assert body["resolves_to"] == [{"value": "eu"}]
    assert body["description"] == "site" and body["metadata"] == "m"


@pytest.mark.parametrize("domain", [f"app.{BASE}", f"*.x.{BASE}", f"a.b.{BASE.upper()}"])
def test_domain_under_base_domain_has_null_targets_and_cert_fields(account, domain):
    domain = domain.replace("app.", _unique("app").split(".")[1] + ".")
    created = account.admin.post("/reserved_domains", {"domain": domain})
    assert created.status == 201, created
    body = created.json
    assert body["domain"] == domain.lower()
    for key in (
        "cname_target",
        "acme_challenge_cname_target",
        "certificate_management_policy",
        "certificate_management_status",
    ):
        assert body[key] is None
    account.admin.delete(f"/reserved_domains/{body['id']}")


@pytest.mark.parametrize("domain", [BASE, f"*.{BASE}", "*.localhost"])  # and its parents
def test_the_service_domain_and_its_parents_cannot_be_reserved(account, domain):
    resp = account.admin.post("/reserved_domains", {"domain": domain})
    assert resp.status == 400 and resp.json["details"]["field"] == "domain"


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "domain"),
        ({"domain": ""}, "domain"),
        ({"domain": "localhost"}, "domain"),
        ({"domain": "a..com"}, "domain"),
        ({"domain": "a*.example.com"}, "domain"),
        ({"domain": "a.*.example.com"}, "domain"),
        ({"domain": "*.com"}, "domain"),
        ({"domain": "ex ample.com"}, "domain"),
        ({"domain": "-a.example.com"}, "domain"),
        ({"domain": "a_b.example.com"}, "domain"),
        ({"domain": "10.0.0.1"}, "domain"),
        ({"domain": "a.com."}, "domain"),
        ({"domain": "a" * 64 + ".com"}, "domain"),
        ({"domain": 5}, "domain"),
        ({"domain": "ok.example.com", "region": "mars"}, "region"),
        ({"domain": "ok.example.com", "description": "x" * 256}, "description"),
        ({"domain": "ok.example.com", "metadata": "x" * 4097}, "metadata"),
        (
            {
                "domain": "ok.example.com",
                "certificate_management_policy": {"authority": "zerossl"},
            },
            "certificate_management_policy",
        ),
        (
            {
                "domain": "ok.example.com",
                "certificate_management_policy": {"private_key_type": "dsa"},
            },
            "certificate_management_policy",
        ),
        (
            {"domain": "ok.example.com", "certificate_management_policy": {"x": "y"}},
            "certificate_management_policy",
        ),
        (
            {"domain": "ok.example.com", "certificate_management_policy": "letsencrypt"},
            "certificate_management_policy",
        ),
        ({"domain": "ok.example.com", "resolves_to": ["global"]}, "resolves_to"),
        ({"domain": "ok.example.com", "resolves_to": [{"value": "moon"}]}, "resolves_to"),
        ({"domain": "ok.example.com", "resolves_to": {"value": "eu"}}, "resolves_to"),
        ({"domain": "ok.example.com", "certificate_id": "cert_x"}, "certificate_id"),
        ({"domain": "ok.example.com", "cname_target": "x"}, "cname_target"),
        (
            {"domain": f"a.{BASE}", "certificate_management_policy": {}},
            "certificate_management_policy",
        ),
    ],
)
def test_create_with_bad_field_returns_400_naming_it(account, body, field):
    resp = account.admin.post("/reserved_domains", body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field and field in resp.json["msg"]
    assert account.admin.get("/reserved_domains").json["reserved_domains"] == []


def test_domain_is_unique_across_accounts_and_delete_frees_it(account, other_account):
    domain = _unique("shared")
    first = account.admin.post("/reserved_domains", {"domain": domain})
    assert first.status == 201
    again = account.member.post("/reserved_domains", {"domain": domain})
    assert again.status == 409 and again.json["error_code"] == errors.DOMAIN_RESERVED_BY_YOU
    assert again.json["msg"] == (
        f"This domain is already reserved for your account. Failed to reserve {domain}."
    )
    taken = other_account.admin.post("/reserved_domains", {"domain": domain.upper()})
    assert taken.status == 409 and taken.json["error_code"] == errors.DOMAIN_RESERVED_BY_OTHER
    # the names under it are its owner's: another account's wildcard over them is refused
    wild = other_account.admin.post("/reserved_domains", {"domain": "*." + domain})
    assert wild.status == 409 and wild.json["error_code"] == errors.WILDCARD_CONFLICT
    own_wild = account.admin.post("/reserved_domains", {"domain": "*." + domain})
    assert own_wild.status == 201
    assert account.admin.delete(f"/reserved_domains/{first.json['id']}").status == 204
    assert account.admin.delete(f"/reserved_domains/{own_wild.json['id']}").status == 204
    assert other_account.admin.post("/reserved_domains", {"domain": domain}).status == 201


def test_concurrent_reservations_of_one_domain_give_exactly_one_201(api):
    accounts = [api.new_account() for _ in range(4)]
    domain = _unique("race")
    calls = [
        (accounts[i % 4].admin.token, "/reserved_domains", {"domain": domain}) for i in range(20)
    ]
    statuses = _concurrently(api, calls)
    assert sorted(statuses) == [201] + [409] * 19, statuses
    held = [d for a in accounts for d in a.admin.get("/reserved_domains").json["reserved_domains"]]
    assert [d["domain"] for d in held] == [domain]


def test_update_description_metadata_policy_resolves_to(account):
    rd = account.admin.post("/reserved_domains", {"domain": "*." + _unique("upd")}).json
    updated = account.admin.patch(
        f"/reserved_domains/{rd['id']}",
        {
            "description": "d",
            "certificate_management_policy": {
                "authority": "letsencrypt",
                "private_key_type": "rsa",
            },
            "resolves_to": [{"value": "global"}],
        },
    )
    assert updated.status == 200, updated
    body = updated.json
    assert body["description"] == "d" and body["metadata"] == ""
    assert body["certificate_management_policy"]["private_key_type"] == "rsa"
    assert body["resolves_to"] == [{"value": "global"}]
    for key in (
        "domain",
        "cname_target",
        "acme_challenge_cname_target",
        "created_at",
        "certificate_management_status",
        "region",
    ):
        assert body[key] == rd[key]
    # what the reference client sends on every update
    again = account.admin.patch(
        f"/reserved_domains/{rd['id']}", {"metadata": "m", "resolves_to": []}
    )
    assert (
        again.status == 200 and again.json["resolves_to"] == [] and again.json["metadata"] == "m"
    )
    assert account.admin.get(f"/reserved_domains/{rd['id']}").json == again.json


@pytest.mark.parametrize(
    "body",
    [
        {"domain": "other.example.com"},
        {"region": "eu"},
        {"cname_target": "x"},
        {"description": 5},
        {"certificate_management_policy": {"authority": "x"}},
        {"resolves_to": [{"value": "x"}]},
    ],
)
def test_update_with_bad_or_fixed_field_returns_400(account, body):
    rd = account.admin.post("/reserved_domains", {"domain": _unique("fixed")}).json
    assert account.admin.patch(f"/reserved_domains/{rd['id']}", body).status == 400
    assert account.admin.get(f"/reserved_domains/{rd['id']}").json == rd


def test_delete_returns_204_then_404(account):
    rd = account.admin.post("/reserved_domains", {"domain": _unique("del")}).json
    deleted = account.member.delete(f"/reserved_domains/{rd['id']}")
    assert deleted.status == 204 and deleted.text == ""
    assert account.admin.get(f"/reserved_domains/{rd['id']}").status == 404
    assert account.admin.delete(f"/reserved_domains/{rd['id']}").status == 404


def test_other_accounts_domains_are_not_found(account, other_account):
    rd = account.admin.post("/reserved_domains", {"domain": _unique("iso")}).json
    other = other_account.admin
    assert other.get(f"/reserved_domains/{rd['id']}").status == 404
    assert other.patch(f"/reserved_domains/{rd['id']}", {"description": "x"}).status == 404
    assert other.delete(f"/reserved_domains/{rd['id']}").status == 404
    assert other.get("/reserved_domains").json["reserved_domains"] == []
    assert account.admin.get(f"/reserved_domains/{rd['id']}").json == rd


@pytest.mark.parametrize(
    "rd_id", ["rd_x", "nope", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", "rd_0ERYqBR5B9RMvMY4cZCztl2IB7s"]
)
def test_malformed_or_unknown_id_returns_404(account, rd_id):
    assert account.admin.get(f"/reserved_domains/{rd_id}").status == 404
    assert account.admin.patch(f"/reserved_domains/{rd_id}", {}).status == 404
    assert account.admin.delete(f"/reserved_domains/{rd_id}").status == 404


def test_list_paginates_newest_first(account):
    created = [
        account.admin.post("/reserved_domains", {"domain": _unique(f"p{i}")}).json["id"]
        for i in range(5)
    ]
    seen, url = [], "/reserved_domains?limit=2"
    while url:
        page = account.admin.get(url)
        assert page.status == 200 and page.json["uri"].endswith("/reserved_domains")
        seen += [d["id"] for d in page.json["reserved_domains"]]
        url = page.json["next_page_uri"]
    assert seen == list(reversed(created))


def test_delete_certificate_management_policy_stops_managed_certificates(account):
    admin = account.admin
    rd = admin.post("/reserved_domains", {"domain": "shop.customer-example.com"}).json
    assert rd["certificate_management_policy"] is not None
    resp = admin.delete(f"/reserved_domains/{rd['id']}/certificate_management_policy")
    assert resp.status == 204 and resp.text == ""
    after = admin.get(f"/reserved_domains/{rd['id']}").json
    assert after["certificate_management_policy"] is None
    assert after["certificate_management_status"] is None
    assert {k: v for k, v in after.items() if not k.startswith("certificate_management")} == {
        k: v for k, v in rd.items() if not k.startswith("certificate_management")
    }
    # again: the end state is the same
    assert (
        admin.delete(f"/reserved_domains/{rd['id']}/certificate_management_policy").status == 204
    )
    # a policy can be set again
    policy = {"authority": "letsencrypt", "private_key_type": "rsa"}
    again = admin.patch(f"/reserved_domains/{rd['id']}", {"certificate_management_policy": policy})
    assert again.json["certificate_management_policy"] == policy


def test_delete_certificate_is_204_and_changes_nothing(account):
    admin = account.admin
    rd = admin.post("/reserved_domains", {"domain": "api.customer-example.org"}).json
    resp = admin.delete(f"/reserved_domains/{rd['id']}/certificate")
    assert resp.status == 204
    assert admin.get(f"/reserved_domains/{rd['id']}").json == rd


def test_delete_certificate_parts_of_unknown_domain_are_404(account, other_account):
    rd = account.admin.post("/reserved_domains", {"domain": "x.customer-example.net"}).json
    for part in ("certificate", "certificate_management_policy"):
        resp = other_account.admin.delete(f"/reserved_domains/{rd['id']}/{part}")
        assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND
        missing = account.admin.delete(f"/reserved_domains/rd_{'0' * 27}/{part}")
        assert missing.status == 404
    assert account.admin.get(f"/reserved_domains/{rd['id']}").json == rd
    get = account.admin.get(f"/reserved_domains/{rd['id']}/certificate")
    assert get.status == 405 and get.json["error_code"] == errors.METHOD_NOT_ALLOWED


def test_certificate_status_says_no_acme_is_configured_until_it_is(inprocess_api, monkeypatch):
    """Without ACME_DIRECTORY_URL the provisioning job of a managed domain says that nothing
    is issued and the edge serves its fallback certificate (not "in progress" forever); the
    same stored status reads "in progress" once the API's environment names a directory
    (decided at render time: nothing stored changes)."""
    admin = inprocess_api.new_account().admin
    monkeypatch.delenv("ACME_DIRECTORY_URL", raising=False)
    config.reset_settings()
    try:
        rd = admin.post("/reserved_domains", {"domain": _unique("noacme")}).json
        job = rd["certificate_management_status"]["provisioning_job"]
        assert job["msg"] == orders.NO_ACME_FALLBACK_MSG
        assert "fallback certificate" in job["msg"] and "ACME_DIRECTORY_URL" in job["msg"]
        assert job["error_code"] is None and job["retries_at"] is None and job["started_at"]
        assert admin.get(f"/reserved_domains/{rd['id']}").json == rd
        listed = admin.get("/reserved_domains").json["reserved_domains"]
        assert [d for d in listed if d["id"] == rd["id"]] == [rd]
        monkeypatch.setenv("ACME_DIRECTORY_URL", "https://acme.example.test/directory")
        config.reset_settings()
        again = admin.get(f"/reserved_domains/{rd['id']}").json
        job = again["certificate_management_status"]["provisioning_job"]
        assert job["msg"] == "Managed certificate provisioning in progress."
        assert (
            job["started_at"]
            == rd["certificate_management_status"]["provisioning_job"]["started_at"]
        )
        # a domain under the service's own domain has no job either way
        own = admin.post("/reserved_domains", {"domain": "noacme-own.tunnels.localhost"}).json
        assert own["certificate_management_status"] is None
    finally:
        config.reset_settings()
