"""edge/gc_tuning.py: the edge process freezes what exists once it has started and raises the
collector's thresholds (run in a child interpreter: the test process keeps its own settings)."""

import json
import os
import subprocess
import sys

from edge import gc_tuning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = """
import gc, json
from edge import gc_tuning
before = gc.get_freeze_count()
objects = [[i] for i in range(1000)]  # alive at tune(): frozen
thresholds = gc_tuning.tune()
print(json.dumps({"before": before, "after": gc.get_freeze_count(), "thresholds": thresholds}))
"""


def test_tune_freezes_what_exists_and_raises_the_thresholds():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    got = json.loads(out)
    assert got["after"] >= got["before"] + 1000
    assert got["thresholds"] == [
        gc_tuning.GEN0_THRESHOLD,
        gc_tuning.GEN1_THRESHOLD,
        gc_tuning.GEN2_THRESHOLD,
    ]
    assert gc_tuning.GEN0_THRESHOLD > 700  # CPython's default, which cost the most


def test_the_edge_process_tunes_its_collector_once_started():
    with open(os.path.join(ROOT, "edge", "__main__.py")) as fh:
        main = fh.read()
    assert main.index("gc_tuning.tune()") > main.index("await edge.start()")
