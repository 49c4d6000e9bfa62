"""One-shot: a bot user and a credential it owns, through the management API; prints the
credential's authtoken (the spec's recommended arrangement: each agent its own token, owned
by a bot user).

    python -m tunnel_agent.credential --api-url http://127.0.0.1:8000 --api-key "$API_KEY" \\
        [--bot-name device-agent] [--acl 'bind:*.tunnels.localhost' ...] [--out FILE]

The API key must be an admin's (only admins manage bot users). A bot of that name that
already exists is reused. With ``--out`` the token is written to FILE (mode 0600,
atomically) instead of stdout, and a FILE that already holds a token is left as it is, so
the command can run at every ``docker compose up``. Standard library only: it runs in the
agent's image. Exit codes: 0 done, 1 the API refused (its message on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class ApiFailure(Exception):
    pass


def _call(base: str, key: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base.rstrip("/") + path,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {key}",
            "Ngrok-Version": "2",
            **({"Content-Type": "application/json"} if data is not None else {}),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read())
            message = f"{detail.get('error_code')}: {detail.get('msg')}"
        except ValueError:
            message = err.reason
        raise ApiFailure(f"{method} {path} -> {err.code} {message}") from None
    except OSError as exc:
        raise ApiFailure(f"{method} {path}: cannot reach {base}: {exc}") from None


def _bot(base: str, key: str, name: str) -> dict[str, Any]:
    try:
        return _call(base, key, "POST", "/bot_users", {"name": name})
    except ApiFailure as exc:
        if "-> 409" not in str(exc):
            raise
    path = "/bot_users?limit=100"
    while path:
        page = _call(base, key, "GET", path)
        for bot in page.get("bot_users", []):
            if bot.get("name") == name:
                return bot
        next_uri = page.get("next_page_uri")
        path = (
            urllib.parse.urlsplit(next_uri)._replace(scheme="", netloc="").geturl()
            if next_uri
            else ""
        )
    raise ApiFailure(f"bot user {name!r} exists but was not found in the list")


def make_credential(base: str, key: str, bot_name: str, acl: list[str], description: str) -> str:
    bot = _bot(base, key, bot_name)
    if not bot.get("active", True):
        raise ApiFailure(f"bot user {bot_name!r} ({bot['id']}) is deactivated")
    cred = _call(
        base,
        key,
        "POST",
        "/credentials",
        {"description": description, "owner_id": bot["id"], "acl": acl},
    )
    return cred["token"]


def _write_secret(path: str, token: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".authtoken.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tunnel_agent.credential", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--api-url",
        default=os.environ.get("API_URL"),
        help="the management API's base URL (env API_URL)",
    )
    parser.add_argument(
        "--api-key", default=os.environ.get("API_KEY"), help="an admin's API key (env API_KEY)"
    )
    parser.add_argument(
        "--bot-name",
        default=os.environ.get("AGENT_BOT_NAME", "device-agent"),
        help="the bot user owning the credential (env AGENT_BOT_NAME)",
    )
    parser.add_argument(
        "--acl",
        action="append",
        default=None,
        help="an ACL rule, e.g. 'bind:*.tunnels.localhost' (repeatable; "
        "env AGENT_ACL, comma-separated; none: no restriction)",
    )
    parser.add_argument("--description", default="device agent (tunnel_agent.credential)")
    parser.add_argument(
        "--out",
        default=os.environ.get("AGENT_AUTHTOKEN_FILE"),
        help="write the token to this file (kept if it already holds one)",
    )
    args = parser.parse_args(argv)
    if not args.api_url or not args.api_key:
        print(
            "credential: --api-url and --api-key (or API_URL and API_KEY) are required",
            file=sys.stderr,
        )
        return 2
    acl = (
        args.acl
        if args.acl is not None
        else [rule.strip() for rule in os.environ.get("AGENT_ACL", "").split(",") if rule.strip()]
    )
    if args.out and os.path.exists(args.out) and open(args.out).read().strip():
        print(f"credential: {args.out} already holds a token; left as it is", file=sys.stderr)
        return 0
    try:
        token = make_credential(args.api_url, args.api_key, args.bot_name, acl, args.description)
    except ApiFailure as exc:
        print(f"credential: {exc}", file=sys.stderr)
        return 1
    if args.out:
        _write_secret(args.out, token)
        print(f"credential: token of bot {args.bot_name!r} written to {args.out}", file=sys.stderr)
    else:
        print(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
