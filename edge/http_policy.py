"""The traffic policy's part in an HTTP exchange: the request phase (with forward-internal
hops from one endpoint's policy to an internal endpoint's), the response phase, answers from
an http_response backend, and the request as the policy leaves it for the upstream.

``run`` is what the HTTP front (edge/public.py) calls once a request is routed: it returns the
verdict and the route the request ends on (an internal endpoint after forward-internal).
"""

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import edge_errors, policy as tp
from chalicelib.core.policy import actions as tp_actions
from chalicelib.core.policy import sse as tp_sse
from chalicelib.core.policy import waf as tp_waf
from edge import http1, http_request, identity, observe, secrets
from edge.edges import Hop, forward_refused
from edge.http_io import BODY_TIMEOUT, Closed, answer, client_event, outcome_response, send
from edge.http_routing import Route

FIXED_BODY_DRAIN = 1024 * 1024  # request body read (and dropped) before a fixed answer
HOP_HEADERS = {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"}
MAX_CONNS = 16  # policy views of one client connection kept (one per endpoint it reached),
# and the on_tcp_connect runs it remembers (one per endpoint and policy: ``run``)
CONNECTED = "on_tcp_connect"


def forwarded_headers(pairs, client_ip: str, scheme: str) -> List[Tuple[bytes, bytes]]:
    """The request's headers (lower-case bytes pairs) plus X-Forwarded-For (appended),
    -Proto and -Host."""
    headers = []
    xff = []
    host = b""
    for name, value in pairs:
        if name == b"x-forwarded-for":
            xff.append(value)
        if name == b"host":
            host = value
        if name not in HOP_HEADERS:
            headers.append((name, value))
    xff.append(client_ip.encode())
    headers.append((b"x-forwarded-for", b", ".join(xff)))
    headers.append((b"x-forwarded-proto", scheme.encode()))
    if host:
        headers.append((b"x-forwarded-host", host))
    return headers


class Traffic:
    """One request's run through its endpoint's traffic policy (modules included)."""

    def __init__(self, policy: Any, conn: Any, request: http1.Request, scheme: str, host: str):
        self.policy = policy
        self.conn = conn
        self.state = policy.new_state()
        length = None
        for name, value in request.headers:
            if name == b"content-length":
                length = int(value)
        self.request = request
        self.pairs = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers]
        self.req = tp.Request.from_target(
            request.method.decode("ascii"),
            scheme,
            host,
            request.target.decode("latin-1"),
            self.pairs,
            content_length=length,
        )
        self.target = self.req.target
        self.compressor = None
        self.rewrites: List[Any] = []  # response-body-find-replace (public.py buffers for it)
        self.breakers: List[Any] = []  # circuit-breaker actions the response is counted in
        # the endpoint's own breaker (its Bind option), once the request went on to the agent
        # on a decided route (edge/decided.py): its record counts the response there
        self.upstream_breaker: Any = None
        self.sse: Optional[EventStream] = None  # sse-find-replace: the messages' rewriter
        self.body_checks: List[Any] = []  # owasp-crs-response process_body (public.py)
        # a decided route's response head as its phase left it, while the core reads the
        # body for the phase's body actions (edge/decided.py)
        self.response_fields: Optional[List[Tuple[bytes, bytes]]] = None
        self.response_status = 0  # (and the agent's status)

    def forwarded_request(self) -> http1.Request:
        """The request as this policy left it, for the internal endpoint it forwards to.
        http1.LocalProtocolError when the policy made it invalid (see PolicyBroke)."""
        return http1.Request(
            method=self.req.method,
            target=wire(self.req.target),
            headers=[(wire(n), wire(v)) for n, v in self.req.headers],
            checked=True,
        )

    def appended(self) -> Optional[List[Tuple[bytes, bytes]]]:
        """The headers this policy appended, checked (lower-case names), when it changed
        nothing else of the request (add-headers; none of Host, Content-Length,
        Transfer-Encoding): the rest is the parsed request's, already valid. None when it
        changed more. http1.LocalProtocolError when an appended one is not valid HTTP/1.1."""
        req, count = self.req, len(self.pairs)
        if (
            req.method == self.pairs_method
            and req.headers[:count] == self.pairs
            and req.target == self.target
        ):
            added = [(wire(n.lower()), wire(v)) for n, v in req.headers[count:]]
            if not any(n in FRAMING_HEADERS for n, _ in added):
                return http1.checked_headers(added) if added else []
        return None

    def upstream_request(self, client_ip: str, scheme: str) -> http1.Request:
        """The request as this policy left it, with the X-Forwarded headers.
        http1.LocalProtocolError when the policy made it invalid (see PolicyBroke)."""
        added = self.appended()
        if added is not None:
            headers = forwarded_headers(
                self.request.headers + added if added else self.request.headers,
                client_ip,
                scheme,
            )
            return http1.Request(
                method=self.request.method,
                target=self.request.target,
                headers=headers,
                raw_headers=headers,
            )
        req = self.req
        pairs = [(wire(n.lower()), wire(v)) for n, v in req.headers]
        return http1.Request(
            method=req.method,
            target=wire(req.target),
            headers=forwarded_headers(pairs, client_ip, scheme),
            checked=True,
        )

    @property
    def pairs_method(self) -> str:
        return self.request.method.decode("ascii")


