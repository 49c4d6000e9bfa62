"""The events worker's request metrics, summed over a chunk of records and written once.

edge/events.py's worker counts every HTTP request into four Prometheus metrics (requests by
status class and endpoint kind, the latency histogram, body bytes in and out) and the policy's
decisions. Done one record at a time that is five ``inc``/``observe`` calls per request, each
taking its value's lock (a histogram observation walks its buckets, a lock per step): about a
third of the worker's CPU per request. A :class:`Tally` instead adds plain numbers per record
and writes each labelled child once per :meth:`Tally.flush`; the worker flushes before every
await, so what ``/metrics`` shows between the worker's turns is exactly what the per-record
calls showed.

Identical values: counts and byte totals are whole numbers (exact in a float up to 2**53); the
latency histogram is a :class:`SummedHistogram`, whose sum is added to in the same order as
``observe`` would and whose buckets each get the durations ``observe`` would put there. That
subclass reads prometheus_client's own fields (``_sum``, ``_buckets``, ``_upper_bounds``; the
version is pinned in edge/requirements.txt); tests/unit/test_events_worker.py fails if a value
ever differs from the per-record calls'.
"""

import bisect
from typing import Any, Dict, Iterable, List, Tuple

from prometheus_client import Histogram


class SummedHistogram(Histogram):
    """A prometheus_client Histogram (the same samples, the same ``observe``) that also
    takes many observations at once (:meth:`observe_many`); its labelled children are of this
    class too (``labels`` makes them with ``self.__class__``)."""

    def observe_many(self, amounts: List[float]) -> None:
        """``observe(a)`` for each of ``amounts``, in order: the sum added to one amount at a
        time as ``observe`` does, each amount in the first bucket whose bound it does not
        exceed; one write per value touched instead of one locked step per observation and
        bucket. Only for a histogram one thread observes (the events worker's): the sum is
        read, added to and set."""
        bounds = self._upper_bounds
        counts = [0] * len(bounds)
        value = self._sum.get()
        for amount in amounts:
            value += amount
            counts[bisect.bisect_left(bounds, amount)] += 1
        self._sum.set(value)
        for index, count in enumerate(counts):
            if count:
                self._buckets[index].inc(count)


def status_class(status: int) -> str:
    """The ``status_class`` label of a response status (``none``: no response)."""
    return f"{status // 100}xx" if status else "none"


class Tally:
    """Per-record numbers of one chunk of records (see the module doc)."""

    def __init__(self, requests: Any, latency: Any, http_bytes: Any, decisions: Any) -> None:
        self._metrics = (requests, latency, http_bytes, decisions)
        self._children: Dict[Tuple[int, Tuple[str, ...]], Any] = {}
        self.requests: Dict[Tuple[int, str], int] = {}  # (status, endpoint kind) -> count
        self.durations: Dict[str, List[float]] = {}  # endpoint kind -> durations, in order
        self.bytes_in = 0
        self.bytes_out = 0
        self.decisions: Dict[Tuple[str, str], int] = {}  # (action, decision) -> count
        self.counts: Dict[Tuple[Any, Tuple[str, ...]], int] = {}  # (counter, labels) -> count

    def http(self, status: int, kind: str, duration: float, bytes_in: int, bytes_out: int) -> None:
        """One HTTP request (what ``observe_metrics`` counts of an HTTP record)."""
        key = (status, kind)
        self.requests[key] = self.requests.get(key, 0) + 1
        durations = self.durations.get(kind)
        if durations is None:
            self.durations[kind] = [duration]
        else:
            durations.append(duration)
        self.bytes_in += bytes_in
        self.bytes_out += bytes_out

    def decided(self, found: Iterable[Tuple[str, str]], times: int = 1) -> None:
        for key in found:
            self.decisions[key] = self.decisions.get(key, 0) + times

    def http_many(
        self,
        kind: str,
        statuses: Iterable[Tuple[int, int]],
        durations: List[float],
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        """Many HTTP requests at once: (status, requests) pairs, their durations in order,
        their body bytes (a quiet route's, which the compiled core counted)."""
        requests = self.requests
        for status, count in statuses:
            key = (status, kind)
            requests[key] = requests.get(key, 0) + count
        self.durations.setdefault(kind, []).extend(durations)
        self.bytes_in += bytes_in
        self.bytes_out += bytes_out

    def inc(self, metric: Any, *labels: str, amount: int = 1) -> None:
        """``metric.labels(*labels).inc(amount)``, at the next flush (any labelled counter)."""
        key = (metric, labels)
        self.counts[key] = self.counts.get(key, 0) + amount

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def flush(self) -> None:
        """Write what was added since the last flush into the metrics."""
        requests, latency, http_bytes, decisions = self._metrics
        if self.requests:
            for (status, kind), count in self.requests.items():
                self._child(requests, status_class(status), kind).inc(count)
            for kind, durations in self.durations.items():
                self._child(latency, kind).observe_many(durations)
            # zero amounts too, as the per-record calls do: both children exist once a
            # request was counted
            self._child(http_bytes, "in").inc(self.bytes_in)
            self._child(http_bytes, "out").inc(self.bytes_out)
            self.requests, self.durations = {}, {}
            self.bytes_in = self.bytes_out = 0
        if self.decisions:
            for (action, decision), count in self.decisions.items():
                self._child(decisions, action, decision).inc(count)
            self.decisions = {}
        if self.counts:
            for (metric, labels), count in self.counts.items():
                self._child(metric, *labels).inc(count)
            self.counts = {}
