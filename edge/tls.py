"""What each name asks of the TLS handshake on the HTTPS listener, and the listener itself.

Two sources say what a hostname requires (a :class:`edge.tls_spec.TlsSpec`):

- an HTTPS edge's modules (``/edges/https/{id}/tls_termination``, ``…/mutual_tls``), read
  from the store's TLS index (:func:`chalicelib.core.routing.tls_index`, one Query) by a
  background task every :data:`REFRESH_SECONDS`; the CA certificates of ``mutual_tls`` are
  read once per CA (:func:`chalicelib.core.certs.pems_by_id`: a CA cannot change,
  and cannot be deleted while an edge uses it);
- an agent endpoint's ``MutualTLSCA`` Bind option (the SDKs' ``mutual_tlsca``: PEM, or DER
  certificates end to end), held by the tunnel in memory. An agent endpoint serving the name
  comes first, as for routing.

``min_version``: ``"1.3"`` refuses TLS 1.2 clients with a ``protocol_version`` alert; ``"1.2"``,
null (the default) and the older ``"1.0"``/``"1.1"`` (accepted by the API as the hosted one
does) all mean TLS 1.2: this edge never negotiates below TLS 1.2 (OpenSSL 3's default
security level refuses TLS 1.0/1.1 anyway). ``mutual_tls``: the handshake requires a client
certificate that chains to one of the CAs; without one, or with one from another CA, the
handshake fails (as the hosted service rejects the connection); no CA left (all deleted): every
client is refused, never let through.

Why not an SNI callback: OpenSSL applies the verify mode and the protocol range of the
context the connection was created with; a context swapped in from the SNI callback brings
its certificate only (measured: a callback switching to a CERT_REQUIRED, TLS 1.3-only context
still completed TLS 1.2 handshakes without a client certificate). So the listener reads the
ClientHello's server name first (peeking at the socket, nothing consumed), picks the context
made for what that name requires, then starts TLS with it. No store call happens on that path:
it reads the in-memory map (until the first load, connections wait for it).

Contexts are cached (LRU, :data:`edge.certs.HOST_CACHE`) keyed by what makes them: the names
of the certificate, the minimum version and the SHA-256 of the CA set. A change through the
API is in force for new connections within REFRESH_SECONDS plus one Query; a request on an
older connection whose Host now requires something else than the handshake it came through
(or a Host other than the SNI name that requires something) is answered 421 ERR_NGROK_3002,
so no Host header reaches a protected name past its handshake; the same name over plain HTTP
is refused the same way.
"""

import asyncio
import logging
import socket
import ssl
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast

from chalicelib.core import certs, edge_errors, routing
from edge import challenges, connections, passthrough
from edge.tls_spec import DEFAULT, TlsSpec, spec_of

log = logging.getLogger("edge.tls")

REFRESH_SECONDS = 1.0
HELLO_TIMEOUT = 15.0  # the same as the handshake timeout
MAX_RECORD = 5 + 16384 + 2048  # a TLS record header + the largest (compressed) fragment

MISDIRECTED = (421, edge_errors.MISDIRECTED)
TLS1_3 = 0x0304
ALERT_PROTOCOL_VERSION = bytes([21, 3, 3, 0, 2, 2, 70])  # fatal protocol_version alert


# ---- the ClientHello's server name ------------------------------------------------------------
def record_length(head: bytes) -> Optional[int]:
    """How many bytes the first TLS record takes (None: more bytes needed to say; 0: not a
    TLS handshake record, nothing to wait for)."""
    if len(head) < 5:
        return None if head[:1] in (b"", b"\x16") else 0
    if head[0] != 0x16:
        return 0
    return 5 + int.from_bytes(head[3:5], "big")


