"""The circuit breaker (chalicelib/core/policy/breaker.py) with a clock of the test's: the
rolling window's buckets and their edges, the volume, the threshold, the tripped time, the
fresh window after it, and the bound on how many breakers are kept. The agent option and the
action through the edge: tests/edge/test_circuit_breaker.py."""

from chalicelib.core.policy import breaker


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def _record(b, statuses):
    for status in statuses:
        b.record(status)


def test_the_default_breaker_and_its_clock():
    b = breaker.Breaker(0.5)
    assert b.allow() and b.allow(0.0)  # a new breaker lets requests through from time 0
    assert (b.volume, b.tripped) == (breaker.VOLUME, breaker.TRIPPED) == (10, 10.0)


def test_window_volume_and_recovery():
    clock = Clock()
    b = breaker.Breaker(0.5, clock=clock)
    _record(b, [500] * (breaker.VOLUME - 1))
    assert b.allow()  # below the volume: never trips
    clock.now += breaker.WINDOW + 1  # those errors leave the window
    _record(b, [200] * (breaker.VOLUME - 1) + [500])
    assert b.allow()  # 1 error in 10: under the threshold
    _record(b, [503] * breaker.VOLUME)
    assert not b.allow()  # 11 errors in 20: tripped
    clock.now += breaker.TRIPPED - 0.1
    assert not b.allow()
    clock.now += 0.2
    assert b.allow()  # re-evaluated with a fresh window
    b.record(200)
    assert b.allow()


def test_the_window_is_ten_buckets_and_counts_each_bucket_whole():
    """window 10 s, buckets of 1 s. Responses in the 10 buckets that end now count; the bucket
    10 s old has left. Counts add up across buckets (and within one)."""
    clock = Clock(2000.0)
    b = breaker.Breaker(0.5, volume=4, window=10.0, tripped=5.0, clock=clock)
    b.record(500)  # bucket 2000
    clock.now = 2009.5  # bucket 2009: the 10th bucket; 2000's is still in the window
    b.record(200)
    b.record(500)
    assert b.allow()  # 3 responses: under the volume
    b.record(200)  # 4 responses, 2 errors in the window: trips
    assert not b.allow() and b.tripped_until == 2009.5 + 5.0
    clock.now = 3000.0
    b2 = breaker.Breaker(0.5, volume=4, window=10.0, tripped=5.0, clock=clock)
    b2.record(500)  # bucket 3000
    clock.now = 3010.0  # bucket 3010: 3000's has left the window
    _record(b2, [200, 500, 200])
    assert b2.allow()  # 3 in the window (1 error), not 4
    b2.record(500)
    assert not b2.allow()  # 4 in the window, 2 errors


def test_the_threshold_is_a_share_of_the_window_and_needs_an_error():
    clock = Clock(5000.0)
    b = breaker.Breaker(0.3, volume=10, clock=clock)
    _record(b, [200] * 7 + [500] * 2)
    b.record(200)  # 2 errors of 10 = 0.2 < 0.3
    assert b.allow()
    b.record(500)  # 3 of 11 = 0.27
    assert b.allow()
    b.record(500)  # 4 of 12 = 0.33: trips
    assert not b.allow()
    none = breaker.Breaker(0.0, volume=1, clock=clock)
    _record(none, [200] * 5)
    assert none.allow()  # a threshold of 0 still needs one error


def test_after_the_tripped_time_the_window_starts_empty():
    clock = Clock(7000.0)
    b = breaker.Breaker(0.5, volume=2, window=10.0, tripped=3.0, clock=clock)
    _record(b, [500, 500])
    assert not b.allow()
    clock.now += 3.0
    assert b.allow()
    b.record(500)  # one error, alone in a fresh window: under the volume of 2
    assert b.allow()
    b.record(200)  # 2 responses, 1 error: trips again
    assert not b.allow()


def test_an_explicit_time_wins_over_the_clock():
    clock = Clock(100.0)
    b = breaker.Breaker(0.5, volume=1, tripped=10.0, clock=clock)
    b.record(500, 50.0)
    assert b.tripped_until == 60.0
    assert b.allow() and not b.allow(55.0)


def test_breakers_are_bounded_and_the_least_recently_used_goes_first():
    kept = breaker.Breakers(limit=3)
    made = {k: kept.get(k, lambda: breaker.Breaker(0.5)) for k in "abc"}
    assert kept.get("a", lambda: breaker.Breaker(0.5)) is made["a"]  # a is now the newest
    kept.get("d", lambda: breaker.Breaker(0.5))  # b, the oldest used, goes
    assert len(kept) == 3
    assert kept.get("a", lambda: breaker.Breaker(0.5)) is made["a"]
    assert kept.get("c", lambda: breaker.Breaker(0.5)) is made["c"]
    assert kept.get("b", lambda: breaker.Breaker(0.5)) is not made["b"]


def test_a_longer_window_has_longer_buckets():
    """window 20 s: ten buckets of 2 s. A response 19.9 s old counts; one 20 s old does not."""
    clock = Clock(4000.0)
    b = breaker.Breaker(0.5, volume=2, window=20.0, tripped=5.0, clock=clock)
    b.record(500)  # bucket [4000, 4002)
    clock.now = 4019.9  # bucket [4018, 4020): the 10th; the first is still in the window
    b.record(200)
    assert not b.allow()  # 2 responses, 1 error: tripped
    clock.now = 5000.0
    c = breaker.Breaker(0.5, volume=2, window=20.0, tripped=5.0, clock=clock)
    c.record(500)
    clock.now = 5020.0  # its bucket has left
    c.record(200)
    assert c.allow()
    d = breaker.Breaker(0.5, volume=2, window=20.0, tripped=5.0, clock=clock)
    clock.now = 6000.0
    d.record(500)  # bucket [6000, 6002)
    clock.now = 6021.0  # bucket [6020, 6022): 21 s on, the first has left
    d.record(200)
    assert d.allow()


def test_a_time_given_back_drops_the_buckets_ahead_of_it_and_memory_stays_bounded():
    """An explicit time earlier than the last one: buckets ahead of it are not in its window
    (they would count responses from its future). Whatever the times given, a breaker holds at
    most its ten buckets."""
    b = breaker.Breaker(0.5, volume=2, window=10.0, tripped=5.0)
    b.record(500, 100.0)
    b.record(200, 50.0)  # 100.0's bucket is ahead: 1 response in this window, not 2
    assert b.allow(50.0)
    b.record(500, 50.5)  # 2 in the window [41, 51), both errors: trips
    assert not b.allow(51.0)
    c = breaker.Breaker(0.5, volume=10_000)
    for at in range(1000, 0, -1):  # every record a bucket behind the last
        c.record(200, float(at))
    assert c.allow(0.0)
    assert len(c._counts) <= breaker.BUCKETS
    for at in range(1000):
        c.record(200, float(at))
    assert len(c._counts) == breaker.BUCKETS
