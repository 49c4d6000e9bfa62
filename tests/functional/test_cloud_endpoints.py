"""Cloud endpoints through the API (``POST``/``PATCH``/``DELETE /endpoints``), at both levels:
every rule of chalicelib/cloud_endpoints.py at its boundary. Agent endpoints (and internal
ones) are seeded with chalicelib.core.online's writers, the functions the edge calls."""

import json

import pytest

from chalicelib.core import errors, ids, online
from tests.functional.test_online_views import ENDPOINT_FIELDS, Edge
from tests.support.contract import assert_error

BASE = "tunnels.localhost"
POLICY = json.dumps(
    {
        "on_http_request": [
            {
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "hi"}}
                ]
            }
        ]
    }
)


@pytest.fixture
def edge(api, monkeypatch):
    return Edge(api, monkeypatch)


def _name(prefix="ce"):
    return f"{prefix}{ids.new_id('x')[-10:].lower()}"


def _create(caller, url, **fields):
    return caller.post(
        "/endpoints", {"url": url, "type": "cloud", "traffic_policy": POLICY, **fields}
    )


def test_create_cloud_endpoint_returns_it_with_the_hosted_fields(api, account):
    host = f"{_name()}.{BASE}"
    resp = _create(account.admin, f"https://{host}", description="d", metadata="m")
    assert resp.status == 201, resp
    ep = resp.json
    assert set(ep) == ENDPOINT_FIELDS
    assert ep["id"].startswith("ep_") and ep["type"] == "cloud"
    assert (
        ep["url"],
        ep["public_url"],
        ep["scheme"],
        ep["proto"],
        ep["host"],
        ep["port"],
        ep["hostport"],
    ) == (f"https://{host}", f"https://{host}", "https", "https", host, 443, f"{host}:443")
    assert ep["traffic_policy"] == POLICY and ep["bindings"] == ["public"]
    assert (ep["description"], ep["metadata"]) == ("d", "m")
    assert ep["tunnel"] is None and ep["tunnel_session"] is None and ep["domain"] is None
    assert ep["pooling_enabled"] is False and ep["principal"]["id"] == account.admin.id
    assert account.admin.get(f"/endpoints/{ep['id']}").json == ep
    assert [e["id"] for e in account.admin.get("/endpoints").json["endpoints"]] == [ep["id"]]


def test_create_without_type_defaults_to_cloud_and_other_types_are_refused(api, account):
    resp = account.admin.post(
        "/endpoints", {"url": f"https://{_name()}.{BASE}", "traffic_policy": POLICY}
    )
    assert resp.status == 201 and resp.json["type"] == "cloud"
    for bad in ("agent", "edge", "", 1):
        assert_error(
            _create(account.admin, f"https://{_name()}.{BASE}", type=bad),
            errors.InvalidField,
            field="type",
        )


def test_create_without_url_returns_400(api, account):
    assert_error(
        account.admin.post("/endpoints", {"type": "cloud"}), errors.MissingField, field="url"
    )


@pytest.mark.parametrize(
    "url",
    [
        "example",
        "ftp://x.tunnels.localhost",
        "https://",
        "https://x.tunnels.localhost/path",
        "https://x.tunnels.localhost?q=1",
        "https://x.tunnels.localhost#f",
        "https://u:p@x.tunnels.localhost",
        "https://x.tunnels.localhost:8443",
        "http://x.tunnels.localhost:443",
        "https://x_y.tunnels.localhost",
        "https://localhost",
        "https://10.0.0.1",
        "tcp://1.tcp.tunnels.localhost:20000",
        "tls://x.tunnels.localhost",
        "https://" + "a" * 64 + ".tunnels.localhost",
    ],
)
def test_create_with_bad_url_returns_400_naming_url(api, account, url):
    assert_error(_create(account.admin, url), errors.InvalidField, field="url")
    assert account.admin.get("/endpoints").json["endpoints"] == []


def test_url_with_the_schemes_own_port_or_a_slash_is_canonical(api, account):
    name = _name()
    a = _create(account.admin, f"HTTPS://{name.upper()}.{BASE}:443/")
    assert a.status == 201 and a.json["url"] == f"https://{name}.{BASE}"
    b = _create(account.admin, f"http://{_name()}.{BASE}:80")
    assert b.status == 201 and b.json["port"] == 80 and b.json["scheme"] == "http"


