"""edge/registry.py's pool turns (Registry.pick, Registry.http_tunnel): round robin over a
pool's members, passing over one whose session has ended (its agent gone before the registry
dropped it) while another is live."""

import types

from edge.registry import Registry, Tunnel, session_gone


def _member(name, ended=False, closed=False):
    session = types.SimpleNamespace(ended=ended, mux=types.SimpleNamespace(closed=closed))
    return Tunnel(
        id=f"tn_{name}",
        session=session,
        proto="http",
        url="http://p.tunnels.localhost",
        hostname="p.tunnels.localhost",
        endpoint_id=f"ep_{name}",
    )


def test_members_take_turns():
    registry, pool = Registry(), [_member("a"), _member("b"), _member("c")]
    assert [registry.pick(pool).id for _ in range(6)] == ["tn_a", "tn_b", "tn_c"] * 2


def test_a_member_whose_session_ended_or_whose_connection_closed_takes_no_turn():
    registry = Registry()
    pool = [_member("a"), _member("b", ended=True), _member("c", closed=True), _member("d")]
    assert {registry.pick(pool).id for _ in range(8)} == {"tn_a", "tn_d"}


def test_a_pool_with_no_live_member_still_answers_in_turn():
    registry, pool = Registry(), [_member("a", ended=True), _member("b", closed=True)]
    assert [registry.pick(pool).id for _ in range(4)] == ["tn_a", "tn_b"] * 2
    assert registry.pick([]) is None


def test_what_counts_as_gone():
    assert not session_gone(types.SimpleNamespace())  # a session that says nothing
    assert session_gone(types.SimpleNamespace(ended=True))
    assert session_gone(types.SimpleNamespace(ended=False, mux=types.SimpleNamespace(closed=True)))
