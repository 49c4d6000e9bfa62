"""The agent's one session on the edge, through the official agent SDK (``ngrok``).

Every tunnel is an HTTP endpoint of this session: ``session.http_endpoint()`` with the
tunnel's domain and its effective traffic policy, forwarding to ``forwards_to``. The SDK
speaks the agent protocol to the edge (``AGENT_SERVER_ADDR`` + ``AGENT_ROOT_CAS``; both
unset: the hosted service, unchanged) and, when the connection drops, reconnects and binds
the session's endpoints again by itself; when its own retries are minutes away the agent
takes over with a fresh session (see SDK_QUICK_RETRIES). The agent applies nothing to the
traffic: the edge enforces the policy.

The ``ngrok`` import name is shared with the ``ngrok-api`` REST client; only the SDK has
``SessionBuilder``, which is checked at start with a clear message.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from . import __version__
from .errors import EdgeRefused, EdgeUnavailable, StartupError

log = logging.getLogger(__name__)

_CODE = re.compile(r"ERR_NGROK_[0-9]+")
# Authentication refusals: retrying cannot help, the agent stops with the edge's message.
AUTH_CODES = frozenset({"ERR_NGROK_105", "ERR_NGROK_106", "ERR_NGROK_107", "ERR_NGROK_108"})


def sdk_error(exc: BaseException) -> tuple[str | None, str]:
    """(the ``ERR_NGROK_…`` code, the edge's message) of what the SDK raised.

    The Python SDK raises ``ValueError(summary, message, code)``; the edge's message comes
    back as ``"<text>\\n\\nERR_NGROK_<n>"``-style text, so the code is searched for."""
    parts = [str(arg) for arg in getattr(exc, "args", ()) if arg is not None]
    text = " ".join(parts) or str(exc)
    match = _CODE.search(text)
    code = match.group(0) if match else None
    message = ""
    for part in parts[1:] or parts:
        cleaned = _CODE.sub("", part).strip()
        if cleaned and cleaned != code:
            message = cleaned
            break
    return code, " ".join(message.split()) or "the edge refused the request"


@dataclass
class SessionState:
    connected: bool = False
    error: str | None = None
    lost_at: float = 0.0  # monotonic time of the last disconnection
    beat_at: float = 0.0  # monotonic time of the last heartbeat
    failures: int = 0  # failed reconnects of the SDK in this outage


# The SDK calls the heartbeat handler on every new connection, before it authenticates, so
# a heartbeat right after a disconnection proves nothing: the session counts as up again
# only on a heartbeat this long after the last disconnection (the SDK's interval is 10 s).
UP_AFTER_SECONDS = 5.0
# The SDK (1.4.0, ngrok-rust's tokio_retry ExponentialBackoff::from_millis(50)) retries a
# lost session after 50 ms, 2.5 s, then 125 s, then ~1.7 h: an edge down for more than a
# few seconds would leave the agent offline for minutes. So once both quick retries failed
# (each reports a disconnection), or the session is down and silent (no heartbeat for
# SILENT_SECONDS: a live connection beats every 10 s), the agent connects a fresh session
# itself every RETRY_SECONDS; when that succeeds it closes the old one (which cancels the
# SDK's pending retry) and binds every tunnel again on the new one. Heartbeats after both
# quick retries failed are not trusted either: the SDK reports some from dead attempts.
SDK_QUICK_RETRIES = 2
SILENT_SECONDS = 12.0
RETRY_SECONDS = 3.0
WATCH_SECONDS = 1.0


class EdgeSession:
    def __init__(
        self,
        authtoken: str,
        server_addr: str | None,
        root_cas: str | None,
        connect_timeout: float = 60.0,
        bind_timeout: float = 20.0,
    ) -> None:
        self.authtoken = authtoken
        self.server_addr = server_addr
        self.root_cas = root_cas
        self.connect_timeout = connect_timeout
        self.bind_timeout = bind_timeout
        self.session: Any = None
        self._sdk: Any = None
        self._generation = 0  # handlers of replaced sessions are ignored
        self._lock = threading.Lock()  # the SDK calls the handlers from its own threads
        self._state = SessionState()
        self._watcher: asyncio.Task | None = None
        self._tried_at = 0.0
        # Called with the new session after a replacement: binds the tunnels again.
        self.on_replaced: Callable[[], Awaitable[None]] | None = None

    # ---- state ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"connected": self._state.connected, "error": self._state.error}

    def _on_disconnection(self, generation: int, error: Any) -> None:
        if generation != self._generation:
            return
        log.warning("session to the edge lost (%s); reconnecting", error)
        with self._lock:
            if self._state.connected:
                self._state.failures = 0
            else:
                self._state.failures += 1
            self._state.connected = False
            self._state.lost_at = time.monotonic()
            if not (self._state.error or "").startswith("ERR_NGROK_"):
                self._state.error = str(error)

    def _on_heartbeat(self, generation: int) -> None:
        if generation != self._generation:
            return
        now = time.monotonic()
        with self._lock:
            self._state.beat_at = now
            if (
                self._state.connected
                or now - self._state.lost_at < UP_AFTER_SECONDS
                or self._state.failures >= SDK_QUICK_RETRIES
            ):
                return
            lost_at = self._state.lost_at
            self._state.connected, self._state.error = True, None
        if lost_at:
            log.info("session to the edge is up again")

    async def _watch(self) -> None:
        """While the session is down, connect a fresh one: at first only to learn why it is
        down; once the old one is silent, to take over from it."""
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            now = time.monotonic()
            with self._lock:
                state = SessionState(**vars(self._state))
            if (
                state.connected
                or now - state.lost_at < WATCH_SECONDS
                or now - self._tried_at < RETRY_SECONDS
            ):
                continue
            self._tried_at = now
            # Not yet silent: the SDK may still be reconnecting by itself; only learn why
            # the session is down (the edge's code, e.g. a revoked authtoken's).
            adopt = (
                state.failures >= SDK_QUICK_RETRIES
                or now - max(state.beat_at, state.lost_at) >= SILENT_SECONDS
            )
            try:
                await self._replace(adopt)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep watching whatever happened
                log.exception("replacing the session failed")

    async def _replace(self, adopt: bool) -> None:
        generation = self._generation + 1
        try:
            fresh = await asyncio.wait_for(self._builder(generation).connect(), 10.0)
        except asyncio.TimeoutError:
            reason = "the edge does not answer"
        except Exception as exc:
            code, message = sdk_error(exc)
            reason = f"{code}: {message}" if code else f"the edge is unreachable ({message})"
        else:
            if not adopt:
                await asyncio.wait_for(fresh.close(), 3.0)
                return
            old, self.session, self._generation = self.session, fresh, generation
            with self._lock:
                self._state = SessionState(True, None, 0.0, time.monotonic())
            log.info(
                "session to the edge is up again (a new session: the SDK's next retry "
                "was minutes away)"
            )
            if old is not None:
                try:
                    await asyncio.wait_for(old.close(), 3.0)
                except Exception as exc:
                    log.warning("closing the lost session: %s", exc)
            if self.on_replaced is not None:
                await self.on_replaced()
            return
        with self._lock:
            if not self._state.connected:
                self._state.error = reason
        log.error("session to the edge is down: %s", reason)

    # ---- lifecycle ------------------------------------------------------------------
    def _import_sdk(self) -> Any:
        try:
            sdk = importlib.import_module("ngrok")
        except ImportError:
            raise StartupError(
                "the 'ngrok' agent SDK is not installed: pip install -r agent/requirements.txt"
            ) from None
        if not hasattr(sdk, "SessionBuilder"):
            raise StartupError(
                "the importable 'ngrok' module is not the agent SDK (is the "
                "'ngrok-api' REST client installed instead?): pip install ngrok"
            )
        return sdk

    def _builder(self, generation: int = 0) -> Any:
        builder = self._sdk.SessionBuilder().authtoken(self.authtoken)
        if self.server_addr:
            builder = builder.server_addr(self.server_addr)
        if self.root_cas:
            builder = builder.root_cas(self.root_cas)
        builder = builder.client_info("tunnel-agent", __version__)
        builder = builder.handle_disconnection(
            lambda addr, error: self._on_disconnection(generation, error)
        )
        builder = builder.handle_heartbeat(lambda latency: self._on_heartbeat(generation))
        return builder

    async def connect(self) -> None:
        """Open the session; retry unreachable edges until ``connect_timeout``; an
        authtoken the edge refuses stops at once (StartupError with the edge's code)."""
        self._sdk = self._import_sdk()
        deadline = time.monotonic() + self.connect_timeout
        delay = 0.5
        while True:
            try:
                self.session = await asyncio.wait_for(
                    self._builder(self._generation).connect(),
                    max(1.0, deadline - time.monotonic()),
                )
                with self._lock:
                    self._state = SessionState(True, None, 0.0, time.monotonic())
                log.info("session to the edge %s is up", self.server_addr or "(SDK default)")
                self._watcher = asyncio.ensure_future(self._watch())
                return
            except asyncio.TimeoutError:
                code, message = None, "no answer"
            except Exception as exc:  # what the SDK raises: ValueError(..., code)
                code, message = sdk_error(exc)
            if code in AUTH_CODES:
                raise StartupError(f"the edge refused the authtoken: {message} ({code})")
            if time.monotonic() + delay >= deadline:
                raise StartupError(
                    f"cannot reach the edge at {self.server_addr or 'the SDK default'} in "
                    f"{self.connect_timeout:g}s: {message}{f' ({code})' if code else ''}"
                )
            log.warning("edge not reachable yet (%s); retrying in %.1fs", message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        self._generation += 1  # the closing session's handlers report nothing
        if self.session is not None:
            session, self.session = self.session, None
            try:
                await asyncio.wait_for(session.close(), 3.0)
            except Exception as exc:  # closing on the way out: report, never hang
                log.warning("closing the session: %s", exc)

    # ---- endpoints ------------------------------------------------------------------
    async def bind(self, domain: str | None, forwards_to: str, policy: str | None) -> Any:
        """One HTTP endpoint forwarding to ``forwards_to``; the SDK's listener.

        Raises EdgeRefused (the edge's code) or EdgeUnavailable (no answer)."""
        if self.session is None:
            raise EdgeUnavailable("the agent has no session on the edge")
        state = self.state()
        if not state["connected"]:
            raise EdgeUnavailable(
                f"the agent's session to the edge is down ({state['error']}); "
                "the SDK is reconnecting, try again later"
            )
        builder = self.session.http_endpoint().forwards_to(forwards_to)
        if domain:
            builder = builder.domain(domain)
        if policy:
            builder = builder.traffic_policy(policy)
        try:
            return await asyncio.wait_for(
                builder.listen_and_forward(f"http://{forwards_to}"), self.bind_timeout
            )
        except asyncio.TimeoutError:
            raise EdgeUnavailable(
                f"the edge did not answer the bind in {self.bind_timeout:g}s; try again"
            ) from None
        except Exception as exc:
            code, message = sdk_error(exc)
            if code is None:
                log.warning("bind failed without an edge error code: %r", exc)
                raise EdgeUnavailable(
                    "the edge could not be reached to start the tunnel; see the agent's log"
                ) from None
            raise EdgeRefused(code, message) from None

    async def unbind(self, listener: Any) -> None:
        """Stop an endpoint at once (the edge drops its public name)."""
        await asyncio.wait_for(listener.close(), self.bind_timeout)
