"""Tunnels: validation of the API input, the registry, persistence, and the SDK endpoints.

A tunnel is an HTTP endpoint of the agent's SDK session on the edge (sdk.EdgeSession).
Every mutation runs under one asyncio lock. A create binds first and saves second: a bind
the edge refuses saves nothing, and a save that fails closes the endpoint again, so the
file, the registry and what the edge serves agree. A delete saves first, then closes the
endpoint (it stops serving at once).

At start every saved tunnel is bound again through the SDK. One the edge now refuses stays
in the registry and the file with its error (GET /tunnels shows it, the log names it);
the others are bound regardless.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol
from urllib.parse import urlsplit

from .errors import AgentError, BadRequest, Conflict, PersistFailed, StartupError, TunnelNotFound
from .policy import PolicyError, check_outline, encode, has_rules
from .store import TunnelsFile
from .validation import HostnameError, normalize_hostname, parse_hostport

log = logging.getLogger(__name__)

PROTOCOLS = ("http",)
CREATE_FIELDS = ("protocol", "forwards_to", "domain", "policy")
REBIND_ATTEMPTS = 5


class Edge(Protocol):
    async def bind(self, domain: str | None, forwards_to: str, policy: str | None) -> Any: ...

    async def unbind(self, listener: Any) -> None: ...


@dataclass
class Tunnel:
    protocol: str
    forwards_to: str
    policy: dict[str, Any] | None  # as given at creation; None: the default policy applies
    effective: dict[str, Any]
    created_at: str
    domain: str | None = None  # requested, or (generated) the edge's name once bound
    generated_domain: bool = False
    url: str | None = None
    listener: Any = None
    error: dict[str, str] | None = None  # the edge's refusal when restored

    def record(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "protocol": self.protocol,
            "forwards_to": self.forwards_to,
            "policy": self.policy,
            "created_at": self.created_at,
            "generated_domain": self.generated_domain,
            "url": self.url,
        }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class TunnelService:
    def __init__(self, store: TunnelsFile, default_policy: dict[str, Any], edge: Edge) -> None:
        self.store = store
        self.default_policy = default_policy
        self.edge = edge
        self._tunnels: dict[str, Tunnel] = {}  # by domain, in creation order
        self._lock = asyncio.Lock()

    # ---- reading -------------------------------------------------------------------
    def view(self, tunnel: Tunnel) -> dict[str, Any]:
        return {
            "url": tunnel.url,
            "protocol": tunnel.protocol,
            "forwards_to": tunnel.forwards_to,
            "domain": tunnel.domain,
            "policy": tunnel.policy,
        }

    def list_view(self) -> list[dict[str, Any]]:
        out = []
        for tunnel in self._tunnels.values():
            item = self.view(tunnel)
            item["traffic_policy"] = encode(tunnel.effective)
            item["error"] = tunnel.error
            out.append(item)
        return out

    def __len__(self) -> int:
        return len(self._tunnels)

    def failed(self) -> int:
        return sum(1 for t in self._tunnels.values() if t.error)

    # ---- building ------------------------------------------------------------------
    def _build(self, body: Any, *, restoring: bool = False) -> Tunnel:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        allowed = set(CREATE_FIELDS) | (
            {"created_at", "generated_domain", "url"} if restoring else set()
        )
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise BadRequest(
                f"unknown field {unknown[0]!r}; accepted fields: {', '.join(CREATE_FIELDS)}",
                field=unknown[0],
            )
        protocol = body.get("protocol")
        if protocol is None:
            protocol = "http"
        if not isinstance(protocol, str) or protocol.lower() not in PROTOCOLS:
            raise BadRequest(
                f"protocol {protocol!r} is not supported; supported: {', '.join(PROTOCOLS)}",
                field="protocol",
            )

        forwards_to = body.get("forwards_to")
        if forwards_to in (None, ""):
            raise BadRequest("forwards_to is required, as 'host:port'", field="forwards_to")
        if not isinstance(forwards_to, str):
            raise BadRequest("forwards_to must be a string 'host:port'", field="forwards_to")
        try:
            parse_hostport(forwards_to)
        except ValueError as exc:
            raise BadRequest(
                f"forwards_to {forwards_to!r} is invalid: {exc}", field="forwards_to"
            ) from None

        domain = body.get("domain")
        generated = bool(body.get("generated_domain")) if restoring else False
        if domain in (None, ""):
            domain, generated = None, True
        else:
            if not isinstance(domain, str):
                raise BadRequest("domain must be a string hostname", field="domain")
            try:
                domain = normalize_hostname(domain)
            except HostnameError as exc:
                raise BadRequest(
                    f"domain {body['domain']!r} is invalid: {exc}", field="domain"
                ) from None

        policy = body.get("policy")
        if policy is None:
            effective = self.default_policy
        else:
            try:
                effective = check_outline(policy)
            except PolicyError as exc:
                raise BadRequest(
                    f"policy is invalid: {exc}", field="policy", path=exc.path
                ) from None
        url = body.get("url") if restoring and isinstance(body.get("url"), str) else None
        return Tunnel(
            protocol=protocol.lower(),
            forwards_to=forwards_to.strip(),
            policy=policy,
            effective=effective,
            created_at=(body.get("created_at") if restoring else None) or _now(),
            domain=domain,
            generated_domain=generated,
            url=url,
        )

    async def _bind(self, tunnel: Tunnel) -> None:
        """Start the tunnel's endpoint on the edge; sets url/domain (the edge's answer)."""
        policy = encode(tunnel.effective) if has_rules(tunnel.effective) else None
        listener = await self.edge.bind(tunnel.domain, tunnel.forwards_to, policy)
        tunnel.listener = listener
        tunnel.url = listener.url()
        tunnel.domain = _host_of(tunnel.url) or tunnel.domain
        tunnel.error = None

    async def _unbind(self, tunnel: Tunnel) -> None:
        listener, tunnel.listener = tunnel.listener, None
        if listener is None:
            return
        try:
            await self.edge.unbind(listener)
        except Exception as exc:  # the tunnel is gone from the agent either way
            log.warning("closing the endpoint of %s failed: %s", tunnel.domain, exc)

    # ---- mutations -----------------------------------------------------------------
    async def _save(self, tunnels: dict[str, Tunnel]) -> None:
        records = [t.record() for t in tunnels.values()]
        try:
            await asyncio.to_thread(self.store.save, records)
        except OSError as exc:
            log.error("saving tunnels file %s failed: %s", self.store.path, exc)
            raise PersistFailed(
                f"could not save the tunnels file; nothing was changed ({exc.strerror or exc})"
            ) from None

    async def create(self, body: Any) -> Tunnel:
        tunnel = self._build(body)
        async with self._lock:
            if tunnel.domain is not None and tunnel.domain in self._tunnels:
                raise Conflict(
                    f"domain {tunnel.domain!r} is already served by another tunnel of this agent",
                    field="domain",
                )
            await self._bind(tunnel)  # EdgeRefused / EdgeUnavailable: nothing saved
            assert tunnel.domain is not None
            if tunnel.domain in self._tunnels:  # a generated name equal to a saved one
                await self._unbind(tunnel)
                raise Conflict(
                    f"domain {tunnel.domain!r} is already served by another tunnel of this agent",
                    field="domain",
                )
            updated = dict(self._tunnels)
            updated[tunnel.domain] = tunnel
            try:
                await self._save(updated)
            except PersistFailed:
                await self._unbind(tunnel)
                raise
            self._tunnels = updated
        log.info("tunnel %s -> %s created", tunnel.url, tunnel.forwards_to)
        return tunnel

    def resolve(self, url_part: str) -> Tunnel:
        """The one tunnel ``url_part`` names: its host (optionally as the URL, with scheme
        and port), or the first label of its host when no other tunnel shares it. Never a
        substring match."""
        part = url_part.strip().lower()
        for scheme in ("http://", "https://"):
            if part.startswith(scheme):
                part = part[len(scheme) :]
        part = part.rstrip("/").rstrip(".")
        if part.count(":") == 1:
            part = part.split(":", 1)[0]
        if part in self._tunnels:
            return self._tunnels[part]
        if part and "." not in part:
            matches = [t for d, t in self._tunnels.items() if d.split(".", 1)[0] == part]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise Conflict(
                    f"{url_part!r} matches several tunnels "
                    f"({', '.join(sorted(str(t.domain) for t in matches))}); use the full host",
                    url_part=url_part,
                )
        raise TunnelNotFound(f"no tunnel matches {url_part!r}", url_part=url_part)

    async def delete(self, url_part: str) -> Tunnel:
        async with self._lock:
            tunnel = self.resolve(url_part)
            updated = {d: t for d, t in self._tunnels.items() if d != tunnel.domain}
            await self._save(updated)
            self._tunnels = updated
            await self._unbind(tunnel)
        log.info("tunnel %s deleted", tunnel.url or tunnel.domain)
        return tunnel

    async def restore(self) -> None:
        """Bind every saved tunnel again. A record that is not valid stops the agent (the
        file is corrupt); a tunnel the edge refuses is kept with its error."""
        records = self.store.load()
        restored: dict[str, Tunnel] = {}
        for index, record in enumerate(records):
            try:
                tunnel = self._build(record, restoring=True)
            except BadRequest as exc:
                raise StartupError(
                    f"tunnels file {str(self.store.path)!r} is corrupt "
                    f"(tunnels[{index}]: {exc.msg}); fix or remove it (it was left untouched)"
                ) from None
            if tunnel.domain is None:
                raise StartupError(
                    f"tunnels file {str(self.store.path)!r} is corrupt (tunnels[{index}] has "
                    "no domain); fix or remove it (it was left untouched)"
                )
            if tunnel.domain in restored:
                raise StartupError(
                    f"tunnels file {str(self.store.path)!r} is corrupt (domain "
                    f"{tunnel.domain!r} appears twice); fix or remove it (it was left untouched)"
                )
            restored[tunnel.domain] = tunnel
        for domain, tunnel in restored.items():
            try:
                await self._bind(tunnel)
            except AgentError as exc:
                tunnel.error = {"error_code": exc.code, "msg": exc.msg}
                log.error(
                    "tunnel %s -> %s could not be recreated: %s (%s); it stays listed "
                    "with this error until deleted",
                    domain,
                    tunnel.forwards_to,
                    exc.msg,
                    exc.code,
                )
            else:
                if tunnel.domain != domain:
                    log.warning("tunnel %s came back as %s", domain, tunnel.url)
        self._tunnels = {str(t.domain): t for t in restored.values()}
        log.info(
            "restored %d tunnel(s) from %s (%d refused by the edge)",
            len(restored),
            self.store.path,
            self.failed(),
        )

    async def rebind_all(self) -> None:
        """Bind every tunnel again on a new session (sdk.EdgeSession replaced a lost one);
        one the edge refuses now keeps its error, as at start."""
        async with self._lock:
            for tunnel in self._tunnels.values():
                tunnel.listener = None  # ended with the old session
                try:
                    for attempt in range(REBIND_ATTEMPTS):
                        try:
                            await self._bind(tunnel)
                            break
                        except AgentError as exc:
                            # The edge may not have released the old session's claim yet.
                            if exc.code != "ERR_NGROK_334" or attempt == REBIND_ATTEMPTS - 1:
                                raise
                            await asyncio.sleep(1.0)
                except AgentError as exc:
                    tunnel.error = {"error_code": exc.code, "msg": exc.msg}
                    log.error(
                        "tunnel %s could not be bound again: %s (%s)",
                        tunnel.domain,
                        exc.msg,
                        exc.code,
                    )
        log.info(
            "bound %d tunnel(s) again on the new session (%d refused)",
            len(self._tunnels),
            self.failed(),
        )
