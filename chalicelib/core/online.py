"""Online state: the agent sessions, tunnels and endpoints the edge holds, and the hostnames
they serve.

The edge (``edge/``) is the only writer of these items; the API reads them for
``/tunnel_sessions``, ``/tunnels`` and ``/endpoints`` (chalicelib.tunnel_sessions, .tunnels,
.endpoints, through :func:`live_page` and :func:`live_item` at the end of this module). The
edge should heartbeat a session well within STALE_SECONDS (e.g. every third of it).

Items (keys from chalicelib.core.store's builders, like every resource)
-----------------------------------------------------------------

| item           | pk                                          | sk          | ``owner``      |
|----------------|---------------------------------------------|-------------|----------------|
| tunnel session | ``collection_pk(account, "tunnel_session")`` | ``ts_…``   | (none)         |
| tunnel         | ``collection_pk(account, "tunnel")``         | ``tn_…``   | its session id |
| endpoint       | ``collection_pk(account, "endpoint")``       | ``ep_…``   | its session id |
| served name    | ``unique_pk("served_host", name)``           | ``U``      | its endpoint id|
| credential's session | ``collection_pk(account, "credential_session#" + credential)`` | ``ts_…`` | (none) |

A credential's session item (``instance_id``, ``heartbeat_at``, ``expires_at`` only) is
written with its session item in one TransactWriteItems, its TTL pushed with the session's and
removed just before it, so the sessions-per-credential quota (:func:`live_credential_sessions`)
reads one partition holding that credential's sessions alone: its cost does not grow with the
account's other sessions.

Every item carries, at the top level, ``instance_id`` (the edge instance that holds the
session), ``heartbeat_at`` (epoch seconds) and ``expires_at`` (epoch seconds; the table's
DynamoDB TTL attribute, so items of an edge that died are deleted by DynamoDB eventually).
A session also keeps ``children``: the ids of its tunnels and endpoints and its claims
(``claim|<endpoint id>|<name>``), so that ending a session needs no Query.

Liveness (the choice that keeps heartbeats cheap)
-------------------------------------------------
- A **session** is live while its last proof of life is at most :data:`STALE_SECONDS` old
  (setting ``ONLINE_STALE_SECONDS``, default 45): the later of its own ``heartbeat_at`` (the
  time it was written) and the last renewal of the lease of the instance that holds it
  (chalicelib.core.leases: one write per instance every few seconds keeps all its sessions
  live, so the edge writes a session only on transitions). :func:`session_heartbeat`, one
  UpdateItem of the session item, is the per-session alternative the edge no longer uses.
- A **tunnel or endpoint** is live while its session is live: views read a page of tunnels /
  endpoints with one Query and the sessions they name with one BatchGetItem, and skip those
  whose session is missing or stale. A cloud endpoint (``type: "cloud"``, created by the API;
  no session) is always live.
- A **served-name claim** (service-wide: one hostname, or one ``host:port`` TCP address, is
  served by one endpoint) is live while the endpoint it names is live; while that endpoint
  item does not exist yet (claimed, tunnel not started), while the claim's own heartbeat
  (its claim time) is fresh. The check costs reads only when a claim is contested.
- TTL: sessions expire ``EXPIRE_AFTER_SECONDS`` after they were written or last refreshed,
  children (tunnels, endpoints, claims) ``CHILD_TTL_SECONDS``; the holding edge refreshes a
  session and its children (:func:`session_refresh`, one UpdateItem each) every
  ``CHILD_TTL_SECONDS / 2`` of the session's life, so only the items of a dead instance
  expire.

Stop / restart (the API waits for the agent's answer)
-----------------------------------------------------
:func:`request_stop` / :func:`request_restart` write a command item in the holding instance's
command partition (``EDGE_COMMAND#<instance>``, sort key ``<session id>#<command id>``: two
requests never overwrite each other) with a deadline :data:`COMMAND_WAIT_SECONDS` ahead, and
set a flag on the session item that :func:`session_heartbeat` returns and clears. The edge
reads the partition with one Query every ``EDGE_COMMAND_POLL_SECONDS`` (:func:`take_commands`:
each command is taken once), sends the command to the agent, and writes the outcome in a
result item (``EDGE_COMMAND_RESULT#<command id>``, :func:`answer_command`): ``accepted``,
``refused`` with the agent's error, ``gone`` (the edge no longer holds the session) or
``expired`` (taken too late to be answered in time). The API reads it every
:data:`COMMAND_POLL_SECONDS` until the deadline (:func:`await_answer`); without an answer by
then it withdraws the command (:func:`withdraw_command`). The edge sends a command only when
the agent's answer (at most :data:`AGENT_COMMAND_TIMEOUT`) can still arrive before the
deadline, with :data:`COMMAND_MARGIN_SECONDS` to spare for the store: a command the API gave
up on is never carried out later. (The deadline is the API's clock read by the edge's: hosts
kept by NTP differ by milliseconds, well inside the margin.)

Multi-instance: nothing here lives in process memory. Each item names the instance that holds
the session, so an instance that receives a public connection for an endpoint it does not
hold finds the holder in the endpoint's ``instance_id``.
"""

import time
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from chalicelib.core import errors, ids, leases, store
from chalicelib.core.config import get_settings

SESSIONS = "tunnel_session"
# One small item per live session under its credential (pk: the account's collection of that
# credential's sessions; sk: the session id), written with the session item in one transaction
# and removed with it: the sessions-per-credential quota reads this partition (at most the
# credential's own sessions) instead of every session of the account.
CREDENTIAL_SESSIONS = "credential_session"
TUNNELS = "tunnel"
ENDPOINTS = "endpoint"
CLAIM_NAMESPACE = "served_host"

SESSION_PREFIX = ids.PREFIXES[SESSIONS]
TUNNEL_PREFIX = ids.PREFIXES[TUNNELS]
ENDPOINT_PREFIX = ids.PREFIXES[ENDPOINTS]

DEFAULT_STALE_SECONDS = 45
EXPIRE_AFTER_SECONDS = 48 * 3600  # a session's TTL; refreshed every CHILD_TTL_SECONDS / 2
CHILD_TTL_SECONDS = 48 * 3600  # tunnels, endpoints, claims; refreshed every half of it
COMMAND_PK = "EDGE_COMMAND#"  # + instance id: stop/restart commands for its sessions
COMMAND_RESULT_PK = "EDGE_COMMAND_RESULT#"  # + command id: what the edge answered
COMMAND_RESULT_SK = "result"
COMMAND_TTL_SECONDS = 3600
# The API's wait for the edge's answer to a stop/restart: within one request (API Gateway and
# the function allow 29 s); it covers the edge's pick-up (EDGE_COMMAND_POLL_SECONDS, 1 s; the
# check loop, EDGE_CHECK_SECONDS, is no longer on this path), the agent's answer
# (AGENT_COMMAND_TIMEOUT) and the store round trips, with room to spare.
COMMAND_WAIT_SECONDS = 20.0
COMMAND_POLL_SECONDS = 0.5  # how often the API reads the answer while it waits
AGENT_COMMAND_TIMEOUT = 10.0  # how long the edge waits for the agent's answer (edge/agents.py)
COMMAND_MARGIN_SECONDS = 2.0  # the edge's room for the store after the agent answered
COMMAND_ID_PREFIX = "cmd"
OUTCOMES = ("accepted", "refused", "gone", "expired")
BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit


def __getattr__(name: str) -> Any:
    """``STALE_SECONDS`` is read from the settings when asked (ONLINE_STALE_SECONDS)."""
    if name == "STALE_SECONDS":
        return get_settings().online_stale_seconds
    raise AttributeError(name)


