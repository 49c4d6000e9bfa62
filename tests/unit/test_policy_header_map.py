"""chalicelib.core.policy.model: the header map the engine reads (``req.headers``/``res.headers``)
stays what a fresh computation gives after every change, including the in-place updates
that spare a policy of several add-headers rules a rebuild per rule."""

import random

import pytest

from chalicelib.core.policy.model import Request, _header_map

NAMES = ["X-Rule", "x-rule", "Content-Type", "ACCEPT", "x-a-b", "123"]


def _fresh(req):
    return _header_map(req.headers)


@pytest.mark.parametrize("seed", range(25))
def test_header_map_after_any_sequence_of_changes_equals_a_fresh_one(seed):
    rng = random.Random(seed)
    req = Request(method="GET", url="http://h/", headers=[("Host", "h"), ("x-rule", "0")])
    for step in range(12):
        req.header_map()  # computed (and cached) before the change, as a rule's check does
        op, name = rng.choice(["add", "set", "remove"]), rng.choice(NAMES)
        if op == "add":
            req.add_header(name, f"v{step}")
        elif op == "set":
            req.set_header(name, f"v{step}")
        else:
            req.remove_header(name)
        assert req.header_map() == _fresh(req), (op, name, req.headers)


def test_add_header_keeps_earlier_values_of_the_name():
    req = Request(method="GET", url="http://h/", headers=[("X-Rule", "1")])
    req.header_map()
    req.add_header("x-rule", "2")
    assert req.header_map()["x-rule"] == ["1", "2"]
    assert req.header_map()["X-Rule"] == ["1", "2"]


def test_a_map_handed_out_before_a_change_is_not_changed_by_it():
    req = Request(method="GET", url="http://h/", headers=[("X-Rule", "1")])
    before = req.header_map()
    req.add_header("X-Rule", "2")
    req.remove_header("x-rule")
    assert before == {"x-rule": ["1"], "X-Rule": ["1"]}


def test_direct_changes_to_the_header_list_are_seen_too():
    req = Request(method="GET", url="http://h/", headers=[("X-Rule", "1")])
    req.header_map()
    req.headers.append(("X-Other", "2"))
    assert req.header_map()["x-other"] == ["2"]
