"""Online items kept live by their instance's lease (chalicelib.core.leases, edge/online_keeper.py;
docs/CLUSTER.md "The online state: leases"), against moto's in-process DynamoDB with a settable
clock: the sessions of a live instance stay online with no write of their own; a dead
instance's sessions, tunnels, endpoints and claims go offline exactly ONLINE_STALE_SECONDS
after its last renewal; a new run of an instance id does not revive the old run's items; the
edge's check writes nothing per session (counted at the store client)."""

import pytest

from chalicelib.core import errors, instances, online
from edge.online_keeper import REFRESH_SECONDS, OnlineKeeper

ACCT = "acct_1"


@pytest.fixture
def clock(store_env, monkeypatch):
    t = {"now": 1_800_000_000.0}
    monkeypatch.setattr(online, "now", lambda: t["now"])
    return t


@pytest.fixture
def writes(store_env):
    """Write calls the store client makes, by operation name."""
    seen = []
    names = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}

    def count(model=None, **kwargs):
        if getattr(model, "name", "") in names:
            seen.append(model.name)

    client = online.raw_client()
    client.meta.events.register("before-parameter-build.dynamodb.*", count)
    yield seen
    client.meta.events.unregister("before-parameter-build.dynamodb.*", count)


def _session(instance_id, labels=None):
    sid = online.new_session_id()
    online.session_started(
        account_id=ACCT,
        session_id=sid,
        credential_id="cr_x",
        instance_id=instance_id,
        agent_version="1.4.0",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    tid, eid = online.new_tunnel_id(), online.new_endpoint_id()
    name = f"{sid.lower()}.tunnels.localhost"
    online.claim_hostname(name, account_id=ACCT, endpoint_id=eid, instance_id=instance_id)
    online.tunnel_started(
        account_id=ACCT,
        session_id=sid,
        tunnel_id=tid,
        instance_id=instance_id,
        proto="https",
        public_url=f"https://{name}",
        hostname=name,
        labels=labels,
        endpoint_id=eid,
    )
    return sid, tid, eid, name


def _listed(collection):
    pairs, _, _ = online.live_page(ACCT, collection, 100, None)
    return {item.sk for item, _ in pairs}


def _online(sid, tid, eid):
    """What each view shows of one session: (session listed, tunnel listed, endpoint listed,
    each read by id)."""
    found = []
    for collection, prefix, item_id in (
        ("tunnel_session", "ts", sid),
        ("tunnel", "tn", tid),
        ("endpoint", "ep", eid),
    ):
        try:
            online.live_item(ACCT, collection, prefix, item_id, "thing")
            by_id = True
        except errors.NotFound:
            by_id = False
        found.append((item_id in _listed(collection), by_id))
    return found


def test_a_live_instances_sessions_stay_online_without_a_write_of_their_own(clock):
    instances.register("edge_live", "")
    sid, tid, eid, name = _session("edge_live", labels={"app": "web"})
    for _ in range(40):  # 200 s: the session's own write is long stale
        clock["now"] += 5
        instances.register("edge_live", "")
    assert _online(sid, tid, eid) == [(True, True)] * 3
    assert [t["tunnel_id"] for t in online.online_tunnels(ACCT, {"app": "web"})] == [tid]
    assert online.live_credential_sessions(ACCT, "cr_x") == 1
    assert online.live_endpoint_count(ACCT) == 1
    with pytest.raises(errors.Conflict):  # its name is still held
        online.claim_hostname(
            name, account_id=ACCT, endpoint_id=online.new_endpoint_id(), instance_id="edge_b"
        )


def test_a_dead_instances_items_vanish_at_the_lease_boundary(clock):
    instances.register("edge_dead", "")
    sid, tid, eid, name = _session("edge_dead", labels={"app": "web"})
    clock["now"] += 100
    instances.register("edge_dead", "")  # its last renewal, then kill -9
    last = clock["now"]
    clock["now"] = last + online.stale_seconds()  # exactly ONLINE_STALE_SECONDS after it
    assert _online(sid, tid, eid) == [(True, True)] * 3
    assert online.hostname_holder(name) is not None
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            name, account_id=ACCT, endpoint_id=online.new_endpoint_id(), instance_id="edge_b"
        )
    online.request_stop(ACCT, sid)  # still a live session
    clock["now"] += 0.002  # past it
    assert _online(sid, tid, eid) == [(False, False)] * 3
    assert online.online_tunnels(ACCT, {"app": "web"}) == []
    assert online.live_credential_sessions(ACCT, "cr_x") == 0
    assert online.live_endpoint_count(ACCT) == 0
    assert online.hostname_holder(name) is None
    with pytest.raises(errors.NotFound):
        online.request_stop(ACCT, sid)
    other = online.new_endpoint_id()  # the name is taken over, as for a stale session
    online.claim_hostname(name, account_id=ACCT, endpoint_id=other, instance_id="edge_b")
    assert online.claim_instance(name) == "edge_b"


