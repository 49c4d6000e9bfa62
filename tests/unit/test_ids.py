import time

from chalicelib import ids


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
    assert set(ids.PREFIXES.values()) >= {"bkdhr", "edgtcp", "edghts", "edghtsrt", "cr", "bot",
                                          "usr", "ak", "abrp", "rd", "ipp", "ipr", "op"}
