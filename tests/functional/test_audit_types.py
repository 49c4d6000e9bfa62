"""The API event types an account's subscriptions name ride on its API key lookups
(chalicelib/audit.py): a write whose type no subscription names costs no Query, and a
subscription change is seen by every key, old or new, as soon as it has answered.

Each test reads the account's outbox (the events written for delivery) through the store.
"""

from chalicelib.auth import API_KEY_HASH_NAMESPACE
from chalicelib.core import audit_events, keys, store

TARGET = {
    "kinesis": {
        "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
        "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
    }
}


def _outbox(api, account):
    with api.service_store():
        return [
            item.data["event"]["event_type"]
            for item in store.query_all(audit_events.outbox_pk(account.id))
        ]


def _subscribe(caller, *sources):
    dest = caller.post("/event_destinations", {"target": TARGET})
    assert dest.status == 201, dest
    sub = caller.post(
        "/event_subscriptions",
        {"destination_ids": [dest.json["id"]], "sources": [{"type": s} for s in sources]},
    )
    assert sub.status == 201, sub
    return sub.json["id"]


def test_every_key_sees_a_subscription_once_it_has_answered(api, account):
    admin, member = account.admin, account.member  # both keys made before any subscription
    assert member.post("/api_keys", {"description": "before"}).status == 201
    assert _outbox(api, account) == []

    sub = _subscribe(admin, "api_key_created.v0")
    assert member.post("/api_keys", {"description": "after"}).status == 201
    assert _outbox(api, account) == ["api_key_created.v0"]

    # a source added later is seen too, and by a key made after the subscription
    added = admin.post(f"/event_subscriptions/{sub}/sources", {"type": "ip_policy_created.v0"})
    assert added.status == 201, added
    newer = member.post("/api_keys", {"description": "newer"}).json["token"]
    made = api.request("POST", "/ip_policies", key=newer, json_body={"description": "p"})
    assert made.status == 201, made
    assert _outbox(api, account).count("ip_policy_created.v0") == 1

    # the subscription gone: no key writes events any more
    assert admin.delete(f"/event_subscriptions/{sub}").status == 204
    before = len(_outbox(api, account))
    assert member.post("/api_keys", {"description": "gone"}).status == 201
    assert api.request("POST", "/ip_policies", key=newer, json_body={}).status == 201
    assert len(_outbox(api, account)) == before


def test_a_lookup_without_the_copy_still_finds_the_subscriptions(api, account):
    """Keys written before the copies existed have none: their writes Query as before."""
    _subscribe(account.admin, "api_key_created.v0")
    with api.service_store():
        lookup = store.get(
            store.unique_pk(API_KEY_HASH_NAMESPACE, keys.digest(account.member.token)),
            store.UNIQUE_SK,
        )
        assert lookup.data["audit_types"] == "api_key_created.v0"
        lookup.data = {k: v for k, v in lookup.data.items() if k != "audit_types"}
        store.commit([store.save(lookup)])
    assert account.member.post("/api_keys", {"description": "old"}).status == 201
    assert _outbox(api, account) == ["api_key_created.v0"]
