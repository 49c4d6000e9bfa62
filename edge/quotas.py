"""Quotas: what one session, account, credential or source address may hold or try.

| limit (EdgeSettings / env)                                      | default | refusal                    |
|-----------------------------------------------------------------|---------|----------------------------|
| endpoints per agent session (EDGE_MAX_ENDPOINTS_PER_SESSION)    | 100     | Bind: ERR_NGROK_324        |
| online agent endpoints per account (EDGE_MAX_ENDPOINTS_PER_ACCOUNT) | 1000 | Bind: ERR_NGROK_18021     |
| online TCP endpoints per account (EDGE_MAX_TCP_ENDPOINTS_PER_ACCOUNT) | 20  | Bind: ERR_NGROK_18021     |
| live sessions per credential (EDGE_MAX_SESSIONS_PER_CREDENTIAL) | 100     | Auth: ERR_NGROK_108        |
| authentications per credential per minute (EDGE_MAX_AUTHS_PER_CREDENTIAL) | 120 | Auth refused until the minute ends |
| failed authentications per source address per minute (EDGE_MAX_FAILED_AUTHS_PER_ADDRESS) | 20 | the address is locked out: 10 s, doubling with each lockout up to 10 min |

The session count is exact (one session lives on one instance); the account and credential
counts are service-wide (read from the online items in the store: chalicelib.core.online); the
per-address lockout is per edge instance, in memory, bounded (``MAX_TRACKED_ADDRESSES``).
"""

import time
from dataclasses import dataclass
from typing import Dict, Optional

from chalicelib.core import binding, edge_errors

MAX_TRACKED_ADDRESSES = 100_000  # addresses with recent failures kept in memory
WINDOW = 60.0
LOCKOUT_FIRST = 10.0
LOCKOUT_MAX = 600.0


@dataclass(frozen=True)
class Limits:
    endpoints_per_session: int = 100
    endpoints_per_account: int = 1000
    tcp_endpoints_per_account: int = 20
    sessions_per_credential: int = 100
    auths_per_credential: int = 120
    failed_auths_per_address: int = 20


def endpoints_per_session(limit: int, urls: list) -> binding.Refused:
    shown = ", ".join(urls[:10]) + (", …" if len(urls) > 10 else "")
    return binding.Refused(
        edge_errors.SESSION_ENDPOINT_LIMIT,
        f"Your account may not run more than {limit} "
        "endpoints over a single agent session. The "
        f"endpoints already running on this session are: "
        f"{shown}.",
    )


def endpoints_per_account(limit: int, what: str = "endpoints") -> binding.Refused:
    return binding.Refused(
        edge_errors.ACCOUNT_ENDPOINT_LIMIT,
        f"You have exceeded the maximum number of "
        f"concurrent {what} allowed for this account "
        f"({limit}).",
    )


def sessions_per_credential(limit: int) -> binding.Refused:
    return binding.Refused(
        edge_errors.SESSION_LIMIT,
        f"This credential is limited to {limit} "
        "simultaneous agent sessions. Stop one of them "
        "first, or run several endpoints in one session.",
    )


def auths_per_credential(limit: int) -> binding.Refused:
    return binding.Refused(
        "",
        f"This credential authenticated more than {limit} times in "
        "the last minute; try again in a minute.",
    )


class _Address:
    __slots__ = ("window_start", "failures", "locked_until", "lockouts", "last")

    def __init__(self, at: float):
        self.window_start = at
        self.failures = 0
        self.locked_until = 0.0
        self.lockouts = 0
        self.last = at


class AuthThrottle:
    """Failed authentications per source address: past ``limit`` in a minute the address is
    locked out, 10 s the first time, doubling each time up to 10 min; an hour without a
    lockout forgets the doubling."""

    def __init__(self, limit: int, clock=time.monotonic):
        self.limit = limit
        self.clock = clock
        self._by_address: Dict[str, _Address] = {}

    def locked(self, address: str) -> Optional[float]:
        """Seconds the address is still locked out for, or None."""
        state = self._by_address.get(address)
        if state is None:
            return None
        left = state.locked_until - self.clock()
        return left if left > 0 else None

    def failed(self, address: str) -> None:
        at = self.clock()
        state = self._by_address.get(address)
        if state is None:
            if len(self._by_address) >= MAX_TRACKED_ADDRESSES:
                self._prune(at)
            state = self._by_address[address] = _Address(at)
        if at - state.last > 3600:
            state.lockouts = 0
        state.last = at
        if at - state.window_start > WINDOW:
            state.window_start, state.failures = at, 0
        state.failures += 1
        if state.failures > self.limit:
            state.locked_until = at + min(LOCKOUT_FIRST * 2**state.lockouts, LOCKOUT_MAX)
            state.lockouts += 1
            state.window_start, state.failures = at, 0

    def _prune(self, at: float) -> None:
        for address in [
            a for a, s in self._by_address.items() if s.locked_until < at and at - s.last > WINDOW
        ]:
            del self._by_address[address]
        if len(self._by_address) >= MAX_TRACKED_ADDRESSES:  # still full: forget the oldest
            oldest = sorted(self._by_address, key=lambda a: self._by_address[a].last)
            for address in oldest[: len(oldest) // 2]:
                del self._by_address[address]
