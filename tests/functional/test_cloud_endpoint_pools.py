"""Pooled cloud endpoints through the API (``pooling_enabled: true``): the rules of
chalicelib.core.pooling and chalicelib.cloud_endpoints at their boundaries. Agent members are
written with the functions the edge calls (chalicelib.core.pooling.join_agent / leave,
chalicelib.core.online.claim_hostname)."""

import pytest

from chalicelib.core import errors, online, pooling
from tests.functional.test_cloud_endpoints import BASE, POLICY, _create, _name
from tests.functional.test_online_views import Edge
from tests.support.contract import assert_error


@pytest.fixture
def edge(api, monkeypatch):
    return Edge(api, monkeypatch)


def _host():
    return f"{_name('pool')}.{BASE}"


def _pooled(caller, url, **fields):
    return _create(caller, url, pooling_enabled=True, **fields)


def _claim(edge, host):
    raw = edge.call(pooling.read, host)
    return raw, (online.data_of(raw) if raw else None)


def _agent(edge, account, host, instance_id="edge-1", proto="https", ago=0):
    """A pooled agent endpoint on ``host`` (its session's last heartbeat ``ago`` seconds
    ago), joined as the edge joins it; returns (endpoint id, holds the claim)."""
    credential = account.admin.post("/credentials", {}).json["id"]
    sid = edge.session(account, credential, ago=ago)
    _, eid = edge.tunnel(account, sid, hostname=host, proto=proto, pooling_enabled=True, ago=ago)
    holds = edge.call(
        pooling.join_agent,
        host,
        account_id=account.id,
        proto=proto,
        endpoint_id=eid,
        instance_id=instance_id,
    )
    return eid, holds


def test_two_pooled_cloud_endpoints_share_a_url_and_both_are_listed(api, account, edge):
    host = _host()
    first = _pooled(account.admin, f"https://{host}")
    assert first.status == 201, first
    assert first.json["pooling_enabled"] is True
    second = _pooled(account.admin, f"https://{host}")
    assert second.status == 201, second
    raw, data = _claim(edge, host)
    assert data["pooled"] and data["clouds"] == sorted([first.json["id"], second.json["id"]])
    assert raw["owner"]["S"] == min(first.json["id"], second.json["id"])
    listed = {
        e["id"]: e["pooling_enabled"]
        for e in account.admin.get("/endpoints").json["endpoints"]
        if e["host"] == host
    }
    assert listed == {first.json["id"]: True, second.json["id"]: True}
    copies = edge.call(pooling.cloud_copies, host)
    assert {c["id"] for c in copies["clouds"]} == set(listed)


def test_mismatched_pooling_is_refused_with_the_hosted_codes(api, account, edge):
    pooled = _host()
    assert _pooled(account.admin, f"https://{pooled}").status == 201
    assert_error(
        _create(account.admin, f"https://{pooled}"),
        errors.PoolingDisabledConflict,
        field="pooling_enabled",
    )
    plain = _host()
    assert _create(account.admin, f"https://{plain}").status == 201
    assert_error(
        _pooled(account.admin, f"https://{plain}"),
        errors.PoolingEnabledConflict,
        field="pooling_enabled",
    )
    # a non-pooled agent endpoint online on the URL
    credential = account.admin.post("/credentials", {}).json["id"]
    agent_host = _host()
    sid = edge.session(account, credential)
    _, eid = edge.tunnel(account, sid, hostname=agent_host)
    edge.call(
        online.claim_hostname,
        agent_host,
        account_id=account.id,
        endpoint_id=eid,
        instance_id="edge-1",
    )
    assert_error(
        _pooled(account.admin, f"https://{agent_host}"),
        errors.PoolingEnabledConflict,
        field="pooling_enabled",
    )


def test_another_accounts_pool_is_in_use(api, account, other_account):
    host = _host()
    assert _pooled(account.admin, f"https://{host}").status == 201
    # the host is under the base domain: either account may name it, one serves it
    assert_error(_pooled(other_account.admin, f"https://{host}"), errors.EndpointUrlInUse)
    assert_error(_create(other_account.admin, f"https://{host}"), errors.EndpointUrlInUse)


