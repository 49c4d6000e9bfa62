"""The API events' outbox is fair between accounts (chalicelib/core/audit_events.py,
edge/audit_outbox.py; docs/EVENTS.md): each account waits in an outbox of its own, a poll
reads each marked account's share, so one account's backlog never holds another's event back;
marks go when an account's outbox is empty, and not when an event came meanwhile. Against
moto's in-process DynamoDB."""

from chalicelib.core import audit_events, store
from edge.audit_outbox import Poller

KIND = "ip_policy_created.v0"


def _emit(account_id: str, n: int = 1) -> list:
    return [
        audit_events.emit(account_id, KIND, {"id": f"ipp_{i}"}, {"id": "p"}, ["esb_1"])["event_id"]
        for i in range(n)
    ]


def _marks() -> list:
    return [item.sk for item in store.query_all(audit_events.OUTBOX_PK)]


def test_another_accounts_backlog_does_not_hold_an_event_back(store_env):
    _emit("acct_flood", audit_events.CLAIM_BATCH * 3)  # three full polls' worth, first
    (quiet,) = _emit("acct_quiet")
    claimed = Poller().claim_pending()  # one poll
    ids = [event["event_id"] for event, _ in claimed]
    assert quiet in ids
    # each account's share: half of a poll each, the flood's oldest first
    assert len(ids) == audit_events.CLAIM_BATCH // 2 + 1
    flood = [e for e, _ in claimed if e["account_id"] == "acct_flood"]
    assert len(flood) == audit_events.CLAIM_BATCH // 2
    assert [e["event_id"] for e in flood] == sorted(e["event_id"] for e in flood)


def test_an_event_is_claimed_once_with_its_subscriptions(store_env):
    (event_id,) = _emit("acct_a")
    first, second = Poller(), Poller()  # two instances
    got = first.claim_pending()
    assert [(e["event_id"], subs) for e, subs in got] == [(event_id, ["esb_1"])]
    assert second.claim_pending() == []
    assert audit_events.claim("acct_a", event_id) is None


def test_a_mark_goes_with_the_last_event_and_stays_for_a_newer_one(store_env):
    _emit("acct_a")
    poller = Poller()
    assert len(poller.claim_pending()) == 1
    assert _marks() == ["acct_a"]  # the poll that emptied it read events, not emptiness
    assert poller.claim_pending() == []
    assert _marks() == []  # the next poll found it empty: unmarked
    # a poll read the mark, found the outbox empty, and an event came before it unmarked:
    # the mark stays (it names the newer event), and the next poll takes the event
    (first,) = _emit("acct_b")
    (mark,) = store.query_all(audit_events.OUTBOX_PK)
    assert audit_events.claim("acct_b", first) is not None
    (newer,) = _emit("acct_b")
    audit_events.unmark("acct_b", mark.data["last"])
    assert _marks() == ["acct_b"]
    assert [e["event_id"] for e, _ in poller.claim_pending()] == [newer]


def test_polls_go_round_the_marked_accounts_when_there_are_more_than_one_poll_reads(
    store_env, monkeypatch
):
    monkeypatch.setattr(audit_events, "ACCOUNTS_PER_POLL", 3)
    accounts = [f"acct_{i}" for i in range(7)]
    for account_id in accounts:
        _emit(account_id, 2)
    poller, polls = Poller(), []
    for _ in range(3):  # 3 + 3 + 1 accounts: every account within one round
        polls.append(sorted({e["account_id"] for e, _ in poller.claim_pending()}))
    assert polls == [accounts[:3], accounts[3:6], accounts[6:]]
    assert poller.after == ""  # the round ended: the next poll starts from the first


def test_another_accounts_events_never_leave_with_a_poll_of_its_share(store_env):
    _emit("acct_a", 2)
    _emit("acct_b", 2)
    waiting, _ = audit_events.pending(limit=2)  # a share of one event each
    assert sorted(account for account, _ in waiting) == ["acct_a", "acct_b"]
    for account_id, event_id in waiting:
        assert store.get(audit_events.outbox_pk(account_id), event_id) is not None


def test_a_share_is_the_whole_part_of_the_poll_per_account(store_env):
    _emit("acct_a", 3)
    _emit("acct_b", 3)
    waiting, _ = audit_events.pending(limit=3)  # 3 // 2 accounts: one event each
    assert sorted(account for account, _ in waiting) == ["acct_a", "acct_b"]


def test_unmarking_a_mark_already_gone_changes_nothing(store_env):
    """Another instance removed it first: no error (the poll goes on)."""
    audit_events.unmark("acct_gone", "ev_whatever")
    assert _marks() == []


def test_a_poll_with_nothing_marked_reads_from_the_first_next_time(store_env):
    assert audit_events.pending() == ([], "")
