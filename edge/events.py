"""Traffic events and their delivery: what the edge tells an account about its traffic.

The request path only *records* (edge/observe.py taps the HTTP front and the TCP listener):
one ``Record`` appended to a bounded in-memory queue, no await, no store call, no network.
Everything else happens in one background task per edge process (:class:`Hub`), off the
request path:

1. **Metrics** (Prometheus, served by edge/metrics.py): requests by status class and
   endpoint kind, latency histogram, bytes, TCP connections, policy decisions, store call
   latency, event delivery outcomes.
2. **Events** in the hosted types and field names: ``http_request_complete.v0`` and
   ``tcp_connection_closed.v0`` (:func:`http_event`, :func:`tcp_event`), each with an
   ``ev_`` id (time-sortable, unique) and an RFC 3339 ``event_timestamp``.
3. **Subscriptions** of the record's account, read from the store (one Query of the
   account's subscriptions and one BatchGetItem of their destinations), cached for
   ``EDGE_EVENTS_CACHE_SECONDS`` (10 s) in an LRU of ``EDGE_EVENTS_CACHE_ACCOUNTS`` (1024)
   accounts; reads happen in a worker thread.
4. **Delivery** (:class:`Destination`): per destination, a bounded outbox
   (``EDGE_EVENTS_OUTBOX``, 2000 events), batches (≤ 500 events and ≤ 800 KiB, one call in
   flight per destination, the next as soon as it returns), built, encoded and sent with
   boto3 by the **delivery process** (one child process, spawned on first use; the edge
   hands it records and targets and gets back events and results, so JSON and boto3's
   signing never hold the edge's interpreter lock; ``EDGE_EVENTS_PROCESS=0`` keeps it all in
   the edge's own threads): Kinesis
   ``PutRecords`` (partition key: the event id), Firehose ``PutRecordBatch`` (one JSON line per
   record), CloudWatch Logs ``PutLogEvents`` (log stream ``<edge instance id>``, created on
   first use). Credentials: the destination's key pair, or AssumeRole (STS, with the edge's
   own credentials) cached until 5 minutes before expiry. Region: the ARN's.
   ``EVENTS_AWS_ENDPOINT_URL`` points every call at another AWS (moto's server, LocalStack).
   **At least once**: a record the service did not take (a failed call, or the entries a
   partial failure names) is sent again after a back-off (0.2 s doubling to 10 s, jittered),
   up to ``EDGE_EVENTS_ATTEMPTS`` (5) tries; then it is dropped and counted. A destination
   that keeps failing therefore costs dropped events (``edge_events_dropped_total``), never
   a request: nothing on the request path waits for it.

Bounds (each proven by tests/edge/test_events.py or tests/unit/test_events_unit.py):
- the record queue holds at most ``EDGE_EVENTS_QUEUE`` (10000) records; a record that finds
  it full is dropped (``edge_events_dropped_total{reason="queue_full"}``);
- each destination's outbox holds at most ``EDGE_EVENTS_OUTBOX`` (2000) events (then
  ``reason="outbox_full"``); a delivery process that dies costs the events it held
  (``reason="encoding"`` or a failed call, retried) and is spawned again;
- one event is at most 64 request and 64 response headers, each value cut at 1024 bytes,
  the URL cut at 4096 bytes; ``Authorization``, ``Cookie``, ``Set-Cookie`` (and
  ``Proxy-Authorization``) values are replaced by ``[redacted]``.
"""

import asyncio
import collections
import functools
import json
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Deque, Dict, List, Optional, Tuple

from prometheus_client import Counter, Histogram

from chalicelib.core import event_filters, event_targets, ids, store
from edge import tally as tally_

log = logging.getLogger("edge.events")

REDACTED = "[redacted]"
SECRET_HEADERS = frozenset(("authorization", "cookie", "set-cookie", "proxy-authorization"))
MAX_HEADERS = 64
MAX_HEADER_VALUE = 1024
MAX_URL = 4096
BATCH = 500  # events per call: PutRecords' and PutRecordBatch's most
BATCH_BYTES = 800 * 1024  # and bytes (PutLogEvents takes at most 1 MiB)
SEND_THREADS = 4


@dataclass(frozen=True)
class Settings:
    queue: int = 10_000
    outbox: int = 2_000
    flush_seconds: float = 0.25
    attempts: int = 5
    backoff_base: float = 0.2
    backoff_cap: float = 10.0
    cache_seconds: float = 10.0
    cache_accounts: int = 1024
    aws_endpoint_url: Optional[str] = None
    send_timeout: float = 5.0
    process: bool = False  # deliver from a child process (load_settings: on by default)
    api_events: bool = True  # read the API's events from the store's outbox (audit_outbox)


def _number(env: Any, name: str, default: float, integer: bool = True) -> Any:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: not a number") from None
    if value <= 0:
        raise SystemExit(f"{name}={raw!r}: must be above 0")
    return value


def load_settings(env: Any = None) -> Settings:
    """The delivery settings (docs/EVENTS.md lists them)."""
    env = os.environ if env is None else env
    return Settings(
        queue=_number(env, "EDGE_EVENTS_QUEUE", 10_000),
        outbox=_number(env, "EDGE_EVENTS_OUTBOX", 2_000),
        flush_seconds=_number(env, "EDGE_EVENTS_FLUSH_SECONDS", 0.25, integer=False),
        attempts=_number(env, "EDGE_EVENTS_ATTEMPTS", 5),
        backoff_base=_number(env, "EDGE_EVENTS_BACKOFF_SECONDS", 0.2, integer=False),
        cache_seconds=_number(env, "EDGE_EVENTS_CACHE_SECONDS", 10.0, integer=False),
        cache_accounts=_number(env, "EDGE_EVENTS_CACHE_ACCOUNTS", 1024),
        aws_endpoint_url=(env.get("EVENTS_AWS_ENDPOINT_URL") or "").strip() or None,
        process=(env.get("EDGE_EVENTS_PROCESS") or "1").strip() != "0",
        api_events=(env.get("EDGE_EVENTS_API") or "1").strip() != "0",
    )


