"""Decided routes: a route with a traffic policy whose requests the compiled core carries, each
after Python decided it (docs/DATA_PLANE.md, "Decided routes").

The core reads the request's head as it reads a plain route's and hands Python a row of it
(the head's method, target and fields, the connection's addresses and TLS facts; no socket and
no body); :meth:`Decider.decide` runs the request phase of the route's policy on it, as
edge/http_policy.py runs it on the Python path, and answers with one decision: forward (the
head as the policy left it, X-Forwarded fields included, for the core to send on its proxy
stream), respond (the policy's answer), close, or hand the connection to Python (the route
changed since it was pushed: nothing of the policy was run).

A route whose policy has a response phase asks again with the agent's response head:
:meth:`Decider.responses` runs ``on_http_response`` on it and answers rewrite (the fields as
the phase left them, and the algorithm compress-response negotiated, for the core to compress
the body with), respond (the policy's answer instead; the connection closes) or close. A
phase that reads the body (``response-body-find-replace``, ``owasp-crs-response`` with
``process_body``) answers ``decide_body`` first: the core reads the agent's body (all of it
for a find-replace, the first 4 KiB for the OWASP rules) and asks again with it
(:meth:`Decider._response_body`), and the rewritten body goes in place of the agent's, or
what was read and the rest after it. Never on a stream of an HTTP/2 connection: such a
request of a route whose policy reads the response's body is handed to the Python path
before it goes on (:func:`reads_response_body`). A ``text/event-stream`` response of a policy
with ``on_event_stream_message`` rules is answered ``decide_events``: the core hands each piece
of its body back first, and :meth:`Decider._event_piece` answers with the messages it
completed, rewritten (or closes: a message past its bound cuts the response).

A policy is *decidable* (:func:`decidable`) when every run of it ends in one of those with
nothing but the heads and the bodies: each ``on_http_request`` action is one of
:data:`DECIDED_ACTIONS`, each ``on_event_stream_message`` one of :data:`EVENT_ACTIONS` (not
beside a response phase that reads the body), and each ``on_http_response`` one of
:data:`RESPONSE_ACTIONS` (no compression but by the core, with an algorithm it has: gzip
or deflate); each ``on_tcp_connect`` action one of :data:`CONNECT_ACTIONS` (run on the
connection's first request asked about the route: the row's ``fresh``; such a policy's
decisions are never held, and on an HTTPS edge's route the request is the Python path's);
each phase's outbound calls within AWAIT_BUDGET; and no header action names a framing field (Content-Length, Transfer-Encoding: the core frames
each body by its own sender's head). Any
other policy keeps its route on the Python path whole. A policy that names IP policies
(``restrict-ips``) or vault secrets is decided in a task, once the caches the Python path
reads them through have them.

**The request's body** (``verify-webhook``, ``jwt-validation`` reading a form,
``owasp-crs-request`` with ``process_body``, ``request-body-find-replace``): a run that asks
for it (``NEED_BODY``) is answered :meth:`Decider._body`: the core reads as much of the body
as the policy's greediest action reads (edge/http_policy.py's ``request_phase`` reads the same)
into the connection's buffer, unsent, and hands the row again with a copy of it; the run
resumes on it, in a task, as on the Python path. A body the policy rewrote goes on in its
place (``decide_forward(..., body=)``, framed by the Content-Length the action set); an
answer to a request whose body was read whole leaves the connection usable. A forward-
internal's next run sees the body read (and a rewritten one is handed to the Python path,
which runs the request again: the core sends a target the client's body).

**Sign-in and outbound calls** (``oauth``, ``openid-connect``, the request phase's
``http-request``) are decided too, in a task when a run needs what only a wait gives
(:meth:`Decider._awaited`): the sign-in's steps (``edge/identity.py``: the session's check in
the store, the provider's discovery and token exchange at the callback) and the call
(``edge/http_request.py``), as edge/http_policy.py's ``request_phase`` awaits them, the run
resumed after each; the core's request waits for its ticket meanwhile (``DECIDE_TIMEOUT``). A
signed-in request goes on with its identity headers; a sign-in's answer (the redirect to the
provider, the callback's, the logout page) is the policy's answer. A route whose policy signs
in has its response heads asked too (RESPONSES), so a session whose cookie was refreshed gets
its ``set-cookie`` on the agent's response, as ``identity.with_cookies`` adds it there.

**Forward-internal** is decided too: the run's target found as edge/http_policy.py finds it
(an internal agent endpoint of this edge at once, anything else in a task), the internal
endpoint's own policy run next, and the request let through there sent by the core to that
endpoint's session (``Carrier.decide_internal``), served and recorded as the route's
(:meth:`Decider._hop`, :meth:`Decider._onward`). What the core cannot carry there is handed to
the Python path, which runs the request again.

**Circuit breakers** (the ``circuit-breaker`` action, and the endpoint's own breaker, its
Bind option: edge/breaker.py) are decided too: the request phase's run says whether a
breaker is tripped (the policy's 503, or the endpoint breaker's, checked after the policy
as the Python path checks it), and a request that went on carries its breakers in its memo;
edge/fast_path.py counts each such request's answer into them from its record (the agent's
status, or the 502 the core gave when the agent could not answer), so such a route is never
quiet. An endpoint with a breaker and no policy is a decided route too (:func:`route_mode`).

A decided route whose request phase reads nothing but the row's facts (:func:`holds_of`,
chalicelib/core/policy/holding.py) is pushed with those facts, and its decisions are made with
``hold``: the core applies one again to the route's next requests with the same facts while
the route is quiet (edge_core/src/held.rs; docs/DATA_PLANE.md, "Held decisions").
"""

import asyncio
import contextlib
import contextvars
import functools
import logging
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Set, Tuple
from urllib.parse import urlsplit

from chalicelib.core import policy as tp
from chalicelib.core.policy import actions as tp_actions
from chalicelib.core.policy import compile_policy
from chalicelib.core.policy.actions import MAX_FIND_REPLACE_BODY, RewriteTooLarge
from chalicelib.core.policy import sse as tp_sse
from chalicelib.core.policy.holding import request_reads
from chalicelib.core.policy.waf import BODY_LIMIT as WAF_BODY_LIMIT
from chalicelib.core import edge_errors
from edge import breaker, http1, http_policy, http_request, identity, ip_restrictions, secrets
from edge.carrier import BODY_READ_MAX, BODY_READ_SECONDS
from edge.edges import Hop, Routed, forward_refused
from edge.http_io import error_response, outcome_response
from edge.observe import hub_of
from edge.session import MuxSession

log = logging.getLogger("edge.decided")

# The actions a decided route's policy may hold: each ends its run on the head alone.
DECIDED_ACTIONS = (
    tp_actions.AddHeaders,
    tp_actions.RemoveHeaders,
    tp_actions.CustomResponse,
    tp_actions.Deny,
    tp_actions.CloseConnection,
    tp_actions.Redirect,
    tp_actions.UrlRewrite,
    tp_actions.RestrictIps,
    tp_actions.RateLimit,
    tp_actions.BasicAuth,
    tp_actions.SetVars,
    tp_actions.Log,
    tp_actions.CircuitBreaker,
    tp_actions.HttpRequest,
    tp_actions.ACTIONS["oauth"],
    tp_actions.ACTIONS["openid-connect"],
    tp_actions.ForwardInternal,
    # the actions that read the request's body: the core reads it first (decide_body)
    tp_actions.VerifyWebhook,
    tp_actions.JwtValidation,
    tp_actions.OwaspCrsRequest,
    tp_actions.RequestBodyFindReplace,
)
# Of those, the sign-in actions (a route of theirs asks for its response heads: a refreshed
# session's cookie goes on the response)
SIGN_IN_ACTIONS = (tp_actions.ACTIONS["oauth"], tp_actions.ACTIONS["openid-connect"])
# The actions of a decidable policy's response phase: each changes or answers on the head,
# or (compress-response) has the core compress the body with the algorithm it negotiated, or
# reads the body the core reads first (response-body-find-replace, owasp-crs-response's
# process_body: decide_body answering the response head), or calls out (http-request: the
# call awaited in a task, Decider._response_calls)
RESPONSE_ACTIONS = (
    tp_actions.AddHeaders,
    tp_actions.RemoveHeaders,
    tp_actions.CustomResponse,
    tp_actions.SetVars,
    tp_actions.Log,
    tp_actions.CompressResponse,
    tp_actions.ResponseBodyFindReplace,
    tp_actions.OwaspCrsResponse,
    tp_actions.HttpRequest,
)
# The algorithms the core compresses with (edge_core/src/encode.rs)
CORE_ENCODINGS = frozenset({"gzip", "deflate"})
# The actions of a decidable policy's on_event_stream_message phase: the core hands each
# piece of an event stream's body to Python, which rewrites the messages it completes
# (Decision::Events; Decider._event_piece)
EVENT_ACTIONS = (tp_actions.SseFindReplace,)
# The actions of a decidable policy's on_tcp_connect phase: run on the connection's first
# request asked about the route (the row's ``fresh``), as the Python path runs them
# (http_policy.connect_phase); each allows or refuses (closed, no answer)
CONNECT_ACTIONS = (
    tp_actions.Deny,
    tp_actions.CloseConnection,
    tp_actions.RestrictIps,
    tp_actions.SetVars,
    tp_actions.Log,
)
FRAMING_FIELDS = ("content-length", "transfer-encoding")
PHASES = (
    ("on_tcp_connect", CONNECT_ACTIONS),
    ("on_http_request", DECIDED_ACTIONS),
    ("on_http_response", RESPONSE_ACTIONS),
    ("on_event_stream_message", EVENT_ACTIONS),
)

