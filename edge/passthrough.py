"""TLS endpoints (``tls://<name>``): connections to the HTTPS listener routed by the SNI name of
their ClientHello, to the agent.

The HTTPS listener (``edge.tls.HttpsListener``) peeks at the ClientHello before it starts
TLS. When a TLS endpoint (an agent's Bind with proto ``tls``: the CLI's ``ngrok tls``, the
SDKs' ``tls_endpoint()``) serves that name, :func:`serve` takes the connection instead:

- by default (passthrough) the raw bytes, ClientHello included (it was only peeked at), go to
  the agent on a proxy stream whose header says ``Proto: tls``, ``EdgeType: 2`` and
  ``PassthroughTLS: true``; the agent's upstream (or the agent itself, the SDKs' agent-side
  termination) does the handshake, so the client sees the agent's own certificate and the
  edge never holds its key;
- with ``TLSTermination`` (the SDKs' ``termination(cert, key)``) the edge completes the
  handshake with that certificate and key (held in memory only), or with its own certificate
  for the name when the option carries no pair, and the agent gets the plaintext
  (``PassthroughTLS: false``).

The endpoint's ``on_tcp_connect`` rules (``IPRestriction``, a ``TrafficPolicy``) are enforced
before anything is forwarded or any handshake is made, as for TCP endpoints. A TLS endpoint
is never reached through the HTTP listener (there is no HTTP to route by). ``MutualTLSAtEdge``
(client certificates checked by the edge, the SDKs' ``mutual_tlsca`` on a TLS endpoint)
is enforced by the edge's handshake when it terminates (a client without a certificate from
those CAs fails the handshake), and refused at Bind without ``TLSTermination``
(ERR_NGROK_1602): a passed-through handshake is the agent's.
"""

import asyncio
import base64
import binascii
import logging
import ssl
from typing import Any, Dict, Optional

from chalicelib.core import binding, edge_errors
from chalicelib.core import policy as tp
from edge import certs, connections, enforce, tls_spec
from edge.http_io import splice

log = logging.getLogger("edge.passthrough")

PROTO = "tls"
EDGE_TYPE_TLS = "2"
EDGE_CERTIFICATE = "edge"
HANDSHAKE_TIMEOUT = 15.0  # TLSTermination without a pair: the edge's own certificate


def options(opts: Dict[str, Any]) -> enforce.Enforcement:
    """The enforcement of a TLS endpoint's Bind options, or Refused."""
    rest = {
        k: v
        for k, v in opts.items()
        if k not in ("MutualTLSAtAgent", "TLSTermination", "MutualTLSAtEdge")
    }
    return enforce.tcp_options(rest)


def client_certificates(option: Any, terminated: bool) -> Any:
    """The ``edge.tls_spec.TlsSpec`` of ``MutualTLSAtEdge`` (client certificates checked by the
    edge's handshake; the same shape as HTTP endpoints' ``MutualTLSCA``), None when unset;
    Refused without ``TLSTermination``: a passed-through handshake is not the edge's."""
    spec = tls_spec.spec_of_bind(option)
    if spec is not None and not terminated:
        raise binding.Refused(
            edge_errors.INVALID_OPTION,
            "MutualTLSAtEdge needs TLSTermination: the edge checks client "
            "certificates only on a handshake it makes, not on one it passes "
            "through.",
        )
    return spec


