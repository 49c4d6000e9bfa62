"""The traffic inspector's edge side: captured requests written to the store, off the
request path (the events worker hands each finished HTTP record to :meth:`Inspector.offer`).

Layout, retention and bounds: chalicelib/core/inspector.py. Writes are batched (one
BatchWriteItem of up to 25 items per flush, from a worker thread); a store that fails costs
the captured requests of that batch (counted in ``edge_inspector_dropped_total``), never a
request. Whether an endpoint captures bodies is its capture setting, read from the store and
cached 10 s per endpoint (at most 10000 endpoints); until the first read answers, bodies are
not captured.
"""

import asyncio
import base64
import collections
import logging
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from prometheus_client import Counter

from chalicelib.core import ids, store
from chalicelib.core import inspector as layout
from edge import events

log = logging.getLogger("edge.inspector")

CACHE_SECONDS = 10.0
CACHE_ENDPOINTS = 10_000
READ_BATCH = 100  # capture settings read in one BatchGetItem (its bound)
PENDING = 1000
WRITE_BATCH = 25

CAPTURED = Counter(
    "edge_inspector_captured", "Requests written to the traffic inspector", registry=None
)
DROPPED = Counter(
    "edge_inspector_dropped",
    "Requests the inspector did not keep, by reason",
    ["reason"],
    registry=None,
)
events.METRICS = events.METRICS + (CAPTURED, DROPPED)
_DROPPED: Dict[str, Any] = {}


def _dropped(reason: str) -> Any:
    """``DROPPED.labels(reason)``, looked up once (made on first use, as ``labels`` does)."""
    child = _DROPPED.get(reason)
    if child is None:
        child = _DROPPED[reason] = DROPPED.labels(reason)
    return child


def _body(data: bytes) -> Tuple[str, bool]:
    return base64.b64encode(data[: layout.BODY_BYTES]).decode("ascii"), len(
        data
    ) > layout.BODY_BYTES


def captured_item(record: events.Record, request_id: str) -> Dict[str, Any]:
    """The stored form of one captured request (what the API returns, less uri)."""
    data: Dict[str, Any] = {
        "id": request_id,
        "endpoint_id": record.endpoint_id,
        "endpoint_url": record.endpoint_url,
        "start": events.rfc3339(record.started),
        "duration_ms": round(record.duration * 1000, 3),
        "method": record.method,
        "target": record.target[: events.MAX_URL],
        "host": record.host,
        "proto": record.scheme,
        "http_version": record.version,
        "client_addr": f"{record.client_ip}:{record.client_port}",
        "status_code": record.status,
        "request_headers": events.headers_map(record.request_headers),
        "response_headers": events.headers_map(record.response_headers),
        "request_body_size": record.bytes_in,
        "response_body_size": record.bytes_out,
        "bodies_captured": record.capture,
        "request_body": None,
        "request_body_truncated": False,
        "response_body": None,
        "response_body_truncated": False,
    }
    if record.capture:
        data["request_body"], data["request_body_truncated"] = _body(record.request_body)
        # an upstream that answered before the client sent all of its body: what the edge
        # read of it is only its start
        data["request_body_truncated"] |= not record.request_ended
        data["response_body"], data["response_body_truncated"] = _body(record.response_body)
    return data


