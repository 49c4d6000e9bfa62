"""docs/CONTRACT.md "Resource rules decided here", one test (or a few) per rule, at its
boundary where it has one. In-process only, on one table for the module (``module_api``); each test makes
its own account. Numbers are the documented ones, written out.
"""

import pytest

from chalicelib.core import errors
from tests.support.contract import assert_error


@pytest.fixture
def account(module_api):
    return module_api.new_account()


@pytest.fixture
def admin(account):
    return account.admin


def _backend(admin, **body):
    return admin.post("/backends/http_response", body).json


def _policy(admin):
    return admin.post("/ip_policies", {}).json["id"]


# ---- HTTP response backends ----------------------------------------------------------------
def test_backend_headers_sent_empty_are_returned_null(admin):
    created = _backend(admin, headers={})
    assert created["headers"] is None and created["status_code"] == 200
    with_headers = _backend(admin, headers={"X-A": "1"})
    assert with_headers["headers"] == {"x-a": "1"}
    patched = admin.patch(f"/backends/http_response/{with_headers['id']}", {"headers": {}}).json
    assert patched["headers"] is None
    assert admin.get(f"/backends/http_response/{with_headers['id']}").json["headers"] is None


@pytest.mark.parametrize("status", [100, 199, 204, 304])
def test_a_backend_with_a_bodyless_status_refuses_a_body(admin, status):
    assert_error(
        admin.post("/backends/http_response", {"status_code": status, "body": "x"}),
        errors.InvalidField,
        field="body",
    )
    assert admin.post("/backends/http_response", {"status_code": status}).status == 201
    with_body = _backend(admin, body="x")
    assert_error(
        admin.patch(f"/backends/http_response/{with_body['id']}", {"status_code": status}),
        errors.InvalidField,
        field="body",
    )


@pytest.mark.parametrize("status", [200, 203, 205, 303, 305, 599])
def test_a_backend_with_another_status_takes_a_body(admin, status):
    assert (
        admin.post("/backends/http_response", {"status_code": status, "body": "x"}).status == 201
    )


