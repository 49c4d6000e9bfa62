"""Configuration, read from the environment when first asked for (never at import).

Every setting has a default that works for `make run` and the tests; `.chalice/config.json`
sets them per stage for deployed stacks. Every variable, its default and its meaning:
docs/CONFIGURATION.md, the one table (tests/unit/test_settings_documented.py fails on a
setting read in the code and missing there).

The two EDGE_TCP_* settings are shared with the edge (edge/config.py reads them from here):
the API allocates reserved addresses from the range, the edge listens on them. The edge's
public HTTP and HTTPS ports (EDGE_PUBLIC_*_PORT, else EDGE_HTTP_PORT / EDGE_HTTPS_PORT, and
EDGE_PUBLIC_URL_PORTS) are read by both too: the edge puts them in agent endpoints' URLs, the
API in cloud endpoints' (:func:`edge_public_port`), so both kinds name the port the edge serves.
"""

import functools
import os
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class Settings:
    table_name: str
    endpoint_url: Optional[str]
    region: str
    public_base_url: Optional[str]
    base_domain: str
    cname_zone: str
    stage: str
    online_stale_seconds: int = 45
    rate_limit_per_minute: int = 0
    idempotency_ttl_seconds: int = 86400
    edge_tcp_host: str = ""
    edge_tcp_ports: Tuple[int, int] = (20000, 20099)
    dns_check_resolver: str = ""
    dashboard_origin: str = ""
    acme_directory_url: str = ""
    edge_public_http_port: int = 80
    edge_public_https_port: int = 443


def _int(env: "os._Environ[str]", name: str, default: int) -> int:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def parse_port_range(raw: str) -> Tuple[int, int]:
    """``"low-high"`` (1 <= low <= high <= 65535) as a pair, or ValueError saying why."""
    try:
        low, high = (int(part.strip()) for part in raw.split("-", 1))
    except ValueError:
        raise ValueError(f"EDGE_TCP_PORTS={raw!r}: expected 'low-high'") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"EDGE_TCP_PORTS={raw!r}: expected 1 <= low <= high <= 65535")
    return low, high


@functools.lru_cache(maxsize=None)
def get_settings() -> Settings:
    env = os.environ
    base_domain = env.get("BASE_DOMAIN", "tunnels.localhost").lower()
    return Settings(
        table_name=env.get("TABLE_NAME", "tunnel-service"),
        endpoint_url=env.get("DYNAMODB_ENDPOINT_URL") or None,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        public_base_url=(env.get("PUBLIC_BASE_URL") or "").rstrip("/") or None,
        base_domain=base_domain,
        cname_zone=env.get("CNAME_ZONE", "cname.example.test").lower(),
        stage=env.get("STAGE", "dev"),
        online_stale_seconds=_positive_int(env, "ONLINE_STALE_SECONDS", 45),
        rate_limit_per_minute=_int(env, "RATE_LIMIT_PER_MINUTE", 0),
        idempotency_ttl_seconds=_int(env, "IDEMPOTENCY_TTL_SECONDS", 86400),
        edge_tcp_host=(env.get("EDGE_TCP_HOST") or base_domain).lower(),
        edge_tcp_ports=parse_port_range(env.get("EDGE_TCP_PORTS", "20000-20099")),
        dns_check_resolver=(env.get("DNS_CHECK_RESOLVER") or "").strip(),
        dashboard_origin=(env.get("DASHBOARD_ORIGIN") or "").strip().rstrip("/"),
        acme_directory_url=(env.get("ACME_DIRECTORY_URL") or "").strip(),
        edge_public_http_port=edge_public_port(env, "http"),
        edge_public_https_port=edge_public_port(env, "https"),
    )


DEFAULT_URL_PORTS = {"http": 80, "https": 443}


def edge_public_port(env: "os._Environ[str]", scheme: str) -> int:
    """The port public ``scheme`` URLs name, as the edge's URLs do (edge.config
    ``EdgeSettings.http_url``): ``EDGE_PUBLIC_<SCHEME>_PORT`` (a load balancer's), else the
    edge's listener ``EDGE_<SCHEME>_PORT``, else the scheme's own port (an API that was not
    told where the edge listens: a deployed API, whose edge is behind a load balancer on
    80/443); the scheme's own port when ``EDGE_PUBLIC_URL_PORTS`` is ``0``."""
    default = DEFAULT_URL_PORTS[scheme]
    if env.get("EDGE_PUBLIC_URL_PORTS", "1") == "0":
        return default
    for name in (f"EDGE_PUBLIC_{scheme.upper()}_PORT", f"EDGE_{scheme.upper()}_PORT"):
        raw = (env.get(name) or "").strip()
        if not raw:
            continue
        try:
            port = int(raw)
        except ValueError:
            raise ValueError(f"{name} must be a port number, got {raw!r}") from None
        if not 1 <= port <= 65535:
            raise ValueError(f"{name} must be a port from 1 to 65535, got {port}")
        return port
    return default


def _positive_int(env: "os._Environ[str]", name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return value


def reset_settings() -> None:
    """Forget cached settings (tests change the environment between runs)."""
    get_settings.cache_clear()
