"""Endpoint pooling: several agent endpoints of one account on one URL share its traffic.

An endpoint asks for it with its Bind's ``Extra.PoolingEnabled`` (the SDKs'
``pooling_enabled`` / ``poolingEnabled(true)``, ngrok-go's ``BindExtra.PoolingEnabled``). The
rules are the hosted service's:

- every endpoint of a pool enables pooling: a pooled endpoint cannot join a URL a non-pooled
  one serves, nor a non-pooled endpoint a URL a pool serves (ERR_NGROK_334, saying so);
- a pool is one account's, one protocol's (``http``/``https``/``tls``), one URL's; public
  connections to it are spread round robin over its members (``Registry.http_tunnel``);
- endpoints join and leave freely: the first member holds the name's claim (the store item
  that makes one URL one owner service-wide), and when it leaves, the next member takes the
  claim over (``Binds.drop_tunnel``); the URL goes offline with its last member.

The pool is also the store's (chalicelib.core.pooling): the name's claim says it is pooled
and lists its members, agent endpoints (:func:`bind` / :func:`leave`, one conditional write
each) and **cloud endpoints** created through the API with ``pooling_enabled: true``. A public
connection to a pooled URL is spread round robin over the members this instance can reach:
its own agent members and every cloud member (whose traffic policy runs here; their list read
with the claim, cached :data:`CLOUD_CACHE_SECONDS`) (:func:`routed`). In a cluster, a
connection may also be relayed to an instance holding an agent member (:func:`carry`).
TCP addresses and internal endpoints are not pooled here.

A pool whose members are all this instance's agent endpoints the core can carry (no policy, or
one it decides per request) is the compiled core's to spread (:func:`served_here`,
edge/fast_path.py ``Pool``): the same turns, given by the core per request.
"""

import itertools
import time
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import binding, edge_errors, instances, pooling, store
from edge.edges import Routed

POOLABLE = ("http", "https", "tls")


def wants_pooling(extra: Dict[str, Any]) -> bool:
    return extra.get("PoolingEnabled") is True


def join(registry: Any, tunnel: Any, name: str) -> Optional[Any]:
    """Add ``tunnel`` to the pool serving ``name`` on this instance when both enable pooling
    (same account, same protocol); the pool's first member, or None (not joined)."""
    holder = registry.by_host.get(name)
    if (
        holder is None
        or not (holder.pooled and tunnel.pooled)
        or holder.account_id != tunnel.account_id
        or holder.proto != tunnel.proto
        or tunnel.proto not in POOLABLE
    ):
        return None
    if holder.pool is None:
        holder.pool = [holder]
    holder.pool.append(tunnel)
    tunnel.pool = holder.pool
    tunnel.holds_claim = False
    return holder


def refusal(
    exc: binding.Refused, tunnel: Any, holder: Optional[Any], name: str
) -> binding.Refused:
    """The claim's conflict, said the way hosted says it when pooling is involved."""
    if holder is not None and holder.pooled and not tunnel.pooled:
        return binding.Refused(
            exc.code,
            f"The endpoint '{name}' is already online as a pool "
            "of endpoints with pooling enabled; enable pooling "
            "on this endpoint to join it.",
        )
    if tunnel.pooled:
        return binding.Refused(
            exc.code,
            f"The endpoint '{name}' is already online without "
            "pooling enabled (or through another protocol or "
            "account); every endpoint of a pool enables pooling.",
        )
    return exc


CLOUD_CACHE_SECONDS = 1.0  # a pool's cloud members, read once a second per URL at most
_rr = itertools.count()
_carry_rr = itertools.count()  # the cluster's pick (its own turn: see carry)
_pools: Dict[str, Tuple[float, Optional[Dict[str, Any]]]] = {}


async def bind(edge: Any, tunnel: Any, name: str) -> None:
    """A pooled agent endpoint joins the pool of ``name`` in the store (or starts it) and
    the pool of this instance's members; binding.Refused as hosted when it may not."""
    try:
        holds = await edge.call(
            pooling.join_agent,
            name,
            account_id=tunnel.account_id,
            proto=tunnel.proto,
            endpoint_id=tunnel.endpoint_id,
            instance_id=edge.settings.instance_id,
        )
    except pooling.Mismatch as exc:
        if exc.kind == pooling.FULL:
            raise binding.Refused(
                edge_errors.POOL_FULL,
                "The maximum number of endpoints allowed in this pool has been exceeded: "
                f"{pooling.MAX_MEMBERS} endpoints per pool.",
            ) from None
        raise binding.Refused(
            edge_errors.ENDPOINT_IN_USE,
            f"The endpoint '{name}' is already online without "
            "pooling enabled (or through another protocol or "
            "account); every endpoint of a pool enables pooling.",
        ) from None
    except store.VersionConflict:
        raise binding.Refused(
            edge_errors.ENDPOINT_IN_USE,
            f"The endpoint '{name}' is being changed by other endpoints; try again.",
        ) from None
    join(edge.registry, tunnel, name)
    tunnel.holds_claim = holds


async def leave(edge: Any, tunnel: Any, name: str) -> None:
    """A pooled agent endpoint leaves the store's pool of ``name`` (the claim passes to the
    next member, cloud first, or goes with the last)."""
    await edge.call(pooling.leave, name, tunnel.endpoint_id)


