"""The circuit breaker of an HTTP endpoint (the Bind option ``CircuitBreaker``: the SDKs'
``circuit_breaker(error_threshold)``), as the hosted service's module and ``circuit-breaker``
action describe it:

- responses are counted in a rolling window of :data:`WINDOW` seconds split into
  :data:`BUCKETS` buckets; a 5xx response (the upstream's, or the edge's own 502 when the
  agent could not reach its upstream) counts as an error;
- once the window holds at least :data:`VOLUME` responses and the errors' share reaches
  ``error_threshold``, the breaker trips: for :data:`TRIPPED` seconds every request is
  answered 503 ERR_NGROK_3202 by the edge, not forwarded;
- after that it lets requests through again, with the window cleared: a recovered upstream
  closes it, a still failing one trips it again once the volume is met.

``error_threshold`` must be within 0.0 to 1.0 (ERR_NGROK_361 otherwise, as hosted). Memory:
one breaker per endpoint that asked for it, :data:`BUCKETS` pairs of counters.
"""

import time
from typing import Any, List, Optional

from chalicelib.core import binding, edge_errors

WINDOW = 10.0
BUCKETS = 10
VOLUME = 10
TRIPPED = 10.0
TRIPPED_ANSWER = (
    503,
    edge_errors.CIRCUIT_BREAKER_TRIPPED,
    "Circuit breaker tripped: the endpoint's upstream answered too many 5xx "
    "responses; try again later.",
)
INVALID = edge_errors.INVALID_CIRCUIT_BREAKER


class Breaker:
    def __init__(self, threshold: float, clock=time.monotonic):
        self.threshold = threshold
        self.clock = clock
        self._span = WINDOW / BUCKETS
        self._buckets: List[List[int]] = [[0, 0] for _ in range(BUCKETS)]  # [total, errors]
        self._stamps: List[int] = [-1] * BUCKETS
        self.tripped_until = 0.0

    def _bucket(self, now: float) -> List[int]:
        tick = int(now / self._span)
        slot = tick % BUCKETS
        if self._stamps[slot] != tick:
            self._stamps[slot] = tick
            self._buckets[slot] = [0, 0]
        return self._buckets[slot]

    def allow(self) -> bool:
        """False while tripped (the request is answered 503 and not counted)."""
        return self.clock() >= self.tripped_until

    def record(self, status: int) -> None:
        now = self.clock()
        bucket = self._bucket(now)
        bucket[0] += 1
        bucket[1] += status >= 500
        oldest = int(now / self._span) - BUCKETS + 1
        total = errors = 0
        for stamp, (count, bad) in zip(self._stamps, self._buckets):
            if stamp >= oldest:
                total += count
                errors += bad
        if total >= VOLUME and errors and errors >= self.threshold * total:
            self.tripped_until = now + TRIPPED
            self._buckets = [[0, 0] for _ in range(BUCKETS)]
            self._stamps = [-1] * BUCKETS


def of_option(option: Any) -> Optional[Breaker]:
    """The breaker of a ``CircuitBreaker`` Bind option (None when unset), or Refused."""
    if option is None or option is False:
        return None
    value = option.get("error_threshold") if isinstance(option, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise binding.Refused(
            INVALID,
            "Invalid circuit breaker configuration, error threshold "
            "percentage must be between 0.0 and 1.0 inclusive, was "
            f"{str(value)[:40]}.",
        )
    return Breaker(float(value))


def record(tunnel: Any, status: int) -> None:
    found = getattr(tunnel, "breaker", None)
    if found is not None:
        found.record(status)


def allows(tunnel: Any) -> bool:
    found = getattr(tunnel, "breaker", None)
    return found is None or found.allow()
