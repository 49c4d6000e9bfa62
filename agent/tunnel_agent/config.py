"""Configuration: environment variables, overridable by command-line flags.

| variable                  | flag                    | default            |
|---------------------------|-------------------------|--------------------|
| AGENT_HOST                | --host                  | 127.0.0.1          |
| AGENT_API_PORT            | --api-port              | 4040               |
| AGENT_INGRESS_PORT        | --ingress-port          | 8080               |
| AGENT_URL_PORT            | --url-port              | the ingress port   |
| AGENT_BASE_DOMAIN         | --base-domain           | agent.localhost    |
| AGENT_TUNNELS_FILE        | --tunnels-file          | tunnels.json       |
| AGENT_DEFAULT_POLICY_FILE | --default-policy-file   | (none: no rules)   |
| AGENT_API_TOKEN           | (env only: keep secrets out of `ps`) | (none: no auth) |
| AGENT_UPSTREAM_TIMEOUT    | --upstream-timeout      | 30 (seconds)       |
| AGENT_LOG_LEVEL           | --log-level             | INFO               |
| NGROK_AUTHTOKEN           | (env only)              | (none: ngrok off)  |
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from .errors import StartupError
from .validation import HostnameError, normalize_hostname


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    api_port: int = 4040
    ingress_port: int = 8080
    url_port: int | None = None
    base_domain: str = "agent.localhost"
    tunnels_file: str = "tunnels.json"
    default_policy_file: str | None = None
    api_token: str | None = None
    upstream_timeout: float = 30.0
    log_level: str = "INFO"
    ngrok_authtoken: str | None = None


def _port(name: str, raw: str, allow_zero: bool = True) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise StartupError(f"{name} must be an integer port, got {raw!r}") from None
    low = 0 if allow_zero else 1
    if not low <= value <= 65535:
        raise StartupError(f"{name} must be between {low} and 65535, got {value}")
    return value


def load_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m tunnel_agent",
        description="Device agent: REST API to manage HTTP tunnels plus their ingress.",
    )
    parser.add_argument("--host", default=env.get("AGENT_HOST", "127.0.0.1"))
    parser.add_argument("--api-port", default=env.get("AGENT_API_PORT", "4040"))
    parser.add_argument("--ingress-port", default=env.get("AGENT_INGRESS_PORT", "8080"))
    parser.add_argument("--url-port", default=env.get("AGENT_URL_PORT") or None)
    parser.add_argument("--base-domain", default=env.get("AGENT_BASE_DOMAIN", "agent.localhost"))
    parser.add_argument("--tunnels-file", default=env.get("AGENT_TUNNELS_FILE", "tunnels.json"))
    parser.add_argument(
        "--default-policy-file", default=env.get("AGENT_DEFAULT_POLICY_FILE") or None
    )
    parser.add_argument("--upstream-timeout", default=env.get("AGENT_UPSTREAM_TIMEOUT", "30"))
    parser.add_argument("--log-level", default=env.get("AGENT_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)

    try:
        base_domain = normalize_hostname(args.base_domain)
    except HostnameError as exc:
        raise StartupError(f"AGENT_BASE_DOMAIN {args.base_domain!r} is not valid: {exc}") from None
    try:
        timeout = float(args.upstream_timeout)
        if timeout <= 0:
            raise ValueError
    except ValueError:
        raise StartupError(
            f"AGENT_UPSTREAM_TIMEOUT must be a positive number of seconds, "
            f"got {args.upstream_timeout!r}"
        ) from None
    return Settings(
        host=args.host,
        api_port=_port("AGENT_API_PORT", str(args.api_port)),
        ingress_port=_port("AGENT_INGRESS_PORT", str(args.ingress_port)),
        url_port=None if args.url_port is None else _port("AGENT_URL_PORT", str(args.url_port), False),
        base_domain=base_domain,
        tunnels_file=args.tunnels_file,
        default_policy_file=args.default_policy_file,
        api_token=env.get("AGENT_API_TOKEN") or None,
        upstream_timeout=timeout,
        log_level=str(args.log_level).upper(),
        ngrok_authtoken=env.get("NGROK_AUTHTOKEN") or None,
    )
