"""TCP endpoints: a connection to one of the edge's TCP ports goes to the agent endpoint bound
on it, else to the cloud endpoint or TCP edge of its reserved address (another instance's:
relayed, edge/cluster.py); its on_tcp_connect rules run first (forward-internal hops
included), then raw bytes both ways."""

import logging
from typing import TYPE_CHECKING

from chalicelib.core import policy as tp
from edge import ip_restrictions, observe  # observe: traffic events (edge/events.py)
from edge.connections import connection_handler
from edge.edges import Hop, forward_refused
from edge.http_io import splice
from edge.session import StreamReset

if TYPE_CHECKING:
    from edge.server import Edge

log = logging.getLogger("edge")


class TcpFront:
    """The edge's TCP ports (``edge.tcp``)."""

    def __init__(self, edge: "Edge"):
        self.edge = edge

    @connection_handler
    async def connection(self, port: int, reader, writer) -> None:
        """A connection to a TCP port: the agent endpoint bound on it, else the TCP edge of
        its reserved address; its on_tcp_connect rules first, then raw bytes to the agent."""
        peer = writer.get_extra_info("peername") or ("", 0)
        ticket = self.edge.admission.admit(str(peer[0]), writer.transport)  # busy: never evicted
        if ticket is None:
            writer.transport.abort()
            return
        counted = observe.counting(reader, writer)  # bytes, for tcp_connection_closed.v0
        reader, writer, endpoint, cloud, state = counted.reader, counted.writer, None, False, None
        try:
            tunnel = self.edge.registry.by_port.get(port)
            enforcement = tunnel.enforcement if tunnel is not None else None
            endpoint = Hop.of_tunnel(tunnel) if tunnel else Hop("", "", "", "")
            account_id = endpoint.account_id
            cloud = False
            if (
                tunnel is None
                and self.edge.cluster is not None
                and await self.edge.cluster.tcp(port, reader, writer)
            ):  # another instance's
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
                sock = writer.get_extra_info("sockname") or ("", 0)
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
            carried = await splice(reader, writer, stream)
            if carried is not None:  # the core carried the bytes: its counts
                counted.carried(*carried)
        finally:
            self.edge.admission.release(ticket)
            writer.close()
            observe.tcp_closed(self.edge, counted, peer, writer, endpoint, cloud, state)
