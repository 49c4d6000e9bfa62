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

TLS edges (``/edges/tls``) are served here too: a name no agent endpoint serves whose
``name:443`` a TLS edge holds (its copy in memory: ``edge.tls.TlsSettings.tls_edge_for``) goes
to a labeled tunnel of its tunnel-group backend (``EdgeRouter.route_tls_edge``), its modules
run as one ``on_tcp_connect`` policy. A ``terminate-tls`` action's outcome (a TLS edge's
tls_termination and mutual_tls modules become one; an endpoint's policy may hold one too) makes
the edge terminate: :func:`termination_context` (its versions, its mutual TLS CAs, its own pair
or the edge's certificate for the name), plaintext to the agent.

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
import hashlib
import logging
import ssl
from typing import Any, Dict, Optional

from chalicelib.core import binding, edge_errors
from chalicelib.core import policy as tp
from edge import certs, connections, enforce, ip_restrictions, tls_spec
from edge.http_io import splice

log = logging.getLogger("edge.passthrough")

PROTO = "tls"
EDGE_TYPE_TLS = "2"
EDGE_CERTIFICATE = "edge"
HANDSHAKE_TIMEOUT = 15.0  # TLSTermination without a pair: the edge's own certificate
MAX_PAIRS = 256  # terminate-tls server contexts of policies' own pairs, kept (oldest out)
_PAIRS: Dict[Any, ssl.SSLContext] = {}


def options(opts: Dict[str, Any]) -> enforce.Enforcement:
    """The enforcement of a TLS endpoint's Bind options, or Refused."""
    rest = {
        k: v
        for k, v in opts.items()
        if k not in ("MutualTLSAtAgent", "TLSTermination", "MutualTLSAtEdge")
    }
    return enforce.tls_options(rest)


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


async def tls_edge_routed(edge: Any, name: str) -> Any:
    """The ``edge.edges.Routed`` of the TLS edge (/edges/tls) serving ``name``, or None.
    An agent endpoint serving the name comes first, as for routing; the TLS edges' copies
    are in memory (edge/tls.py), so no store call happens here but the backend's (cached)."""
    if not name or edge.registry.by_host.get(name) is not None:
        return None
    settings = getattr(edge, "tls", None)
    if settings is None:
        return None
    if not settings.loaded.is_set():
        await asyncio.wait_for(settings.loaded.wait(), HANDSHAKE_TIMEOUT)
    found = settings.tls_edge_for(name)
    if found is None:
        return None
    return await edge.router.route_tls_edge(found, name)


async def serve(edge: Any, transport: asyncio.Transport, name: str) -> bool:
    """Pass the connection to the TLS endpoint or the TLS edge serving ``name``; False
    (nothing done) when neither serves it."""
    tunnel = tunnel_for(edge, name)
    routed = None
    if tunnel is None:
        routed = await tls_edge_routed(edge, name)
        if routed is None:
            return False
    peer = transport.get_extra_info("peername") or ("", 0)
    ticket = edge.admission.admit(str(peer[0]), transport)
    if ticket is None:
        transport.abort()
        return True
    writer: Optional[asyncio.StreamWriter] = None
    try:
        if routed is not None:  # a TLS edge: passed through unless its policy terminates
            if routed.error is not None:
                transport.abort()
                return True
            hop = (routed.endpoint_id, routed.url, routed.account_id)
            enforcement, target, ending, spec = routed.enforcement, routed.tunnel, None, None
        else:
            hop = (tunnel.endpoint_id or tunnel.id, tunnel.url, tunnel.account_id)
            enforcement, target, ending = tunnel.enforcement, tunnel, tunnel.termination
            spec = tunnel.tls
        if not await ip_restrictions.allows(
            edge, hop[2], ip_restrictions.ENDPOINTS, str(peer[0])
        ):  # the account's endpoints IP restrictions
            transport.abort()
            return True
        made = None  # the handshake, when made before the phase
        if (
            ending is not None
            and enforcement is not None
            and getattr(enforcement.policy, "tcp_reads_tls_client", False)
        ):  # terminated by the Bind option and the policy reads the client certificate
            ctx = edge.certs.context_for([name], spec) if ending == EDGE_CERTIFICATE else ending
            try:
                reader, writer = await connections.start_server_tls(
                    transport, ctx, HANDSHAKE_TIMEOUT
                )
            except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
                transport.abort()
                return True
            made = writer.get_extra_info("ssl_object")
        phase = await _on_tcp_connect(edge, enforcement, hop, transport, peer, name, made)
        if phase is None or target is None:  # refused, or no tunnel of the edge online
            transport.abort()
            return True
        outcome = phase.outcome
        if outcome.terminate_tls is not None:  # the terminate-tls action (or the modules)
            ending = await termination_context(edge, hop[2], name, outcome.terminate_tls)
            if ending is None:
                transport.abort()
                return True
        if ending is None:  # passthrough: the bytes as they come, ClientHello first
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            writer = asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop())
            transport.resume_reading()
        elif made is None:  # terminated here (TLSTermination, terminate-tls): plaintext
            ctx = edge.certs.context_for([name], spec) if ending == EDGE_CERTIFICATE else ending
            try:
                reader, writer = await connections.start_server_tls(
                    transport, ctx, HANDSHAKE_TIMEOUT
                )
            except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError):
                transport.abort()
                return True
            if outcome.kind == tp.TERMINATE_TLS and not phase.resume(
                writer.get_extra_info("ssl_object")
            ):  # the rules after terminate-tls, with the handshake's facts, refused it
                return True
        try:
            sock = transport.get_extra_info("sockname") or ("", 0)
            stream = await target.session.open_proxy(
                target,
                f"{peer[0]}:{peer[1]}",
                PROTO,
                passthrough_tls=ending is None,
                server_addr=f"{sock[0]}:{sock[1]}",
            )
        except ConnectionError:  # StreamReset / StreamsExhausted: the agent is gone or full
            return True
        assert writer is not None  # every way here made it (passthrough or a handshake)
        await splice(reader, writer, stream)
    finally:
        edge.admission.release(ticket)
        if writer is not None:
            writer.close()
    return True


