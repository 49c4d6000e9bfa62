"""Operator command: ``python -m chalicelib.admin <command>``.

It talks to the store the service uses (TABLE_NAME, DYNAMODB_ENDPOINT_URL, AWS_REGION),
so run it with the same environment as the service (``make api-key`` does).

Commands:
  create-table [--pitr]                     create the table if missing (idempotent);
                                            point-in-time recovery is on with --pitr and
                                            always when STAGE=prod
  bootstrap [--name N] [--abuse-reporter]   new account + admin user + first API key;
                                            the key's token is the last line printed
  add-member --account ACCT [--admin]       new member (or admin) user of ACCT with an API key
  set-abuse-reporter --account ACCT (--on|--off)
                                            allow or forbid /abuse_reports for ACCT
  migrate                                   bring a table written by an earlier version to
                                            the current layout (idempotent; make run does
                                            it at start)
  set-role --account ACCT --user USR (--admin|--member)
                                            change a user's role (its API keys follow at once)
  set-hostname-status --account ACCT --report abrp_... --hostname HOST
                      --status (PENDING|BANNED|UNBANNED|IGNORE)
                                            record the action taken on one hostname of an
                                            abuse report; the report's status follows
  lift-ip-restrictions --account ACCT       set enforced: false on the account's api and
                                            dashboard IP restrictions (the way back from a
                                            lock-out; they stay and log what they would
                                            refuse)
  check-edges [--json]                      report stored edges whose hostports break the
                                            ownership rule (HTTPS: a domain the account
                                            reserved or a free name under the base domain;
                                            TCP: an address the account reserved); exit
                                            status 1 when there is any. Nothing is changed.
"""

import argparse
import json
import sys
from typing import List, Optional

from chalicelib import abuse_reports, accounts, edge_modules, ip_restrictions, migrate
from chalicelib.core import errors, store
from chalicelib.core.config import get_settings


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chalicelib.admin", description="Operator commands of the tunnel service"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("create-table", help="create the table if it does not exist")
    table.add_argument("--pitr", action="store_true", help="turn on point-in-time recovery")
    boot = sub.add_parser("bootstrap", help="new account with an admin user and API key")
    boot.add_argument("--name", default="")
    boot.add_argument("--abuse-reporter", action="store_true")
    boot.add_argument("--json", action="store_true", help="print one JSON object instead")
    member = sub.add_parser("add-member", help="new user of an account, with an API key")
    member.add_argument("--account", required=True)
    member.add_argument("--admin", action="store_true", help="make the new user an admin")
    member.add_argument("--name", default="")
    member.add_argument("--json", action="store_true")
    reporter = sub.add_parser("set-abuse-reporter", help="allow or forbid abuse reports")
    reporter.add_argument("--account", required=True)
    on_off = reporter.add_mutually_exclusive_group(required=True)
    on_off.add_argument("--on", action="store_true")
    on_off.add_argument("--off", action="store_true")
    sub.add_parser("migrate", help="bring the table to the current layout (idempotent)")
    set_role = sub.add_parser("set-role", help="change a user's role")
    set_role.add_argument("--account", required=True)
    set_role.add_argument("--user", required=True)
    admin_or_member = set_role.add_mutually_exclusive_group(required=True)
    admin_or_member.add_argument("--admin", action="store_true")
    admin_or_member.add_argument("--member", action="store_true")
    hostname = sub.add_parser(
        "set-hostname-status",
        help="set the action taken on one hostname of an abuse report",
        description="Set the status of one hostname of an abuse report (PENDING, BANNED, "
        "UNBANNED or IGNORE). The report's status follows: PENDING while all "
        "hostnames are PENDING, PROCESSED when none is, PARTIALLY_PROCESSED "
        "otherwise. Prints the report's id, status and hostnames as JSON.",
    )
    hostname.add_argument("--account", required=True, help="the reporting account (acct_...)")
    hostname.add_argument("--report", required=True, help="the abuse report id (abrp_...)")
    hostname.add_argument("--hostname", required=True, help="a hostname of that report")
    hostname.add_argument(
        "--status", required=True, type=str.upper, choices=abuse_reports.HOSTNAME_STATUSES
    )
    lift = sub.add_parser(
        "lift-ip-restrictions",
        help="stop enforcing an account's api and dashboard IP restrictions",
    )
    lift.add_argument("--account", required=True)
    check = sub.add_parser(
        "check-edges",
        help="report edges whose hostports break the ownership rule",
        description="List every stored edge hostport the edge's account may not serve (an "
        "HTTPS hostport not under a domain the account reserved nor a free name "
        "under the base domain; a TCP hostport that is not an address the "
        "account reserved). Changes nothing; exit status 1 when any is found. "
        "Scans the table.",
    )
    check.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)

    try:
        if args.command == "create-table":
            pitr = args.pitr or get_settings().stage == "prod"
            created = store.create_table(point_in_time_recovery=pitr)
            print("table created" if created else "table already exists")
        elif args.command == "bootstrap":
            result = accounts.bootstrap(args.name, abuse_reporter=args.abuse_reporter)
            _print_key(result, args.json)
        elif args.command == "add-member":
            role = "admin" if args.admin else "member"
            result = accounts.user_with_key(args.account, role, args.name)
            _print_key(result, args.json)
        elif args.command == "set-abuse-reporter":
            accounts.set_abuse_reporter(args.account, bool(args.on))
            print(f"account {args.account}: abuse reporter {'on' if args.on else 'off'}")
        elif args.command == "migrate":
            print(json.dumps(migrate.run()))
        elif args.command == "set-role":
            role = "admin" if args.admin else "member"
            accounts.set_role(args.account, args.user, role)
            print(f"user {args.user}: role {role}")
        elif args.command == "set-hostname-status":
            print(
                json.dumps(
                    abuse_reports.set_hostname_status(
                        args.account, args.report, args.hostname, args.status
                    )
                )
            )
        elif args.command == "lift-ip-restrictions":
            lifted = ip_restrictions.lift(args.account)
            print(f"account {args.account}: not enforced now: {', '.join(lifted) or 'none'}")
        elif args.command == "check-edges":
            return _check_edges(args.json)
    except errors.ApiError as exc:
        print(f"error: {exc.msg}", file=sys.stderr)
        return 1
    return 0


def _check_edges(as_json: bool) -> int:
    violations = edge_modules.ownership_violations()
    for v in violations:
        print(
            json.dumps(v)
            if as_json
            else f"{v['account_id']} {v['kind']} {v['edge_id']} {v['hostport']}: {v['reason']}"
        )
    if not as_json:
        print(f"{len(violations)} hostport(s) break the ownership rule", file=sys.stderr)
    return 1 if violations else 0


def _print_key(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    print(f"account: {result['account_id']}")
    print(f"user:    {result['user_id']} ({result['role']})")
    print(f"api key: {result['api_key_id']} (the token below is shown only now)")
    print(result["token"])


if __name__ == "__main__":
    sys.exit(main())
