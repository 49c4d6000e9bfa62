"""edge/quotas.py's lockout of addresses that fail to authenticate, with a settable clock."""

from edge import quotas


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _fail(throttle, address, times):
    for _ in range(times):
        throttle.failed(address)


def test_an_address_is_locked_only_past_the_limit_in_a_minute():
    clock = Clock()
    throttle = quotas.AuthThrottle(5, clock)
    _fail(throttle, "a", 5)
    assert throttle.locked("a") is None  # at the limit: not yet
    clock.now += quotas.WINDOW + 1  # a new minute starts over
    _fail(throttle, "a", 5)
    assert throttle.locked("a") is None
    throttle.failed("a")  # one past it: locked
    assert throttle.locked("a") == quotas.LOCKOUT_FIRST
    assert throttle.locked("b") is None  # per address


def test_each_lockout_doubles_up_to_the_maximum_and_an_hour_forgets():
    clock = Clock()
    throttle = quotas.AuthThrottle(1, clock)
    lockouts = []
    for _ in range(8):
        _fail(throttle, "a", 2)
        lockouts.append(throttle.locked("a"))
        clock.now += lockouts[-1] + 1
    assert lockouts == [10, 20, 40, 80, 160, 320, 600, 600]
    clock.now += 3601
    _fail(throttle, "a", 2)
    assert throttle.locked("a") == quotas.LOCKOUT_FIRST


def test_the_addresses_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(quotas, "MAX_TRACKED_ADDRESSES", 10)
    clock = Clock()
    throttle = quotas.AuthThrottle(1, clock)
    for n in range(25):
        throttle.failed(f"10.0.0.{n}")
        clock.now += 1
    assert len(throttle._by_address) <= 10
