"""Configuration: environment variables, overridable by command-line flags.

| variable                  | flag                  | default                                   |
|---------------------------|-----------------------|-------------------------------------------|
| AGENT_AUTHTOKEN           | --authtoken           | NGROK_AUTHTOKEN, else required            |
| AGENT_AUTHTOKEN_FILE      | --authtoken-file      | (none) a file holding the token (compose) |
| AGENT_SERVER_ADDR         | --server-addr         | (none: the SDK's default, the hosted service) |
| AGENT_ROOT_CAS            | --root-cas            | (none: the SDK's default roots)           |
| AGENT_HOST                | --host                | 127.0.0.1                                 |
| AGENT_API_PORT            | --api-port            | 4040                                      |
| AGENT_TUNNELS_FILE        | --tunnels-file        | tunnels.json                              |
| AGENT_DEFAULT_POLICY_FILE | --default-policy-file | (none: no rules)                          |
| AGENT_API_TOKEN           | (env only: keep secrets out of `ps`) | (none: no auth)            |
| AGENT_CONNECT_TIMEOUT     | --connect-timeout     | 60 (seconds to reach the edge at start)   |
| AGENT_BIND_TIMEOUT        | --bind-timeout        | 20 (seconds for the edge to answer a bind)|
| AGENT_LOG_LEVEL           | --log-level           | INFO                                      |
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from .errors import StartupError

_ASCII_INT = re.compile(r"^[0-9]{1,5}\Z")


@dataclass(frozen=True)
class Settings:
    authtoken: str = ""
    server_addr: str | None = None
    root_cas: str | None = None
    host: str = "127.0.0.1"
    api_port: int = 4040
    tunnels_file: str = "tunnels.json"
    default_policy_file: str | None = None
    api_token: str | None = None
    connect_timeout: float = 60.0
    bind_timeout: float = 20.0
    log_level: str = "INFO"


def _port(name: str, raw: str) -> int:
    raw = raw.strip()
    if not _ASCII_INT.match(raw) or int(raw) > 65535:
        raise StartupError(f"{name} must be a port number 0-65535 in ASCII digits, got {raw!r}")
    return int(raw)


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
        if not 0 < value < 3600 or not raw.strip().replace(".", "", 1).isascii():
            raise ValueError
    except ValueError:
        raise StartupError(f"{name} must be a positive number of seconds, got {raw!r}") from None
    return value


def load_settings(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m tunnel_agent",
        description="Device agent: a local REST API whose tunnels are endpoints of the "
        "official ngrok agent SDK on the edge.",
    )
    parser.add_argument(
        "--authtoken",
        default=None,
        help="credential token (prefer AGENT_AUTHTOKEN: flags show in ps)",
    )
    parser.add_argument("--authtoken-file", default=env.get("AGENT_AUTHTOKEN_FILE") or None)
    parser.add_argument("--server-addr", default=env.get("AGENT_SERVER_ADDR") or None)
    parser.add_argument("--root-cas", default=env.get("AGENT_ROOT_CAS") or None)
    parser.add_argument("--host", default=env.get("AGENT_HOST", "127.0.0.1"))
    parser.add_argument("--api-port", default=env.get("AGENT_API_PORT", "4040"))
    parser.add_argument("--tunnels-file", default=env.get("AGENT_TUNNELS_FILE", "tunnels.json"))
    parser.add_argument(
        "--default-policy-file", default=env.get("AGENT_DEFAULT_POLICY_FILE") or None
    )
    parser.add_argument("--connect-timeout", default=env.get("AGENT_CONNECT_TIMEOUT", "60"))
    parser.add_argument("--bind-timeout", default=env.get("AGENT_BIND_TIMEOUT", "20"))
    parser.add_argument("--log-level", default=env.get("AGENT_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)

    authtoken = (args.authtoken or env.get("AGENT_AUTHTOKEN") or "").strip()
    if not authtoken and args.authtoken_file:
        try:
            authtoken = open(args.authtoken_file, encoding="utf-8").read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(
                f"AGENT_AUTHTOKEN_FILE {args.authtoken_file!r} cannot be read: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from None
    authtoken = authtoken or (env.get("NGROK_AUTHTOKEN") or "").strip()
    if not authtoken:
        raise StartupError(
            "no authtoken: set AGENT_AUTHTOKEN to a credential token (POST /credentials; "
            "agent/README.md shows the one-shot command that makes a bot-owned one)"
        )
    if args.root_cas and not os.path.isfile(args.root_cas):
        raise StartupError(
            f"AGENT_ROOT_CAS {args.root_cas!r} is not a readable file "
            "(the edge prints its CA path at start: $DATA_DIR/ca.pem)"
        )
    server_addr = args.server_addr.strip() if args.server_addr else None
    if server_addr is not None and not re.match(r"^[^\s:/]+:[0-9]{1,5}\Z", server_addr):
        raise StartupError(f"AGENT_SERVER_ADDR must be 'host:port', got {server_addr!r}")
    return Settings(
        authtoken=authtoken,
        server_addr=server_addr,
        root_cas=args.root_cas,
        host=args.host,
        api_port=_port("AGENT_API_PORT", str(args.api_port)),
        tunnels_file=args.tunnels_file,
        default_policy_file=args.default_policy_file,
        api_token=env.get("AGENT_API_TOKEN") or None,
        connect_timeout=_seconds("AGENT_CONNECT_TIMEOUT", str(args.connect_timeout)),
        bind_timeout=_seconds("AGENT_BIND_TIMEOUT", str(args.bind_timeout)),
        log_level=str(args.log_level).upper(),
    )