def stale_seconds() -> int:
    return get_settings().online_stale_seconds


def now() -> float:
    """The clock (tests replace it)."""
    return time.time()


def pause(seconds: float) -> None:
    """The API's wait between two reads of a command's answer (tests replace it)."""
    time.sleep(seconds)


def new_session_id() -> str:
    return ids.new_id(SESSION_PREFIX)


def new_tunnel_id() -> str:
    return ids.new_id(TUNNEL_PREFIX)


def new_endpoint_id() -> str:
    return ids.new_id(ENDPOINT_PREFIX)


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# ---- low-level access: online items are written without the version protocol ----------
# (public: the instance registry, chalicelib/core/instances.py, keeps its items the same way)
# The edge is the only writer of its items and each write is either an upsert or guarded by
# an explicit condition, so the raw client is used (ReturnValues, ADD/REMOVE on sets).
def raw_client() -> Any:
    return store.connection().client


def raw_table() -> str:
    return get_settings().table_name


def raw_key(pk: str, sk: str) -> Dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _session_key(account_id: str, session_id: str) -> Dict[str, Any]:
    return raw_key(store.collection_pk(account_id, SESSIONS), session_id)


def claim_key(name: str) -> Dict[str, Any]:
    return raw_key(store.unique_pk(CLAIM_NAMESPACE, name), store.UNIQUE_SK)


def raw_item(
    pk: str,
    sk: str,
    *,
    kind: str,
    account_id: str,
    data: Dict[str, Any],
    instance_id: str,
    heartbeat_at: float,
    expires_at: float,
    owner: Optional[str] = None,
) -> Dict[str, Any]:
    item = {
        "pk": {"S": pk},
        "sk": {"S": sk},
        "kind": {"S": kind},
        "account_id": {"S": account_id},
        "data": store.to_av(data),
        "refs": {"N": "0"},
        "instance_id": {"S": instance_id},
        "heartbeat_at": {"N": ms_text(heartbeat_at)},
        "expires_at": {"N": _num(expires_at)},
    }
    if owner is not None:
        item["owner"] = {"S": owner}
    return item


def _num(value: float) -> str:
    """Whole epoch seconds (``expires_at``: DynamoDB's TTL wants seconds)."""
    return str(int(value))


def ms_text(value: float) -> str:
    """Epoch seconds with milliseconds (``heartbeat_at``: staleness is decided to the ms)."""
    return f"{value:.3f}"