async def termination_context(
    edge: Any, account_id: str, name: str, asked: Dict[str, Any]
) -> Optional[ssl.SSLContext]:
    """The server context of a terminate-tls action's config (``Outcome.terminate_tls``):
    its versions, its mutual TLS CAs (PEMs, and ids of the account's certificate
    authorities: one that does not resolve trusts nothing, so with none left every client
    is refused), with its own certificate and key or else the edge's for ``name``. None
    when the pair cannot be loaded (the connection is closed)."""
    pems = None
    cas = asked.get("mutual_tls_certificate_authorities")
    if cas:
        ca_ids = [c for c in cas if c.startswith("ca_")]
        found = await edge.router.ca_pems(account_id, ca_ids) if ca_ids else {}
        pems = [c for c in cas if not c.startswith("ca_")] + [
            found[i] for i in ca_ids if i in found
        ]
    spec = tls_spec.spec_of(asked.get("min_version"), pems, asked.get("max_version"))
    cert, key = asked.get("server_certificate"), asked.get("server_private_key")
    if not cert or not key:
        return edge.certs.context_for([name], spec)
    digest = hashlib.sha256(f"{cert}\0{key}".encode()).hexdigest()
    cached = _PAIRS.get((digest, spec.key))
    if cached is not None:
        return cached
    try:
        ctx = tls_spec.apply(certs.context_from_pem(cert.encode(), key.encode()), spec)
    except (ValueError, ssl.SSLError) as exc:
        log.info("terminate-tls: the certificate and key could not be loaded: %s", exc)
        return None
    if len(_PAIRS) >= MAX_PAIRS:
        _PAIRS.pop(next(iter(_PAIRS)))
    _PAIRS[(digest, spec.key)] = ctx
    return ctx


class _TcpPhase:
    """A TLS connection's on_tcp_connect run: its ``outcome``; when a terminate-tls action
    paused it (``outcome.kind == TERMINATE_TLS``), :meth:`resume` runs the rest after the
    handshake, with the connection's TLS facts and the client certificate it verified."""

    def __init__(self, outcome: tp.Outcome, policy: Any = None, conn: Any = None, state=None):
        self.outcome, self.policy, self.conn, self.state = outcome, policy, conn, state

    def resume(self, ssl_object: Any) -> bool:
        """True when the rest of the phase lets the connection through."""
        if ssl_object is not None:
            set_tls_facts(self.conn, ssl_object)
        out = self.policy.on_tcp_connect(self.conn, self.state)
        while out.kind == tp.TERMINATE_TLS:  # (none once conn.tls_version is set)
            out = self.policy.on_tcp_connect(self.conn, self.state)
        return out.kind == tp.CONTINUE


def set_tls_facts(conn: Any, ssl_object: Any) -> None:
    """The policy's view of a TLS handshake the edge made (``conn.tls.*``), the client
    certificate it verified included (DER: ``conn.tls.client.*``; none without mutual TLS)."""
    conn.tls_version = ssl_object.version() or ""
    conn.tls_cipher_suite = (ssl_object.cipher() or ("",))[0]
    conn.tls_sni = ssl_object.server_hostname or ""
    conn.tls_alpn = ssl_object.selected_alpn_protocol() or ""
    try:
        conn.tls_client_der = ssl_object.getpeercert(binary_form=True) or b""
    except ValueError:  # no handshake made
        conn.tls_client_der = b""


async def _on_tcp_connect(
    edge: Any,
    enforcement: Any,
    hop: Any,
    transport: asyncio.Transport,
    peer: Any,
    name: str,
    made: Any = None,
) -> Optional[_TcpPhase]:
    """The endpoint's (or TLS edge's) on_tcp_connect rules (restrict-ips, with IP policies
    from the edge's cache; terminate-tls): their run when they let the connection through
    (or paused at a terminate-tls), None when anything else than continue (the connection is
    closed). ``made``: the SSL object of a handshake already made (its facts are set)."""
    if enforcement is None or enforcement.policy is None:
        return _TcpPhase(tp.Outcome())
    endpoint_id, url, account_id = hop
    sock = transport.get_extra_info("sockname") or ("", 0)
    conn = tp.Conn(
        client_ip=str(peer[0]),
        client_port=int(peer[1] or 0),
        server_ip=str(sock[0]),
        server_port=int(sock[1] or 0),
        endpoint=tp.Endpoint(
            id=endpoint_id,
            url=url,
            host=name,
            port=int(sock[1] or 0),
            protocol=PROTO,
            account_id=account_id,
        ),
        server_region=edge.settings.region,
    )
    conn.tls_sni = name
    if made is not None:
        set_tls_facts(conn, made)
    if enforcement.policy.ip_policy_ids:
        conn.ip_policy_resolver = await edge.router.ip_policy_resolver(
            account_id, enforcement.policy
        )
    state = enforcement.policy.new_state()
    out = enforcement.policy.on_tcp_connect(conn, state)
    if out.kind not in (tp.CONTINUE, tp.TERMINATE_TLS):
        return None
    return _TcpPhase(out, enforcement.policy, conn, state)
