"""Pure validators for the tunnel fields (no I/O)."""

from __future__ import annotations

import ipaddress
import re

# ASCII digits only: str.isdigit() and int() also take other scripts' digits ('٩٥٠١').
_PORT = re.compile(r"^[0-9]{1,5}\Z")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


class HostnameError(ValueError):
    pass


def normalize_hostname(value: str) -> str:
    """Lower-case an RFC 1123 hostname and check it; IP literals are refused.

    A trailing dot is dropped. Raises HostnameError with the rule broken.
    """
    if not isinstance(value, str) or not value:
        raise HostnameError("must be a non-empty string")
    host = value.strip().lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise HostnameError("must be a non-empty string")
    if len(host) > 253:
        raise HostnameError("must be at most 253 characters")
    labels = host.split(".")
    for label in labels:
        if not _LABEL.match(label):
            raise HostnameError(
                f"label {label!r} must be 1-63 characters of a-z, 0-9 and '-', "
                "not starting or ending with '-'"
            )
    if labels[-1].isdigit():
        raise HostnameError("must be a hostname, not an IP address")
    return host


def parse_hostport(value: str) -> tuple[str, int]:
    """Parse ``host:port`` (``[v6]:port`` for IPv6). Raises ValueError with the rule broken."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string 'host:port'")
    value = value.strip()
    if "://" in value or "/" in value:
        raise ValueError("must be 'host:port' without scheme or path")
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1 : end + 2] != ":":
            raise ValueError("must be '[ipv6]:port' for an IPv6 address")
        host, port_s = value[1:end], value[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    else:
        host, sep, port_s = value.rpartition(":")
        if not sep or not host:
            raise ValueError("must be 'host:port' (port is required)")
        if ":" in host:
            raise ValueError("IPv6 addresses must be written '[addr]:port'")
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            if not all(_LABEL.match(label) for label in host.lower().split(".")):
                raise ValueError(f"{host!r} is not a valid host name or IP address") from None
    if not _PORT.match(port_s) or not 1 <= int(port_s) <= 65535:
        raise ValueError(f"port {port_s!r} must be a number between 1 and 65535")
    return host, int(port_s)
