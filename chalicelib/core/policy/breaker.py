"""Circuit breakers, one implementation for the agent option (``CircuitBreaker`` in Bind,
edge/breaker.py) and the ``circuit-breaker`` action, as the hosted service's module and
action describe them:

- responses are counted in a rolling window of ``window`` seconds split into ``buckets``
  buckets (10, fixed, as hosted); a 5xx response (the upstream's, or the edge's own 502 when
  the agent could not reach its upstream) counts as an error;
- once the window holds at least ``volume`` responses and the errors' share reaches
  ``threshold``, the breaker trips: for ``tripped`` seconds every request is answered 503
  ERR_NGROK_3202 by the edge, not forwarded;
- after that it lets requests through again, with the window cleared: a recovered upstream
  closes it, a still failing one trips it again once the volume is met.

Memory: at most ``buckets`` pairs of counters per breaker (a bucket is kept by its tick, the
time in whole bucket spans; those out of the window are dropped at each record). The action's breakers are kept per
(policy action, endpoint) in :data:`BREAKERS`, at most MAX_BREAKERS (the least recently used
dropped first: its endpoint starts again with a closed breaker).
"""

import threading
import time
from collections import OrderedDict
from typing import Callable, Dict, Hashable, List, Optional

WINDOW = 10.0
BUCKETS = 10
VOLUME = 10
TRIPPED = 10.0
MAX_BREAKERS = 10_000


class Breaker:
    def __init__(
        self,
        threshold: float,
        volume: int = VOLUME,
        window: float = WINDOW,
        tripped: float = TRIPPED,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.threshold = threshold
        self.volume = volume
        self.tripped = tripped
        self.clock = clock
        self._span = window / BUCKETS
        # tick (``now`` in whole bucket spans) -> [total, errors]: only the window's buckets
        self._counts: Dict[int, List[int]] = {}
        self.tripped_until = 0.0
        self._lock = threading.Lock()

    def allow(self, now: Optional[float] = None) -> bool:
        """False while tripped (the request is answered 503 and not counted)."""
        return (self.clock() if now is None else now) >= self.tripped_until

    def record(self, status: int, now: Optional[float] = None) -> None:
        now = self.clock() if now is None else now
        with self._lock:
            tick = int(now / self._span)
            oldest = tick - BUCKETS + 1
            counts = self._counts
            for stale in [t for t in counts if not oldest <= t <= tick]:
                del counts[stale]  # out of the window (or ahead of a time given back)
            bucket = counts.setdefault(tick, [0, 0])
            bucket[0] += 1
            bucket[1] += status >= 500
            total = sum(count for count, _ in counts.values())
            errors = sum(bad for _, bad in counts.values())
            if total >= self.volume and errors and errors >= self.threshold * total:
                self.tripped_until = now + self.tripped
                counts.clear()


class Breakers:
    """Breakers by key, at most ``limit`` (least recently used dropped first)."""

    def __init__(self, limit: int = MAX_BREAKERS):
        self.limit = limit
        self._items: "OrderedDict[Hashable, Breaker]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Breaker]) -> Breaker:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
            found = self._items[key] = make()
            while len(self._items) > self.limit:
                del self._items[next(iter(self._items))]  # the least recently used
            return found

    def __len__(self) -> int:
        return len(self._items)


BREAKERS = Breakers()
