"""TCP endpoints: a connection to one of the edge's TCP ports goes to the agent endpoint bound
on it, else to the cloud endpoint or TCP edge of its reserved address (another instance's:
relayed, edge/cluster.py); its on_tcp_connect rules run first (forward-internal hops
included), then raw bytes both ways.

The ports' listeners are the compiled core's (``Carrier.listen_tcp``): it accepts and hands
each connection over as a socket (:meth:`TcpFront.accepted`); Python decides where it goes
without making it an asyncio transport, and the core carries its bytes (``MuxStream.carry``).
A connection becomes a stream pair only where Python itself reads or writes it: a relay to
another instance (edge/cluster.py), an OpenSSH session's channel. A connection relayed in
from another instance arrives as a stream pair (:meth:`TcpFront.connection`)."""

import logging
import socket
from typing import TYPE_CHECKING, Any, Optional, Tuple

from chalicelib.core import policy as tp
from edge import ip_restrictions, observe  # observe: traffic events (edge/events.py)
from edge.connections import connection_handler, stream_pair
from edge.edges import Hop, forward_refused
from edge.http_io import splice
from edge.session import MuxStream, StreamReset

if TYPE_CHECKING:
    from edge.server import Edge

log = logging.getLogger("edge")


class _Client:
    """A TCP port's connection as :class:`TcpFront` serves it: a socket the core handed over
    (no transport until Python itself must read or write it), or a stream pair."""

    def __init__(
        self,
        peer: Tuple[str, int],
        local: Tuple[str, int],
        sock: Optional[socket.socket] = None,
        reader: Any = None,
        writer: Any = None,
        first: bytes = b"",
        relayed: bool = False,
    ):
        self.peer, self.local = peer, local
        self.sock, self.writer = sock, writer
        self.first = first  # bytes read from the socket already: the agent's first
        self.relayed = relayed  # another instance relayed it here: never relayed again
        self.counted = observe.counting(reader, writer)  # bytes, for tcp_connection_closed.v0

    async def streams(self) -> Optional[Tuple[Any, Any]]:
        """The connection as a stream pair (made now for a socket), counting what it carries;
        None: it closed."""
        if self.writer is None and self.sock is not None:
            sock, self.sock = self.sock, None
            made = await stream_pair(sock, self.first)
            if made is None:
                return None
            self.counted.attach(*made)
            self.writer = made[1]
        if self.writer is None:
            return None
        return self.counted.reader, self.counted.writer

    async def carry(self, stream: Any) -> Optional[Tuple[int, int]]:
        """Raw bytes both ways with the agent's ``stream`` until both ends are done: by the
        core when it can (its own session's stream: then the bytes it carried), else by
        ``http_io.splice``."""
        if self.sock is not None and isinstance(stream, MuxStream) and stream.carriable:
            sock, self.sock = self.sock, None
            try:
                carried = await stream.carry(sock, to_stream=self.first)
            except (ConnectionError, OSError, StreamReset):
                sock.close()
                stream.finish()
                return None
            self.counted.carried(*carried)
            return carried
        pair = await self.streams()
        if pair is None:
            stream.finish()
            return None
        spliced = await splice(pair[0], pair[1], stream)
        if spliced is not None:  # the core carried the bytes: its counts
            self.counted.carried(*spliced)
        return spliced

    def abort(self) -> None:
        """Closed at once (admission: a busy TCP connection is never evicted, though)."""
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.writer is not None:
            self.writer.close()