def client_hello(record: bytes) -> Tuple[str, Set[int]]:
    """(server name, offered versions) of a ClientHello record: the host_name of the
    server_name extension, lower-cased ("" when none, not a ClientHello, malformed, or split
    across records), and the versions of supported_versions (else the legacy version)."""
    name, versions = "", set()
    try:
        if len(record) < 9 or record[0] != 0x16 or record[5] != 0x01:
            return "", set()
        body = record[9 : 5 + int.from_bytes(record[3:5], "big")]
        legacy = int.from_bytes(body[0:2], "big")
        pos = 2 + 32  # client_version, random
        pos += 1 + body[pos]  # session_id
        pos += 2 + int.from_bytes(body[pos : pos + 2], "big")  # cipher_suites
        pos += 1 + body[pos]  # compression_methods
        end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= min(end, len(body)):
            kind = int.from_bytes(body[pos : pos + 2], "big")
            size = int.from_bytes(body[pos + 2 : pos + 4], "big")
            data = body[pos + 4 : pos + 4 + size]
            pos += 4 + size
            if kind == 43 and data:  # supported_versions
                versions = {
                    int.from_bytes(data[i : i + 2], "big") for i in range(1, 1 + data[0] - 1, 2)
                }
            elif kind == 0:  # server_name
                at = 2
                while at + 3 <= len(data):
                    name_type = data[at]
                    length = int.from_bytes(data[at + 1 : at + 3], "big")
                    value = data[at + 3 : at + 3 + length]
                    at += 3 + length
                    if name_type == 0:
                        name = value.decode("ascii").lower().rstrip(".")
                        break
        return name, versions or {legacy}
    except (IndexError, UnicodeDecodeError):
        return "", set()


def offered_alpn(record: bytes) -> List[str]:
    """The protocols of a ClientHello's ALPN extension ([] when none or malformed)."""
    try:
        if len(record) < 9 or record[0] != 0x16 or record[5] != 0x01:
            return []
        body = record[9 : 5 + int.from_bytes(record[3:5], "big")]
        pos = 2 + 32
        pos += 1 + body[pos]
        pos += 2 + int.from_bytes(body[pos : pos + 2], "big")
        pos += 1 + body[pos]
        end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= min(end, len(body)):
            kind = int.from_bytes(body[pos : pos + 2], "big")
            size = int.from_bytes(body[pos + 2 : pos + 4], "big")
            data = body[pos + 4 : pos + 4 + size]
            pos += 4 + size
            if kind == 16:  # application_layer_protocol_negotiation
                names, at = [], 2
                while at < len(data):
                    length = data[at]
                    names.append(data[at + 1 : at + 1 + length].decode("ascii", "replace"))
                    at += 1 + length
                return names
        return []
    except IndexError:
        return []


