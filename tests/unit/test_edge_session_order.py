"""Which SYNs edge/session.py opens: a peer's streams may announce themselves out of order.

The agent CLI's muxado (Go) takes a stream's id when a goroutine opens it and sends the SYN
with the stream's first write, so two streams opened at once can reach the edge as 9 then 7.
The edge remembers the ids a SYN passed over (``OUT_OF_ORDER_IDS`` of them, the closest below
it) and opens each of them once; any other SYN for an id at or below the highest one seen
(an id already used, or one forgotten past the bound) ends the session with GOAWAY
``PROTOCOL_ERROR``.
"""

import asyncio

import pytest

from edge import session
from stacks import muxado
from tests.unit.test_edge_session import agent_pair, _run

WINDOW = session.OUT_OF_ORDER_IDS


def _opened_and_goaway(sids, *, finish=False):
    """Send a SYN for each of ``sids`` in turn; the ids the handler saw opened, and the
    GOAWAY's error code (None without one). With ``finish`` each stream ends at once and
    leaves the table before the next SYN."""

    async def main():
        opened = []

        async def handler(stream):
            opened.append(stream.id)
            if not finish:
                await asyncio.sleep(5)

        mux, task, peer = await agent_pair(handler)
        code = None
        for sid in sids:
            peer.send(muxado.data(sid, b"x", syn=True, fin=finish))
            for batch in await peer.collect(0.05):
                for frame in batch:
                    if frame.type == muxado.GOAWAY:
                        code = frame.error_code
            if code is not None:
                break
        passed = mux.passed_over
        await mux.close()
        task.cancel()
        return opened, code, passed

    return _run(main())


def test_a_syn_that_overtook_an_earlier_one_leaves_it_free_to_open():
    opened, code, _ = _opened_and_goaway([1, 5, 3, 9, 7])
    assert (opened, code) == ([1, 5, 3, 9, 7], None)


@pytest.mark.parametrize("sids", [[3, 1], [5, 1, 3], [7, 3, 5, 1]])
def test_the_first_syns_may_come_out_of_order_too(sids):
    """The agent's first streams (Auth, and muxado's heartbeat, opened by its own goroutine)
    may announce themselves in either order: no SYN yet counts as stream -1 seen."""
    opened, code, passed = _opened_and_goaway(sids)
    assert (opened, code, passed) == (sids, None, 0)


def test_a_passed_over_id_opens_once():
    opened, code, _ = _opened_and_goaway([1, 5, 3, 3], finish=True)
    assert (opened, code) == ([1, 5, 3], muxado.E_PROTOCOL)


def test_an_id_already_used_cannot_open_again():
    opened, code, _ = _opened_and_goaway([1, 3, 1], finish=True)
    assert (opened, code) == ([1, 3], muxado.E_PROTOCOL)


def test_an_id_opened_before_a_jump_is_not_passed_over():
    opened, code, _ = _opened_and_goaway([1, 3, 9, 3], finish=True)  # 5, 7 passed over
    assert (opened, code) == ([1, 3, 9], muxado.E_PROTOCOL)


def test_an_even_id_is_refused():
    opened, code, _ = _opened_and_goaway([1, 4])
    assert (opened, code) == ([1], muxado.E_PROTOCOL)


JUMP = 2 * WINDOW + 5  # after 1, passes over 3 .. JUMP - 2: WINDOW + 1 ids


@pytest.mark.parametrize(
    "late, opens",
    [
        (JUMP - 2 * WINDOW, True),  # the lowest of the WINDOW ids closest below the jump
        (JUMP - 2 * WINDOW - 2, False),  # the one past them: forgotten
    ],
)
def test_a_jump_remembers_the_ids_closest_below_it(late, opens):
    opened, code, passed = _opened_and_goaway([1, JUMP, late])
    assert (late in opened, code is None) == (opens, opens)
    if opens:
        assert passed == WINDOW - 1


def test_the_remembered_ids_stay_bounded_and_keep_the_newest():
    first = 1 + 2 * WINDOW + 2  # passes over 3 .. first - 2: WINDOW ids
    second = first + 2 * WINDOW + 2  # WINDOW more: the older are forgotten
    opened, code, passed = _opened_and_goaway([1, first, second, second - 2])
    assert (opened, code, passed) == ([1, first, second, second - 2], None, WINDOW - 1)
    opened, code, passed = _opened_and_goaway([1, first, second, first - 2])
    assert (opened, code) == ([1, first, second], muxado.E_PROTOCOL)


@pytest.mark.parametrize("late, opens", [(3, False), (5, True)])
def test_one_id_past_the_bound_forgets_the_oldest(late, opens):
    first = 1 + 2 * WINDOW + 2  # passes over 3 .. first - 2: WINDOW ids
    opened, code, passed = _opened_and_goaway([1, first, first + 4, late])  # one more
    assert (late in opened, code is None) == (opens, opens)
