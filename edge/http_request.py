"""The traffic policy's http-request calls, made by the edge for a paused phase.

The rules are the shared core's (chalicelib/core/policy/httpcall.py: bounds, destinations,
result variables); this module does the I/O. A call to ``https://<name>.internal`` goes to
the account's internal agent endpoint through its agent (a proxy stream, as a public request
would), or is answered by the account's internal cloud endpoint's policy (``_CloudLeg``);
any other URL only to an address ``EDGE_HTTP_REQUEST_ALLOW`` opens, connected to the
address that was checked. Every attempt, redirect and retry runs inside the action's
``timeout`` (1-30 s); a response head may be at most 64 KiB and a body at most 256 KiB
(hosted: "response size exceeded"); at most 4 attempts (1 + 3 retries).
"""

import asyncio
import concurrent.futures
import functools
import secrets
import socket
import ssl
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urljoin, urlsplit

from chalicelib.core import edge_errors
from chalicelib.core.policy import actions as tp_actions
from chalicelib.core.policy import httpcall
from edge import http1
from edge.http_io import READ_CHUNK

REDIRECTS = (301, 302, 303, 307, 308)
# jwt-validation's keys by URL (its NEED_KEYS outcome): fetched on threads of their own, at
# most this many at once (each up to 3 s), never on the event loop; one fetch per URL however
# many requests wait for it (fetch_keys)
JWKS_FETCHERS = 4
_JWKS_POOL = concurrent.futures.ThreadPoolExecutor(JWKS_FETCHERS, thread_name_prefix="jwks")
_fetching: Dict[str, "asyncio.Future[None]"] = {}


async def fetch_keys(urls: List[str]) -> None:
    """The JWKS documents at ``urls`` fetched (or their failure kept: the action's JWKS
    cache, chalicelib/core/policy/actions.py), each by one fetch however many runs wait for
    it; then the run that asked resumes."""
    loop = asyncio.get_running_loop()
    waits = []
    for url in dict.fromkeys(urls):
        fetching = _fetching.get(url)
        if fetching is None or fetching.get_loop() is not loop:
            fetching = loop.run_in_executor(_JWKS_POOL, tp_actions.JWKS.fetch, url, time.time())
            _fetching[url] = fetching
            fetching.add_done_callback(functools.partial(_forget, url))
        waits.append(asyncio.shield(fetching))  # a run cancelled does not cancel the fetch
    await asyncio.gather(*waits)


def _forget(url: str, done: "asyncio.Future[None]") -> None:
    if _fetching.get(url) is done:
        del _fetching[url]


USER_AGENT = "ngrok/cloud"  # hosted: "Identifies the request as from ngrok/cloud"


class _Failed(Exception):
    """An attempt that got no usable response: the message is the variable's."""


