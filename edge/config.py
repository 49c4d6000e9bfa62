"""The edge's settings, read from the environment (like the API's chalicelib.core.config).

Every variable, its default and its meaning: docs/CONFIGURATION.md ("The edge"), the one
table (tests/unit/test_settings_documented.py fails on a setting read here and missing
there). The store is the API's (TABLE_NAME, DYNAMODB_ENDPOINT_URL, AWS_*), and
EDGE_TCP_PORTS / EDGE_TCP_HOST are read once, by chalicelib.core.config, for both planes: the
API allocates reserved addresses from the range the edge listens on.
"""

import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core.config import get_settings
from edge import quotas


@dataclass(frozen=True)
class EdgeSettings:
    host: str
    agent_port: int
    http_port: int
    https_port: int
    tcp_ports: Tuple[int, int]
    tcp_host: str
    agent_hostnames: List[str]
    tls_cert: str
    tls_key: str
    instance_id: str
    region: str
    check_seconds: float
    url_ports: bool
    data_dir: str
    base_domain: str
    metrics_port: Optional[int] = None
    ssh_port: Optional[int] = None  # the SSH gateway (edge.ssh_gateway); None: not started
    head_timeout: float = 30.0
    idle_timeout: float = 75.0
    h2_stall_timeout: float = 30.0  # HTTP/2 response held by zero windows (edge.h2front)
    fresh_stream_body: int = 4096  # request body bytes past which a proxy stream is not reused
    max_connections: int = 10_000
    max_connections_per_address: int = 512
    limits: quotas.Limits = quotas.Limits()
    listen_fds: Dict[str, int] = field(default_factory=dict)
    public_ports: Dict[str, int] = field(default_factory=dict)  # a load balancer's (URLs)
    core_threads: int = 0  # the compiled core's worker threads (0: one per core)
    command_poll_seconds: float = 1.0  # how often stop/restart commands are read
    # http-request: networks external calls may reach (chalicelib/core/policy/httpcall.py)
    http_request_allow: Tuple[Any, ...] = ()
    # CIDRs a static backend may reach beyond global addresses (edge/static.py)
    static_backend_allow: Tuple[str, ...] = ()

    def http_url(self, hostname: str, scheme: str = "https") -> str:
        port = self.https_port if scheme == "https" else self.http_port
        port = self.public_ports.get(scheme, port)
        default = 443 if scheme == "https" else 80
        if self.url_ports and port != default:
            return f"{scheme}://{hostname}:{port}"
        return f"{scheme}://{hostname}"


def _http_request_allow(env) -> Tuple[Any, ...]:
    from chalicelib.core.policy import httpcall

    try:
        return tuple(httpcall.parse_allow(env.get("EDGE_HTTP_REQUEST_ALLOW", "")))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _port(env, name: str, default: int) -> int:
    raw = env.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: not a port number") from None
    if not 0 <= value <= 65535:
        raise SystemExit(f"{name}={raw!r}: not a port number")
    return value


def _ssh_port(env) -> Optional[int]:
    """EDGE_SSH_PORT: the SSH gateway's port (default 2222; ``0`` any free port), or
    ``off``: no SSH gateway."""
    if env.get("EDGE_SSH_PORT", "").strip().lower() == "off":
        return None
    return _port(env, "EDGE_SSH_PORT", 2222)


def _fds(raw: str) -> Dict[str, int]:
    """``agent=3,http=4,https=5``: listening sockets a supervisor bound (scripts/serve.py)."""
    fds: Dict[str, int] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, _, number = part.partition("=")
        if name not in ("agent", "http", "https") or not number.isdigit():
            raise SystemExit(f"EDGE_LISTEN_FDS={raw!r}: expected agent=N,http=N,https=N")
        fds[name] = int(number)
    return fds


QUOTA_VARIABLES = {
    "endpoints_per_session": "EDGE_MAX_ENDPOINTS_PER_SESSION",
    "endpoints_per_account": "EDGE_MAX_ENDPOINTS_PER_ACCOUNT",
    "tcp_endpoints_per_account": "EDGE_MAX_TCP_ENDPOINTS_PER_ACCOUNT",
    "sessions_per_credential": "EDGE_MAX_SESSIONS_PER_CREDENTIAL",
    "auths_per_credential": "EDGE_MAX_AUTHS_PER_CREDENTIAL",
    "failed_auths_per_address": "EDGE_MAX_FAILED_AUTHS_PER_ADDRESS",
}


