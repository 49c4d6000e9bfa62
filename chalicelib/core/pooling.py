"""Endpoint pools in the store: the served-name claim of a pooled URL holds its members.

A URL is one owner's service-wide through its **claim** (chalicelib.core.online: one item per
name, ``owner`` = the endpoint holding it). A pooled URL's claim says so (``data.pooled``)
and lists every member:

- ``data.clouds``: the ids of its pooled **cloud** endpoints (written by the API, in the
  endpoint's own transaction; chalicelib.cloud_endpoints);
- ``data.agents``: ``{endpoint id: instance id}`` of its pooled **agent** endpoints (written
  by the edge when a pooled agent binds or leaves; edge/pools.py);
- ``data.proto``: the protocol every member has (``http``, ``https``, ``tls``);
- ``pool_version``: bumped by every write, each conditioned on the version read.

The claim's ``owner`` is a cloud member while there is one (a cloud endpoint is live while it
exists, so the claim is then never stale: no agent without pooling can take the URL over),
else an agent member (``instance_id`` naming its edge instance, its TTL refreshed by its
session like any agent claim). When the owner leaves, the next member (cloud first, by id)
takes the claim over in the same write; the last member leaving deletes it. The owner's copy
(``data.cloud``, as a non-pooled cloud endpoint's claim carries) stays where the edge's
lookup of a cloud endpoint reads it; the other cloud members are read from their endpoint
items (:func:`cloud_copies`, one BatchGetItem).

Rules (hosted): every endpoint on a URL enables pooling, or it is alone there; a pool is one
account's and one protocol's; at most :data:`MAX_MEMBERS` endpoints (hosted
``ERR_NGROK_18020``). Mismatches raise :class:`Mismatch` naming which; the API and the edge
turn it into their own error.
"""

from typing import Any, Dict, List, Optional, Tuple

from botocore.exceptions import ClientError

from chalicelib.core import online, store

MAX_MEMBERS = 20  # endpoints (agent and cloud) sharing one URL
API_INSTANCE = "api"  # instance_id of a claim a cloud endpoint holds

# Mismatch kinds
POOL_HERE = "pool_here"  # a non-pooled endpoint on a URL a pool serves
NOT_POOLED_HERE = "not_pooled_here"  # a pooled endpoint on a URL a non-pooled one serves
OTHER_OWNER = "other_owner"  # another account's, or another protocol's pool
FULL = "full"  # MAX_MEMBERS reached


class Mismatch(Exception):
    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind)
        self.kind = kind
        self.detail = detail


def claim_key(name: str) -> Dict[str, Any]:
    return online.raw_key(store.unique_pk(online.CLAIM_NAMESPACE, name), store.UNIQUE_SK)


def read(name: str) -> Optional[Dict[str, Any]]:
    """The claim of ``name`` as stored (one GetItem), or None."""
    return online.get_raw(claim_key(name))


def is_pool(raw: Optional[Dict[str, Any]]) -> bool:
    return raw is not None and bool(online.data_of(raw).get("pooled"))


def members(raw: Optional[Dict[str, Any]]) -> Tuple[List[str], Dict[str, str]]:
    """(cloud member ids, {agent member id: instance id}) of a pool claim."""
    if not is_pool(raw):
        return [], {}
    data = online.data_of(raw or {})
    return sorted(data.get("clouds") or []), dict(data.get("agents") or {})


def _s(raw: Dict[str, Any], name: str) -> Optional[str]:
    value = raw.get(name)
    return value["S"] if value else None


def _live(raw: Dict[str, Any]) -> bool:
    clouds, _ = members(raw)
    return bool(clouds) or online.claim_live(raw)


