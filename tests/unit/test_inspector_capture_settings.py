"""edge/inspector.py: the capture setting of each endpoint the fast path asks about is read
through a cache (CACHE_SECONDS), and the settings asked in one turn of the event loop are read
together: one BatchGetItem per READ_BATCH endpoints, not one GetItem each (an edge that just
bound 10,000 endpoints asks for each of them at every refresh of its routes)."""

import asyncio
import types

from chalicelib.core import inspector as layout
from edge import inspector


def _reads(monkeypatch, capturing):
    """store.get_many recorded: each call's key count; ``capturing`` endpoints keep bodies."""
    calls = []

    def get_many(keys):
        calls.append(len(keys))
        found = {}
        for pk, sk in keys:
            endpoint = pk.rsplit("#", 1)[-1]
            assert sk == layout.SETTINGS_SK
            found[(pk, sk)] = types.SimpleNamespace(data={"capture_bodies": endpoint in capturing})
        return found

    monkeypatch.setattr(inspector.store, "get_many", get_many)
    return calls


def test_the_settings_asked_in_one_turn_are_read_in_batches(monkeypatch):
    endpoints = [f"ep_{i:04d}" for i in range(inspector.READ_BATCH * 2 + 1)]
    calls = _reads(monkeypatch, {"ep_0007", "ep_0150"})
    made = inspector.Inspector()

    async def run():
        # nothing known yet: each answer is "no", and each is asked once
        assert not any(made.captures_bodies("ac_1", e) for e in endpoints)
        assert not any(made.captures_bodies("ac_1", e) for e in endpoints)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(made.capture) == len(endpoints):
                break
        return [e for e in endpoints if made.captures_bodies("ac_1", e)]

    assert asyncio.run(run()) == ["ep_0007", "ep_0150"]
    assert sorted(calls) == [1, inspector.READ_BATCH, inspector.READ_BATCH]


def test_a_failed_read_answers_no_and_is_asked_again_after_the_cache(monkeypatch):
    made = inspector.Inspector()

    def failing(keys):
        raise ConnectionError("the store is away")

    monkeypatch.setattr(inspector.store, "get_many", failing)

    async def run():
        assert made.captures_bodies("ac_1", "ep_1") is False
        for _ in range(100):
            await asyncio.sleep(0.01)
            if ("ac_1", "ep_1") in made.capture:
                break
        assert made.capture[("ac_1", "ep_1")][0] is False and not made.asked
        calls = _reads(monkeypatch, {"ep_1"})
        assert made.captures_bodies("ac_1", "ep_1") is False  # cached: not asked again
        await asyncio.sleep(0.05)
        assert calls == []
        value, _ = made.capture[("ac_1", "ep_1")]
        made.capture[("ac_1", "ep_1")] = (value, 0.0)  # older than CACHE_SECONDS
        made.captures_bodies("ac_1", "ep_1")
        for _ in range(100):
            await asyncio.sleep(0.01)
            if calls:
                break
        await asyncio.sleep(0.05)
        assert calls == [1] and made.captures_bodies("ac_1", "ep_1") is True

    asyncio.run(run())
