"""Sliding-window rate limiting, per key, in this process.

The window is the usual two-counter approximation of a sliding log: the count of the
current fixed window plus the previous window's count weighted by how much of it still
overlaps the sliding window. A request is allowed while that estimate is below capacity.
Memory is one small entry per live key; keys idle for two windows are dropped, and at most
MAX_KEYS are kept (oldest dropped first).

Concurrency: ``hit`` does its whole read-modify-write under a lock and never awaits, so
requests racing on one edge (asyncio tasks, or threads) count exactly once each.

Scope: the state is per edge instance, as the hosted service documents its own limits
("capacity is applied per ingress server"). A cluster of instances keeps the limit exact
without a shared store: every request of an endpoint or HTTPS edge whose policy limits runs
on one instance, its holder or its designated instance (edge/designation.py,
docs/CLUSTER.md); a shared store (a DynamoDB item per key and window updated with an atomic
ADD and a TTL, or Redis INCR + EXPIRE) would plug in at ``hit``.
"""

import math
import threading
from collections import OrderedDict
from typing import Hashable, Tuple

MAX_KEYS = 100_000


class SlidingWindowLimiter:
    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        self.lock = threading.Lock()
        # key -> [window start, count in current window, count in previous window]
        self.entries: "OrderedDict[Hashable, list]" = OrderedDict()

    def hit(self, key: Hashable, capacity: int, window: int, now: float) -> Tuple[bool, int]:
        """Count one request; (allowed, seconds to wait before retrying when refused)."""
        start = math.floor(now / window) * window
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                entry = [start, 0, 0]
                self.entries[key] = entry
                if len(self.entries) > self.max_keys:
                    self.entries.popitem(last=False)
            else:
                self.entries.move_to_end(key)
                if entry[0] != start:
                    previous = entry[1] if start - entry[0] == window else 0
                    entry[0], entry[1], entry[2] = start, 0, previous
            overlap = 1.0 - (now - start) / window
            estimate = entry[2] * overlap + entry[1]
            if estimate < capacity:
                entry[1] += 1
                return True, 0
            # When will the weighted previous count have decayed enough?
            if entry[2] and entry[1] < capacity:
                need = (entry[2] * overlap - (capacity - entry[1]) + 1e-9) / entry[2] * window
                wait = max(1, math.ceil(need))
            else:
                wait = max(1, math.ceil(start + window - now))
            return False, wait

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


LIMITER = SlidingWindowLimiter()