def test_label_of_63_bytes_passes_and_64_fails(api, account):
    assert _create(account.admin, f"https://{'a' * 63}.{BASE}").status == 201
    assert_error(
        _create(account.admin, f"https://{'b' * 64}.{BASE}"), errors.InvalidField, field="url"
    )


def test_url_on_own_reserved_domain_and_wildcard_is_accepted_with_its_ref(api, account):
    domain = f"{_name()}.example.test"
    rd = account.admin.post("/reserved_domains", {"domain": domain}).json
    ep = _create(account.admin, f"https://{domain}").json
    assert ep["domain"]["id"] == rd["id"]
    wild = account.admin.post("/reserved_domains", {"domain": f"*.w{domain}"}).json
    ep2 = _create(account.admin, f"https://a.b.w{domain}").json
    assert ep2["domain"]["id"] == wild["id"]


def test_url_on_another_accounts_domain_returns_320(api, account, other_account):
    domain = f"{_name()}.example.test"
    assert other_account.admin.post("/reserved_domains", {"domain": domain}).status == 201
    assert_error(_create(account.admin, f"https://{domain}"), errors.DomainNotOwned, field="url")
    wild = f"w{domain}"
    assert other_account.admin.post("/reserved_domains", {"domain": f"*.{wild}"}).status == 201
    assert_error(_create(account.admin, f"https://a.b.{wild}"), errors.DomainNotOwned, field="url")
    # an exact reservation does not cover its subdomains: nobody reserved those
    assert_error(
        _create(account.admin, f"https://a.{domain}"), errors.DomainNotReserved, field="url"
    )


def test_url_on_a_domain_nobody_reserved_returns_7117(api, account):
    assert_error(
        _create(account.admin, f"https://{_name()}.example.test"),
        errors.DomainNotReserved,
        field="url",
    )
    # the base domain itself (here also EDGE_TCP_HOST) is nobody's name
    assert_error(_create(account.admin, f"https://{BASE}"), errors.InvalidField, field="url")


def test_same_host_twice_in_one_account_returns_18009_whatever_the_scheme(api, account):
    host = f"{_name()}.{BASE}"
    assert _create(account.admin, f"https://{host}").status == 201
    assert_error(
        _create(account.admin, f"https://{host}"), errors.CloudEndpointExists, field="url"
    )
    assert_error(_create(account.admin, f"http://{host}"), errors.CloudEndpointExists, field="url")
    assert len(account.admin.get("/endpoints").json["endpoints"]) == 1


def test_host_of_another_accounts_cloud_endpoint_returns_334(api, account, other_account):
    host = f"{_name()}.{BASE}"
    assert _create(other_account.admin, f"https://{host}").status == 201
    assert_error(_create(account.admin, f"https://{host}"), errors.EndpointUrlInUse, field="url")


def test_host_of_an_online_agent_endpoint_returns_334_and_a_stale_one_is_taken_over(
    api, account, edge
):
    credential = account.admin.post("/credentials", {}).json["id"]
    host = f"{_name()}.{BASE}"
    sid = edge.session(account, credential)
    _, eid = edge.tunnel(account, sid, hostname=host)
    edge.call(
        online.claim_hostname, host, account_id=account.id, endpoint_id=eid, instance_id="edge-1"
    )
    assert_error(_create(account.admin, f"https://{host}"), errors.EndpointUrlInUse, field="url")
    stale_host = f"{_name()}.{BASE}"
    old = edge.session(account, credential, ago=online.STALE_SECONDS + 5)
    _, old_eid = edge.tunnel(account, old, hostname=stale_host, ago=online.STALE_SECONDS + 5)
    edge._at(online.STALE_SECONDS + 5)
    with api.service_store():
        online.claim_hostname(
            stale_host, account_id=account.id, endpoint_id=old_eid, instance_id="edge-1"
        )
    edge._at(0)
    assert _create(account.admin, f"https://{stale_host}").status == 201


def test_agent_cannot_bind_the_host_of_a_cloud_endpoint(api, account, other_account, edge):
    host = f"{_name()}.{BASE}"
    ep = _create(account.admin, f"https://{host}").json
    with pytest.raises(errors.Conflict):
        edge.call(
            online.claim_hostname,
            host,
            account_id=other_account.id,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-1",
        )
    assert edge.call(online.cloud_endpoint_for, host)["id"] == ep["id"]


