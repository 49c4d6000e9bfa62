"""/edges/tcp and its module sub-resources at both levels."""

import itertools
import json
import threading

import pytest
import requests

from chalicelib.core import errors, ids

FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "hostports",
    "backend",
    "ip_restriction",
    "traffic_policy",
    "policy",
}
PATH = "/edges/tcp"
POLICY_JSON = json.dumps(
    {
        "on_tcp_connect": [
            {
                "name": "deny",
                "expressions": ["conn.client_ip == '1.2.3.4'"],
                "actions": [{"type": "deny"}],
            }
        ]
    }
)
POLICY_YAML = (
    "on_tcp_connect:\n  - name: allow\n    actions:\n      - type: restrict-ips\n"
    "        config: {allow: ['0.0.0.0/0']}\n"
)
_counter = itertools.count()


def hostport(caller):
    """A TCP address reserved by the caller's account (a TCP edge may serve only those)."""
    resp = caller.post("/reserved_addrs", {})
    assert resp.status == 201, resp
    return resp.json["addr"]


def backend(caller):
    resp = caller.post("/backends/http_response", {"body": "hi"})
    assert resp.status == 201, resp
    return resp.json


def policy(caller):
    resp = caller.post("/ip_policies", {})
    assert resp.status == 201, resp
    return resp.json


def create_edge(caller, **fields):
    resp = caller.post(PATH, fields)
    assert resp.status == 201, resp
    return resp.json


def test_create_bare_edge_has_every_field_null(account):
    edge = create_edge(account.admin, description="", metadata="")
    assert set(edge) == FIELDS and ids.is_valid(edge["id"], "edgtcp")
    assert edge["uri"].endswith(f"{PATH}/{edge['id']}")
    for name in ("hostports", "backend", "ip_restriction", "traffic_policy", "policy"):
        assert edge[name] is None
    assert account.admin.get(f"{PATH}/{edge['id']}").json == edge
    assert account.admin.get(PATH).json["tcp_edges"] == [edge]


def test_create_with_modules_renders_refs(account):
    admin = account.admin
    bk, p1, p2 = backend(admin), policy(admin), policy(admin)
    hp = hostport(admin)
    edge = create_edge(
        admin,
        description="db",
        hostports=[hp.upper()],
        backend={"backend_id": bk["id"]},
        ip_restriction={"enabled": False, "ip_policy_ids": [p1["id"], p2["id"]]},
        traffic_policy={"value": POLICY_JSON},
    )
    assert edge["hostports"] == [hp]
    assert edge["backend"] == {"enabled": True, "backend": {"id": bk["id"], "uri": bk["uri"]}}
    assert edge["ip_restriction"] == {
        "enabled": False,
        "ip_policies": [{"id": p1["id"], "uri": p1["uri"]}, {"id": p2["id"], "uri": p2["uri"]}],
    }
    assert edge["traffic_policy"] == {"enabled": True, "value": POLICY_JSON}
    assert edge["policy"] is None
    assert admin.get(f"{PATH}/{edge['id']}").json == edge


def test_patch_with_only_metadata_leaves_everything_else(account):
    admin = account.admin
    bk, p1 = backend(admin), policy(admin)
    edge = create_edge(
        admin,
        description="d",
        hostports=[hostport(admin)],
        backend={"backend_id": bk["id"]},
        ip_restriction={"ip_policy_ids": [p1["id"]]},
        traffic_policy={"enabled": False, "value": POLICY_YAML},
    )
    updated = admin.patch(f"{PATH}/{edge['id']}", {"metadata": "m"})
    assert updated.status == 200, updated
    assert updated.json == {**edge, "metadata": "m"}
    # null modules mean "not sent" too
    again = admin.patch(f"{PATH}/{edge['id']}", {"backend": None, "id": edge["id"]})
    assert again.status == 200 and again.json == updated.json


