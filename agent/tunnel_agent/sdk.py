"""The agent's one session on the edge, through the official agent SDK (``ngrok``).

Every tunnel is an HTTP endpoint of this session: ``session.http_endpoint()`` with the
tunnel's domain and its effective traffic policy, forwarding to ``forwards_to``. The SDK
speaks the agent protocol to the edge (``AGENT_SERVER_ADDR`` + ``AGENT_ROOT_CAS``; both
unset: the hosted service, unchanged) and, when the connection drops, reconnects and binds
the session's endpoints again by itself. The agent applies nothing to the traffic: the
edge enforces the policy.

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
from typing import Any

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
    lost_at: float = 0.0


# The SDK calls the heartbeat handler on every new connection, before it authenticates, so
# a heartbeat right after a disconnection proves nothing: the session counts as up again
# only on a heartbeat this long after the last disconnection (the SDK's interval is 10 s).
UP_AFTER_SECONDS = 5.0
# While down, the reason is probed with a separate connect at most this often (the SDK's
# own reconnect errors say only "reconnect error"; the probe gets the edge's code).
PROBE_EVERY_SECONDS = 15.0


class EdgeSession:
    def __init__(self, authtoken: str, server_addr: str | None, root_cas: str | None,
                 connect_timeout: float = 60.0, bind_timeout: float = 20.0) -> None:
        self.authtoken = authtoken
        self.server_addr = server_addr
        self.root_cas = root_cas
        self.connect_timeout = connect_timeout
        self.bind_timeout = bind_timeout
        self.session: Any = None
        self._sdk: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # the SDK calls the handlers from its own threads
        self._state = SessionState()
        self._probe: asyncio.Task | None = None
        self._probed_at = 0.0

    # ---- state ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        with self._lock:
            return {"connected": self._state.connected, "error": self._state.error}

    def _on_disconnection(self, addr: Any, error: Any) -> None:
        log.warning("session to the edge lost (%s); the SDK reconnects", error)
        with self._lock:
            self._state.connected = False
            self._state.lost_at = time.monotonic()
            if not (self._state.error or "").startswith("ERR_NGROK_"):
                self._state.error = str(error)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start_probe)

    def _on_heartbeat(self, latency: Any) -> None:
        with self._lock:
            if self._state.connected or time.monotonic() - self._state.lost_at < UP_AFTER_SECONDS:
                return
            lost_at, self._state = self._state.lost_at, SessionState(True, None, self._state.lost_at)
        if lost_at:
            log.info("session to the edge is up again")

    def _start_probe(self) -> None:
        if self.session is None or (self._probe is not None and not self._probe.done()):
            return
        if time.monotonic() - self._probed_at < PROBE_EVERY_SECONDS:
            return
        self._probed_at = time.monotonic()
        self._probe = asyncio.ensure_future(self._run_probe())

    async def _run_probe(self) -> None:
        """Why is the session down? A fresh connect answers with the edge's code (a revoked
        authtoken: ERR_NGROK_107); one that succeeds is closed at once."""
        await asyncio.sleep(1.0)
        if self.state()["connected"]:
            return
        try:
            probe = await asyncio.wait_for(self._builder(probe=True).connect(), 10.0)
        except asyncio.TimeoutError:
            reason = "the edge does not answer"
        except Exception as exc:
            code, message = sdk_error(exc)
            reason = f"{code}: {message}" if code else f"the edge is unreachable ({message})"
        else:
            await asyncio.wait_for(probe.close(), 3.0)
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
            raise StartupError("the 'ngrok' agent SDK is not installed: "
                               "pip install -r agent/requirements.txt") from None
        if not hasattr(sdk, "SessionBuilder"):
            raise StartupError("the importable 'ngrok' module is not the agent SDK (is the "
                               "'ngrok-api' REST client installed instead?): pip install ngrok")
        return sdk

    def _builder(self, probe: bool = False) -> Any:
        builder = self._sdk.SessionBuilder().authtoken(self.authtoken)
        if self.server_addr:
            builder = builder.server_addr(self.server_addr)
        if self.root_cas:
            builder = builder.root_cas(self.root_cas)
        builder = builder.client_info("tunnel-agent", __version__)
        if not probe:
            builder = builder.handle_disconnection(self._on_disconnection)
            builder = builder.handle_heartbeat(self._on_heartbeat)
        return builder

    async def connect(self) -> None:
        """Open the session; retry unreachable edges until ``connect_timeout``; an
        authtoken the edge refuses stops at once (StartupError with the edge's code)."""
        self._sdk = self._import_sdk()
        self._loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.connect_timeout
        delay = 0.5
        while True:
            try:
                self.session = await asyncio.wait_for(
                    self._builder().connect(), max(1.0, deadline - time.monotonic()))
                with self._lock:
                    self._state = SessionState(True, None, 0.0)
                log.info("session to the edge %s is up", self.server_addr or "(SDK default)")
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
                    f"{self.connect_timeout:g}s: {message}{f' ({code})' if code else ''}")
            log.warning("edge not reachable yet (%s); retrying in %.1fs", message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
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
            raise EdgeUnavailable(f"the agent's session to the edge is down ({state['error']}); "
                                  "the SDK is reconnecting, try again later")
        builder = self.session.http_endpoint().forwards_to(forwards_to)
        if domain:
            builder = builder.domain(domain)
        if policy:
            builder = builder.traffic_policy(policy)
        try:
            return await asyncio.wait_for(builder.listen_and_forward(f"http://{forwards_to}"),
                                          self.bind_timeout)
        except asyncio.TimeoutError:
            raise EdgeUnavailable(f"the edge did not answer the bind in "
                                  f"{self.bind_timeout:g}s; try again") from None
        except Exception as exc:
            code, message = sdk_error(exc)
            if code is None:
                log.warning("bind failed without an edge error code: %r", exc)
                raise EdgeUnavailable("the edge could not be reached to start the tunnel; "
                                      "see the agent's log") from None
            raise EdgeRefused(code, message) from None

    async def unbind(self, listener: Any) -> None:
        """Stop an endpoint at once (the edge drops its public name)."""
        await asyncio.wait_for(listener.close(), self.bind_timeout)
