"""The bounds of edge/events.py and the inspector, measured: the record queue, a destination's
outbox, retries, the size of one event, redaction; and the tap records one request per
response end."""

import asyncio
import time
import base64

from edge import events, http1, inspector, observe
from edge.events import Destination, Encoded, Hub, Record, Settings


def record(**overrides):
    base = dict(
        kind="http",
        account_id="acct_1",
        endpoint_id="ep_1",
        endpoint_url="http://a.example",
        endpoint_host="a.example",
        endpoint_kind="agent",
        scheme="http",
        client_ip="127.0.0.1",
        client_port=5,
        server_ip="127.0.0.1",
        server_port=80,
        started=1e9,
        ended=1e9 + 1,
        duration=0.5,
        method="GET",
        target="/x?y=1",
        host="a.example",
        version="1.1",
        status=200,
    )
    base.update(overrides)
    return Record(**base)


def dropped(reason):
    return events.EVENTS_DROPPED.labels(reason)._value.get()


def test_the_record_queue_holds_at_most_its_bound_and_counts_the_rest():
    hub = Hub("edge_test", Settings(queue=5))
    hub.task = object()  # no worker: only the request path's append is measured
    before = dropped("queue_full")
    for _ in range(12):
        hub.record(record())
    assert len(hub.queue) == 5
    assert dropped("queue_full") - before == 7


def test_a_destination_outbox_holds_at_most_its_bound():
    target = {
        "kinesis": {
            "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
        }
    }
    destination = Destination(("acct_1", "ed_1"), target, Settings(outbox=3), "edge_test")
    before = dropped("outbox_full")
    for index in range(10):
        destination.offer(Encoded(b"{}", str(index), 0))
    assert len(destination.outbox) == 3
    assert dropped("outbox_full") - before == 7


class _Refusing(Destination):
    def send(self, batch):
        raise ConnectionRefusedError("nothing listens")


def test_a_refused_batch_is_retried_then_dropped_after_the_attempts():
    target = {
        "kinesis": {
            "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
        }
    }
    settings = Settings(attempts=3, backoff_base=0.0)
    hub = Hub("edge_test", settings)
    destination = _Refusing(("acct_1", "ed_1"), target, settings, "edge_test")
    for index in range(4):
        destination.offer(Encoded(b"{}", str(index), 0))
    before_retried = events.EVENTS_RETRIED.labels("kinesis")._value.get()
    before = dropped("attempts")
    for _ in range(3):
        batch = [destination.outbox.popleft() for _ in range(len(destination.outbox))]
        hub._send(destination, batch)
    assert not destination.outbox
    assert dropped("attempts") - before == 4
    assert events.EVENTS_RETRIED.labels("kinesis")._value.get() - before_retried == 8
    assert destination.failures == 3


def test_one_event_is_bounded_and_secrets_are_redacted():
    headers = [
        (b"authorization", b"Bearer s"),
        (b"cookie", b"a=b"),
        (b"proxy-authorization", b"Basic x"),
        (b"x-long", b"v" * 5000),
    ] + [(b"x-%d" % i, b"1") for i in range(100)]
    event = events.http_event(
        record(
            request_headers=headers,
            response_headers=[(b"set-cookie", b"id=1")],
            target="/" + "p" * 10000,
        )
    )
    req = event["object"]["http"]["request"]
    assert req["headers"]["authorization"] == ["[redacted]"]
    assert req["headers"]["cookie"] == ["[redacted]"]
    assert req["headers"]["proxy-authorization"] == ["[redacted]"]
    assert len(req["headers"]["x-long"][0]) == events.MAX_HEADER_VALUE
    assert sum(len(v) for v in req["headers"].values()) == events.MAX_HEADERS
    assert len(req["url"]["path"]) == events.MAX_URL and len(req["url"]["raw"]) == events.MAX_URL
    assert event["object"]["http"]["response"]["headers"]["set-cookie"] == ["[redacted]"]
    assert event["event_type"] == "http_request_complete.v0"


def test_the_inspectors_refusal_says_why_admits_would_refuse_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(inspector.time, "time", lambda: 6000.0)  # one minute throughout
    inspect = inspector.Inspector()
    assert inspect.refusal("acct_1", "ep_1") is None  # room: admits would admit
    assert inspect.refusal("", "ep_1") is None and inspect.refusal("acct_1", "") is None
    for _ in range(inspector.layout.PER_MINUTE - 1):
        assert inspect.admits("acct_1", "ep_1")
    assert inspect.refusal("acct_1", "ep_1") is None  # one more fits
    assert inspect.window["ep_1"] == (100, inspector.layout.PER_MINUTE - 1)  # unchanged
    assert inspect.admits("acct_1", "ep_1")
    assert inspect.refusal("acct_1", "ep_1") == "rate"
    assert inspect.refusal("acct_1", "ep_2") is None  # per endpoint
    monkeypatch.setattr(inspect, "pending", [None] * inspector.PENDING)
    assert inspect.refusal("acct_1", "ep_2") == "pending_full"
    monkeypatch.setattr(inspector.time, "time", lambda: 6060.0)  # the next minute: room again
    monkeypatch.setattr(inspect, "pending", [])
    assert inspect.refusal("acct_1", "ep_1") is None