async def refused(edge: Any, exc: binding.Refused, tunnel: Any, name: str) -> binding.Refused:
    """:func:`refusal`, also when the pool on ``name`` has no member on this instance (its
    claim, read once, says it is a pool)."""
    holder = edge.registry.by_host.get(name)
    if holder is None and not tunnel.pooled:
        try:
            if pooling.is_pool(await edge.call(pooling.read, name)):
                holder = _POOL
        except Exception:  # the plain refusal then
            pass
    return refusal(exc, tunnel, holder, name)


class _Pool:
    pooled = True


_POOL = _Pool()


async def _pool(edge: Any, name: str) -> Optional[Dict[str, Any]]:
    """The store's pool of ``name`` (chalicelib.core.pooling.cloud_copies), or None; read
    once per CLOUD_CACHE_SECONDS per URL at most."""
    now = time.monotonic()
    hit = _pools.get(name)
    if hit is not None and hit[0] > now:
        return hit[1]
    found = await edge.call(pooling.cloud_copies, name)
    _pools[name] = (now + CLOUD_CACHE_SECONDS, found)
    if len(_pools) > 10000:
        for key in [k for k, v in _pools.items() if v[0] <= now]:
            del _pools[key]
    return found


async def served_here(edge: Any, name: str) -> bool:
    """Whether the store's pool of ``name`` is only agent endpoints of this instance (no cloud
    member, no other instance's agent): this instance's own members then take every turn, and
    the compiled core may spread its requests (edge/fast_path.py)."""
    found = await _pool(edge, name)
    here = edge.settings.instance_id
    return (
        found is not None
        and not found["clouds"]
        and all(i == here for i in found["agents"].values())
    )


async def _cloud_members(edge: Any, name: str) -> List[Dict[str, Any]]:
    found = await _pool(edge, name)
    return list(found["clouds"]) if found else []


def _local_members(edge: Any, host: str) -> List[Any]:
    holder = edge.registry.by_host.get(host)
    if holder is None or not holder.pooled or holder.proto == "tls":
        return []
    return list(holder.pool or [holder])


async def carry(
    cluster: Any, name: str, kind: str, reader: Any, writer: Any, first: bytes = b""
) -> Optional[bool]:
    """A cluster's public connection for ``name`` (edge.cluster): when ``name`` is a pool,
    one member in turn among this instance's agent members, the cloud members (both served
    here) and the agent members of other instances (relayed to theirs): True when relayed,
    False when it is served here, None when ``name`` is no pool (the usual holder lookup)."""
    edge = cluster.edge
    held = edge.registry.by_host.get(name)
    if getattr(writer, "relayed", False) or (held is not None and not held.pooled):
        return None  # relayed once already, or an endpoint here without pooling: no read
    try:
        pool = await _pool(edge, name)
    except Exception:  # the store away: the usual path decides
        return None
    if pool is None or pool.get("proto") == "tls":
        return None
    here = edge.settings.instance_id
    local = len(_local_members(edge, name)) + len(pool["clouds"])
    remote = sorted(i for i in pool["agents"].values() if i != here)
    if local + len(remote) == 0:
        return None
    turn = next(_carry_rr) % (local + len(remote))
    if turn < local:
        return False
    try:
        address = await edge.call(instances.address_of, remote[turn - local])
    except Exception:
        address = None
    if address is None:  # that instance drains or died: served here if it can be
        return False if local else None
    peer = writer.get_extra_info("peername") or ("", 0)
    if await cluster.relay(address, kind, name, peer, reader, writer, first):
        return True
    return False if local else None


async def routed(edge: Any, host: str, scheme: str, relayed: bool = False) -> Optional[Routed]:
    """Where a request for ``host`` goes when it is a pool with a cloud member: one member
    in turn among this instance's agent members (served on ``scheme``'s listener) and the
    cloud members; None when ``host`` is no such pool (the usual routing then), or the
    connection was relayed here by another instance's pick of an agent member of this one
    (:func:`carry`: one of them serves it)."""
    if relayed:
        return None
    holder = edge.registry.by_host.get(host)
    local = []
    if holder is not None:
        if not holder.pooled or holder.proto == "tls":
            return None
        local = [t for t in holder.pool or [holder] if t.proto == scheme or not t.scheme_only]
    else:  # no member here: a pool only if a cloud member holds the claim (the router's
        owner = await edge.router.cloud(host)  # own cached read: no store read added)
        if owner is None or not owner.get("pooled"):
            return None
    clouds = await _cloud_members(edge, host)
    if not clouds or (holder is None and len(clouds) == 1):
        return None  # no cloud member (agents only), or one: the usual routing finds it
    turn = next(_rr) % (len(local) + len(clouds))
    if turn < len(local):
        tunnel = local[turn]
        return Routed(
            endpoint_id=tunnel.endpoint_id or tunnel.id,
            url=tunnel.url,
            host=tunnel.hostname,
            account_id=tunnel.account_id,
            tunnel=tunnel,
            enforcement=tunnel.enforcement,
        )
    cloud = clouds[turn - len(local)]
    if cloud.get("internal"):
        return None
    return await edge.router.cloud_routed(cloud)
