"""The SSH gateway: OpenSSH as an agent (``ssh -R 0:localhost:8080 -p 2222 v2@edge http``).

A listener of SSH (asyncssh, on EDGE_SSH_PORT) where an unmodified ``ssh`` client opens one
endpoint per connection, as the hosted service's "SSH reverse tunnel agent" does
(docs/SSH.md has the usage, the rules and the decisions):

- **Authentication** is the public key of an SSH credential (``/ssh_credentials``): each key
  the client offers is looked up by its blob (chalicelib.core.binding.authenticate_ssh_key:
  the lookup item, the SSH credential, its owner), and asyncssh then checks the client's
  signature with it. The credential's account, owner and ACL make the session's grant, as an
  authtoken's do for an agent. A client that offers no such key gets ERR_NGROK_1100 as an
  authentication banner (shown when it tries keyboard-interactive, after its keys) and
  ``Permission denied``.
- **The forward and the command**: ``-R [name:]port:host:port`` is a ``tcpip-forward``
  request, the words after the destination an ``exec`` request (``http`` or ``tcp``, flags
  ``--url``/``--domain``, ``--basic-auth``). The endpoint is bound once both arrived, through
  the edge's own binds (edge/binds.py: ACL, ownership, one owner per name, claims, online
  items), and the forward is answered with the endpoint's port; the URL is printed to the
  session's stdout. A refusal is printed to stderr with its ``ERR_NGROK_…`` code and the
  session exits with status 1.
- **Traffic**: the endpoint's tunnel has this session as its ``session``: public.py and
  tcp_front.py call :meth:`SshSession.open_proxy` as they call an agent's, and get a
  :class:`ChannelStream` (the interface of edge.session.MuxStream over a
  ``forwarded-tcpip`` channel, which the ssh client connects to its local target). A
  channel the client refuses (its target is down) reads as a reset: 502 ERR_NGROK_8012.
- **Life**: the session is one of the edge's sessions (edge.server's check loop): its SSH
  credential is re-read every EDGE_CHECK_SECONDS (deleted, or its bot deactivated: the
  session ends with the code), stop through the API ends it (restart is refused), and its online items are
  kept by the instance's lease. The ssh client exiting (or Ctrl+C in a ``-t`` session) ends
  it and its endpoint.

Bounds (docs/SECURITY.md, "SSH gateway"): LOGIN_TIMEOUT from connect to authenticated;
MAX_UNAUTHENTICATED_PER_ADDRESS / MAX_UNAUTHENTICATED connections not yet authenticated;
MAX_KEYS_OFFERED public keys looked up per connection; COMMAND_TIMEOUT after
authentication for the forward and the command; one session channel and one forward per
connection, no other channel the client may open; MAX_COMMAND_BYTES of command;
MAX_CHANNELS proxy channels open at once per session (a public connection waits OPEN_WAIT
for one); per channel, PAUSE_AT + CHANNEL_WINDOW + a packet unread from the client and
WRITE_HIGH_WATER queued towards it; keepalives reap a silent client within
KEEPALIVE_INTERVAL × KEEPALIVE_COUNT_MAX.
"""

import asyncio
import base64
import functools
import ipaddress
import logging
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import asyncssh

from chalicelib.core import binding, edge_errors, ids, online, ssh_keys
from edge import enforce, ip_restrictions, quotas
from edge.agents import STOP_TUNNEL_MESSAGE, endpoint_id_of
from edge.registry import Tunnel
from edge.session import StreamReset, StreamsExhausted

log = logging.getLogger("edge.ssh")

LOGIN_TIMEOUT = 10.0  # seconds from the TCP connection to authenticated (asyncssh closes it)
COMMAND_TIMEOUT = 10.0  # seconds after authentication for the forward and the command
MAX_UNAUTHENTICATED_PER_ADDRESS = 16  # connections not yet authenticated, per address
MAX_UNAUTHENTICATED = 512  # ... and in total
MAX_KEYS_OFFERED = 8  # public keys looked up per connection (OpenSSH's MaxAuthTries is 6)
MAX_COMMAND_BYTES = 4096
MAX_CHANNELS = 480  # proxy channels open at once per session (as MAX_LOCAL_STREAMS)
OPEN_WAIT = 10.0  # seconds a public connection waits for a free channel
CHANNEL_WINDOW = 256 * 1024  # bytes the client may send on a channel before we read them
CHANNEL_PACKET = 32 * 1024
# Unread bytes past which a channel stops taking data (asyncssh then gives no window back):
# what one channel holds from the client is at most PAUSE_AT + a window + a packet (~416 KiB).
PAUSE_AT = CHANNEL_WINDOW // 2
WRITE_HIGH_WATER = 256 * 1024  # bytes queued towards the client before a write waits
KEEPALIVE_INTERVAL = 15.0
KEEPALIVE_COUNT_MAX = 4
EXIT_WAIT = 2.0  # seconds the exit status is given to reach the client before it is cut
HOST_KEY_FILE = "ssh_host_ed25519_key"
END_RETRY_SECONDS = 1.0
END_RETRY_MAX_SECONDS = 60.0
_retrying: set = set()  # removals from the store tried again (kept referenced until done)

