"""The Bind options of the agent CLI 2.x (and ngrok-go's legacy client), read as the edge's own.

The CLI 2.x speaks protocol version "2" and sends, for ``ngrok http``, Opts
``{"Hostname", "Subdomain", "Auth", "HostHeaderRewrite", "LocalURLScheme"}`` (ngrok-go's
``internal/tunnel/proto`` ``HTTPEndpoint``):

- ``Auth`` ("user:pass", the CLI's ``-auth``): HTTP basic auth enforced at the edge, as the
  hosted service did; translated into the ``BasicAuth`` module (one credential), which
  ``edge.enforce`` turns into a ``basic-auth`` rule. Its password must be 8 to 128 characters
  and the user name non-empty (the hosted basic auth rule); otherwise the bind is refused.
- ``HostHeaderRewrite`` (``-host-header=rewrite``) and ``LocalURLScheme``: the agent itself
  rewrites the Host header towards its upstream and picks its scheme (the edge never knows the
  local address); they only describe the agent, and are accepted as such (booleans / strings).

``-bind-tls=both`` (the default) makes the CLI bind the same name twice in one session, once
``http`` and once ``https``: see ``edge.binds.Binds.bind_http`` (one owner, two listeners).
"""

from typing import Any, Dict, Optional

from chalicelib.core import binding, edge_errors

PROTOCOL_VERSION = "2"  # what the CLI 2.x offers in Auth.Version (alone)


def _refuse(message: str) -> binding.Refused:
    return binding.Refused(edge_errors.INVALID_OPTION, message)


def http_options(opts: Dict[str, Any]) -> Dict[str, Any]:
    """``opts`` with the legacy fields translated (a new dict; the agent's is not changed)."""
    out = dict(opts)
    auth = out.pop("Auth", None)
    if auth not in (None, ""):
        if not isinstance(auth, str):
            raise _refuse("Auth must be a 'user:password' string.")
        # checked with the BasicAuth option's credentials (edge.enforce.check_credential)
        user, _, password = auth.partition(":")
        basic = dict(out.get("BasicAuth") or {})
        basic["credentials"] = list(basic.get("credentials") or []) + [
            {"username": user, "cleartext_password": password}
        ]
        out["BasicAuth"] = basic
    rewrite = out.pop("HostHeaderRewrite", None)
    if rewrite is not None and not isinstance(rewrite, bool):
        raise _refuse("HostHeaderRewrite must be a boolean.")
    scheme = out.pop("LocalURLScheme", None)  # http, https, file (``ngrok http file://``)
    if scheme is not None and not (isinstance(scheme, str) and len(scheme) <= 64):
        raise _refuse("LocalURLScheme must be a scheme name.")
    return out


# ---- the http and https endpoints of one name, one session ---------------------------------
HTTP_PAIR = ("http", "https")


def _pairs(tunnel: Any, other: Any) -> bool:
    return (
        other is not tunnel
        and other.session is tunnel.session
        and other.sibling is None
        and not other.internal
        and other.proto in HTTP_PAIR
        and tunnel.proto in HTTP_PAIR
        and other.proto != tunnel.proto
    )


def sibling_for(tunnel: Any, registry: Any, name: str) -> Any:
    """The endpoint of the other scheme that ``tunnel``'s own session serves ``name`` with,
    or None: binding it is not a conflict (one owner), the name's claim is shared."""
    held = registry.by_host.get(name)
    return held if held is not None and _pairs(tunnel, held) else None


def _comparable(opts: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in opts.items() if k not in ("Hostname", "Subdomain", "Domain")}


def generated_partner(tunnel: Any) -> Any:
    """For a CLI 2.x bind that asks for no name: the one endpoint of the other scheme its
    session bound with a generated name and the same options, not paired yet, whose name it
    then shares (the CLI binds ``https``, then ``http``, for one ``-bind-tls=both`` tunnel,
    and the hosted service gave both one name). The Bind carries nothing that ties the two
    together, and ``ngrok start`` binds several tunnels at once: with more than one such
    candidate the pairing would be a guess, so the bind gets a name of its own (None)."""
    if not tunnel.scheme_only:
        return None
    mine = _comparable(tunnel.opts)
    candidates = [
        other
        for other in tunnel.session.tunnels.values()
        if _pairs(tunnel, other)
        and other.generated
        and other.hostname
        and _comparable(other.opts) == mine
    ]
    return candidates[0] if len(candidates) == 1 else None


def partner_proto(tunnel: Any) -> Optional[str]:
    """The scheme of the endpoint a CLI 2.x tunnel may share its name with, or None."""
    if not tunnel.scheme_only or tunnel.internal or tunnel.proto not in HTTP_PAIR:
        return None
    return HTTP_PAIR[1 - HTTP_PAIR.index(tunnel.proto)]


def pair(tunnel: Any, sibling: Any) -> None:
    tunnel.sibling, sibling.sibling = sibling, tunnel
    tunnel.holds_claim = False