# The outcomes of a request phase's run that wait (a sign-in's step, an outbound call, the
# request's body read by the core)
AWAITED = (tp.IDENTITY, tp.HTTP_REQUEST, tp.NEED_BODY, tp.NEED_KEYS)
# How long the core waits for a ticket's decision (edge_core/src/decide.rs DECIDE_TIMEOUT): a
# task deciding one ends by then (the core closed the connection, and refuses a late decision),
# so the tasks alive are bounded by the tickets waiting, as the Python path's are by its
# connections. Each phase's outbound calls may take at most AWAIT_BUDGET in all (their
# ``timeout``s summed) for a policy to be decided: a longer run would be cut by the core where
# the Python path answers (an on_error "continue" call timing out at 30 s went on to the agent).
# (The response phase's are awaited within one wait of the core's too: its ask for the head.)
DECIDE_SECONDS = 30.0
AWAIT_BUDGET = 20.0
# When a row's decision is due (the loop's clock): its arrival plus DECIDE_SECONDS, set as the
# row is taken (Decider._one) and inherited by every task deciding it (a task copies the
# context it is made in), so all of one request's waits (its caches, the sign-in's steps, the
# outbound calls, each forward-internal hop's) share the core's one wait for its ticket.
_DUE: contextvars.ContextVar[float] = contextvars.ContextVar("decided_due")

# What a route of an endpoint is (mode_of): plain (no policy), decided (its requests), or
# decided with a response phase (its response heads too).
PLAIN, DECIDED, RESPONSES = 0, 1, 2
# Set on a route's mode when its account has ``endpoints`` IP restrictions: each request's
# client is checked first (edge/ip_restrictions.py, as edge/http_routing.py checks it), a plain
# route decided for it, nothing held.
RESTRICTED = 4
# Set on a route's mode when the traffic inspector captures its endpoint's bodies: each
# exchange's first bytes of both bodies go with its record (the core keeps them).
CAPTURED = 8


def _decidable(policy: Any) -> bool:
    """Whether every run of ``policy`` ends in a decision the core applies (above)."""
    if policy.has("on_event_stream_message") and _reads_response_body(policy):
        return False  # (the events rewritten before the body is read: the Python path's)
    for phase, _ in PHASES:  # each phase's calls within one wait of the core's for a ticket
        calls = sum(
            float(action.timeout)
            for rule in policy.phases.get(phase) or ()
            for action in rule.actions
            if isinstance(action, tp_actions.HttpRequest)
        )
        if calls > AWAIT_BUDGET:
            return False
    for phase, allowed in PHASES:
        for rule in policy.phases.get(phase) or ():
            for action in rule.actions:
                if type(action) not in allowed:
                    return False
                if isinstance(action, tp_actions.CompressResponse) and not compresses_in_core(
                    action
                ):
                    return False
                if isinstance(action, tp_actions.AddHeaders):
                    names = [name for name, _ in action.headers]
                elif isinstance(action, tp_actions.RemoveHeaders):
                    names = list(action.names)
                else:
                    continue
                if any(name.lower() in FRAMING_FIELDS for name in names):
                    return False
    return True


# cached per compiled policy (shared and immutable: one per document digest)
decidable = functools.lru_cache(maxsize=1024)(_decidable)


def _reads_response_body(policy: Optional[Any]) -> bool:
    """Whether ``policy``'s response phase may read the response's body (find-replace on it,
    the OWASP rules on its first bytes): never on a stream of an HTTP/2 connection in the
    core (its streams would each hold a body while the caps count one connection), so such a
    request is the Python path's there."""
    for rule in (policy.phases.get("on_http_response") or ()) if policy is not None else ():
        for action in rule.actions:
            if isinstance(action, tp_actions.ResponseBodyFindReplace) or (
                isinstance(action, tp_actions.OwaspCrsResponse) and action.process_body
            ):
                return True
    return False


reads_response_body = functools.lru_cache(maxsize=1024)(_reads_response_body)


def compresses_in_core(action: Any) -> bool:
    """Whether every algorithm a compress-response may negotiate is one the core compresses
    with (br is the Python path's, where the brotli module is installed)."""
    return set(action.algorithms) <= CORE_ENCODINGS


def policy_of(tunnel: Any) -> Optional[Any]:
    """The traffic policy a tunnel's requests run (its Bind options' rules included)."""
    enforcement = tunnel.enforcement
    return enforcement.policy if enforcement is not None else None


def _mode_of(policy: Optional[Any]) -> Optional[int]:
    """PLAIN for no policy, DECIDED or RESPONSES for a decidable one, None for any other (its
    route is the Python path's)."""
    if policy is None:
        return PLAIN
    if not decidable(policy):
        return None
    if (
        policy.has("on_http_response")
        or policy.has("on_event_stream_message")
        or _signs_in(policy)
    ):
        return RESPONSES
    return DECIDED


# cached per compiled policy, as decidable is (each decided row asks for its route's mode)
mode_of = functools.lru_cache(maxsize=1024)(_mode_of)


def _signs_in(policy: Any) -> bool:
    return any(
        isinstance(action, SIGN_IN_ACTIONS)
        for rule in policy.phases.get("on_http_request") or ()
        for action in rule.actions
    )


def route_mode(tunnel: Any) -> Optional[int]:
    """How a route of ``tunnel`` is pushed (:func:`mode_of` of its policy), an endpoint with
    a circuit breaker of its own being DECIDED at least (each request asks whether it is
    tripped)."""
    if type(tunnel) is EdgeName:  # each request routed by its path first
        return DECIDED
    mode = mode_of(policy_of(tunnel))
    if mode == PLAIN and getattr(tunnel, "breaker", None) is not None:
        return DECIDED
    return mode


def counts_answers(tunnel: Any, policy: Optional[Any]) -> bool:
    """Whether each answer of a route of ``tunnel`` may be counted by a circuit breaker (its
    own, or an action of its policy, or those of the internal endpoint a ``forward-internal``
    sends it to): its records are all wanted (never quiet: a quiet route's records are
    counted without their memos)."""
    if getattr(tunnel, "breaker", None) is not None or type(tunnel) is EdgeName:
        return True  # (an HTTPS edge's: its routes' modules and tunnels may have breakers)
    return policy is not None and any(
        isinstance(action, tp_actions.CircuitBreaker)
        for rule in policy.phases.get("on_http_request") or ()
        for action in rule.actions
    )


def _forward_names(policy: Optional[Any]) -> Optional[FrozenSet[str]]:
    """The internal hostnames a policy's request phase may forward-internal to (its fixed
    URLs'); None when one URL is made of a template (it may name any)."""
    names: Set[str] = set()
    for rule in (policy.phases.get("on_http_request") or ()) if policy is not None else ():
        for action in rule.actions:
            if isinstance(action, tp_actions.ForwardInternal):
                if action.url.static is None:
                    return None
                names.add((urlsplit(action.url.static).hostname or "").lower())
    return frozenset(names)


