"""/reserved_addrs at both levels, and the port range at its boundary (in-process)."""

import pytest

from chalicelib import reserved_addrs
from chalicelib.core import config, errors, ids, instances, online
from chalicelib.core.config import get_settings
from chalicelib.core import reservations

PATH = "/reserved_addrs"
FIELDS = {"id", "uri", "created_at", "description", "metadata", "addr", "region"}


def reserve(caller, **body):
    resp = caller.post(PATH, body)
    assert resp.status == 201, resp
    return resp.json


def test_reserved_addr_crud(account):
    admin = account.admin
    addr = reserve(admin, description="db", metadata="m", region="eu")
    assert set(addr) == FIELDS and ids.is_valid(addr["id"], "ra")
    host, _, port = addr["addr"].rpartition(":")
    low, high = get_settings().edge_tcp_ports
    assert host == get_settings().edge_tcp_host and low <= int(port) <= high
    assert addr["region"] == "eu" and addr["description"] == "db"
    assert admin.get(f"{PATH}/{addr['id']}").json == addr
    assert admin.get(PATH).json["reserved_addrs"] == [addr]
    updated = admin.patch(f"{PATH}/{addr['id']}", {"description": "d2", "id": addr["id"]})
    assert updated.status == 200 and updated.json == {**addr, "description": "d2"}
    assert admin.delete(f"{PATH}/{addr['id']}").status == 204
    assert admin.get(f"{PATH}/{addr['id']}").status == 404


def test_every_principal_reserves_and_addresses_differ(account, other_account):
    a = reserve(account.member)
    b = reserve(account.admin, region="")
    c = reserve(other_account.admin)
    assert len({a["addr"], b["addr"], c["addr"]}) == 3
    assert b["region"] == ""
    assert other_account.admin.get(f"{PATH}/{a['id']}").status == 404
    assert other_account.admin.delete(f"{PATH}/{a['id']}").status == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"region": "mars"}, "region"),
        ({"addr": "x:1"}, "addr"),
        ({"region": 1}, "region"),
        ({"description": "x" * 256}, "description"),
    ],
)
def test_bad_bodies_return_400(account, body, field):
    resp = account.admin.post(PATH, body)
    assert resp.status == 400 and resp.json["details"]["field"] == field, resp
    assert account.admin.get(PATH).json["reserved_addrs"] == []


def test_addr_and_region_cannot_be_changed(account):
    addr = reserve(account.admin)
    for body in ({"addr": "x:1"}, {"region": "eu"}):
        resp = account.admin.patch(f"{PATH}/{addr['id']}", body)
        assert resp.status == 400 and resp.json["error_code"] == errors.UnknownField.error_code


def test_address_served_by_a_tcp_edge_cannot_be_deleted(account):
    admin = account.admin
    addr = reserve(admin)
    edge = admin.post("/edges/tcp", {"hostports": [addr["addr"]]}).json
    resp = admin.delete(f"{PATH}/{addr['id']}")
    assert resp.status == 409 and addr["addr"] in resp.json["msg"]
    admin.patch(f"/edges/tcp/{edge['id']}", {"hostports": []})
    assert admin.delete(f"{PATH}/{addr['id']}").status == 204


@pytest.fixture
def small_range(api, monkeypatch):
    """A three-port range: in-process only (the HTTP stack's range is its environment's)."""
    if api.level != "inprocess":
        pytest.skip("the range is configuration: checked in-process")
    monkeypatch.setenv("EDGE_TCP_PORTS", "30000-30002")
    monkeypatch.setenv("EDGE_TCP_HOST", "tcp.example.net")
    config.reset_settings()
    yield
    monkeypatch.undo()
    config.reset_settings()


def test_every_port_of_the_range_is_handed_out_once_then_409(small_range, account, other_account):
    made = [reserve(account.admin), reserve(other_account.admin), reserve(account.admin)]
    assert sorted(a["addr"] for a in made) == [
        f"tcp.example.net:{p}" for p in (30000, 30001, 30002)
    ]
    assert reserved_addrs.taken_ports() == {30000, 30001, 30002}
    resp = account.admin.post(PATH, {})
    assert resp.status == 409 and "30000-30002" in resp.json["msg"]
    assert len(account.admin.get(PATH).json["reserved_addrs"]) == 2
    # a deleted address frees its port for anyone
    assert account.admin.delete(f"{PATH}/{made[1]['id']}").status == 404
    assert other_account.admin.delete(f"{PATH}/{made[1]['id']}").status == 204
    again = reserve(account.admin)
    assert again["addr"] == made[1]["addr"]
    assert reservations.addr_reservation(again["addr"]) == {
        "account_id": account.id,
        "reserved_addr_id": again["id"],
        "addr": again["addr"],
    }
    assert reservations.addr_reservation("other.host:30001") is None
    assert reservations.addr_reservation("tcp.example.net:30003") is None


def test_port_range_setting_is_checked():
    for raw in ("20000", "a-b", "0-10", "10-5", "1-65536"):
        with pytest.raises(ValueError):
            config.parse_port_range(raw)
    assert config.parse_port_range("1-65535") == (1, 65535)
    assert config.parse_port_range("5-5") == (5, 5)


def test_a_port_an_endpoint_serves_now_is_not_reserved(small_range, account):
    """An agent's TCP endpoint without a reservation holds a port of the same range (its edge
    claims ``host:port`` as the endpoint's name): reserving that port would send the reserved
    address's connections to that endpoint."""
    instances.register("edge_ports", "", "serving")
    for port in (30000, 30001):
        online.claim_hostname(
            f"tcp.example.net:{port}",
            account_id=account.id,
            endpoint_id=f"ep_{port}",
            instance_id="edge_ports",
        )
    made = reserve(account.admin)
    assert made["addr"] == "tcp.example.net:30002"
    resp = account.admin.post(PATH, {})
    assert resp.status == 409 and "served by an endpoint" in resp.json["msg"]
    online.release_hostname("tcp.example.net:30000", endpoint_id="ep_30000")
    assert reserve(account.admin)["addr"] == "tcp.example.net:30000"