async def peek_hello(sock: socket.socket, timeout: float = HELLO_TIMEOUT) -> bytes:
    """The first TLS record waiting on ``sock`` (the ClientHello), read with MSG_PEEK (the
    TLS layer reads the same bytes afterwards); b"" when it is not a TLS record or does not
    come whole in time."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    fd = sock.fileno()
    seen, pause = -1, 0.005
    while True:
        try:
            head = sock.recv(MAX_RECORD, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            head = None
        except OSError:
            return b""
        if head == b"":
            return b""  # closed before a ClientHello
        if head is not None:
            need = record_length(head)
            if need == 0:
                return b""
            if need is not None and len(head) >= need:
                return head[:need]
            if need is not None and need > MAX_RECORD:
                return b""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b""
        if head is not None and len(head) == seen:
            # part of the record is there (so the socket stays readable): wait a little,
            # longer each time (a client trickling its ClientHello costs few wake-ups)
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.25)
            continue
        seen = len(head) if head is not None else -1
        ready = loop.create_future()

        def readable(ready: asyncio.Future = ready) -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await asyncio.wait_for(ready, remaining)
        except asyncio.TimeoutError:
            return b""
        finally:
            loop.remove_reader(fd)


# ---- what each name requires -------------------------------------------------------------------
class TlsSettings:
    """Hostname → :class:`TlsSpec`: agent endpoints' MutualTLSCA (registry), then HTTPS edges'
    modules (the TLS index, refreshed in the background)."""

    def __init__(self, edge: Any, refresh_seconds: float = REFRESH_SECONDS):
        self.edge = edge
        self.refresh_seconds = refresh_seconds
        self.by_host: Dict[str, TlsSpec] = {}
        self.loaded = asyncio.Event()
        self._pems: Dict[Tuple[str, str], str] = {}
        # TLS edges (/edges/tls) by the host of their ":443" hostports: their copies, read
        # with the index (chalicelib.core.routing.tls_edges); edge/passthrough.py serves them
        self.tls_edges: Dict[str, Dict[str, Any]] = {}

    def tls_edge_for(self, name: str) -> Optional[Dict[str, Any]]:
        """The TLS edge serving ``name`` (its copy), or None."""
        return self.tls_edges.get(name) if name else None

    def spec_for(self, name: str) -> TlsSpec:
        tunnel = self.edge.registry.http_tunnel(name) if name else None
        if tunnel is not None:
            return getattr(tunnel, "tls", None) or DEFAULT
        return self.by_host.get(name, DEFAULT)

    def shared_spec_for(self, name: str) -> TlsSpec:
        """What any instance of a cluster requires of a handshake for ``name``: an HTTPS edge's
        modules (the TLS index every instance reads), never an endpoint's own Bind option,
        which only the instance holding the endpoint knows. So a connection another instance
        terminated and relayed here was made for this much (edge/cluster.py)."""
        return self.by_host.get(name, DEFAULT) if name else DEFAULT

    def misdirected(self, conn_spec: Optional[TlsSpec], host: str) -> Optional[str]:
        """Why a request for ``host`` may not be served on a connection whose handshake was
        made for ``conn_spec`` (None: plain HTTP), or None when it may."""
        wanted = self.spec_for(host)
        if wanted is DEFAULT or wanted.key == DEFAULT.key:
            return None
        if conn_spec is None:
            return (
                f"{host} requires TLS (a minimum version or a client certificate); use "
                f"https://{host}"
            )
        if conn_spec.key != wanted.key:
            return (
                f"This connection's TLS handshake was not made for {host}'s TLS settings "
                "(SNI differs from Host, or the settings changed); open a new connection "
                f"to https://{host}"
            )
        return None

    async def refresh(self) -> None:
        try:  # the certificates served per name (edge.certs): before the first handshake too
            await self.edge.certs.refresh_store(self.edge)
        except Exception as exc:  # the last certificates stay in force
            log.warning("could not read the served certificates: %r", exc)
        try:  # the agent ingresses: their names on the agent listener (edge/server.py)
            await self.edge.refresh_agent_ingresses()
        except Exception as exc:  # the last names stay in force
            log.warning("could not read the agent ingresses: %r", exc)
        index = await self.edge.call(routing.tls_index)
        tls_edges = await self.edge.call(routing.tls_edges)
        # The PEM cache holds exactly the CAs the index references (bounded by it): one no
        # longer referenced is dropped, one newly referenced is read once, in one call per
        # account.
        referenced = {
            (entry["account_id"], ca_id)
            for entry in index.values()
            for ca_id in entry.get("certificate_authority_ids") or []
        }
        cache = {key: pem for key, pem in self._pems.items() if key in referenced}
        wanted: Dict[str, List[str]] = {}
        for account_id, ca_id in referenced:
            if (account_id, ca_id) not in cache:
                wanted.setdefault(account_id, []).append(ca_id)
        for account_id, ca_ids in wanted.items():
            found = await self.edge.call(certs.pems_by_id, account_id, sorted(ca_ids))
            for ca_id, pem in found.items():
                cache[(account_id, ca_id)] = pem
        self._pems = cache
        by_host: Dict[str, TlsSpec] = {}
        for hostport, entry in index.items():
            host, _, port = hostport.rpartition(":")
            if port != "443":
                continue
            pems = None
            if entry.get("certificate_authority_ids") is not None:
                pems = [
                    self._pems[(entry["account_id"], ca)]
                    for ca in entry["certificate_authority_ids"]
                    if (entry["account_id"], ca) in self._pems
                ]
            by_host[host] = spec_of(entry.get("min_version"), pems)
        self.by_host = by_host
        self.tls_edges = {
            hostport.rpartition(":")[0]: copy
            for hostport, copy in tls_edges.items()
            if hostport.endswith(":443")
        }
        self.loaded.set()

    async def watch(self) -> None:
        """Refresh every ``refresh_seconds``; when the store cannot be read the last map stays
        in force (a protected name is never left unprotected by an outage)."""
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # the store being away must not stop the loop
                log.warning("could not read the TLS settings of HTTPS edges: %r", exc)
            await asyncio.sleep(self.refresh_seconds)


# ---- the HTTPS listener ------------------------------------------------------------------------
class _Paused(asyncio.Protocol):
    """A fresh connection's protocol until TLS starts: reads nothing (the ClientHello stays in
    the socket for the peek, then for the TLS layer)."""

    def __init__(self, start: Callable[[asyncio.Transport], Any]):
        self._start = start

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        accepted = cast(asyncio.Transport, transport)  # a server socket's: a Transport
        accepted.pause_reading()
        self._start(accepted)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        pass


ALPN = ["h2", "http/1.1"]


class HttpsListener:
    """``loop.create_server(listener.protocol, …)``: per connection, peek the server name,
    pick the context for what the name requires, start TLS with it, then hand the streams to
    ``handler(reader, writer)`` (``writer.tls_spec`` holds the spec)."""

    def __init__(
        self,
        edge: Any,
        handler: Callable[..., Any],
        default_names: List[str],
        allow: Callable[[str], bool],
        handshake_timeout: float = 15.0,
    ):
        self.edge = edge
        self.handler = handler
        self.default_names = default_names
        self.allow = allow
        self.handshake_timeout = handshake_timeout

    def protocol(self) -> asyncio.Protocol:
        return _Paused(self._spawn)

    def _spawn(self, transport: asyncio.Transport) -> None:
        asyncio.ensure_future(self._connection(transport))

    def context_for(self, name: str) -> Tuple[ssl.SSLContext, TlsSpec]:
        spec = self.edge.tls.spec_for(name) if name else DEFAULT
        names = [name] if name and self.allow(name) else self.default_names
        ctx = self.edge.certs.context_for(names, spec)
        ctx.set_alpn_protocols(ALPN)  # HTTP/2 (edge.h2front), else HTTP/1.1
        return ctx, spec

    async def _connection(self, transport: asyncio.Transport) -> None:
        task = asyncio.current_task()
        self.edge.connections.add(task)
        try:
            sock = transport.get_extra_info("socket")
            raw = sock.dup() if sock is not None else None  # the transport owns sock's fd
            try:
                hello = await peek_hello(raw, self.handshake_timeout) if raw else b""
            finally:
                if raw is not None:
                    raw.close()
            if not hello:  # closed, not TLS, or no ClientHello in time
                transport.abort()
                return
            name, offered = client_hello(hello)
            if offered_alpn(hello) == [challenges.ACME_TLS_ALPN]:  # ACME TLS-ALPN-01
                await self._acme_tls_alpn(transport, name)
                return
            if await passthrough.serve(self.edge, transport, name):  # a TLS endpoint's
                return
            if not self.edge.tls.loaded.is_set():
                await asyncio.wait_for(self.edge.tls.loaded.wait(), self.handshake_timeout)
            ctx, spec = self.context_for(name)
            if spec.min_version == ssl.TLSVersion.TLSv1_3 and TLS1_3 not in offered:
                transport.write(ALERT_PROTOCOL_VERSION)  # what OpenSSL would send, which
                transport.close()  # asyncio drops on a failed handshake
                return
            reader, writer = await connections.start_server_tls(
                transport, ctx, self.handshake_timeout
            )
            writer.tls_spec = spec
            writer.server_name = name  # edge.cluster: where a relayed connection goes
        except asyncio.CancelledError:
            transport.abort()
            return
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as exc:
            log.debug("TLS handshake refused or failed: %r", exc)
            transport.abort()
            return
        except Exception:
            log.exception("HTTPS connection setup failed")
            transport.abort()
            return
        finally:
            self.edge.connections.discard(task)
        await self.handler(reader, writer)

    async def _acme_tls_alpn(self, transport: asyncio.Transport, name: str) -> None:
        """A TLS-ALPN-01 validation (edge.challenges): the challenge certificate for ``name``,
        then the connection is closed (RFC 8737 3); refused when no answer is stored."""
        ctx = await challenges.tls_alpn01_context(self.edge, name)
        if ctx is None:
            transport.abort()
            return
        try:
            _, writer = await connections.start_server_tls(transport, ctx, self.handshake_timeout)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as exc:
            log.debug("TLS-ALPN-01 handshake failed: %r", exc)
            transport.abort()
            return
        writer.close()
