"""What the edge serves where: the binds of agent tunnels (a name over HTTP/HTTPS, a TCP
port, an internal endpoint, a labeled tunnel), the claims that make a name one owner's
service-wide, the online items the API reads, and a tunnel's end (a name handed to the pool
or the other scheme's endpoint that keeps serving it).

Rules (who may bind what) are the core's (chalicelib.core.binding); this room applies them on
this instance and keeps the registry, the TCP listeners and the store in step.
"""

import functools
import logging
from typing import TYPE_CHECKING, Optional, Tuple

from chalicelib.core import binding, edge_errors, errors, hostnames, online
from edge import enforce, legacy, pools
from edge.http_routing import BANNED
from edge.registry import Tunnel

if TYPE_CHECKING:
    from edge.server import Edge

log = logging.getLogger("edge")

MAX_GENERATE_ATTEMPTS = 8


class Binds:
    """The edge's binds (``edge.binds``)."""

    def __init__(self, edge: "Edge"):
        self.edge = edge

    async def _claim(self, tunnel: Tunnel, name: str) -> None:
        try:
            await self.edge.call(
                online.claim_hostname,
                name,
                account_id=tunnel.account_id,
                endpoint_id=tunnel.endpoint_id,
                instance_id=self.edge.settings.instance_id,
            )
        except errors.Conflict:
            raise binding.Refused(
                edge_errors.ENDPOINT_IN_USE,
                f"The endpoint '{name}' is already online. "
                "Stop the agent serving it first, or use "
                "another name.",
            ) from None

    async def _take_over(self, tunnel: Tunnel) -> None:
        """A re-bind of a tunnel id another (stale) session of this instance still holds."""
        held = self.edge.registry.by_id.get(tunnel.id)
        if held is not None and held.session is not tunnel.session:
            held.session.tunnels.pop(held.id, None)
            self.edge.registry.remove(held)

    async def bind_http(self, tunnel: Tunnel, requested: str) -> None:
        grant = tunnel.session.grant
        await self._take_over(tunnel)
        if requested.lower().endswith(online.INTERNAL_SUFFIX):
            await self._bind_internal(tunnel, requested)
            return
        sibling = None  # the other scheme's endpoint of this name, this session (edge.legacy)
        if requested:
            name = await self.edge.call(binding.check_domain, grant, requested)
            if name in self.edge.banned:
                raise binding.Refused(*BANNED)
            sibling = legacy.sibling_for(tunnel, self.edge.registry, name)
            if sibling is None and tunnel.pooled and tunnel.proto in pools.POOLABLE:
                await pools.bind(self.edge, tunnel, name)  # the store's pool (edge.pools)
            elif sibling is None:
                try:
                    await self._claim(tunnel, name)
                except binding.Refused as exc:
                    raise await pools.refused(self.edge, exc, tunnel, name)
        elif (remembered := await self._remembered(tunnel)) is not None:
            (name, sibling), tunnel.generated = remembered, True
        elif (sibling := legacy.generated_partner(tunnel)) is not None:
            name, tunnel.generated = sibling.hostname, True
        else:
            tunnel.generated = True
            for attempt in range(MAX_GENERATE_ATTEMPTS):
                name = binding.generated_domain()
                if not binding.acl_allows_domain(grant, name):
                    raise binding.Refused(
                        edge_errors.ACL_REFUSED,
                        "The credential ACL policy does not permit binding a "
                        f"generated name under {self.edge.settings.base_domain}; ask for a domain "
                        "the ACL allows.",
                    )
                try:
                    await self._claim(tunnel, name)
                    break
                except binding.Refused:
                    if attempt == MAX_GENERATE_ATTEMPTS - 1:
                        raise
        if sibling is not None:
            legacy.pair(tunnel, sibling)
        tunnel.hostname = name
        scheme = "http" if tunnel.proto == "http" else "https"
        tunnel.url = self.edge.settings.http_url(name, scheme)
        if tunnel.proto == "tls":  # served on the HTTPS listener (edge.passthrough)
            tunnel.url = "tls" + tunnel.url[len("https") :]
        self.edge.registry.add(tunnel)
        await self._online(tunnel)

    async def _remembered(self, tunnel: Tunnel) -> Optional[Tuple[str, Optional[Tunnel]]]:
        """A re-bind (same tunnel id, no name asked) after the agent's session dropped: the
        generated name it had, and the endpoint of this session it pairs with if any, when
        the ACL still allows the name and no one took it meanwhile; None otherwise (a new
        name is generated).

        The CLI 2.x serves one name as two endpoints (http, https) of one session, and
        re-binds them in any order. The half re-bound second pairs with the first, found by
        the name (edge.legacy.sibling_for), not by guessing (its session may hold several
        unpaired halves meanwhile). The half re-bound first may find the claim held by the
        other half's endpoint on the instance it left (a drain keeps claims, edge.cluster):
        the claim moves to it (chalicelib.core.online.take_partner_claim), never from a
        holder on this instance (that one is bound here and pairs instead)."""
        if not tunnel.rebind:
            return None
        name = await self.edge.call(online.remembered_name, tunnel.account_id, tunnel.id)
        if (
            not name
            or ":" in name
            or name in self.edge.banned
            or not binding.acl_allows_domain(tunnel.session.grant, name)
        ):
            return None
        sibling = legacy.sibling_for(tunnel, self.edge.registry, name)
        if sibling is not None:
            return name, sibling
        try:
            await self._claim(tunnel, name)
        except binding.Refused:
            partner_proto = legacy.partner_proto(tunnel)
            if partner_proto is None or not await self.edge.call(
                online.take_partner_claim,
                name,
                account_id=tunnel.account_id,
                endpoint_id=tunnel.endpoint_id,
                instance_id=self.edge.settings.instance_id,
                session_id=tunnel.session.id,
                partner_proto=partner_proto,
            ):
                return None
        return name, None

    async def _remembered_port(self, tunnel: Tunnel) -> Optional[int]:
        if not tunnel.rebind:
            return None
        name = await self.edge.call(online.remembered_name, tunnel.account_id, tunnel.id)
        host, _, port = (name or "").rpartition(":")
        return int(port) if host == self.edge.settings.tcp_host and port.isdigit() else None

    async def _bind_internal(
        self, tunnel: Tunnel, requested: str, port: Optional[int] = None
    ) -> None:
        """An internal endpoint (``https://<name>.internal``): any well-formed name, no
        reservation (hosted rule; ``tcp://<name>.internal:<port>`` for TCP, no listener);
        namespaced per account (its claim is ``<name>@<account>``,
        chalicelib.core.online.claim_name); reachable only through a ``forward-internal`` action
        of an endpoint of the same account, never from the public listeners."""
        try:
            name = hostnames.parse(requested, min_labels=2)
        except hostnames.InvalidHostname as exc:
            raise binding.Refused(
                edge_errors.INVALID_OPTION, f"Invalid domain '{requested}': {exc}"
            ) from None
        if not binding.acl_allows_domain(tunnel.session.grant, name):
            raise binding.Refused(
                edge_errors.ACL_REFUSED,
                f"The credential ACL policy does not permit binding this domain: {name}",
            )
        enforce.check_internal(tunnel.proto, tunnel.enforcement)
        tunnel.internal = True
        tunnel.hostname = name
        await self._claim(tunnel, online.claim_name(name, tunnel.account_id))
        if tunnel.proto == "tcp":
            tunnel.url = f"tcp://{name}:{port}"
        else:
            tunnel.url = f"{'http' if tunnel.proto == 'http' else 'https'}://{name}"
        self.edge.registry.add(tunnel)
        await self._online(tunnel)

    async def bind_tcp(self, tunnel: Tunnel, requested: str) -> None:
        """A TCP endpoint: the requested address (``host:port`` of this edge's range; when
        someone reserved it, only its account may bind it) or a free port no one reserved."""
        grant = tunnel.session.grant
        host = self.edge.settings.tcp_host
        await self._take_over(tunnel)
        low, high = self.edge.settings.tcp_ports
        want_host, _, port_text = requested.rpartition(":")
        if want_host.lower().endswith(online.INTERNAL_SUFFIX):
            if (
                not (port_text.isascii() and port_text.isdigit())
                or not 1 <= int(port_text) <= 65535
            ):
                raise binding.Refused(
                    edge_errors.INVALID_OPTION,
                    f"An internal TCP endpoint needs "
                    f"<name>.internal:<port>, got "
                    f"'{requested[:300]}'.",
                )
            await self._bind_internal(tunnel, want_host, int(port_text))
            return
        if requested:
            if (
                not port_text.isdigit()
                or not low <= int(port_text) <= high
                or want_host.lower() not in (host, "")
            ):
                raise binding.Refused(
                    edge_errors.ADDRESS_NOT_RESERVED, f"The address {requested} is not reserved."
                )
            candidates = [int(port_text)]
        else:
            tunnel.generated = True
            candidates = [
                p
                for p in range(low, high + 1)
                if p not in self.edge.registry.by_port and p not in self.edge.reserved_ports
            ]
            before = await self._remembered_port(tunnel)
            if before in candidates:  # a reconnect: the port it had first, if still free
                candidates.remove(before)
                candidates.insert(0, before)
        for port in candidates:
            address = f"{host}:{port}"
            try:
                await self.edge.call(binding.check_address, grant, address, bool(requested))
            except binding.Refused:
                if requested:
                    raise
                continue  # reserved since the edge last read the reservations: not free
            try:
                await self._claim(tunnel, address)
            except binding.Refused:
                if requested:
                    raise
                continue
            try:
                await self.ensure_port_listener(port)
            except OSError:
                await self.edge.call(
                    online.release_hostname, address, endpoint_id=tunnel.endpoint_id
                )
                if requested:
                    raise binding.Refused(
                        edge_errors.ENDPOINT_IN_USE, f"The address {address} is in use."
                    ) from None
                continue
            tunnel.port = port
            tunnel.url = f"tcp://{address}"
            self.edge.registry.add(tunnel)
            if tunnel.generated and self.edge.cluster is not None:
                # every instance listens on it too (edge.edges.watch_reserved_ports)
                await self.edge.call(
                    online.generated_port_opened,
                    port,
                    tunnel.account_id,
                    self.edge.settings.instance_id,
                )
            await self._online(tunnel)
            return
        raise binding.Refused(
            edge_errors.ENDPOINT_IN_USE, "No TCP port is free in this edge's range."
        )

    async def ensure_port_listener(self, port: int) -> None:
        """One listener per TCP port, shared by an agent's TCP endpoint and a TCP edge's
        reserved address (OSError when the port cannot be bound)."""
        if port not in self.edge.port_listeners:  # the core's (edge/tcp_front.py)
            self.edge.port_listeners[port] = self.edge.carrier.listen_tcp(
                functools.partial(self.edge.tcp.accepted, port),
                self.edge.settings.host,
                port,
                shared=self.edge.cluster is not None,  # every instance: edge.cluster
            )

    def release_port(self, port: int) -> None:
        if (
            port in self.edge.reserved_ports
            or port in self.edge.cluster_ports
            or port in self.edge.registry.by_port
        ):
            return
        if self.edge.port_listeners.pop(port, None) is not None:
            self.edge.carrier.close(port)

    async def add_labeled(self, tunnel: Tunnel) -> None:
        self.edge.registry.add(tunnel)
        await self._online(tunnel)

    async def _online(self, tunnel: Tunnel) -> None:
        if tunnel.generated:  # kept for a re-bind even if this process dies (kill -9)
            await self.edge.call(
                online.remember_name,
                tunnel.account_id,
                tunnel.id,
                tunnel.hostname or f"{self.edge.settings.tcp_host}:{tunnel.port}",
            )
        await self.edge.call(
            online.tunnel_started,
            account_id=tunnel.account_id,
            session_id=tunnel.session.id,
            tunnel_id=tunnel.id,
            instance_id=self.edge.settings.instance_id,
            proto=tunnel.proto,
            public_url=tunnel.url or None,
            hostname=tunnel.hostname or None,
            port=tunnel.port or None,
            labels=tunnel.labels or None,
            forwards_to=tunnel.forwards_to,
            metadata=tunnel.metadata,
            description=tunnel.description,
            endpoint_id=tunnel.endpoint_id if tunnel.url else None,
            traffic_policy=str(tunnel.opts.get("TrafficPolicy") or ""),
            pooling_enabled=tunnel.pooled,
            bindings=["internal"] if tunnel.internal else ["public"],
        )

    async def drop_tunnel(self, tunnel: Tunnel, remember: bool = False) -> None:
        """Stop serving a tunnel: registry, listener, claim and online items. ``remember``
        (its session ended, the agent may reconnect): a generated name or port is kept for
        the re-bind of the same tunnel id (chalicelib.core.online.remember_name)."""
        if self.edge.registry.by_id.get(tunnel.id) is not tunnel:
            return  # already taken over by a reconnect
        partner = tunnel.sibling or next(
            (t for t in tunnel.pool or () if t is not tunnel), None
        )  # who keeps serving the name (its claim)
        self.edge.registry.remove(tunnel)
        if tunnel.port:
            self.release_port(tunnel.port)
        name = (
            online.claim_name(tunnel.hostname, tunnel.account_id)
            if tunnel.hostname
            else f"{self.edge.settings.tcp_host}:{tunnel.port}"
            if tunnel.port
            else ""
        )
        try:
            if remember and tunnel.generated and (tunnel.hostname or tunnel.port):
                await self.edge.call(
                    online.remember_name,
                    tunnel.account_id,
                    tunnel.id,
                    tunnel.hostname or f"{self.edge.settings.tcp_host}:{tunnel.port}",
                )
            if remember and self.edge.cluster is not None and self.edge.cluster.keep_claims():
                return  # draining: the agent's re-bind elsewhere takes its items over
            pooled = tunnel.pooled and bool(tunnel.hostname) and not tunnel.internal
            here = self.edge.settings.instance_id  # not what a resumed session re-bound elsewhere
            if pooled:  # the claim passes to the pool's next member (edge.pools)
                await pools.leave(self.edge, tunnel, name)
            elif name and tunnel.holds_claim:
                await self.edge.call(
                    online.release_hostname, name, endpoint_id=tunnel.endpoint_id, instance_id=here
                )
            if tunnel.port and tunnel.generated and self.edge.cluster is not None:
                await self.edge.call(online.generated_port_closed, tunnel.port, here)
            await self.edge.call(online.tunnel_stopped, tunnel.account_id, tunnel.id, here)
            if (
                partner is not None
                and tunnel.holds_claim
                and not pooled
                and not partner.session.ended
            ):
                partner.holds_claim = True  # the other scheme's endpoint keeps serving it
                await self._claim(partner, name)
        except Exception:  # the store being down must not keep a dead tunnel routed
            log.exception("could not record that tunnel %s stopped", tunnel.id)
