"""The traffic policy engine: one implementation, used by the API to validate and by the
edge to enforce. Sans-IO: no sockets, no event loop; the edge feeds it plain objects and
acts on what it returns.

The language is the hosted service's Traffic Policy: phases ``on_tcp_connect``,
``on_http_request``, ``on_http_response``; rules of ``name``, ``expressions`` (CEL, all must
hold) and ordered ``actions`` (``{type, config}``); ``${…}`` interpolation in configs; the
variables (``req.url.path``, ``conn.client_ip``, ``res.status_code``, ``vars.*``,
``actions.ngrok.*``, …) and macros (``inCidrRange``, ``getReqHeader``, …) of its reference.
A document this engine cannot honour is refused when compiled, naming the element.

Edge-facing interface::

    policy = compile_policy(text_or_mapping)      # PolicyError(path, message) if refused;
                                                  # cached by the document's sha256
    conn = Conn(client_ip, client_port, server_ip, server_port, ts_start,
                endpoint=Endpoint(id, url, host, port, protocol, account_id),
                ip_policy_resolver=resolve)   # only if policy.ip_policy_ids
    out = policy.on_tcp_connect(conn, state=None)            # per connection
    state = policy.new_state()                               # per HTTP request
    req = Request.from_target(method, scheme, host, target, headers, content_length=n)
    out = policy.on_http_request(conn, req, state)
    #   out.kind == NEED_BODY: read up to out.max_body_bytes of the body, set req.body
    #   (and req.body_complete=False if it was longer), call on_http_request again with the
    #   same state: the phase resumes at the action that asked.
    #   out.kind == NEED_KEYS: JWKS.fetch(url, now) for each of out.urls (it blocks: off the
    #   event loop), call on_http_request again with the same state.
    res = Response(status_code, headers)
    out = policy.on_http_response(conn, req, res, state)

Every phase returns an :class:`Outcome`:
- ``CONTINUE``: go on. ``req`` (``req.target``, ``req.headers``, ``req.url``) or ``res``
  (``res.headers``) were changed in place; ``out.compressor`` (response phase) is set when
  the body must be compressed: pass each chunk through ``feed`` and end with ``finish``
  (headers were already changed: content-encoding set, content-length removed).
- ``RESPOND``: answer ``status_code``, ``headers`` (content-length included), ``body``; do
  not contact (or discard the answer of) the upstream.
- ``CLOSE``: close the connection without an answer.
- ``FORWARD_INTERNAL``: send the traffic to the internal endpoint ``out.url``. If that
  fails and ``out.on_error == "continue"``, call the same phase again with the same state:
  it resumes after the forward action; with ``"halt"`` answer 502 (HTTP) or close (TCP).
- ``NEED_BODY``: see above.
- ``TERMINATE_TLS`` (on_tcp_connect of TLS endpoints and edges): make the handshake
  ``out.terminate_tls`` asks, set the connection's TLS facts (``conn.tls_version``, …,
  ``conn.tls_client_der``: the verified client certificate, the ``conn.tls.client.*``
  variables) and call on_tcp_connect again with the same state: it resumes after the action.
``out.logs`` holds the ``log`` actions' metadata (for the request's event), ``out.errors``
the expressions and interpolations that failed on this traffic (a failing expression is
false).

Rate limits live in :mod:`chalicelib.core.policy.ratelimit` (per edge instance, see there).

IP policies (``restrict-ips`` ``ip_policies: [ipp_…]``) are resolved per run, through the run
context, never a module global: the action calls ``conn.ip_policy_resolver(account_id,
ipp_id)`` with ``conn.endpoint.account_id`` (the account of the endpoint whose policy runs)
and gets that account's rules of that policy, ``[(action "allow"|"deny", cidr), …]``, or None
when the account has no such policy (another account's id included). No resolver, no account
or None: the action records an error and refuses (fail closed). The engine does no I/O: the
edge fills the resolver from its cache before the phase runs (``policy.ip_policy_ids`` lists
what a policy names; :meth:`edge.edges.EdgeRouter.ip_policy_resolver`, the same cached read
as HTTPS/TCP edges' ``ip_restriction`` modules, at most CACHE_SECONDS = 1 s old), so a rule
changed through the API is in force within about a second, with no store call per request.
The API refuses a document naming an id its account does not have
(:func:`chalicelib.traffic_policy.check_ip_policies`, 400 naming the element).
"""

import importlib
from typing import Any

# Loaded on first use (PEP 562): the API imports this package at cold start, and the CEL
# runtime, RE2 and the actions cost tens of milliseconds that only a request carrying a
# policy should pay. ``import chalicelib.core.policy.document`` stays cheap.
_EXPORTS = {
    "JWKS": "actions",
    "MAX_DOCUMENT_BYTES": "document",
    "MAX_RULES_PER_PHASE": "document",
    "PHASES": "document",
    "PolicyError": "document",
    "Policy": "engine",
    "State": "engine",
    "compile_policy": "engine",
    "Conn": "model",
    "Endpoint": "model",
    "IpPolicyResolver": "model",
    "Request": "model",
    "Response": "model",
    "CLOSE": "outcome",
    "CONTINUE": "outcome",
    "FORWARD_INTERNAL": "outcome",
    "NEED_BODY": "outcome",
    "NEED_KEYS": "outcome",
    "IDENTITY": "outcome",
    "HTTP_REQUEST": "outcome",
    "RESPOND": "outcome",
    "TERMINATE_TLS": "outcome",
    "Outcome": "outcome",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chalicelib.core.policy' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"chalicelib.core.policy.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
