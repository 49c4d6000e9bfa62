"""Tunnels: validation of the API input, the in-memory registry, persistence.

Every mutation runs under one asyncio lock and is saved to the tunnels file before it
takes effect in memory, so the file and the served tunnels never disagree: a failed save
(500) leaves both as they were, and concurrent creates cannot lose each other's tunnel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from .errors import BadRequest, Conflict, PersistFailed, StartupError, TunnelNotFound
from .policy import CompiledPolicy, PolicyError, compile_policy
from .store import TunnelsFile
from .validation import HostnameError, normalize_hostname, parse_hostport

log = logging.getLogger(__name__)

PROTOCOLS = ("http",)
CREATE_FIELDS = ("protocol", "forwards_to", "domain", "policy")


class Driver(Protocol):
    """Something that publishes a tunnel elsewhere too (see ngrok_driver)."""

    async def start(self, tunnel: "Tunnel") -> str | None: ...

    async def stop(self, tunnel: "Tunnel") -> None: ...


@dataclass
class Tunnel:
    domain: str
    protocol: str
    forwards_to: str
    upstream_host: str
    upstream_port: int
    policy: dict[str, Any] | None  # as given at creation; None: the default applies
    effective: CompiledPolicy
    created_at: str
    generated_domain: bool = False
    public_url: str | None = None  # set by a driver (ngrok) when it publishes the tunnel
    active: bool = field(default=True)

    def record(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "protocol": self.protocol,
            "forwards_to": self.forwards_to,
            "policy": self.policy,
            "created_at": self.created_at,
            "generated_domain": self.generated_domain,
        }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TunnelService:
    def __init__(
        self,
        store: TunnelsFile,
        default_policy: CompiledPolicy,
        base_domain: str,
        driver: Driver | None = None,
    ) -> None:
        self.store = store
        self.default_policy = default_policy
        self.base_domain = base_domain
        self.driver = driver
        self.url_port = 8080  # set to the bound ingress port (or AGENT_URL_PORT) at start
        self._tunnels: dict[str, Tunnel] = {}
        self._lock = asyncio.Lock()

    # ---- reading -------------------------------------------------------------------
    def url_for(self, tunnel: Tunnel) -> str:
        if tunnel.public_url:
            return tunnel.public_url
        port = "" if self.url_port == 80 else f":{self.url_port}"
        return f"{tunnel.protocol}://{tunnel.domain}{port}"

    def view(self, tunnel: Tunnel) -> dict[str, Any]:
        return {
            "url": self.url_for(tunnel),
            "protocol": tunnel.protocol,
            "forwards_to": tunnel.forwards_to,
            "domain": tunnel.domain,
            "policy": tunnel.policy,
        }

    def list_view(self) -> list[dict[str, Any]]:
        out = []
        for tunnel in self._tunnels.values():  # creation order (file order after a restart)
            item = self.view(tunnel)
            item["traffic_policy"] = json.dumps(tunnel.effective.document)
            out.append(item)
        return out

    def lookup(self, host: str) -> Tunnel | None:
        """The tunnel serving ``host`` (lower-case, no port), if any."""
        return self._tunnels.get(host)

    def __len__(self) -> int:
        return len(self._tunnels)

    # ---- building ------------------------------------------------------------------
    def _build(self, body: Any, *, restoring: bool = False) -> Tunnel:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        unknown = sorted(set(body) - set(CREATE_FIELDS) - ({"created_at", "generated_domain"} if restoring else set()))
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
        protocol = protocol.lower()

        if "forwards_to" not in body or body["forwards_to"] in (None, ""):
            raise BadRequest("forwards_to is required, as 'host:port'", field="forwards_to")
        forwards_to = body["forwards_to"]
        if not isinstance(forwards_to, str):
            raise BadRequest("forwards_to must be a string 'host:port'", field="forwards_to")
        try:
            up_host, up_port = parse_hostport(forwards_to)
        except ValueError as exc:
            raise BadRequest(f"forwards_to {forwards_to!r} is invalid: {exc}", field="forwards_to") from None

        domain = body.get("domain")
        generated = bool(body.get("generated_domain")) if restoring else False
        if domain is None or domain == "":
            domain = self._generate_domain()
            generated = True
        else:
            if not isinstance(domain, str):
                raise BadRequest("domain must be a string hostname", field="domain")
            try:
                domain = normalize_hostname(domain)
            except HostnameError as exc:
                raise BadRequest(f"domain {body['domain']!r} is invalid: {exc}", field="domain") from None

        policy = body.get("policy")
        if policy is None:
            effective = self.default_policy
        else:
            try:
                effective = compile_policy(policy)
            except PolicyError as exc:
                raise BadRequest(f"policy is invalid: {exc}", field="policy", path=exc.path) from None

        return Tunnel(
            domain=domain,
            protocol=protocol,
            forwards_to=forwards_to.strip(),
            upstream_host=up_host,
            upstream_port=up_port,
            policy=policy,
            effective=effective,
            created_at=(body.get("created_at") if restoring else None) or _now(),
            generated_domain=generated,
        )

    def _generate_domain(self) -> str:
        while True:
            domain = f"{secrets.token_hex(4)}.{self.base_domain}"
            if domain not in self._tunnels:
                return domain

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
            if tunnel.generated_domain and tunnel.domain in self._tunnels:
                tunnel.domain = self._generate_domain()
            if tunnel.domain in self._tunnels:
                raise Conflict(
                    f"domain {tunnel.domain!r} is already served by another tunnel",
                    field="domain",
                )
            if self.driver is not None:
                tunnel.public_url = await self.driver.start(tunnel)
            updated = dict(self._tunnels)
            updated[tunnel.domain] = tunnel
            try:
                await self._save(updated)
            except PersistFailed:
                if self.driver is not None:
                    await self.driver.stop(tunnel)
                raise
            self._tunnels = updated
        log.info("tunnel %s -> %s created", tunnel.domain, tunnel.forwards_to)
        return tunnel

    def resolve(self, url_part: str) -> Tunnel:
        """The one tunnel ``url_part`` names: its host (optionally with scheme and port),
        its name under the base domain, or its first label when that label is unique.
        Never a substring match."""
        part = url_part.strip().lower()
        for scheme in ("http://", "https://"):
            if part.startswith(scheme):
                part = part[len(scheme):]
        part = part.rstrip("/").rstrip(".")
        if part.count(":") == 1:
            part = part.split(":", 1)[0]
        if part in self._tunnels:
            return self._tunnels[part]
        under_base = f"{part}.{self.base_domain}"
        if under_base in self._tunnels:
            return self._tunnels[under_base]
        if part and "." not in part:
            matches = [t for d, t in self._tunnels.items() if d.split(".", 1)[0] == part]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise Conflict(
                    f"{url_part!r} matches several tunnels "
                    f"({', '.join(sorted(t.domain for t in matches))}); use the full host",
                    url_part=url_part,
                )
        raise TunnelNotFound(f"no tunnel matches {url_part!r}", url_part=url_part)

    async def delete(self, url_part: str) -> Tunnel:
        async with self._lock:
            tunnel = self.resolve(url_part)
            updated = {d: t for d, t in self._tunnels.items() if d != tunnel.domain}
            await self._save(updated)
            tunnel.active = False  # in-flight proxied responses stop at their next chunk
            self._tunnels = updated
        if self.driver is not None:
            try:
                await self.driver.stop(tunnel)
            except Exception as exc:  # the tunnel is gone locally; report, don't fail
                log.warning("driver could not stop %s: %s", tunnel.domain, exc)
        log.info("tunnel %s deleted", tunnel.domain)
        return tunnel

    async def restore(self) -> None:
        """Recreate every saved tunnel; a record that is not valid stops the agent."""
        records = self.store.load()
        restored: dict[str, Tunnel] = {}
        for index, record in enumerate(records):
            try:
                tunnel = self._build(record, restoring=True)
            except (BadRequest, Conflict) as exc:
                raise StartupError(
                    f"tunnels file {str(self.store.path)!r} is corrupt "
                    f"(tunnels[{index}]: {exc.msg}); fix or remove it (it was left untouched)"
                ) from None
            if tunnel.domain in restored:
                raise StartupError(
                    f"tunnels file {str(self.store.path)!r} is corrupt (domain "
                    f"{tunnel.domain!r} appears twice); fix or remove it (it was left untouched)"
                )
            restored[tunnel.domain] = tunnel
        if self.driver is not None:
            for tunnel in restored.values():
                tunnel.public_url = await self.driver.start(tunnel)
        self._tunnels = restored
        log.info("restored %d tunnel(s) from %s", len(restored), self.store.path)