def test_patch_replaces_a_sent_module_whole(account):
    admin = account.admin
    b1, b2 = backend(admin), backend(admin)
    edge = create_edge(
        admin,
        backend={"enabled": False, "backend_id": b1["id"]},
        traffic_policy={"value": POLICY_JSON},
    )
    updated = admin.patch(f"{PATH}/{edge['id']}", {"backend": {"backend_id": b2["id"]}}).json
    assert updated["backend"] == {"enabled": True, "backend": {"id": b2["id"], "uri": b2["uri"]}}
    assert updated["traffic_policy"] == edge["traffic_policy"]
    # b1 is free again, b2 is in use
    assert admin.delete(f"/backends/http_response/{b1['id']}").status == 204
    assert admin.delete(f"/backends/http_response/{b2['id']}").status == 409


def test_hostports_update_and_clear(account):
    admin = account.admin
    a, b = hostport(admin), hostport(admin)
    edge = create_edge(admin, hostports=[a])
    updated = admin.patch(f"{PATH}/{edge['id']}", {"hostports": [a, b]}).json
    assert updated["hostports"] == [a, b]
    cleared = admin.patch(f"{PATH}/{edge['id']}", {"hostports": []}).json
    assert cleared["hostports"] is None
    # released hostports can be claimed by another edge
    assert create_edge(admin, hostports=[a, b])["hostports"] == [a, b]


def test_hostport_served_by_another_edge_returns_409(account, other_account):
    hp = hostport(account.admin)
    first = create_edge(account.admin, hostports=[hp])
    resp = account.admin.post(PATH, {"hostports": [hp]})
    assert resp.status == 409 and resp.json["error_code"] == errors.CONFLICT
    assert hp in resp.json["msg"]
    # another account may not serve it at all: the address is this account's
    assert other_account.admin.post(PATH, {"hostports": [hp]}).status == 400
    second = create_edge(account.admin, hostports=[hostport(account.admin)])
    resp = account.admin.patch(f"{PATH}/{second['id']}", {"hostports": [hp]})
    assert resp.status == 409
    assert account.admin.get(f"{PATH}/{second['id']}").json == second
    assert len(account.admin.get(PATH).json["tcp_edges"]) == 2
    # deleting the edge frees the hostport
    assert account.admin.delete(f"{PATH}/{first['id']}").status == 204
    assert account.admin.patch(f"{PATH}/{second['id']}", {"hostports": [hp]}).status == 200


@pytest.mark.parametrize(
    "hostports",
    [
        ["example.com"],
        ["example.com:0"],
        ["example.com:65536"],
        ["example.com:x"],
        [":80"],
        ["exa mple.com:80"],
        ["-bad.com:80"],
        ["example.com:080"],
        [5],
        "example.com:80",
        ["a.com:1", "A.com:1"],
        [f"h{i}.com:1" for i in range(11)],
        ["a" * 64 + ".com:1"],
        ["example.com:\u00b2"],
    ],
)
def test_bad_hostports_return_400(account, hostports):
    resp = account.admin.post(PATH, {"hostports": hostports})
    assert resp.status == 400, resp
    assert resp.json["details"]["field"].startswith("hostports")
    assert account.admin.get(PATH).json["tcp_edges"] == []


def test_hostport_limits_are_inclusive(account):
    hps = [hostport(account.admin) for _ in range(10)]
    assert create_edge(account.admin, hostports=hps)["hostports"] == hps


