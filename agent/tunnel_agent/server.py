"""Assembly: settings -> default policy -> SDK session -> tunnels (bound again) -> REST API."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
from dataclasses import dataclass

from aiohttp import web

from .api import create_api_app
from .config import Settings
from .errors import StartupError
from .policy import load_default_policy
from .sdk import EdgeSession
from .store import TunnelsFile
from .tunnels import TunnelService

log = logging.getLogger("tunnel_agent")
# How long a stop waits for API requests in flight (docker stop's grace period is 10 s).
SHUTDOWN_GRACE_SECONDS = 3.0


@dataclass
class RunningAgent:
    service: TunnelService
    session: EdgeSession
    api_runner: web.AppRunner
    api_port: int

    async def stop(self) -> None:
        await self.api_runner.cleanup()
        await self.session.close()


def _bound_port(runner: web.AppRunner) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return server.sockets[0].getsockname()[1]
    raise RuntimeError("listener has no socket")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def start_agent(settings: Settings) -> RunningAgent:
    """Connect, bind the saved tunnels, listen; StartupError (nothing listening) when the
    agent cannot run."""
    default_policy = load_default_policy(settings.default_policy_file)
    store = TunnelsFile(settings.tunnels_file)
    for stale in store.clean_stale_temp_files():
        log.warning("removed %s, a temporary file a crash left behind", stale)
    store.load()  # a corrupt file stops the agent before it touches the edge
    session = EdgeSession(
        settings.authtoken,
        settings.server_addr,
        settings.root_cas,
        settings.connect_timeout,
        settings.bind_timeout,
    )
    await session.connect()
    try:
        service = TunnelService(store, default_policy, session)
        session.on_replaced = service.rebind_all
        await service.restore()
        if not settings.api_token and not _is_loopback(settings.host):
            log.warning(
                "the API listens on %s without AGENT_API_TOKEN: anyone who reaches it "
                "can create tunnels",
                settings.host,
            )
        api_runner = web.AppRunner(
            create_api_app(service, session, settings.api_token),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
        )
        await api_runner.setup()
        try:
            await web.TCPSite(api_runner, settings.host, settings.api_port).start()
        except OSError as exc:
            await api_runner.cleanup()
            raise StartupError(
                f"cannot listen on {settings.host}:{settings.api_port}: {exc.strerror or exc}"
            ) from None
    except BaseException:
        await session.close()
        raise
    return RunningAgent(service, session, api_runner, _bound_port(api_runner))


async def serve(settings: Settings) -> None:
    agent = await start_agent(settings)
    # Tests and scripts wait for this exact line (the port may be 0 = ephemeral).
    print(
        f"tunnel-agent ready api=http://{settings.host}:{agent.api_port} "
        f"tunnels={len(agent.service)} failed={agent.service.failed()} "
        f"file={agent.service.store.path}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        await agent.stop()
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    import sys

    from .config import load_settings

    code = 0
    try:
        settings = load_settings(argv)
        logging.basicConfig(
            level=getattr(logging, settings.log_level, logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        asyncio.run(serve(settings))
    except StartupError as exc:
        print(f"tunnel-agent: cannot start: {exc}", file=sys.stderr, flush=True)
        code = 2
    except KeyboardInterrupt:
        pass
    if "ngrok" in sys.modules:
        # The SDK's native runtime keeps threads of its own; letting the interpreter
        # finalize around them crashed the process now and then (SIGSEGV at exit, seen
        # after a refused authtoken). Everything is closed and flushed: leave directly.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
