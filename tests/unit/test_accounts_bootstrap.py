"""A new account and its users with keys (chalicelib/accounts.py: `make run`'s first key,
the admin command, the tests' accounts): each key's lookup copies the account's facts at the
first try, so no transaction is refused and built again."""

import pytest

from chalicelib import accounts, api_keys, auth
from chalicelib.core import store
from stacks.costs import StoreCalls


def _lookup(token):
    return store.get(
        store.unique_pk(auth.API_KEY_HASH_NAMESPACE, auth.digest(token)), store.UNIQUE_SK
    )


@pytest.mark.parametrize("reporter", [False, True])
def test_bootstrap_and_a_second_user_write_each_key_in_one_transaction(store_env, reporter):
    with StoreCalls().active() as calls:
        admin = accounts.bootstrap("test", abuse_reporter=reporter)
    # the account; the account read for the user, the user; the key's one transaction
    assert dict(calls.view) == {"PutItem": 2, "GetItem": 1, "TransactWriteItems": 1}
    with StoreCalls().active() as calls:
        member = accounts.user_with_key(admin["account_id"], "member", "member")
    assert dict(calls.view) == {"PutItem": 1, "GetItem": 1, "TransactWriteItems": 1}
    for made, role in ((admin, "admin"), (member, "member")):
        lookup = _lookup(made["token"]).data
        assert lookup["role"] == role and lookup["active"] is True
        assert lookup["abuse_reporter"] is reporter
        assert lookup["audit_types"] == ""  # a new account's: no event types subscribed


def test_a_key_for_an_account_whose_facts_changed_after_the_read_is_still_right(store_env):
    """The facts passed are a first guess: an account changed between the read and the write
    (here: made an abuse reporter) refuses the transaction, and the key is built again."""
    account_id = accounts.bootstrap("test")["account_id"]
    user_id = accounts.create_user(account_id, "member")
    stale = accounts.get_account(account_id).data
    accounts.set_abuse_reporter(account_id, True)
    with StoreCalls().active() as calls:
        _, token = api_keys.create_for_owner(
            account_id, user_id, "user", role="member", account=stale
        )
    assert calls.view["TransactWriteItems"] == 2
    assert _lookup(token).data["abuse_reporter"] is True
