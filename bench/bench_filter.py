"""The list filter (chalicelib.filters) against cel-expr-python (the CEL runtime of the traffic
policy engine) on the hosted API filtering docs' expression shapes: compile once per request,
then evaluate over one filtered page's worth of items (filters.SCAN_LIMIT).

Run: ``.venv/bin/python bench/bench_filter.py``. Times are the median of several runs.
cel-expr-python gets ``obj`` as a ``map(string, dyn)``; it has no ``time.now`` nor
``.subtract("7d")`` (the hosted docs' time helpers), so those shapes run only on ours.
"""

import statistics
import time
from datetime import datetime, timezone

from chalicelib import filters  # noqa: E402

ITEMS = [
    {
        "id": f"cr_{i:027d}",
        "uri": f"http://x/credentials/cr_{i}",
        "description": f"ci-{i % 7}",
        "metadata": "" if i % 3 else "m",
        "created_at": "2026-11-20T10:00:00Z",
        "acl": ["bind:*.example.com"],
        "owner_id": "usr_1",
        "token": None,
    }
    for i in range(filters.SCAN_LIMIT)
]
COMMON = [
    'obj.description == "ci-3"',
    'obj.description.startsWith("ci") && obj.metadata == ""',
    'obj.owner_id in ["usr_1", "usr_2"] || size(obj.acl) > 1',
    '!(obj.metadata == "") && obj.token == null',
]
OURS_ONLY = ['obj.created_at > timestamp(time.now).subtract("7d")']


def _median(run, repeat=5):
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def ours(expr):
    now = datetime.now(timezone.utc)
    compile_s = _median(lambda: filters.compile_filter(expr, now=now), 50)
    matcher = filters.compile_filter(expr, now=now)
    eval_s = _median(lambda: [matcher.matches(item) for item in ITEMS])
    return compile_s, eval_s


def cel_expr_python(expr):
    from cel_expr_python import cel

    t = cel.Type
    env = cel.NewEnv(variables={"obj": t.Map(t.STRING, t.DYN)})
    compile_s = _median(lambda: env.compile(expr), 50)
    program = env.compile(expr)
    eval_s = _median(
        lambda: [program.eval(env.Activation({"obj": item})).value() for item in ITEMS]
    )
    return compile_s, eval_s


def main():
    print(f"{len(ITEMS)} items per page; compile in µs, evaluate one page in ms")
    print(f"{'expression':60} {'ours':>18} {'cel-expr-python':>22}")
    for expr in COMMON + OURS_ONLY:
        oc, oe = ours(expr)
        try:
            cc, ce = cel_expr_python(expr)
            theirs = f"{cc * 1e6:8.1f} / {ce * 1e3:7.2f}"
        except Exception as exc:  # noqa: BLE001
            theirs = f"n/a ({type(exc).__name__})"
        print(f"{expr[:60]:60} {oc * 1e6:8.1f} / {oe * 1e3:7.2f} {theirs:>22}")


if __name__ == "__main__":
    main()