FRAMING_HEADERS = (b"host", b"content-length", b"transfer-encoding")


def wire(text: str) -> bytes:
    """A header name or value (or target) as bytes: what came from the client round-trips
    as Latin-1 (the bytes it sent); a value a policy added beyond Latin-1 goes as UTF-8."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


# A request the traffic policy made invalid (a removed Host header, a value with a line break, a
# name HTTP/1.1 refuses): ERR_NGROK_2300, the hosted "internal gateway error while processing policy
# action", instead of a closed connection.
POLICY_BROKE = (
    502,
    edge_errors.POLICY_FAILED,
    "Internal gateway error occurred while processing "
    "policy action: the request it produced is not valid "
    "HTTP/1.1 ({})",
)


@dataclass
class PolicyRun:
    """How the request phase ended: ``verdict`` "proxy" (on to ``route``'s upstream with
    ``prebuffered`` body events already read), "next" (the policy answered; the connection
    stays usable) or "close"; ``traffic`` is the last policy's run (its response phase)."""

    verdict: str
    route: Route
    traffic: Optional[Traffic] = None
    prebuffered: List[Any] = dataclasses.field(default_factory=list)


async def run(
    edge: Any,
    scheme: str,
    client: Any,
    reader: Any,
    writer: Any,
    peer: Any,
    request: http1.Request,
    host: str,
    route: Route,
    conns: Dict[Any, Any],
) -> PolicyRun:
    """The routed endpoint's request phase, and each internal endpoint's a forward-internal
    reaches (at most MAX_FORWARDS hops: edges.forward_refused). ``conns`` keeps the policy's
    view of this client connection per endpoint (built once per connection)."""
    traffic: Optional[Traffic] = None
    prebuffered: List[Any] = []
    hop_request, forwards = request, 0
    while route.enforcement is not None and route.enforcement.policy is not None:
        endpoint = route.endpoint
        conn = conns.get(endpoint)  # what the policy sees of this connection
        if conn is None:
            if len(conns) >= MAX_CONNS:
                conns.clear()
            conn = conns[endpoint] = policy_conn(
                scheme, edge.settings.region, writer, peer, endpoint
            )
        # its on_tcp_connect rules: once per connection for each endpoint and document (an
        # HTTPS edge's routes share its endpoint, each with a policy of its own; a policy
        # changed since the connection began runs its rules anew), never on a forward's hop
        connected = first_connect(conns, endpoint, conn, route.enforcement.policy, forwards)
        conn.ip_policy_resolver = None
        if route.enforcement.policy.ip_policy_ids:  # restrict-ips ip_policies, cached
            conn.ip_policy_resolver = await edge.router.ip_policy_resolver(
                endpoint.account_id, route.enforcement.policy
            )
        conn.secret_resolver = (
            None
            if not route.enforcement.policy.secret_refs
            else await secrets.resolver(edge, endpoint.account_id, route.enforcement.policy)
        )  # edge/secrets.py
        traffic = Traffic(route.enforcement.policy, conn, hop_request, scheme, host)
        observe.policy(client, traffic)
        if connected and not connect_phase(traffic):  # refused: closed, no answer (no
            hub = observe.hub_of(edge)  # record: its decisions counted here, as the
            hub.count_decisions(traffic.state)  # core's path counts them)
            hub.flush_counts()
            return PolicyRun("close", route, traffic)
        verdict, prebuffered, target = await request_phase(
            edge.router, client, reader, writer, traffic, prebuffered, route.account_id
        )
        if verdict != "forward":
            return PolicyRun(verdict, route, traffic, prebuffered)
        # forward-internal: the internal endpoint's own policy runs next (if it has none, the
        # forwarding endpoint's response phase stays in force)
        forwards += 1
        refused = forward_refused(target, forwards)
        if refused is not None:
            await answer(client, writer, *refused, close=True)
            return PolicyRun("close", route, traffic)
        try:
            hop_request = traffic.forwarded_request()
        except http1.LocalProtocolError as exc:
            status, code, msg = POLICY_BROKE
            await answer(client, writer, status, code, msg.format(exc), close=True)
            return PolicyRun("close", route, traffic)
        route = Route(
            target.tunnel, None, target.enforcement, target.hop, target.cloud, route.account_id
        )
    return PolicyRun("proxy", route, traffic, prebuffered)