# cached per compiled policy, as decidable is
forward_names = functools.lru_cache(maxsize=1024)(_forward_names)


def forwards_to(policy: Optional[Any], hostname: str) -> bool:
    """Whether a policy may forward-internal to the internal endpoint ``hostname`` (its
    route's held decisions may name it: dropped when that endpoint changes)."""
    names = forward_names(policy)
    return names is None or hostname.lower() in names


class _Forwarded:
    """The memo of a request of an endpoint with a breaker and no policy that went on to
    the agent (its record counts the answer: http_policy.record_upstream)."""

    __slots__ = ("upstream_breaker",)
    state = None  # no policy run: nothing of one in its record
    breakers = ()

    def __init__(self, found: Any):
        self.upstream_breaker = found


def holds_of(policy: Optional[Any]) -> Optional[List[str]]:
    """The facts a decided route's decisions are a function of, when the core may hold them
    (docs/DATA_PLANE.md, "Held decisions"): a decidable policy without a response phase (a
    response's rewrite goes on with its own request's run) whose request phase reads nothing
    but the head and the connection (chalicelib.core.policy.holding); else None."""
    if policy is None or mode_of(policy) != DECIDED:
        return None
    reads = request_reads(policy)
    return sorted(reads) if reads is not None else None


def h2_scheme_of(tunnel: Any) -> Optional[str]:
    """For an endpoint that speaks HTTP/2 (``app_protocol`` http2), its requests' ``:scheme``
    (its upstream's, as edge/h2leg.py gives it); None for HTTP/1.1."""
    if tunnel.forwards_proto != "http2":
        return None
    return "https" if str(getattr(tunnel, "forwards_to", "")).startswith("https://") else "http"


def listener_addr(edge: Any, scheme: str) -> str:
    """The address of the edge's listener of ``scheme`` as a PROXY protocol header names it
    (the destination: edge/agents.py ``open_proxy`` names it so)."""
    return f"{edge.settings.host}:{edge.http_port if scheme == 'http' else edge.https_port}"


class EdgeName:
    """An HTTPS edge's hostname as a route serves it: no session and no policy of its own;
    each request is routed by its path to one of the edge's routes (its modules' policy, its
    backend) by the router's cached reads, as the Python path routes it
    (``EdgeRouter.route_http``: :meth:`Decider._edge_row`)."""

    __slots__ = ("endpoint_id", "account_id", "url", "hostname")
    enforcement = None  # per route of the edge, not per name
    breaker = None

    def __init__(self, endpoint_id: str, account_id: str, url: str, hostname: str):
        self.endpoint_id, self.account_id = endpoint_id, account_id
        self.url, self.hostname = url, hostname

    @property
    def hop(self) -> Hop:
        return Hop(self.endpoint_id, self.url, self.hostname, self.account_id)


def is_edge(tunnel: Any) -> bool:
    """Whether a route serves an HTTPS edge's hostname (:class:`EdgeName`)."""
    return type(tunnel) is EdgeName


def is_cloud(tunnel: Any) -> bool:
    """Whether a route serves a cloud endpoint (its ``edges.Routed``: no session; its
    policy answers each request or forwards it to an internal endpoint) rather than an
    agent's tunnel."""
    return type(tunnel) is Routed and tunnel.cloud


def hop_of(tunnel: Any) -> Hop:
    """The endpoint a route serves, as its policy sees it (``endpoint.*``) and its records
    name it."""
    return tunnel.hop if type(tunnel) in (Routed, EdgeName) else Hop.of_tunnel(tunnel)


def core_mux(tunnel: Any) -> Optional[MuxSession]:
    """The session of an agent endpoint of this instance that the core runs, while it is
    open (not OpenSSH's, not a static backend's); None for any other."""
    mux = getattr(getattr(tunnel, "session", None), "mux", None)
    return mux if type(mux) is MuxSession and not mux.closed else None


class _At:
    """The internal endpoint a decided request's ``forward-internal`` sent it to: its
    ``edges.Routed`` and the hops taken so far (edges.forward_refused's count)."""

    __slots__ = ("routed", "forwards")

    def __init__(self, routed: Any, forwards: int):
        self.routed, self.forwards = routed, forwards


# The policy of a request that has none (an HTTPS edge's route without modules): its run
# decides nothing, and it writes the request's head as any run does.
NO_POLICY = compile_policy({})


# A row the core hands over: (ticket, route key, (peer host, port), (local host, port), None
# or the TLS facts (SNI, version, cipher, ALPN), method, target, fields, no body follows).
# A row asked again after decide_body ends with what the core read of the body: (its first
# bytes, or None when the client ended first; whether they are the whole body); None before.
# Then: whether it came on a stream of an HTTP/2 connection, and whether it is its
# connection's first request asked about the route (``fresh``: its on_tcp_connect rules run).
ReadBody = Tuple[Optional[bytes], bool]
Asked = Tuple[
    int,
    int,
    Tuple[str, int],
    Tuple[str, int],
    Any,
    bytes,
    bytes,
    list,
    bool,
    Optional[ReadBody],
    bool,
    bool,
]


# A response head the core hands over: (ticket, route key, status, fields, the memo of its
# request's decision: the policy run, an http_policy.Traffic, and, asked again after
# decide_body, what the core read of the agent's body: (its first bytes, whether they are
# the whole body)).
AskedResponse = Tuple[int, int, int, list, Any, Optional[ReadBody]]


# A route as pushed: (tunnel, scheme, host, mode, the policy it was pushed with).
Pushed = Tuple[Any, str, str, int, Any]