def test_host_of_an_https_edge_returns_334_and_an_edge_cannot_take_a_cloud_host(api, account):
    host = f"{_name()}.{BASE}"
    assert account.admin.post("/edges/https", {"hostports": [f"{host}:443"]}).status == 201
    assert_error(_create(account.admin, f"https://{host}"), errors.EndpointUrlInUse, field="url")
    other = f"{_name()}.{BASE}"
    assert _create(account.admin, f"https://{other}").status == 201
    assert account.admin.post("/edges/https", {"hostports": [f"{other}:443"]}).status == 409


def test_bad_traffic_policy_returns_18002_naming_the_element(api, account):
    bad = {
        "on_http_request": [
            {"actions": [{"type": "custom-response", "config": {"status_code": 99}}]}
        ]
    }
    body = assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=json.dumps(bad)),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert "on_http_request[0].actions[0].config.status_code" in body["msg"]
    unknown = {"on_http_request": [{"actions": [{"type": "oauth", "config": {}}]}]}
    assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=json.dumps(unknown)),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert account.admin.get("/endpoints").json["endpoints"] == []


def test_yaml_policy_and_empty_policy_are_stored_as_sent(api, account):
    yaml_doc = "on_http_request:\n  - actions:\n      - type: deny\n"
    assert (
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=yaml_doc).json[
            "traffic_policy"
        ]
        == yaml_doc
    )
    assert (
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy="").json[
            "traffic_policy"
        ]
        == ""
    )


def test_description_and_metadata_limits(api, account):
    assert (
        _create(
            account.admin, f"https://{_name()}.{BASE}", description="d" * 255, metadata="m" * 4096
        ).status
        == 201
    )
    assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", description="d" * 256),
        errors.InvalidField,
        field="description",
    )
    assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", metadata="m" * 4097),
        errors.InvalidField,
        field="metadata",
    )


def test_pooling_enabled_is_accepted_both_ways(api, account):
    """Pools themselves: tests/functional/test_cloud_endpoint_pools.py."""
    assert _create(account.admin, f"https://{_name()}.{BASE}", pooling_enabled=False).status == 201
    resp = _create(account.admin, f"https://{_name()}.{BASE}", pooling_enabled=True)
    assert resp.status == 201 and resp.json["pooling_enabled"] is True, resp


def test_unknown_field_returns_400(api, account):
    assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", upstream_url="x"),
        errors.UnknownField,
        field="upstream_url",
    )


def test_internal_url_takes_the_internal_binding_and_needs_no_reservation(
    api, account, other_account
):
    name = f"{_name()}.internal"
    ep = _create(account.admin, f"https://{name}")
    assert ep.status == 201 and ep.json["bindings"] == ["internal"], ep
    assert ep.json["domain"] is None
    # namespaced per account: another account may use the same internal URL
    assert _create(other_account.admin, f"https://{name}").status == 201
    assert_error(
        _create(account.admin, f"https://{name}"), errors.CloudEndpointExists, field="url"
    )
    assert (
        _create(account.admin, f"https://{_name()}.internal", bindings=["internal"]).status == 201
    )


@pytest.mark.parametrize(
    "url,bindings",
    [
        ("https://{n}.internal", ["public"]),
        ("https://{n}.tunnels.localhost", ["internal"]),
        ("https://{n}.tunnels.localhost", ["kubernetes"]),
        ("https://{n}.tunnels.localhost", []),
        ("https://{n}.tunnels.localhost", ["public", "internal"]),
    ],
)
def test_binding_that_does_not_match_the_url_returns_400(api, account, url, bindings):
    assert_error(
        _create(account.admin, url.format(n=_name()), bindings=bindings),
        errors.InvalidField,
        field="bindings",
    )


def test_patch_changes_policy_description_metadata_and_keeps_the_rest(api, account):
    ep = _create(account.admin, f"https://{_name()}.{BASE}").json
    deny = json.dumps({"on_http_request": [{"actions": [{"type": "deny"}]}]})
    resp = account.admin.patch(
        f"/endpoints/{ep['id']}", {"traffic_policy": deny, "description": "new", "metadata": "m2"}
    )
    assert resp.status == 200, resp
    got = resp.json
    assert (got["traffic_policy"], got["description"], got["metadata"]) == (deny, "new", "m2")
    assert got["url"] == ep["url"] and got["created_at"] == ep["created_at"]
    assert account.admin.get(f"/endpoints/{ep['id']}").json == got
    with api.service_store():
        assert online.cloud_endpoint_for(ep["host"])["traffic_policy"] == deny


