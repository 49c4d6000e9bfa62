"""The Bind options ngrok-go v2 names its endpoint by (``Opts.URL``, ``Extra.Bindings``), and
its PatchTunnelState (what ``EndpointForwarder.Update`` may change on a bound endpoint).

ngrok-go v2 (``golang.ngrok.com/ngrok/v2``, ``WithURL``) sends the endpoint's name only as
``URL`` (``https://app.example.com``, ``tcp://host:port``, ``tls://app.example.com``;
``Domain``, ``Hostname`` and ``Subdomain`` empty), and its ``WithBindings`` as
``Extra.Bindings``. The hosted docs say what a URL and a binding are, not how the service
treats a Bind that is odd on the wire, so these rules are decided here (docs/AGENT_PROTOCOL.md):

- ``URL`` empty or absent: the other options name the endpoint (a generated name without them).
- Its scheme must be the Bind's ``Proto`` (the SDK derives one from the other); no user info,
  path, query or fragment.
- http, https, tls: the host is the name; "" (``https://``) asks for a generated one. A port is
  accepted when it is the scheme's own (80, 443) or the port of this edge's listener for the
  scheme (what the edge's own reply URL carries), so the URL a bind got back binds again.
- tcp: ``host:port`` is the address (as ``Addr``); ``tcp://`` asks for a free port; a host
  without a port is refused.
- A URL and a ``Domain``/``Hostname``/``Subdomain``/``Addr`` naming different names: refused.
- ``Bindings``: absent or empty, the name decides (``.internal`` names are internal, others
  public); otherwise exactly one of ``public`` / ``internal``, agreeing with the name (the rule
  the API holds cloud endpoints to); ``kubernetes`` is not served.

PatchTunnelState (stream type 10; ``TunnelId`` and the fields to change, each absent or null
when unchanged): ``Metadata`` and ``Description`` (kept as at bind: their first 4,096 / 255
characters), ``TrafficPolicy`` (compiled and enforced at once, refused as at bind when the
engine refuses it), ``Name`` (accepted, not kept: nor is it at bind). ``PoolingEnabled`` may
not change on a bound endpoint (its name's claim or pool is taken at bind): one equal to the
endpoint's is accepted, another refused. A tunnel id that is not an endpoint of this session
is refused.

Every refusal is ERR_NGROK_1602 naming the option: an option is never accepted and ignored.
The upstream protocol (``ForwardsProto``: the SDKs' ``app_protocol``, ngrok-go's upstream
protocol) is the exception, refused with the hosted service's own ERR_NGROK_15003 when it is
not one the edge speaks to an agent: "" or ``http1`` (HTTP/1.1) and ``http2`` (h2c).
"""

from typing import Any, Dict, List, Optional
from urllib.parse import urlsplit

from chalicelib.core import binding, edge_errors, online
from edge import protocol

SCHEME_PORTS = {"http": 80, "https": 443, "tls": 443}
MAX_URL_CHARS = 1024
BINDINGS = ("public", "internal")


def _refuse(message: str) -> binding.Refused:
    return binding.Refused(edge_errors.INVALID_OPTION, message)


FORWARDS_PROTOS = ("", "http1", "http2")


def forwards_proto(value: Any) -> str:
    """The Bind's ``ForwardsProto`` ("" for HTTP/1.1), or Refused (ERR_NGROK_15003): never
    accepted and served as another protocol (``http3`` was, as HTTP/1.1)."""
    text = protocol.text(value)
    if text not in FORWARDS_PROTOS:
        raise binding.Refused(
            edge_errors.UPSTREAM_PROTOCOL_INVALID,
            f"Upstream protocol is invalid: {text[:32]!r}; this edge speaks 'http1' and "
            "'http2' to an agent.",
        )
    return "" if text == "http1" else text


