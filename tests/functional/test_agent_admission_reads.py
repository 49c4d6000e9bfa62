"""What an agent's Auth reads (chalicelib.core.binding, docs/STORE.md): one GetItem of the
token's lookup and one BatchGetItem of the credential and its owner; the edge's periodic
recheck of a credential in use is that one BatchGetItem. The refusals stay those of the
hosted service (deleted credential, deactivated or deleted bot owner). In-process: the test
shares the store and counts the calls its client makes."""

from collections import Counter

import pytest

from chalicelib.core import binding, edge_errors, store


@pytest.fixture
def calls(inprocess_api):
    seen: Counter = Counter()

    def count(event_name, **_):
        seen[event_name.rsplit(".", 1)[-1]] += 1

    client = store.connection().client
    client.meta.events.register("before-call.dynamodb.*", count)
    yield seen
    client.meta.events.unregister("before-call.dynamodb.*", count)


def test_auth_and_recheck_read_the_credential_and_owner_in_one_call(inprocess_api, calls):
    account = inprocess_api.new_account()
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    cred = admin.post("/credentials", {"owner_id": bot["id"], "acl": ["bind:a.x.com"]}).json

    calls.clear()
    grant = binding.authenticate(cred["token"])
    assert dict(calls) == {"GetItem": 1, "BatchGetItem": 1}
    assert (grant.account_id, grant.credential_id, grant.owner_id, grant.owner_kind) == (
        account.id,
        cred["id"],
        bot["id"],
        "bot",
    )
    assert grant.acl == ["bind:a.x.com"]

    calls.clear()
    again = binding.recheck(grant.account_id, cred["id"], bot["id"], "bot")
    assert dict(calls) == {"BatchGetItem": 1} and again == grant

    admin.patch(f"/bot_users/{bot['id']}", {"active": False})
    with pytest.raises(binding.Refused) as inactive:
        binding.authenticate(cred["token"])
    assert inactive.value.code == edge_errors.AUTHTOKEN_INVALID
    assert inactive.value.message == (
        f"The authtoken credential {cred['id']} cannot be used: the owner is an inactive bot user."
    )
    admin.patch(f"/bot_users/{bot['id']}", {"active": True})
    assert binding.recheck(grant.account_id, cred["id"], bot["id"], "bot") == grant

    with pytest.raises(binding.Refused) as gone_owner:  # an owner id no item has
        binding.recheck(grant.account_id, cred["id"], "bot_nosuchbot0000000000000", "bot")
    assert gone_owner.value.message == (
        f"The authtoken credential {cred['id']} cannot be used: the owner no longer exists."
    )

    admin.delete(f"/credentials/{cred['id']}")
    with pytest.raises(binding.Refused) as deleted:
        binding.recheck(grant.account_id, cred["id"], bot["id"], "bot")
    assert deleted.value.code == edge_errors.AUTHTOKEN_INVALID
    assert deleted.value.message == (
        f"The authtoken credential {cred['id']} has been deleted and is no longer valid."
    )
    with pytest.raises(binding.Refused) as unknown:
        binding.authenticate(cred["token"])
    assert unknown.value.code == edge_errors.AUTHTOKEN_INVALID


def test_the_edges_recheck_of_many_credentials_reads_fifty_a_call(inprocess_api, calls):
    """binding.recheck_many (the edge's check of every credential in use): each grant as
    recheck reads it, in order, RECHECK_BATCH (50: two keys each, BatchGetItem's 100) a call."""
    account = inprocess_api.new_account()
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    live, deleted = (admin.post("/credentials", {"owner_id": bot["id"]}).json for _ in "ab")
    grant = binding.authenticate(live["token"])
    gone = binding.authenticate(deleted["token"])
    admin.delete(f"/credentials/{deleted['id']}")
    other_bot = admin.post("/bot_users", {"name": "off"}).json
    off = admin.post("/credentials", {"owner_id": other_bot["id"]}).json
    inactive = binding.authenticate(off["token"])
    admin.patch(f"/bot_users/{other_bot['id']}", {"active": False})

    calls.clear()
    got = binding.recheck_many([gone, grant, inactive])
    assert dict(calls) == {"BatchGetItem": 1}
    assert isinstance(got[0], binding.Refused) and got[1] == grant
    assert got[0].message == (
        f"The authtoken credential {deleted['id']} has been deleted and is no longer valid."
    )
    assert isinstance(got[2], binding.Refused) and got[2].message == (
        f"The authtoken credential {off['id']} cannot be used: the owner is an inactive bot user."
    )
    for count, batches in ((binding.RECHECK_BATCH, 1), (binding.RECHECK_BATCH + 1, 2)):
        calls.clear()
        assert binding.recheck_many([grant] * count) == [grant] * count
        assert dict(calls) == {"BatchGetItem": batches}
    assert binding.RECHECK_BATCH == 50