USAGE = (
    "usage: ssh -R [name:]port:host:port -p <port> <user>@<edge> <http|tcp> [flags]\n"
    "  http   an HTTP endpoint (remote port 443 or 0: https://, 80: http://)\n"
    "         --url=<https://name|http://name|name>  --domain=<name>  (or the -R name)\n"
    "         --basic-auth=<user:password>  (repeatable)\n"
    "  tcp    a TCP endpoint (-R 0:… a free port; -R host:port:… a reserved address)\n"
    "         --url=tcp://<host:port>\n"
)
NO_NAME = {"", "*", "localhost", "0.0.0.0", "127.0.0.1", "::", "::1"}


class Usage(Exception):
    """``--help``: the usage is printed and the session exits 0."""


@dataclass
class Command:
    """What the ``exec`` request asked for."""

    proto: str  # "http" or "tcp"
    url: str = ""  # --url / --domain
    basic_auth: List[str] = field(default_factory=list)


def _refuse(message: str) -> binding.Refused:
    return binding.Refused(edge_errors.INVALID_OPTION, message)


def parse_command(text: Optional[str]) -> Command:
    """The ``exec`` command (``http --url=…``), or Refused saying what is wrong."""
    if not text or not text.strip():
        raise _refuse("No command: run ssh with `http` or `tcp` after the destination.\n" + USAGE)
    if len(text.encode("utf-8", "replace")) > MAX_COMMAND_BYTES:
        raise _refuse(f"The command is over {MAX_COMMAND_BYTES} bytes.")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise _refuse(f"The command cannot be read: {exc}.") from None
    if not words:
        raise _refuse("No command.\n" + USAGE)
    if words[0] in ("-h", "--help", "help"):
        raise Usage()
    if words[0] not in ("http", "tcp"):
        raise binding.Refused(
            edge_errors.INVALID_PROTOCOL,
            f"'{words[0][:40]}' is not an endpoint type this gateway opens: `http` or `tcp`.\n"
            + USAGE,
        )
    command = Command(proto=words[0])
    rest = words[1:]
    while rest:
        word = rest.pop(0)
        if word in ("-h", "--help"):
            raise Usage()
        name, eq, value = word.partition("=")
        if name not in ("--url", "--domain", "--basic-auth"):
            raise _refuse(
                f"Unknown flag '{name[:60]}' (this gateway offers --url, --domain "
                "and, for http, --basic-auth).\n" + USAGE
            )
        if not eq:
            if not rest:
                raise _refuse(f"The flag {name} needs a value.")
            value = rest.pop(0)
        if name == "--basic-auth":
            if command.proto != "http":
                raise _refuse("--basic-auth is for http endpoints.")
            user, colon, password = value.partition(":")
            if not colon or not user:
                raise _refuse("--basic-auth takes 'user:password'.")
            command.basic_auth.append(value)
        else:
            if command.url and command.url != value:
                raise _refuse("Give the endpoint's name once (--url or --domain).")
            command.url = value
    return command


def load_host_key(data_dir: str) -> asyncssh.SSHKey:
    """The gateway's host key: DATA_DIR/ssh_host_ed25519_key, generated on first start."""
    path = os.path.join(data_dir, HOST_KEY_FILE)
    try:
        return asyncssh.read_private_key(path)
    except FileNotFoundError:
        pass
    key = asyncssh.generate_private_key("ssh-ed25519")
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.export_private_key())
    os.replace(path + ".tmp", path)
    return key