def test_a_sessions_own_write_counts_until_its_lease_would_not(clock):
    """A session written just before its instance died stays as long as its own write is
    fresh: never past ONLINE_STALE_SECONDS after the kill."""
    instances.register("edge_x", "")
    clock["now"] += 3
    sid, tid, eid, _ = _session("edge_x")  # written 3 s after the last renewal, then killed
    written = clock["now"]
    clock["now"] = written + online.stale_seconds()
    assert _online(sid, tid, eid) == [(True, True)] * 3
    clock["now"] += 0.002
    assert _online(sid, tid, eid) == [(False, False)] * 3


def test_a_new_run_of_an_instance_id_does_not_revive_the_old_runs_sessions(clock):
    instances.register("edge_fixed", "")
    sid, tid, eid, _ = _session("edge_fixed")
    clock["now"] += 100  # the old run's items are stale
    instances.deregister("edge_fixed")
    instances.register("edge_fixed", "")  # a new run with the same id (EDGE_INSTANCE_ID)
    assert _online(sid, tid, eid) == [(False, False)] * 3
    new = _session("edge_fixed")
    clock["now"] += 100
    instances.register("edge_fixed", "")
    assert _online(*new[:3]) == [(True, True)] * 3


def test_stop_and_restart_reach_the_holding_instance_once(clock):
    instances.register("edge_a", "")
    instances.register("edge_b", "")
    sid_a = _session("edge_a")[0]
    sid_b = _session("edge_b")[0]
    stop = online.request_stop(ACCT, sid_a)
    restart = online.request_restart(ACCT, sid_b)
    assert online.take_commands("edge_a") == [stop]
    assert online.take_commands("edge_a") == []
    assert online.take_commands("edge_b") == [restart]
    assert online.take_commands("edge_b") == []
    assert (stop.instance_id, stop.session_id, stop.command) == ("edge_a", sid_a, "stop")
    assert stop.deadline == clock["now"] + online.COMMAND_WAIT_SECONDS


def test_the_edges_check_writes_nothing_per_session(clock, writes):
    """Heartbeats are the instance's: over 200 s of checks (every 5 s) and lease renewals,
    20 online sessions cost the lease's writes only, and stay online. A heartbeat that wrote
    each session again would fail this."""
    instances.register("edge_k", "")
    made = [_session("edge_k") for _ in range(20)]
    keeper = OnlineKeeper("edge_k")
    held = [(ACCT, sid) for sid, _, _, _ in made]
    del writes[:]
    for _ in range(40):
        clock["now"] += 5
        instances.register("edge_k", "")
        assert keeper.check(held) == (set(),)
    assert writes == ["PutItem"] * 40  # the lease, once per renewal
    assert len(_listed("tunnel_session")) == 20
    del writes[:]
    clock["now"] += REFRESH_SECONDS  # a day of the sessions' life: their TTLs pushed once
    keeper.check(held)
    # session, its credential's index item, tunnel, endpoint, claim
    assert writes == ["UpdateItem"] * 5 * 20
    pushed = online.now() + online.EXPIRE_AFTER_SECONDS
    index = online._query_raw(online._credential_sessions_pk(ACCT, "cr_x"))
    assert len(index) == 20 and all(
        online.num_attr(raw, "expires_at") == int(pushed) for raw in index
    ), "the index item's TTL is pushed with its session's (else DynamoDB deletes it first)"
    del writes[:]
    keeper.check(held)
    assert writes == []