class Inspector:
    def __init__(self) -> None:
        self.pending: Deque[store.Item] = collections.deque()
        self.window: Dict[str, Tuple[int, int]] = {}  # endpoint -> (minute, count)
        self.capture: "collections.OrderedDict[Tuple[str, str], Tuple[bool, float]]" = (
            collections.OrderedDict()
        )
        self.asked: set = set()
        self._wanted: List[Tuple[str, str]] = []  # asked in this turn of the loop, not read yet
        self.writing = False
        self._lock = threading.Lock()

    # -- the request path (routed): a dict lookup; a miss schedules a read --
    def captures_bodies(self, account_id: str, endpoint_id: str) -> bool:
        """Whether the endpoint's captured requests keep their bodies, as last read (at most
        CACHE_SECONDS old); a stale or missing entry is read again, the settings asked in
        one turn of the event loop together (one BatchGetItem per READ_BATCH: the fast
        path's refresh asks for every route it holds at once)."""
        key = (account_id, endpoint_id)
        entry = self.capture.get(key)
        now = time.monotonic()
        if entry is None or now - entry[1] > CACHE_SECONDS:
            if key not in self.asked:
                self.asked.add(key)
                if not self._wanted:
                    asyncio.get_running_loop().call_soon(self._read_wanted)
                self._wanted.append(key)
            return bool(entry and entry[0])
        return entry[0]

    def _read_wanted(self) -> None:
        wanted, self._wanted = self._wanted, []
        loop = asyncio.get_running_loop()
        for first in range(0, len(wanted), READ_BATCH):
            loop.run_in_executor(None, self._read_settings, wanted[first : first + READ_BATCH])

    def _read_settings(self, keys: List[Tuple[str, str]]) -> None:
        wanted = {key: (layout.pk(*key), layout.SETTINGS_SK) for key in keys}
        try:
            found = store.get_many(list(wanted.values()))
            values = {
                key: bool(item is not None and item.data.get("capture_bodies"))
                for key, item in ((key, found.get(at)) for key, at in wanted.items())
            }
        except Exception as exc:
            log.info("reading the capture settings of %d endpoints: %s", len(keys), exc)
            values = {key: False for key in keys}
        with self._lock:
            at = time.monotonic()
            for key, value in values.items():
                self.capture[key] = (value, at)
                self.capture.move_to_end(key)
                self.asked.discard(key)
            while len(self.capture) > CACHE_ENDPOINTS:
                self.capture.popitem(last=False)

    # -- the worker --
    def offer(self, record: events.Record) -> None:
        if self.admits(record.account_id, record.endpoint_id):
            self.keep(record)

    def admits(self, account_id: str, endpoint_id: str, tally: Any = None) -> bool:
        """Whether a finished request of this endpoint is kept (its per-minute window and the
        pending bound; a refusal is counted, through the events worker's ``tally`` when it
        gives one). The worker asks this before it makes the request's Record, which only
        :meth:`keep` needs."""
        if not account_id or not endpoint_id:
            return False
        minute = int(time.time() // 60)
        seen_minute, count = self.window.get(endpoint_id, (minute, 0))
        if seen_minute != minute:
            count = 0
        if count >= layout.PER_MINUTE:
            if tally is None:
                _dropped("rate").inc()
            else:
                tally.inc(DROPPED, "rate")
            return False
        self.window[endpoint_id] = (minute, count + 1)
        if len(self.window) > CACHE_ENDPOINTS:
            self.window = {k: v for k, v in self.window.items() if v[0] == minute}
        if len(self.pending) >= PENDING:
            _dropped("pending_full").inc()
            return False
        return True

    def refusal(self, account_id: str, endpoint_id: str) -> Optional[str]:
        """Why :meth:`admits` would refuse a request of this endpoint now, counted as a drop
        ("rate": its window is full this minute; "pending_full"), None when it would admit
        it or would refuse it uncounted. Nothing changes."""
        if not account_id or not endpoint_id:
            return None
        minute = int(time.time() // 60)
        seen_minute, count = self.window.get(endpoint_id, (minute, 0))
        if seen_minute == minute and count >= layout.PER_MINUTE:
            return "rate"
        if len(self.pending) >= PENDING:
            return "pending_full"
        return None

    def refused_many(self, reason: str, count: int, tally: Any) -> None:
        """``count`` requests refused for ``reason`` without being asked one by one (a quiet
        route's: edge/fast_path.py), counted through the events worker's ``tally``."""
        tally.inc(DROPPED, reason, amount=count)

    def keep(self, record: events.Record) -> None:
        """A request :meth:`admits` let in, into the pending writes."""
        request_id = ids.new_id(ids.PREFIXES["captured_request"])
        item = store.new_item(
            layout.pk(record.account_id, record.endpoint_id),
            request_id,
            kind=layout.KIND,
            account_id=record.account_id,
            data=captured_item(record, request_id),
        )
        item.expires_at = int(time.time()) + layout.TTL_SECONDS
        self.pending.append(item)
        if not self.writing:
            self.writing = True
            asyncio.get_running_loop().run_in_executor(None, self._write)

    def _write(self) -> None:
        try:
            while self.pending:
                batch: List[store.Item] = []
                while self.pending and len(batch) < WRITE_BATCH:
                    batch.append(self.pending.popleft())
                try:
                    with store.model().batch_write() as writer:
                        for item in batch:
                            writer.save(item)
                    CAPTURED.inc(len(batch))
                except Exception as exc:
                    log.info("writing captured requests: %s", exc)
                    DROPPED.labels("store").inc(len(batch))
        finally:
            self.writing = False
