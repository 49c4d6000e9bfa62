"""What the edge applies to an endpoint's traffic, from the agent's Bind options.

The SDKs apply none of the modules or the traffic policy they send in Bind: the edge must.
This module turns the options into an :class:`Enforcement` the public listeners run, and
refuses (ERR_NGROK_1602, naming the option) every option this edge cannot honour: an option
is never accepted and ignored.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List

from chalicelib import binding

# Bind option names (ngrok-rust proto.rs HttpEndpoint / TcpEndpoint) that change traffic.
HTTP_MODULES = ("BasicAuth", "IPRestriction", "OAuth", "OIDC", "CircuitBreaker", "Compression",
                "RequestHeaders", "ResponseHeaders", "UserAgentFilter", "WebhookVerification",
                "MutualTLSCA", "WebsocketTCPConverter", "TrafficPolicy", "SAML", "Auth",
                "ProxyProto", "HostHeaderRewrite")
TCP_MODULES = ("IPRestriction", "TrafficPolicy", "ProxyProto")
# Options the edge implements (grows as enforcement lands); everything else set is refused.
SUPPORTED: Dict[str, set] = {"http": set(), "tcp": set()}


@dataclass
class Enforcement:
    """The per-endpoint rules, in the order the hosted service applies them."""

    modules: Dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.modules


def _is_set(value: Any) -> bool:
    return value not in (None, "", {}, [], False, 0)


def _collect(opts: Dict[str, Any], names, kind: str) -> Enforcement:
    chosen: Dict[str, Any] = {}
    refused: List[str] = []
    for name in names:
        value = opts.get(name)
        if not _is_set(value):
            continue
        if name not in SUPPORTED[kind]:
            refused.append(name)
        chosen[name] = value
    if refused:
        raise binding.Refused("ERR_NGROK_1602", "This edge cannot honour the endpoint option(s) "
                                                f"{', '.join(refused)}; the bind is refused "
                                                "rather than served without them.")
    return Enforcement(modules=chosen)


def http_options(opts: Dict[str, Any]) -> Enforcement:
    return _collect(opts, HTTP_MODULES, "http")


def tcp_options(opts: Dict[str, Any]) -> Enforcement:
    return _collect(opts, TCP_MODULES, "tcp")