class Decider:
    """Decides the rows of one edge's decided routes (its carrier's, in its region).
    ``route_of(key)`` gives a route key's :data:`Pushed`, or None when the route was dropped;
    ``changed(host, scheme)`` is told of a route whose policy changed under it. A decision's
    memo is the request's policy run (``http_policy.Traffic``): the response phase goes on
    with it, and the request's record reads its state. A decision of a route whose policy
    :func:`holds_of` names facts is made with ``hold``: the core applies it again to the
    route's requests with the same facts."""

    def __init__(
        self,
        edge: Any,
        route_of: Callable[[int], Optional[Pushed]],
        changed: Callable[[str, str], None],
        mode_of: Callable[[Any], Any] = route_mode,
        counting: Callable[[int], None] = lambda key: None,
    ):
        """``mode_of(tunnel)``: how a route of the tunnel is pushed now, RESTRICTED set when
        its account's ``endpoints`` IP restrictions apply or are not known (a row of a route
        pushed otherwise goes to Python; edge/fast_path.py gives it)."""
        self.edge = edge
        self.route_of, self.changed = route_of, changed
        self.mode_of = mode_of
        # told of a route whose answers a target's circuit breaker counts (a forward-
        # internal's): its records are all wanted from then on (never quiet)
        self.counting = counting
        self.decided = 0  # rows decided (forward, respond or close)
        self.handed = 0  # rows handed back to Python with their connection
        # the runs waiting for their request's body (:meth:`_body`), by ticket: at most one
        # per ticket waiting in the core
        self._bodies: Dict[int, "asyncio.Future[ReadBody]"] = {}

    def decide(self, rows: List[Asked]) -> None:
        carrier, hub = self.edge.carrier, hub_of(self.edge)
        try:
            for row in rows:
                if row[9] is not None:  # a body read for a run waiting on it
                    waiting = self._bodies.pop(row[0], None)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(row[9])
                    continue
                self._one(carrier, hub, row)
        finally:
            hub.flush_counts()

    async def _body(self, ticket: int, limit: int) -> Optional[Tuple[bytes, bool]]:
        """The first ``limit`` bytes of ticket ``ticket``'s request's body, read by the core
        (at most BODY_READ_MAX) and whether they are all of it; None when the client ended,
        stalled or broke its framing first (its connection is closed)."""
        waiting = asyncio.get_running_loop().create_future()
        self._bodies[ticket] = waiting
        try:
            self.edge.carrier.decide_body(ticket, min(limit, BODY_READ_MAX))
            self.edge.carrier.flush_decisions()
            # the core hands the row back within its read's bound, however the read ends
            async with asyncio.timeout(BODY_READ_SECONDS + DECIDE_SECONDS):
                data, complete = await waiting
        finally:
            self._bodies.pop(ticket, None)
        return None if data is None else (data, complete)

    def _one(self, carrier: Any, hub: Any, row: Asked) -> None:
        """One row: decided, or handed back when its route changed."""
        ticket, key = row[0], row[1]
        _DUE.set(asyncio.get_running_loop().time() + DECIDE_SECONDS)
        held = self.route_of(key)
        policy = policy_of(held[0]) if held is not None else None
        now = self.mode_of(held[0]) if held is not None else None
        if held is None or policy is not held[4] or not _agrees(now, held[3]):
            # dropped, or its policy changed since the push: the Python path routes it from
            # scratch (the route is pushed again as the new policy makes it)
            carrier.decide_python(ticket)
            self.handed += 1
            if held is not None:
                self.changed(held[2], held[1])
            return
        if row[10] and (reads_response_body(policy) or _reads_request_body(policy, row)):
            # an HTTP/2 stream's: no body of its is read here (the core hands a stream asked
            # for its request's body to Python), so such a request is Python's before
            # anything of its policy runs (a rate limit counted once)
            carrier.decide_python(ticket)
            self.handed += 1
            return
        if is_edge(held[0]):  # routed by its path first, in a task (the router's caches)
            restricted = bool((held[3] | (now or 0)) & RESTRICTED)
            asyncio.ensure_future(self._edge_row(row, held, hub, restricted))
            return
        if (held[3] | (now or 0)) & RESTRICTED:
            # its client checked first, in a task (a cache may wait): a route pushed so, or one
            # whose account's restrictions the router's cache let go since (they may have come:
            # checked as the Python path would, nothing held; the refresh reads them and pushes
            # the route again if they came)
            asyncio.ensure_future(self._checked(row, held, policy, hub))
            return
        if policy is None:  # an endpoint's breaker alone
            try:
                self._breaker_only(row, held[0])
            except Exception:
                log.exception("deciding a request of %s://%s", held[1], held[2])
                carrier.decide_close(ticket)
            self.decided += 1
            return
        if policy.ip_policy_ids or policy.secret_refs:
            # IP policies and vault secrets are read through caches that may wait: decided in
            # a task once they are here (the core's request waits for its ticket meanwhile)
            asyncio.ensure_future(self._resolved(row, held, policy, hub))
            return
        try:
            self._decide(row, held, policy, hub)
        except Exception:
            log.exception("deciding a request of %s://%s", held[1], held[2])
            carrier.decide_close(ticket)
        self.decided += 1

    @contextlib.contextmanager
    def _deciding(self, row: Asked, held: Pushed, hub: Any, count: bool = True) -> Any:
        """A task deciding ``row`` (a wait on a cache, a check, an outbound call): what
        fails in it answers the row with a close (logged, as the Python path closes a
        connection it cannot serve); whatever happens, the decisions made are sent to the
        core and the decisions' counts flushed (``count``: the row counted as decided)."""
        try:
            yield
        except TimeoutError:  # the core's wait ended (its client's connection is closed):
            # a client can make this happen at will, so it is not logged as a failure
            log.debug("deciding a request of %s://%s: timed out", held[1], held[2])
            self.edge.carrier.decide_close(row[0])
        except Exception:
            log.exception("deciding a request of %s://%s", held[1], held[2])
            self.edge.carrier.decide_close(row[0])
        finally:
            if count:
                self.decided += 1
            self.edge.carrier.flush_decisions()
            hub.flush_counts()

    async def _checked(self, row: Asked, held: Pushed, policy: Any, hub: Any) -> None:
        """A row of an account with ``endpoints`` IP restrictions: its client checked as
        edge/http_routing.py checks it (refused: 403 ERR_NGROK_3203, closed), then decided as
        any row (no policy: on to the agent as it came)."""
        carrier, ticket, tunnel = self.edge.carrier, row[0], held[0]
        try:
            async with asyncio.timeout_at(_DUE.get()):
                allowed = await ip_restrictions.allows(
                    self.edge, tunnel.account_id, ip_restrictions.ENDPOINTS, str(row[2][0])
                )
        except Exception:  # the restrictions unread (or not in time): refused
            log.exception("checking a request of %s://%s", held[1], held[2])
            allowed = False
        if allowed and policy is not None and (policy.ip_policy_ids or policy.secret_refs):
            await self._resolved(row, held, policy, hub)  # its own caches next
            return
        with self._deciding(row, held, hub):
            if not allowed:  # answered before any endpoint's: no record names the endpoint
                refused = error_response(*ip_restrictions.REFUSED_ANSWER, close=True)
                self._answer(ticket, refused, row[5], True, REFUSED)
            elif policy is None and getattr(tunnel, "breaker", None) is not None:
                self._breaker_only(row, tunnel)
            elif policy is None:
                carrier.decide_append(ticket, [], None)
            else:
                self._decide(row, held, policy, hub, may_hold=False)

    async def _edge_row(self, row: Asked, held: Pushed, hub: Any, restricted: bool) -> None:
        """A request of an HTTPS edge's hostname: its client checked first when the
        account's ``endpoints`` IP restrictions apply, then routed by its path as
        edge/http_routing.py routes it (``EdgeRouter.route_http``: the edge's route, its
        modules' policy, its backend's labeled tunnel), then decided as a hop to that
        tunnel (:meth:`_edge_decide`)."""
        ticket, name = row[0], held[0]
        with self._deciding(row, held, hub):
            async with asyncio.timeout_at(_DUE.get()):
                router = self.edge.router
                routed = await router.route_http(held[2], row[6], held[1], draw=False)
                policy = routed.enforcement.policy if routed and routed.enforcement else None
                if routed is not None and row[10] and _reads_request_body(policy, row):
                    # an HTTP/2 stream whose body the route's policy reads: Python's, before
                    # its backend is drawn (it draws once, there) or its policy runs
                    self.edge.carrier.decide_python(ticket)
                    self.handed += 1
                    return
                if routed is not None:
                    router.draw(routed)
                # the routing's own answers first, then the client checked, as
                # edge/http_routing.py orders them
                if (
                    routed is not None
                    and routed.error is None
                    and restricted
                    and not await ip_restrictions.allows(
                        self.edge, name.account_id, ip_restrictions.ENDPOINTS, str(row[2][0])
                    )
                ):
                    refused = error_response(*ip_restrictions.REFUSED_ANSWER, close=True)
                    self._answer(ticket, refused, row[5], True, REFUSED)
                    return
            self._edge_decide(row, held, routed, hub)

    def _edge_decide(self, row: Asked, held: Pushed, routed: Any, hub: Any) -> None:
        """The edge's answer where the router gave one (none: offline, 404; its error),
        else the route's policy run on the request and what it let through sent to the
        backend's labeled tunnel (:meth:`_onward`) or answered by its fixed
        (``http_response``) backend (:meth:`_fixed`); a route's WebSocket-TCP converter
        is the core's (:meth:`_onward`). A static backend or a policy that is not decidable
        (or waits on a cache) is handed to the Python path."""
        ticket, method, scheme, host = row[0], row[5], held[1], held[2]
        if routed is None or routed.error is not None:
            status, code, msg = (
                routed.error
                if routed is not None
                else (
                    404,
                    edge_errors.ENDPOINT_OFFLINE,
                    f"The endpoint {scheme}://{host} is offline.",
                )
            )
            refused = error_response(status, code, msg, close=True)  # routed nowhere: no
            self._answer(ticket, refused, method, True, REFUSED)  # record names the edge
            return
        if (
            (routed.fixed is None and core_mux(routed.tunnel) is None)
            or routed.endpoint_id != held[0].endpoint_id  # another edge since the push
        ):
            self.edge.carrier.decide_python(ticket)
            return
        policy = routed.enforcement.policy if routed.enforcement is not None else None
        if policy is not None and (
            not decidable(policy)
            or policy.ip_policy_ids
            or policy.secret_refs
            or policy.has("on_tcp_connect")  # (per endpoint of the connection: Python's)
        ):
            self.edge.carrier.decide_python(ticket)
            return
        at = _At(routed, 0)
        conn = self._conn(row, scheme, routed.hop)
        request = http1.Request(method=method, target=row[6], headers=row[7], raw_headers=row[7])
        traffic = http_policy.Traffic(policy or NO_POLICY, conn, request, scheme, host)
        if policy is None:  # on to the tunnel as it came
            self._onward(row, held, traffic, at, hub, [], own=True)
            return
        out = policy.on_http_request(conn, traffic.req, traffic.state)
        if out.kind in AWAITED:
            asyncio.ensure_future(self._awaited(row, held, traffic, out, hub, False, at))
            return
        self._finish(row, held, traffic, out, hub, False, at)

    async def _resolved(self, row: Asked, held: Pushed, policy: Any, hub: Any) -> None:
        """A row of a policy naming IP policies or vault secrets: decided once the router's
        and the secrets' caches have them (as edge/http_policy.py reads them per run), its
        decision sent at once."""
        edge = self.edge
        account_id = held[0].account_id
        with self._deciding(row, held, hub):
            async with asyncio.timeout_at(_DUE.get()):
                ip_resolver = (
                    await edge.router.ip_policy_resolver(account_id, policy)
                    if policy.ip_policy_ids
                    else None
                )
                secret_resolver = (
                    await secrets.resolver(edge, account_id, policy)
                    if policy.secret_refs
                    else None
                )
            self._decide(row, held, policy, hub, ip_resolver, secret_resolver)

    def _breaker_only(self, row: Asked, tunnel: Any) -> None:
        """A request of an endpoint with a breaker and no policy: 503 while it is tripped
        (the connection closed, as the Python path answers), else on to the agent."""
        ticket, method = row[0], row[5]
        if not breaker.allows(tunnel):
            tripped = error_response(*breaker.TRIPPED_ANSWER, close=True)
            self._answer(ticket, tripped, method, True, None)
            return
        # (a converting endpoint's answers are counted by no breaker: see _finish)
        memo = None if getattr(tunnel, "ws_tcp", False) else _Forwarded(tunnel.breaker)
        self.edge.carrier.decide_append(ticket, [], memo)

    def _decide(
        self,
        row: Asked,
        held: Pushed,
        policy: Any,
        hub: Any,
        ip_resolver: Any = None,
        secret_resolver: Any = None,
        may_hold: bool = True,
    ) -> None:
        method, target, fields = row[5], row[6], row[7]
        tunnel, scheme, host, mode, _ = held
        # the route's decisions are held by the core (its policy reads only the row's facts);
        # never one made after a client check (a held decision would skip the next one's)
        hold = may_hold and mode & ~CAPTURED == DECIDED and request_reads(policy) is not None
        conn = self._conn(row, scheme, hop_of(tunnel))
        # a cloud endpoint's route: its policy answers or forwards (no session of its own)
        at = _At(tunnel, 0) if is_cloud(tunnel) else None
        conn.ip_policy_resolver, conn.secret_resolver = ip_resolver, secret_resolver
        request = http1.Request(method=method, target=target, headers=fields, raw_headers=fields)
        traffic = http_policy.Traffic(policy, conn, request, scheme, host)
        if row[11] and not http_policy.connect_phase(traffic):  # its on_tcp_connect rules,
            hub.count_decisions(traffic.state)  # at the connection's first request: refused,
            self.edge.carrier.decide_close(row[0])  # closed with no answer (as the Python
            return  # path closes it; as a request phase's close, no record)
        out = policy.on_http_request(conn, traffic.req, traffic.state)
        if out.kind in AWAITED:  # a sign-in's step or an outbound call: in a task
            asyncio.ensure_future(self._awaited(row, held, traffic, out, hub, hold, at))
            return
        self._finish(row, held, traffic, out, hub, hold, at)

    def _conn(self, row: Asked, scheme: str, hop: Hop) -> Any:
        """What a policy of the endpoint ``hop`` sees of a row's connection (``conn.*``,
        ``endpoint.*``), as edge/http_policy.py's ``policy_conn`` makes it."""
        peer, local, facts = row[2], row[3], row[4]
        conn = tp.Conn(
            client_ip=peer[0],
            client_port=peer[1],
            server_ip=local[0],
            server_port=local[1],
            endpoint=tp.Endpoint(
                id=hop.endpoint_id,
                url=hop.url,
                host=hop.host,
                port=local[1],
                protocol=scheme,
                account_id=hop.account_id,
            ),
            server_region=self.edge.settings.region,
        )
        if facts is not None:
            conn.tls_sni, conn.tls_version, conn.tls_cipher_suite = facts[0], facts[1], facts[2]
            conn.tls_client_der = facts[5] or b""  # a mutual-TLS handshake's (conn.tls.client.*)
        return conn

    async def _awaited(
        self,
        row: Asked,
        held: Pushed,
        traffic: Any,
        out: Any,
        hub: Any,
        hold: bool,
        at: Optional[_At] = None,
    ) -> None:
        """A run that waits: each sign-in step and outbound call awaited as
        edge/http_policy.py's request_phase awaits them, the run resumed after each, then
        decided; its decision sent at once."""

        def again() -> Any:
            return traffic.policy.on_http_request(traffic.conn, traffic.req, traffic.state)

        keys = 0  # the JWKS fetches this run asked for
        with self._deciding(row, held, hub, count=False):
            # the core's wait for the ticket
            async with asyncio.timeout_at(_DUE.get()) as deadline:
                while out.kind in AWAITED:
                    if out.kind == tp.NEED_KEYS:  # jwt-validation's keys, off the loop
                        if keys == 2:  # (as http_policy.py's request_phase: a third ends it)
                            break
                        keys += 1
                        await http_request.fetch_keys(out.urls)
                        out = again()
                    elif out.kind == tp.NEED_BODY:
                        if traffic.req.body is not None:  # asked twice: the run ends there,
                            break  # as the Python path's does (handed to it: _finish)
                        # as much as the policy's greediest action reads (http_policy.py)
                        limit = max(out.max_body_bytes, traffic.policy.request_body_limit)
                        read: Optional[Tuple[bytes, bool]] = (b"", True)
                        if not row[8]:  # (none follows the head: nothing to read) the read
                            # has its own bound (the core's, BODY_READ_SECONDS); the
                            deadline.reschedule(None)  # decision's wait starts after it
                            read = await self._body(row[0], limit)
                            if read is None:  # the core closed the connection: no decision
                                return
                            due = asyncio.get_running_loop().time() + DECIDE_SECONDS
                            _DUE.set(due)  # (as the core's second wait for the ticket)
                            deadline.reschedule(due)
                        assert read is not None
                        traffic.req.body, traffic.req.body_complete = read
                        hold = False  # (a body's decision is never held)
                        out = again()
                    elif out.kind == tp.IDENTITY:
                        answered = await identity.handle(traffic, out)
                        out = answered if answered is not None else again()
                    else:
                        out = await http_policy.http_call(
                            self.edge, held[0].account_id, traffic, "on_http_request", out, again
                        )
            self._finish(row, held, traffic, out, hub, hold, at)

    def _finish(
        self,
        row: Asked,
        held: Pushed,
        traffic: Any,
        out: Any,
        hub: Any,
        hold: bool,
        at: Optional[_At] = None,
    ) -> None:
        """The decision of a run that ended in ``out`` (the run of the internal endpoint
        ``at`` when a forward-internal sent the request there)."""
        ticket, peer, method, fields, bodiless = row[0], row[2], row[5], row[7], row[8]
        scheme = held[1]
        carrier, state = self.edge.carrier, traffic.state
        if out.kind == tp.FORWARD_INTERNAL:  # the next hop's run decides (counted there)
            self._forward(row, held, traffic, out, hub, at, hold)
            return
        if out.kind == tp.CONTINUE and at is not None:  # on to the internal endpoint (counted
            own = at.forwards == 0  # there); the route's own run: its append may be held
            self._onward(row, held, traffic, at, hub, out.breakers, hold and own, own)
            return
        if out.kind == tp.CONTINUE and row[10] and reads_response_body(traffic.policy):
            carrier.decide_python(ticket)  # an HTTP/2 stream: its response's body unread here
            return
        hub.count_decisions(state)
        memo = traffic
        if out.kind == tp.CONTINUE:
            tunnel = held[0]
            if not breaker.allows(tunnel):  # the endpoint's own, after the policy (public.py)
                tripped = error_response(*breaker.TRIPPED_ANSWER, close=True)
                self._answer(ticket, tripped, method, True, memo)
                return
            if getattr(tunnel, "ws_tcp", False):  # a converting endpoint: the core answers
                # the upgrade and converts, sending no HTTP request (so no head is made, as
                # edge/wstcp.py makes none), and no breaker counts its answers (as none
                # counts the Python path's converter's)
                carrier.decide_append(ticket, [], memo, hold)
                return
            traffic.breakers = out.breakers  # the answer is counted by them (fast_path.py)
            traffic.upstream_breaker = getattr(tunnel, "breaker", None)
            # request-body-find-replace: the body rewritten goes on in place of the client's
            # (read whole first; the action set its Content-Length)
            body = (traffic.req.body or b"") if traffic.req.body_rewritten else None
            try:
                added = traffic.appended() if body is None else None
                if added is not None:  # only headers appended: the core writes the head
                    carrier.decide_append(ticket, added, memo, hold)
                    return
                upstream = traffic.upstream_request(peer[0], scheme)
            except http1.LocalProtocolError as exc:
                status, code, msg = http_policy.POLICY_BROKE
                broke = error_response(status, code, msg.format(exc), close=True)
                self._answer(ticket, broke, method, True, memo)
                return
            carrier.decide_forward(ticket, http1.request_head(upstream), memo, body)
        elif out.kind == tp.RESPOND:
            # the connection stays usable when no body follows (or the core read it whole for
            # the run) and the client asked nothing else
            whole = bodiless or (traffic.req.body is not None and traffic.req.body_complete)
            close = not whole or _says_close(fields)
            try:
                answer = outcome_response(out, close=close)
            except http1.LocalProtocolError:  # a field HTTP/1.1 refuses: closed, as the
                carrier.decide_close(ticket)  # Python path's write fails
                return
            self._answer(ticket, answer, method, close, memo, hold)
        elif out.kind == tp.CLOSE:  # not held: no record of its request counts a held
            carrier.decide_close(ticket)  # decision's policy run
        else:  # what a decidable policy never reaches (a body to read):
            carrier.decide_python(ticket)  # the Python path runs it from scratch

    # ---- forward-internal ----------------------------------------------------------------
    def _forward(
        self,
        row: Asked,
        held: Pushed,
        traffic: Any,
        out: Any,
        hub: Any,
        at: Optional[_At],
        hold: bool = False,
    ) -> None:
        """A run that ended in a ``forward-internal``: its target found as
        edge/http_policy.py's ``request_phase`` finds it (``EdgeRouter.internal_target``),
        at once when it is an agent endpoint of this edge, else in a task (the store's read
        of a cloud one), then :meth:`_hop`."""
        account_id = held[0].account_id
        target = self.edge.router.internal_here(account_id, out.url)
        if target is not None:
            self._hop(row, held, traffic, out, hub, at, target, hold)
            return
        asyncio.ensure_future(self._found(row, held, traffic, out, hub, at))  # (not held: a
        # cloud target's or none, read from the store)

    async def _found(
        self, row: Asked, held: Pushed, traffic: Any, out: Any, hub: Any, at: Optional[_At]
    ) -> None:
        with self._deciding(row, held, hub, count=False):
            async with asyncio.timeout_at(_DUE.get()):  # the core's wait for the ticket
                target = await self.edge.router.internal_target(held[0].account_id, out.url)
            self._hop(row, held, traffic, out, hub, at, target)

    def _hop(
        self,
        row: Asked,
        held: Pushed,
        traffic: Any,
        out: Any,
        hub: Any,
        at: Optional[_At],
        target: Any,
        hold: bool = False,
    ) -> None:
        """The hop to ``target`` (None: none found), as edge/http_policy.py's ``run`` takes
        it: offline is a 502 (or, with ``on_error: continue``, the phase resumes after the
        action); past MAX_FORWARDS hops or to another protocol, the hosted error; else the
        internal endpoint's own policy runs on the request as the last one left it (or, with
        none, the request goes on to it). What the core cannot carry there (another
        instance's or OpenSSH's agent, a policy that is not decidable or waits on a cache) is
        handed to the Python path, which runs the whole request again."""
        ticket, method = row[0], row[5]
        if target is None:
            if out.on_error == "continue":  # the phase resumes after the action (same state)
                again = traffic.policy.on_http_request(traffic.conn, traffic.req, traffic.state)
                if again.kind in AWAITED:
                    asyncio.ensure_future(self._awaited(row, held, traffic, again, hub, False, at))
                    return
                self._finish(row, held, traffic, again, hub, False, at)
                return
            hub.count_decisions(traffic.state)
            offline = error_response(
                502,
                edge_errors.ENDPOINT_OFFLINE,
                f"The internal endpoint {out.url} is offline.",
                close=True,
            )
            self._answer(ticket, offline, method, True, traffic)
            return
        forwards = (at.forwards if at is not None else 0) + 1
        refused = forward_refused(target, forwards)
        if refused is not None:
            hub.count_decisions(traffic.state)
            self._answer(ticket, error_response(*refused, close=True), method, True, traffic)
            return
        try:
            request = traffic.forwarded_request()
        except http1.LocalProtocolError as exc:
            hub.count_decisions(traffic.state)
            status, code, msg = http_policy.POLICY_BROKE
            broke = error_response(status, code, msg.format(exc), close=True)
            self._answer(ticket, broke, method, True, traffic)
            return
        hop = _At(target, forwards)
        policy = target.enforcement.policy if target.enforcement is not None else None
        if policy is None:  # the last run's response phase in force there (no breaker of a
            own = at is None or at.forwards == 0  # forward-internal's counts it)
            self._onward(row, held, traffic, hop, hub, [], hold and own, own)
            return
        if not decidable(policy) or policy.ip_policy_ids or policy.secret_refs:
            self.edge.carrier.decide_python(ticket)
            return
        conn = self._conn(row, held[1], target.hop)
        hopped = http_policy.Traffic(policy, conn, request, held[1], held[2])
        read = traffic.req.body
        if read is not None:  # what the core read of the body is this run's too, unless this
            # run would read more of it than was read, or the last run rewrote it (the Python
            # path's next run reads the client's body, as far as it reads): the Python path's
            if traffic.req.body_rewritten or (
                not traffic.req.body_complete and policy.request_body_limit > len(read)
            ):
                self.edge.carrier.decide_python(ticket)
                return
            hopped.req.body, hopped.req.body_complete = read, traffic.req.body_complete
        hopped_out = policy.on_http_request(conn, hopped.req, hopped.state)
        if hopped_out.kind in AWAITED:
            asyncio.ensure_future(self._awaited(row, held, hopped, hopped_out, hub, False, hop))
            return
        self._finish(row, held, hopped, hopped_out, hub, False, hop)

    def _onward(
        self,
        row: Asked,
        held: Pushed,
        traffic: Any,
        at: _At,
        hub: Any,
        breakers: List[Any],
        hold: bool = False,
        own: bool = False,
    ) -> None:
        """A request let through at the internal endpoint ``at`` (by ``traffic``'s run, its
        ``breakers`` the circuit-breaker actions it passed): on to its agent, with the head
        as the last run left it, when the core runs its session here; a cloud endpoint's
        policy that let it through is the hosted 502; its breaker tripped, 503. The run's
        decisions are counted unless the request is handed to Python (which runs it again).
        ``own``: ``traffic`` is the route's own run on the client's head, so a run that only
        appended fields is sent as those fields (the core writes the head), and with
        ``hold`` (the route's decisions held, no response phase, no breaker counting the
        answer) the core may apply the decision again to the same facts."""
        ticket, peer, method = row[0], row[2], row[5]
        carrier, routed = self.edge.carrier, at.routed
        fixed = getattr(routed, "fixed", None)  # an HTTPS edge's http_response backend
        if fixed is not None:
            hub.count_decisions(traffic.state)
            asyncio.ensure_future(self._fixed(row, held, traffic, fixed, hub))
            return
        tunnel = routed.tunnel
        mux = core_mux(tunnel) if not routed.cloud else None
        # the target converts WebSockets (a converting endpoint, an edge route's converter):
        # the core answers the upgrade and converts (edge/wstcp.py's rules)
        converts = not routed.cloud and bool(
            getattr(tunnel, "ws_tcp", False) or getattr(routed, "ws_tcp", False)
        )
        if not routed.cloud and (
            mux is None
            or (converts and h2_scheme_of(tunnel) is not None)
            # (the converter sends no body and runs no response phase: neither hands over)
            or (not converts and traffic.req.body_rewritten)  # (the core sends a target
            # the client's body)
            or (not converts and row[10] and reads_response_body(traffic.policy))
        ):
            carrier.decide_python(ticket)  # not an agent session the core runs here
            return
        hub.count_decisions(traffic.state)
        if routed.cloud:
            failed = error_response(
                502,
                edge_errors.CLOUD_POLICY_FAILED,
                f"The traffic policy configured for cloud endpoint {routed.endpoint_id} "
                "is non-terminating.",
                close=True,
            )
            self._answer(ticket, failed, method, True, traffic)
            return
        if not breaker.allows(tunnel):  # no breaker counts the edge's own answer
            tripped = error_response(*breaker.TRIPPED_ANSWER, close=True)
            self._answer(ticket, tripped, method, True, traffic)
            return
        if converts:  # no HTTP request is sent (no head made), and no breaker counts the
            # converter's answers, as on the Python path (edge/wstcp.py)
            traffic.breakers, traffic.upstream_breaker = [], None
            carrier.decide_internal(
                ticket,
                None,
                mux,
                tunnel.id,
                memo=traffic,
                proxy_proto=tunnel.proxy_proto,
                proxy_dest=listener_addr(self.edge, held[1]),
                hold=hold,
                ws_tcp=True,
            )
            return
        traffic.breakers = breakers  # the answer is counted by them (fast_path.py)
        traffic.upstream_breaker = getattr(tunnel, "breaker", None)
        if breakers or traffic.upstream_breaker is not None:
            self.counting(row[1])  # each answer wanted (a quiet route's have no memo)
            hold = False
        responses = mode_of(traffic.policy) == RESPONSES
        try:
            added = traffic.appended() if own else None
            head = (
                None
                if added is not None
                else http1.request_head(traffic.upstream_request(peer[0], held[1]))
            )
        except http1.LocalProtocolError as exc:
            status, code, msg = http_policy.POLICY_BROKE
            broke = error_response(status, code, msg.format(exc), close=True)
            self._answer(ticket, broke, method, True, traffic)
            return
        carrier.decide_internal(
            ticket,
            head,
            mux,
            tunnel.id,
            fields=added or [],
            memo=traffic,
            responses=responses,
            h2_scheme=h2_scheme_of(tunnel),
            proxy_proto=tunnel.proxy_proto,
            proxy_dest=listener_addr(self.edge, held[1]),
            hold=hold and not responses and head is None,
        )

    async def _fixed(
        self, row: Asked, held: Pushed, traffic: Any, fixed: Dict[str, Any], hub: Any
    ) -> None:
        """A request an HTTPS edge's route sends to an http_response backend: answered with
        it as the Python path answers it (``http_policy.answer_fixed``: the response phase
        run on it, the request's body read first, up to FIXED_BODY_DRAIN, and dropped; the
        connection kept when it was read whole), in a task (the phase may call out)."""
        ticket, method, bodiless = row[0], row[5], row[8]
        with self._deciding(row, held, hub, count=False):
            async with asyncio.timeout_at(_DUE.get()) as deadline:
                whole = bodiless or (traffic.req.body is not None and traffic.req.body_complete)
                # an HTTP/2 stream's body is never read here (the core would hand the stream
                # over): answered at once, its virtual connection closed after, as a body
                # read in part by the policy closes it (the core asks for a body once)
                if not whole and traffic.req.body is None and not row[10]:
                    deadline.reschedule(None)  # (the read has its own bound, as in _awaited)
                    read = await self._body(ticket, http_policy.FIXED_BODY_DRAIN)
                    if read is None:  # the core closed the connection: no answer
                        return
                    deadline.reschedule(asyncio.get_running_loop().time() + DECIDE_SECONDS)
                    whole = read[1]
                answer = await http_policy.fixed_answer(fixed, traffic, self.edge)
            if answer is None:  # the response phase closed the connection
                self.edge.carrier.decide_close(ticket)
                return
            close = not whole or _says_close(row[7])
            try:
                events = outcome_response(answer, close=close)
            except http1.LocalProtocolError:  # a field HTTP/1.1 refuses: closed, as the
                self.edge.carrier.decide_close(ticket)  # Python path's write fails
                return
            self._answer(ticket, events, method, close, traffic)

    def _answer(
        self,
        ticket: int,
        events: List[Any],
        method: bytes,
        close: bool,
        memo: Any,
        hold: bool = False,
    ) -> None:
        """An answer (a head, its body or None, its end: edge/http_io.py's shapes) written as
        http1 writes it to the client: no body for HEAD, 204 or 304. ``hold``: the core may
        apply it again (the policy's own answer; never an error of the edge's, whose
        operation id is new each time)."""
        response, data = events[0], events[1]
        try:
            head = http1.response_head(response)
        except http1.LocalProtocolError:
            self.edge.carrier.decide_close(ticket)
            return
        status = response.status_code
        body = b"" if data is None or method == b"HEAD" or status in (204, 304) else data.data
        self.edge.carrier.decide_respond(ticket, status, head, body, close, memo, hold)

    def responses(self, rows: List[AskedResponse]) -> None:
        """The response phase of each decided request whose route has one, on the agent's
        response head, as edge/http_policy.py's ``response_phase`` runs it: the head goes on
        as the phase left it (``decide_rewrite``), or the policy's answer goes instead and the
        connection closes after it, or it closes without one. A phase that reads the body
        (find-replace on it, the OWASP rules on its first bytes) has the core read it first
        (``decide_body``) and goes on with the row asked again (:meth:`_response_body`)."""
        carrier = self.edge.carrier
        for ticket, _, status, fields, traffic, read in rows:
            try:
                if read is not None and traffic is not None and traffic.sse is not None:
                    self._event_piece(carrier, ticket, read, traffic)
                elif read is not None:
                    self._response_body(carrier, ticket, read, traffic)
                else:
                    self._response(carrier, ticket, status, fields, traffic)
            except Exception:
                log.exception("the response phase of a decided request")
                carrier.decide_close(ticket)

    def _response(
        self, carrier: Any, ticket: int, status: int, fields: list, traffic: Any
    ) -> None:
        if traffic is None:  # nothing to run it with (never: a forwarded request's memo)
            carrier.decide_close(ticket)
            return
        res = tp.Response(
            status_code=status,
            headers=[(n.lower().decode("latin-1"), v.decode("latin-1")) for n, v in fields],
        )  # names in lower case, as the Python path's parser gives them
        cookies = getattr(traffic, "set_cookies", None)
        if cookies:  # a session refreshed (edge/identity.py with_cookies): on this response
            traffic.set_cookies = None
            for cookie in cookies:
                res.add_header("set-cookie", cookie)
        # server-sent events the on_event_stream_message rules rewrite: known by the agent's
        # own head, before the phase runs (as response_phase knows it: a phase that drops or
        # sets the Content-Type changes nothing of it)
        streams = traffic.policy.has("on_event_stream_message") and _event_stream(
            traffic.request.method, status, res
        )
        out = traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)
        if out.kind == tp.HTTP_REQUEST:  # an outbound call: awaited in a task (the core's
            # request waits for its ticket meanwhile)
            asyncio.ensure_future(
                self._response_calls(carrier, ticket, status, res, traffic, out, streams)
            )
            return
        self._response_out(carrier, ticket, status, res, traffic, out, streams)

    async def _response_calls(
        self,
        carrier: Any,
        ticket: int,
        status: int,
        res: Any,
        traffic: Any,
        out: Any,
        streams: bool,
    ) -> None:
        """The response phase's outbound calls (``http-request``), each awaited as
        edge/http_policy.py's ``response_phase`` awaits it, the phase resumed after each,
        within the core's wait for the ticket (DECIDE_SECONDS); then its decision, sent at
        once."""

        def again() -> Any:
            return traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)

        try:
            async with asyncio.timeout(DECIDE_SECONDS):
                while out.kind == tp.HTTP_REQUEST:
                    out = await http_policy.http_call(
                        self.edge, "", traffic, "on_http_response", out, again
                    )
            self._response_out(carrier, ticket, status, res, traffic, out, streams)
        except TimeoutError:  # the core's wait ended (its connection is closed)
            log.debug("the response phase of a decided request: timed out")
            carrier.decide_close(ticket)
        except Exception:
            log.exception("the response phase of a decided request")
            carrier.decide_close(ticket)
        finally:
            carrier.flush_decisions()

    def _response_out(
        self,
        carrier: Any,
        ticket: int,
        status: int,
        res: Any,
        traffic: Any,
        out: Any,
        streams: bool,
    ) -> None:
        """The decision of a response phase that ended in ``out`` (``streams``: the agent's
        response is server-sent events the policy rewrites)."""
        method = traffic.request.method
        if out.kind == tp.RESPOND:
            try:
                answer = outcome_response(out, close=True)
            except http1.LocalProtocolError:
                carrier.decide_close(ticket)
                return
            self._answer(ticket, answer, method, True, traffic)
        elif out.kind == tp.CONTINUE:
            # server-sent events: sent chunked (the messages change size), each piece
            # Python's first (as response_phase sets it up)
            if streams:
                res.remove_header("content-length")
            try:
                rewritten = http1.checked_headers(
                    [(http_policy.wire(n), http_policy.wire(v)) for n, v in res.headers]
                )
            except http1.LocalProtocolError:  # as the Python path's checked Response
                carrier.decide_close(ticket)
                return
            traffic.compressor = out.compressor
            if out.rewrites or out.body_checks:  # the body first (as edge/public.py holds the
                # head for it): all of it for a find-replace (the core reads past its bound to
                # say it is too large), else the first bytes the OWASP rules read
                traffic.rewrites, traffic.body_checks = out.rewrites, out.body_checks
                traffic.response_fields, traffic.response_status = rewritten, status
                if method == b"HEAD" or status in (204, 304) or status < 200:
                    self._response_body(carrier, ticket, (b"", True), traffic)
                    return
                # (the core reads until the body passes the ask: the OWASP rules' read ends
                # once it has their 4 KiB, as edge/public.py's does)
                limit = MAX_FIND_REPLACE_BODY if out.rewrites else WAF_BODY_LIMIT - 1
                carrier.decide_body(ticket, limit, traffic)
                return
            compressor = out.compressor  # compress-response negotiated one: the core's to run
            encode = compressor.algorithm if compressor is not None else None
            if streams:
                traffic.sse = http_policy.EventStream(traffic, res)
                carrier.decide_events(ticket, rewritten, traffic, encode=encode)
                return
            carrier.decide_rewrite(ticket, rewritten, traffic, encode=encode)
        else:
            carrier.decide_close(ticket)

    def _event_piece(self, carrier: Any, ticket: int, read: ReadBody, traffic: Any) -> None:
        """One piece of an event stream's body (Decision::Events): the messages it completes
        through on_event_stream_message, rewritten (edge/http_policy.py's EventStream, as
        edge/public.py feeds it), and at the body's end what the stream ended with, run as a
        message too; a message past sse.MAX_EVENT (or a rule's result past it) cuts the
        response there (never passed on unrewritten)."""
        data, complete = read
        stream = traffic.sse
        try:
            out = stream.feed(data) if data else b""
            if complete:
                traffic.sse = None
                out += stream.finish()
        except tp_sse.TooLarge as exc:
            log.info("ending an event stream: %s", exc)
            traffic.sse = None
            carrier.decide_close(ticket)
            return
        carrier.decide_rewrite(ticket, [], traffic, body=out)

    def _response_body(self, carrier: Any, ticket: int, read: ReadBody, traffic: Any) -> None:
        """The response phase's body actions on what the core read of the agent's body (as
        edge/public.py runs them): the OWASP checks on its first bytes (one that matched
        answers instead), find-replace's rules on all of it (past MAX_FIND_REPLACE_BODY, or
        one rule's result past its bound, the hosted 502), the new body sent in its place,
        compressed as negotiated; with no rewrite, what was read goes on and the rest after
        it."""
        data, complete = read
        fields, status = traffic.response_fields, traffic.response_status
        if data is None or fields is None:  # (never: the core fails such a read itself)
            carrier.decide_close(ticket)
            return
        traffic.response_fields = None
        method = traffic.request.method
        rewrites, compressor = traffic.rewrites, traffic.compressor
        bodiless = method == b"HEAD" or status in (204, 304) or status < 200
        if rewrites and (not complete or len(data) > MAX_FIND_REPLACE_BODY):
            msg = (
                f"The response body is larger than the {MAX_FIND_REPLACE_BODY} "
                "bytes response-body-find-replace can rewrite."
            )
            self._bad_response(ticket, msg, method, traffic, status)
            return
        for body_check in traffic.body_checks:
            found = body_check(data[:WAF_BODY_LIMIT])
            if found is not None:
                try:
                    answer = outcome_response(found, close=True)
                except http1.LocalProtocolError:
                    carrier.decide_close(ticket)
                    return
                self._answer(ticket, answer, method, True, _answered(traffic, status))
                return
        if not rewrites or bodiless:  # (a bodiless response's head goes on as it is)
            encode = compressor.algorithm if compressor is not None else None
            carrier.decide_rewrite(ticket, fields, traffic, encode=encode)
            return
        try:
            body = http_policy.rewritten_body(data, rewrites, compressor)
        except RewriteTooLarge as exc:
            msg = f"response-body-find-replace: {exc}."
            self._bad_response(ticket, msg, method, traffic, status)
            return
        carrier.decide_rewrite(ticket, fields, traffic, body=body)

    def _bad_response(
        self, ticket: int, msg: str, method: bytes, traffic: Any, status: int
    ) -> None:
        """The hosted 502 for a response the edge cannot pass on (edge/public.py's)."""
        bad = error_response(502, edge_errors.BAD_UPSTREAM_RESPONSE, msg, close=True)
        self._answer(ticket, bad, method, True, _answered(traffic, status))