class SshGateway:
    """The SSH listener and what its connections share (``edge.ssh``)."""

    def __init__(self, edge: Any):
        self.edge = edge
        asyncssh.set_log_level(logging.WARNING)  # its INFO is a few lines per channel
        self.host_key = load_host_key(edge.settings.data_dir)
        self.fingerprint = self.host_key.get_fingerprint("sha256")
        self.unauthenticated: Dict[str, int] = {}  # address -> connections not yet authed
        self._server: Optional[Any] = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncssh.create_server(
            lambda: SshSession(self),
            host,
            port,
            server_host_keys=[self.host_key],
            server_version="tunnel-edge",
            login_timeout=LOGIN_TIMEOUT,
            keepalive_interval=KEEPALIVE_INTERVAL,
            keepalive_count_max=KEEPALIVE_COUNT_MAX,
            encoding=None,
            line_editor=False,
            allow_scp=False,
            agent_forwarding=False,
            x11_forwarding=False,
            window=CHANNEL_WINDOW,
            max_pktsize=CHANNEL_PACKET,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    # ---- connections not yet authenticated: one rule, two counters -------------------------
    def admit(self, ip: str) -> bool:
        if (
            self.unauthenticated.get(ip, 0) >= MAX_UNAUTHENTICATED_PER_ADDRESS
            or sum(self.unauthenticated.values()) >= MAX_UNAUTHENTICATED
        ):
            return False
        self.unauthenticated[ip] = self.unauthenticated.get(ip, 0) + 1
        return True

    def release(self, ip: str) -> None:
        left = self.unauthenticated.get(ip, 0) - 1
        if left > 0:
            self.unauthenticated[ip] = left
        else:
            self.unauthenticated.pop(ip, None)


@dataclass
class ChannelCount:
    """What the operator endpoint and the metrics read of a session's streams (``mux``)."""

    local_open: int = 0  # proxy channels the edge opened and not closed yet
    remote_open: int = 0
    lingering: int = 0

    @property
    def open_streams(self) -> int:
        return self.local_open + self.remote_open


class _Listener(asyncssh.SSHListener):
    """What answers the client's ``tcpip-forward``: the endpoint's port (the port of its URL
    for HTTP, the TCP endpoint's port). Closing it (the client cancels the forward, or the
    connection ends) ends the session."""

    def __init__(self, session: "SshSession", port: int):
        super().__init__()
        self.session = session
        self.port = port

    def get_port(self) -> int:
        return self.port

    def close(self) -> None:
        if not self.session.ended:
            asyncio.ensure_future(self.session.end("the remote forward was cancelled"))

    async def wait_closed(self) -> None:
        return None


class ChannelStream(asyncssh.SSHTCPSession):
    """A ``forwarded-tcpip`` channel with the interface public.py uses of a muxado stream
    (edge.session.MuxStream): ``read``/``readexactly``/``write``/``close_write``/``finish``/
    ``reset``, ``buffered``. Bounded both ways: reading pauses the channel (no window given
    back) past PAUSE_AT unread bytes; a write waits while more than WRITE_HIGH_WATER bytes
    are queued towards the client."""

    def __init__(self, count: ChannelCount, slots: asyncio.Semaphore):
        self._count = count
        self._slots = slots
        self._chan: Optional[Any] = None
        self._recv = bytearray()
        self._eof = False
        self._closed: Optional[str] = None  # why the channel is gone (None: open)
        self._local_fin = False
        self._refused = False  # the client refused the channel (its target is down)
        self._paused = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    # ---- asyncssh's side ---------------------------------------------------------------------
    def connection_made(self, chan: Any) -> None:
        self._chan = chan
        if self._closed is not None:  # its opener gave up while the client confirmed it
            chan.close()
            return
        chan.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._count.local_open += 1

    def data_received(self, data: bytes, datatype: Any) -> None:
        self._recv += data
        if len(self._recv) >= PAUSE_AT and not self._paused and self._chan is not None:
            self._paused = True
            self._chan.pause_reading()
        self._readable.set()

    def eof_received(self) -> bool:
        self._eof = True
        self._readable.set()
        return True  # half-open: the edge may still write

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        """The channel is gone (or never opened: its open failed, or its opener gave up):
        its slot is given back, once."""
        if self._closed is None:
            self._closed = str(exc) if exc else "closed by the client"
            if self._chan is not None:
                self._count.local_open -= 1
            self._slots.release()
        self._readable.set()
        self._writable.set()

    # ---- the stream interface ----------------------------------------------------------------
    @property
    def buffered(self) -> int:
        return len(self._recv)

    @property
    def peer_open(self) -> bool:
        return self._closed is None and not self._eof

    async def read(self, n: int = 64 * 1024) -> bytes:
        while not self._recv:
            if self._eof:
                return b""
            if self._closed is not None:
                raise StreamReset(self._closed)
            self._readable.clear()
            await self._readable.wait()
        chunk = bytes(self._recv[:n])
        del self._recv[:n]
        if self._paused and len(self._recv) < PAUSE_AT // 2 and self._chan is not None:
            self._paused = False
            self._chan.resume_reading()
        return chunk

    async def readexactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await self.read(n - len(out))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(out), n)
            out += chunk
        return bytes(out)

    def refused(self, why: str) -> None:
        """The client refused to open the channel: as an SDK whose upstream is down, the
        request is taken (writes succeed) and the answer never comes (reads: reset), so
        public.py answers 502 ERR_NGROK_8012."""
        self._refused = True
        self.connection_lost(ConnectionRefusedError(why))

    async def write(self, payload: bytes) -> None:
        if self._refused:
            return
        if self._closed is not None or self._local_fin or self._chan is None:
            raise StreamReset(self._closed or "write after close")
        try:
            self._chan.write(payload)
        except OSError as exc:  # the channel is closing
            raise StreamReset(str(exc)) from None
        while not self._writable.is_set():
            await self._writable.wait()
        if self._closed is not None:
            raise StreamReset(self._closed)

    async def close_write(self) -> None:
        if self._closed is None and not self._local_fin and self._chan is not None:
            self._local_fin = True
            try:
                self._chan.write_eof()
            except OSError:
                pass

    def finish(self) -> None:
        """The owner is done with it: what is queued is sent, then the channel is closed
        (the client closes its connection to the target); what arrives after is dropped."""
        self._recv.clear()
        if self._closed is None and self._chan is not None:
            self._chan.close()

    def reset(self, code: int = 0) -> None:
        self._recv.clear()
        if self._closed is None and self._chan is not None:
            self._chan.abort()


def _origin(client_addr: str) -> Tuple[str, int]:
    host, _, port = client_addr.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


