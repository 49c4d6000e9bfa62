"""Create accounts in a running service's store: ``python -m stacks.seed N`` (the tests' HTTP
client, tests/support/api.py), or :func:`make_account` in this process (stacks.inprocess).

Prints one JSON list: per account its id, an admin user with an API key and a member user
with an API key. ``--reporter`` marks the accounts as abuse reporters. Uses the store named
by the environment (DYNAMODB_ENDPOINT_URL, TABLE_NAME), like the admin command.
"""

import argparse
import json

from chalicelib import accounts


def make_account(reporter: bool = False) -> dict:
    admin = accounts.bootstrap("test", abuse_reporter=reporter)
    member = accounts.user_with_key(admin["account_id"], "member", "member")
    return {
        "account_id": admin["account_id"],
        "reporter": reporter,
        "admin": {
            "id": admin["user_id"],
            "token": admin["token"],
            "api_key_id": admin["api_key_id"],
        },
        "member": {
            "id": member["user_id"],
            "token": member["token"],
            "api_key_id": member["api_key_id"],
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("count", type=int)
    parser.add_argument("--reporter", action="store_true")
    args = parser.parse_args()
    print(json.dumps([make_account(args.reporter) for _ in range(args.count)]))