def _not_negative_int(env, name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number of bytes (0 turns it off), not {raw!r}")
    return int(raw)


# EDGE_COMMAND_POLL_SECONDS at most this: a command is taken, sent and answered within the
# API's wait (chalicelib.core.online: 20 s wait - 10 s agent answer - 2 s margin = 8 s to take it)
MAX_COMMAND_POLL_SECONDS = 5.0


def _command_poll(env) -> float:
    value = _positive(env, "EDGE_COMMAND_POLL_SECONDS", 1.0)
    if value > MAX_COMMAND_POLL_SECONDS:
        raise SystemExit(
            f"EDGE_COMMAND_POLL_SECONDS={value:g}: at most {MAX_COMMAND_POLL_SECONDS:g} (the "
            "API waits 20 s for a stop/restart to be taken and answered)"
        )
    return value


def _positive(env, name: str, default: float) -> float:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: not a number") from None
    if not value > 0:
        raise SystemExit(f"{name}={raw!r}: must be above 0")
    return value


def load(env=None) -> EdgeSettings:
    """The edge's settings. What the API reads too (the store, BASE_DOMAIN, EDGE_TCP_HOST,
    EDGE_TCP_PORTS) comes from :func:`chalicelib.core.config.get_settings`, with its rules,
    so the two planes never disagree on them; the rest is the edge's own."""
    env = os.environ if env is None else env
    try:
        shared = get_settings()
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    base = shared.base_domain
    return EdgeSettings(
        host=env.get("EDGE_HOST", "127.0.0.1"),
        agent_port=_port(env, "EDGE_AGENT_PORT", 4443),
        http_port=_port(env, "EDGE_HTTP_PORT", 8080),
        https_port=_port(env, "EDGE_HTTPS_PORT", 8443),
        tcp_ports=shared.edge_tcp_ports,
        tcp_host=shared.edge_tcp_host,
        agent_hostnames=[
            n.strip()
            for n in env.get("EDGE_AGENT_HOSTNAMES", "localhost,127.0.0.1").split(",")
            if n.strip()
        ],
        tls_cert=env.get("EDGE_TLS_CERT", ""),
        tls_key=env.get("EDGE_TLS_KEY", ""),
        instance_id=env.get("EDGE_INSTANCE_ID") or f"edge_{secrets.token_hex(6)}",
        region=env.get("EDGE_REGION", "local"),
        check_seconds=float(env.get("EDGE_CHECK_SECONDS", "5")),
        command_poll_seconds=_command_poll(env),
        url_ports=env.get("EDGE_PUBLIC_URL_PORTS", "1") != "0",
        public_ports={
            scheme: _port(env, f"EDGE_PUBLIC_{scheme.upper()}_PORT", 0)
            for scheme in ("http", "https")
            if env.get(f"EDGE_PUBLIC_{scheme.upper()}_PORT")
        },
        metrics_port=_port(env, "EDGE_METRICS_PORT", 0) if env.get("EDGE_METRICS_PORT") else None,
        ssh_port=_ssh_port(env),
        head_timeout=_positive(env, "EDGE_HEAD_TIMEOUT", 30.0),
        idle_timeout=_positive(env, "EDGE_IDLE_TIMEOUT", 75.0),
        h2_stall_timeout=_positive(env, "EDGE_H2_STALL_TIMEOUT", 30.0),
        fresh_stream_body=_not_negative_int(env, "EDGE_FRESH_STREAM_BODY", 4096),
        max_connections=int(_positive(env, "EDGE_MAX_CONNECTIONS", 10_000)),
        max_connections_per_address=int(_positive(env, "EDGE_MAX_CONNECTIONS_PER_ADDRESS", 512)),
        listen_fds=_fds(env.get("EDGE_LISTEN_FDS", "")),
        core_threads=_not_negative_int(env, "EDGE_CORE_THREADS", 0),
        http_request_allow=_http_request_allow(env),
        limits=quotas.Limits(
            **{
                name: int(_positive(env, variable, getattr(quotas.Limits, name)))
                for name, variable in QUOTA_VARIABLES.items()
            }
        ),
        data_dir=env.get("DATA_DIR", ".data"),
        base_domain=base,
        static_backend_allow=_cidrs(env, "EDGE_STATIC_BACKEND_ALLOW"),
    )


def _cidrs(env, name: str) -> Tuple[str, ...]:
    """Comma-separated CIDRs (SystemExit naming the variable on a bad one)."""
    import ipaddress

    found = []
    for part in env.get(name, "").split(","):
        if not part.strip():
            continue
        try:
            found.append(str(ipaddress.ip_network(part.strip(), strict=False)))
        except ValueError:
            raise SystemExit(f"{name}: '{part.strip()}' is not a CIDR") from None
    return tuple(found)