class SshSession(asyncssh.SSHServer):
    """One SSH connection: its authentication, its one endpoint, and the session the edge
    checks (the interface edge.server's check loop, edge.metrics and edge.cluster use of an
    agent session: ``id``, ``grant``, ``granted``, ``is_online``, ``ended``, ``tunnels``,
    ``mux``, ``check``, ``end``, ``open_proxy``)."""

    def __init__(self, gateway: SshGateway):
        self.gateway = gateway
        self.edge = gateway.edge
        self.conn: Optional[Any] = None
        self.peer_ip = ""
        self.id: Optional[str] = None
        self.grant: Optional[binding.Grant] = None
        self.tunnels: Dict[str, Tunnel] = {}
        self.mux = ChannelCount()
        self._slots = asyncio.Semaphore(MAX_CHANNELS)
        self._counted = False  # counts as unauthenticated (gateway.admit)
        self._online = False
        self._ending = False
        self._keys: Dict[str, Optional[binding.Grant]] = {}  # key digest -> its grant
        self._last_grant: Optional[binding.Grant] = None
        self._refusal: Optional[binding.Refused] = None
        self._failure_counted = False
        self._forward: Optional[Tuple[str, int]] = None  # the client's listen host, port
        self._forward_arrived = asyncio.Event()
        self._bound: "asyncio.Future[int]" = asyncio.get_running_loop().create_future()
        self._reply_port = 0
        self._command: Optional["CommandSession"] = None
        self._trusted_ca: Optional[bytes] = None  # the CA key of the certificate being checked
        self._keep_refusal = False  # a certificate's or a restriction's reason wins in the banner

    # ---- the connection ----------------------------------------------------------------------
    def connection_made(self, conn: Any) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername") or ("", 0)
        self.peer_ip = str(peer[0])
        if not self.gateway.admit(self.peer_ip):
            log.info("ssh connection from %s refused: too many unauthenticated", self.peer_ip)
            self._ending = True
            conn.abort()
            return
        self._counted = True
        self.edge.sessions.add(self)
        validate = getattr(conn, "_validate_openssh_certificate", None)
        if validate is not None:  # asyncssh 2.24's certificate check: see _validate_certificate
            setattr(
                conn,
                "_validate_openssh_certificate",
                functools.partial(self._validate_certificate, validate),
            )

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self.grant is None and self._keys and not self._failure_counted:
            self._failure_counted = True  # offered keys, none an SSH credential's
            self.edge.auth_throttle.failed(self.peer_ip)
        self._uncount()
        if not self._ending:
            asyncio.ensure_future(self.end("the ssh connection closed"))

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.gateway.release(self.peer_ip)

    # ---- authentication ----------------------------------------------------------------------
    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def kbdint_auth_supported(self) -> bool:
        return True  # only to tell a client whose keys all failed why (a banner), then refuse

    def _offered(self, digest: str) -> bool:
        """Counts a key or certificate the client offers: False (and the connection closed
        with ERR_NGROK_1101) past MAX_KEYS_OFFERED."""
        if len(self._keys) >= MAX_KEYS_OFFERED:
            self._refusal = binding.Refused(
                edge_errors.SSH_TOO_MANY_KEYS,
                f"Too many public keys sent for this SSH tunnel (sent more than "
                f"{MAX_KEYS_OFFERED}, max {MAX_KEYS_OFFERED}). Rerun ssh with -v to check "
                "what keys get sent; -i <key> -o IdentitiesOnly=yes sends one.",
            )
            self._banner()
            if self.conn is not None:
                self.conn.close()
            return False
        self._keys[digest] = None
        return True

    def _throttled(self) -> bool:
        locked = self.edge.auth_throttle.locked(self.peer_ip)
        if locked is None:
            return False
        self._refusal = binding.Refused(  # too many failures from this address: no store read
            edge_errors.SSH_KEY_UNKNOWN,
            f"Too many failed authentications from {self.peer_ip}; try again in "
            f"{int(locked) + 1} s.",
        )
        return True

    async def validate_public_key(self, username: str, key: Any) -> bool:
        blob = key.public_data
        digest = ssh_keys.digest(blob)
        if digest in self._keys:  # asked again with the signature
            self._last_grant = self._keys[digest]
            return self._last_grant is not None
        if not self._offered(digest) or self._throttled():
            return False
        try:
            grant = await self.edge.call(binding.authenticate_ssh_key, blob)
        except binding.Refused as exc:
            if not self._keep_refusal:  # a certificate's reason is the one told
                self._refusal = exc
            return False
        except Exception as exc:  # the store away: this key cannot be told now
            log.warning("ssh %s: key lookup failed: %r", self.peer_ip, exc)
            self._refusal = binding.Refused(
                edge_errors.SSH_KEY_UNKNOWN, "The key could not be looked up; try again."
            )
            return False
        if not await self._ip_allowed(grant):
            return False
        self._keys[digest] = self._last_grant = grant
        return True

    async def _ip_allowed(self, grant: binding.Grant) -> bool:
        """The account's ``agent`` IP restrictions apply to SSH sessions as to agents' Auth
        (edge/ip_restrictions.py): refused, with the agents' code, as the banner."""
        if await ip_restrictions.allows(
            self.edge, grant.account_id, ip_restrictions.AGENT, self.peer_ip
        ):
            return True
        self._refusal = binding.Refused(
            ip_restrictions.AGENT_REFUSED, ip_restrictions.AGENT_MESSAGE.format(ip=self.peer_ip)
        )
        self._keep_refusal = True  # this reason is the one told
        return False

    # ---- SSH user certificates (docs/SSH.md, "SSH certificates") ---------------------------
    async def _validate_certificate(
        self, validate: Any, username: str, cert: Any
    ) -> Optional[Any]:
        """In front of asyncssh's own check of a client's OpenSSH certificate (``validate``:
        the connection's ``_validate_openssh_certificate``, which then asks
        :meth:`validate_ca_key` and checks validity, principals and source-address itself):
        the reason a certificate is refused is told here, as an authentication banner, and
        the certificate is found in the store (its CA's account, the certificate, its issuer:
        chalicelib.core.binding.authenticate_ssh_certificate)."""
        digest = ssh_keys.digest(cert.public_data)
        if digest in self._keys:  # asked again with the signature
            self._last_grant = self._keys[digest]
            if self._last_grant is None:
                return None
            return await validate(username, cert)
        if not self._offered(digest) or self._throttled():
            return None
        refusal = certificate_refusal(cert, username, self.peer_ip)
        if refusal is not None:
            self._refusal, self._keep_refusal = refusal, True
            return None
        key_id = _certificate_of(cert).key_id.decode("utf-8", "replace")
        try:
            grant = await self.edge.call(
                binding.authenticate_ssh_certificate, cert.signing_key.public_data, key_id
            )
        except binding.Refused as exc:
            self._refusal, self._keep_refusal = exc, True
            return None
        except Exception as exc:  # the store away: this certificate cannot be told now
            log.warning("ssh %s: certificate lookup failed: %r", self.peer_ip, exc)
            self._refusal = binding.Refused(
                edge_errors.SSH_KEY_UNKNOWN, "The certificate could not be looked up; try again."
            )
            return None
        if not await self._ip_allowed(grant):
            return None
        self._trusted_ca = cert.signing_key.public_data
        key = await validate(username, cert)
        if key is None:  # asyncssh refused what the checks above let through
            self._refusal = binding.Refused(
                edge_errors.SSH_KEY_UNKNOWN, "The SSH certificate was not accepted."
            )
            return None
        self._keys[digest] = self._last_grant = grant
        return key

    def validate_ca_key(self, username: str, key: Any) -> bool:
        """asyncssh asks whether a certificate's signer is trusted: only the CA the
        certificate being checked was just found under (see :meth:`_validate_certificate`)."""
        return self._trusted_ca is not None and key.public_data == self._trusted_ca

    def get_kbdint_challenge(self, username: str, lang: str, submethods: str) -> bool:
        self._banner()
        return False

    def _banner(self) -> None:
        if not self._failure_counted:
            self._failure_counted = True
            self.edge.auth_throttle.failed(self.peer_ip)
        refusal = self._refusal or binding.Refused(
            edge_errors.SSH_KEY_UNKNOWN,
            "No public keys were sent for this SSH tunnel. Configure ssh with public key "
            "authentication and add your key with POST /ssh_credentials.",
        )
        try:
            if self.conn is not None:
                self.conn.send_auth_banner(error_text(refusal))
        except Exception:  # the connection is going away: nothing to tell
            pass

    def auth_completed(self) -> None:
        self.grant = self._last_grant
        self._uncount()
        log.info(
            "ssh %s authenticated (SSH credential %s, account %s)",
            self.peer_ip,
            self.grant.credential_id if self.grant else None,
            self.grant.account_id if self.grant else None,
        )
        asyncio.get_running_loop().call_later(COMMAND_TIMEOUT, self._command_deadline)

    def _command_deadline(self) -> None:
        if not self._ending and self._command is None:
            asyncio.ensure_future(self.end("no command in time: run ssh with `http` or `tcp`"))

    # ---- what the client asks for ------------------------------------------------------------
    def session_requested(self) -> Any:
        if self._command is not None or self.grant is None:
            return False
        self._command = CommandSession(self)
        return self._command

    def server_requested(self, listen_host: str, listen_port: int) -> Any:
        if self._forward is not None or self.grant is None:
            return False  # one endpoint per connection (as hosted)
        self._forward = (listen_host, listen_port)
        self._forward_arrived.set()
        return self._answer_forward()

    async def _answer_forward(self) -> Any:
        try:
            port = await asyncio.wait_for(asyncio.shield(self._bound), COMMAND_TIMEOUT + 60)
        except (asyncio.TimeoutError, asyncio.CancelledError, binding.Refused):
            return False
        return _Listener(self, port)

    async def run(self, text: Optional[str]) -> None:
        """The command: parse it, wait for the forward, bind, print the URL; a refusal is
        printed with its code and ends the session with status 1."""
        try:
            command = parse_command(text)
            try:
                await asyncio.wait_for(self._forward_arrived.wait(), COMMAND_TIMEOUT)
            except asyncio.TimeoutError:
                raise _refuse(
                    "No remote forward: run ssh with -R, e.g. `ssh -R 0:localhost:8080 … http`."
                ) from None
            url = await self._open(command)
        except Usage:
            await self._stop(USAGE, status=0)
            return
        except binding.Refused as exc:
            log.info(
                "ssh session %s refused: %s %s", self.id or self.peer_ip, exc.code, exc.message
            )
            if not self._bound.done():
                self._bound.set_exception(exc)
                self._bound.exception()  # retrieved
            await self.end(exc.message, exc.code)
            return
        if not self._bound.done():
            self._bound.set_result(self._reply_port)
        assert self.grant is not None
        self._print(
            "ngrok (via SSH) (Ctrl+C to quit)\n\n"
            f"Account     {self.grant.account_id} (Plan: self-hosted)\n"
            f"Region      {self.edge.settings.region}\n"
            f"Forwarding  {url}\n"
        )

    # ---- the endpoint --------------------------------------------------------------------------
    async def _open(self, command: Command) -> str:
        grant = self.granted
        limits = self.edge.settings.limits
        if await self.edge.call(online.count_auth, grant.credential_id) > (
            limits.auths_per_credential
        ):
            raise quotas.auths_per_credential(limits.auths_per_credential)
        session_id = ids.new_id(ids.PREFIXES["tunnel_session"])
        if (
            await self.edge.call(
                online.live_credential_sessions, grant.account_id, grant.credential_id
            )
            >= limits.sessions_per_credential
        ):
            raise quotas.sessions_per_credential(limits.sessions_per_credential)
        proto, requested = self._endpoint_of(command)
        if (
            await self.edge.call(online.live_endpoint_count, grant.account_id)
            >= limits.endpoints_per_account
        ):
            raise quotas.endpoints_per_account(limits.endpoints_per_account)
        if (
            proto == "tcp"
            and await self.edge.call(online.live_endpoint_count, grant.account_id, "tcp")
            >= limits.tcp_endpoints_per_account
        ):
            raise quotas.endpoints_per_account(limits.tcp_endpoints_per_account, "TCP endpoints")
        self.id = session_id
        self.edge.registry.sessions[session_id] = self
        version = str(self.conn.get_extra_info("client_version") or "") if self.conn else ""
        await self.edge.call(
            online.session_started,
            account_id=grant.account_id,
            session_id=session_id,
            credential_id=grant.credential_id,
            instance_id=self.edge.settings.instance_id,
            agent_version=version[:64],
            os="",
            ip=self.peer_ip,
            metadata="",
            region=self.edge.settings.region,
            transport="ssh",
            owner_id=grant.owner_id,
        )
        self._online = True
        await self._still_open()
        tunnel_id = await self._tunnel_id()
        tunnel = Tunnel(
            id=tunnel_id,
            session=self,
            proto=proto,
            endpoint_id=endpoint_id_of(tunnel_id),
        )
        if proto == "tcp":
            tunnel.enforcement = enforce.tcp_options({})
            await self.edge.binds.bind_tcp(tunnel, requested)
            self._reply_port = tunnel.port
        else:
            opts: Dict[str, Any] = {}
            if command.basic_auth:
                opts["BasicAuth"] = {
                    "credentials": [
                        {"username": u, "cleartext_password": p}
                        for u, _, p in (v.partition(":") for v in command.basic_auth)
                    ]
                }
            tunnel.opts = opts
            tunnel.enforcement = enforce.http_options(opts)
            await self.edge.binds.bind_http(tunnel, requested)
            self._reply_port = 80 if proto == "http" else 443
        await self._still_open(tunnel)
        self.tunnels[tunnel.id] = tunnel
        log.info("ssh session %s: tunnel %s bound at %s", session_id, tunnel.id, tunnel.url)
        return tunnel.url

    async def _still_open(self, tunnel: Optional[Tunnel] = None) -> None:
        """The connection went away while the endpoint was being opened (end() ran and found
        nothing yet, or a session item written after it): what was written is undone here."""
        if not self._ending:
            return
        if tunnel is not None:
            await self.edge.binds.drop_tunnel(tunnel)
        if self.id and self.grant is not None:
            await _ended_in_store(self.edge, self.grant.account_id, self.id)
        raise binding.Refused("", "the ssh connection closed")

    def _endpoint_of(self, command: Command) -> Tuple[str, str]:
        """(proto, the name or address asked for, "" for a generated one) from the forward's
        listen host and port and the command's --url."""
        assert self._forward is not None
        host, port = self._forward
        host = host.strip().lower()
        asked = "" if host in NO_NAME else host
        url = command.url.strip()
        if command.proto == "tcp":
            if url.lower().startswith("tcp://"):
                url = url[len("tcp://") :]
            if asked and not port:
                raise _refuse(
                    "A TCP address is host:port: -R host:port:… or --url=tcp://host:port"
                )
            if port:  # -R port:… alone names the port on this edge's TCP host
                asked = f"{asked or self.edge.settings.tcp_host}:{port}"
            if url and asked and url.lower() != asked:
                raise _refuse(f"The -R address {asked} and --url {url} differ.")
            return "tcp", (url or asked).lower()
        scheme = ""
        if "://" in url:
            scheme, _, url = url.partition("://")
            scheme = scheme.lower()
            if scheme not in ("http", "https"):
                raise _refuse(f"An http endpoint's URL is https:// or http://, not {scheme}://.")
            url = url.rstrip("/")
        if url and asked and url.lower() != asked:
            raise _refuse(f"The -R name {asked} and --url {url} differ.")
        if port not in (0, 80, 443):
            raise _refuse(
                f"An http endpoint's remote port is 443 (https), 80 (http) or 0, not {port}."
            )
        if scheme and port and (scheme == "http") != (port == 80):
            raise _refuse(f"The remote port {port} and the URL's {scheme}:// differ.")
        proto = "http" if scheme == "http" or port == 80 else "https"
        return proto, (url or asked).lower()

    async def _tunnel_id(self) -> str:
        while True:
            fresh = ids.new_id(ids.PREFIXES["tunnel"])
            if await self.edge.call(online.claim_tunnel_id, fresh, self.granted.account_id):
                return fresh

    # ---- what the edge sends the client ------------------------------------------------------
    async def open_proxy(
        self,
        tunnel: Tunnel,
        client_addr: str,
        proto: str,
        passthrough_tls: bool = False,
        server_addr: str = "",
    ) -> ChannelStream:
        """A ``forwarded-tcpip`` channel for one public connection, named by the client's
        listen host and the forward's port (what ssh matches its -R with). Waits up to
        OPEN_WAIT for one of MAX_CHANNELS (StreamsExhausted after that); a channel the client
        refuses is a stream that reads as reset."""
        if self._ending or self.conn is None or self._forward is None:
            raise StreamReset("the ssh session ended")
        try:
            await asyncio.wait_for(self._slots.acquire(), OPEN_WAIT)
        except asyncio.TimeoutError:
            raise StreamsExhausted("too many channels open to the ssh client") from None
        conn, forward = self.conn, self._forward
        if self._ending or conn is None or forward is None:  # it ended while this waited
            self._slots.release()
            raise StreamReset("the ssh session ended")
        host, _ = forward
        orig_host, orig_port = _origin(client_addr)
        stream = ChannelStream(self.mux, self._slots)
        try:
            await conn.create_connection(
                lambda: stream,
                host,
                self._reply_port,
                orig_host,
                orig_port,
                window=CHANNEL_WINDOW,
                max_pktsize=CHANNEL_PACKET,
            )
        except asyncssh.ChannelOpenError as exc:  # the client could not reach its target
            log.info("ssh session %s: channel refused: %s", self.id, exc.reason)
            stream.refused(exc.reason)
        except BaseException:
            stream.connection_lost(None)
            raise
        return stream

    def _print(self, text: str, stderr: bool = False) -> None:
        if self._command is not None:
            self._command.print(text, stderr)

    async def _stop(self, text: str, status: int) -> None:
        self._print(text)
        await self.end("", status=status)

    # ---- the session, as the edge checks it -------------------------------------------------
    @property
    def ended(self) -> bool:
        return self._ending

    @property
    def granted(self) -> binding.Grant:
        if self.grant is None:
            raise binding.Refused(edge_errors.SSH_KEY_UNKNOWN, "Not authenticated.")
        return self.grant

    @property
    def is_online(self) -> bool:
        return self.grant is not None and self._online

    def due_end(self, fresh: Any, gone: bool = False) -> Optional[Tuple[str, Optional[str]]]:
        """As an agent session's (edge.agents.AgentSession.due_end): why the edge's check
        ends it now ((reason, code)), or None. Its SSH credential still usable (``fresh``; a
        fresh grant is taken)? Its online item removed? (Stop and restart asked through the
        API: :meth:`remote_command`.)"""
        if not self.is_online:
            return None
        if isinstance(fresh, binding.Refused):
            return fresh.message, fresh.code
        if isinstance(fresh, binding.Grant):
            self.grant = fresh
        if gone:
            return "the session was removed", None
        return None

    async def remote_command(self, command: str) -> Tuple[str, str]:
        """Stop or restart asked through the API (edge/server.py ``_command``), answered as an
        agent session's :meth:`edge.agents.AgentSession.remote_command` is: stop ends the
        session (the ssh client exits with status 0) and is accepted; restart is refused, as
        an agent without a restart handler refuses it: an ssh client cannot start itself
        again, and ending its session would not restart anything."""
        if self._ending or not self.is_online:
            return "gone", ""
        if command != "stop":
            return "refused", "an ssh client cannot restart itself; stop it and run ssh again"
        await self.end("stopped through the API", status=0)
        return "accepted", ""

    async def stop_endpoint(self, endpoint_id: str) -> str:
        """``DELETE /endpoints/{id}`` of this session's endpoint (edge/server.py ``_command``):
        an ssh client has no StopTunnel, and its session serves that one endpoint, so the
        session ends with the message and code printed (exit status 0); "gone" when the
        endpoint is not this session's."""
        if self._ending or not self.is_online:
            return "gone"
        if not any(t.endpoint_id == endpoint_id for t in self.tunnels.values()):
            return "gone"
        await self.end(
            STOP_TUNNEL_MESSAGE.format(endpoint_id), edge_errors.ENDPOINT_STOPPED, status=0
        )
        return "accepted"

    async def end(self, reason: str, code: Optional[str] = None, status: int = 1) -> None:
        """Print ``reason`` (with ``code``) to the client, exit its session with ``status``,
        close the connection, and drop the endpoint and the online items."""
        if self._ending and self.conn is None:
            return
        first = not self._ending
        self._ending = True
        conn, self.conn = self.conn, None
        if reason:
            log.info("ssh session %s ends: %s", self.id or self.peer_ip, reason)
        if not self._bound.done():
            self._bound.cancel()
        if first and self._command is not None:
            if reason:
                self._command.print(error_text(binding.Refused(code or "", reason)), True)
            await self._command.exit(status)  # the client closes its channel, then leaves
        if conn is not None:
            conn.close()
        self._uncount()
        self.edge.sessions.discard(self)
        for tunnel in list(self.tunnels.values()):
            try:
                await self.edge.binds.drop_tunnel(tunnel)
            except Exception as exc:  # the store away: session_ended removes its items
                log.warning("ssh session %s: tunnel %s not dropped: %r", self.id, tunnel.id, exc)
        self.tunnels.clear()
        if self.id and self.edge.registry.sessions.get(self.id) is self:
            del self.edge.registry.sessions[self.id]
        if self.id and self._online and self.grant is not None:
            await _ended_in_store(self.edge, self.grant.account_id, self.id)