# ---- IP policies and rules -----------------------------------------------------------------
@pytest.mark.parametrize(
    "cidr, stored",
    [
        ("203.0.113.7", "203.0.113.7/32"),
        ("2001:DB8::1", "2001:db8::1/128"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("10.0.0.0/8", "10.0.0.0/8"),
    ],
)
def test_a_rule_cidr_is_stored_normalised(admin, cidr, stored):
    rule = admin.post(
        "/ip_policy_rules", {"ip_policy_id": _policy(admin), "cidr": cidr, "action": "deny"}
    ).json
    assert rule["cidr"] == stored


@pytest.mark.parametrize("cidr", ["10.0.0.1/8", "2001:db8::1/32", "10.0.0.0/33", "nope"])
def test_a_rule_cidr_with_host_bits_or_bad_syntax_is_400(admin, cidr):
    assert_error(
        admin.post(
            "/ip_policy_rules", {"ip_policy_id": _policy(admin), "cidr": cidr, "action": "allow"}
        ),
        errors.InvalidField,
        field="cidr",
    )


def test_a_policy_with_rules_cannot_be_deleted_and_rules_are_not_cascaded(admin):
    policy = _policy(admin)
    rule = admin.post(
        "/ip_policy_rules", {"ip_policy_id": policy, "cidr": "10.0.0.0/8", "action": "allow"}
    ).json
    assert_error(admin.delete(f"/ip_policies/{policy}"), errors.Conflict)
    assert admin.get(f"/ip_policy_rules/{rule['id']}").status == 200
    assert admin.delete(f"/ip_policy_rules/{rule['id']}").status == 204
    assert admin.delete(f"/ip_policies/{policy}").status == 204


def test_a_policy_or_backend_used_by_an_edge_cannot_be_deleted(admin):
    policy, backend = _policy(admin), _backend(admin)["id"]
    edge = admin.post(
        "/edges/tcp",
        {"backend": {"backend_id": backend}, "ip_restriction": {"ip_policy_ids": [policy]}},
    ).json
    assert_error(admin.delete(f"/ip_policies/{policy}"), errors.Conflict)
    assert_error(admin.delete(f"/backends/http_response/{backend}"), errors.Conflict)
    assert admin.delete(f"/edges/tcp/{edge['id']}").status == 204
    assert admin.delete(f"/ip_policies/{policy}").status == 204
    assert admin.delete(f"/backends/http_response/{backend}").status == 204


# ---- references ----------------------------------------------------------------------------
def test_a_reference_that_is_missing_malformed_or_another_accounts_is_400(module_api, admin):
    stranger = module_api.new_account().admin
    theirs = _backend(stranger)["id"]
    for bad in (theirs, "bkdhr_" + "0" * 27, "nope", _policy(admin)):
        body = assert_error(
            admin.post("/edges/tcp", {"backend": {"backend_id": bad}}),
            errors.InvalidField,
            field="backend.backend_id",
        )
        assert bad in body["msg"]
    their_policy = _policy(stranger)
    assert_error(
        admin.post("/edges/tcp", {"ip_restriction": {"ip_policy_ids": [their_policy]}}),
        errors.InvalidField,
        field="ip_restriction.ip_policy_ids",
    )
    assert_error(
        admin.post(
            "/ip_policy_rules",
            {"ip_policy_id": their_policy, "cidr": "10.0.0.0/8", "action": "allow"},
        ),
        errors.InvalidField,
    )
    assert admin.get("/edges/tcp").json["tcp_edges"] == []


# ---- edges ---------------------------------------------------------------------------------
def test_ip_restriction_takes_ten_policies_over_the_api_not_eleven(admin):
    policies = [_policy(admin) for _ in range(11)]
    edge = admin.post("/edges/tcp", {"ip_restriction": {"ip_policy_ids": policies[:10]}})
    assert edge.status == 201, edge
    assert len(edge.json["ip_restriction"]["ip_policies"]) == 10
    assert_error(
        admin.post("/edges/tcp", {"ip_restriction": {"ip_policy_ids": policies}}),
        errors.InvalidField,
        field="ip_restriction.ip_policy_ids",
    )
    assert_error(
        admin.put(f"/edges/tcp/{edge.json['id']}/ip_restriction", {"ip_policy_ids": policies}),
        errors.InvalidField,
    )
    assert_error(
        admin.put(
            f"/edges/tcp/{edge.json['id']}/ip_restriction",
            {"ip_policy_ids": [policies[0], policies[0]]},
        ),
        errors.InvalidField,
    )


def test_a_hostport_is_served_by_one_edge_across_tcp_and_https(module_api, admin):
    """One hostport, one edge, service-wide; with ownership a TCP hostport is a reserved
    address (so another account cannot even name it) and HTTPS edges may not use the TCP host."""
    hostport = admin.post("/reserved_addrs", {}).json["addr"]
    tcp = admin.post("/edges/tcp", {"hostports": [hostport.upper()]}).json
    assert tcp["hostports"] == [hostport]
    assert_error(admin.post("/edges/tcp", {"hostports": [hostport]}), errors.Conflict)
    assert_error(admin.post("/edges/https", {"hostports": [hostport]}), errors.InvalidField)
    assert_error(
        module_api.new_account().admin.post("/edges/tcp", {"hostports": [hostport]}),
        errors.InvalidField,
    )
    assert admin.delete(f"/edges/tcp/{tcp['id']}").status == 204
    assert admin.post("/edges/tcp", {"hostports": [hostport]}).status == 201


def test_a_hostport_is_served_by_one_edge(admin):
    from chalicelib.core.config import get_settings

    hostport = f"shared-{admin.id[-8:].lower()}.{get_settings().base_domain}:443"
    first = admin.post("/edges/https", {"hostports": [hostport.upper()]})
    assert first.status == 201, first
    assert first.json["hostports"] == [hostport]
    assert_error(admin.post("/edges/https", {"hostports": [hostport]}), errors.Conflict)
    assert admin.delete(f"/edges/https/{first.json['id']}").status == 204
    assert admin.post("/edges/https", {"hostports": [hostport]}).status == 201


def test_edge_module_routes_follow_the_spec(admin):
    backend = _backend(admin)["id"]
    edge = admin.post("/edges/tcp", {}).json
    path = f"/edges/tcp/{edge['id']}/backend"
    assert_error(admin.get(path), errors.NotFound)
    assert admin.delete(path).status == 204  # unset: same end state
    put = admin.put(path, {"module": {"backend_id": backend}, "id": edge["id"]})
    assert put.status == 200, put
    assert put.json == {
        "enabled": True,
        "backend": {"id": backend, "uri": put.json["backend"]["uri"]},
    }
    assert_error(
        admin.put(path, {"module": {"backend_id": backend}, "id": "edgtcp_" + "0" * 27}),
        errors.InvalidField,
    )
    patched = admin.patch(f"/edges/tcp/{edge['id']}", {"description": "d"}).json
    assert patched["backend"]["backend"]["id"] == backend  # PATCH never deletes a module
    assert admin.delete(path).status == 204
    assert_error(admin.get(path), errors.NotFound)


# ---- HTTPS edges and routes ----------------------------------------------------------------
def test_an_https_edge_takes_50_routes_not_51(admin):
    edge = admin.post("/edges/https", {}).json["id"]
    for index in range(50):
        resp = admin.post(
            f"/edges/https/{edge}/routes", {"match_type": "exact_path", "match": f"/{index}"}
        )
        assert resp.status == 201, resp
    assert_error(
        admin.post(f"/edges/https/{edge}/routes", {"match_type": "exact_path", "match": "/50"}),
        errors.BadRequest,
    )
    assert len(admin.get(f"/edges/https/{edge}").json["routes"]) == 50
    assert admin.delete(f"/edges/https/{edge}").status == 204


def test_an_empty_match_type_or_match_in_a_route_patch_means_unchanged(admin):
    edge = admin.post("/edges/https", {}).json["id"]
    route = admin.post(
        f"/edges/https/{edge}/routes", {"match_type": "path_prefix", "match": "/a"}
    ).json
    patched = admin.patch(
        f"/edges/https/{edge}/routes/{route['id']}",
        {"match_type": "", "match": "", "description": "d"},
    ).json
    assert (patched["match_type"], patched["match"], patched["description"]) == (
        "path_prefix",
        "/a",
        "d",
    )
    assert_error(
        admin.patch(f"/edges/https/{edge}/routes/{route['id']}", {"match_type": "regex"}),
        errors.InvalidField,
        field="match_type",
    )


def test_route_response_headers_are_lower_cased_with_remove_empty_when_none(admin):
    edge = admin.post("/edges/https", {}).json["id"]
    route = admin.post(
        f"/edges/https/{edge}/routes", {"match_type": "path_prefix", "match": "/"}
    ).json
    put = admin.put(
        f"/edges/https/{edge}/routes/{route['id']}/response_headers", {"add": {"X-Added": "v"}}
    ).json
    assert put == {"enabled": True, "add": {"x-added": "v"}, "remove": []}


# ---- credentials and bots ------------------------------------------------------------------
def test_credential_acl_is_stored_normalised(admin):
    created = admin.post(
        "/credentials",
        {
            "acl": [
                "bind:A.Example.COM",
                "bind:*.Example.com",
                "bind:Host.Example.com:8080",
                "bind:Env=Prod",
            ]
        },
    )
    assert created.json["acl"] == [
        "bind:a.example.com",
        "bind:*.example.com",
        "bind:host.example.com:8080",
        "bind:Env=Prod",
    ]


def test_deactivating_a_bot_stops_its_keys_and_credentials(module_api, admin):
    from chalicelib.credentials import credential_may_bind

    bot = admin.post("/bot_users", {"name": "robot", "active": True}).json
    key = admin.post("/api_keys", {"owner_id": bot["id"]}).json["token"]
    credential = admin.post("/credentials", {"owner_id": bot["id"]}).json["token"]
    assert module_api.request("GET", "/api_keys", key=key).status == 200
    assert credential_may_bind(credential, domain="a.example.com")
    admin.patch(f"/bot_users/{bot['id']}", {"active": False})
    assert_error(module_api.request("GET", "/api_keys", key=key), errors.Unauthorized)
    assert not credential_may_bind(credential, domain="a.example.com")
    admin.patch(f"/bot_users/{bot['id']}", {"active": True})
    assert module_api.request("GET", "/api_keys", key=key).status == 200
    assert admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert_error(module_api.request("GET", "/api_keys", key=key), errors.Unauthorized)
    assert not credential_may_bind(credential, domain="a.example.com")


def test_a_bot_name_of_only_whitespace_is_400(admin):
    assert_error(admin.post("/bot_users", {"name": " \t"}), errors.InvalidField, field="name")
    assert admin.post("/bot_users", {"name": " x "}).status == 201


# ---- reserved domains ----------------------------------------------------------------------
def test_a_domain_is_unique_across_accounts_by_exact_name(module_api, admin):
    assert admin.post("/reserved_domains", {"domain": "Unique-1.Example.com"}).status == 201
    stranger = module_api.new_account().admin
    assert_error(
        stranger.post("/reserved_domains", {"domain": "unique-1.example.com"}),
        errors.DomainReservedByOther,
    )
    assert admin.post("/reserved_domains", {"domain": "*.unique-1.example.com"}).status == 201
    assert admin.post("/reserved_domains", {"domain": "a.unique-1.example.com"}).status == 201


def _base_domain():
    from chalicelib.core.config import get_settings

    return get_settings().base_domain  # configuration (BASE_DOMAIN), not a rule constant


@pytest.mark.parametrize("form", ["{base}", "*.{base}", "{parent}", "*.{parent}"])
def test_the_base_domain_and_its_parents_cannot_be_reserved(admin, form):
    base = _base_domain()
    parent = base.split(".", 1)[1]
    if "." not in parent and "{parent}" in form:
        pytest.skip(f"the base domain {base} has no parent of two labels")
    domain = form.format(base=base, parent=parent)
    assert_error(
        admin.post("/reserved_domains", {"domain": domain}), errors.InvalidField, field="domain"
    )


def test_a_name_under_the_base_domain_can_be_reserved(admin):
    assert admin.post("/reserved_domains", {"domain": f"mine.{_base_domain()}"}).status == 201


def test_resolves_to_is_replaced_when_sent(admin):
    domain = admin.post(
        "/reserved_domains", {"domain": "resolve.example.com", "resolves_to": [{"value": "eu"}]}
    ).json
    path = f"/reserved_domains/{domain['id']}"
    assert admin.patch(path, {"description": "d"}).json["resolves_to"] == [{"value": "eu"}]
    assert admin.patch(path, {"resolves_to": [{"value": "us"}]}).json["resolves_to"] == [
        {"value": "us"}
    ]
    assert admin.patch(path, {"resolves_to": []}).json["resolves_to"] == []


# ---- abuse reports -------------------------------------------------------------------------
def test_abuse_reports_are_403_for_other_accounts_before_the_body_is_read(account):
    assert_error(
        account.admin.post("/abuse_reports", {"urls": "not a list"}), errors.NotAbuseReporter
    )
    assert_error(account.admin.get("/abuse_reports/abrp_" + "0" * 27), errors.NotAbuseReporter)


def test_an_abuse_report_takes_100_urls_of_2048_bytes(module_api):
    reporter = module_api.new_account(reporter=True).admin
    base = "https://h.example.com/"
    long_url = base + "p" * (2048 - len(base))
    assert reporter.post("/abuse_reports", {"urls": [long_url]}).status == 201
    assert_error(reporter.post("/abuse_reports", {"urls": [long_url + "p"]}), errors.InvalidField)
    urls = [f"https://h{i}.example.com/" for i in range(100)]
    assert reporter.post("/abuse_reports", {"urls": urls}).status == 201
    assert_error(
        reporter.post("/abuse_reports", {"urls": urls + ["https://x.example.com/"]}),
        errors.InvalidField,
    )
    assert_error(reporter.post("/abuse_reports", {"urls": []}), errors.InvalidField)


def test_abuse_report_hostnames_are_in_order_of_first_appearance(module_api):
    reporter = module_api.new_account(reporter=True).admin
    report = reporter.post(
        "/abuse_reports",
        {
            "urls": [
                "https://B.example.com/1",
                "http://a.example.com/",
                "https://b.example.com/2",
                "http://203.0.113.9/",
            ]
        },
    ).json
    assert [h["hostname"] for h in report["hostnames"]] == [
        "b.example.com",
        "a.example.com",
        "203.0.113.9",
    ]
    assert report["status"] == "PENDING"