def get_raw(key: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    return raw_client().get_item(TableName=raw_table(), Key=key, ConsistentRead=True).get("Item")


def _query_raw(pk: str) -> List[Dict[str, Any]]:
    """Every item of partition ``pk`` (strongly consistent; pages followed)."""
    items: List[Dict[str, Any]] = []
    start: Optional[Dict[str, Any]] = None
    while True:
        page = raw_client().query(
            TableName=raw_table(),
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ConsistentRead=True,
            **({"ExclusiveStartKey": start} if start else {}),
        )
        items += page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def data_of(raw: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` as the store keeps it: a map (a JSON string in items of the first layout)."""
    if "data" not in raw:
        return {}
    return (
        store.Item.data.deserialize(raw["data"])
        if "S" in raw["data"]
        else store.from_av(raw["data"])
    )


def num_attr(raw: Dict[str, Any], name: str) -> Optional[float]:
    value = raw.get(name)
    return float(value["N"]) if value else None


def str_attr(raw: Dict[str, Any], name: str) -> Optional[str]:
    value = raw.get(name)
    return value["S"] if value else None


def _is_condition_failure(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _delete_if(key: Dict[str, Any], condition: str, values: Dict[str, Any]) -> bool:
    """Delete ``key`` when ``condition`` holds (``#o`` names ``owner``, a DynamoDB reserved
    word); False, and nothing changed, otherwise."""
    try:
        raw_client().delete_item(
            TableName=raw_table(),
            Key=key,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues=values,
        )
        return True
    except ClientError as exc:
        if _is_condition_failure(exc):
            return False
        raise


def _fresh(heartbeat_at: Optional[float], at: Optional[float] = None) -> bool:
    at = now() if at is None else at
    return heartbeat_at is not None and heartbeat_at >= at - stale_seconds()


SessionProof = Tuple[str, Optional[str], Optional[float]]  # session id, instance, heartbeat_at


def _alive(sessions: Iterable[SessionProof], at: Optional[float] = None) -> set:
    """The ids of the live sessions among ``(session id, instance id, heartbeat_at)``: fresh
    by their own write, else held by their instance's live lease (one BatchGetItem of the
    leases of the instances named, only for sessions not fresh by themselves)."""
    at = now() if at is None else at
    pending = []
    live = set()
    for sid, instance_id, heartbeat_at in sessions:
        if _fresh(heartbeat_at, at):
            live.add(sid)
        elif instance_id and heartbeat_at is not None:
            pending.append((sid, instance_id, heartbeat_at))
    if pending:
        held = leases.read(i for _, i, _ in pending)
        stale = stale_seconds()
        for sid, instance_id, heartbeat_at in pending:
            lease = held.get(instance_id)
            if lease is not None and lease.holds(heartbeat_at, at, stale):
                live.add(sid)
    return live


def _raw_alive(raw: Dict[str, Any]) -> bool:
    sid = str_attr(raw, "sk") or ""
    return sid in _alive([(sid, str_attr(raw, "instance_id"), num_attr(raw, "heartbeat_at"))])


def _item_alive(item: store.Item) -> bool:
    return item.sk in _alive([(item.sk, item.instance_id, item.heartbeat_at)])


# ---- sessions --------------------------------------------------------------------------
def session_started(
    *,
    account_id: str,
    session_id: str,
    credential_id: str,
    instance_id: str,
    agent_version: str,
    os: str,
    ip: str,
    metadata: str,
    region: str,
    transport: str = "ngrok/2",
    owner_id: Optional[str] = None,
) -> None:
    """Write the session item and its credential's index item (CREDENTIAL_SESSIONS), one
    TransactWriteItems of two Puts (upserts: a session id written again is replaced).

    ``owner_id`` is the credential's owner (user or bot; shown as the ``principal`` of the
    session's endpoints); when not given it is read from the credential (one GetItem).
    """
    if not ids.is_valid(session_id, SESSION_PREFIX):
        raise ValueError(f"not a tunnel session id: {session_id!r}")
    if owner_id is None:
        cred = store.get(store.collection_pk(account_id, "credential"), credential_id)
        owner_id = cred.data.get("owner_id") if cred is not None else None
    at = now()
    data = {
        "credential_id": credential_id,
        "agent_version": agent_version,
        "os": os,
        "ip": ip,
        "metadata": metadata,
        "region": region,
        "transport": transport,
        "started_at": _rfc3339(at),
        "owner_id": owner_id,
    }
    item = raw_item(
        store.collection_pk(account_id, SESSIONS),
        session_id,
        kind=SESSIONS,
        account_id=account_id,
        data=data,
        instance_id=instance_id,
        heartbeat_at=at,
        expires_at=at + EXPIRE_AFTER_SECONDS,
    )
    item["children_refresh_at"] = {"N": _num(at + CHILD_TTL_SECONDS / 2)}
    index = {
        "pk": {"S": _credential_sessions_pk(account_id, credential_id)},
        "sk": {"S": session_id},
        "instance_id": {"S": instance_id},
        "heartbeat_at": {"N": ms_text(at)},
        "expires_at": {"N": _num(at + EXPIRE_AFTER_SECONDS)},
    }
    raw_client().transact_write_items(
        TransactItems=[
            {"Put": {"TableName": raw_table(), "Item": item}},
            {"Put": {"TableName": raw_table(), "Item": index}},
        ]
    )


def _credential_sessions_pk(account_id: str, credential_id: str) -> str:
    return store.collection_pk(account_id, f"{CREDENTIAL_SESSIONS}#{credential_id}")


def session_heartbeat(
    account_id: str, session_id: str, instance_id: str
) -> Optional[Dict[str, bool]]:
    """Refresh the session (one UpdateItem) and take its pending commands. The edge does
    not call it (its sessions live by their instance's lease, and it takes commands with
    :func:`take_commands`); bench/edge_bench/online_cost.py measures the built path against it.

    Returns ``{"stop_requested": bool, "restart_requested": bool}`` (the flags are cleared by
    the same write, so each command is returned once), or None when the session item no
    longer exists (ended, or expired): the edge should then close the session.
    """
    at = now()
    try:
        old = raw_client().update_item(
            TableName=raw_table(),
            Key=_session_key(account_id, session_id),
            UpdateExpression="SET heartbeat_at = :hb, expires_at = :exp, instance_id = :i "
            "REMOVE stop_requested, restart_requested",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={
                ":hb": {"N": ms_text(at)},
                ":exp": {"N": _num(at + EXPIRE_AFTER_SECONDS)},
                ":i": {"S": instance_id},
            },
            ReturnValues="ALL_OLD",
        )["Attributes"]
    except ClientError as exc:
        if _is_condition_failure(exc):
            return None
        raise
    refresh_at = num_attr(old, "children_refresh_at")
    if refresh_at is not None and refresh_at <= at:
        _refresh_children(account_id, session_id, old, at)
    moved = str_attr(old, "instance_id") != instance_id
    if moved or (refresh_at is not None and refresh_at <= at):
        _refresh_index(account_id, session_id, old, at, instance_id if moved else None)
    return {
        "stop_requested": "stop_requested" in old,
        "restart_requested": "restart_requested" in old,
    }


def _refresh_children(
    account_id: str, session_id: str, session: Dict[str, Any], at: float, mark: bool = True
) -> None:
    """Push the TTL of the session's tunnels, endpoints and claims forward (one UpdateItem
    each, skipped for items that are gone or no longer this session's)."""
    client = raw_client()
    exp = {":exp": {"N": _num(at + CHILD_TTL_SECONDS)}}
    for child in sorted(session.get("children", {}).get("SS", [])):
        condition, names = "attribute_exists(pk) AND #o = :o", {"#o": "owner"}
        if child.startswith("claim|"):
            _, endpoint_id, name = child.split("|", 2)
            key, owner = claim_key(name), endpoint_id
            # a pool's claim: any of its agent members keeps it (its holder may be dead); one
            # without a TTL (held by a cloud member) stays without
            condition = (
                "attribute_exists(pk) AND (#o = :o OR "
                "(attribute_exists(#d.#a.#e) AND attribute_exists(expires_at)))"
            )
            names = {**names, "#d": "data", "#a": "agents", "#e": endpoint_id}
        else:
            key, owner = _child_key(account_id, child), session_id
        try:
            client.update_item(
                TableName=raw_table(),
                Key=key,
                UpdateExpression="SET expires_at = :exp",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**exp, ":o": {"S": owner}},
            )
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
    if not mark:  # (the edge keeps the schedule itself)
        return
    client.update_item(
        TableName=raw_table(),
        Key=_session_key(account_id, session_id),
        UpdateExpression="SET children_refresh_at = :r",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={":r": {"N": _num(at + CHILD_TTL_SECONDS / 2)}},
    )


def session_refresh(account_id: str, session_id: str) -> bool:
    """Push the TTL of a session and of its tunnels, endpoints and claims forward (the holding
    edge, every CHILD_TTL_SECONDS / 2 of the session's life: one UpdateItem each). False, and
    nothing written, when the session item no longer exists."""
    at = now()
    try:
        old = raw_client().update_item(
            TableName=raw_table(),
            Key=_session_key(account_id, session_id),
            UpdateExpression="SET expires_at = :exp",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":exp": {"N": _num(at + EXPIRE_AFTER_SECONDS)}},
            ReturnValues="ALL_OLD",
        )["Attributes"]
    except ClientError as exc:
        if _is_condition_failure(exc):
            return False
        raise
    _refresh_children(account_id, session_id, old, at, mark=False)
    _refresh_index(account_id, session_id, old, at)
    return True


def _refresh_index(
    account_id: str,
    session_id: str,
    session: Dict[str, Any],
    at: float,
    instance_id: Optional[str] = None,
) -> None:
    """Push the TTL of the session's CREDENTIAL_SESSIONS item forward (and name the instance
    now holding the session, when given): one UpdateItem, skipped when the item is gone."""
    credential_id = data_of(session).get("credential_id")
    if not credential_id:
        return
    expression, values = "SET expires_at = :exp", {":exp": {"N": _num(at + EXPIRE_AFTER_SECONDS)}}
    if instance_id is not None:
        expression += ", instance_id = :i, heartbeat_at = :hb"
        values.update({":i": {"S": instance_id}, ":hb": {"N": ms_text(at)}})
    try:
        raw_client().update_item(
            TableName=raw_table(),
            Key=raw_key(_credential_sessions_pk(account_id, credential_id), session_id),
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=values,
        )
    except ClientError as exc:
        if not _is_condition_failure(exc):
            raise


class Command(NamedTuple):
    """A stop/restart the API wrote for an edge instance (:func:`take_commands`).
    ``command_id`` and ``deadline`` are None for a command of the first layout (one per
    session, answered by nobody)."""

    instance_id: str
    account_id: str
    session_id: str
    command: str  # "stop" | "restart" | "stop_endpoint"
    command_id: Optional[str]
    deadline: Optional[float]  # epoch seconds: the API waits until then, not longer
    target: str = ""  # stop_endpoint: the endpoint id (its agent gets a StopTunnel)


def take_commands(instance_id: str) -> List[Command]:
    """The stop/restart commands the API wrote for ``instance_id``'s sessions, oldest first,
    each removed as it is taken: one Query (a read) per call, plus one DeleteItem per command
    found."""
    client = raw_client()
    pk = COMMAND_PK + instance_id
    found = client.query(
        TableName=raw_table(),
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
    ).get("Items", [])
    commands = []
    for raw in found:
        sk = raw["sk"]["S"]
        data = data_of(raw)
        deadline = data.get("deadline")
        commands.append(
            Command(
                instance_id=instance_id,
                account_id=str_attr(raw, "account_id") or "",
                session_id=data.get("session_id") or sk.split("#")[0],
                command=data.get("command", "stop"),
                command_id=data.get("command_id"),
                deadline=float(deadline) if deadline is not None else None,
                target=str(data.get("target") or ""),
            )
        )
        client.delete_item(TableName=raw_table(), Key=raw_key(pk, sk))
    commands.sort(key=lambda c: c.deadline or 0.0)
    return commands


def answer_command(command: Command, outcome: str, error: str = "") -> None:
    """The edge's answer to ``command`` (one PutItem; nothing for a command of the first
    layout): ``outcome`` one of :data:`OUTCOMES`, ``error`` the agent's words when it refused."""
    if outcome not in OUTCOMES:
        raise ValueError(f"not an outcome: {outcome!r}")
    if command.command_id is None:
        return
    at = now()
    raw_client().put_item(
        TableName=raw_table(),
        Item=raw_item(
            COMMAND_RESULT_PK + command.command_id,
            COMMAND_RESULT_SK,
            kind="edge_command_result",
            account_id=command.account_id,
            data={"outcome": outcome, "error": error, "session_id": command.session_id},
            instance_id=command.instance_id,
            heartbeat_at=at,
            expires_at=at + COMMAND_TTL_SECONDS,
        ),
    )


def command_answer(command_id: str) -> Optional[Dict[str, str]]:
    """The edge's answer to a command (``{"outcome", "error"}``), or None while there is none.
    One GetItem."""
    raw = get_raw(raw_key(COMMAND_RESULT_PK + command_id, COMMAND_RESULT_SK))
    if raw is None:
        return None
    data = data_of(raw)
    return {"outcome": data.get("outcome", ""), "error": data.get("error", "")}


def await_answer(command: Command) -> Optional[Dict[str, str]]:
    """Read the answer to ``command`` every :data:`COMMAND_POLL_SECONDS` (one GetItem each)
    until it is there or :data:`COMMAND_WAIT_SECONDS` have passed since the command was
    written; then None, and the command is withdrawn (:func:`withdraw_command`)."""
    assert command.command_id is not None and command.deadline is not None
    ends = time.monotonic() + max(0.0, command.deadline - now())
    while True:
        pause(min(COMMAND_POLL_SECONDS, max(0.0, ends - time.monotonic())))
        answer = command_answer(command.command_id)
        if answer is not None:
            return answer
        if time.monotonic() >= ends:
            withdraw_command(command)
            return None


def withdraw_command(command: Command) -> None:
    """Remove a command not taken yet (one DeleteItem; nothing when the edge took it)."""
    raw_client().delete_item(
        TableName=raw_table(),
        Key=raw_key(
            COMMAND_PK + command.instance_id, f"{command.session_id}#{command.command_id}"
        ),
    )


def _child_key(account_id: str, child_id: str) -> Dict[str, Any]:
    collection = TUNNELS if child_id.startswith(TUNNEL_PREFIX + "_") else ENDPOINTS
    return raw_key(store.collection_pk(account_id, collection), child_id)


def session_ended(
    account_id: str,
    session_id: str,
    instance_id: Optional[str] = None,
    *,
    unbound_credential: Optional[str] = None,
) -> None:
    """Remove the session, its tunnels and endpoints, the names they claimed and its
    CREDENTIAL_SESSIONS item (idempotent: the session item goes last, so a retry after a
    failure still finds the credential of the index item).

    Only items that still belong to this session are removed: a tunnel or endpoint re-bound by
    a reconnected agent's new session (same id, new owner) is left alone, and so is its claim.
    With ``instance_id`` (the edge instance whose session ended), only what that instance
    holds: an agent that resumed the session (same id) on another instance keeps there what
    it re-bound, and the session item when it names the other instance.

    ``unbound_credential``: the edge knows the session has nothing under it (a session id it
    made at this Auth, on which no request came after: no Bind wrote a child) and which
    credential it authenticated. Its two items then go in one TransactWriteItems (each still
    only while ``instance_id`` holds it) instead of a GetItem and two DeleteItems; when the
    transaction is refused (the session resumed on another instance, or an item already gone)
    the whole path below runs.
    """
    if unbound_credential is not None and instance_id is not None:
        held = {
            "ConditionExpression": "instance_id = :i",
            "ExpressionAttributeValues": {":i": {"S": instance_id}},
        }
        try:
            raw_client().transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": raw_table(),
                            "Key": raw_key(
                                _credential_sessions_pk(account_id, unbound_credential),
                                session_id,
                            ),
                            **held,
                        }
                    },
                    {
                        "Delete": {
                            "TableName": raw_table(),
                            "Key": _session_key(account_id, session_id),
                            **held,
                        }
                    },
                ]
            )
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
    raw = get_raw(_session_key(account_id, session_id))
    credential_id = None
    if raw is not None:
        credential_id = data_of(raw).get("credential_id")
        children = raw.get("children", {}).get("SS", [])
        condition, values = _owned(session_id, instance_id)
        removed_endpoints = set()
        for child in children:
            if child.startswith("claim|"):
                continue
            if _delete_if(_child_key(account_id, child), condition, values) and child.startswith(
                ENDPOINT_PREFIX + "_"
            ):
                removed_endpoints.add(child)
        for child in children:
            if child.startswith("claim|"):
                _, endpoint_id, name = child.split("|", 2)
                if endpoint_id in removed_endpoints:
                    release_hostname(name, endpoint_id=endpoint_id, instance_id=instance_id)
    held_here: Dict[str, Any] = {}
    if instance_id is not None:
        held_here = {
            "ConditionExpression": "instance_id = :i",
            "ExpressionAttributeValues": {":i": {"S": instance_id}},
        }
    keys = [_session_key(account_id, session_id)]
    if credential_id:
        keys.insert(0, raw_key(_credential_sessions_pk(account_id, credential_id), session_id))
    for key in keys:
        try:
            raw_client().delete_item(TableName=raw_table(), Key=key, **held_here)
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise


def _update_session(account_id: str, session_id: str, flag: str) -> Command:
    """Set a command flag on a live session and write the command for its instance
    (:func:`take_commands`); NotFound when there is none."""
    raw = get_raw(_session_key(account_id, session_id))
    if raw is None or not _raw_alive(raw):
        raise errors.NotFound(f"No tunnel session with id '{session_id}' exists")
    instance_id = str_attr(raw, "instance_id") or ""
    try:
        raw_client().update_item(
            TableName=raw_table(),
            Key=_session_key(account_id, session_id),
            UpdateExpression=f"SET {flag} = :t",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )
    except ClientError as exc:
        if _is_condition_failure(exc):
            raise errors.NotFound(f"No tunnel session with id '{session_id}' exists") from None
        raise
    return _write_command(account_id, session_id, instance_id, flag.split("_")[0])


def _write_command(
    account_id: str, session_id: str, instance_id: str, name: str, target: str = ""
) -> Command:
    """Write a command for the instance holding the session (one PutItem; taken by
    :func:`take_commands`); the command, to wait for with :func:`await_answer`."""
    at = now()
    command = Command(
        instance_id=instance_id,
        account_id=account_id,
        session_id=session_id,
        command=name,
        command_id=ids.new_id(COMMAND_ID_PREFIX),
        deadline=round(at + COMMAND_WAIT_SECONDS, 3),
        target=target,
    )
    raw_client().put_item(
        TableName=raw_table(),
        Item=raw_item(
            COMMAND_PK + instance_id,
            f"{session_id}#{command.command_id}",
            kind="edge_command",
            account_id=account_id,
            data={
                "command": command.command,
                "command_id": command.command_id,
                "session_id": session_id,
                "deadline": command.deadline,
                **({"target": target} if target else {}),
            },
            instance_id=instance_id,
            heartbeat_at=at,
            expires_at=at + COMMAND_TTL_SECONDS,
        ),
    )
    return command


def request_stop(account_id: str, session_id: str) -> Command:
    """Ask the edge holding the session to send Stop to its agent; the command written (wait
    for its answer with :func:`await_answer`)."""
    if not ids.is_valid(session_id, SESSION_PREFIX):
        raise errors.NotFound(f"No tunnel session with id '{session_id}' exists")
    return _update_session(account_id, session_id, "stop_requested")


def request_stop_endpoint(
    account_id: str, session_id: str, instance_id: str, endpoint_id: str
) -> Command:
    """Ask the edge ``instance_id`` holding the session to stop one of its agent endpoints
    (the agent gets a StopTunnel for it; its session and other endpoints stay up); the
    command written (one PutItem)."""
    return _write_command(account_id, session_id, instance_id, "stop_endpoint", endpoint_id)


def request_restart(account_id: str, session_id: str) -> Command:
    """Ask the edge holding the session to send Restart to its agent; the command written."""
    if not ids.is_valid(session_id, SESSION_PREFIX):
        raise errors.NotFound(f"No tunnel session with id '{session_id}' exists")
    return _update_session(account_id, session_id, "restart_requested")


# ---- tunnels and endpoints --------------------------------------------------------------
INTERNAL_SUFFIX = ".internal"


def claim_name(hostname: str, account_id: str) -> str:
    """The name a hostname's claim is kept under: the hostname itself, service-wide; for an
    internal name (``*.internal``) ``<name>@<account id>``, since internal names are
    namespaced per account (chalicelib.cloud_endpoints)."""
    name = hostname.lower()
    return f"{name}@{account_id}" if name.endswith(INTERNAL_SUFFIX) else name


def _canonical(name: str) -> str:
    """A claim's name compared case-insensitively, but for the account id of an internal
    name's namespace (ids are case-sensitive)."""
    host, at, account = name.partition("@")
    return host.lower() + at + account


def cloud_endpoint_for(name: str) -> Optional[Dict[str, Any]]:
    """The cloud endpoint serving the claim ``name`` (a hostname, or :func:`claim_name` of an
    internal one): the copy its claim carries (``id``, ``account_id``, ``url``, ``host``,
    ``scheme``, ``internal``, ``traffic_policy``), or None. One GetItem; the edge's read."""
    held = get_raw(claim_key(_canonical(name)))
    if held is None:
        return None
    cloud = data_of(held).get("cloud")
    return dict(cloud) if cloud else None


def served_name(
    proto: str, public_url: Optional[str], hostname: Optional[str], port: Optional[int]
) -> Optional[str]:
    """The name an endpoint claims: its hostname, or ``host:port`` for TCP."""
    host, url_port = None, None
    if public_url:
        parts = urlsplit(public_url)
        host, url_port = parts.hostname, parts.port
    host = (hostname or host or "").lower() or None
    if host is None:
        return None
    if proto == "tcp":
        port = port or url_port
        if ":" in host:  # hostname given as "host:port"
            return host
        return f"{host}:{port}" if port else None
    return host


def tunnel_started(
    *,
    account_id: str,
    session_id: str,
    tunnel_id: str,
    instance_id: str,
    proto: str,
    public_url: Optional[str] = None,
    hostname: Optional[str] = None,
    port: Optional[int] = None,
    labels: Optional[Mapping[str, str]] = None,
    forwards_to: str = "",
    metadata: str = "",
    endpoint_id: Optional[str] = None,
    traffic_policy: str = "",
    bind_id: Optional[str] = None,
    domain_id: Optional[str] = None,
    tcp_addr_id: Optional[str] = None,
    description: str = "",
    bindings: Optional[List[str]] = None,
    pooling_enabled: bool = False,
) -> None:
    """Write the tunnel item and, when ``endpoint_id`` is given, the endpoint item, and add
    both to the session, in one transaction (upserts: a re-bind with the same ids replaces
    them). NotFound when the session item does not exist.

    ``domain_id`` / ``tcp_addr_id``: the reserved domain / address the endpoint serves, if any
    (shown as the endpoint's ``domain`` / ``tcp_addr`` refs). ``bind_id`` is the agent's bind
    id (kept for the edge; not shown).
    """
    for value, prefix in ((session_id, SESSION_PREFIX), (tunnel_id, TUNNEL_PREFIX)):
        if not ids.is_valid(value, prefix):
            raise ValueError(f"not a {prefix}_ id: {value!r}")
    if endpoint_id is not None and not ids.is_valid(endpoint_id, ENDPOINT_PREFIX):
        raise ValueError(f"not an endpoint id: {endpoint_id!r}")
    at = now()
    started = _rfc3339(at)
    name = served_name(proto, public_url, hostname, port) if endpoint_id else None
    if name and hostname and hostname.lower().endswith(INTERNAL_SUFFIX):
        name = claim_name(hostname, account_id)  # internal, any protocol: per account
    tunnel = {
        "session_id": session_id,
        "proto": proto,
        "public_url": public_url or "",
        "labels": dict(labels) if labels else None,
        "forwards_to": forwards_to,
        "metadata": metadata,
        "started_at": started,
        "endpoint_id": endpoint_id,
        "bind_id": bind_id,
    }
    common: Dict[str, Any] = dict(
        account_id=account_id,
        instance_id=instance_id,
        heartbeat_at=at,
        expires_at=at + CHILD_TTL_SECONDS,
        owner=session_id,
    )
    ops: List[Dict[str, Any]] = [
        {
            "Put": {
                "TableName": raw_table(),
                "Item": raw_item(
                    store.collection_pk(account_id, TUNNELS),
                    tunnel_id,
                    kind=TUNNELS,
                    data=tunnel,
                    **common,
                ),
            }
        }
    ]
    children = [tunnel_id]
    if endpoint_id is not None:
        endpoint = {
            "type": "agent",
            "session_id": session_id,
            "tunnel_id": tunnel_id,
            "proto": proto,
            "public_url": public_url or "",
            "hostname": hostname,
            "port": port,
            "served_name": name,
            "forwards_to": forwards_to,
            "metadata": metadata,
            "description": description,
            "traffic_policy": traffic_policy,
            "domain_id": domain_id,
            "tcp_addr_id": tcp_addr_id,
            "bind_id": bind_id,
            "bindings": list(bindings or ["public"]),
            "pooling_enabled": pooling_enabled,
            "created_at": started,
            "updated_at": started,
        }
        ops.append(
            {
                "Put": {
                    "TableName": raw_table(),
                    "Item": raw_item(
                        store.collection_pk(account_id, ENDPOINTS),
                        endpoint_id,
                        kind=ENDPOINTS,
                        data=endpoint,
                        **common,
                    ),
                }
            }
        )
        children.append(endpoint_id)
        if name:
            children.append(f"claim|{endpoint_id}|{name}")
    ops.append(
        {
            "Update": {
                "TableName": raw_table(),
                "Key": _session_key(account_id, session_id),
                "UpdateExpression": "ADD children :c",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": {":c": {"SS": children}},
            }
        }
    )
    try:
        raw_client().transact_write_items(TransactItems=ops)
    except ClientError as exc:
        reasons = exc.response.get("CancellationReasons") or []
        if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
            raise errors.NotFound(f"No tunnel session with id '{session_id}' exists") from None
        raise


def tunnel_stopped(account_id: str, tunnel_id: str, instance_id: Optional[str] = None) -> None:
    """Remove the tunnel, its endpoint and the endpoint's claim (idempotent). Only what is
    still the session's and, with ``instance_id``, still that instance's: an agent that
    resumed its session (same id) on another instance before this one saw it go re-bound the
    same items there, and they are that instance's now."""
    raw = get_raw(raw_key(store.collection_pk(account_id, TUNNELS), tunnel_id))
    if raw is None:
        return
    data = data_of(raw)
    session_id = data["session_id"]
    condition, values = _owned(session_id, instance_id)
    removed = []
    if _delete_if(raw_key(store.collection_pk(account_id, TUNNELS), tunnel_id), condition, values):
        removed.append(tunnel_id)
    endpoint_id = data.get("endpoint_id")
    if endpoint_id:
        ep = get_raw(raw_key(store.collection_pk(account_id, ENDPOINTS), endpoint_id))
        if ep is not None and _delete_if(
            raw_key(store.collection_pk(account_id, ENDPOINTS), endpoint_id), condition, values
        ):
            removed.append(endpoint_id)
            name = data_of(ep).get("served_name")
            if name:
                release_hostname(name, endpoint_id=endpoint_id, instance_id=instance_id)
                removed.append(f"claim|{endpoint_id}|{name}")
    if not removed:
        return
    try:
        raw_client().update_item(
            TableName=raw_table(),
            Key=_session_key(account_id, session_id),
            UpdateExpression="DELETE children :c",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":c": {"SS": removed}},
        )
    except ClientError as exc:
        if not _is_condition_failure(exc):
            raise


PATCHABLE = ("metadata", "description", "traffic_policy")


def tunnel_patched(
    account_id: str, session_id: str, tunnel_id: str, endpoint_id: Optional[str], **changes: str
) -> None:
    """A bound endpoint's ``metadata``, ``description`` or ``traffic_policy`` changed by its
    agent (PatchTunnelState): set in its endpoint item (and ``updated_at``) and, metadata, in
    its tunnel item; only items still the session's (a resumed session elsewhere owns them
    then). Two UpdateItems at most."""
    unknown = set(changes) - set(PATCHABLE)
    if unknown:
        raise ValueError(f"not patchable: {sorted(unknown)}")
    owner = {":o": {"S": session_id}}
    targets = []
    if "metadata" in changes:
        targets.append((TUNNELS, tunnel_id, {"metadata": changes["metadata"]}))
    if endpoint_id is not None:
        targets.append((ENDPOINTS, endpoint_id, {**changes, "updated_at": _rfc3339(now())}))
    for kind, sk, fields in targets:
        names = {"#d": "data", "#o": "owner"}
        values = dict(owner)
        sets = []
        for n, (field, value) in enumerate(sorted(fields.items())):
            names[f"#f{n}"], values[f":v{n}"] = field, {"S": value}
            sets.append(f"#d.#f{n} = :v{n}")
        try:
            raw_client().update_item(
                TableName=raw_table(),
                Key=raw_key(store.collection_pk(account_id, kind), sk),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression="attribute_exists(pk) AND #o = :o",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise


def _owned(owner: str, instance_id: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """The condition (for :func:`_delete_if`) that an item is ``owner``'s and, when
    ``instance_id`` is given, held by that instance."""
    values = {":o": {"S": owner}}
    if instance_id is None:
        return "#o = :o", values
    return "#o = :o AND instance_id = :i", {**values, ":i": {"S": instance_id}}


# ---- tunnel ids belong to one account -------------------------------------------------
TUNNEL_ID_NAMESPACE = "tunnel_id"
TUNNEL_ID_SECONDS = 90 * 24 * 3600  # an id unused this long may be forgotten


def claim_tunnel_id(tunnel_id: str, account_id: str) -> bool:
    """Record that ``tunnel_id`` (and so the endpoint id that follows from it) is
    ``account_id``'s: True when it was free or already this account's (its record is
    refreshed), False when another account holds it. An agent re-binds with the id it had, on
    any instance, however long it was away; another account naming that id gets a new one."""
    at = now()
    key = raw_key(store.unique_pk(TUNNEL_ID_NAMESPACE, tunnel_id), store.UNIQUE_SK)
    try:
        raw_client().put_item(
            TableName=raw_table(),
            Item={
                **key,
                "kind": {"S": TUNNEL_ID_NAMESPACE},
                "account_id": {"S": account_id},
                "data": store.to_av({"account_id": account_id}),
                "expires_at": {"N": _num(at + TUNNEL_ID_SECONDS)},
            },
            ConditionExpression="attribute_not_exists(pk) OR account_id = :a",
            ExpressionAttributeValues={":a": {"S": account_id}},
        )
        return True
    except ClientError as exc:
        if _is_condition_failure(exc):
            return False
        raise


# ---- a reconnecting agent gets its generated name back --------------------------------
REBIND_COLLECTION = "rebind_name"
# ---- generated TCP ports of a cluster ------------------------------------------------------
# One item per generated TCP port some instance holds (``TCPGEN`` / the port, 5 digits), so
# every instance of a cluster listens on it and relays its connections to the holder (the
# name's claim says which), as it does for reserved addresses' ports (docs/CLUSTER.md).
GENERATED_PORTS_PK = "TCPGEN"
GENERATED_PORT_SECONDS = 24 * 3600  # an entry's life; its holder renews it after half


def generated_port_opened(port: int, account_id: str, instance_id: str) -> None:
    """``instance_id`` holds a generated TCP endpoint on ``port`` (one PutItem)."""
    at = now()
    raw_client().put_item(
        TableName=raw_table(),
        Item=raw_item(
            GENERATED_PORTS_PK,
            f"{port:05d}",
            kind="tcp_generated",
            account_id=account_id,
            data={},
            instance_id=instance_id,
            heartbeat_at=at,
            expires_at=at + GENERATED_PORT_SECONDS,
        ),
    )


def generated_port_closed(port: int, instance_id: str) -> None:
    """``instance_id`` no longer holds ``port``: its entry goes, unless another instance's
    re-bind took it over meanwhile (one conditional DeleteItem)."""
    try:
        raw_client().delete_item(
            TableName=raw_table(),
            Key=raw_key(GENERATED_PORTS_PK, f"{port:05d}"),
            ConditionExpression="instance_id = :i",
            ExpressionAttributeValues={":i": {"S": instance_id}},
        )
    except ClientError as exc:
        if not _is_condition_failure(exc):
            raise


def generated_ports() -> Dict[int, Dict[str, Any]]:
    """Every generated TCP port an instance holds, not expired: ``{port: {"instance_id",
    "expires_at"}}`` (one Query; its size is bounded by the TCP port range)."""
    at = now()
    out: Dict[int, Dict[str, Any]] = {}
    for item in store.query_all(GENERATED_PORTS_PK):
        expires = float(getattr(item, "expires_at", 0) or 0)
        if expires >= at and item.sk.isdigit():
            out[int(item.sk)] = {"instance_id": item.instance_id, "expires_at": expires}
    return out


REBIND_SECONDS = 3600  # how long a dropped tunnel's generated name is kept for its re-bind


def remember_name(account_id: str, tunnel_id: str, name: str) -> None:
    """Keep the generated hostname (or TCP ``host:port``) a tunnel serves, written when it is
    bound (so an edge that dies still left it) and again when its session ends (REBIND_SECONDS
    from then), so the agent's re-bind of the same tunnel id after a reconnect (the SDKs send
    the old id and keep showing the old URL) is served at the same name, on any instance."""
    at = now()
    raw_client().put_item(
        TableName=raw_table(),
        Item=raw_item(
            store.collection_pk(account_id, REBIND_COLLECTION),
            tunnel_id,
            kind=REBIND_COLLECTION,
            account_id=account_id,
            data={"name": name},
            instance_id="",
            heartbeat_at=at,
            expires_at=at + REBIND_SECONDS,
        ),
    )


def remembered_name(account_id: str, tunnel_id: str) -> Optional[str]:
    """The name :func:`remember_name` kept for ``tunnel_id`` of ``account_id`` within
    REBIND_SECONDS, else None."""
    raw = get_raw(raw_key(store.collection_pk(account_id, REBIND_COLLECTION), tunnel_id))
    if raw is None or (num_attr(raw, "expires_at") or 0) < now():
        return None
    name = data_of(raw).get("name")
    return name if isinstance(name, str) and name else None


# ---- served names (hostnames, TCP addresses): one endpoint each, service-wide ------------
def claim_hostname(hostname: str, *, account_id: str, endpoint_id: str, instance_id: str) -> None:
    """Claim ``hostname`` (or a ``host:port`` TCP address) for ``endpoint_id``.

    Succeeds when nobody holds it, when ``endpoint_id`` already holds it (a reconnect), or
    when the holder is stale (taken over with a write conditioned on the holder and its
    heartbeat as read, so two edges cannot both take it). Conflict when another live endpoint
    holds it. Names are compared lower-cased.
    """
    name = _canonical(hostname)
    key = claim_key(name)
    client = raw_client()
    for _ in range(store.RETRIES):
        item = _claim_item(name, account_id, endpoint_id, instance_id)
        try:
            client.put_item(
                TableName=raw_table(),
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR #o = :o",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":o": {"S": endpoint_id}},
            )
            return
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
        held = get_raw(key)
        if held is None:
            continue
        if claim_is_live(held):
            raise errors.Conflict(f"'{name}' is already served by another endpoint")
        try:
            client.put_item(
                TableName=raw_table(),
                Item=item,
                ConditionExpression="#o = :old AND heartbeat_at = :hb",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":old": held["owner"], ":hb": held["heartbeat_at"]},
            )
            return
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
    raise errors.Conflict(f"'{name}' is being claimed by another endpoint at the same time")


def _claim_item(name: str, account_id: str, endpoint_id: str, instance_id: str) -> Dict[str, Any]:
    at = now()
    return raw_item(
        claim_key(name)["pk"]["S"],
        store.UNIQUE_SK,
        kind="served_host",
        account_id=account_id,
        data={
            "endpoint_id": endpoint_id,
            "account_id": account_id,
            "instance_id": instance_id,
            "name": name,
        },
        instance_id=instance_id,
        heartbeat_at=at,
        expires_at=at + CHILD_TTL_SECONDS,
        owner=endpoint_id,
    )


def take_partner_claim(
    hostname: str,
    *,
    account_id: str,
    endpoint_id: str,
    instance_id: str,
    session_id: str,
    partner_proto: str,
) -> bool:
    """Move the claim of ``hostname`` to ``endpoint_id`` from its partner: the endpoint of the
    same account and the same agent session that serves ``hostname`` over ``partner_proto``
    (the agent CLI 2.x serves one name as two endpoints, http and https, of one session; when
    it reconnects, on any instance, it may re-bind either first). True when moved (or already
    ``endpoint_id``'s); False, and nothing changed, when the holder is anyone else, or is on
    ``instance_id`` itself (bound there: the caller pairs with it instead of taking from it).
    The write is conditioned on the holder and its heartbeat as read, as a stale claim's
    take-over."""
    name = _canonical(hostname)
    held = get_raw(claim_key(name))
    if held is None:
        return False
    owner = held["owner"]["S"]  # every claim names its owner
    if owner == endpoint_id:
        return True
    if (
        str_attr(held, "account_id") != account_id
        or str_attr(held, "instance_id") == instance_id
        or data_of(held).get("pooled")
    ):
        return False
    partner = get_raw(raw_key(store.collection_pk(account_id, ENDPOINTS), owner))
    if partner is None or str_attr(partner, "owner") != session_id:
        return False
    data = data_of(partner)
    if data.get("proto") != partner_proto or _canonical(data.get("served_name") or "") != name:
        return False
    try:
        raw_client().put_item(
            TableName=raw_table(),
            Item=_claim_item(name, account_id, endpoint_id, instance_id),
            ConditionExpression="#o = :old AND heartbeat_at = :hb",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":old": held["owner"], ":hb": held["heartbeat_at"]},
        )
        return True
    except ClientError as exc:
        if _is_condition_failure(exc):
            return False
        raise


def claim_is_live(claim: Dict[str, Any]) -> bool:
    account_id, endpoint_id = str_attr(claim, "account_id"), str_attr(claim, "owner")
    endpoint = (
        get_raw(raw_key(store.collection_pk(account_id, ENDPOINTS), endpoint_id))
        if account_id and endpoint_id
        else None
    )
    if endpoint is None:
        return _fresh(num_attr(claim, "heartbeat_at"))
    session_id = str_attr(endpoint, "owner")
    if session_id is None:  # an endpoint without a session (cloud): live while it exists
        return True
    session = get_raw(_session_key(account_id or "", session_id))
    return (session is not None and _raw_alive(session)) or _pool_member_live(claim)


def _pool_member_live(claim: Dict[str, Any]) -> bool:
    """A pool's claim whose owner is gone is still live while another of its agent members
    is (chalicelib.core.pooling: ``data.agents``): one BatchGetItem of their endpoints, one
    of their sessions, read only when the owner is not live."""
    data = data_of(claim)
    account_id, owner = str_attr(claim, "account_id") or "", str_attr(claim, "owner")
    others = [e for e in (data.get("agents") or {}) if e != owner] if data.get("pooled") else []
    if not others:
        return False
    keys = [raw_key(store.collection_pk(account_id, ENDPOINTS), e) for e in others]
    sessions = [str_attr(raw, "owner") for raw in _batch_get(keys)]
    return bool(live_sessions(account_id, (s for s in sessions if s)))


def release_hostname(
    hostname: str, *, endpoint_id: str, instance_id: Optional[str] = None
) -> None:
    """Free ``hostname`` if ``endpoint_id`` still holds it (and, with ``instance_id``, holds
    it there: a re-bind of the same endpoint on another instance keeps it). Idempotent."""
    _delete_if(claim_key(_canonical(hostname)), *_owned(endpoint_id, instance_id))


def hostname_holder(hostname: str) -> Optional[Dict[str, Any]]:
    """Who serves ``hostname`` now: ``{"account_id", "endpoint_id", "instance_id"}`` of a
    live claim, or None (no claim, or a stale one). For routing across edge instances."""
    held = get_raw(claim_key(_canonical(hostname)))
    if held is None or not claim_is_live(held):
        return None
    return {
        "account_id": str_attr(held, "account_id"),
        "endpoint_id": str_attr(held, "owner"),
        "instance_id": str_attr(held, "instance_id"),
    }


def hostname_holders(
    names: List[str], read: Optional[List[Dict[str, Any]]] = None
) -> Dict[str, Dict[str, Any]]:
    """:func:`hostname_holder` of several names: one BatchGetItem of their claims (or none:
    ``read``, raw items of a BatchGetItem the caller made with :func:`hostname_claim_keys`
    among its keys), then the liveness reads of the claims found (usually none)."""
    keys = hostname_claim_keys(names)
    wanted = {key["pk"]["S"] for key in keys}
    found = {}
    for raw in _batch_get(keys) if read is None else read:
        if str_attr(raw, "pk") not in wanted:
            continue
        if claim_is_live(raw):
            found[str_attr(raw, "pk")] = {
                "account_id": str_attr(raw, "account_id"),
                "endpoint_id": str_attr(raw, "owner"),
                "instance_id": str_attr(raw, "instance_id"),
            }
    return {
        name: found[key["pk"]["S"]] for name, key in zip(names, keys) if key["pk"]["S"] in found
    }


def hostname_claim_keys(names: List[str]) -> List[Dict[str, Any]]:
    return [claim_key(_canonical(name)) for name in names]


# ---- reads -------------------------------------------------------------------------------
def _batch_get(keys: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """BatchGetItem of up to any number of keys (in chunks of 100, unprocessed retried)."""
    pending = list({(k["pk"]["S"], k["sk"]["S"]): k for k in keys}.values())
    found: List[Dict[str, Any]] = []
    client = raw_client()
    while pending:
        chunk, pending = pending[:BATCH_GET_KEYS], pending[BATCH_GET_KEYS:]
        request = {raw_table(): {"Keys": chunk, "ConsistentRead": True}}
        while request:
            answer = client.batch_get_item(RequestItems=request)
            found.extend(answer.get("Responses", {}).get(raw_table(), []))
            request = answer.get("UnprocessedKeys") or {}
    return found


def live_sessions(account_id: str, session_ids: Iterable[str]) -> Dict[str, store.Item]:
    """The live sessions among ``session_ids`` (one BatchGetItem per 100), by id."""
    wanted = [_session_key(account_id, sid) for sid in set(session_ids) if sid]
    items = [store.model().from_raw_data(raw) for raw in _batch_get(wanted)]
    alive = _alive((i.sk, i.instance_id, i.heartbeat_at) for i in items)
    return {item.sk: item for item in items if item.sk in alive}


def live_endpoint_count(account_id: str, proto: Optional[str] = None) -> int:
    """How many of the account's agent endpoints are online (``proto``: only those), service
    wide: one Query of its endpoints and one BatchGetItem of their sessions (a ghost of an
    edge that died is not counted once its session is stale). For the edge's quotas."""
    endpoints = store.query_all(store.collection_pk(account_id, ENDPOINTS))
    mine = [
        item
        for item in endpoints
        if (item.data or {}).get("type") == "agent"
        and (proto is None or (item.data or {}).get("proto") == proto)
    ]
    live = live_sessions(account_id, (sid for sid in map(session_of, mine) if sid))
    return sum(1 for item in mine if session_of(item) in live)


def live_credential_sessions(
    account_id: str, credential_id: str, exclude: Optional[str] = None
) -> int:
    """How many live agent sessions use ``credential_id``, ``exclude`` (a reconnecting
    session's own id) left out. For the edge's sessions-per-credential quota: one Query of
    the credential's CREDENTIAL_SESSIONS items (its own sessions only, whatever the account's
    other credentials hold), their liveness judged as the sessions' (_alive)."""
    proofs = []
    for raw in _query_raw(_credential_sessions_pk(account_id, credential_id)):
        sid = str_attr(raw, "sk") or ""
        if sid != exclude:
            proofs.append((sid, str_attr(raw, "instance_id"), num_attr(raw, "heartbeat_at")))
    return len(_alive(proofs))


def count_auth(credential_id: str, window: int = 60) -> int:
    """Count one authentication with ``credential_id`` in the current ``window``-second
    window (an atomic counter item that expires with it); the count so far."""
    slot = int(now() // window)
    return store.increment(
        store.unique_pk("auth_rate", credential_id), str(slot), expires_at=(slot + 2) * window
    )


def online_tunnels(account_id: str, labels: Mapping[str, str]) -> List[Dict[str, Any]]:
    """The account's live labeled tunnels whose labels contain every pair of ``labels``
    (a tunnel-group backend's match rule). One Query of the account's tunnels and one
    BatchGetItem of their sessions. Each: ``tunnel_id``, ``session_id``, ``instance_id``,
    ``labels``, ``forwards_to``, ``proto``, ``metadata``, ``started_at``."""
    wanted = dict(labels)
    matches = []
    for item in store.query_all(store.collection_pk(account_id, TUNNELS)):
        have = item.data.get("labels") or {}
        if have and all(have.get(k) == v for k, v in wanted.items()):
            matches.append(item)
    live = live_sessions(account_id, (i.data["session_id"] for i in matches))
    return [
        {
            "tunnel_id": i.sk,
            "session_id": i.data["session_id"],
            "instance_id": live[i.data["session_id"]].instance_id,
            "labels": i.data["labels"],
            "forwards_to": i.data.get("forwards_to", ""),
            "proto": i.data.get("proto", ""),
            "metadata": i.data.get("metadata", ""),
            "started_at": i.data.get("started_at"),
        }
        for i in matches
        if i.data["session_id"] in live
    ]


# Views page through items that may be offline, so a page is filled from more than one
# Query when stale items are in the way: each further Query reads 4 times as many items as the
# one before (up to MAX_QUERY_ITEMS), and at most MAX_EXAMINED_PER_PAGE items are read for one
# page, after which the page ends early with a next_page_uri past the items read.
MAX_EXAMINED_PER_PAGE = 1000
MAX_QUERY_ITEMS = 300


def session_of(item: store.Item) -> Optional[str]:
    """The session an item depends on: itself for a session, its owner for a tunnel or an
    agent endpoint, None for an item that needs none (a cloud endpoint)."""
    return item.sk if item.kind == SESSIONS else item.owner


def live_page(
    account_id: str, collection: str, limit: int, before_id: Optional[str]
) -> Tuple[List[Tuple[store.Item, Optional[store.Item]]], bool, Optional[str]]:
    """One newest-first page of the live items of ``collection``, each with its live session.

    Returns ``(pairs, more, cursor)``: ``cursor`` is None when the next page starts after the
    last item returned (the usual case) or the id of the last item read when the page ended
    early (MAX_EXAMINED_PER_PAGE offline items in a row). Cost: one Query of ``limit + 1``
    items and one BatchGetItem of their sessions; more (growing) Queries only while offline
    items keep the page from filling up.
    """
    pk = store.collection_pk(account_id, collection)
    found: List[Tuple[store.Item, Optional[store.Item]]] = []
    sessions: Dict[str, Optional[store.Item]] = {}
    cursor, examined, size = before_id, 0, limit + 1
    while True:
        chunk, more = store.query_page(pk, size, cursor)
        examined += len(chunk)
        size = min(size * 4, MAX_QUERY_ITEMS)
        if collection == SESSIONS:
            alive = _alive((i.sk, i.instance_id, i.heartbeat_at) for i in chunk)
            sessions.update({i.sk: (i if i.sk in alive else None) for i in chunk})
        else:
            wanted = {sid for sid in map(session_of, chunk) if sid} - set(sessions)
            live = live_sessions(account_id, wanted)
            sessions.update({sid: live.get(sid) for sid in wanted})
        for item in chunk:
            sid = session_of(item)
            session = sessions.get(sid) if sid else None
            if sid is None or session is not None:
                found.append((item, session))
                if len(found) > limit:
                    return found[:limit], True, None
        if not more:
            return found, False, None
        cursor = chunk[-1].sk
        if examined >= MAX_EXAMINED_PER_PAGE:
            return found, True, cursor


def live_item(
    account_id: str, collection: str, prefix: str, item_id: str, what: str
) -> Tuple[store.Item, Optional[store.Item]]:
    """A live item by id with its live session, or NotFound (also when offline, malformed or
    another account's)."""
    item = store.get_by_id(account_id, collection, prefix, item_id, what)
    sid = session_of(item)
    if sid is None:
        return item, None
    if sid == item.sk:
        if _item_alive(item):
            return item, item
    else:
        session = store.get(store.collection_pk(account_id, SESSIONS), sid)
        if session is not None and _item_alive(session):
            return item, session
    raise errors.NotFound(f"No {what} with id '{item_id}' exists")


# ---- which instance holds what (edge/cluster.py) --------------------------------------------
def session_instance(account_id: str, session_id: str) -> Optional[str]:
    """The instance id a session's online item names (None: no item). One GetItem."""
    raw = get_raw(_session_key(account_id, session_id))
    return str_attr(raw, "instance_id") if raw is not None else None


def claim_instance(name: str) -> Optional[str]:
    """The instance id the claim of a served name (hostname or host:port) names (None: no
    claim). One GetItem."""
    raw = get_raw(claim_key(_canonical(name)))
    return str_attr(raw, "instance_id") if raw else None


# ---- endpoint pools (chalicelib.core.pooling) -------------------------------------------
def claim_live(claim: Dict[str, Any]) -> bool:
    """Whether a claim as read is held by a live endpoint (a cloud one, or an agent one whose
    session heartbeats)."""
    return claim_is_live(claim)


def batch_get(keys: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """BatchGetItem of any number of keys (items found, in no particular order)."""
    return _batch_get(keys)