def _answered(traffic: Any, status: int) -> Any:
    """``traffic`` as the memo of the edge's answer to a response whose body the phase read:
    the agent's ``status`` is counted now by the breakers its request passed (as edge/public.py
    counts it when the head comes, before the body is held), and the record of the answer
    counts in none (edge/fast_path.py: a memo of an answer the edge made has no breakers)."""
    http_policy.record_upstream(traffic, status)
    traffic.breakers, traffic.upstream_breaker = [], None
    return traffic


def _event_stream(method: bytes, status: int, res: Any) -> bool:
    """A response whose body is server-sent events (and has a body), as
    edge/http_policy.py's ``event_stream`` says it."""
    if method == b"HEAD" or status in (204, 304) or status < 200:
        return False
    for name, value in res.headers:
        if name == "content-type":
            return value.split(";")[0].strip().lower() == tp_sse.MEDIA_TYPE
    return False


def _agrees(now: Optional[int], pushed: int) -> bool:
    """A route's mode now (``mode_of``) is the one it was pushed with, the RESTRICTED bit
    aside: that bit follows the router's cache of the account's restrictions, which lets them
    go every second (``mode_of`` then assumes them), and a row of such a route is checked
    (:meth:`Decider._one`) rather than handed back (each second, every decided route of every
    account had handed its rows, and their connections, to Python until the refresh read the
    restrictions again, and was pushed anew, its held decisions lost)."""
    return now is not None and now & ~RESTRICTED == pushed & ~RESTRICTED


class _Refused:
    """The memo of a request the account's ``endpoints`` IP restrictions refused: the Python
    path answers it before routing it (edge/http_routing.py), so no record names the endpoint
    (edge/fast_path.py ``served`` skips it) and no breaker counts it."""

    __slots__ = ()
    state = None
    breakers = ()
    upstream_breaker = None


REFUSED = _Refused()


def _reads_request_body(policy: Optional[Any], row: Asked) -> bool:
    """Whether ``policy``'s request phase may ask for the body of ``row``'s request: one
    follows its head, and an action reads it (``request_body_limit``)."""
    return policy is not None and not row[8] and policy.request_body_limit > 0


def _says_close(fields: List[Tuple[bytes, bytes]]) -> bool:
    """The client's head asks for the connection to end after this exchange."""
    return any(name == b"connection" and b"close" in value.lower() for name, value in fields)
