"""Optional: also publish each tunnel through a real ngrok cloud session.

Off by default; on only when NGROK_AUTHTOKEN is set. Needs the ``ngrok`` SDK
(``pip install 'tunnel-agent[ngrok]'`` or ``pip install ngrok``), imported lazily so the
agent and its tests never need it. With the driver on, each tunnel is forwarded by the
ngrok cloud straight to its ``forwards_to`` with the tunnel's effective policy as the
ngrok traffic policy; the tunnel's ``url`` becomes the public ngrok URL. The local ingress
keeps serving the tunnel's domain as well. A domain the agent generated is not sent to
ngrok (ngrok assigns one); a domain given at creation is (it must be yours on ngrok).

LIMITATIONS: not exercised against the real cloud by the tests (no network there); the
tests use a stand-in module with the same ``forward``/``disconnect`` calls.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
from typing import Any

from .errors import StartupError, UpstreamUnavailable
from .tunnels import Tunnel

log = logging.getLogger(__name__)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class NgrokDriver:
    def __init__(self, authtoken: str) -> None:
        self.authtoken = authtoken
        self._sdk: Any = None

    def check(self) -> None:
        """Fail at start, not at the first tunnel, when the SDK is missing."""
        try:
            sdk = importlib.import_module("ngrok")
        except ImportError:
            raise StartupError(
                "NGROK_AUTHTOKEN is set but the 'ngrok' package is not installed: "
                "pip install ngrok (or unset NGROK_AUTHTOKEN to serve tunnels locally only)"
            ) from None
        if not hasattr(sdk, "forward"):
            # The 'ngrok-api' REST client installs the same import name.
            raise StartupError(
                "NGROK_AUTHTOKEN is set but the importable 'ngrok' module is not the agent SDK "
                "(is 'ngrok-api' installed instead?): pip install ngrok"
            )
        self._sdk = sdk

    async def start(self, tunnel: Tunnel) -> str | None:
        if self._sdk is None:
            self.check()
        options: dict[str, Any] = {
            "authtoken": self.authtoken,
            "traffic_policy": json.dumps(tunnel.effective.document),
        }
        if not tunnel.generated_domain:
            options["domain"] = tunnel.domain
        try:
            listener = await _maybe_await(self._sdk.forward(tunnel.forwards_to, **options))
        except Exception as exc:
            raise UpstreamUnavailable(f"ngrok could not start the tunnel: {exc}") from None
        url = listener.url()
        log.info("tunnel %s published by ngrok at %s", tunnel.domain, url)
        return url

    async def stop(self, tunnel: Tunnel) -> None:
        if tunnel.public_url and self._sdk is not None:
            await _maybe_await(self._sdk.disconnect(tunnel.public_url))
