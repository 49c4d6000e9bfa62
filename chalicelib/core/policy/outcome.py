"""What a phase tells the edge to do next."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

CONTINUE = "continue"  # go on: the request/response were changed in place
RESPOND = "respond"  # answer with status_code, headers, body; upstream not used
CLOSE = "close"  # close the connection without an answer
FORWARD_INTERNAL = "forward_internal"  # send the traffic to the internal endpoint ``url``
NEED_BODY = "need_body"  # read up to max_body_bytes of request body, call again
IDENTITY = "identity"  # a sign-in action (edge/identity.py): answer or resume
HTTP_REQUEST = "http_request"  # make ``call`` (httpcall.Call), set its variables, resume
TERMINATE_TLS = "terminate_tls"  # make the handshake ``terminate_tls`` asks, then resume
# fetch the JWKS documents at ``urls`` (actions.JWKS.fetch: blocking, so off the event loop),
# then call again: the action that asked resumes with them (or with their failure)
NEED_KEYS = "need_keys"


@dataclass
class Outcome:
    kind: str = CONTINUE
    status_code: int = 0
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    url: str = ""
    on_error: str = "halt"
    max_body_bytes: int = 0
    compressor: Optional[Any] = None
    # response-body-find-replace: functions of the whole response body, applied in order
    # (before the compressor) by the edge, which buffers the body for them
    rewrites: List[Any] = field(default_factory=list)
    # owasp-crs-response with process_body: functions of the first waf.BODY_LIMIT bytes of
    # the response body, each an Outcome that answers instead (403 / 500) or None
    body_checks: List[Any] = field(default_factory=list)
    # circuit-breaker: (breaker, clock) pairs the edge records the response's status in
    breakers: List[Any] = field(default_factory=list)
    logs: List[Dict[str, Any]] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    identity: Optional[Any] = None  # IDENTITY: (the action, its rendered fields)
    call: Optional[Any] = None  # HTTP_REQUEST: the httpcall.Call to make
    message: Optional[Any] = None  # on_event_stream_message: the sse.Message being run
    # terminate-tls: what the edge's handshake must be (the action's checked config)
    terminate_tls: Optional[Dict[str, Any]] = None
    urls: List[str] = field(default_factory=list)  # NEED_KEYS: the JWKS URLs to fetch