@pytest.mark.parametrize(
    "module, value, field",
    [
        ("backend", {}, "backend.backend_id"),
        ("backend", {"backend_id": "nope"}, "backend.backend_id"),
        ("backend", {"backend_id": "bkdhr_0ERYqBR5B9RMvMY4cZCztl2IB7s"}, "backend.backend_id"),
        ("backend", {"backend_id": "ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"}, "backend.backend_id"),
        ("backend", {"backend_id": "BK", "enabled": "yes"}, "backend.enabled"),
        ("backend", {"backend_id": "x", "extra": 1}, "backend.extra"),
        ("backend", "bkdhr_x", "backend"),
        ("ip_restriction", {"ip_policy_ids": []}, "ip_restriction.ip_policy_ids"),
        ("ip_restriction", {}, "ip_restriction.ip_policy_ids"),
        (
            "ip_restriction",
            {"ip_policy_ids": ["ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"]},
            "ip_restriction.ip_policy_ids",
        ),
        ("ip_restriction", {"ip_policy_ids": "ipp_x"}, "ip_restriction.ip_policy_ids"),
        ("traffic_policy", {}, "traffic_policy.value"),
        ("traffic_policy", {"value": "not: [valid"}, "traffic_policy.value"),
        ("traffic_policy", {"value": "[1, 2]"}, "traffic_policy.value"),
        ("traffic_policy", {"value": '{"on_nothing": []}'}, "traffic_policy.value"),
        (
            "traffic_policy",
            {"value": '{"on_tcp_connect": [{"name": "x"}]}'},
            "traffic_policy.value",
        ),
        (
            "traffic_policy",
            {"value": '{"on_tcp_connect": [{"actions": [{"config": {}}]}]}'},
            "traffic_policy.value",
        ),
        (
            "traffic_policy",
            {"value": '{"on_tcp_connect": {"actions": []}}'},
            "traffic_policy.value",
        ),
        ("traffic_policy", {"value": 5}, "traffic_policy.value"),
        ("traffic_policy", {"value": "[" * 5000}, "traffic_policy.value"),
        ("traffic_policy", {"value": "on_tcp_connect: " + "[" * 5000}, "traffic_policy.value"),
        (
            "traffic_policy",
            {"value": '{"on_tcp_connect": [{"actions": [{"type": "oauth"}]}]}'},
            "traffic_policy.value",
        ),
        (
            "traffic_policy",
            {"value": '{"on_http_request": [{"actions": [{"type": "deny"}]}]}'},
            "traffic_policy.value",
        ),
    ],
)
def test_bad_module_returns_400_and_writes_nothing(account, module, value, field):
    resp = account.admin.post(PATH, {module: value})
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field, resp
    assert field.split(".")[-1] in resp.json["msg"]
    assert account.admin.get(PATH).json["tcp_edges"] == []


def test_bad_reference_in_patch_leaves_edge_and_counters(account):
    admin = account.admin
    bk, p1 = backend(admin), policy(admin)
    hp = hostport(admin)
    edge = create_edge(admin, backend={"backend_id": bk["id"]})
    missing = "ipp_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    resp = admin.patch(
        f"{PATH}/{edge['id']}",
        {"hostports": [hp], "ip_restriction": {"ip_policy_ids": [p1["id"], missing]}},
    )
    assert resp.status == 400 and missing in resp.json["msg"]
    assert admin.get(f"{PATH}/{edge['id']}").json == edge
    assert admin.delete(f"/ip_policies/{p1['id']}").status == 204  # no reference was kept
    assert create_edge(admin, hostports=[hp])["hostports"] == [hp]  # hostport not claimed


def test_referenced_backend_and_policy_cannot_be_deleted_until_edge_lets_go(account):
    admin = account.admin
    bk, p1 = backend(admin), policy(admin)
    edge = create_edge(
        admin, backend={"backend_id": bk["id"]}, ip_restriction={"ip_policy_ids": [p1["id"]]}
    )
    for path in (f"/backends/http_response/{bk['id']}", f"/ip_policies/{p1['id']}"):
        resp = admin.delete(path)
        assert resp.status == 409 and resp.json["error_code"] == errors.CONFLICT
        assert admin.get(path).status == 200
    assert admin.delete(f"{PATH}/{edge['id']}").status == 204
    assert admin.delete(f"/backends/http_response/{bk['id']}").status == 204
    assert admin.delete(f"/ip_policies/{p1['id']}").status == 204


