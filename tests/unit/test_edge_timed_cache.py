"""The edge's router cache (edge/edges.py TimedCache): values kept for their time from the
start of their load, and one load per key shared by every request that wants it meanwhile."""

import asyncio

import pytest

from edge import edges


def test_concurrent_requests_for_an_expired_key_share_one_load():
    clock = [100.0]
    cache = edges.TimedCache(1.0, clock=lambda: clock[0])
    loads = []

    async def load():
        loads.append(clock[0])
        await asyncio.sleep(0.01)
        return len(loads)

    async def main():
        got = await asyncio.gather(*(cache.get("k", load) for _ in range(20)))
        assert got == [1] * 20 and len(loads) == 1
        assert cache.loads_in_flight() == 0
        clock[0] = 100.99  # within the second from the load's start: kept
        assert await cache.get("k", load) == 1 and len(loads) == 1
        clock[0] = 101.0  # a second after the load started: loaded again, once for all
        got = await asyncio.gather(*(cache.get("k", load) for _ in range(20)))
        assert got == [2] * 20 and len(loads) == 2
        other = await cache.get("other", load)  # another key: its own load
        assert other == 3

    asyncio.run(main())


def test_a_failed_load_fails_its_waiters_and_the_next_request_loads_again():
    cache = edges.TimedCache(1.0)
    calls = []

    async def failing():
        calls.append("x")
        await asyncio.sleep(0.01)
        raise RuntimeError("store down")

    async def main():
        results = await asyncio.gather(
            *(cache.get("k", failing) for _ in range(5)), return_exceptions=True
        )
        assert len(calls) == 1
        assert all(isinstance(r, RuntimeError) for r in results)

        async def ok():
            return "v"

        assert await cache.get("k", ok) == "v"

    asyncio.run(main())


def test_a_request_that_goes_away_does_not_cancel_the_load_for_the_others():
    cache = edges.TimedCache(1.0)
    started = []

    async def load():
        started.append(1)
        await asyncio.sleep(0.05)
        return "v"

    async def main():
        first = asyncio.ensure_future(cache.get("k", load))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(cache.get("k", load))
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second == "v" and len(started) == 1

    asyncio.run(main())