def _condition(raw: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The write condition: the claim is as it was read."""
    if raw is None:
        return {"ConditionExpression": "attribute_not_exists(pk)"}
    if "pool_version" in raw:
        return {
            "ConditionExpression": "pool_version = :pv",
            "ExpressionAttributeValues": {":pv": raw["pool_version"]},
        }
    return {
        "ConditionExpression": "#o = :old AND heartbeat_at = :hb",
        "ExpressionAttributeNames": {"#o": "owner"},
        "ExpressionAttributeValues": {":old": raw["owner"], ":hb": raw["heartbeat_at"]},
    }


def write_op(
    raw: Optional[Dict[str, Any]],
    name: str,
    account_id: str,
    proto: str,
    clouds: List[str],
    agents: Dict[str, str],
    copies: Dict[str, Dict[str, Any]],
) -> Dict[str, Any]:
    """The TransactWriteItems op leaving the claim of ``name`` with these members (a Put; a
    Delete when none is left), conditioned on the claim as ``raw`` was read. ``copies``: the
    edge's copy of cloud members whose copy is known (needed for the owner's when it
    changes)."""
    table = online.raw_table()
    cond = _condition(raw)
    if not clouds and not agents:
        return {"Delete": {"TableName": table, "Key": claim_key(name), **cond}}
    old_owner = _s(raw, "owner") if raw is not None else None
    old_data = online.data_of(raw) if raw is not None else {}
    at = online.now()
    data: Dict[str, Any] = {
        "account_id": account_id,
        "name": name,
        "pooled": True,
        "proto": proto,
        "clouds": sorted(clouds),
        "agents": dict(agents),
    }
    if clouds:
        owner = old_owner if old_owner in clouds else sorted(clouds)[0]
        instance_id = API_INSTANCE
        copy = copies.get(owner) or (
            old_data.get("cloud") if old_data.get("endpoint_id") == owner else None
        )
        if copy is None:  # a cloud member that was not the owner takes the claim over
            copy = copies_for(account_id, [owner]).get(owner)
        if copy is None:
            raise store.VersionConflict()  # deleted meanwhile: read again
        data["cloud"] = {**copy, "pooled": True}  # the edge's lookup sees a pool
    else:
        owner = old_owner if old_owner in agents else sorted(agents)[0]
        instance_id = agents[owner]
    data.update(endpoint_id=owner, instance_id=instance_id)
    item = {
        **claim_key(name),
        "kind": {"S": online.CLAIM_NAMESPACE},
        "account_id": {"S": account_id},
        "owner": {"S": owner},
        "instance_id": {"S": instance_id},
        "heartbeat_at": {"N": f"{at:.3f}"},
        "refs": {"N": "0"},
        "data": store.to_av(data),
        "pool_version": {"N": str(int((raw or {}).get("pool_version", {"N": "0"})["N"]) + 1)},
    }
    if not clouds:  # an agent's claim: its session refreshes the TTL
        item["expires_at"] = {"N": str(int(at + online.CHILD_TTL_SECONDS))}
    return {"Put": {"TableName": table, "Item": item, **cond}}


def joined(
    raw: Optional[Dict[str, Any]],
    *,
    account_id: str,
    proto: str,
    member_id: str,
    cloud: bool,
    instance_id: str = API_INSTANCE,
) -> Tuple[List[str], Dict[str, str]]:
    """The members after ``member_id`` (pooled) joins the claim ``raw``: a fresh pool when
    there is no claim, or it is stale (its stale owner dropped), or ``member_id`` holds it
    alone; else Mismatch."""
    clouds, agents = members(raw)
    if raw is not None and not is_pool(raw):
        if _s(raw, "owner") == member_id or not online.claim_live(raw):
            clouds, agents = [], {}  # its own claim (now pooled), or a stale one
        elif _s(raw, "account_id") != account_id:
            raise Mismatch(OTHER_OWNER, "another account's endpoint")
        else:
            raise Mismatch(NOT_POOLED_HERE)
    elif raw is not None:
        data = online.data_of(raw)
        owner = _s(raw, "owner")
        if not _live(raw):  # every member gone stale: the pool starts again
            clouds, agents = [], {}
        else:
            if data.get("account_id") != account_id:
                raise Mismatch(OTHER_OWNER, "another account's pool")
            if data.get("proto") != proto:
                raise Mismatch(OTHER_OWNER, f"a pool of {data.get('proto')} endpoints")
            if (
                owner in agents
                and owner != member_id
                and not live_agents(account_id, {owner: agents[owner]})
            ):
                agents.pop(owner)  # a stale agent owner: the pool goes on without it
    clouds = [c for c in clouds if c != member_id]
    agents = {a: i for a, i in agents.items() if a != member_id}
    if len(clouds) + len(agents) >= MAX_MEMBERS and agents:
        agents = live_agents(account_id, agents)  # room left by agents gone offline?
    if len(clouds) + len(agents) >= MAX_MEMBERS:
        raise Mismatch(FULL, f"at most {MAX_MEMBERS} endpoints per pool")
    if cloud:
        clouds.append(member_id)
    else:
        agents[member_id] = instance_id
    return clouds, agents


def live_agents(account_id: str, agents: Dict[str, str]) -> Dict[str, str]:
    """The members of ``agents`` whose endpoint is online (its session live: by its own
    write or its instance's lease, chalicelib.core.leases): one BatchGetItem of their
    endpoint items, one of their sessions (and one of the leases of sessions not fresh by
    their own write). An agent member whose edge died without a word (kill -9) is dropped
    from the pool when a write needs the room or a new owner."""
    if not agents:
        return {}
    keys = [
        online.raw_key(store.collection_pk(account_id, online.ENDPOINTS), eid) for eid in agents
    ]
    sessions = {}
    for raw in online.batch_get(keys):
        owner = _s(raw, "owner")
        if owner:
            sessions[raw["sk"]["S"]] = owner
    fresh = set(online.live_sessions(account_id, sessions.values()))
    return {a: i for a, i in agents.items() if sessions.get(a) in fresh}


def left(raw: Optional[Dict[str, Any]], member_id: str) -> Tuple[List[str], Dict[str, str]]:
    """The members after ``member_id`` leaves; when no cloud member is left to hold the
    claim, only the agent members still online (one of them holds it next)."""
    clouds, agents = members(raw)
    clouds = [c for c in clouds if c != member_id]
    agents = {a: i for a, i in agents.items() if a != member_id}
    if not clouds and agents:
        agents = live_agents(online.data_of(raw or {}).get("account_id", ""), agents)
    return clouds, agents


def _is_condition_failure(exc: ClientError) -> bool:
    code = exc.response.get("Error", {}).get("Code")
    return code in ("ConditionalCheckFailedException", "TransactionCanceledException")


def join_agent(
    name: str, *, account_id: str, proto: str, endpoint_id: str, instance_id: str
) -> bool:
    """A pooled agent endpoint joins the pool of ``name`` (or starts it): True when it now
    holds the claim. Mismatch when it may not; store.VersionConflict after retries."""
    client = online.raw_client()
    for _ in range(store.RETRIES):
        raw = read(name)
        clouds, agents = joined(
            raw,
            account_id=account_id,
            proto=proto,
            member_id=endpoint_id,
            cloud=False,
            instance_id=instance_id,
        )
        op = write_op(raw, name, account_id, proto, clouds, agents, {})["Put"]
        try:
            client.put_item(**op)
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            continue
        return op["Item"]["owner"]["S"] == endpoint_id
    raise store.VersionConflict()


def leave(name: str, endpoint_id: str) -> None:
    """A member leaves the pool of ``name``: the claim passes to the next member, or is
    deleted with the last (idempotent: a claim it is not in is left alone)."""
    client = online.raw_client()
    for _ in range(store.RETRIES):
        raw = read(name)
        if not is_pool(raw):
            return
        clouds, agents = members(raw)
        if endpoint_id not in clouds and endpoint_id not in agents:
            return
        data = online.data_of(raw or {})
        clouds, agents = left(raw, endpoint_id)
        copies = copies_for(data.get("account_id", ""), clouds[:1])
        op = write_op(
            raw, name, data.get("account_id", ""), data.get("proto", ""), clouds, agents, copies
        )
        try:
            if "Put" in op:
                client.put_item(**op["Put"])
            else:
                client.delete_item(**op["Delete"])
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            continue
        return
    raise store.VersionConflict()


def copy_of(endpoint_id: str, data: Dict[str, Any], account_id: str) -> Dict[str, Any]:
    """What the edge needs of a cloud endpoint (``data``: its stored data)."""
    url = data.get("url", "")
    scheme, _, host = url.partition("://")
    return {
        "id": endpoint_id,
        "account_id": account_id,
        "url": url,
        "host": host,
        "port": data.get("port"),
        "scheme": scheme,
        "internal": host.endswith(online.INTERNAL_SUFFIX),
        "traffic_policy": data.get("traffic_policy", ""),
    }


def copies_for(account_id: str, ids: List[str]) -> Dict[str, Dict[str, Any]]:
    if not ids:
        return {}
    keys = [online.raw_key(store.collection_pk(account_id, online.ENDPOINTS), eid) for eid in ids]
    found = {}
    for raw in online.batch_get(keys):
        eid = raw["sk"]["S"]
        found[eid] = copy_of(eid, online.data_of(raw), account_id)
    return found


def cloud_copies(name: str) -> Optional[Dict[str, Any]]:
    """The edge's read of a pooled URL: ``{"account_id", "proto", "clouds": [copy, …],
    "agents": {id: instance}}``, or None when ``name``'s claim is not a pool. One GetItem of
    the claim, and one BatchGetItem of its cloud members' endpoint items."""
    raw = read(name)
    if not is_pool(raw):
        return None
    data = online.data_of(raw or {})
    clouds, agents = members(raw)
    copies = copies_for(data.get("account_id", ""), clouds)
    return {
        "account_id": data.get("account_id"),
        "proto": data.get("proto"),
        "clouds": [copies[c] for c in clouds if c in copies],
        "agents": agents,
    }
