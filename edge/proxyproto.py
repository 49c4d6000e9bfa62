"""PROXY protocol towards the agent (the Bind option ``ProxyProto``: the SDKs' ``proxy_proto``,
1 or 2; 0 or absent: none).

As the hosted service does, the edge writes a PROXY protocol header (HAProxy's spec, version 1
text or version 2 binary) as the first bytes of every proxied connection, after the proxy
stream's own header: the agent forwards the connection's bytes unchanged, so its upstream reads
the public client's address from it. One header per public connection (an HTTP endpoint's
keep-alive connection is one proxy stream, so one header, before its first request).

Source: the public client's address; destination: the address of the edge's listener the
client reached (its host setting and port), the same for every connection of a listener.
"""

from typing import Any, Dict, Tuple

from chalicelib.core import binding, edge_errors
from edge import carrier

INVALID_OPTION = edge_errors.INVALID_OPTION
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def version_of(opts: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
    """(version, the options without ``ProxyProto``); Refused for anything but 0, 1, 2."""
    value = opts.get("ProxyProto")
    rest = {k: v for k, v in opts.items() if k != "ProxyProto"}
    if value in (None, "", 0, "0"):
        return 0, rest
    if value in (1, 2, "1", "2") and not isinstance(value, bool):
        return int(value), rest
    raise binding.Refused(
        INVALID_OPTION, "ProxyProto must be 1 or 2 (PROXY protocol version), or 0 for none."
    )


def header(version: int, client_addr: str, server_addr: str) -> bytes:
    """The PROXY header for a connection from ``client_addr`` to ``server_addr`` (``ip:port``;
    an address that is not an IP literal is sent as 0.0.0.0:0): the compiled core's
    (edge_core/src/proxyproto.rs), the one the core's own routes write."""
    return carrier.proxy_protocol_header(version, client_addr, server_addr)