def test_another_protocol_on_the_url_is_in_use(api, account):
    host = _host()
    assert _pooled(account.admin, f"https://{host}").status == 201
    assert_error(_pooled(account.admin, f"http://{host}"), errors.EndpointUrlInUse, field="url")


def test_agents_and_cloud_endpoints_pool_both_ways(api, account, edge):
    host = _host()
    agent_id, holds = _agent(edge, account, host)
    assert holds  # the first member holds the claim
    cloud = _pooled(account.admin, f"https://{host}")
    assert cloud.status == 201, cloud
    raw, data = _claim(edge, host)
    assert raw["owner"]["S"] == cloud.json["id"]  # a cloud member holds it while there is one
    assert raw["instance_id"]["S"] == pooling.API_INSTANCE and "expires_at" not in raw
    assert data["agents"] == {agent_id: "edge-1"} and data["clouds"] == [cloud.json["id"]]
    second_agent, holds = _agent(edge, account, host, instance_id="edge-2")
    assert not holds
    # a non-pooled agent is refused (the claim is live: its owner is a cloud endpoint)
    with pytest.raises(errors.Conflict):
        edge.call(
            online.claim_hostname,
            host,
            account_id=account.id,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-1",
        )
    # the cloud member leaves: the claim passes to an agent member, with its instance
    assert account.admin.delete(f"/endpoints/{cloud.json['id']}").status == 204
    raw, data = _claim(edge, host)
    assert raw["owner"]["S"] in (agent_id, second_agent) and data["clouds"] == []
    assert raw["instance_id"]["S"] == data["agents"][raw["owner"]["S"]]
    assert "cloud" not in data and "expires_at" in raw
    edge.call(pooling.leave, host, agent_id)
    edge.call(pooling.leave, host, second_agent)
    assert _claim(edge, host)[0] is None  # gone with the last member
    assert _create(account.admin, f"https://{host}").status == 201  # free again


def test_pooled_agent_is_refused_where_a_cloud_endpoint_without_pooling_serves(api, account, edge):
    host = _host()
    assert _create(account.admin, f"https://{host}").status == 201
    with pytest.raises(pooling.Mismatch) as exc:
        _agent(edge, account, host)
    assert exc.value.kind == pooling.NOT_POOLED_HERE


def test_a_pool_holds_at_most_max_members(api, account, edge):
    host = _host()
    made = []
    for _ in range(pooling.MAX_MEMBERS - 1):
        resp = _pooled(account.admin, f"https://{host}")
        assert resp.status == 201, resp
        made.append(resp.json["id"])
    agent_id, _ = _agent(edge, account, host)  # the MAX_MEMBERS-th member
    assert_error(_pooled(account.admin, f"https://{host}"), errors.PoolFull, field="url")
    with pytest.raises(pooling.Mismatch) as exc:
        _agent(edge, account, host)
    assert exc.value.kind == pooling.FULL
    edge.call(pooling.leave, host, agent_id)  # room for one again
    assert _pooled(account.admin, f"https://{host}").status == 201


def test_deleting_the_owner_passes_the_claim_to_the_next_cloud_member(api, account, edge):
    host = _host()
    ids = sorted(_pooled(account.admin, f"https://{host}").json["id"] for _ in range(3))
    assert account.admin.delete(f"/endpoints/{ids[0]}").status == 204
    raw, data = _claim(edge, host)
    assert raw["owner"]["S"] == ids[1] and data["cloud"]["id"] == ids[1]
    assert data["clouds"] == ids[1:]
    assert edge.call(online.cloud_endpoint_for, host)["id"] == ids[1]
    for eid in ids[1:]:
        assert account.admin.delete(f"/endpoints/{eid}").status == 204
    assert _claim(edge, host)[0] is None


