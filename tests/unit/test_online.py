"""Online state items (chalicelib.core.online) against moto's in-process DynamoDB."""

import pytest

from chalicelib.core import config, errors, ids, online, store

ACCT = "acct_1"
OTHER = "acct_2"


@pytest.fixture
def clock(store_env, monkeypatch):
    """A settable clock for online.now()."""
    t = {"now": 1_800_000_000.0}
    monkeypatch.setattr(online, "now", lambda: t["now"])
    return t


def _session(account_id=ACCT, instance_id="edge-a", sid=None, **kw):
    """A session item (a new id, or ``sid`` written again: a resume on ``instance_id``)."""
    sid = sid or online.new_session_id()
    online.session_started(
        account_id=account_id,
        session_id=sid,
        credential_id="cr_x",
        instance_id=instance_id,
        agent_version="1.4.0",
        os="linux",
        ip="127.0.0.1",
        metadata="m",
        region="local",
        owner_id="usr_x",
        **kw,
    )
    return sid


def _tunnel(sid, account_id=ACCT, hostname=None, proto="https", labels=None, endpoint=True, **kw):
    tid = online.new_tunnel_id()
    eid = online.new_endpoint_id() if endpoint else None
    online.tunnel_started(
        account_id=account_id,
        session_id=sid,
        tunnel_id=tid,
        instance_id="edge-a",
        proto=proto,
        public_url=f"{proto}://{hostname}" if hostname else None,
        hostname=hostname,
        labels=labels,
        endpoint_id=eid,
        forwards_to="http://localhost:80",
        **kw,
    )
    return tid, eid


def _raw(collection, sk, account_id=ACCT):
    return store.get(store.collection_pk(account_id, collection), sk)


def _claim(name):
    return store.get(store.unique_pk(online.CLAIM_NAMESPACE, name), store.UNIQUE_SK)


def test_ids_have_the_hosted_prefixes():
    assert ids.is_valid(online.new_session_id(), "ts")
    assert ids.is_valid(online.new_tunnel_id(), "tn")
    assert ids.is_valid(online.new_endpoint_id(), "ep")


def test_stale_seconds_defaults_to_45_and_follows_the_setting(monkeypatch):
    monkeypatch.delenv("ONLINE_STALE_SECONDS", raising=False)
    config.reset_settings()
    assert online.STALE_SECONDS == 45
    monkeypatch.setenv("ONLINE_STALE_SECONDS", "20")
    config.reset_settings()
    try:
        assert online.STALE_SECONDS == 20
        monkeypatch.setenv("ONLINE_STALE_SECONDS", "0")
        config.reset_settings()
        with pytest.raises(ValueError):
            online.stale_seconds()
    finally:
        monkeypatch.delenv("ONLINE_STALE_SECONDS")
        config.reset_settings()


def test_session_started_writes_instance_heartbeat_and_ttl(clock):
    sid = _session()
    item = _raw("tunnel_session", sid)
    assert item.instance_id == "edge-a"
    assert item.heartbeat_at == clock["now"]
    assert item.expires_at == clock["now"] + online.EXPIRE_AFTER_SECONDS
    assert item.data["credential_id"] == "cr_x" and item.data["transport"] == "ngrok/2"
    assert item.data["started_at"] == "2027-01-15T08:00:00Z"


def test_heartbeat_refreshes_the_session_with_one_write_and_returns_flags(clock):
    sid = _session()
    clock["now"] += 10
    assert online.session_heartbeat(ACCT, sid, "edge-a") == {
        "stop_requested": False,
        "restart_requested": False,
    }
    item = _raw("tunnel_session", sid)
    assert item.heartbeat_at == clock["now"]
    assert item.expires_at == clock["now"] + online.EXPIRE_AFTER_SECONDS


def test_heartbeat_of_a_missing_session_is_none(clock):
    assert online.session_heartbeat(ACCT, online.new_session_id(), "edge-a") is None
    sid = _session()
    online.session_ended(ACCT, sid)
    assert online.session_heartbeat(ACCT, sid, "edge-a") is None
    assert _raw("tunnel_session", sid) is None  # the heartbeat did not recreate it


