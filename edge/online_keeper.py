"""This instance's share of the online state (docs/CLUSTER.md, "The online state: leases").

Sessions, tunnels and endpoints are written on transitions only (edge/agents.py,
edge/binds.py); what keeps them online is the instance's lease (chalicelib.core.leases):

- :func:`keep_lease` renews the lease of an edge that runs without a cluster (``make run``:
  address ``""``, never a relay target); in a cluster edge/cluster.py renews it with the
  relay address and the draining state. Either way: one PutItem per instance every
  ``instances.renew_seconds()``, whatever the number of sessions.
- :meth:`OnlineKeeper.check` runs once per check of the edge (EDGE_CHECK_SECONDS): the TTL
  refresh of the sessions that have lived another ``CHILD_TTL_SECONDS / 2`` (so the items of
  a live instance never expire; those of a dead one do).
- :meth:`OnlineKeeper.commands` runs every EDGE_COMMAND_POLL_SECONDS (1 s), apart from the
  check: one Query of the instance's command partition (stop/restart asked through the API,
  whose caller waits for the answer: chalicelib.core.online). An idle edge pays 1 read a
  second for it (a strongly consistent Query of an empty partition: 1 read request unit).

Blocking (store calls): the edge runs :meth:`OnlineKeeper.check` in a worker thread;
bench/edge_bench/online_cost.py drives it directly, with a simulated clock.
"""

import asyncio
import logging
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Set, Tuple

from chalicelib.core import instances, online

log = logging.getLogger("edge")

REFRESH_SECONDS = online.CHILD_TTL_SECONDS / 2


class Round(NamedTuple):
    gone: Set[str]  # sessions whose item no longer exists (found at their refresh)


class OnlineKeeper:
    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        self._refresh_at: Dict[str, float] = {}  # session id -> when its TTL is pushed

    def check(self, sessions: Iterable[Tuple[str, str]]) -> Round:
        """One check of this instance's online sessions (``(account id, session id)``)."""
        at = online.now()
        gone: Set[str] = set()
        current = set()
        for account_id, session_id in sessions:
            current.add(session_id)
            due = self._refresh_at.setdefault(session_id, at + REFRESH_SECONDS)
            if at < due:
                continue
            if online.session_refresh(account_id, session_id):
                self._refresh_at[session_id] = at + REFRESH_SECONDS
            else:
                gone.add(session_id)
        for session_id in set(self._refresh_at) - current:
            del self._refresh_at[session_id]
        return Round(gone)

    def commands(self) -> List[online.Command]:
        """The stop/restart commands written for this instance since the last call (each
        taken once)."""
        return online.take_commands(self.instance_id)


async def keep_lease(call: Callable[..., Any], instance_id: str) -> None:
    """Renew ``instance_id``'s lease (no cluster) until cancelled; the first registration is
    the caller's, before the agent listener opens."""
    while True:
        await asyncio.sleep(instances.renew_seconds())
        try:
            await call(instances.register, instance_id, "", "serving")
        except Exception as exc:  # the store away: the next round tries again
            log.warning("lease renewal failed: %r", exc)