def name_of_url(proto: str, value: Any, listener_ports: Dict[str, int]) -> str:
    """The name ``URL`` asks for: a host (http, https, tls), ``host:port`` (tcp), or "" (none
    asked: absent, empty, or a URL without a host). ``listener_ports``: this edge's listener
    port per scheme (http, https; tls shares https's)."""
    url = protocol.text(value).strip()
    if not url:
        return ""
    shown = url[:300]
    if len(url) > MAX_URL_CHARS:
        raise _refuse(f"The endpoint URL is longer than {MAX_URL_CHARS} characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _refuse(f"The endpoint URL '{shown}' is not a valid URL.") from None
    scheme = parts.scheme.lower()
    if scheme != proto:
        raise _refuse(
            f"The endpoint URL '{shown}' has the scheme '{scheme}' but the endpoint's protocol "
            f"is '{proto}'."
        )
    if (
        parts.username is not None
        or parts.password is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in url
        or "#" in url
    ):
        raise _refuse(
            f"The endpoint URL '{shown}' must be scheme://host only (no user info, path, "
            "query or fragment)."
        )
    host = (parts.hostname or "").lower()
    if scheme == "tcp":
        if not host:
            if port is not None:
                raise _refuse(f"The endpoint URL '{shown}' names a port without a host.")
            return ""
        if port is None:
            raise _refuse(f"The endpoint URL '{shown}' must be tcp://host:port.")
        return f"{host}:{port}"
    allowed = {SCHEME_PORTS[scheme], listener_ports.get("https" if scheme == "tls" else scheme)}
    if port is not None and port not in allowed:
        raise _refuse(
            f"The endpoint URL '{shown}' names the port {port}; {scheme} endpoints are served "
            f"on {', '.join(str(p) for p in sorted(p for p in allowed if p))}."
        )
    if not host and port is not None:
        raise _refuse(f"The endpoint URL '{shown}' names a port without a host.")
    return host


def one_name(from_url: str, from_options: str, option: str) -> str:
    """The name asked for: the URL's and the other option's (``option`` names it) when they
    agree or one is empty; refused when both name different ones."""
    if from_url and from_options and from_url != from_options.lower():
        raise _refuse(
            f"The endpoint URL asks for '{from_url}' and {option} for '{from_options}'; "
            "name the endpoint once."
        )
    return from_url or from_options


def check_bindings(value: Any, name: str) -> None:
    """``Extra.Bindings`` against the name the endpoint asked for ("": a generated one)."""
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise protocol.MalformedRequest("Bindings is not a list of strings")
    bindings: List[str] = value
    if not bindings:
        return
    host = name.rpartition(":")[0] if ":" in name else name
    internal = host.lower().endswith(online.INTERNAL_SUFFIX)
    wanted: Optional[str] = bindings[0] if len(bindings) == 1 else None
    if wanted not in BINDINGS:
        raise _refuse(
            f"Bindings {bindings[:5]} are not served: an endpoint has one binding, "
            "'public' or 'internal' (kubernetes bindings are not served)."
        )
    if (wanted == "internal") != internal:
        raise _refuse(
            "The binding 'internal' needs a name under .internal, and a name under .internal "
            f"is bound 'internal' (asked: {wanted!r} for '{name or 'a generated name'}')."
        )


PATCH_FIELDS = {
    "Name": str,
    "Description": str,
    "Metadata": str,
    "TrafficPolicy": str,
    "PoolingEnabled": bool,
}


def patch_of(request: Dict[str, Any], pooled: bool) -> Dict[str, Any]:
    """The changes a PatchTunnelState asks for (absent or null fields left out), checked
    against the endpoint (``pooled``: its PoolingEnabled at bind)."""
    changes: Dict[str, Any] = {}
    for field, kind in PATCH_FIELDS.items():
        value = request.get(field)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise protocol.MalformedRequest(f"PatchTunnelState's {field} has another type")
        changes[field] = value
    if changes.get("PoolingEnabled", pooled) != pooled:
        raise _refuse(
            f"PoolingEnabled cannot change on a bound endpoint (it is {str(pooled).lower()}); "
            "close the endpoint and bind it again."
        )
    changes.pop("PoolingEnabled", None)
    if "Metadata" in changes:
        changes["Metadata"] = changes["Metadata"][:4096]
    if "Description" in changes:
        changes["Description"] = changes["Description"][:255]
    return changes