def first_connect(
    conns: Dict[Any, Any], endpoint: Hop, conn: Any, policy: Any, forwards: int
) -> bool:
    """Whether ``policy``'s on_tcp_connect rules are to run now on this connection for
    ``endpoint`` (remembered in ``conns`` from now on; past MAX_CONNS entries all are
    forgotten but ``endpoint``'s view: its rules then run again, never fewer)."""
    if forwards or not policy.has("on_tcp_connect"):
        return False
    key = (CONNECTED, endpoint, policy.digest)
    if key in conns:
        return False
    if len(conns) >= MAX_CONNS:
        conns.clear()
        conns[endpoint] = conn
    conns[key] = True
    return True


def connect_phase(traffic: Traffic) -> bool:
    """An HTTP endpoint's ``on_tcp_connect`` rules, run once per client connection and
    endpoint, at the connection's first request to it (the endpoint is known by the request's
    Host), with that request's state (its record carries the phase's logs and variables):
    False when they refuse the connection (deny, close-connection, restrict-ips), which is
    then closed with no answer, as a TCP endpoint's is. (A forward-internal there is refused
    when the policy is made; one stored before that refuses too.)"""
    policy = traffic.policy
    if not policy.has("on_tcp_connect"):
        return True
    return policy.on_tcp_connect(traffic.conn, traffic.state).kind == tp.CONTINUE


def policy_conn(scheme: str, region: str, writer: Any, peer: Any, endpoint: Hop) -> Any:
    """What the policy sees of the client connection (``conn.*``, ``endpoint.*``)."""
    sockname = writer.get_extra_info("sockname") or ("", 0)
    ssl_object = writer.get_extra_info("ssl_object")
    conn = tp.Conn(
        client_ip=str(peer[0]),
        client_port=int(peer[1] or 0),
        server_ip=str(sockname[0]),
        server_port=int(sockname[1] or 0),
        endpoint=tp.Endpoint(
            id=endpoint.endpoint_id,
            url=endpoint.url,
            host=endpoint.host,
            port=int(sockname[1] or 0),
            protocol=scheme,
            account_id=endpoint.account_id,
        ),
        server_region=region,
    )
    if ssl_object is not None:
        conn.tls_version = ssl_object.version() or ""
        conn.tls_cipher_suite = (ssl_object.cipher() or ("",))[0]
        conn.tls_sni = ssl_object.server_hostname or ""
        # the client certificate a mutual-TLS handshake verified (conn.tls.client.*)
        conn.tls_client_der = ssl_object.getpeercert(binary_form=True) or b""
    return conn