def test_references_to_another_accounts_resources_are_refused(account, other_account):
    theirs_bk, theirs_p = backend(other_account.admin), policy(other_account.admin)
    resp = account.admin.post(PATH, {"backend": {"backend_id": theirs_bk["id"]}})
    assert resp.status == 400 and theirs_bk["id"] in resp.json["msg"]
    resp = account.admin.post(PATH, {"ip_restriction": {"ip_policy_ids": [theirs_p["id"]]}})
    assert resp.status == 400 and theirs_p["id"] in resp.json["msg"]
    edge = create_edge(account.admin)
    resp = account.admin.put(f"{PATH}/{edge['id']}/backend", {"backend_id": theirs_bk["id"]})
    assert resp.status == 400 and resp.json["details"]["field"] == "backend_id"
    assert other_account.admin.delete(f"/backends/http_response/{theirs_bk['id']}").status == 204


def test_other_accounts_edge_is_not_found(account, other_account):
    bk = backend(account.admin)
    edge = create_edge(account.admin, backend={"backend_id": bk["id"]})
    other = other_account.admin
    assert other.get(f"{PATH}/{edge['id']}").status == 404
    assert other.patch(f"{PATH}/{edge['id']}", {"metadata": "x"}).status == 404
    assert other.delete(f"{PATH}/{edge['id']}").status == 404
    assert other.get(f"{PATH}/{edge['id']}/backend").status == 404
    assert other.put(f"{PATH}/{edge['id']}/traffic_policy", {"value": POLICY_JSON}).status == 404
    assert other.delete(f"{PATH}/{edge['id']}/backend").status == 404
    assert other.get(PATH).json["tcp_edges"] == []
    assert account.admin.get(f"{PATH}/{edge['id']}").json == edge


