"""Online agent sessions: ``/tunnel_sessions`` (read-only, written by the edge).

Fields, as the hosted API and its official clients read them: id, uri, agent_version,
credential (Ref to the credential whose authtoken started the session, or to the SSH
credential of a session of the edge's SSH gateway: docs/SSH.md), ip, metadata, os,
region, started_at, transport (``ngrok/2``, or ``ssh`` for the SSH gateway's).

Rules (where the hosted docs are silent, decided here):
- Only live sessions are shown: a session whose edge has not refreshed it for
  ONLINE_STALE_SECONDS (45 s) is offline (chalicelib.core.online) and is a 404 like an unknown id.
- ``POST /tunnel_sessions/{id}/stop`` and ``/restart`` tell the truth: the API writes the
  command for the edge holding the session and waits for the agent's answer (the edge takes
  it within EDGE_COMMAND_POLL_SECONDS, 1 s, and gives the agent AGENT_COMMAND_TIMEOUT, 10 s;
  the API waits at most COMMAND_WAIT_SECONDS, 20 s, reading the answer every 0.5 s:
  chalicelib.core.online). Then:
  - the agent accepted: 204; the edge has ended the session (the agent exits or restarts),
    so it is no longer listed;
  - the agent refused (the official SDKs refuse when the program set no stop or restart
    handler), or did not answer within 10 s: 400 ERR_NGROK_805 "This ngrok agent does not
    support remote stopping: REASON." (ERR_NGROK_804 "... remote restarting: REASON." for
    restart), the hosted service's codes, REASON the agent's own words; the session is
    kept (the edge does not end it: the agent would only reconnect);
  - the session ended before the edge could send the command: 404, as an unknown id;
  - no edge answered within 20 s (the holding edge is down or cut off from the store): 409
    ERR_COMMAND_NOT_ANSWERED; the command is withdrawn, so it is not carried out later.
  A 4xx every time, never a 5xx: the official clients raise their API error, with the
  message, only for a 4xx. Like changing a credential, a member or bot may do so only for
  sessions started with credentials it owns (403); admins for all. The body must be empty
  or ``{}``.
- ``POST /tunnel_sessions/{id}/update`` is refused with 400 ERR_UNSUPPORTED_OPERATION: this
  service does not distribute agent binaries. Update the agent or SDK package, then restart
  it. An unknown or offline session is a 404 first. Not the hosted ERR_NGROK_806 ("This ngrok
  agent does not support remote updating"): the agent is never asked, and that message would
  blame it for what the service does not offer.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from chalicelib.core import errors, ids, online, store
from chalicelib.web import Ctx

COLLECTION = online.SESSIONS
PREFIX = online.SESSION_PREFIX
PATH = "/tunnel_sessions"
LIST_KEY = "tunnel_sessions"
WHAT = "tunnel session"


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    credential_id = data.get("credential_id")
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "agent_version": data.get("agent_version", ""),
        "credential": c.ref(_credential_path(credential_id), credential_id)
        if credential_id
        else None,
        "ip": data.get("ip", ""),
        "metadata": data.get("metadata", ""),
        "os": data.get("os", ""),
        "region": data.get("region", ""),
        "started_at": data.get("started_at"),
        "transport": data.get("transport", ""),
    }


def _credential_path(credential_id: str) -> str:
    """Where the session's credential is: an SSH credential for a session of the edge's SSH
    gateway (``transport: "ssh"``; or the SSH user certificate it authenticated with), else
    an authtoken credential."""
    if ids.is_valid(credential_id, ids.PREFIXES["ssh_credential"]):
        return "/ssh_credentials"
    if ids.is_valid(credential_id, ids.PREFIXES["ssh_user_certificate"]):
        return "/ssh_user_certificates"
    return "/credentials"


def get(c: Ctx, session_id: str) -> Dict[str, Any]:
    item, _ = online.live_item(c.account_id, COLLECTION, PREFIX, session_id, WHAT)
    return render(c, item)


def list_page(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool, Optional[str]]:
    pairs, more, cursor = online.live_page(c.account_id, COLLECTION, limit, before_id)
    return [render(c, item) for item, _ in pairs], more, cursor


def _live_owned(c: Ctx, session_id: str) -> store.Item:
    item, _ = online.live_item(c.account_id, COLLECTION, PREFIX, session_id, WHAT)
    if item.data.get("owner_id") != c.principal.id:
        c.principal.require_admin(
            "stop or restart tunnel sessions of another user's or bot's credentials"
        )
    return item


def _answered(command: online.Command, refused: Callable[[str], errors.ApiError]) -> None:
    """Wait for the edge's answer to ``command``; return when the agent accepted it."""
    answer = online.await_answer(command)
    if answer is None:
        raise errors.CommandNotAnswered(
            f"No answer about tunnel session {command.session_id} within "
            f"{online.COMMAND_WAIT_SECONDS:g} s: the edge that holds it did not take the "
            f"{command.command} command (it may be down or cut off from the store). The "
            "command was withdrawn; try again."
        )
    outcome = answer["outcome"]
    if outcome == "accepted":
        return
    if outcome == "refused":
        raise refused(answer["error"] or "the agent gave no reason")
    if outcome == "gone":
        raise errors.NotFound(f"No {WHAT} with id '{command.session_id}' exists")
    raise errors.CommandNotAnswered(
        f"The edge that holds tunnel session {command.session_id} took the "
        f"{command.command} command too late to answer within "
        f"{online.COMMAND_WAIT_SECONDS:g} s and did not send it; try again."
    )


def stop(c: Ctx, session_id: str) -> None:
    _live_owned(c, session_id)
    _answered(online.request_stop(c.account_id, session_id), errors.AgentStopRefused)


def restart(c: Ctx, session_id: str) -> None:
    _live_owned(c, session_id)
    _answered(online.request_restart(c.account_id, session_id), errors.AgentRestartRefused)


def request_update(c: Ctx, session_id: str) -> None:
    online.live_item(c.account_id, COLLECTION, PREFIX, session_id, WHAT)
    raise errors.UnsupportedOperation(
        "Agent updates are not offered by this service: update the agent (or SDK) package "
        f"where it runs, then restart it (POST {PATH}/{session_id}/restart)"
    )


ACTIONS = {"stop": stop, "restart": restart, "update": request_update}
