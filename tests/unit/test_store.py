"""The store's transactional rules, against moto's in-process DynamoDB."""

import pytest

from chalicelib import errors, store


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
        store.commit([store.put_new(_item(sk="th_2")),
                      store.unique("name", "x", {"owner": "b"}, errors.Conflict("x taken"))])
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
        store.commit([store.delete(target, condition=store.model().refs == 0,
                                   error=errors.Conflict("in use"))])
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
