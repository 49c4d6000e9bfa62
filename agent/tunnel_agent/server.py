"""Assembly: settings -> default policy -> tunnels (restored from file) -> two listeners."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from .api import create_api_app
from .config import Settings
from .errors import StartupError
from .ingress import Ingress
from .policy import load_default_policy
from .store import TunnelsFile
from .tunnels import TunnelService

log = logging.getLogger("tunnel_agent")


@dataclass
class RunningAgent:
    service: TunnelService
    api_runner: web.AppRunner
    ingress_runner: web.AppRunner
    api_port: int
    ingress_port: int

    async def stop(self) -> None:
        await self.api_runner.cleanup()
        await self.ingress_runner.cleanup()


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
    """Start both listeners; raise StartupError (nothing listening) when the agent cannot run."""
    default_policy = load_default_policy(settings.default_policy_file)
    driver = None
    if settings.ngrok_authtoken:
        from .ngrok_driver import NgrokDriver

        driver = NgrokDriver(settings.ngrok_authtoken)
        driver.check()
    service = TunnelService(
        TunnelsFile(settings.tunnels_file), default_policy, settings.base_domain, driver
    )
    await service.restore()
    if not settings.api_token and not _is_loopback(settings.host):
        log.warning(
            "the API listens on %s without AGENT_API_TOKEN: anyone who reaches it can "
            "create tunnels", settings.host,
        )

    ingress = Ingress(service, settings.upstream_timeout)
    ingress_runner = web.AppRunner(ingress.app(), access_log=None, handle_signals=False)
    api_runner = web.AppRunner(
        create_api_app(service, settings.api_token), access_log=None, handle_signals=False
    )
    await ingress_runner.setup()
    await api_runner.setup()
    try:
        await web.TCPSite(ingress_runner, settings.host, settings.ingress_port).start()
        await web.TCPSite(api_runner, settings.host, settings.api_port).start()
    except OSError as exc:
        await api_runner.cleanup()
        await ingress_runner.cleanup()
        raise StartupError(f"cannot listen on {settings.host}: {exc.strerror or exc}") from None
    ingress_port = _bound_port(ingress_runner)
    service.url_port = settings.url_port or ingress_port
    return RunningAgent(service, api_runner, ingress_runner, _bound_port(api_runner), ingress_port)


async def serve(settings: Settings) -> None:
    agent = await start_agent(settings)
    # Tests and scripts wait for this exact line (ports may be 0 = ephemeral).
    print(
        f"tunnel-agent ready api=http://{settings.host}:{agent.api_port} "
        f"ingress=http://{settings.host}:{agent.ingress_port} "
        f"tunnels={len(agent.service)} file={agent.service.store.path}",
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
        await agent.stop()
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    import sys

    from .config import load_settings

    try:
        settings = load_settings(argv)
        logging.basicConfig(
            level=getattr(logging, settings.log_level, logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        asyncio.run(serve(settings))
    except StartupError as exc:
        print(f"tunnel-agent: cannot start: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
