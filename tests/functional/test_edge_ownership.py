"""Who may serve which hostport: HTTPS edges on reserved domains or free base-domain names,
TCP edges on reserved addresses; the operator's check of stored edges."""

import io
import itertools
import json
import os
from contextlib import redirect_stderr, redirect_stdout

import pytest

from chalicelib import admin as admin_cli
from chalicelib.core import errors, ids, store
from chalicelib.core.config import get_settings

HTTPS, TCP = "/edges/https", "/edges/tcp"
_counter = itertools.count()


def unique_domain(suffix="example.org"):
    return f"d{os.getpid()}-{next(_counter)}-{ids.new_id('x')[-8:].lower()}.{suffix}"


def reserve_domain(caller, domain):
    resp = caller.post("/reserved_domains", {"domain": domain})
    assert resp.status == 201, resp
    return resp.json


def refused(resp, hostport):
    assert resp.status == 400, resp
    assert resp.json["error_code"] == "ERR_INVALID_FIELD"
    assert resp.json["details"]["hostport"] == hostport and hostport in resp.json["msg"]
    return True


def test_https_hostport_on_an_exact_reservation(account, other_account):
    domain = unique_domain()
    reserve_domain(account.admin, domain)
    hp = f"{domain}:443"
    assert account.admin.post(HTTPS, {"hostports": [hp]}).status == 201
    assert refused(
        other_account.admin.post(HTTPS, {"hostports": [f"{domain}:8443"]}), f"{domain}:8443"
    )
    # exact only: a subdomain of an exact reservation is not covered
    assert refused(
        account.admin.post(HTTPS, {"hostports": [f"a.{domain}:443"]}), f"a.{domain}:443"
    )


def test_https_hostport_under_a_wildcard_reservation(account, other_account):
    parent = unique_domain()
    reserve_domain(account.admin, f"*.{parent}")
    for host in (f"a.{parent}", f"b.a.{parent}"):
        assert account.admin.post(HTTPS, {"hostports": [f"{host}:443"]}).status == 201
    assert refused(
        account.admin.post(HTTPS, {"hostports": [f"{parent}:443"]}), f"{parent}:443"
    )  # the wildcard does not cover its own parent
    assert refused(
        other_account.admin.post(HTTPS, {"hostports": [f"c.{parent}:443"]}), f"c.{parent}:443"
    )


def test_one_owner_under_a_wildcard(account, other_account):
    """Another account cannot nest a reservation inside a wildcard (one owner per name); the
    wildcard's own account may, and its most specific reservation then decides."""
    parent = unique_domain()
    reserve_domain(account.admin, f"*.{parent}")
    nested = other_account.admin.post("/reserved_domains", {"domain": f"*.x.{parent}"})
    assert nested.status == 409 and nested.json["error_code"] == errors.WILDCARD_CONFLICT
    reserve_domain(account.admin, f"*.x.{parent}")
    assert account.admin.post(HTTPS, {"hostports": [f"y.x.{parent}:443"]}).status == 201
    assert refused(
        other_account.admin.post(HTTPS, {"hostports": [f"y.z.{parent}:443"]}), f"y.z.{parent}:443"
    )


def test_https_hostport_under_the_base_domain(account, other_account):
    base = get_settings().base_domain
    free = f"{unique_domain(base)}:443"
    assert account.admin.post(HTTPS, {"hostports": [free]}).status == 201
    assert refused(account.admin.post(HTTPS, {"hostports": [f"{base}:443"]}), f"{base}:443")
    taken = unique_domain(base)
    reserve_domain(other_account.admin, taken)
    assert refused(account.admin.post(HTTPS, {"hostports": [f"{taken}:443"]}), f"{taken}:443")
    assert other_account.admin.post(HTTPS, {"hostports": [f"{taken}:443"]}).status == 201


def test_unreserved_custom_domain_is_refused_and_nothing_is_written(account):
    domain = unique_domain()
    ok = f"{unique_domain(get_settings().base_domain)}:443"
    resp = account.admin.post(HTTPS, {"hostports": [ok, f"{domain}:443"]})
    assert refused(resp, f"{domain}:443")
    assert account.admin.get(HTTPS).json["https_edges"] == []
    edge = account.admin.post(HTTPS, {"hostports": [ok]}).json  # ok was not claimed
    resp = account.admin.patch(f"{HTTPS}/{edge['id']}", {"hostports": [ok, f"{domain}:443"]})
    assert refused(resp, f"{domain}:443")
    assert account.admin.get(f"{HTTPS}/{edge['id']}").json == edge