class TcpFront:
    """The edge's TCP ports (``edge.tcp``)."""

    def __init__(self, edge: "Edge"):
        self.edge = edge

    @connection_handler
    async def accepted(
        self,
        port: int,
        sock: socket.socket,
        data: bytes,
        first: bool,
        tls: Any = None,
        peer: Tuple[str, int] = ("", 0),
        local: Tuple[str, int] = ("", 0),
    ) -> None:
        """A connection the core's listener of ``port`` accepted and handed over (nothing
        read from it)."""
        await self._serve(port, _Client(peer, local, sock=sock))

    async def relayed_in(
        self,
        port: int,
        sock: socket.socket,
        first: bytes,
        peer: Tuple[str, int],
        local: Tuple[str, int],
    ) -> None:
        """A connection another instance relayed here for ``port`` (edge/cluster.py, once
        this instance answered HERE), as a socket: ``first`` the bytes read from it after the
        relay line, ``peer`` the original client's address."""
        client = _Client(peer, local, sock=sock, first=first, relayed=True)
        await self._serve(port, client)

    @connection_handler
    async def connection(self, port: int, reader, writer) -> None:
        """A connection to a TCP port as a stream pair (relayed in by another instance)."""
        peer = writer.get_extra_info("peername") or ("", 0)
        local = writer.get_extra_info("sockname") or ("", 0)
        relayed = bool(getattr(writer, "relayed", False))
        await self._serve(
            port, _Client(peer, local, reader=reader, writer=writer, relayed=relayed)
        )

    async def _serve(self, port: int, client: _Client) -> None:
        """The agent endpoint bound on ``port``, else the TCP edge of its reserved address;
        its on_tcp_connect rules first, then raw bytes to the agent."""
        peer = client.peer
        ticket = self.edge.admission.admit(str(peer[0]), client)  # busy: never evicted
        if ticket is None:
            client.abort()
            return
        endpoint: Any = None
        cloud, state = False, None
        try:
            tunnel = self.edge.registry.by_port.get(port)
            enforcement = tunnel.enforcement if tunnel is not None else None
            endpoint = Hop.of_tunnel(tunnel) if tunnel else Hop("", "", "", "")
            account_id = endpoint.account_id
            cloud = False
            if tunnel is None and self.edge.cluster is not None and not client.relayed:
                pair = await client.streams()
                if pair is None or await self.edge.cluster.tcp(port, *pair):
                    return
            if tunnel is None:  # a cloud endpoint's or a TCP edge's reserved address?
                routed = await self.edge.router.route_tcp(f"{self.edge.settings.tcp_host}:{port}")
                if routed is None or routed.error is not None:
                    return
                tunnel, enforcement = routed.tunnel, routed.enforcement
                endpoint = routed.hop
                cloud, account_id = routed.cloud, routed.account_id
            if not await ip_restrictions.allows(
                self.edge, account_id, ip_restrictions.ENDPOINTS, str(peer[0])
            ):
                return  # the account's endpoints IP restrictions: closed
            forwards = 0
            while enforcement is not None and enforcement.policy is not None:
                sock = client.local
                conn = tp.Conn(
                    client_ip=str(peer[0]),
                    client_port=int(peer[1] or 0),
                    server_ip=str(sock[0]),
                    server_port=int(sock[1] or 0),
                    endpoint=tp.Endpoint(
                        id=endpoint.endpoint_id,
                        url=endpoint.url,
                        host=self.edge.settings.tcp_host,
                        port=port,
                        protocol="tcp",
                        account_id=endpoint.account_id,
                    ),
                    server_region=self.edge.settings.region,
                )
                if enforcement.policy.ip_policy_ids:  # restrict-ips ip_policies, cached
                    conn.ip_policy_resolver = await self.edge.router.ip_policy_resolver(
                        endpoint.account_id, enforcement.policy
                    )
                state = enforcement.policy.new_state()
                out = enforcement.policy.on_tcp_connect(conn, state)
                target = None
                while out.kind == tp.FORWARD_INTERNAL:
                    target = await self.edge.router.internal_target(account_id, out.url, "tcp")
                    if target is not None:
                        break
                    if out.on_error != "continue":
                        return  # offline internal endpoint, halt: closed
                    out = enforcement.policy.on_tcp_connect(conn, state)
                if target is None:
                    if out.kind != tp.CONTINUE:
                        return  # refused by ip restriction / policy: the connection is closed
                    break
                forwards += 1  # forward-internal: the internal endpoint's own rules next
                if forward_refused(target, forwards) is not None:
                    return
                tunnel, enforcement, cloud = target.tunnel, target.enforcement, target.cloud
                endpoint = target.hop
            if cloud or tunnel is None:
                return  # a cloud endpoint that did not forward (non-terminating), or a
                # TCP edge without an online tunnel: closed
            try:
                stream = await tunnel.session.open_proxy(tunnel, f"{peer[0]}:{peer[1]}", "tcp")
            except StreamReset:
                return
            await client.carry(stream)
        finally:
            self.edge.admission.release(ticket)
            client.close()
            observe.tcp_closed(
                self.edge, client.counted, peer, client.local, endpoint, cloud, state
            )
