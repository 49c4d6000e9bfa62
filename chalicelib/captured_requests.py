"""The traffic inspector: an endpoint's recent requests, its capture setting, and replay.

Routes (decided here: the hosted service shows its inspector in its dashboard and the
agent's local API, not in the API reference; these hang under the endpoint they inspect, so
the account scoping and the 404s are the endpoint's):

- ``GET /endpoints/{endpoint_id}/captured_requests`` (``limit`` 1–100, ``before_id``):
  newest first, ``{"captured_requests": […], "uri", "next_page_uri"}``;
- ``GET /endpoints/{endpoint_id}/captured_requests/{request_id}``: one;
- ``POST /endpoints/{endpoint_id}/captured_requests/{request_id}/replay``: sends the captured
  request again through the edge (to the endpoint's URL) and answers
  ``{"status_code", "duration_ms"}`` of what the edge answered; it is captured in turn,
  with ``Ngrok-Replay: <request id>``;
- ``GET`` / ``PUT /endpoints/{endpoint_id}/capture``: ``{"capture_bodies": bool}`` (default
  false): whether the edge keeps request and response bodies (their first 4096 bytes).

A captured request: id (``req_…``), uri, endpoint_id, endpoint_url, start, duration_ms,
method, target, host, proto, http_version, client_addr, status_code, request_headers,
response_headers (name → values; ``Authorization``, ``Cookie``, ``Set-Cookie``,
``Proxy-Authorization`` are ``[redacted]``), request_body_size, response_body_size,
bodies_captured, request_body / response_body (base64, or null when bodies were not
captured), request_body_truncated, response_body_truncated. Retention and bounds:
chalicelib/core/inspector.py (15 minutes; at most 120 per endpoint per minute and edge).

Who: any principal of the endpoint's account. Another account's endpoint is a 404, and its
captured requests are under another key, so never readable. An endpoint that went offline
still shows what it captured until the items expire; an id that is neither an endpoint of
the account nor holds captured requests is a 404.

Replay sends: the captured method, target and headers (redacted ones and hop-by-hop ones
left out: the replay has no credentials of the original caller) and the captured request
body (empty when bodies were not captured, or the truncated prefix), to the endpoint's URL
(an ``https`` one verified with the system's CAs and, when it exists, ``$DATA_DIR/ca.pem``:
the local CA `make run`'s edge serves). A ``*.localhost`` host is reached on the loopback
(RFC 6761). 10 s timeout; an edge that cannot be reached or does
not answer is a 502 ``ERR_REPLAY_FAILED``.
"""

import base64
import http.client
import os
import socket
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from chalicelib import endpoints, validation, web
from chalicelib.core import errors, ids, store
from chalicelib.core import inspector as layout
from chalicelib.validation import Field
from chalicelib.web import Ctx

PREFIX = ids.PREFIXES["captured_request"]
ENDPOINT_PREFIX = ids.PREFIXES["endpoint"]
LIST_KEY = "captured_requests"
SETTINGS_FIELDS = [Field("capture_bodies", "boolean", required=True)]
REPLAY_TIMEOUT = 10.0
SKIPPED_ON_REPLAY = {
    "authorization",
    "cookie",
    "proxy-authorization",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
}


def _path(endpoint_id: str) -> str:
    return f"/endpoints/{endpoint_id}/captured_requests"


def _no_endpoint(endpoint_id: str) -> errors.NotFound:
    return errors.NotFound(f"No endpoint with id '{endpoint_id[:64]}' exists")


def _endpoint(c: Ctx, endpoint_id: str) -> Optional[Dict[str, Any]]:
    """The endpoint as /endpoints shows it, or None (offline, another account's, unknown)."""
    if not ids.is_valid(endpoint_id, ENDPOINT_PREFIX):
        raise _no_endpoint(endpoint_id)
    try:
        return endpoints.get(c, endpoint_id)
    except errors.NotFound:
        return None


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = dict(item.data)
    data["uri"] = c.uri(f"{_path(data['endpoint_id'])}/{item.sk}")
    return data


def _live(items: List[store.Item]) -> List[store.Item]:
    now = time.time()
    return [i for i in items if i.expires_at is None or i.expires_at > now]


def list_page(c: Ctx, endpoint_id: str) -> Dict[str, Any]:
    limit, before_id = web.list_params(PREFIX)
    endpoint = _endpoint(c, endpoint_id)
    items, more = store.query_page(layout.pk(c.account_id, endpoint_id), limit + 1, before_id)
    items = [i for i in items if i.sk != layout.SETTINGS_SK]
    more = more or len(items) > limit
    items = items[:limit]
    if endpoint is None and not items and before_id is None:
        raise _no_endpoint(endpoint_id)
    live = _live(items)
    return web.page(
        c,
        _path(endpoint_id),
        LIST_KEY,
        [render(c, i) for i in live],
        more,
        limit,
        cursor=items[-1].sk if items else None,
    )


