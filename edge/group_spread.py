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
for every relay; HTTP/2 connections (ALPN h2) are served where they land.
"""

import random
import time
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import instances, online

CACHE_SECONDS = 1.0
MAX_CACHED = 4096


class GroupSpread:
    def __init__(self, edge: Any, instance_id: str) -> None:
        self.edge = edge
        self.instance_id = instance_id
        self._cache: Dict[Any, Tuple[float, Any]] = {}
        self.spread_out = 0  # connections relayed to another instance's labeled tunnel

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
            key = ("group", account_id, tuple(sorted(labels.items())))
            found: List[Dict[str, Any]] = await self._cached(
                key, online.online_tunnels, account_id, labels
            )
            tunnels.update({t["tunnel_id"]: t for t in found})
        if not tunnels:
            return None
        instance = random.choice(sorted(tunnels.values(), key=lambda t: t["tunnel_id"]))[
            "instance_id"
        ]
        if not instance or instance == self.instance_id:
            return None
        address: Optional[str] = await self._cached(
            ("address", instance), instances.address_of, instance
        )
        return address
