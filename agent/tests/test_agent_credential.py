"""The one-shot command that makes a bot-owned credential for the agent (compose runs it)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

from stacks.paths import AGENT_DIR, BASE_DOMAIN


def _run(stack, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "API_"))}
    env.update({"API_URL": stack.api_url, "API_KEY": stack.admin_key, **(env_extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "tunnel_agent.credential", *args],
        cwd=AGENT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_makes_a_bot_owned_credential_whose_token_runs_the_agent(
    stack, agents, tmp_path, upstream
):
    name = f"bot-{time.time_ns()}"
    out = tmp_path / "secrets" / "authtoken"
    result = _run(stack, "--bot-name", name, "--acl", f"bind:*.{BASE_DOMAIN}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and stat.S_IMODE(out.stat().st_mode) == 0o600
    token = out.read_text().strip()
    bots = stack.call("GET", "/bot_users").json["bot_users"]
    bot = next(b for b in bots if b["name"] == name)
    creds = stack.call("GET", "/credentials").json["credentials"]
    cred = next(c for c in creds if c["owner_id"] == bot["id"])
    assert cred["acl"] == [f"bind:*.{BASE_DOMAIN}"]

    agent = agents("", AGENT_AUTHTOKEN_FILE=str(out))
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream})
    assert created.status == 200, created
    assert stack.public("GET", created.json["url"]).status == 200
    assert token not in agent.log()

    again = _run(stack, "--bot-name", name, "--out", str(out))  # compose restarts: kept
    assert again.returncode == 0 and out.read_text().strip() == token


def test_the_command_reuses_an_existing_bot_and_prints_the_token(stack):
    name = f"bot-{time.time_ns()}"
    first = _run(stack, "--bot-name", name)
    second = _run(stack, "--bot-name", name)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert first.stdout.strip() != second.stdout.strip()
    bots = [b for b in stack.call("GET", "/bot_users").json["bot_users"] if b["name"] == name]
    assert len(bots) == 1


def test_the_command_reports_the_apis_refusal(stack):
    result = _run(stack, "--acl", "bind:not a rule")
    assert result.returncode == 1 and "400" in result.stderr
    result = _run(stack, env_extra={"API_KEY": "wrong"})
    assert result.returncode == 1 and "401" in result.stderr