def _started(credential_id, instance_id="edge_q", session_id=None):
    sid = session_id or online.new_session_id()
    online.session_started(
        account_id=ACCT,
        session_id=sid,
        credential_id=credential_id,
        instance_id=instance_id,
        agent_version="1",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    return sid


def test_live_credential_sessions_reads_only_that_credentials_sessions(clock, store_env):
    """The sessions-per-credential quota's count: the credential's live sessions (ended ones,
    a dead instance's and the excluded one left out), read with one Query whose items are that
    credential's only, however many sessions the account's other credentials hold."""
    instances.register("edge_q", "")
    instances.register("edge_dead", "")
    mine = [_started("cr_mine") for _ in range(3)]
    for _ in range(60):
        _started("cr_other")
    _started("cr_mine", instance_id="edge_dead")
    assert online.live_credential_sessions(ACCT, "cr_mine") == 4
    assert online.live_credential_sessions(ACCT, "cr_mine", exclude=mine[0]) == 3
    online.session_ended(ACCT, mine[1], "edge_q")
    assert online.live_credential_sessions(ACCT, "cr_mine") == 3
    assert online.live_credential_sessions(ACCT, "cr_other") == 60

    client = online.raw_client()
    queried = []

    def seen(parsed=None, model=None, **kwargs):
        if getattr(model, "name", "") == "Query":
            queried.append(parsed.get("ScannedCount"))

    client.meta.events.register("after-call.dynamodb.Query", seen)
    try:
        clock["now"] += online.stale_seconds() + 1  # edge_dead's lease lapses (not renewed)
        instances.register("edge_q", "")
        assert online.live_credential_sessions(ACCT, "cr_mine") == 2
    finally:
        client.meta.events.unregister("after-call.dynamodb.Query", seen)
    assert queried == [3], "one Query of the credential's 3 index items, not the account's 63"


def test_a_session_resumed_on_another_instance_is_counted_once_and_kept(clock, store_env):
    """A reconnect with the same session id on another instance replaces the index item; the
    first instance's session_ended then leaves the session (and its count) to the other."""
    instances.register("edge_q", "")
    instances.register("edge_r", "")
    sid = _started("cr_move")
    _started("cr_move", instance_id="edge_r", session_id=sid)
    assert online.live_credential_sessions(ACCT, "cr_move") == 1
    online.session_ended(ACCT, sid, "edge_q")
    assert online.live_credential_sessions(ACCT, "cr_move") == 1
    online.session_ended(ACCT, sid, "edge_r")
    assert online.live_credential_sessions(ACCT, "cr_move") == 0
    assert online._query_raw(online._credential_sessions_pk(ACCT, "cr_move")) == []


def test_a_refresh_of_a_removed_session_reports_it_gone(clock):
    instances.register("edge_g", "")
    sid = _session("edge_g")[0]
    keeper = OnlineKeeper("edge_g")
    keeper.check([(ACCT, sid)])
    online.session_ended(ACCT, sid)
    clock["now"] += REFRESH_SECONDS
    assert keeper.check([(ACCT, sid)]).gone == {sid}


def test_a_pools_live_agent_members_are_those_their_instances_lease_holds(clock):
    """A pool drops agent members gone offline when a join needs the room or the claim an
    owner (chalicelib.core.pooling.live_agents): a member whose session is held by its
    instance's lease is online, though its own write is long stale; a dead instance's are
    not, once past ONLINE_STALE_SECONDS."""
    from chalicelib.core import pooling

    instances.register("edge_live", "")
    instances.register("edge_dead", "")
    _, _, live_eid, _ = _session("edge_live")
    _, _, dead_eid, _ = _session("edge_dead")
    members = {live_eid: "edge_live", dead_eid: "edge_dead"}
    assert pooling.live_agents(ACCT, members) == members
    for _ in range(40):  # 200 s: only edge_live renews its lease
        clock["now"] += 5
        instances.register("edge_live", "")
    assert pooling.live_agents(ACCT, members) == {live_eid: "edge_live"}


def test_a_pool_whose_owner_died_stays_its_accounts_while_another_member_lives(clock):
    """The member holding a pool's claim dies (its instance's lease ends) while another
    agent member of the pool, on a live instance, still serves the URL: the URL is still
    that account's, for another account's pooled or non-pooled endpoint alike."""
    from chalicelib.core import pooling

    instances.register("edge_a", "")
    instances.register("edge_b", "")
    _, _, owner_eid, _ = _session("edge_a")
    _, _, other_eid, _ = _session("edge_b")
    name = "pool.example.com"
    for eid, instance_id in ((owner_eid, "edge_a"), (other_eid, "edge_b")):
        pooling.join_agent(
            name, account_id=ACCT, proto="https", endpoint_id=eid, instance_id=instance_id
        )
    assert pooling.read(name)["owner"]["S"] == owner_eid
    for _ in range(40):  # 200 s: edge_a was killed, edge_b renews its lease
        clock["now"] += 5
        instances.register("edge_b", "")
    assert pooling.live_agents(ACCT, pooling.members(pooling.read(name))[1]) == {
        other_eid: "edge_b"
    }
    assert online.hostname_holder(name) is not None
    with pytest.raises(pooling.Mismatch) as caught:
        pooling.join_agent(
            name, account_id="acct_2", proto="https", endpoint_id="ep_intruder", instance_id="x"
        )
    assert caught.value.kind == pooling.OTHER_OWNER
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            name, account_id="acct_2", endpoint_id="ep_intruder", instance_id="edge_c"
        )
    assert pooling.members(pooling.read(name))[1] == {
        owner_eid: "edge_a",
        other_eid: "edge_b",
    }
    _, _, joiner_eid, _ = _session("edge_b")  # one of its own joins: the dead owner goes
    pooling.join_agent(
        name, account_id=ACCT, proto="https", endpoint_id=joiner_eid, instance_id="edge_b"
    )
    raw = pooling.read(name)
    assert raw["owner"]["S"] in (other_eid, joiner_eid)
    assert pooling.members(raw)[1] == {other_eid: "edge_b", joiner_eid: "edge_b"}