def test_stop_is_returned_once_by_the_next_heartbeat(clock):
    sid = _session()
    online.request_stop(ACCT, sid)
    assert online.session_heartbeat(ACCT, sid, "edge-a") == {
        "stop_requested": True,
        "restart_requested": False,
    }
    assert online.session_heartbeat(ACCT, sid, "edge-a")["stop_requested"] is False
    online.request_restart(ACCT, sid)
    assert online.session_heartbeat(ACCT, sid, "edge-a") == {
        "stop_requested": False,
        "restart_requested": True,
    }


def test_request_stop_of_unknown_stale_or_foreign_session_is_not_found(clock):
    sid = _session()
    with pytest.raises(errors.NotFound):
        online.request_stop(OTHER, sid)
    with pytest.raises(errors.NotFound):
        online.request_stop(ACCT, "ts_nope")
    clock["now"] += online.STALE_SECONDS  # exactly at the limit: still live
    online.request_stop(ACCT, sid)
    clock["now"] += 1
    with pytest.raises(errors.NotFound):
        online.request_stop(ACCT, sid)
    assert _raw("tunnel_session", OTHER) is None


def test_tunnel_started_writes_tunnel_and_endpoint_and_links_them(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    tunnel, endpoint = _raw("tunnel", tid), _raw("endpoint", eid)
    assert tunnel.owner == sid and endpoint.owner == sid
    assert tunnel.data["endpoint_id"] == eid and endpoint.data["tunnel_id"] == tid
    assert endpoint.data["type"] == "agent"
    assert endpoint.data["served_name"] == "a.example.test"
    assert tunnel.instance_id == endpoint.instance_id == "edge-a"
    assert tunnel.expires_at == clock["now"] + online.CHILD_TTL_SECONDS
    assert set(_raw("tunnel_session", sid).children) == {tid, eid, f"claim|{eid}|a.example.test"}


def test_tunnel_started_without_its_session_writes_nothing(clock):
    sid = online.new_session_id()
    with pytest.raises(errors.NotFound):
        tid, eid = _tunnel(sid, hostname="a.example.test")
    assert store.query_all(store.collection_pk(ACCT, "tunnel")) == []
    assert store.query_all(store.collection_pk(ACCT, "endpoint")) == []


def test_tunnel_stopped_removes_tunnel_endpoint_and_claim_idempotently(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    other_tid, other_eid = _tunnel(sid, hostname="b.example.test")
    online.tunnel_stopped(ACCT, tid)
    online.tunnel_stopped(ACCT, tid)
    assert _raw("tunnel", tid) is None and _raw("endpoint", eid) is None
    assert _claim("a.example.test") is None
    assert _raw("tunnel", other_tid) is not None
    assert set(_raw("tunnel_session", sid).children) == {
        other_tid,
        other_eid,
        f"claim|{other_eid}|b.example.test",
    }


def test_session_ended_removes_everything_of_the_session_idempotently(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    ltid, _ = _tunnel(sid, labels={"app": "x"}, endpoint=False)
    keep = _session()
    ktid, keid = _tunnel(keep, hostname="k.example.test")
    online.session_ended(ACCT, sid)
    online.session_ended(ACCT, sid)
    assert _raw("tunnel_session", sid) is None
    assert _raw("tunnel", tid) is None and _raw("tunnel", ltid) is None
    assert _raw("endpoint", eid) is None and _claim("a.example.test") is None
    assert _raw("tunnel", ktid) is not None and _raw("endpoint", keid) is not None


def _credential_session(sid, credential_id="cr_x"):
    return store.get(
        store.collection_pk(ACCT, f"{online.CREDENTIAL_SESSIONS}#{credential_id}"), sid
    )


def test_an_unbound_session_ends_in_one_write_of_its_two_items(clock):
    """The edge's end of a session it made and nothing was bound on: one TransactWriteItems
    (not a GetItem and two DeleteItems); another session of the credential stays."""
    from stacks.costs import StoreCalls

    sid, other = _session(), _session()
    assert _credential_session(sid) is not None
    with StoreCalls().active() as calls:
        online.session_ended(ACCT, sid, "edge-a", unbound_credential="cr_x")
    assert dict(calls.view) == {"TransactWriteItems": 1}
    assert _raw("tunnel_session", sid) is None and _credential_session(sid) is None
    assert _raw("tunnel_session", other) is not None and _credential_session(other) is not None
    assert online.live_credential_sessions(ACCT, "cr_x") == 1


def test_an_unbound_end_the_instance_no_longer_holds_takes_the_whole_path(clock):
    """The session resumed on another instance (its items name edge-b): the one write is
    refused as a whole and the checked path removes nothing of edge-b's."""
    sid = _session()
    _session(instance_id="edge-b", sid=sid)
    online.session_ended(ACCT, sid, "edge-a", unbound_credential="cr_x")
    assert _raw("tunnel_session", sid).instance_id == "edge-b"
    assert _credential_session(sid) is not None
    online.session_ended(ACCT, sid, "edge-b", unbound_credential="cr_x")
    assert _raw("tunnel_session", sid) is None and _credential_session(sid) is None
    # an id ended twice: the second finds nothing to remove and fails nothing
    online.session_ended(ACCT, sid, "edge-b", unbound_credential="cr_x")


def test_session_ended_leaves_what_a_reconnected_session_rebound(clock):
    old = _session()
    tid, eid = _tunnel(old, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    new = _session(instance_id="edge-b")
    # the agent reconnects and re-binds the same tunnel/endpoint ids on a new session
    _rebound_on_b(new, tid, eid, "a.example.test")
    online.session_ended(ACCT, old)
    assert _raw("tunnel", tid).owner == new and _raw("endpoint", eid).owner == new
    assert _claim("a.example.test").instance_id == "edge-b"


def test_claim_hostname_is_one_endpoint_per_name_service_wide(clock):
    sid = _session()
    _, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("A.Example.Test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    other = online.new_endpoint_id()
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            "a.example.test", account_id=OTHER, endpoint_id=other, instance_id="edge-b"
        )
    assert _claim("a.example.test").owner == eid
    # the same endpoint claims again (reconnect): fine
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-b")
    assert _claim("a.example.test").instance_id == "edge-b"


def test_claim_of_a_stale_session_is_taken_over_at_the_boundary(clock):
    sid = _session()
    _, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    other = online.new_endpoint_id()
    clock["now"] += online.STALE_SECONDS  # heartbeat exactly STALE_SECONDS old: live
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            "a.example.test", account_id=OTHER, endpoint_id=other, instance_id="edge-b"
        )
    clock["now"] += 1
    online.claim_hostname(
        "a.example.test", account_id=OTHER, endpoint_id=other, instance_id="edge-b"
    )
    assert _claim("a.example.test").owner == other


def test_claim_heartbeat_keeps_the_session_claim_live(clock):
    sid = _session()
    _, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    for _ in range(10):  # long after the claim, but the session heartbeats
        clock["now"] += 30
        online.session_heartbeat(ACCT, sid, "edge-a")
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            "a.example.test",
            account_id=OTHER,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-b",
        )


def test_claim_without_endpoint_item_is_live_for_stale_seconds(clock):
    eid = online.new_endpoint_id()
    online.claim_hostname("h.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    clock["now"] += online.STALE_SECONDS
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            "h.example.test",
            account_id=OTHER,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-b",
        )
    clock["now"] += 1
    online.claim_hostname(
        "h.example.test",
        account_id=OTHER,
        endpoint_id=online.new_endpoint_id(),
        instance_id="edge-b",
    )


def test_release_hostname_only_releases_our_own_claim(clock):
    eid, other = online.new_endpoint_id(), online.new_endpoint_id()
    online.claim_hostname("h.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    online.release_hostname("h.example.test", endpoint_id=other)
    assert _claim("h.example.test").owner == eid
    assert online.hostname_holder("h.example.test")["endpoint_id"] == eid
    online.release_hostname("H.example.test", endpoint_id=eid)
    online.release_hostname("h.example.test", endpoint_id=eid)
    assert _claim("h.example.test") is None
    assert online.hostname_holder("h.example.test") is None


def test_tcp_addresses_claim_host_and_port(clock):
    assert (
        online.served_name("tcp", "tcp://1.tcp.example.test:20001", None, None)
        == "1.tcp.example.test:20001"
    )
    assert (
        online.served_name("tcp", None, "1.tcp.example.test", 20001) == "1.tcp.example.test:20001"
    )
    assert online.served_name("https", "https://A.example.test", None, None) == "a.example.test"
    eid = online.new_endpoint_id()
    online.claim_hostname(
        "1.tcp.example.test:20001", account_id=ACCT, endpoint_id=eid, instance_id="edge-a"
    )
    online.claim_hostname(
        "1.tcp.example.test:20002",
        account_id=OTHER,
        endpoint_id=online.new_endpoint_id(),
        instance_id="edge-a",
    )
    with pytest.raises(errors.Conflict):
        online.claim_hostname(
            "1.tcp.example.test:20001",
            account_id=OTHER,
            endpoint_id=online.new_endpoint_id(),
            instance_id="edge-a",
        )


def test_online_tunnels_match_labels_of_live_sessions_only(clock):
    live = _session()
    stale = _session()
    a, _ = _tunnel(live, labels={"app": "web", "env": "prod"}, endpoint=False)
    b, _ = _tunnel(live, labels={"app": "web"}, endpoint=False)
    _tunnel(live, labels={"app": "api"}, endpoint=False)
    _tunnel(live, hostname="plain.example.test")
    _tunnel(stale, labels={"app": "web"}, endpoint=False)
    _tunnel(_session(account_id=OTHER), account_id=OTHER, labels={"app": "web"}, endpoint=False)
    clock["now"] += online.STALE_SECONDS + 1
    online.session_heartbeat(ACCT, live, "edge-a")
    found = online.online_tunnels(ACCT, {"app": "web"})
    assert sorted(t["tunnel_id"] for t in found) == sorted([a, b])
    assert all(t["session_id"] == live and t["instance_id"] == "edge-a" for t in found)
    assert [
        t["tunnel_id"] for t in online.online_tunnels(ACCT, {"app": "web", "env": "prod"})
    ] == [a]
    assert online.online_tunnels(ACCT, {"app": "none"}) == []


def test_heartbeat_refreshes_children_ttl_only_when_due(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    written = _raw("tunnel", tid).expires_at
    clock["now"] += 60
    online.session_heartbeat(ACCT, sid, "edge-a")
    assert (
        _raw("tunnel", tid).expires_at == written
    )  # not due: the heartbeat wrote only the session
    clock["now"] += online.CHILD_TTL_SECONDS / 2
    online.session_heartbeat(ACCT, sid, "edge-a")
    expected = clock["now"] + online.CHILD_TTL_SECONDS
    assert _raw("tunnel", tid).expires_at == expected
    assert _raw("endpoint", eid).expires_at == expected
    assert _claim("a.example.test").expires_at == expected


def test_the_table_expires_items_by_expires_at(store_env):
    client = store.connection().client
    ttl = client.describe_time_to_live(TableName="tunnel-service")["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED" and ttl["AttributeName"] == "expires_at"


def test_live_page_fills_pages_past_offline_items_and_ends_early_at_the_read_limit(
    clock, monkeypatch
):
    live = _session()
    clock["now"] += 1
    stale = [_session() for _ in range(20)]
    clock["now"] += online.STALE_SECONDS + 1
    online.session_heartbeat(ACCT, live, "edge-a")
    pairs, more, cursor = online.live_page(ACCT, "tunnel_session", 2, None)
    assert [i.sk for i, _ in pairs] == [live] and not more and cursor is None
    monkeypatch.setattr(online, "MAX_EXAMINED_PER_PAGE", 5)
    pairs, more, cursor = online.live_page(ACCT, "tunnel_session", 2, None)
    # reads 3, then 12 items: past the limit of 5, the page ends with a cursor after them
    assert pairs == [] and more and cursor == stale[-15]
    pairs, more, cursor = online.live_page(ACCT, "tunnel_session", 2, cursor)
    assert [i.sk for i, _ in pairs] == [live] and not more and cursor is None


def test_live_item_hides_offline_items(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    assert online.live_item(ACCT, "endpoint", "ep", eid, "endpoint")[1].sk == sid
    clock["now"] += online.STALE_SECONDS + 1
    for collection, prefix, item_id in (
        ("tunnel_session", "ts", sid),
        ("tunnel", "tn", tid),
        ("endpoint", "ep", eid),
    ):
        with pytest.raises(errors.NotFound):
            online.live_item(ACCT, collection, prefix, item_id, "thing")


def test_staleness_is_decided_to_the_millisecond(clock):
    clock["now"] += 0.9
    sid = _session()
    assert _raw("tunnel_session", sid).heartbeat_at == clock["now"]
    clock["now"] += online.STALE_SECONDS  # exactly STALE_SECONDS old (not 44.1 s)
    online.request_stop(ACCT, sid)
    assert online.live_item(ACCT, "tunnel_session", "ts", sid, "tunnel session")
    clock["now"] += 0.002
    with pytest.raises(errors.NotFound):
        online.request_stop(ACCT, sid)
    with pytest.raises(errors.NotFound):
        online.live_item(ACCT, "tunnel_session", "ts", sid, "tunnel session")


# ---- a reconnecting agent gets its generated name back ------------------------------------
def test_a_remembered_name_is_found_for_its_tunnel_until_rebind_seconds_pass(clock):
    online.remember_name(ACCT, "tn_a", "gen.tunnels.localhost")
    assert online.remembered_name(ACCT, "tn_a") == "gen.tunnels.localhost"
    clock["now"] += online.REBIND_SECONDS - 1
    assert online.remembered_name(ACCT, "tn_a") == "gen.tunnels.localhost"
    clock["now"] += 2
    assert online.remembered_name(ACCT, "tn_a") is None


def test_a_remembered_name_belongs_to_its_account_and_tunnel(clock):
    online.remember_name(ACCT, "tn_a", "tunnels.localhost:20001")
    assert online.remembered_name(OTHER, "tn_a") is None
    assert online.remembered_name(ACCT, "tn_b") is None
    online.remember_name(ACCT, "tn_a", "tunnels.localhost:20002")  # the latest drop wins
    assert online.remembered_name(ACCT, "tn_a") == "tunnels.localhost:20002"


def test_a_tunnel_id_belongs_to_the_first_account_that_claims_it(clock):
    assert online.claim_tunnel_id("tn_a", ACCT) is True
    assert online.claim_tunnel_id("tn_a", ACCT) is True  # its re-bind, again and again
    assert online.claim_tunnel_id("tn_a", OTHER) is False  # never another account's
    assert online.claim_tunnel_id("tn_b", OTHER) is True


# ---- the CLI 2.x's http and https endpoints of one name hand its claim to each other --------
def _served(sid, name, proto="https", account_id=ACCT):
    """An endpoint of session ``sid`` serving ``name`` over ``proto``, holding its claim."""
    _, eid = _tunnel(sid, account_id=account_id, hostname=name, proto=proto)
    online.claim_hostname(name, account_id=account_id, endpoint_id=eid, instance_id="edge-a")
    return eid


def _take(
    name, sid, account_id=ACCT, partner_proto="https", endpoint_id=None, instance_id="edge-b"
):
    endpoint_id = endpoint_id or online.new_endpoint_id()
    taken = online.take_partner_claim(
        name,
        account_id=account_id,
        endpoint_id=endpoint_id,
        instance_id=instance_id,
        session_id=sid,
        partner_proto=partner_proto,
    )
    return taken, endpoint_id


def test_a_partner_of_the_same_session_takes_the_claim_over(clock):
    sid = _session()
    _served(sid, "a.example.test")
    taken, eid = _take("A.example.test", sid)
    assert taken
    held = _claim("a.example.test")
    assert (held.owner, held.instance_id) == (eid, "edge-b")
    assert _take("a.example.test", sid, endpoint_id=eid)[0]  # its own already: True


@pytest.mark.parametrize(
    "case",
    [
        "another session",
        "another account",
        "the same scheme",
        "another name",
        "a pool",
        "none",
        "bound on the taker's instance",
    ],
)
def test_a_claim_is_taken_from_the_partner_only(clock, case):
    """Anyone but the other scheme's endpoint of the same session and account, serving this
    very name, keeps the claim (False, nothing changed)."""
    sid = _session()
    holder = None if case == "none" else _served(sid, "a.example.test")
    kw = {}
    if case == "another session":
        kw["sid"] = _session()
    elif case == "another account":
        kw["account_id"] = OTHER
    elif case == "the same scheme":
        kw["partner_proto"] = "http"
    elif case == "another name":  # the holder's endpoint serves b (its claim of a is a leftover)
        _, eid_b = _tunnel(sid, hostname="b.example.test")
        online.release_hostname("a.example.test", endpoint_id=holder)
        online.claim_hostname(
            "a.example.test", account_id=ACCT, endpoint_id=eid_b, instance_id="edge-a"
        )
        holder = eid_b
    elif case == "a pool":
        online.raw_client().update_item(
            TableName=online.raw_table(),
            Key=online.claim_key("a.example.test"),
            UpdateExpression="SET #d.pooled = :t",
            ExpressionAttributeNames={"#d": "data"},
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )
    elif case == "bound on the taker's instance":  # it pairs there instead (edge.binds)
        kw["instance_id"] = "edge-a"
    taken, _ = _take("a.example.test", kw.pop("sid", sid), **kw)
    assert not taken
    held = _claim("a.example.test")
    assert (held.owner if held else None) == holder


def test_a_claim_refreshed_meanwhile_is_not_taken(clock, monkeypatch):
    """The move is conditioned on the holder's heartbeat as read."""
    sid = _session()
    holder = _served(sid, "a.example.test")
    read = online.get_raw

    def then_refreshed(key):
        raw = read(key)
        if key == online.claim_key("a.example.test"):
            clock["now"] += 1
            online.claim_hostname(
                "a.example.test", account_id=ACCT, endpoint_id=holder, instance_id="edge-a"
            )
        return raw

    monkeypatch.setattr(online, "get_raw", then_refreshed)
    assert not _take("a.example.test", sid)[0]
    assert _claim("a.example.test").owner == holder


# ---- a session resumed on another instance keeps what it re-bound there ---------------------
def _resumed_on_b(sid, tid, eid, name):
    """The agent resumed session ``sid`` on edge-b and re-bound tunnel ``tid`` there."""
    online.session_heartbeat(ACCT, sid, "edge-b")
    _rebound_on_b(sid, tid, eid, name)


def _rebound_on_b(sid, tid, eid, name):
    """Session ``sid`` re-bound tunnel ``tid`` (endpoint ``eid``, serving ``name``) on edge-b."""
    online.tunnel_started(
        account_id=ACCT,
        session_id=sid,
        tunnel_id=tid,
        instance_id="edge-b",
        proto="https",
        hostname=name,
        endpoint_id=eid,
    )
    online.claim_hostname(name, account_id=ACCT, endpoint_id=eid, instance_id="edge-b")


def test_the_instance_the_session_left_stops_nothing_it_no_longer_holds(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    _resumed_on_b(sid, tid, eid, "a.example.test")
    # edge-a notices its connection gone only now
    online.release_hostname("a.example.test", endpoint_id=eid, instance_id="edge-a")
    online.tunnel_stopped(ACCT, tid, "edge-a")
    online.session_ended(ACCT, sid, "edge-a")
    assert _raw("tunnel", tid).instance_id == "edge-b"
    assert _raw("endpoint", eid).instance_id == "edge-b"
    assert _claim("a.example.test").instance_id == "edge-b"
    session = _raw("tunnel_session", sid)
    assert session.instance_id == "edge-b"
    assert {tid, eid} <= set(session.children)  # still refreshed, and removed at its end
    # the instance holding them ends it: all gone
    online.tunnel_stopped(ACCT, tid, "edge-b")
    online.session_ended(ACCT, sid, "edge-b")
    assert _raw("tunnel", tid) is None and _raw("endpoint", eid) is None
    assert _claim("a.example.test") is None and _raw("tunnel_session", sid) is None


def test_the_instance_the_session_left_ends_it_without_touching_the_resumed_one(clock):
    sid = _session()
    tid, eid = _tunnel(sid, hostname="a.example.test")
    online.claim_hostname("a.example.test", account_id=ACCT, endpoint_id=eid, instance_id="edge-a")
    _resumed_on_b(sid, tid, eid, "a.example.test")
    online.session_ended(ACCT, sid, "edge-a")
    assert _raw("tunnel", tid) is not None and _raw("endpoint", eid) is not None
    assert _claim("a.example.test").owner == eid
    assert _raw("tunnel_session", sid) is not None