# ---- metrics (no registry of their own: edge/metrics.py and the API server collect them) ---
REQUESTS = Counter(
    "edge_http_requests",
    "HTTP requests answered, by status class and endpoint kind",
    ["status_class", "endpoint_kind"],
    registry=None,
)
LATENCY = tally_.SummedHistogram(
    "edge_http_request_duration_seconds",
    "From the request head to the response's end, by endpoint kind",
    ["endpoint_kind"],
    registry=None,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
HTTP_BYTES = Counter(
    "edge_http_bytes", "HTTP message bytes (bodies) through the edge", ["direction"], registry=None
)
TCP_CLOSED = Counter(
    "edge_tcp_connections_closed", "TCP endpoint connections closed", registry=None
)
TCP_BYTES = Counter("edge_tcp_bytes", "TCP endpoint bytes", ["direction"], registry=None)
DECISIONS = Counter(
    "edge_policy_decisions",
    "Traffic policy action results, by action and decision",
    ["action", "decision"],
    registry=None,
)
EVENTS_SENT = Counter(
    "edge_events_sent", "Events a destination accepted, by target kind", ["target"], registry=None
)
EVENTS_RETRIED = Counter(
    "edge_events_retried", "Events sent again after a failure", ["target"], registry=None
)
EVENTS_DROPPED = Counter(
    "edge_events_dropped", "Records or events given up, by reason", ["reason"], registry=None
)
STORE_LATENCY = Histogram(
    "store_call_duration_seconds",
    "DynamoDB calls of this process, by operation",
    ["operation"],
    registry=None,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
METRICS: Tuple[Any, ...] = (
    REQUESTS,
    LATENCY,
    HTTP_BYTES,
    TCP_CLOSED,
    TCP_BYTES,
    DECISIONS,
    EVENTS_SENT,
    EVENTS_RETRIED,
    EVENTS_DROPPED,
    STORE_LATENCY,
)


class Collector:
    """A prometheus_client collector of this module's metrics (for any registry)."""

    def __init__(self, owner: Any = None) -> None:
        self.owner = owner  # the edge (its hub is made on first traffic), or None

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        for metric in METRICS:
            yield from metric.collect()
        if self.owner is None:
            return
        hub = getattr(self.owner, "_events_hub", None)
        yield GaugeMetricFamily(
            "edge_events_queued",
            "Records waiting for the worker",
            value=len(hub.queue) if hub else 0,
        )
        yield GaugeMetricFamily(
            "edge_events_outbox",
            "Events waiting for delivery",
            value=sum(len(d.outbox) for d in list(hub.destinations.values())) if hub else 0,
        )


_timed = threading.Lock()


def time_store_calls() -> None:
    """Observe every DynamoDB call of this process in ``store_call_duration_seconds``: at the
    botocore client, so the calls made through PynamoDB and those made on its client directly
    (chalicelib.core.online, .leases, .instances) alike. Idempotent."""
    from botocore.client import BaseClient

    with _timed:
        if getattr(BaseClient._make_api_call, "_timed", False):
            return
        original = BaseClient._make_api_call

        def timed(self: Any, operation_name: str, *args: Any, **kwargs: Any) -> Any:
            if self.meta.service_model.service_name != "dynamodb":
                return original(self, operation_name, *args, **kwargs)
            started = time.perf_counter()
            try:
                return original(self, operation_name, *args, **kwargs)
            finally:
                STORE_LATENCY.labels(operation_name).observe(time.perf_counter() - started)

        timed._timed = True  # type: ignore[attr-defined]
        BaseClient._make_api_call = timed


# ---- what the request path records -------------------------------------------------------
@dataclass
class Record:
    """One finished HTTP request or TCP connection, as the request path saw it."""

    kind: str  # "http" or "tcp"
    account_id: str
    endpoint_id: str
    endpoint_url: str
    endpoint_host: str
    endpoint_kind: str  # agent, cloud, edge
    scheme: str
    client_ip: str
    client_port: int
    server_ip: str
    server_port: int
    started: float  # time.time() at the request head / connection
    ended: float
    duration: float  # perf_counter difference, seconds
    bytes_in: int = 0
    bytes_out: int = 0
    method: str = ""
    target: str = ""
    host: str = ""
    version: str = ""
    request_headers: List[Tuple[bytes, bytes]] = field(default_factory=list)
    status: int = 0
    response_headers: List[Tuple[bytes, bytes]] = field(default_factory=list)
    action_vars: Optional[Dict[str, Dict[str, Any]]] = None
    request_body: bytes = b""
    response_body: bytes = b""
    capture: bool = False
    # the request's end was read before its record was made: False when the upstream
    # answered before the client had sent all of its body (the edge then closes the
    # connection, and what was captured of the body is only its start)
    request_ended: bool = True


def http_record(raw: Tuple[Any, ...]) -> Record:
    """The Record of what edge/observe.py's tap appended for one HTTP request: (peer, the
    listener's address, scheme, hop, endpoint kind, policy state, start wall time, start perf time, end perf time,
    end wall time, bytes in, bytes out, request, response, kept bodies or None[, whether the
    request's end was read: the core's rows leave it out, the core serves whole requests])."""
    (
        peer,
        sock,
        scheme,
        hop,
        kind,
        state,
        wall,
        started,
        ended_perf,
        ended,
        bytes_in,
        bytes_out,
        request,
        response,
        bodies,
        *rest,
    ) = raw
    host = ""
    for name, value in request.headers:
        if name == b"host":
            host = value.decode("latin-1").lower()
            break
    return Record(
        kind="http",
        account_id=hop.account_id if hop else "",
        endpoint_id=hop.endpoint_id if hop else "",
        endpoint_url=hop.url if hop else "",
        endpoint_host=hop.host if hop else "",
        endpoint_kind=kind,
        scheme=scheme,
        client_ip=str(peer[0]),
        client_port=int(peer[1] or 0),
        server_ip=str(sock[0]),
        server_port=int(sock[1] or 0),
        started=wall,
        ended=ended,
        duration=ended_perf - started,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        method=request.method.decode("ascii", "replace"),
        target=request.target.decode("latin-1"),
        host=host,
        version=request.http_version.decode("ascii", "replace"),
        request_headers=list(request.headers),
        status=response.status_code,
        response_headers=list(response.headers),
        action_vars=getattr(state, "action_vars", None),
        capture=bodies is not None,
        request_body=b"".join(bodies[0]) if bodies else b"",
        response_body=b"".join(bodies[1]) if bodies else b"",
        request_ended=rest[0] if rest else True,
    )


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def headers_map(pairs: List[Tuple[bytes, bytes]]) -> Dict[str, List[str]]:
    """Header name (lower-cased) → values, secrets redacted, bounded."""
    out: Dict[str, List[str]] = {}
    for name, value in pairs[:MAX_HEADERS]:
        key = name.decode("latin-1").lower()
        text = REDACTED if key in SECRET_HEADERS else value[:MAX_HEADER_VALUE].decode("latin-1")
        out.setdefault(key, []).append(text)
    return out


def _policy(record: Record) -> Dict[str, Any]:
    logs: List[Dict[str, Any]] = []
    for phase_vars in (record.action_vars or {}).values():
        metadata = phase_vars.get("actions.ngrok.log.metadata")
        if metadata is not None:
            logs.append({"metadata": metadata})
    return {
        "logs": logs,
        "decisions": [{"action": a, "decision": d} for a, d in decisions(record)],
    }


def decisions(record: Record) -> List[Tuple[str, str]]:
    """(action, decision) for each deciding action the policy ran (restrict-ips, rate-limit,
    verify-webhook, jwt-validation)."""
    return decisions_of(record.action_vars)


def decisions_of(action_vars: Optional[Dict[str, Dict[str, Any]]]) -> List[Tuple[str, str]]:
    """:func:`decisions` of a policy run's action results (a Record's ``action_vars``)."""
    found: List[Tuple[str, str]] = []
    for phase_vars in (action_vars or {}).values():
        if "actions.ngrok.restrict_ips.action" in phase_vars:
            found.append(("restrict_ips", str(phase_vars["actions.ngrok.restrict_ips.action"])))
        if "actions.ngrok.rate_limit.limited" in phase_vars:
            found.append(
                (
                    "rate_limit",
                    "deny" if phase_vars["actions.ngrok.rate_limit.limited"] else "allow",
                )
            )
        if "actions.ngrok.verify_webhook.verified" in phase_vars:
            found.append(
                (
                    "verify_webhook",
                    "allow" if phase_vars["actions.ngrok.verify_webhook.verified"] else "deny",
                )
            )
        if "actions.ngrok.jwt_validation.error.code" in phase_vars:
            found.append(
                (
                    "jwt_validation",
                    "deny" if phase_vars["actions.ngrok.jwt_validation.error.code"] else "allow",
                )
            )
    return found


def _conn(record: Record) -> Dict[str, Any]:
    return {
        "client_ip": record.client_ip,
        "client_port": record.client_port,
        "server_ip": record.server_ip,
        "server_port": record.server_port,
        "server_name": record.host or record.endpoint_host,
        "start_ts": rfc3339(record.started),
        "end_ts": rfc3339(record.ended),
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
    }


def _endpoint(record: Record) -> Dict[str, Any]:
    return {
        "id": record.endpoint_id,
        "url": record.endpoint_url,
        "host": record.endpoint_host,
        "proto": record.scheme,
        "kind": record.endpoint_kind,
    }


def _envelope(kind: str, record: Record, obj: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "event_id": ids.new_id(ids.PREFIXES["event"]),
        "event_type": kind,
        "event_timestamp": rfc3339(record.ended),
        "account_id": record.account_id,
        "object": obj,
    }


def http_event(record: Record) -> Dict[str, Any]:
    """``http_request_complete.v0`` of a record (docs/EVENTS.md lists every field)."""
    path, _, query = record.target.partition("?")
    raw = f"{record.scheme}://{record.host}{record.target}"[:MAX_URL]
    request = {
        "method": record.method,
        "version": record.version,
        "url": {
            "raw": raw,
            "scheme": record.scheme,
            "host": record.host,
            "path": path[:MAX_URL],
            "query": query[:MAX_URL],
        },
        "headers": headers_map(record.request_headers),
        "user_agent": next(
            (
                v.decode("latin-1")[:MAX_HEADER_VALUE]
                for n, v in record.request_headers
                if n.lower() == b"user-agent"
            ),
            "",
        ),
        "body_size": record.bytes_in,
    }
    response = {
        "status_code": record.status,
        "headers": headers_map(record.response_headers),
        "body_size": record.bytes_out,
    }
    return _envelope(
        event_targets.HTTP_REQUEST_COMPLETE,
        record,
        {
            "conn": _conn(record),
            "endpoint": _endpoint(record),
            "http": {
                "request": request,
                "response": response,
                "duration_ms": round(record.duration * 1000, 3),
            },
            "traffic_policy": _policy(record),
        },
    )


def tcp_event(record: Record) -> Dict[str, Any]:
    """``tcp_connection_closed.v0`` of a record."""
    return _envelope(
        event_targets.TCP_CONNECTION_CLOSED,
        record,
        {
            "conn": {**_conn(record), "duration_ms": round(record.duration * 1000, 3)},
            "endpoint": _endpoint(record),
            "traffic_policy": _policy(record),
        },
    )


_CHILDREN: Dict[Tuple[int, Tuple[str, ...]], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, looked up once: prometheus_client checks and locks on every
    ``labels`` call, five of them per request (a few µs of the edge's CPU per request). The
    label values come from small fixed sets (status classes, endpoint kinds, directions,
    actions and decisions), so the table stays small."""
    key = (id(metric), labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*labels)
    return child


def observe_metrics(record: Record) -> None:
    """One record into the metrics (the worker sums HTTP requests' in a Tally instead)."""
    if record.kind == "http":
        _child(REQUESTS, tally_.status_class(record.status), record.endpoint_kind).inc()
        _child(LATENCY, record.endpoint_kind).observe(record.duration)
        _child(HTTP_BYTES, "in").inc(record.bytes_in)
        _child(HTTP_BYTES, "out").inc(record.bytes_out)
    else:
        TCP_CLOSED.inc()
        _child(TCP_BYTES, "in").inc(record.bytes_in)
        _child(TCP_BYTES, "out").inc(record.bytes_out)
    for action, decision in decisions(record):
        _child(DECISIONS, action, decision).inc()


# ---- delivery --------------------------------------------------------------------------------
class Destination:
    """One event destination of this process: its outbox, client and back-off."""

    def __init__(
        self, key: Tuple[str, str], target: Dict[str, Any], settings: Settings, instance_id: str
    ):
        self.key = key
        self.target = target
        self.kind = event_targets.kind_of(target)
        self.settings = settings
        self.instance_id = instance_id
        self.outbox: Deque[Tuple[int, Encoded]] = collections.deque()
        self.sending = False
        self.failures = 0
        self.next_try = 0.0
        self._client: Any = None
        self._client_expires = 0.0
        self._stream_ready = False

    def offer(self, event: "Encoded", attempts: int = 0) -> None:
        if len(self.outbox) >= self.settings.outbox:
            EVENTS_DROPPED.labels("outbox_full").inc()
            return
        self.outbox.append((attempts, event))

    def due(self, now: float) -> bool:
        return bool(self.outbox) and not self.sending and now >= self.next_try

    def send(self, batch: List["Encoded"]) -> List[int]:
        """Send ``batch`` from this process (a sender thread): see :func:`deliver`."""
        return deliver(
            self.key,
            self.target,
            self.settings.aws_endpoint_url,
            self.settings.send_timeout,
            self.instance_id,
            batch,
        )


# ---- the AWS calls: in a sender thread, or in the delivery process -------------------------
_SENDERS: Dict[Tuple[str, str], "_Sender"] = {}
_SENDERS_LOCK = threading.Lock()


class _Sender:
    """A destination's boto3 client (refreshed before assumed credentials expire) and calls."""

    def __init__(
        self, target: Dict[str, Any], endpoint_url: Optional[str], timeout: float, instance_id: str
    ):
        self.target, self.endpoint_url, self.timeout = target, endpoint_url, timeout
        self.instance_id = instance_id
        self.kind = event_targets.kind_of(target)
        self._client: Any = None
        self._client_expires = 0.0
        self._stream_ready = False
        self.lock = threading.Lock()

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        if self._client is not None and time.time() < self._client_expires:
            return self._client
        body = self.target[self.kind]
        region, _, _ = event_targets.parse_arn(self.kind, body[event_targets.ARN_FIELD[self.kind]])
        config = Config(connect_timeout=2, read_timeout=self.timeout, retries={"max_attempts": 1})
        auth = body["auth"]
        expires = time.time() + 3600
        if "creds" in auth:
            creds = {
                "aws_access_key_id": auth["creds"]["aws_access_key_id"],
                "aws_secret_access_key": auth["creds"]["aws_secret_access_key"],
            }
        else:
            sts = boto3.client(
                "sts", region_name=region, config=config, endpoint_url=self.endpoint_url
            )
            answer = sts.assume_role(
                RoleArn=auth["role"]["role_arn"],
                RoleSessionName=f"tunnel-events-{self.instance_id}"[:64],
            )
            got = answer["Credentials"]
            creds = {
                "aws_access_key_id": got["AccessKeyId"],
                "aws_secret_access_key": got["SecretAccessKey"],
                "aws_session_token": got["SessionToken"],
            }
            expires = got["Expiration"].timestamp() - 300
        service = {"kinesis": "kinesis", "firehose": "firehose", "cloudwatch_logs": "logs"}
        self._client = boto3.client(
            service[self.kind],
            region_name=region,
            config=config,
            endpoint_url=self.endpoint_url,
            **creds,
        )
        self._client_expires = expires
        return self._client

    def send(self, batch: List["Encoded"]) -> List[int]:
        client = self.client()
        body = self.target[self.kind]
        arn = body[event_targets.ARN_FIELD[self.kind]]
        _, _, name = event_targets.parse_arn(self.kind, arn)
        if self.kind == "kinesis":
            answer = client.put_records(
                StreamARN=arn,
                Records=[{"Data": e.line, "PartitionKey": e.event_id} for e in batch],
            )
            return (
                [i for i, r in enumerate(answer.get("Records", [])) if r.get("ErrorCode")]
                if answer.get("FailedRecordCount")
                else []
            )
        if self.kind == "firehose":
            answer = client.put_record_batch(
                DeliveryStreamName=name, Records=[{"Data": e.line + b"\n"} for e in batch]
            )
            return (
                [i for i, r in enumerate(answer.get("RequestResponses", [])) if r.get("ErrorCode")]
                if answer.get("FailedPutCount")
                else []
            )
        stream = self.instance_id
        if not self._stream_ready:
            try:
                client.create_log_stream(logGroupName=name, logStreamName=stream)
            except client.exceptions.ResourceAlreadyExistsException:
                pass
            self._stream_ready = True
        client.put_log_events(
            logGroupName=name,
            logStreamName=stream,
            logEvents=[
                {"timestamp": e.ts_ms, "message": e.line.decode("utf-8")}
                for e in sorted(batch, key=lambda e: e.ts_ms)
            ],
        )
        return []


def _child_start() -> None:
    """The delivery process ignores SIGINT: a Ctrl-C of `make run` reaches the whole process
    group, and the edge, not its child, decides when delivery ends."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


Selection = Optional[Tuple[str, Tuple[str, ...]]]  # a source's (filter, fields); None: all
Route = Tuple[str, Tuple[str, str], Selection]  # (subscription id, destination key, selection)


def encode_many(
    records: List["Record"], selections: Optional[List[List[Selection]]] = None
) -> List[Any]:
    """The events of ``records``, encoded (in the delivery process, or inline). With
    ``selections`` (per record, its sources' distinct selections), per record the list of
    what each selection delivers: the filtered, trimmed event, or None (filtered out)."""
    events = [http_event(r) if r.kind == "http" else tcp_event(r) for r in records]
    if selections is None:
        return [Encoded.of(e, r.ended) for e, r in zip(events, records)]
    return [select_encode(e, r.ended, sel) for e, r, sel in zip(events, records, selections)]


def select_encode(
    event: Dict[str, Any], ended: float, selections: List[Selection]
) -> List[Optional["Encoded"]]:
    """What each selection delivers of one event (chalicelib.core.event_filters): the event
    (encoded once per distinct fields) or None when the filter refuses it."""
    whole: Optional[Encoded] = None
    out: List[Optional[Encoded]] = []
    for selection in selections:
        if selection is None:
            whole = whole or Encoded.of(event, ended)
            out.append(whole)
            continue
        text, fields = selection
        if not event_filters.matches(event["event_type"], text, event):
            out.append(None)
            continue
        if not fields:
            whole = whole or Encoded.of(event, ended)
            out.append(whole)
        else:
            out.append(Encoded.of(event_filters.project(event, fields), ended))
    return out


def encode_events(
    events: List[Tuple[Dict[str, Any], float]], selections: List[List[Selection]]
) -> List[List[Optional["Encoded"]]]:
    """Events already built (the API's, from the outbox): :func:`select_encode` of each."""
    return [select_encode(e, ended, sel) for (e, ended), sel in zip(events, selections)]


def deliver(
    key: Tuple[str, str],
    target: Dict[str, Any],
    endpoint_url: Optional[str],
    timeout: float,
    instance_id: str,
    batch: List["Encoded"],
) -> List[int]:
    """Send ``batch`` to one destination; the indexes of the events the service did not take
    (raises when the call failed as a whole). Runs in a sender thread of the edge, or in the
    delivery process (``EDGE_EVENTS_PROCESS``): clients are cached per destination there."""
    with _SENDERS_LOCK:
        sender = _SENDERS.get(key)
        if sender is None or sender.target != target or sender.endpoint_url != endpoint_url:
            sender = _SENDERS[key] = _Sender(target, endpoint_url, timeout, instance_id)
            if len(_SENDERS) > 4096:  # destinations gone from the hub's cache
                _SENDERS.pop(next(iter(_SENDERS)))
    with sender.lock:
        return sender.send(batch)


@dataclass(frozen=True)
class Encoded:
    """One event as delivered: its JSON line (made once, whatever the destinations), id and
    time (the Kinesis partition key, the CloudWatch Logs timestamp)."""

    line: bytes
    event_id: str
    ts_ms: int

    @classmethod
    def of(cls, event: Dict[str, Any], ended: float) -> "Encoded":
        return cls(
            json.dumps(event, separators=(",", ":")).encode("utf-8"),
            event["event_id"],
            int(ended * 1000),
        )


_MISSING = object()  # Hub.cached: the store must be read


class Counted:
    """An HTTP request's raw tuple whose metrics and inspector window were already counted
    (:meth:`Hub.count_http`): the worker makes its Record for the inspector (``admitted``)
    and its account's subscriptions only."""

    __slots__ = ("raw", "admitted")

    def __init__(self, raw: Tuple[Any, ...], admitted: bool):
        self.raw, self.admitted = raw, admitted


def _made(raw: Tuple[Any, ...]) -> Optional[Record]:
    """:func:`http_record`, or None (logged and counted) for a request the worker cannot
    read: one odd request never costs the others."""
    try:
        return http_record(raw)
    except Exception:
        log.exception("an HTTP record")
        EVENTS_DROPPED.labels("record").inc()
        return None


@dataclass
class _Account:
    fetched: float
    routes: Dict[str, List[Route]]  # event type -> (subscription, destination key, selection)


class Hub:
    """The edge process's records queue, subscription cache and delivery."""

    def __init__(
        self, instance_id: str, settings: Optional[Settings] = None, inspector: Any = None
    ):
        self.settings = settings or load_settings()
        self.instance_id = instance_id
        self.queue: Deque[Record] = collections.deque()
        self.accounts: "collections.OrderedDict[str, _Account]" = collections.OrderedDict()
        self.destinations: Dict[Tuple[str, str], Destination] = {}
        self.fetching: Dict[str, asyncio.Future] = {}
        self.inspector = inspector
        self.pool = ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="events")
        self.process_pool: Any = None
        self.task: Optional[asyncio.Task] = None
        self.tally = tally_.Tally(REQUESTS, LATENCY, HTTP_BYTES, DECISIONS)

    # -- the request path: no await, no I/O --
    def record(self, record: Any) -> None:
        """A finished connection's :class:`Record` (or an HTTP request's raw tuple, see
        :func:`http_record`) into the bounded queue."""
        if len(self.queue) >= self.settings.queue:
            EVENTS_DROPPED.labels("queue_full").inc()
            return
        self.queue.append(record)
        if self.task is None:
            self.task = asyncio.ensure_future(self.run())

    record_http = record

    def count_http(
        self,
        hop: Any,
        kind: str,
        status: int,
        duration: float,
        bytes_in: int,
        bytes_out: int,
        now: float,
    ) -> Optional[bool]:
        """One HTTP request counted at once, without its raw tuple (the core's requests,
        edge/fast_path.py): its metrics into the tally and the inspector's window, as the
        worker's :meth:`_http` counts them. Returns None when nothing more is wanted of it,
        else whether the inspector admitted it: then the caller queues ``Counted(raw,
        admitted)`` for the worker to make its Record (the inspector's, or its account's
        subscriptions', whose cached lookup is read here without a wait). The caller calls
        :meth:`flush_counts` once its batch is counted: the tally is written into the metrics
        by the worker's next drain, as a queued record's counts would be (one write per
        worker turn, not per batch: at one connection a batch is one request)."""
        self.tally.http(status, kind, duration, bytes_in, bytes_out)
        account_id = hop.account_id
        inspector = self.inspector
        admitted = inspector is not None and inspector.admits(
            account_id, hop.endpoint_id, self.tally
        )
        if admitted:
            return True
        account = self.cached(account_id, now)
        if account is _MISSING:
            self._fetch_soon(account_id, now)
            return False
        if account is not None and account.routes.get(event_targets.HTTP_REQUEST_COMPLETE):
            return False
        return None

    def _fetch_soon(self, account_id: str, now: float) -> None:
        """The account's subscriptions read now, once however many requests find them
        unread or stale. The worker would read them only when it reaches a queued record of
        the account: behind a backlog, seconds in which each of the account's requests is
        wanted (a record made, its route never quiet: the core's requests counted by Python
        one by one)."""
        if account_id in self.fetching:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # counted outside a loop: the worker reads them
            return
        task = loop.create_task(self.subscriptions(account_id, now))
        self.fetching[account_id] = task
        task.add_done_callback(lambda done: self._fetched(account_id, done))

    def _fetched(self, account_id: str, done: "asyncio.Future[Any]") -> None:
        self.fetching.pop(account_id, None)
        if not done.cancelled():
            done.exception()  # read (a failure is logged by subscriptions itself)

    def count_decisions(self, state: Any, times: int = 1) -> None:
        """A policy run's decisions (``state.action_vars``), counted when it ran: a decided
        route's request (edge/decided.py), whose record, if one is made, comes later or not at
        all (a quiet route's); ``times`` for the requests a held decision served (the core
        applied the run's decision to each). The caller calls :meth:`flush_counts` after its
        batch."""
        action_vars = state.action_vars
        if action_vars:
            self.tally.decided(decisions_of(action_vars), times)

    def count_quiet(
        self,
        kind: str,
        statuses: List[Tuple[int, int]],
        durations: List[float],
        bytes_in: int,
        bytes_out: int,
        refused: Optional[str],
    ) -> None:
        """A quiet route's requests, counted by the core and taken in one batch
        (edge/fast_path.py): their metrics into the tally as :meth:`count_http` counts each,
        and, when the inspector refused the route's requests for ``refused``, each counted as
        that drop. The caller calls :meth:`flush_counts` after."""
        self.tally.http_many(kind, statuses, durations, bytes_in, bytes_out)
        if refused is not None and self.inspector is not None:
            self.inspector.refused_many(refused, len(durations), self.tally)

    def flush_counts(self) -> None:
        """The worker runs (its drain writes the tally), if it was not running."""
        if self.task is None:
            self.task = asyncio.ensure_future(self.run())

    # -- the worker --
    async def run(self) -> None:
        while True:
            try:
                await self.drain()
                await self.deliver()
            except asyncio.CancelledError:
                raise
            except Exception:  # the worker never dies: log and go on
                log.exception("event worker")
            await asyncio.sleep(self.settings.flush_seconds)

    async def drain(self) -> None:
        """Each queued record into the metrics, the inspector and its account's subscribed
        destinations. An HTTP request's raw tuple (edge/observe.py) becomes a Record only
        when the inspector keeps it or a subscription wants its event: the metrics are
        counted from the tuple (summed in the hub's :class:`edge.tally.Tally`, written
        before every await), and a cached subscription lookup does not await."""
        now = time.monotonic()
        taken = 0
        wanted: List[Tuple[Record, List[Route]]] = []
        tally = self.tally
        inspector = self.inspector
        try:
            while self.queue and taken < self.settings.queue:
                record = self.queue.popleft()
                taken += 1
                if type(record) is tuple or type(record) is Counted:
                    try:
                        account_id, record, keys = self._http(record, tally, inspector, now)
                    except Exception:  # one odd request never costs the others
                        log.exception("an HTTP record")
                        EVENTS_DROPPED.labels("record").inc()
                        continue
                    if account_id is not None:  # not cached: read it
                        tally.flush()
                        account = await self.subscriptions(account_id, now)
                        keys = (
                            account.routes.get(event_targets.HTTP_REQUEST_COMPLETE)
                            if account
                            else None
                        )
                        if keys and type(record) is tuple:
                            record = _made(record)
                            if record is None:
                                continue
                    if keys:
                        wanted.append((record, keys))
                else:
                    self._other(record)
                    account = self.cached(record.account_id, now)
                    if account is _MISSING:
                        tally.flush()
                        account = await self.subscriptions(record.account_id, now)
                    if account is not None:
                        kind = (
                            event_targets.HTTP_REQUEST_COMPLETE
                            if record.kind == "http"
                            else event_targets.TCP_CONNECTION_CLOSED
                        )
                        keys = account.routes.get(kind)
                        if keys:
                            wanted.append((record, keys))
                if taken % 50 == 0:
                    tally.flush()
                    await asyncio.sleep(0)  # let traffic run between chunks
                if len(wanted) >= BATCH:
                    tally.flush()
                    await self._encode(wanted)
                    wanted = []
        finally:
            tally.flush()
        if wanted:
            await self._encode(wanted)

    def _http(
        self, raw: Tuple[Any, ...], tally: tally_.Tally, inspector: Any, now: float
    ) -> Tuple[Optional[str], Any, Optional[List[Route]]]:
        """One HTTP request's raw tuple: its metrics, the inspector, its cached routes. Returns
        (the account id when its subscriptions are not cached, else None; the Record, or the
        tuple when nothing needed it; the routes of its event, or None)."""
        counted = None
        if type(raw) is Counted:  # its metrics and inspector window already counted
            counted, raw = raw, raw.raw
        hop, state, response = raw[3], raw[5], raw[13]
        account_id = hop.account_id if hop else ""
        if counted is None:
            tally.http(response.status_code, raw[4], raw[8] - raw[7], raw[10], raw[11])
            action_vars = getattr(state, "action_vars", None)
            if action_vars:
                tally.decided(decisions_of(action_vars))
        record: Any = raw
        if (
            counted.admitted
            if counted is not None
            else inspector is not None
            and inspector.admits(account_id, hop.endpoint_id if hop else "", tally)
        ):
            record = http_record(raw)
            inspector.keep(record)
        account = self.cached(account_id, now)
        if account is _MISSING:
            return account_id, record, None
        keys = account.routes.get(event_targets.HTTP_REQUEST_COMPLETE) if account else None
        if keys and record is raw:
            record = http_record(raw)
        return None, record, keys

    def _other(self, record: Record) -> None:
        """A Record (a TCP connection's, or one a test handed in): metrics and inspector."""
        observe_metrics(record)
        if self.inspector is not None and record.kind == "http":
            self.inspector.offer(record)

    async def _encode(self, wanted: List[Tuple[Any, List[Route]]], built: bool = False) -> None:
        """Build and encode the events of ``wanted`` (records; with ``built``, (event, time)
        pairs already made), apply each source's filter and fields (in the delivery process
        when there is one: the edge only pickles the records), then offer each to its
        destinations: once per destination and distinct content."""
        items = [item for item, _ in wanted]
        plain = not built and all(sel is None for _, routes in wanted for _, _, sel in routes)
        selections = [list(dict.fromkeys(sel for _, _, sel in routes)) for _, routes in wanted]
        if plain:
            work: Any = functools.partial(encode_many, items)
        elif built:
            work = functools.partial(encode_events, items, selections)
        else:
            work = functools.partial(encode_many, items, selections)
        if self.settings.process:
            try:
                encoded = await asyncio.get_running_loop().run_in_executor(self._processes(), work)
            except Exception as exc:  # the process died: these events are lost, counted
                log.warning("encoding events: %s", exc)
                if type(exc).__name__ == "BrokenProcessPool":
                    self.process_pool = None
                EVENTS_DROPPED.labels("encoding").inc(len(items))
                return
        else:
            encoded = work()
        for (_, routes), sels, event in zip(wanted, selections, encoded):
            offered = set()
            for _, key, sel in routes:
                one = event if plain else event[sels.index(sel)]
                if one is None or (key, one.line) in offered:
                    continue
                offered.add((key, one.line))
                destination = self.destinations.get(key)
                if destination is not None:
                    destination.offer(one)

    async def offer_built(self, wanted: List[Tuple[Any, List[Route]]]) -> None:
        """Events already built ((event, time) pairs: the API's, edge/audit_outbox.py) to
        their routes' destinations, through the sources' filters and fields."""
        await self._encode(wanted, built=True)
        if self.task is None:  # the worker sends the outboxes
            self.task = asyncio.ensure_future(self.run())

    def cached(self, account_id: str, now: float) -> Any:
        """:meth:`subscriptions` when it need not read the store (no account, or its entry is
        fresh), without awaiting; else ``_MISSING``."""
        if not account_id:
            return None
        cached = self.accounts.get(account_id)
        if cached is not None and now - cached.fetched < self.settings.cache_seconds:
            self.accounts.move_to_end(account_id)
            return cached
        return _MISSING

    async def subscriptions(self, account_id: str, now: float) -> Optional[_Account]:
        found = self.cached(account_id, now)
        if found is not _MISSING:
            return found
        cached = self.accounts.get(account_id)
        try:
            routes, targets = await asyncio.get_running_loop().run_in_executor(
                None, read_subscriptions, account_id
            )
        except Exception as exc:  # the store is down: keep what we had, retry later
            log.warning("reading event subscriptions of %s: %s", account_id, exc)
            if cached is not None:
                cached.fetched = now
            return cached
        for key, target in targets.items():
            old = self.destinations.get(key)
            if old is None or old.target != target:
                fresh = Destination(key, target, self.settings, self.instance_id)
                if old is not None:
                    fresh.outbox = old.outbox
                self.destinations[key] = fresh
        entry = _Account(now, routes)
        self.accounts[account_id] = entry
        self.accounts.move_to_end(account_id)
        while len(self.accounts) > self.settings.cache_accounts:
            gone, _ = self.accounts.popitem(last=False)
            for key in [k for k in self.destinations if k[0] == gone]:
                del self.destinations[key]
        return entry

    async def deliver(self) -> None:
        now = time.monotonic()
        for destination in list(self.destinations.values()):
            if destination.due(now):
                self.kick(destination)

    def kick(self, destination: Destination) -> None:
        """Send the next batch of ``destination`` (one call in flight per destination; when
        it ends, the next goes at once if the outbox holds more and no back-off waits)."""
        batch: List[Tuple[int, Encoded]] = []
        size = 0
        while destination.outbox and len(batch) < BATCH:
            entry = destination.outbox[0]
            weight = len(entry[1].line)
            if batch and size + weight > BATCH_BYTES:
                break
            destination.outbox.popleft()
            batch.append(entry)
            size += weight
        if not batch:
            return
        destination.sending = True
        loop = asyncio.get_running_loop()
        if self.settings.process:
            events = [e for _, e in batch]
            future = loop.run_in_executor(
                self._processes(),
                deliver,
                destination.key,
                destination.target,
                self.settings.aws_endpoint_url,
                self.settings.send_timeout,
                self.instance_id,
                events,
            )
        else:
            future = loop.run_in_executor(self.pool, destination.send, [e for _, e in batch])
        future.add_done_callback(functools.partial(self._done, destination, batch))

    def _processes(self) -> Any:
        """The delivery process (spawned on first use): boto3's signing and I/O run there,
        off the edge's interpreter lock; it gets targets and encoded events, nothing else."""
        if self.process_pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.process_pool = ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn"), initializer=_child_start
            )
        return self.process_pool

    def _done(
        self, destination: Destination, batch: List[Tuple[int, Encoded]], future: Any
    ) -> None:
        try:
            failed = future.result()
        except Exception as exc:
            log.info("event delivery to %s failed: %s", destination.key[1], exc)
            failed = list(range(len(batch)))
            if type(exc).__name__ == "BrokenProcessPool":
                self.process_pool = None  # the next delivery spawns a new one
        self._settle(destination, batch, failed)
        self._sent(destination)

    def _sent(self, destination: Destination) -> None:
        destination.sending = False
        if (
            destination.due(time.monotonic())
            and self.destinations.get(destination.key) is destination
        ):
            self.kick(destination)

    def _send(self, destination: Destination, batch: List[Tuple[int, Encoded]]) -> None:
        """Send and settle in the calling thread (tests; the hub settles in its loop)."""
        try:
            failed = destination.send([e for _, e in batch])
        except Exception as exc:
            log.info("event delivery to %s failed: %s", destination.key[1], exc)
            failed = list(range(len(batch)))
        self._settle(destination, batch, failed)

    def _settle(
        self, destination: Destination, batch: List[Tuple[int, Encoded]], failed: List[int]
    ) -> None:
        """Count what was sent; put back what failed (after a back-off), or drop it after its
        last try."""
        sent = len(batch) - len(failed)
        if sent:
            EVENTS_SENT.labels(destination.kind).inc(sent)
        if not failed:
            destination.failures = 0
            destination.next_try = 0.0
            return
        destination.failures += 1
        delay = min(
            self.settings.backoff_cap, self.settings.backoff_base * 2 ** (destination.failures - 1)
        )
        destination.next_try = time.monotonic() + delay * random.uniform(0.5, 1.0)
        for index in reversed(failed):
            attempts, event = batch[index]
            if attempts + 1 >= self.settings.attempts:
                EVENTS_DROPPED.labels("attempts").inc()
                continue
            EVENTS_RETRIED.labels(destination.kind).inc()
            if len(destination.outbox) >= self.settings.outbox:
                EVENTS_DROPPED.labels("outbox_full").inc()
                continue
            destination.outbox.appendleft((attempts + 1, event))

    async def flush(self, timeout: float) -> None:
        """Wait until every record is drained and every outbox empty (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.queue and not any(
                d.outbox or d.sending for d in self.destinations.values()
            ):
                return
            await asyncio.sleep(0.05)


def read_subscriptions(
    account_id: str,
) -> Tuple[Dict[str, List[Route]], Dict[Tuple[str, str], Dict[str, Any]]]:
    """(event type → routes, destination key → opened target) of an account: one Query (its
    newest 100 subscriptions, the most it may have) and one GetItem per distinct destination
    (at most 10 per subscription). A route is (subscription id, destination key, the
    source's selection: filter and fields, None when it has neither)."""
    items, _ = store.query_page(
        store.collection_pk(account_id, event_targets.COLLECTION_SUBSCRIPTION),
        event_targets.MAX_PER_ACCOUNT,
    )
    wanted: Dict[str, List[Tuple[str, str, Selection]]] = {}
    for item in items:
        for kind in item.data.get("sources", []):
            options = event_targets.source_options(item.data, kind)
            selection = event_filters.selection(options["filter"], options["fields"])
            wanted.setdefault(kind, []).extend(
                (item.sk, d, selection) for d in item.data.get("destination_ids", [])
            )
    targets: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for destination_id in {d for ds in wanted.values() for _, d, _ in ds}:
        found = store.get(
            store.collection_pk(account_id, event_targets.COLLECTION_DESTINATION), destination_id
        )
        if found is None:
            continue
        try:
            targets[(account_id, destination_id)] = event_targets.open_target(
                account_id, destination_id, found.data["target"]
            )
        except Exception as exc:  # a secret that does not open: that destination is skipped
            log.warning("event destination %s: %s", destination_id, exc)
    routes = {
        kind: list(
            dict.fromkeys(
                (sub, (account_id, d), sel) for sub, d, sel in ds if (account_id, d) in targets
            )
        )
        for kind, ds in wanted.items()
    }
    return routes, targets