def termination(option: Any, spec: Any = None) -> Any:
    """What a ``TLSTermination`` option asks: None (absent: pass through), EDGE_CERTIFICATE
    (present without a pair: terminate with the edge's certificate for the name), or a server
    context of the agent's certificate and key (PEM, base64 in the JSON as ngrok-go sends
    bytes), requiring a client certificate when ``spec`` says so; Refused when they cannot be
    loaded together."""
    if option is None:
        return None
    if not isinstance(option, dict):
        raise binding.Refused(edge_errors.INVALID_OPTION, "TLSTermination must be an object.")
    cert, key = option.get("cert"), option.get("key")
    if not cert and not key:
        if option.get("sealed_key"):
            raise binding.Refused(
                edge_errors.INVALID_OPTION,
                "TLSTermination with a sealed key is not supported; send the key itself.",
            )
        return EDGE_CERTIFICATE
    try:
        cert_pem, key_pem = (
            base64.b64decode(v, validate=True) if isinstance(v, str) else bytes(v or b"")
            for v in (cert, key)
        )
        ctx = certs.context_from_pem(cert_pem, key_pem)
        return tls_spec.apply(ctx, spec) if spec is not None else ctx
    except (ValueError, TypeError, ssl.SSLError, binascii.Error) as exc:
        raise binding.Refused(
            edge_errors.INVALID_OPTION,
            f"TLSTermination's certificate and key could not be loaded together: {str(exc)[:200]}",
        ) from None


def tunnel_for(edge: Any, name: str) -> Any:
    tunnel = edge.registry.by_host.get(name) if name else None
    if tunnel is None or tunnel.proto != PROTO:
        return None
    return edge.registry.pick(tunnel.pool) if tunnel.pool else tunnel


async def serve(edge: Any, transport: asyncio.Transport, name: str) -> bool:
    """Pass the connection to the TLS endpoint serving ``name``; False (nothing done) when
    no TLS endpoint serves it."""
    tunnel = tunnel_for(edge, name)
    if tunnel is None:
        return False
    peer = transport.get_extra_info("peername") or ("", 0)
    ticket = edge.admission.admit(str(peer[0]), transport)
    if ticket is None:
        transport.abort()
        return True
    writer: Optional[asyncio.StreamWriter] = None
    try:
        if not await _allowed(edge, tunnel, transport, peer, name):
            transport.abort()
            return True
        ending = tunnel.termination
        if ending is None:  # passthrough: the bytes as they come, ClientHello first
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            writer = asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop())
            transport.resume_reading()
        else:  # terminated here (TLSTermination), plaintext to the agent
            ctx = (
                edge.certs.context_for([name], tunnel.tls)
                if ending == EDGE_CERTIFICATE
                else ending
            )
            try:
                reader, writer = await connections.start_server_tls(
                    transport, ctx, HANDSHAKE_TIMEOUT
                )
            except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
                transport.abort()
                return True
        try:
            sock = transport.get_extra_info("sockname") or ("", 0)
            stream = await tunnel.session.open_proxy(
                tunnel,
                f"{peer[0]}:{peer[1]}",
                PROTO,
                passthrough_tls=ending is None,
                server_addr=f"{sock[0]}:{sock[1]}",
            )
        except ConnectionError:  # StreamReset / StreamsExhausted: the agent is gone or full
            return True
        await splice(reader, writer, stream)
    finally:
        edge.admission.release(ticket)
        if writer is not None:
            writer.close()
    return True


async def _allowed(
    edge: Any, tunnel: Any, transport: asyncio.Transport, peer: Any, name: str
) -> bool:
    """The endpoint's on_tcp_connect rules let the connection through (restrict-ips, with
    IP policies from the edge's cache; any other outcome than continue closes it)."""
    enforcement = tunnel.enforcement
    if enforcement is None or enforcement.policy is None:
        return True
    sock = transport.get_extra_info("sockname") or ("", 0)
    conn = tp.Conn(
        client_ip=str(peer[0]),
        client_port=int(peer[1] or 0),
        server_ip=str(sock[0]),
        server_port=int(sock[1] or 0),
        endpoint=tp.Endpoint(
            id=tunnel.endpoint_id or tunnel.id,
            url=tunnel.url,
            host=name,
            port=int(sock[1] or 0),
            protocol=PROTO,
            account_id=tunnel.account_id,
        ),
        server_region=edge.settings.region,
    )
    if enforcement.policy.ip_policy_ids:
        conn.ip_policy_resolver = await edge.router.ip_policy_resolver(
            tunnel.account_id, enforcement.policy
        )
    out = enforcement.policy.on_tcp_connect(conn, enforcement.policy.new_state())
    return out.kind == tp.CONTINUE