class _SocketLeg:
    """An outbound TCP (or TLS) connection framed as the proxy legs are."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = http1.Connection(
            http1.CLIENT, max_incomplete_event_size=httpcall.MAX_RESPONSE_HEAD
        )

    async def send_many(self, events: List[Any]) -> None:
        self.writer.write(b"".join(self.conn.send(e) or b"" for e in events))
        await self.writer.drain()

    async def next_event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not http1.NEED_DATA:
                return event
            self.conn.receive_data(await self.reader.read(READ_CHUNK))

    def close(self) -> None:
        self.writer.close()


async def perform(edge: Any, account_id: str, call: httpcall.Call) -> Tuple[Dict[str, Any], bool]:
    """Make ``call``: (its result variables, True when it failed)."""
    attempts: List[Dict[str, Any]] = []
    last: Optional[Dict[str, Any]] = None
    error: Optional[Tuple[str, str]] = None
    url = call.url
    try:
        async with asyncio.timeout(call.timeout):
            count = 0
            while True:
                count += 1
                res, message, url = await _attempt(edge, account_id, call)
                error = None if message is None else (edge_errors.POLICY_FAILED, message)
                if res is not None:
                    attempts.append(res)
                    last = res
                if error is None and res is not None and res["status_code"] < 400:
                    break
                state = {
                    "req": httpcall.request_record(call, url),
                    "res": res,
                    "error": message or "",
                }
                if not call.wants_retry(count, state):
                    break
    except TimeoutError:
        error = (edge_errors.POLICY_FAILED, f"timed out after {call.timeout:g}s")
    values = httpcall.result_vars(httpcall.request_record(call, url), last, attempts, error)
    if error is not None:
        call.errors.append(f"http-request {call.method} {url[:256]}: {error[1]}")
    return values, error is not None


async def _attempt(
    edge: Any, account_id: str, call: httpcall.Call
) -> Tuple[Optional[Dict[str, Any]], Optional[str], str]:
    """One attempt, following redirects: (the last response, the failure, the last URL)."""
    method, body, url = call.method, call.body, call.url
    followed = 0
    while True:
        try:
            res = await _fetch(edge, account_id, call, method, url, body)
        except _Failed as exc:
            return None, str(exc), url
        location = (res["header"].get("location") or [""])[0]
        if res["status_code"] not in REDIRECTS or not location or call.max_redirects == 0:
            return res, None, url
        if followed == call.max_redirects:
            return res, f"stopped after {followed} redirects (max_redirects)", url
        followed += 1
        url = urljoin(url, location)
        if res["status_code"] == 303 or (res["status_code"] in (301, 302) and method == "POST"):
            method, body = "GET", b""


def _request(call: httpcall.Call, method: str, url: str, body: bytes) -> http1.Request:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    given = {name.lower() for name, _ in call.headers}
    headers: List[Tuple[str, str]] = [("host", parts.netloc.rpartition("@")[2])]
    headers += [(n, v) for n, v in call.headers if n.lower() not in ("host", "content-length")]
    if "user-agent" not in given:
        headers.append(("user-agent", USER_AGENT))
    headers += [
        ("ngrok-req-type", "http-request"),
        ("ngrok-req-id", secrets.token_hex(16)),
        (httpcall.HOPS_HEADER, str(call.hops)),
        ("accept-encoding", "identity"),  # the body bound is on the bytes as they come
    ]
    if call.client_ip:
        headers.append(("x-forwarded-for", call.client_ip))
    if body or method in ("POST", "PUT", "PATCH"):
        headers.append(("content-length", str(len(body))))
    try:
        return http1.Request(method=method, target=target, headers=headers, checked=True)
    except http1.LocalProtocolError as exc:
        raise _Failed(f"the request is not valid HTTP/1.1 ({exc})") from None


async def _fetch(
    edge: Any, account_id: str, call: httpcall.Call, method: str, url: str, body: bytes
) -> Dict[str, Any]:
    """One request and its response (a record of httpcall.response_record); _Failed."""
    parts = urlsplit(url)
    try:
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        raise _Failed(f"'{url[:128]}' is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise _Failed(f"'{url[:128]}' is not an http:// or https:// URL")
    request = _request(call, method, url, body)
    started = time.monotonic()
    leg, ip = await (_internal_leg if host.endswith(".internal") else _external_leg)(
        edge, account_id, call, parts.scheme, host, port
    )
    try:
        events: List[Any] = [request]
        if body:
            events.append(http1.Data(data=body))
        events.append(http1.EndOfMessage())
        try:
            await _send(leg, events)
            status, headers, data = await _response(leg)
        except (http1.ProtocolError, ConnectionError, OSError, EOFError) as exc:
            raise _Failed(
                f"the upstream connection failed ({exc or type(exc).__name__})"
            ) from None
    finally:
        leg.close()
    ms = int((time.monotonic() - started) * 1000)
    return httpcall.response_record(status, headers, data, ip, ms)


async def _send(leg: Any, events: List[Any]) -> None:
    many = getattr(leg, "send_many", None)
    if many is not None:
        await many(events)
        return
    for event in events:
        await leg.send(event)


async def _response(leg: Any) -> Tuple[int, List[Tuple[str, str]], bytes]:
    head = None
    chunks: List[bytes] = []
    size = 0
    while True:
        event = await leg.next_event()
        if isinstance(event, http1.InformationalResponse):
            continue
        if isinstance(event, http1.Response):
            head = event
        elif isinstance(event, http1.Data):
            size += len(event.data)
            if size > httpcall.MAX_RESPONSE_BODY:
                raise _Failed(
                    f"response size exceeded (more than {httpcall.MAX_RESPONSE_BODY} bytes)"
                )
            chunks.append(bytes(event.data))
        elif isinstance(event, http1.EndOfMessage) and head is not None:
            headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in head.headers]
            return head.status_code, headers, b"".join(chunks)
        else:
            raise _Failed("the upstream closed the connection before a whole response")


async def _internal_leg(
    edge: Any, account_id: str, call: httpcall.Call, scheme: str, host: str, port: Optional[int]
) -> Tuple[Any, str]:
    from edge.h2leg import H2Leg
    from edge.public import _Leg
    from edge.session import StreamReset, StreamsExhausted

    target = await edge.router.internal_target(account_id, f"{scheme}://{host}")
    if target is None:
        raise _Failed(f"the internal endpoint {host} is offline")
    if target.error is not None:
        raise _Failed(target.error[2])
    tunnel = target.tunnel
    if tunnel is None:  # an internal cloud endpoint: its policy answers, in this process
        return _CloudLeg(target, call, scheme, host), ""
    try:
        stream = await tunnel.session.open_proxy(
            tunnel, f"{call.client_ip or '127.0.0.1'}:0", scheme
        )
    except (StreamReset, StreamsExhausted) as exc:
        raise _Failed(f"the internal endpoint {host} could not be reached ({exc})") from None
    leg = (
        H2Leg(tunnel, stream)
        if getattr(tunnel, "forwards_proto", "") == "http2"
        else _Leg(tunnel, stream)
    )
    return leg, str(getattr(tunnel.session, "peer_ip", "") or "")


class _CloudLeg:
    """A call to the account's internal cloud endpoint: its ``on_http_request`` runs on the
    call's request (its whole body at hand) and its answer (custom-response, redirect,
    deny, …) is the call's response, as a public request to it would be answered; a policy
    that lets the request through is answered 502 ERR_NGROK_6029 (non-terminating), as on
    the public path. What the phase cannot do for a call fails the attempt: a sign-in action
    (no browser), a forward-internal (not followed from a call), its own http-request actions
    (not made: a call never fans out into more calls), closing the connection. Its
    on_http_response does not run."""

    def __init__(self, target: Any, call: httpcall.Call, scheme: str, host: str) -> None:
        self.target, self.call, self.scheme, self.host = target, call, scheme, host
        self.head: Any = None
        self.body = b""
        self.answer: List[Any] = []

    async def send_many(self, events: List[Any]) -> None:
        from chalicelib.core import policy as tp
        from edge.http_io import error_response, outcome_response

        for event in events:
            if isinstance(event, http1.Request):
                self.head = event
            elif isinstance(event, http1.Data):
                self.body += bytes(event.data)
        policy = self.target.enforcement.policy if self.target.enforcement else None
        head = self.head
        if policy is None:
            out = tp.Outcome()
        else:
            headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in head.headers]
            req = tp.Request.from_target(
                head.method.decode("latin-1"),
                self.scheme,
                self.host,
                head.target.decode("latin-1"),
                headers,
                content_length=len(self.body),
            )
            conn = tp.Conn(
                client_ip=self.call.client_ip or "127.0.0.1",
                client_port=0,
                endpoint=tp.Endpoint(
                    id=self.target.endpoint_id,
                    url=self.target.url,
                    host=self.host,
                    protocol=self.scheme,
                    account_id=self.target.account_id,
                ),
            )
            state = policy.new_state()
            out = policy.on_http_request(conn, req, state)
            if out.kind == tp.NEED_BODY:  # the whole body is at hand
                req.body, req.body_complete = self.body, True
                out = policy.on_http_request(conn, req, state)
            if out.kind == tp.NEED_KEYS:  # jwt-validation's keys, fetched off the loop
                await fetch_keys(out.urls)
                out = policy.on_http_request(conn, req, state)
        if out.kind == tp.RESPOND:
            self.answer = [e for e in outcome_response(out, close=True) if e is not None]
        elif out.kind == tp.CONTINUE:
            self.answer = error_response(
                502,
                edge_errors.CLOUD_POLICY_FAILED,
                f"The traffic policy configured for cloud endpoint {self.target.endpoint_id} "
                "is non-terminating.",
                close=True,
            )
        else:
            what = {
                tp.CLOSE: "closed the connection",
                tp.FORWARD_INTERNAL: "asked for a forward-internal, which a call does not follow",
                tp.HTTP_REQUEST: "asked for an http-request, which a call does not make",
                tp.IDENTITY: "asked for a sign-in, which a call cannot make",
            }.get(out.kind, f"ended with {out.kind}")
            raise _Failed(f"the internal cloud endpoint {self.host}'s traffic policy {what}")

    async def next_event(self) -> Any:
        if not self.answer:
            raise EOFError("no answer")
        return self.answer.pop(0)

    def close(self) -> None:
        pass


async def _external_leg(
    edge: Any, account_id: str, call: httpcall.Call, scheme: str, host: str, port: Optional[int]
) -> Tuple[Any, str]:
    import ipaddress

    allow = getattr(edge.settings, "http_request_allow", ())
    if not allow:
        raise _Failed(httpcall.refused_destination(ipaddress.ip_address("0.0.0.0"), ()) or "")
    port = port or (443 if scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise _Failed(f"{host} does not resolve ({exc})") from None
    reason = f"{host} has no address"
    for family, _, _, _, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        refused = httpcall.refused_destination(address, allow)
        if refused is not None:
            reason = refused
            continue
        context = ssl.create_default_context() if scheme == "https" else None
        try:
            reader, writer = await asyncio.open_connection(
                str(address),
                port,
                family=family,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            reason = f"could not connect to {address}:{port} ({exc})"
            continue
        return _SocketLeg(reader, writer), str(address)
    raise _Failed(reason)