def test_update_of_pooling_enabled(api, account, edge):
    """Decided: turning pooling off is refused while others share the URL (the last member
    may); turning it on makes the endpoint's own claim a pool of one."""
    host = _host()
    first = _pooled(account.admin, f"https://{host}").json
    second = _pooled(account.admin, f"https://{host}").json
    assert_error(
        account.admin.patch(f"/endpoints/{first['id']}", {"pooling_enabled": False}),
        errors.PoolingDisabledConflict,
        field="pooling_enabled",
    )
    assert account.admin.delete(f"/endpoints/{second['id']}").status == 204
    off = account.admin.patch(f"/endpoints/{first['id']}", {"pooling_enabled": False})
    assert off.status == 200 and off.json["pooling_enabled"] is False, off
    raw, data = _claim(edge, host)
    assert not data.get("pooled") and raw["owner"]["S"] == first["id"]
    assert_error(
        _pooled(account.admin, f"https://{host}"),
        errors.PoolingEnabledConflict,
        field="pooling_enabled",
    )
    on = account.admin.patch(f"/endpoints/{first['id']}", {"pooling_enabled": True})
    assert on.status == 200 and on.json["pooling_enabled"] is True, on
    assert _claim(edge, host)[1]["clouds"] == [first["id"]]
    assert _pooled(account.admin, f"https://{host}").status == 201


def test_update_of_a_pooled_members_policy_and_url(api, account, edge):
    host, new_host = _host(), _host()
    first = _pooled(account.admin, f"https://{host}").json
    second = _pooled(account.admin, f"https://{host}").json
    policy = POLICY.replace('"hi"', '"changed"')
    resp = account.admin.patch(f"/endpoints/{second['id']}", {"traffic_policy": policy})
    assert resp.status == 200, resp
    copies = {c["id"]: c for c in edge.call(pooling.cloud_copies, host)["clouds"]}
    assert copies[second["id"]]["traffic_policy"] == policy
    moved = account.admin.patch(f"/endpoints/{first['id']}", {"url": f"https://{new_host}"})
    assert moved.status == 200, moved
    assert _claim(edge, host)[1]["clouds"] == [second["id"]]
    assert _claim(edge, host)[0]["owner"]["S"] == second["id"]
    assert _claim(edge, new_host)[1]["clouds"] == [first["id"]]


def test_tcp_and_internal_cloud_endpoints_are_not_pooled(api, account):
    assert_error(
        _pooled(account.admin, f"https://{_name()}.internal"),
        errors.InvalidField,
        field="pooling_enabled",
    )
    assert_error(
        _pooled(account.admin, f"tcp://{_name()}.internal:5000", traffic_policy=""),
        errors.InvalidField,
        field="pooling_enabled",
    )


def test_agent_members_gone_offline_are_dropped_when_room_or_an_owner_is_needed(
    api, account, edge
):
    host = _host()
    stale = online.STALE_SECONDS + 5
    clouds = [
        _pooled(account.admin, f"https://{host}").json["id"]
        for _ in range(pooling.MAX_MEMBERS - 2)
    ]
    gone, _ = _agent(edge, account, host, instance_id="edge-dead", ago=stale)
    live, _ = _agent(edge, account, host)
    assert len(_claim(edge, host)[1]["agents"]) == 2  # the pool is full
    newcomer, _ = _agent(edge, account, host)  # the offline member makes room
    assert set(_claim(edge, host)[1]["agents"]) == {live, newcomer}
    assert account.admin.delete(f"/endpoints/{clouds.pop()}").status == 204
    gone_again, _ = _agent(edge, account, host, instance_id="edge-dead", ago=stale)
    assert gone_again in _claim(edge, host)[1]["agents"]
    for eid in clouds:  # the last cloud member hands the claim to an online agent
        assert account.admin.delete(f"/endpoints/{eid}").status == 204
    raw, data = _claim(edge, host)
    assert set(data["agents"]) == {live, newcomer} and raw["owner"]["S"] in data["agents"]
    assert gone_again not in data["agents"] and raw["instance_id"]["S"] == "edge-1"