async def request_phase(
    router: Any,
    client: Any,
    reader: Any,
    writer: Any,
    traffic: Traffic,
    events: Optional[List[Any]] = None,
    account_id: str = "",
) -> Tuple[str, List[Any], Any]:
    """Run on_http_request: ("proxy", body events read so far, None) to go on upstream;
    ("forward", events, target) for a forward-internal to an endpoint found (an
    ``edges.Routed``); ("next", [], None) when the policy answered and the connection
    stays usable; ("close", [], None) when it is done. ``events``: the body events an
    earlier hop (the endpoint that forwarded here) already read."""
    events = list(events or [])
    while not (events and isinstance(events[-1], http1.EndOfMessage)):
        # what of the body is already here (all of it, for a bodiless request)
        event = client.next_event()
        if event is http1.NEED_DATA:
            break
        if not isinstance(event, (http1.Data, http1.EndOfMessage)):
            raise Closed()
        events.append(event)
        if isinstance(event, http1.EndOfMessage):
            break
    asked = False
    keys = 0  # the JWKS fetches this run asked for

    def again() -> Any:
        return traffic.policy.on_http_request(traffic.conn, traffic.req, traffic.state)

    while True:
        out = again()
        while True:
            if out.kind == tp.NEED_BODY and not asked:
                # read once, as much as the policy's greediest action reads (owasp-crs-request
                # 4 KiB, request-body-find-replace 1 MiB: each reads its part of that)
                asked = True
                limit = max(out.max_body_bytes, traffic.policy.request_body_limit)
                events = await buffer_body(client, reader, limit, events)
                body = b"".join(bytes(e.data) for e in events if isinstance(e, http1.Data))
                traffic.req.body = body[:limit]
                traffic.req.body_complete = len(body) <= limit and isinstance(
                    events[-1], http1.EndOfMessage
                )
                out = again()
            elif out.kind == tp.NEED_KEYS and keys < 2:  # jwt-validation's keys, off the loop
                keys += 1  # (a second ask: a URL rendered anew; a third ends the run)
                await http_request.fetch_keys(out.urls)
                out = again()
            elif out.kind == tp.IDENTITY:  # openid-connect / oauth sign-in (edge/identity.py)
                answered = await identity.handle(traffic, out)
                out = answered if answered is not None else again()
            elif out.kind == tp.HTTP_REQUEST:  # the call made, the phase resumes
                out = await http_call(
                    router.edge, account_id, traffic, "on_http_request", out, again
                )
            else:
                break
        if out.kind != tp.FORWARD_INTERNAL:
            break
        target = await router.internal_target(account_id, out.url)
        if target is not None:
            return "forward", events, target
        if out.on_error != "continue":  # halt: offline, like any unknown endpoint
            await answer(
                client,
                writer,
                502,
                edge_errors.ENDPOINT_OFFLINE,
                f"The internal endpoint {out.url} is offline.",
                close=True,
            )
            return "close", [], None
        # continue: the phase resumes after the forward action (same state)
    if out.kind == tp.CONTINUE:
        traffic.breakers = out.breakers
        if traffic.req.body_rewritten:  # request-body-find-replace: the new body goes on
            trailers = events[-1].trailers if isinstance(events[-1], http1.EndOfMessage) else []
            body = traffic.req.body or b""
            events = [http1.Data(data=body)] if body else []
            events.append(http1.EndOfMessage(trailers))
        return "proxy", events, None
    if out.kind == tp.RESPOND:
        whole = bool(events) and isinstance(events[-1], http1.EndOfMessage)
        for item in outcome_response(out, close=not whole):
            if item is not None:
                await send(client, writer, item)
        return ("next" if whole else "close"), [], None
    return "close", [], None


async def http_call(
    edge: Any, account_id: str, traffic: Traffic, phase: str, out: Any, again: Any
) -> Any:
    """An http-request action's call (edge/http_request.py), its answer set as the phase's
    variables; the phase's next outcome (``again``), or the action's halt answer when the
    call failed and its on_error is halt."""
    values, failed = await http_request.perform(
        edge, account_id or traffic.conn.endpoint.account_id, out.call
    )
    if failed and out.call.on_error == "halt":
        traffic.state.resume.pop(phase, None)
        halted = tp_actions.HttpRequest.halted(values["error.message"])
        halted.errors, halted.logs = out.errors, out.logs
        return halted
    traffic.state.http_request_done(phase, values)
    return again()