def _certificate_of(cert: Any) -> Any:
    """cryptography's reading of an asyncssh certificate (its key id, validity, options)."""
    from cryptography.hazmat.primitives import serialization

    line = cert.algorithm + b" " + base64.b64encode(cert.public_data)
    return serialization.load_ssh_public_identity(line)


def certificate_refusal(cert: Any, username: str, peer_ip: str) -> Optional[binding.Refused]:
    """Why a client's certificate cannot authenticate here, told before any store read
    (None: it may): a host certificate, not yet valid or expired, principals without the
    user name ssh sent, a source-address the client is not in, no permit-port-forwarding."""
    from cryptography.hazmat.primitives.serialization import SSHCertificateType

    def refused(text: str) -> binding.Refused:
        return binding.Refused(edge_errors.SSH_KEY_UNKNOWN, text)

    try:
        parsed = _certificate_of(cert)
    except Exception:  # asyncssh read it; cryptography should too
        return refused("The SSH certificate could not be read.")
    name = parsed.key_id.decode("utf-8", "replace")[:64]
    if parsed.type != SSHCertificateType.USER:
        return refused(f"The SSH certificate {name} is a host certificate, not a user one.")
    now = time.time()
    if now < parsed.valid_after:
        return refused(
            f"The SSH certificate {name} is not valid before {_utc(parsed.valid_after)}."
        )
    if now >= parsed.valid_before:
        return refused(f"The SSH certificate {name} expired at {_utc(parsed.valid_before)}.")
    principals = [p.decode("utf-8", "replace") for p in parsed.valid_principals]
    if principals and username not in principals:
        return refused(
            f"The SSH certificate {name} is for the principals {', '.join(principals[:8])}, not "
            f"for the user '{username[:64]}' ssh sent; connect as one of them (<principal>@host)."
        )
    sources = parsed.critical_options.get(b"source-address")
    if sources is not None:
        try:
            ip = ipaddress.ip_address(peer_ip)
            allowed = any(
                ip in ipaddress.ip_network(entry.strip(), strict=False)
                for entry in sources.decode("ascii").split(",")
            )
        except ValueError:
            allowed = False
        if not allowed:
            return refused(
                f"The SSH certificate {name} may only be used from {sources.decode('ascii', 'replace')[:200]}, "
                f"not from {peer_ip}."
            )
    if b"permit-port-forwarding" not in parsed.extensions:
        return refused(
            f"The SSH certificate {name} does not permit port forwarding; sign the key with the "
            'extension "permit-port-forwarding" to open endpoints with ssh -R.'
        )
    return None


