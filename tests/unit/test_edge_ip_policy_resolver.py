"""The edge's resolver of restrict-ips ``ip_policies`` (EdgeRouter.ip_policy_resolver): the
endpoint's account's rules, read through the router's cache (no store call on a hit, a
re-read once CACHE_SECONDS have passed), and nothing for another account."""

import asyncio
import dataclasses
import json

import pytest

from chalicelib.core.policy import CONTINUE, RESPOND, compile_policy
from edge import edges
from tests.support.policy import conn, request

ACCOUNT, OTHER = "ac_owner", "ac_other"
STORE = {
    ACCOUNT: {"ipp_mine": [("allow", "127.0.0.1/32")]},
    OTHER: {"ipp_theirs": [("allow", "0.0.0.0/0")]},
}


class FakeEdge:
    """What the router needs of the edge: ``call`` (here: ip_policies.rules_of over STORE)."""

    def __init__(self):
        self.calls = []

    async def call(self, fn, account_id, policy_ids):
        assert fn.__name__ == "rules_of"
        self.calls.append((account_id, tuple(policy_ids)))
        held = STORE.get(account_id, {})
        return {i: list(held[i]) for i in policy_ids if i in held}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(edges.time, "monotonic", c)
    return c


def _policy(*ids):
    return compile_policy(
        json.dumps(
            {
                "on_http_request": [
                    {"actions": [{"type": "restrict-ips", "config": {"ip_policies": list(ids)}}]}
                ]
            }
        )
    )


def _run(policy, account_id, resolver, ip="127.0.0.1"):
    c = conn(ip)
    c.endpoint = dataclasses.replace(c.endpoint, account_id=account_id)
    c.ip_policy_resolver = resolver
    return policy.on_http_request(c, request(), policy.new_state())


def test_resolver_gives_the_accounts_rules_and_reads_the_store_once_per_cache_period(clock):
    edge = FakeEdge()
    router = edges.EdgeRouter(edge)
    policy = _policy("ipp_mine")
    resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
    assert resolver(ACCOUNT, "ipp_mine") == [("allow", "127.0.0.1/32")]
    assert _run(policy, ACCOUNT, resolver).kind == CONTINUE
    assert _run(policy, ACCOUNT, resolver, "127.0.0.2").status_code == 403
    for _ in range(5):  # more requests within the period: no store call
        asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
    assert edge.calls == [(ACCOUNT, ("ipp_mine",))]
    STORE[ACCOUNT]["ipp_mine"] = [("deny", "127.0.0.1/32")]
    try:
        clock.now += edges.CACHE_SECONDS - 0.01  # still cached: the old rule applies
        resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
        assert _run(policy, ACCOUNT, resolver).kind == CONTINUE
        clock.now += 0.02  # past the period: read afresh
        resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
        out = _run(policy, ACCOUNT, resolver)
        assert (out.kind, out.status_code) == (RESPOND, 403)
        assert dict(out.headers)["ngrok-error-code"] == "ERR_NGROK_3203"
        assert len(edge.calls) == 2
    finally:
        STORE[ACCOUNT]["ipp_mine"] = [("allow", "127.0.0.1/32")]


def test_another_accounts_policy_id_resolves_to_nothing(clock):
    router = edges.EdgeRouter(FakeEdge())
    policy = _policy("ipp_theirs")
    resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
    assert resolver(ACCOUNT, "ipp_theirs") is None
    assert _run(policy, ACCOUNT, resolver).status_code == 403
    # a resolver made for one account answers nothing for another
    mine = asyncio.run(router.ip_policy_resolver(ACCOUNT, _policy("ipp_mine")))
    assert mine(OTHER, "ipp_mine") is None


def test_unknown_id_resolves_to_nothing_and_refuses(clock):
    router = edges.EdgeRouter(FakeEdge())
    policy = _policy("ipp_mine", "ipp_unknown")
    resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, policy))
    assert resolver(ACCOUNT, "ipp_unknown") is None
    assert _run(policy, ACCOUNT, resolver).status_code == 403


def test_a_policy_naming_no_ip_policies_needs_no_resolver_and_no_store_call(clock):
    edge = FakeEdge()
    router = edges.EdgeRouter(edge)
    policy = compile_policy(
        json.dumps(
            {
                "on_http_request": [
                    {"actions": [{"type": "restrict-ips", "config": {"allow": ["127.0.0.1/32"]}}]}
                ]
            }
        )
    )
    assert asyncio.run(router.ip_policy_resolver(ACCOUNT, policy)) is None
    assert edge.calls == []


def test_an_ip_restriction_module_becomes_restrict_ips_ip_policies(clock):
    router = edges.EdgeRouter(FakeEdge())
    enforcement = asyncio.run(
        router._enforcement(
            ACCOUNT,
            "rt_1",
            {"ip_restriction": {"enabled": True, "ip_policy_ids": ["ipp_mine"]}},
            "http",
        )
    )
    assert enforcement.policy.ip_policy_ids == ("ipp_mine",)
    resolver = asyncio.run(router.ip_policy_resolver(ACCOUNT, enforcement.policy))
    assert _run(enforcement.policy, ACCOUNT, resolver).kind == CONTINUE
    assert _run(enforcement.policy, ACCOUNT, resolver, "10.0.0.1").status_code == 403
