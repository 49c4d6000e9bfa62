"""Synthetic traffic for the traffic policy engine's sans-IO interface."""

import json
from typing import Any, List, Optional, Tuple

from chalicelib.core import policy
from chalicelib.core.policy import Conn, Endpoint, Request, Response

ENDPOINT = Endpoint(
    id="ep_test", url="https://app.example.com", host="app.example.com", port=443, protocol="https"
)


def conn(ip: str = "203.0.113.7", port: int = 51515) -> Conn:
    return Conn(
        client_ip=ip, client_port=port, server_ip="127.0.0.1", server_port=8443, endpoint=ENDPOINT
    )


def request(
    target: str = "/",
    method: str = "GET",
    headers: Optional[List[Tuple[str, str]]] = None,
    host: str = "app.example.com",
    scheme: str = "https",
    **kw,
) -> Request:
    headers = list(headers or [])
    if not any(k.lower() == "host" for k, _ in headers):
        headers.insert(0, ("Host", host))
    return Request.from_target(method, scheme, host, target, headers, **kw)


def compile_doc(doc: Any) -> policy.Policy:
    return policy.compile_policy(doc if isinstance(doc, str) else json.dumps(doc))


def rule(*actions: dict, expressions: Optional[List[str]] = None, name: str = "") -> dict:
    out: dict = {"actions": list(actions)}
    if expressions:
        out["expressions"] = expressions
    if name:
        out["name"] = name
    return out


def on_request(doc: Any, req: Optional[Request] = None, c: Optional[Conn] = None, state=None):
    """Run on_http_request; NEED_BODY is answered with the request's own body, NEED_KEYS by
    fetching the keys (here, blocking)."""
    p = compile_doc(doc)
    req = req or request()
    state = state or p.new_state()
    c = c or conn()
    out = p.on_http_request(c, req, state)
    if out.kind == policy.NEED_BODY:
        if req.body is None:
            req.body = b""
        out = p.on_http_request(c, req, state)
    if out.kind == policy.NEED_KEYS:
        for url in out.urls:
            policy.JWKS.fetch(url, p.clock())
        out = p.on_http_request(c, req, state)
    return out, req


def evaluate(
    expression: str,
    req: Optional[Request] = None,
    c: Optional[Conn] = None,
    res: Optional[Response] = None,
    phase: str = "on_http_request",
):
    """The value of ``expression`` on the given traffic (through a custom-response body)."""
    doc = {
        phase: [
            rule(
                {"type": "set-vars", "config": {"vars": [{"v": f"${{{expression}}}"}]}},
                {
                    "type": "custom-response" if phase != "on_tcp_connect" else "log",
                    "config": {"body": "x"}
                    if phase != "on_tcp_connect"
                    else {"metadata": {"m": "x"}},
                },
            )
        ]
    }
    p = compile_doc(doc)
    state = p.new_state()
    c = c or conn()
    if phase == "on_tcp_connect":
        out = p.on_tcp_connect(c, state)
    elif phase == "on_http_request":
        out = p.on_http_request(c, req or request(), state)
    else:
        out = p.on_http_response(c, req or request(), res or Response(200, []), state)
    assert not out.errors, out.errors
    return state.vars[phase]["v"]
