import time

from chalicelib.core import ids


def test_new_id_has_prefix_and_27_base62_characters():
    value = ids.new_id("ak")
    prefix, body = value.split("_")
    assert prefix == "ak" and len(body) == 27
    assert set(body) <= set(ids.ALPHABET)
    assert ids.is_valid(value, "ak")


def test_ids_are_strictly_increasing_within_a_process():
    values = [ids.new_id("cr") for _ in range(5000)]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_ids_sort_by_creation_time_across_milliseconds():
    first = ids.new_id("bot")
    time.sleep(0.002)
    second = ids.new_id("bot")
    assert first < second
    assert ids.timestamp_millis(second) - ids.timestamp_millis(first) >= 2


def test_timestamp_is_the_current_time_in_millis():
    before = int(time.time() * 1000)
    value = ids.new_id("rd")
    after = int(time.time() * 1000)
    assert before <= ids.timestamp_millis(value) <= after + 1


def test_is_valid_rejects_wrong_prefix_length_and_alphabet():
    good = ids.new_id("ak")
    assert not ids.is_valid(good, "cr")
    assert not ids.is_valid(good[:-1], "ak")
    assert not ids.is_valid(good[:-1] + "-", "ak")
    assert not ids.is_valid(None, "ak")
    assert not ids.is_valid("ak_" + "0" * 28, "ak")


def test_every_contract_prefix_is_known():
    assert set(ids.PREFIXES.values()) >= {
        "bkdhr",
        "edgtcp",
        "edghts",
        "edghtsrt",
        "cr",
        "bot",
        "usr",
        "ak",
        "abrp",
        "rd",
        "ipp",
        "ipr",
        "op",
    }


def _number(value):
    number = 0
    for char in value.split("_")[1]:
        number = number * 62 + ids.ALPHABET.index(char)
    return number


def test_ids_of_one_millisecond_increment_the_random_part_by_one(monkeypatch):
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.0)
    monkeypatch.setattr(ids, "_last", [0, 0])
    first, second, third = (ids.new_id("cr") for _ in range(3))
    assert ids.timestamp_millis(first) == ids.timestamp_millis(third) == 1_700_000_000_000
    assert _number(second) - _number(first) == 1
    assert _number(third) - _number(second) == 1


def test_random_part_overflow_moves_to_the_next_millisecond_with_fresh_random_bits(monkeypatch):
    millis = 1_700_000_000_000
    monkeypatch.setattr(ids.time, "time", lambda: millis / 1000)
    monkeypatch.setattr(ids, "_last", [millis, ids._RANDOM_MASK - 1])
    last_of_the_millisecond = ids.new_id("cr")
    assert _number(last_of_the_millisecond) & ids._RANDOM_MASK == ids._RANDOM_MASK
    drawn = []
    monkeypatch.setattr(ids.secrets, "randbits", lambda bits: drawn.append(bits) or 12345)
    overflowed = ids.new_id("cr")
    assert drawn == [112]
    assert ids.timestamp_millis(overflowed) == millis + 1
    assert _number(overflowed) & ids._RANDOM_MASK == 12345
    assert overflowed > last_of_the_millisecond
    assert ids.timestamp_millis(ids.new_id("cr")) == millis + 1  # stays there, increasing


def test_a_clock_going_back_keeps_ids_increasing_on_the_last_millisecond(monkeypatch):
    millis = 1_700_000_000_000
    monkeypatch.setattr(ids, "_last", [millis, 7])
    monkeypatch.setattr(ids.time, "time", lambda: (millis - 5) / 1000)
    value = ids.new_id("cr")
    assert ids.timestamp_millis(value) == millis
    assert _number(value) & ids._RANDOM_MASK == 8


def test_a_new_millisecond_draws_112_fresh_random_bits(monkeypatch):
    monkeypatch.setattr(ids, "_last", [0, 0])
    monkeypatch.setattr(ids.time, "time", lambda: 1_700_000_000.0)
    monkeypatch.setattr(ids.secrets, "randbits", lambda bits: (1 << bits) - 3)
    value = ids.new_id("ak")
    assert _number(value) & ids._RANDOM_MASK == ids._RANDOM_MASK - 2
    assert ids.timestamp_millis(value) == 1_700_000_000_000
