"""The sliding-window limiter behind rate-limit: counting, sliding, racing, memory bound."""

import asyncio
import threading

from chalicelib.core.policy import CONTINUE, RESPOND, ratelimit
from tests.support.policy import compile_doc, conn, request, rule

DOC = {
    "on_http_request": [
        rule(
            {
                "type": "rate-limit",
                "config": {
                    "name": "race",
                    "algorithm": "sliding_window",
                    "capacity": 10,
                    "rate": "60s",
                    "bucket_key": ["conn.client_ip"],
                },
            }
        )
    ]
}


def test_concurrent_asyncio_requests_count_exactly_once_each():
    p = compile_doc(DOC)
    ratelimit.LIMITER.clear()

    async def one():
        await asyncio.sleep(0)
        return p.on_http_request(conn("10.0.0.1"), request(), p.new_state()).kind

    async def many():
        return await asyncio.gather(*(one() for _ in range(100)))

    kinds = asyncio.run(many())
    assert kinds.count(CONTINUE) == 10 and kinds.count(RESPOND) == 90


def test_concurrent_threads_count_exactly_once_each():
    limiter = ratelimit.SlidingWindowLimiter()
    allowed = []

    def worker():
        for _ in range(50):
            allowed.append(limiter.hit("k", 100, 60, 1000.0)[0])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert allowed.count(True) == 100 and len(allowed) == 400


def test_capacity_boundary_and_retry_after():
    limiter = ratelimit.SlidingWindowLimiter()
    assert all(limiter.hit("k", 5, 60, 120.0)[0] for _ in range(5))
    allowed, retry = limiter.hit("k", 5, 60, 150.0)
    assert not allowed and retry == 30  # the window ends at 180 and nothing came before it


def test_previous_window_decays_linearly():
    limiter = ratelimit.SlidingWindowLimiter()
    for _ in range(10):
        limiter.hit("k", 10, 60, 0.0)
    # at 54 s into the next window only 10 % of the previous count remains (1 of 10)
    assert [limiter.hit("k", 10, 60, 114.0)[0] for _ in range(10)] == [True] * 9 + [False]


def test_a_window_two_periods_old_is_forgotten():
    limiter = ratelimit.SlidingWindowLimiter()
    for _ in range(10):
        limiter.hit("k", 10, 60, 0.0)
    assert limiter.hit("k", 10, 60, 121.0)[0]
    assert limiter.entries["k"][2] == 0


def test_keys_are_bounded_oldest_dropped_first():
    limiter = ratelimit.SlidingWindowLimiter(max_keys=3)
    for key in "abcd":
        limiter.hit(key, 1, 60, 0.0)
    assert list(limiter.entries) == ["b", "c", "d"]
    assert limiter.hit("a", 1, 60, 1.0)[0]  # forgotten, so allowed again