def test_tcp_hostport_must_be_an_address_the_account_reserved(account, other_account):
    addr = account.admin.post("/reserved_addrs", {}).json["addr"]
    host, _, port = addr.rpartition(":")
    assert refused(other_account.admin.post(TCP, {"hostports": [addr]}), addr)
    other_port = f"{host}:{int(port) + 1 if int(port) < 59999 else int(port) - 1}"
    mine = {a["addr"] for a in account.admin.get("/reserved_addrs").json["reserved_addrs"]}
    if other_port not in mine:
        assert refused(account.admin.post(TCP, {"hostports": [other_port]}), other_port)
    assert refused(
        account.admin.post(TCP, {"hostports": [f"elsewhere.example:{port}"]}),
        f"elsewhere.example:{port}",
    )
    assert account.admin.post(TCP, {"hostports": [addr.upper()]}).status == 201


def test_reserved_domain_in_use_cannot_be_deleted(account):
    parent = unique_domain()
    wildcard = reserve_domain(account.admin, f"*.{parent}")
    exact = reserve_domain(account.admin, f"e.{parent}")
    edge = account.admin.post(HTTPS, {"hostports": [f"a.{parent}:443", f"e.{parent}:443"]}).json
    for rd in (wildcard, exact):
        resp = account.admin.delete(f"/reserved_domains/{rd['id']}")
        assert resp.status == 409 and rd["domain"] in resp.json["msg"]
    account.admin.patch(f"{HTTPS}/{edge['id']}", {"hostports": [f"a.{parent}:443"]})
    assert account.admin.delete(f"/reserved_domains/{exact['id']}").status == 204
    assert account.admin.delete(f"/reserved_domains/{wildcard['id']}").status == 409
    assert account.admin.delete(f"{HTTPS}/{edge['id']}").status == 204
    assert account.admin.delete(f"/reserved_domains/{wildcard['id']}").status == 204


def _check_edges(*argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = admin_cli.main(["check-edges", *argv])
    return rc, out.getvalue(), err.getvalue()


def test_check_edges_reports_stored_edges_that_break_the_rule(api, account):
    if api.level != "inprocess":
        pytest.skip("the operator command runs against the store: checked in-process")
    rc, out, _ = _check_edges()
    assert rc == 0 and out == ""
    good = account.admin.post(
        HTTPS, {"hostports": [f"{unique_domain(get_settings().base_domain)}:443"]}
    ).json
    # edges stored before the rule (written straight to the store, as old data is)
    bad_https, bad_tcp = "edghts_0ERYqBR5B9RMvMY4cZCztl2IB7s", "edgtcp_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    for kind, edge_id, hp in (
        ("https_edge", bad_https, "legacy.example.com:443"),
        ("tcp_edge", bad_tcp, "1.tcp.example.com:12345"),
    ):
        store.commit(
            [
                store.put_new(
                    store.new_item(
                        store.collection_pk(account.id, kind),
                        edge_id,
                        kind=kind,
                        account_id=account.id,
                        data={"hostports": [hp], "created_at": "2026-01-01T00:00:00Z"},
                    )
                )
            ]
        )
    rc, out, err = _check_edges("--json")
    found = [json.loads(line) for line in out.splitlines()]
    assert rc == 1
    assert [(v["edge_id"], v["hostport"]) for v in found] == [
        (bad_https, "legacy.example.com:443"),
        (bad_tcp, "1.tcp.example.com:12345"),
    ]
    assert all(v["account_id"] == account.id and v["reason"] for v in found)
    assert good["id"] not in out
    rc, out, err = _check_edges()
    assert rc == 1 and "legacy.example.com:443" in out and "2 hostport(s)" in err
    # reported, not dropped: the edges are still there
    assert account.admin.get(f"{HTTPS}/{bad_https}").status == 200


def test_free_name_served_by_another_accounts_online_endpoint_is_refused(
    api, account, other_account
):
    if api.level != "inprocess":
        pytest.skip("online claims are written by the edge: written here in-process")
    from chalicelib.core import online

    name = unique_domain(get_settings().base_domain)
    sid = online.new_session_id()
    online.session_started(
        account_id=other_account.id,
        session_id=sid,
        credential_id="cr_x",
        instance_id="edge-a",
        agent_version="1",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id=other_account.admin.id,
    )
    eid = online.new_endpoint_id()
    online.tunnel_started(
        account_id=other_account.id,
        session_id=sid,
        tunnel_id=online.new_tunnel_id(),
        instance_id="edge-a",
        proto="https",
        public_url=f"https://{name}",
        hostname=name,
        endpoint_id=eid,
    )
    online.claim_hostname(name, account_id=other_account.id, endpoint_id=eid, instance_id="edge-a")
    assert refused(account.admin.post(HTTPS, {"hostports": [f"{name}:443"]}), f"{name}:443")
    assert other_account.admin.post(HTTPS, {"hostports": [f"{name}:443"]}).status == 201
    online.release_hostname(name, endpoint_id=eid)
    assert account.admin.post(HTTPS, {"hostports": [f"{name}:8443"]}).status == 201