async def response_phase(traffic: Traffic, event: http1.Response, edge: Any = None) -> Any:
    """Run on_http_response on the agent's response head: the head to send, or the policy's
    own answer (a list of events), or Closed. A text/event-stream response to a policy with
    on_event_stream_message rules gets ``traffic.sse`` (each message through that phase) and
    loses its Content-Length (sent chunked: the messages change size)."""
    if getattr(traffic, "set_cookies", None):  # a session refreshed (edge/identity.py)
        event = identity.with_cookies(event, traffic)
    streams = traffic.policy.has("on_event_stream_message") and event_stream(traffic, event)
    if not traffic.policy.has("on_http_response") and not streams:
        return event  # nothing to run: the response goes on as the agent sent it
    res = tp.Response(
        status_code=event.status_code,
        headers=[(n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers],
    )
    if traffic.policy.has("on_http_response"):

        def again() -> Any:
            return traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)

        out = again()
        while out.kind == tp.HTTP_REQUEST and edge is not None:
            out = await http_call(edge, "", traffic, "on_http_response", out, again)
        if out.kind == tp.RESPOND:
            return outcome_response(out, close=True)
        if out.kind == tp.CLOSE:
            raise Closed()
        traffic.compressor = out.compressor
        traffic.rewrites = out.rewrites
        traffic.body_checks = out.body_checks
    if streams:
        traffic.sse = EventStream(traffic, res)
        res.remove_header("content-length")
    return http1.Response(
        status_code=res.status_code,
        reason=event.reason,
        headers=[(wire(n), wire(v)) for n, v in res.headers],
        checked=True,
    )


def event_stream(traffic: Traffic, event: http1.Response) -> bool:
    """A response whose body is server-sent events (and has a body)."""
    if traffic.req.method == "HEAD" or event.status_code in (204, 304) or event.status_code < 200:
        return False
    for name, value in event.headers:
        if name == b"content-type":
            media = value.split(b";")[0].strip().lower().decode("latin-1")
            return media == tp_sse.MEDIA_TYPE
    return False


class EventStream:
    """A text/event-stream response's messages, each through on_event_stream_message as it
    completes (chalicelib/core/policy/sse.py): at most one incomplete message held
    (sse.MAX_EVENT bytes; sse.TooLarge past it)."""

    def __init__(self, traffic: Traffic, res: Any) -> None:
        self.traffic, self.res = traffic, res
        self.splitter = tp_sse.Splitter()
        self.messages = 0

    def feed(self, data: bytes) -> bytes:
        """The messages ``data`` completes, rewritten; sse.TooLarge when they come to more
        than sse.MAX_FED bytes (checked as each is made: what is held stays that bound and
        one message)."""
        out: List[bytes] = []
        size = 0
        for raw in self.splitter.feed(data):
            one = self.feed_one(raw)
            size += len(one)
            if size > tp_sse.MAX_FED:
                raise tp_sse.TooLarge(
                    f"the server-sent events of one read came to more than {tp_sse.MAX_FED} "
                    "bytes rewritten"
                )
            out.append(one)
        return b"".join(out)

    def finish(self) -> bytes:
        """What the stream ended with without a blank line, run as a message too (browsers
        drop it, other clients may not: it is never passed on unrewritten)."""
        tail = self.splitter.finish()
        return self.feed_one(tail) if tail else b""

    def feed_one(self, raw: bytes) -> bytes:
        traffic = self.traffic
        message = tp_sse.Message(raw)
        traffic.policy.on_event_stream_message(
            traffic.conn, traffic.req, self.res, traffic.state, message
        )
        self.messages += 1
        return message.to_bytes()


async def answer_fixed(
    client: Any,
    reader: Any,
    writer: Any,
    fixed: Dict[str, Any],
    traffic: Optional[Traffic],
    events: Optional[List[Any]],
    edge: Any = None,
) -> bool:
    """Answer with an http_response backend's status, headers and body (the response
    phase's rules apply to it too). True when the connection stays usable."""
    events = await buffer_body(client, reader, FIXED_BODY_DRAIN, list(events or []))
    whole = bool(events) and isinstance(events[-1], http1.EndOfMessage)
    answer = await fixed_answer(fixed, traffic, edge)
    if answer is None:
        return False
    for item in outcome_response(answer, close=not whole):
        if item is not None:
            await send(client, writer, item)
    return whole


