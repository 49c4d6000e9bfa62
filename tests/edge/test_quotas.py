"""Quotas (edge/quotas.py) on an edge with small ones, on the session's store: endpoints per
session and per account (TCP apart), sessions per credential, authentications per credential,
failed authentications per address. Each refusal with the hosted code, through the official SDK
where the SDK can show it, and a raw protocol client for floods."""

import asyncio
import json
import time

import pytest
import requests

from edge import protocol
from stacks import muxado
from tests.edge.test_edge_sdk import _bound, _credential, _refusal
from tests.edge.test_hostile_agents import _connect, _rpc

LIMITS = {
    "EDGE_MAX_ENDPOINTS_PER_SESSION": "3",
    "EDGE_MAX_ENDPOINTS_PER_ACCOUNT": "4",
    "EDGE_MAX_TCP_ENDPOINTS_PER_ACCOUNT": "2",
    "EDGE_MAX_SESSIONS_PER_CREDENTIAL": "2",
    "EDGE_MAX_AUTHS_PER_CREDENTIAL": "8",
    "EDGE_MAX_FAILED_AUTHS_PER_ADDRESS": "5",
}


@pytest.fixture(scope="module")
def small(another_edge):
    return another_edge(LIMITS)


@pytest.fixture
def started(agents):
    """``started(edge, token, binds)``: an SDK agent's events up to ready."""
    return lambda edge, token, binds: agents(edge, token, binds).start()


def test_the_operator_reads_the_limits_in_force(small):
    limits = requests.get(f"http://127.0.0.1:{small.metrics_port}/limits", timeout=10).json()
    assert limits["quotas"] == {
        "endpoints_per_session": 3,
        "endpoints_per_account": 4,
        "tcp_endpoints_per_account": 2,
        "sessions_per_credential": 2,
        "auths_per_credential": 8,
        "failed_auths_per_address": 5,
    }


def test_endpoints_per_session(small, account, started):
    events = started(small, _credential(account)["token"], [{"proto": "http"}] * 4)
    assert len(_bound(events)) == 3
    refusal = _refusal(events, "bind")
    assert "ERR_NGROK_324" in refusal and "more than 3 endpoints" in refusal


def test_endpoints_and_tcp_endpoints_per_account_across_sessions(small, account, started):
    token = _credential(account)["token"]
    first = started(small, token, [{"proto": "tcp"}, {"proto": "tcp"}, {"proto": "tcp"}])
    assert len(_bound(first)) == 2
    assert "ERR_NGROK_18021" in _refusal(first, "bind") and "TCP endpoints" in _refusal(
        first, "bind"
    )
    second = started(
        small,
        _credential(account)["token"],
        [{"proto": "http"}, {"proto": "http"}, {"proto": "http"}],
    )
    assert len(_bound(second)) == 2  # 4 online in the account
    assert "ERR_NGROK_18021" in _refusal(second, "bind")


def test_sessions_per_credential(small, account, started):
    token = _credential(account)["token"]
    for _ in range(2):
        _bound(started(small, token, [{"proto": "http"}]))
    third = started(small, token, [{"proto": "http"}])
    refusal = _refusal(third, "connect")
    assert "ERR_NGROK_108" in refusal and "limited to 2" in refusal
    other = started(small, _credential(account)["token"], [{"proto": "http"}])
    assert _bound(other)  # another credential: its own count


async def _auth(edge, token, source):
    reader, writer = await _connect(edge, source)
    try:
        return await _rpc(
            reader,
            writer,
            muxado.FrameParser(),
            1,
            protocol.AUTH,
            {"Version": ["3", "2"], "ClientId": "", "Extra": {"AuthToken": token}},
        )
    finally:
        writer.close()


def _ended(api, account_id, credential_id, timeout=30.0):
    """Wait until the edge has ended the credential's sessions (a client's close is seen, and
    written, a moment later: on a loaded machine the next Auth could otherwise meet the
    sessions-per-credential quota of this module's edge, 2, instead of the one under test)."""
    from chalicelib.core import online

    deadline = time.time() + timeout
    with api.service_store():
        while (
            online.live_credential_sessions(account_id, credential_id) and time.time() < deadline
        ):
            time.sleep(0.1)
        assert not online.live_credential_sessions(account_id, credential_id), (
            f"the edge had not ended the credential's sessions after {timeout} s"
        )


def _fresh_window(needed=30.0, window=60):
    """Wait, when fewer than ``needed`` seconds of the current ``window`` are left, for the next
    to begin: the count is kept per calendar window (``online.count_auth``), so a flood that
    straddles a boundary would start counting again halfway, and the test would then see the
    product's rule as broken (it failed so once, under load)."""
    left = window - time.time() % window
    if left < needed:
        time.sleep(left + 0.05)
    return int(time.time() // window)


def test_authentications_per_credential_per_minute(small, api, account):
    credential = _credential(account)
    token = credential["token"]
    window = _fresh_window()

    async def flood():
        replies = []
        for _ in range(10):
            replies.append(await _auth(small, token, "127.0.4.1"))
            _ended(api, account.id, credential["id"])
        return replies

    replies = asyncio.run(flood())
    assert int(time.time() // 60) == window, "the flood outlasted its window's 30 s"
    assert all(r.get("ClientId") for r in replies[:8]), replies[:8]
    assert all(
        "more than 8 times in the last minute" in r.get("Error", "") for r in replies[8:]
    ), replies[8:]


def test_failed_authentications_lock_the_address_out(small, account):
    good = _credential(account)["token"]

    async def attempts():
        bad = [await _auth(small, "A" * 43, "127.0.4.2") for _ in range(6)]
        locked = await _auth(small, good, "127.0.4.2")  # even a good token now
        elsewhere = await _auth(small, good, "127.0.4.3")  # another address is not locked
        return bad, locked, elsewhere

    bad, locked, elsewhere = asyncio.run(attempts())
    assert all("ERR_NGROK_107" in r["Error"] for r in bad), bad
    assert "Too many failed authentications from 127.0.4.2" in locked["Error"], locked
    assert elsewhere.get("ClientId"), elsewhere
    assert json.dumps(locked).count("ERR_NGROK") == 0