def test_captured_requests_are_rate_bounded_per_endpoint_and_bodies_truncated():
    async def run():
        inspect = inspector.Inspector()
        inspect._write = lambda: None  # the store write is measured end to end elsewhere
        before = inspector.DROPPED.labels("rate")._value.get()
        for _ in range(inspector.layout.PER_MINUTE + 30):
            inspect.offer(record())
        return inspect, inspector.DROPPED.labels("rate")._value.get() - before

    inspect, rate_dropped = asyncio.run(run())
    assert 0 < rate_dropped <= 30 + inspector.layout.PER_MINUTE  # a minute may turn over
    assert len(inspect.pending) + rate_dropped == inspector.layout.PER_MINUTE + 30
    data = inspector.captured_item(
        record(capture=True, request_body=b"a" * 5000, response_body=b"ok"), "req_1"
    )
    assert base64.b64decode(data["request_body"]) == b"a" * inspector.layout.BODY_BYTES
    assert data["request_body_truncated"] and not data["response_body_truncated"]
    plain = inspector.captured_item(record(), "req_2")
    assert plain["request_body"] is None and plain["bodies_captured"] is False


class _Conn:
    """A stand-in for the client framing: hands out the events it is given."""

    def __init__(self, incoming):
        self.incoming = list(incoming)
        self.our_state = "IDLE"

    def next_event(self):
        return self.incoming.pop(0)

    def send(self, event):
        return b"x"


class _Writer:
    def get_extra_info(self, name):
        return ("127.0.0.1", 80)


class _Edge:
    class settings:
        instance_id = "edge_test"


def test_the_tap_records_one_request_per_response_end_and_passes_everything_through():
    # (its cost per request, measured beside an untapped framing: about 2 µs on the shared
    # 2-core machine; the Record is built by the worker, not here)
    async def run():
        edge = _Edge()
        hub = observe.hub_of(edge)
        hub.task = object()
        request = http1.Request(method=b"POST", target=b"/p", headers=[(b"host", b"a.example")])
        tap = observe.tap(
            _Conn([request, http1.Data(data=b"abc"), http1.EndOfMessage()]),
            edge,
            ("10.0.0.1", 1234),
            _Writer(),
            "http",
        )
        assert tap.next_event() is request and tap.our_state == "IDLE"
        tap.next_event(), tap.next_event()
        assert tap.send(http1.Response(status_code=201, headers=[])) == b"x"
        tap.send(http1.Data(data=b"hello"))
        assert not hub.queue
        tap.send(http1.EndOfMessage())
        return hub

    hub = asyncio.run(run())
    (raw,) = hub.queue  # the request path appends a tuple; the worker makes the Record
    rec = events.http_record(raw)
    assert (rec.method, rec.target, rec.status, rec.bytes_in, rec.bytes_out) == (
        "POST",
        "/p",
        201,
        3,
        5,
    )
    assert rec.client_ip == "10.0.0.1" and rec.endpoint_kind == "none" and rec.host == "a.example"
    assert rec.started <= rec.ended <= time.time() and rec.request_ended is True


def test_a_record_made_before_the_request_ended_says_so():
    """The upstream answered while the client was still sending its body: the record tells
    (the inspector marks what it captured of the body as truncated)."""

    async def run():
        edge = _Edge()
        hub = observe.hub_of(edge)
        hub.task = object()
        request = http1.Request(method=b"POST", target=b"/p", headers=[(b"host", b"a.example")])
        tap = observe.tap(
            _Conn([request, http1.Data(data=b"ab")]), edge, ("10.0.0.1", 1), _Writer(), "http"
        )
        tap.next_event(), tap.next_event()
        tap.send(http1.Response(status_code=200, headers=[]))
        tap.send(http1.EndOfMessage())
        return hub

    (raw,) = asyncio.run(run()).queue
    rec = events.http_record(raw)
    assert rec.bytes_in == 2 and rec.request_ended is False


def test_a_batch_holds_at_most_500_events_and_800_kib():
    async def run():
        target = {
            "kinesis": {
                "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
                "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
            }
        }
        hub = Hub("edge_test", Settings(outbox=5000, process=False))
        sizes = []
        destination = Destination(("a", "d"), target, hub.settings, "edge_test")
        destination.send = (
            lambda batch: sizes.append((len(batch), sum(len(e.line) for e in batch))) or []
        )
        for index in range(1200):
            destination.offer(Encoded(b"x" * 100, str(index), 0))
        for index in range(20):
            destination.offer(Encoded(b"y" * 100_000, str(index), 0))
        hub.destinations[destination.key] = destination
        while destination.outbox or destination.sending:
            if not destination.sending:
                hub.kick(destination)
            await asyncio.sleep(0.01)
        return sizes

    sizes = asyncio.run(run())
    assert sum(n for n, _ in sizes) == 1220
    assert max(n for n, _ in sizes) == events.BATCH
    assert max(b for _, b in sizes) <= events.BATCH_BYTES


def test_the_grafana_dashboard_queries_only_metrics_that_exist():
    import json
    import os
    import re

    from prometheus_client import CollectorRegistry

    from edge import metrics as edge_metrics
    from scripts import api_metrics
    from stacks.paths import PROJECT_DIR as root

    with open(os.path.join(root, "docs", "grafana-dashboard.json")) as fh:
        dashboard = json.load(fh)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|total)$", "", m)
        for e in exprs
        for m in re.findall(r"\b((?:edge|api|store)_[a-z_]+)\b", e)
    }
    known = set()
    registry = CollectorRegistry()
    registry.register(events.Collector(object()))
    registry.register(api_metrics._Collector())
    for family in registry.collect():
        known.add(family.name)
    known |= {"edge_agent_sessions", "edge_tunnels", "edge_public_connections"}  # edge/metrics
    assert edge_metrics._EdgeCollector  # (those three are yielded there, per edge)
    assert used and used <= known, used - known