def _pool_member(instance_id, name):
    """A session whose pooled endpoint serves ``name`` (as edge/binds.py writes it), joined
    to the pool of ``name``: (session id, endpoint id)."""
    from chalicelib.core import pooling

    sid = online.new_session_id()
    online.session_started(
        account_id=ACCT,
        session_id=sid,
        credential_id="cr_x",
        instance_id=instance_id,
        agent_version="1.4.0",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    tid, eid = online.new_tunnel_id(), online.new_endpoint_id()
    pooling.join_agent(
        name, account_id=ACCT, proto="https", endpoint_id=eid, instance_id=instance_id
    )
    online.tunnel_started(
        account_id=ACCT,
        session_id=sid,
        tunnel_id=tid,
        instance_id=instance_id,
        proto="https",
        public_url=f"https://{name}",
        hostname=name,
        endpoint_id=eid,
        pooling_enabled=True,
    )
    return sid, eid


def test_a_pools_claim_lives_on_with_its_live_members_ttl_refresh(clock):
    """The claim of a pool whose holder died is kept by its other agent members' TTL
    refresh (online.session_refresh): it does not expire under the live members."""
    from chalicelib.core import pooling

    instances.register("edge_a", "")
    instances.register("edge_b", "")
    name = "pool2.example.com"
    _, owner_eid = _pool_member("edge_a", name)
    other_sid, other_eid = _pool_member("edge_b", name)
    assert pooling.read(name)["owner"]["S"] == owner_eid
    before = online.num_attr(pooling.read(name), "expires_at")
    clock["now"] += REFRESH_SECONDS  # edge_a is dead; edge_b refreshes its session's TTLs
    instances.register("edge_b", "")
    assert online.session_refresh(ACCT, other_sid)
    assert online.num_attr(pooling.read(name), "expires_at") >= before + REFRESH_SECONDS
    online.raw_client().update_item(  # as a claim a cloud member holds: no TTL
        TableName=online.raw_table(),
        Key=pooling.claim_key(name),
        UpdateExpression="REMOVE expires_at",
    )
    clock["now"] += REFRESH_SECONDS
    assert online.session_refresh(ACCT, other_sid)
    assert "expires_at" not in pooling.read(name)


def test_an_instances_lease_names_its_address_and_last_renewal_while_it_serves(clock):
    """``instances.lease_of``: what a relay's holder lookup compares with a refusal."""
    instances.register("edge_l", "10.0.0.7:7443")
    renewed = clock["now"]
    clock["now"] += 3
    assert instances.lease_of("edge_l") == ("10.0.0.7:7443", renewed)
    assert instances.address_of("edge_l") == "10.0.0.7:7443"
    instances.register("edge_l", "10.0.0.7:7443")  # renewed
    assert instances.lease_of("edge_l") == ("10.0.0.7:7443", clock["now"])
    clock["now"] += instances.LEASE_SECONDS + 0.01  # the lease ended
    assert instances.lease_of("edge_l") is None
    instances.register("edge_d", "10.0.0.8:7443", state="draining")
    instances.register("edge_n", "")
    assert (instances.lease_of("edge_d"), instances.lease_of("edge_n")) == (None, None)
    assert instances.lease_of("edge_unknown") is None
