"""The store's transactional rules, against moto's in-process DynamoDB."""

import pytest

from chalicelib.core import errors, store


def _item(pk="A#acct#thing", sk="th_1", **data):
    return store.new_item(pk, sk, kind="thing", account_id="acct", data=data)


def test_put_new_refuses_an_existing_item_with_its_error(store_env):
    store.commit([store.put_new(_item(n=1))])
    with pytest.raises(errors.Conflict) as info:
        store.commit([store.put_new(_item(n=2), errors.Conflict("taken"))])
    assert info.value.msg == "taken"
    assert store.get("A#acct#thing", "th_1").data == {"n": 1}


def test_a_failed_transaction_writes_nothing(store_env):
    store.commit([store.unique("name", "x", {"owner": "a"}, errors.Conflict("x taken"))])
    with pytest.raises(errors.Conflict):
        store.commit(
            [
                store.put_new(_item(sk="th_2")),
                store.unique("name", "x", {"owner": "b"}, errors.Conflict("x taken")),
            ]
        )
    assert store.get("A#acct#thing", "th_2") is None
    assert store.get(store.unique_pk("name", "x"), store.UNIQUE_SK).data == {"owner": "a"}


def test_stale_save_is_a_version_conflict_and_retrying_rereads(store_env):
    store.commit([store.put_new(_item(n=0))])
    stale = store.get("A#acct#thing", "th_1")
    fresh = store.get("A#acct#thing", "th_1")
    fresh.data = {"n": 1}
    store.commit([store.save(fresh)])
    stale.data = {"n": 99}
    with pytest.raises(store.VersionConflict):
        store.commit([store.save(stale)])

    @store.retrying
    def increment():
        item = store.get("A#acct#thing", "th_1")
        item.data = {"n": item.data["n"] + 1}
        store.commit([store.save(item)])

    increment()
    assert store.get("A#acct#thing", "th_1").data == {"n": 2}


def test_delete_conditioned_on_refs(store_env):
    store.commit([store.put_new(_item())])
    target = store.get("A#acct#thing", "th_1")
    store.commit([store.update(target, [store.model().refs.add(1)])])
    target = store.get("A#acct#thing", "th_1")
    assert target.refs == 1
    with pytest.raises(errors.Conflict):
        store.commit(
            [
                store.delete(
                    target, condition=store.model().refs == 0, error=errors.Conflict("in use")
                )
            ]
        )
    assert store.get("A#acct#thing", "th_1") is not None


def test_query_page_is_newest_first_with_before_id(store_env):
    for n in range(5):
        store.commit([store.put_new(_item(sk=f"th_{n}", n=n))])
    items, more = store.query_page("A#acct#thing", 2)
    assert [i.sk for i in items] == ["th_4", "th_3"] and more
    items, more = store.query_page("A#acct#thing", 2, before_id="th_1")
    assert [i.sk for i in items] == ["th_0"] and not more


def test_create_table_is_idempotent(store_env):
    assert store.create_table() is False


def test_create_table_turns_on_point_in_time_recovery_when_asked(store_env):
    store.create_table(point_in_time_recovery=True)
    client = store.connection().client
    backups = client.describe_continuous_backups(TableName="tunnel-service")
    status = backups["ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]
    assert status["PointInTimeRecoveryStatus"] == "ENABLED"
    table = client.describe_table(TableName="tunnel-service")["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


# ---- the retry of a read-modify-write that lost a race (store.retrying, store.backoff) ------------
def test_a_lost_race_sleeps_a_backoff_between_attempts_but_not_after_the_last(monkeypatch):
    slept, attempts = [], []
    monkeypatch.setattr(store.time, "sleep", slept.append)
    monkeypatch.setattr(store, "backoff", lambda attempt: attempts.append(attempt) or attempt / 10)
    calls = []

    @store.retrying
    def write(a, b=None):
        calls.append((a, b))
        raise store.VersionConflict()

    with pytest.raises(errors.Conflict) as info:
        write(1, b=2)
    assert calls == [(1, 2)] * 8
    assert attempts == list(range(7)) and slept == [n / 10 for n in range(7)]
    assert info.value.status_code == 409 and info.value.error_code == errors.CONFLICT
    assert info.value.msg == (
        "The resource was changed by another request at the same time; retry the request"
    )


def test_a_write_that_wins_returns_its_value_without_sleeping(monkeypatch):
    slept = []
    monkeypatch.setattr(store.time, "sleep", slept.append)

    @store.retrying
    def write(value):
        """doc"""
        return value * 2

    assert write(21) == 42 and slept == []
    assert write.__name__ == "write" and write.__doc__ == "doc"


def test_only_a_version_conflict_is_retried(monkeypatch):
    monkeypatch.setattr(store.time, "sleep", lambda seconds: None)
    calls = []

    @store.retrying
    def write():
        calls.append(1)
        raise errors.NotFound()

    with pytest.raises(errors.NotFound):
        write()
    assert calls == [1]


@pytest.mark.parametrize(
    "attempt, cap", [(0, 0.005), (1, 0.01), (3, 0.04), (5, 0.16), (6, 0.25), (7, 0.25), (20, 0.25)]
)
def test_backoff_is_full_jitter_doubling_from_5_ms_capped_at_250_ms(monkeypatch, attempt, cap):
    ranges = []
    monkeypatch.setattr(
        store.random, "uniform", lambda low, high: ranges.append((low, high)) or high
    )
    assert store.backoff(attempt) == pytest.approx(cap)
    assert ranges == [(0, pytest.approx(cap))]


def test_backoff_draws_within_its_range():
    for attempt in range(8):
        wait = store.backoff(attempt)
        assert 0 <= wait <= min(0.25, 0.005 * 2**attempt)


def test_increment_counts_from_one_and_sets_the_expiry(store_env):
    """store.increment (the Auth and API rate counters): 1, 2, 3 … on one item, its TTL
    attribute set (moved by a later call), other counters apart."""
    assert [store.increment("U#ctr#a", "1", expires_at=100) for _ in range(3)] == [1, 2, 3]
    assert store.increment("U#ctr#a", "1", expires_at=160) == 4
    assert store.increment("U#ctr#a", "2", expires_at=100) == 1
    item = store.get("U#ctr#a", "1")
    assert (item.refs, item.expires_at) == (4, 160)