def test_patch_url_moves_the_claim(api, account, other_account):
    old_host, new_host = f"{_name()}.{BASE}", f"{_name()}.{BASE}"
    ep = _create(account.admin, f"https://{old_host}").json
    got = account.admin.patch(f"/endpoints/{ep['id']}", {"url": f"http://{new_host}"}).json
    assert (got["url"], got["host"], got["port"]) == (f"http://{new_host}", new_host, 80)
    with api.service_store():
        assert online.cloud_endpoint_for(old_host) is None
        assert online.cloud_endpoint_for(new_host)["url"] == f"http://{new_host}"
    assert _create(other_account.admin, f"https://{old_host}").status == 201


def test_patch_with_bad_fields_returns_400_and_changes_nothing(api, account, other_account):
    ep = _create(account.admin, f"https://{_name()}.{BASE}").json
    taken = f"{_name()}.{BASE}"
    assert _create(other_account.admin, f"https://{taken}").status == 201
    path = f"/endpoints/{ep['id']}"
    assert_error(
        account.admin.patch(path, {"traffic_policy": "on_http_request: 3"}),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert_error(
        account.admin.patch(path, {"url": "https://x.example.test"}),
        errors.DomainNotReserved,
        field="url",
    )
    assert_error(
        account.admin.patch(path, {"url": f"https://{taken}"}),
        errors.EndpointUrlInUse,
        field="url",
    )
    assert_error(
        account.admin.patch(path, {"bindings": ["internal"]}),
        errors.InvalidField,
        field="bindings",
    )
    assert_error(account.admin.patch(path, {"type": "cloud"}), errors.UnknownField, field="type")
    assert account.admin.get(path).json == ep


def test_patch_to_an_internal_url_takes_the_internal_binding(api, account):
    ep = _create(account.admin, f"https://{_name()}.{BASE}").json
    got = account.admin.patch(
        f"/endpoints/{ep['id']}", {"url": f"https://{_name()}.internal"}
    ).json
    assert got["bindings"] == ["internal"]


def test_delete_returns_204_and_frees_the_host(api, account, other_account):
    host = f"{_name()}.{BASE}"
    ep = _create(account.admin, f"https://{host}").json
    resp = account.admin.delete(f"/endpoints/{ep['id']}")
    assert resp.status == 204 and resp.text == ""
    assert_error(account.admin.get(f"/endpoints/{ep['id']}"), errors.NotFound)
    assert_error(account.admin.delete(f"/endpoints/{ep['id']}"), errors.NotFound)
    with api.service_store():
        assert online.cloud_endpoint_for(host) is None
    assert _create(other_account.admin, f"https://{host}").status == 201


def test_unknown_malformed_and_other_accounts_ids_are_404(api, account, other_account):
    ep = _create(account.admin, f"https://{_name()}.{BASE}").json
    for path in (
        f"/endpoints/{ep['id']}",
        f"/endpoints/{online.new_endpoint_id()}",
        "/endpoints/nope",
    ):
        assert_error(other_account.admin.patch(path, {"description": "x"}), errors.NotFound)
        assert_error(other_account.admin.delete(path), errors.NotFound)
        assert_error(other_account.admin.get(path), errors.NotFound)
    assert account.admin.get(f"/endpoints/{ep['id']}").json == ep


def test_stopping_an_agent_endpoint_no_edge_answers_is_a_409_and_withdrawn(
    inprocess_api, monkeypatch
):
    """No edge takes the stop_endpoint command: 409 once COMMAND_WAIT_SECONDS have passed
    (1 s here), the command gone from the edge's partition, the endpoint still listed."""
    import time

    edge = Edge(inprocess_api, monkeypatch)
    account = inprocess_api.new_account()
    credential = account.admin.post("/credentials", {}).json["id"]
    _, eid = edge.tunnel(account, edge.session(account, credential), hostname=f"{_name()}.{BASE}")
    monkeypatch.setattr(online, "COMMAND_WAIT_SECONDS", 1.0)
    started = time.monotonic()
    resp = account.admin.delete(f"/endpoints/{eid}")
    took = time.monotonic() - started
    assert resp.status == 409 and resp.json["error_code"] == errors.COMMAND_NOT_ANSWERED
    assert resp.json["msg"].startswith(f"No answer about endpoint {eid} within 1 s")
    assert 1.0 <= took < 2.0, took
    assert edge.call(online.take_commands, "edge-1") == []
    assert account.admin.get(f"/endpoints/{eid}").status == 200


def test_agent_endpoints_cannot_be_patched_and_delete_stops_them(api, account, edge):
    """PATCH of a live agent endpoint is a 400; DELETE asks the edge holding its session to
    stop it (a stop_endpoint command naming the endpoint: the edge sends the agent a
    StopTunnel, tests/edge/test_stop_tunnel.py) and is 204 once the edge answers; 404 when
    the edge no longer holds it; members stop only their own credentials' endpoints."""
    credential = account.admin.post("/credentials", {}).json["id"]
    sid = edge.session(account, credential)
    _, eid = edge.tunnel(account, sid, hostname=f"{_name()}.{BASE}")
    assert_error(
        account.admin.patch(f"/endpoints/{eid}", {"description": "x"}), errors.UnsupportedOperation
    )
    assert account.admin.get(f"/endpoints/{eid}").status == 200
    with edge.answering() as taken:
        refused = account.member.delete(f"/endpoints/{eid}")
        assert refused.status == 403 and refused.json["error_code"] == errors.FORBIDDEN
        assert account.admin.delete(f"/endpoints/{eid}").status == 204
    assert [(c.command, c.session_id, c.target) for c in taken] == [("stop_endpoint", sid, eid)]
    with edge.answering(outcome="gone"):
        assert_error(account.admin.delete(f"/endpoints/{eid}"), errors.NotFound)
    own = account.member.post("/credentials", {}).json["id"]
    _, mine = edge.tunnel(account, edge.session(account, own), hostname=f"{_name()}.{BASE}")
    with edge.answering() as taken:
        assert account.member.delete(f"/endpoints/{mine}").status == 204
    assert [c.target for c in taken] == [mine]
    stale = edge.session(account, credential, ago=online.STALE_SECONDS + 5)
    _, gone = edge.tunnel(
        account, stale, hostname=f"{_name()}.{BASE}", ago=online.STALE_SECONDS + 5
    )
    edge._at(0)
    assert_error(account.admin.delete(f"/endpoints/{gone}"), errors.NotFound)


def test_internal_agent_endpoints_are_listed_with_the_internal_binding(api, account, edge):
    credential = account.admin.post("/credentials", {}).json["id"]
    sid = edge.session(account, credential)
    name = f"{_name()}.internal"
    _, eid = edge.tunnel(account, sid, hostname=name, bindings=["internal"])
    ep = account.admin.get(f"/endpoints/{eid}").json
    assert ep["bindings"] == ["internal"] and ep["url"] == f"https://{name}"
    # its claim is namespaced by account: a cloud endpoint of the same account conflicts
    edge.call(
        online.claim_hostname,
        online.claim_name(name, account.id),
        account_id=account.id,
        endpoint_id=eid,
        instance_id="edge-1",
    )
    assert_error(_create(account.admin, f"https://{name}"), errors.EndpointUrlInUse, field="url")


def test_the_ngrok_api_client_creates_updates_and_deletes(http_api):
    import ngrok

    account = http_api.new_account()
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    host = f"{_name()}.{BASE}"
    ep = client.endpoints.create(
        url=f"https://{host}", type="cloud", traffic_policy=POLICY, description="made by ngrok-api"
    )
    assert ep.type == "cloud" and ep.url == f"https://{host}" and ep.bindings == ["public"]
    assert ep.traffic_policy == POLICY and ep.description == "made by ngrok-api"
    updated = client.endpoints.update(ep.id, metadata="m")
    assert updated.metadata == "m" and updated.traffic_policy == POLICY
    assert [e.id for e in client.endpoints.list()] == [ep.id]
    client.endpoints.delete(ep.id)
    with pytest.raises(ngrok.NotFoundError):
        client.endpoints.get(ep.id)


def test_a_reserved_domain_a_cloud_endpoint_serves_cannot_be_deleted(api, account):
    domain = f"{_name()}.example.test"
    rd = account.admin.post("/reserved_domains", {"domain": domain}).json
    other = account.admin.post("/reserved_domains", {"domain": f"o{domain}"}).json
    ep = _create(account.admin, f"https://{domain}").json
    assert_error(account.admin.delete(f"/reserved_domains/{rd['id']}"), errors.Conflict)
    moved = account.admin.patch(f"/endpoints/{ep['id']}", {"url": f"https://o{domain}"}).json
    assert moved["domain"]["id"] == other["id"]
    assert_error(account.admin.delete(f"/reserved_domains/{other['id']}"), errors.Conflict)
    assert account.admin.delete(f"/reserved_domains/{rd['id']}").status == 204
    assert account.admin.delete(f"/endpoints/{ep['id']}").status == 204
    assert account.admin.delete(f"/reserved_domains/{other['id']}").status == 204


def test_two_accounts_agents_may_bind_the_same_internal_name(api, account, other_account, edge):
    name = f"{_name()}.internal"
    for acct in (account, other_account):
        edge.call(
            online.claim_hostname,
            online.claim_name(name, acct.id),
            account_id=acct.id,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-1",
        )
    with pytest.raises(errors.Conflict):  # but one per account
        edge.call(
            online.claim_hostname,
            online.claim_name(name.upper(), account.id),
            account_id=account.id,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-1",
        )


TCP_POLICY = json.dumps(
    {
        "on_tcp_connect": [
            {
                "actions": [
                    {"type": "forward-internal", "config": {"url": "tcp://db.internal:5432"}}
                ]
            }
        ]
    }
)


def test_tcp_cloud_endpoint_on_a_reserved_address(api, account):
    ra = account.admin.post("/reserved_addrs", {}).json
    ep = _create(account.admin, f"tcp://{ra['addr']}", traffic_policy=TCP_POLICY)
    assert ep.status == 201, ep
    host, port = ra["addr"].rsplit(":", 1)
    assert (
        ep.json["url"],
        ep.json["scheme"],
        ep.json["host"],
        ep.json["port"],
        ep.json["hostport"],
    ) == (f"tcp://{ra['addr']}", "tcp", host, int(port), ra["addr"])
    assert ep.json["tcp_addr"]["id"] == ra["id"] and ep.json["domain"] is None
    assert ep.json["bindings"] == ["public"]
    # the address is in use: not deletable, not for a TCP edge, not for a second endpoint
    assert_error(account.admin.delete(f"/reserved_addrs/{ra['id']}"), errors.Conflict)
    assert account.admin.post("/edges/tcp", {"hostports": [ra["addr"]]}).status == 409
    assert_error(
        _create(account.admin, f"tcp://{ra['addr']}", traffic_policy=TCP_POLICY),
        errors.CloudEndpointExists,
        field="url",
    )
    assert account.admin.delete(f"/endpoints/{ep.json['id']}").status == 204
    assert account.admin.delete(f"/reserved_addrs/{ra['id']}").status == 204


def test_tcp_cloud_endpoint_rules(api, account, other_account):
    theirs = other_account.admin.post("/reserved_addrs", {}).json["addr"]
    mine = account.admin.post("/reserved_addrs", {}).json["addr"]
    assert_error(
        _create(account.admin, f"tcp://{theirs}", traffic_policy=TCP_POLICY),
        errors.InvalidField,
        field="url",
    )
    host = mine.rsplit(":", 1)[0]
    assert_error(
        _create(account.admin, f"tcp://{host}", traffic_policy=TCP_POLICY),
        errors.InvalidField,
        field="url",
    )
    # HTTP phases never run on a TCP endpoint
    assert_error(
        _create(account.admin, f"tcp://{mine}"), errors.InvalidCloudPolicy, field="traffic_policy"
    )
    edge = account.admin.post("/edges/tcp", {"hostports": [mine]})
    assert edge.status == 201
    assert_error(
        _create(account.admin, f"tcp://{mine}", traffic_policy=TCP_POLICY),
        errors.EndpointUrlInUse,
        field="url",
    )


def test_tcp_internal_cloud_endpoint_and_patch_between_protocols(api, account):
    ep = _create(account.admin, "tcp://db.internal:5432", traffic_policy=TCP_POLICY)
    assert ep.status == 201 and ep.json["bindings"] == ["internal"], ep
    web = _create(account.admin, "https://web.internal").json  # an HTTP policy
    path = f"/endpoints/{web['id']}"
    # the stored policy is checked against the URL it would now serve
    assert_error(
        account.admin.patch(path, {"url": "tcp://web.internal:80"}),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    moved = account.admin.patch(
        path, {"url": "tcp://web.internal:80", "traffic_policy": TCP_POLICY}
    )
    assert moved.status == 200 and moved.json["port"] == 80, moved
    assert moved.json["scheme"] == "tcp" and moved.json["bindings"] == ["internal"]
