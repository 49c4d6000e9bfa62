"""The edge process's garbage collector: what it costs per request, and how it is set.

Measured with bench/edge_bench/bench_peers.py's small GET (20 connections), a gc callback timing
every collection: with CPython's defaults (thresholds 700, 10, 10) the collector ran about
once per 40 requests and took 23-38 µs of the edge's ~150 µs of CPU per request, mostly in the
older generations' collections, which walk every object the process holds (its imported
modules, the store client's models, every session's state). So, once the edge has started:

- ``gc.freeze()``: what exists then (modules, models, the listeners) moves to the permanent
  generation, which no collection walks again;
- the youngest generation's threshold is raised to ``GEN0_THRESHOLD`` allocations (from
  700), the older ones' to ``GEN1_THRESHOLD`` and ``GEN2_THRESHOLD`` collections of the
  generation below: a request's garbage is freed by reference counting as before; cycles
  (a failed exchange's exception and its traceback) wait a little longer, bounded by the
  thresholds, not by time.

The figures of each setting are in docs/BENCHMARKS.md ("The garbage collector")."""

import gc
from typing import Tuple

GEN0_THRESHOLD = 20_000
GEN1_THRESHOLD = 50
GEN2_THRESHOLD = 100


def tune() -> Tuple[int, int, int]:
    """Collect once, freeze what survives, raise the thresholds; returns the new ones."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    return gc.get_threshold()
