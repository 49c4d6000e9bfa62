"""Labeled tunnels of an HTTPS edge's tunnel group spread over every instance of a cluster
(docs/CLUSTER.md, "Tunnel groups across instances").

A public HTTP or HTTPS/1.1 connection for an HTTPS edge's hostname lands on any instance; its
first request's route names tunnel-group backends (labels). The online labeled tunnels that
match, on every instance (chalicelib.core.online.online_tunnels: one Query of the account's
tunnels, one BatchGetItem of their sessions and one of their instances' leases; cached
CACHE_SECONDS per account and label set), are the candidates: one is picked at random (so
connections spread in proportion to the tunnels each instance holds). When it is another
instance's, the whole connection is relayed there (edge/cluster.py, relay kinds ``ghttp`` /
``ghttps``) and served by that instance as one of its own public connections: the route,
its modules and the pick among its own labeled tunnels. Connection, not request, routing, as
for every relay.

An HTTP/2 connection (ALPN h2) carries requests for any route, so it is spread before any of
them is read (:meth:`GroupSpread.target_h2`): a tunnel is picked at random among those, on
every instance, of the instances holding a matching tunnel for **every** label set of the
edge's routes (else among all the edge's tunnels), and the connection goes to its instance
(relay kind ``gh2``).

An HTTPS edge with a route whose traffic policy has a ``rate-limit`` is not spread: every
connection of it, HTTP/1.1 or HTTP/2, goes to one designated instance
(:meth:`GroupSpread.designated`), so that one counter sees all its requests (the designation
wins over the spread; docs/CLUSTER.md says why).

A TCP edge's connection (on its reserved address's port, which every instance listens on) is
spread the same way over its tunnel group's tunnels (:meth:`GroupSpread.target_tcp`, relay
kind ``gtcp``); the receiving instance runs the edge's ``on_tcp_connect`` rules.
"""

import random
import time
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import instances, online
from edge.designation import candidates, designate, not_refused, route_rate_limited

CACHE_SECONDS = 1.0
MAX_CACHED = 4096


class GroupSpread:
    def __init__(self, edge: Any, instance_id: str) -> None:
        self.edge = edge
        self.instance_id = instance_id
        self._cache: Dict[Any, Tuple[float, Any]] = {}
        self.spread_out = 0  # connections relayed to another instance's labeled tunnel
        self.designated_out = 0  # rate-limited edges' connections relayed to their instance

    async def _cached(self, key: Any, func: Any, *args: Any) -> Any:
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        value = await self.edge.call(func, *args)
        if len(self._cache) > MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (now, value)
        return value

    async def has_groups(self, host: str) -> bool:
        """Whether any route of the HTTPS edge serving ``host`` uses a tunnel group (cached:
        the router's reads)."""
        _, sets = await self.edge.router.group_labels(host, None)
        return bool(sets)

    async def _online(self, account_id: str, labels: Dict[str, str]) -> List[Dict[str, Any]]:
        """The account's online tunnels carrying ``labels``, on every instance (cached)."""
        key = ("group", account_id, tuple(sorted(labels.items())))
        found: List[Dict[str, Any]] = await self._cached(
            key, online.online_tunnels, account_id, labels
        )
        return found

    async def _address(self, instance: Optional[str]) -> Optional[str]:
        if not instance or instance == self.instance_id:
            return None
        address: Optional[str] = await self._cached(
            ("address", instance), instances.address_of, instance
        )
        return address

    async def target(self, host: str, head: bytes) -> Optional[str]:
        """The relay address of the instance that serves this connection, or None: here."""
        line = head.split(b"\r\n", 1)[0].split(b" ")
        if len(line) < 2:
            return None
        account_id, sets = await self.edge.router.group_labels(host, line[1])
        if not sets:
            return None
        tunnels: Dict[str, Dict[str, Any]] = {}
        for labels in sets:
            tunnels.update({t["tunnel_id"]: t for t in await self._online(account_id, labels)})
        if not tunnels:
            return None
        return await self._address(pick(list(tunnels.values())))

    async def target_h2(self, host: str) -> Optional[str]:
        """An HTTP/2 connection's instance (relay address, or None: here), before any of its
        requests is read: a tunnel at random among those of the instances that hold one of
        every label set of the edge's routes (so every route can be served there), else
        among all of the edge's tunnels."""
        account_id, sets = await self.edge.router.group_labels(host, None)
        if not sets:
            return None
        found = [await self._online(account_id, labels) for labels in sets]
        return await self._address(pick_covering(found))

    async def target_tcp(self, hostport: str) -> Optional[str]:
        """A TCP edge's connection (its reserved address ``hostport``): the instance of a
        tunnel picked at random among its tunnel group's online tunnels on every instance
        (relay address, or None: here)."""
        account_id, sets = await self.edge.router.tcp_group_labels(hostport)
        tunnels: Dict[str, Dict[str, Any]] = {}
        for labels in sets:
            tunnels.update({t["tunnel_id"]: t for t in await self._online(account_id, labels)})
        return await self._address(pick(list(tunnels.values())))

    async def designated(
        self, host: str, refused: Optional[Dict[str, float]] = None
    ) -> Tuple[bool, Optional[str]]:
        """(True, address or None: here) when the HTTPS edge serving ``host`` has a route
        whose traffic policy has a rate-limit: its one instance, by rendezvous hashing of the
        edge's id (not the hostname: an edge's hostnames share its counters) over the
        serving instances that hold its labeled tunnels (designation.candidates), read
        through the same caches, but for the relay addresses in ``refused`` that refused a
        connection since their lease's last renewal (killed, their lease not yet ended). (False, None) for any other
        host."""
        found = await self.edge.router.https_edge_for(host)
        if found is None:
            return False, None
        edge, routes = found
        if not any(isinstance(r, dict) and route_rate_limited(r) for r in routes):
            return False, None
        account_id, sets = await self.edge.router.group_labels(host, None)
        holding = [
            {t.get("instance_id") or "" for t in await self._online(account_id, labels)}
            for labels in sets
        ]
        live: List[Dict[str, Any]] = await self._cached(("live",), instances.live_instances)
        live = not_refused(live, refused or {})
        chosen = designate(str(edge.get("id") or host), candidates(live, holding))
        if chosen is None or chosen["instance_id"] == self.instance_id:
            return True, None
        return True, str(chosen["address"])


def pick(tunnels: List[Dict[str, Any]]) -> Optional[str]:
    """The instance of a tunnel picked at random (connections spread in proportion to the
    tunnels each instance holds)."""
    if not tunnels:
        return None
    chosen: Optional[str] = random.choice(sorted(tunnels, key=lambda t: t["tunnel_id"]))[
        "instance_id"
    ]
    return chosen


def pick_covering(found: List[List[Dict[str, Any]]]) -> Optional[str]:
    """For an HTTP/2 connection: ``found`` lists each label set's online tunnels; the pick is
    among the tunnels of the instances holding one of every set, else among all of them."""
    every = set.intersection(*({t["instance_id"] for t in ts} for ts in found)) if found else set()
    tunnels = {t["tunnel_id"]: t for ts in found for t in ts}
    covering = [t for t in tunnels.values() if t["instance_id"] in every]
    return pick(covering or list(tunnels.values()))