async def fixed_answer(fixed: Dict[str, Any], traffic: Optional[Traffic], edge: Any) -> Any:
    """An http_response backend's answer (``status_code``, ``headers``, ``body``) once the
    response phase of ``traffic``'s policy ran on it; None when that phase closes the
    connection. The one making of it, for both paths (``answer_fixed``, and the core's
    decided routes: edge/decided.py)."""
    body = (fixed.get("body") or "").encode("utf-8")
    headers = [(str(k), str(v)) for k, v in (fixed.get("headers") or {}).items()]
    status = int(fixed.get("status_code") or 200)
    if traffic is not None:
        res = tp.Response(status_code=status, headers=headers)

        def again() -> Any:
            return traffic.policy.on_http_response(traffic.conn, traffic.req, res, traffic.state)

        out = again()
        while out.kind == tp.HTTP_REQUEST and edge is not None:
            out = await http_call(edge, "", traffic, "on_http_response", out, again)
        if out.kind == tp.RESPOND:
            status, headers, body = out.status_code, out.headers, out.body
        elif out.kind == tp.CLOSE:
            return None
        else:
            status, headers = res.status_code, res.headers
            for body_check in out.body_checks:  # owasp-crs-response process_body
                checked = body_check(body[: tp_waf.BODY_LIMIT])
                if checked is not None:
                    status, headers, body = checked.status_code, checked.headers, checked.body
                    out.rewrites, out.compressor = [], None
                    break
            try:
                body = rewritten_body(body, out.rewrites, out.compressor)
            except tp_actions.RewriteTooLarge as exc:
                status, body = 502, f"response-body-find-replace: {exc}.".encode()
                headers = [("ngrok-error-code", edge_errors.BAD_UPSTREAM_RESPONSE)]
    return SimpleNamespace(status_code=status, headers=headers, body=body)


def record_status(traffic: Any, status: int) -> None:
    """The response's status, counted by the circuit-breaker actions its request passed."""
    for found, clock in getattr(traffic, "breakers", ()):
        found.record(status, clock())


def record_upstream(memo: Any, status: int) -> None:
    """A decided request's answer (edge/fast_path.py has its record), counted as the Python
    path counts the agent's answer: by the circuit-breaker actions its request passed, and by
    its endpoint's breaker when it went on to the agent. A memo of an answer the edge made
    (a policy's, a tripped breaker's) has neither."""
    record_status(memo, status)
    found = getattr(memo, "upstream_breaker", None)
    if found is not None:
        found.record(status)


def rewritten_body(body: bytes, rewrites: List[Any], compressor: Any) -> bytes:
    """A whole response body through response-body-find-replace's rules, then the
    compressor (compress-response), whichever order the policy named them in."""
    for rewrite in rewrites:
        body = rewrite(body)
    if compressor is not None:
        body = compressor.feed(body) + compressor.finish()
    return body


def with_length(head: http1.Response, length: int) -> http1.Response:
    """``head`` framed by a Content-Length of ``length`` (its own length or chunking
    dropped): the head of a body the edge rewrote whole."""
    headers = [
        (n, v)
        for n, v in head.headers
        if n.lower() not in (b"content-length", b"transfer-encoding")
    ]
    headers.append((b"content-length", str(length).encode()))
    return http1.Response(
        status_code=head.status_code, reason=head.reason, headers=headers, checked=True
    )


async def buffer_body(client: Any, reader: Any, limit: int, events: List[Any]) -> List[Any]:
    """Read the request body until it ends or passes ``limit`` bytes, for the policy; the
    events are forwarded upstream afterwards as they came."""
    size = sum(len(e.data) for e in events if isinstance(e, http1.Data))
    while size <= limit and not (events and isinstance(events[-1], http1.EndOfMessage)):
        event = await client_event(client, reader, BODY_TIMEOUT)
        if not isinstance(event, (http1.Data, http1.EndOfMessage)):
            raise Closed()
        events.append(event)
        if isinstance(event, http1.Data):
            size += len(event.data)
    return events