def _item(c: Ctx, endpoint_id: str, request_id: str) -> store.Item:
    missing = errors.NotFound(
        f"No captured request with id '{request_id[:64]}' exists for endpoint '{endpoint_id[:64]}'"
    )
    if not ids.is_valid(endpoint_id, ENDPOINT_PREFIX) or not ids.is_valid(request_id, PREFIX):
        raise missing
    item = store.get(layout.pk(c.account_id, endpoint_id), request_id)
    if item is None or not _live([item]):
        raise missing
    return item


def get(c: Ctx, endpoint_id: str, request_id: str) -> Dict[str, Any]:
    return render(c, _item(c, endpoint_id, request_id))


def get_settings(c: Ctx, endpoint_id: str) -> Dict[str, Any]:
    if _endpoint(c, endpoint_id) is None:
        raise _no_endpoint(endpoint_id)
    item = store.get(layout.pk(c.account_id, endpoint_id), layout.SETTINGS_SK)
    return {
        "capture_bodies": bool(item and item.data.get("capture_bodies")),
        "uri": c.uri(f"/endpoints/{endpoint_id}/capture"),
    }


def put_settings(c: Ctx, endpoint_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One PutItem of the setting (the endpoint must be one of the account's, live)."""
    if _endpoint(c, endpoint_id) is None:
        raise _no_endpoint(endpoint_id)
    item = store.new_item(
        layout.pk(c.account_id, endpoint_id),
        layout.SETTINGS_SK,
        kind="capture_setting",
        account_id=c.account_id,
        data={"capture_bodies": fields["capture_bodies"], "updated_at": validation.now_rfc3339()},
    )
    _put(item)
    return {
        "capture_bodies": fields["capture_bodies"],
        "uri": c.uri(f"/endpoints/{endpoint_id}/capture"),
    }


@store.retrying
def _put(item: store.Item) -> None:
    """Create or replace the setting (1 GetItem + 1 conditional write; the last write wins)."""
    old = store.get(item.pk, item.sk)
    if old is not None:
        old.data = item.data
        store.commit([store.save(old)])
    else:
        store.commit([store.put_new(item)])


class _Https(http.client.HTTPSConnection):
    """HTTPS to ``connect`` (an address) with the endpoint's name as SNI and verified name."""

    def __init__(self, connect: str, port: int, server_name: str, context: Any):
        super().__init__(connect, port, timeout=REPLAY_TIMEOUT, context=context)
        self._server_name = server_name

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_name)


def _tls_context() -> Any:
    """The system's CAs, plus the local CA of `make run`'s edge (``$DATA_DIR/ca.pem``, the
    data directory API and edge share there) when that file exists."""
    import ssl

    context = ssl.create_default_context()
    local = os.path.join(os.environ.get("DATA_DIR") or ".data", "ca.pem")
    if os.path.exists(local):
        context.load_verify_locations(local)
    return context


def _target_of(url: str) -> Tuple[str, str, int, bool]:
    parts = urlsplit(url)
    scheme = parts.scheme
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    connect = "127.0.0.1" if host == "localhost" or host.endswith(".localhost") else host
    return host, connect, port, scheme == "https"


def replay(c: Ctx, endpoint_id: str, request_id: str) -> Dict[str, Any]:
    item = _item(c, endpoint_id, request_id)
    data = item.data
    url = data.get("endpoint_url") or ""
    if not url.startswith(("http://", "https://")):
        raise errors.UnsupportedOperation("Only HTTP and HTTPS requests can be replayed")
    host, connect, port, tls = _target_of(url)
    body = base64.b64decode(data["request_body"]) if data.get("request_body") else b""
    headers: List[Tuple[str, str]] = []
    for name, values in (data.get("request_headers") or {}).items():
        if name in SKIPPED_ON_REPLAY or name == "host":
            continue
        headers += [(name, v) for v in values if v != "[redacted]"]
    started = time.perf_counter()
    try:
        if tls:
            conn: http.client.HTTPConnection = _Https(connect, port, host, _tls_context())
        else:
            conn = http.client.HTTPConnection(connect, port, timeout=REPLAY_TIMEOUT)
        try:
            conn.putrequest(
                data["method"], data["target"], skip_host=True, skip_accept_encoding=True
            )
            conn.putheader("Host", data.get("host") or host)
            for name, value in headers:
                conn.putheader(name, value)
            conn.putheader("Ngrok-Replay", request_id)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            response.read(1024 * 1024)
            status = response.status
        finally:
            conn.close()
    except (OSError, http.client.HTTPException) as exc:
        raise errors.ReplayFailed(
            f"The captured request could not be replayed through the edge at {url}: {exc}"
        ) from None
    return {"status_code": status, "duration_ms": round((time.perf_counter() - started) * 1000, 3)}