def _utc(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def error_text(refusal: binding.Refused) -> str:
    """A refusal as the agent CLI prints one: its message, then its code."""
    lines = [f"ERROR:  {line}" for line in refusal.message.rstrip("\n").split("\n")]
    if refusal.code:
        lines += ["ERROR:  ", f"ERROR:  {refusal.code}"]
    return "\n".join(lines) + "\n"


async def _ended_in_store(edge: Any, account_id: str, session_id: str) -> None:
    """online.session_ended; tried again in the background (END_RETRY_SECONDS, doubling)
    while the store fails it: the instance's lease would keep the items live."""
    delay = END_RETRY_SECONDS
    try:
        await edge.call(online.session_ended, account_id, session_id, edge.settings.instance_id)
        return
    except Exception as exc:
        log.warning(
            "ssh session %s: not removed from the store (%r): tried again", session_id, exc
        )

    async def again() -> None:
        nonlocal delay
        while True:
            await asyncio.sleep(delay)
            try:
                await edge.call(
                    online.session_ended, account_id, session_id, edge.settings.instance_id
                )
                return
            except Exception as exc:
                log.warning("ssh session %s: not removed yet: %r", session_id, exc)
            delay = min(delay * 2, END_RETRY_MAX_SECONDS)

    task = asyncio.ensure_future(again())
    _retrying.add(task)
    task.add_done_callback(_retrying.discard)


class CommandSession(asyncssh.SSHServerSession):
    """The client's one session channel: its ``exec`` command runs the endpoint
    (:meth:`SshSession.run`); its stdout and stderr carry what the gateway says. Ctrl+C
    (a ``-t`` session sends it as a byte) ends the session; the end of its input does not
    (``ssh -n`` and input from /dev/null close it at once)."""

    def __init__(self, session: SshSession):
        self.session = session
        self._chan: Optional[Any] = None
        self._pty = False
        self._text: Optional[str] = None
        self._task: Optional[asyncio.Task] = None

    def connection_made(self, chan: Any) -> None:
        self._chan = chan

    def pty_requested(self, term_type: str, term_size: Any, term_modes: Any) -> bool:
        self._pty = True
        return True

    def shell_requested(self) -> bool:
        return True  # no command: the usage is printed (SshSession.run)

    def exec_requested(self, command: str) -> bool:
        self._text = command if isinstance(command, str) else command.decode("utf-8", "replace")
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        return False

    def session_started(self) -> None:
        self._task = asyncio.ensure_future(self.session.run(self._text))

    def data_received(self, data: Any, datatype: Any) -> None:
        if b"\x03" in bytes(data):  # Ctrl+C on a -t session
            asyncio.ensure_future(self.session.end("", status=130))

    def eof_received(self) -> bool:
        return True

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if not self.session.ended:
            asyncio.ensure_future(self.session.end("the ssh session channel closed"))

    def print(self, text: str, stderr: bool = False) -> None:
        if self._chan is None or self._chan.is_closing():
            return
        if self._pty:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        data = text.encode("utf-8", "replace")
        try:
            if stderr:
                self._chan.write_stderr(data)
            else:
                self._chan.write(data)
        except (OSError, asyncssh.Error):
            pass

    async def exit(self, status: int) -> None:
        """Send the exit status and wait (EXIT_WAIT at most) for the client to close the
        channel: the status then reaches ssh before the connection ends."""
        chan = self._chan
        if chan is None or chan.is_closing():
            return
        try:
            chan.exit(status)
            await asyncio.wait_for(chan.wait_closed(), EXIT_WAIT)
        except (OSError, asyncssh.Error, asyncio.TimeoutError):
            pass