@pytest.mark.parametrize(
    "edge_id",
    ["edgtcp_x", "edghts_0ERYqBR5B9RMvMY4cZCztl2IB7s", "edgtcp_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_unknown_edge_is_404_everywhere(account, edge_id):
    admin = account.admin
    assert admin.get(f"{PATH}/{edge_id}").status == 404
    assert admin.patch(f"{PATH}/{edge_id}", {"metadata": "x"}).status == 404
    assert admin.delete(f"{PATH}/{edge_id}").status == 404
    for module in ("backend", "ip_restriction", "traffic_policy"):
        assert admin.get(f"{PATH}/{edge_id}/{module}").status == 404
        assert admin.delete(f"{PATH}/{edge_id}/{module}").status == 404
    assert admin.put(f"{PATH}/{edge_id}/traffic_policy", {"value": POLICY_JSON}).status == 404


def test_module_sub_resources_get_put_delete(account):
    admin = account.admin
    bk, p1 = backend(admin), policy(admin)
    edge = create_edge(admin, description="keep")
    base = f"{PATH}/{edge['id']}"
    for module in ("backend", "ip_restriction", "traffic_policy"):
        resp = admin.get(f"{base}/{module}")
        assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND
    put = admin.put(f"{base}/backend", {"backend_id": bk["id"]})
    assert put.status == 200, put
    assert put.json == {"enabled": True, "backend": {"id": bk["id"], "uri": bk["uri"]}}
    assert admin.get(f"{base}/backend").json == put.json
    # the wrapped shape other clients send
    wrapped = admin.put(
        f"{base}/ip_restriction",
        {"id": edge["id"], "module": {"enabled": False, "ip_policy_ids": [p1["id"]]}},
    )
    assert wrapped.status == 200, wrapped
    assert wrapped.json == {"enabled": False, "ip_policies": [{"id": p1["id"], "uri": p1["uri"]}]}
    tp = admin.put(f"{base}/traffic_policy", {"value": POLICY_YAML})
    assert tp.status == 200 and tp.json == {"enabled": True, "value": POLICY_YAML}
    full = admin.get(base).json
    assert full["backend"] == put.json and full["ip_restriction"] == wrapped.json
    assert full["traffic_policy"] == tp.json and full["description"] == "keep"
    assert admin.delete(f"/backends/http_response/{bk['id']}").status == 409
    for module in ("backend", "ip_restriction", "traffic_policy"):
        resp = admin.delete(f"{base}/{module}")
        assert resp.status == 204 and resp.text == ""
        assert admin.get(f"{base}/{module}").status == 404
        assert admin.delete(f"{base}/{module}").status == 204  # already gone: same result
    assert admin.get(base).json == {
        **full,
        "backend": None,
        "ip_restriction": None,
        "traffic_policy": None,
    }
    assert admin.delete(f"/backends/http_response/{bk['id']}").status == 204
    assert admin.delete(f"/ip_policies/{p1['id']}").status == 204


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "backend_id"),
        ({"backend_id": "nope"}, "backend_id"),
        ({"module": {"backend_id": "nope"}}, "backend_id"),
        ({"module": "x"}, "module"),
        ({"id": "edgtcp_other", "module": {}}, "id"),
        ({"module": {}, "extra": 1}, "extra"),
    ],
)
def test_bad_module_put_returns_400_and_keeps_module(account, body, field):
    admin = account.admin
    bk = backend(admin)
    edge = create_edge(admin, backend={"backend_id": bk["id"]})
    resp = admin.put(f"{PATH}/{edge['id']}/backend", body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field
    assert admin.get(f"{PATH}/{edge['id']}").json == edge


def test_replacing_module_with_same_backend_keeps_one_reference(account):
    admin = account.admin
    bk = backend(admin)
    edge = create_edge(admin, backend={"backend_id": bk["id"]})
    assert (
        admin.put(
            f"{PATH}/{edge['id']}/backend", {"enabled": False, "backend_id": bk["id"]}
        ).status
        == 200
    )
    assert admin.patch(f"{PATH}/{edge['id']}", {"backend": {"backend_id": bk["id"]}}).status == 200
    assert admin.delete(f"{PATH}/{edge['id']}/backend").status == 204
    assert admin.delete(f"/backends/http_response/{bk['id']}").status == 204


def test_traffic_policy_documents_accepted(account):
    # HTTP phases on a TCP edge would never run: refused (see the test below); empty ones are
    # no rules, so accepted.
    for value in (
        POLICY_JSON,
        POLICY_YAML,
        "{}",
        "",
        '{"on_tcp_connect": [{"actions": [{"type": "log", '
        '"config": {"metadata": {"ip": "${conn.client_ip}"}}}]}], '
        '"on_http_response": []}',
    ):
        edge = create_edge(account.admin, traffic_policy={"value": value})
        assert edge["traffic_policy"]["value"] == value


def test_list_paginates(account):
    created = [create_edge(account.admin)["id"] for _ in range(5)]
    page = account.admin.get(f"{PATH}?limit=2").json
    seen = [e["id"] for e in page["tcp_edges"]]
    while page["next_page_uri"]:
        page = account.admin.get(page["next_page_uri"]).json
        seen += [e["id"] for e in page["tcp_edges"]]
    assert seen == created[::-1]


def test_concurrent_claims_of_one_hostport_end_with_one_owner(http_api):
    account = http_api.new_account()
    headers = {"Authorization": f"Bearer {account.admin.token}", "Service-Version": "2"}
    url = http_api.base_url + PATH
    for _ in range(4):
        hp = hostport(account.admin)
        edges = [
            requests.post(url, json={}, headers=headers, timeout=30).json()["id"] for _ in range(2)
        ]
        barrier = threading.Barrier(2)
        results = {}

        def claim(edge_id):
            barrier.wait()
            results[edge_id] = requests.patch(
                f"{url}/{edge_id}", json={"hostports": [hp]}, headers=headers, timeout=30
            ).status_code

        threads = [threading.Thread(target=claim, args=(e,)) for e in edges]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == [200, 409], results
        owners = [
            e
            for e in edges
            if (requests.get(f"{url}/{e}", headers=headers, timeout=30).json()["hostports"] or [])
            == [hp]
        ]
        assert len(owners) == 1 and results[owners[0]] == 200


RULE = {"name": "deny-all", "expressions": [], "actions": [{"type": "deny"}]}


def test_create_with_policy_stores_it_as_the_traffic_policy(account):
    """The TypeScript client sends the older `policy` shape; it becomes traffic_policy."""
    admin = account.admin
    edge = admin.post(
        "/edges/tcp", {"policy": {"enabled": False, "inbound": [RULE], "outbound": []}}
    )
    assert edge.status == 201, edge
    body = edge.json
    assert body["policy"] is None
    assert body["traffic_policy"]["enabled"] is False
    assert json.loads(body["traffic_policy"]["value"]) == {"on_tcp_connect": [RULE]}
    updated = admin.patch(f"/edges/tcp/{body['id']}", {"policy": {"inbound": []}})
    assert updated.status == 200
    assert updated.json["traffic_policy"] == {"enabled": True, "value": "{}"}
    assert admin.patch(f"/edges/tcp/{body['id']}", {"policy": None}).json["traffic_policy"] == {
        "enabled": True,
        "value": "{}",
    }


@pytest.mark.parametrize(
    "policy,field",
    [
        ({"inbound": [], "outbound": [RULE]}, "policy.outbound"),
        ({"inbound": [{"name": "r", "actions": []}]}, "policy"),
        ({"inbound": "x"}, "policy.inbound"),
        ({"enabled": "yes"}, "policy.enabled"),
        ({"inbound": [], "extra": 1}, "policy.extra"),
        ("x", "policy"),
    ],
)
def test_create_with_bad_policy_returns_400(account, policy, field):
    resp = account.admin.post("/edges/tcp", {"policy": policy})
    assert resp.status == 400 and resp.json["error_code"] == errors.INVALID_FIELD, resp
    assert resp.json["details"]["field"] == field
    assert account.admin.get("/edges/tcp").json["tcp_edges"] == []


def test_policy_and_traffic_policy_together_return_400(account):
    resp = account.admin.post(
        "/edges/tcp",
        {
            "policy": {"inbound": [RULE]},
            "traffic_policy": {"value": json.dumps({"on_tcp_connect": [RULE]})},
        },
    )
    assert resp.status == 400 and resp.json["details"]["field"] == "policy"


@pytest.mark.parametrize(
    "policy_doc, element, words",
    [
        (
            {"on_tcp_connect": [{"actions": [{"type": "saml"}]}]},
            "on_tcp_connect[0].actions[0].type",
            "'saml' is not supported",
        ),
        (
            {"on_tcp_connect": [{"actions": [{"type": "oauth"}]}]},
            "on_tcp_connect[0].actions[0].type",
            "cannot run in on_tcp_connect",
        ),
        (
            {
                "on_tcp_connect": [
                    {"expressions": ["conn.nope == 1"], "actions": [{"type": "deny"}]}
                ]
            },
            "on_tcp_connect[0].expressions[0]",
            "conn.nope",
        ),
        (
            {
                "on_tcp_connect": [
                    {"expressions": ["conn.client_ip =="], "actions": [{"type": "deny"}]}
                ]
            },
            "on_tcp_connect[0].expressions[0]",
            "bad CEL",
        ),
        (
            {
                "on_tcp_connect": [
                    {"actions": [{"type": "restrict-ips", "config": {"allow": ["x"]}}]}
                ]
            },
            "on_tcp_connect[0].actions[0].config.allow[0]",
            "not a CIDR",
        ),
        (
            {"on_tcp_connect": [{"actions": [{"type": "add-headers"}]}]},
            "on_tcp_connect[0].actions[0].type",
            "cannot run in on_tcp_connect",
        ),
        (
            {"on_http_request": [{"actions": [{"type": "deny"}]}]},
            "on_http_request",
            "tcp endpoints run only on_tcp_connect",
        ),
    ],
)
def test_traffic_policy_the_engine_refuses_is_a_400_naming_the_element(
    account, policy_doc, element, words
):
    resp = account.admin.post(PATH, {"traffic_policy": {"value": json.dumps(policy_doc)}})
    assert resp.status == 400, resp
    assert resp.json["error_code"] == errors.InvalidField.error_code
    assert f"at {element}:" in resp.json["msg"] and words in resp.json["msg"], resp.json
