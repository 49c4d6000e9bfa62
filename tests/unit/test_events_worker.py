"""The events worker's cheap path (edge/events.py ``Hub.drain``, edge/tally.py): an HTTP
request's raw tuple counted into the metrics without its Record, the Record made only for the
inspector or a subscription, a cached subscription answered without awaiting, and the tap's
explicit delegations. Each test fails if what is recorded or delivered differs from the
per-record path (``observe_metrics``, ``Inspector.offer``, ``http_record``)."""

import asyncio
import random
import time
from types import SimpleNamespace

from prometheus_client import Counter, Histogram

from edge import events, http1, inspector, observe, tally
from edge.events import Hub, Settings

BUCKETS = events.LATENCY._upper_bounds[:-1]  # the edge's own, +Inf apart


def _fresh(name, histogram=Histogram):
    """A set of metrics like the edge's, for one side of a comparison."""
    return (
        Counter(f"{name}_requests", "r", ["status_class", "endpoint_kind"], registry=None),
        histogram(f"{name}_latency", "l", ["endpoint_kind"], registry=None, buckets=BUCKETS),
        Counter(f"{name}_bytes", "b", ["direction"], registry=None),
        Counter(f"{name}_decisions", "d", ["action", "decision"], registry=None),
    )


def _samples(metrics):
    """Every sample's (suffix, labels, value), its creation time left out."""
    out = []
    for metric in metrics:
        for family in metric.collect():
            for s in family.samples:
                if not s.name.endswith("_created"):
                    name = s.name[len(family.name) :]
                    out.append((name, tuple(sorted(s.labels.items())), s.value))
    return sorted(out)


def _requests(count, seed=7):
    """(status, kind, duration, bytes in, bytes out, decisions) of ``count`` requests: every
    bucket bound exactly, values between, zero bytes, several status classes and kinds."""
    rng = random.Random(seed)
    bounds = list(BUCKETS) + [60.0]
    out = []
    for index in range(count):
        if index % 3 == 0:
            duration = bounds[index % len(bounds)]  # on a bound: that bucket, not the next
        else:
            duration = rng.uniform(0, 12) ** 2 / 10
        out.append(
            (
                rng.choice((200, 204, 301, 404, 502, 101)),
                rng.choice(("agent", "cloud", "edge", "none")),
                duration,
                rng.choice((0, 0, 17, 5000)),
                rng.choice((0, 11, 1 << 20)),
                rng.choice(((), (("rate_limit", "deny"),), (("restrict_ips", "allow"),) * 2)),
            )
        )
    return out


def _observe_one_by_one(metrics, requests):
    """What edge/events.py's observe_metrics does per HTTP record."""
    reqs, latency, byts, decisions = metrics
    for status, kind, duration, b_in, b_out, found in requests:
        reqs.labels(tally.status_class(status), kind).inc()
        latency.labels(kind).observe(duration)
        byts.labels("in").inc(b_in)
        byts.labels("out").inc(b_out)
        for action, decision in found:
            decisions.labels(action, decision).inc()


def test_a_tally_leaves_exactly_the_values_of_one_call_per_request():
    requests = _requests(3000)
    one, summed = _fresh("one"), _fresh("summed", tally.SummedHistogram)
    # a running start: the histogram's sum is added to in the same order from a non-zero value
    _observe_one_by_one(one, requests[:7])
    _observe_one_by_one(summed, requests[:7])
    _observe_one_by_one(one, requests[7:])
    counted = tally.Tally(*summed)
    for start in range(7, len(requests), 50):  # flushed in chunks, as the worker does
        for status, kind, duration, b_in, b_out, found in requests[start : start + 50]:
            counted.http(status, kind, duration, b_in, b_out)
            counted.decided(found)
        counted.flush()
    assert _samples(summed) == _samples(one)  # floats compared exactly, sums included
    counted.flush()  # nothing more to write: nothing changes
    assert _samples(summed) == _samples(one)


def test_many_requests_at_once_leave_the_values_of_one_call_per_request():
    """A quiet route's numbers, counted by the core (edge/fast_path.py ``take_quiet``): per
    status a count, the durations in order, the byte sums; and a drop counted ``amount``
    times."""
    requests = [r for r in _requests(2000, seed=11) if r[1] == "agent"]
    one, summed = _fresh("many_one"), _fresh("many_summed", tally.SummedHistogram)
    _observe_one_by_one(one, [(s, k, d, i, o, ()) for s, k, d, i, o, _ in requests])
    counted = tally.Tally(*summed)
    for start in range(0, len(requests), 97):  # taken in batches, as each second's
        batch = requests[start : start + 97]
        statuses: dict = {}
        for status, *_ in batch:
            statuses[status] = statuses.get(status, 0) + 1
        counted.http_many(
            "agent",
            list(statuses.items()),
            [r[2] for r in batch],
            sum(r[3] for r in batch),
            sum(r[4] for r in batch),
        )
        counted.flush()
    assert _samples(summed) == _samples(one)
    extra = Counter("many_extra", "x", ["reason"], registry=None)
    counted.inc(extra, "rate", amount=40)
    counted.inc(extra, "rate")
    counted.flush()
    assert ("_total", (("reason", "rate"),), 41.0) in _samples([extra])


def test_zero_bytes_still_make_both_byte_series_and_a_tally_counts_other_counters():
    one, summed = _fresh("zero_one"), _fresh("zero_summed", tally.SummedHistogram)
    _observe_one_by_one(one, [(200, "agent", 0.001, 0, 0, ())])
    counted = tally.Tally(*summed)
    counted.http(200, "agent", 0.001, 0, 0)
    extra = Counter("zero_extra", "x", ["reason"], registry=None)
    counted.inc(extra, "rate")
    counted.inc(extra, "rate")
    assert _samples([extra]) == []  # nothing until the flush
    counted.flush()
    assert _samples(summed) == _samples(one)
    assert ("_total", (("reason", "rate"),), 2.0) in _samples([extra])


# ---- the worker ------------------------------------------------------------------------------
def _raw(index, account="acct_1", endpoint="ep_1", status=200, action_vars=None):
    """What edge/observe.py's tap appends for one request."""
    hop = SimpleNamespace(
        account_id=account, endpoint_id=endpoint, url="https://a.example", host="a.example"
    )
    request = http1.Request(
        method=b"GET",
        target=b"/p/%d" % index,
        headers=[(b"host", b"A.example"), (b"cookie", b"s=1")],
    )
    response = http1.Response(status_code=status, headers=[(b"content-length", b"2")])
    state = SimpleNamespace(action_vars=action_vars) if action_vars else None
    return (
        ("10.0.0.%d" % (index % 250), 1000 + index),
        ("127.0.0.1", 80),
        "https",
        hop if account else None,
        "agent" if account else "none",
        state,
        1e9 + index,
        10.0 + index,
        10.0 + index + 0.003 * (index % 40),
        1e9 + index + 0.5,
        index % 7,
        2,
        request,
        response,
        None,
    )


class _Keeping(inspector.Inspector):
    """The real inspector, its store write replaced by a list of what it kept."""

    def __init__(self):
        super().__init__()
        self.kept = []

    def keep(self, record):
        self.kept.append(record)


def _hub(routes_of):
    """A hub whose subscription cache answers ``routes_of`` (account -> routes), its events
    captured instead of encoded."""
    hub = Hub("edge_test", Settings(process=False), inspector=_Keeping())
    hub.task = object()
    encoded = []

    async def capture(wanted, built=False):
        encoded.extend(wanted)

    hub._encode = capture
    for account, routes in routes_of.items():
        hub.accounts[account] = events._Account(1e12, routes)
    return hub, encoded


def _metric_values():
    """The request metrics' samples now (creation times left out)."""
    return _samples([events.REQUESTS, events.LATENCY, events.HTTP_BYTES, events.DECISIONS])


def _delta(before, after):
    old = {(n, labels): value for n, labels, value in before}
    return {
        (n, labels): value - old.get((n, labels), 0.0)
        for n, labels, value in after
        if value != old.get((n, labels), 0.0)
    }


ROUTE = [("esb_1", ("acct_1", "ed_1"), None)]


def test_the_worker_records_and_delivers_what_the_per_record_path_did():
    """Raw tuples drained: the metrics move as observe_metrics on each Record moves them,
    the inspector keeps the same Records, and the subscribed account's events carry the
    Records http_record makes; an account without routes costs no Record at all."""
    decided = {"on_http_request": {"actions.ngrok.rate_limit.limited": True}}
    raws = [
        _raw(i, status=(200, 404, 502)[i % 3], action_vars=decided if i % 4 == 0 else None)
        for i in range(120)
    ]
    raws += [_raw(1000 + i, account="acct_2", endpoint="ep_2") for i in range(30)]
    raws += [_raw(2000, account="")]  # not routed: metrics only

    # the per-record path, into the same metrics: the delta it makes
    before = _metric_values()
    for raw in raws:
        events.observe_metrics(events.http_record(raw))
    expected_delta = _delta(before, _metric_values())

    hub, encoded = _hub({"acct_1": {"http_request_complete.v0": ROUTE}, "acct_2": {}})
    made = []
    real = events.http_record
    events.http_record = lambda raw: made.append(raw) or real(raw)
    try:
        hub.queue.extend(raws)
        before = _metric_values()
        asyncio.run(hub.drain())
    finally:
        events.http_record = real
    delta = _delta(before, _metric_values())

    assert delta.keys() == expected_delta.keys()
    for key, value in expected_delta.items():
        if key[0] == "_sum":  # a sum's delta depends on its start by a rounding
            assert abs(delta[key] - value) <= 1e-9 * max(1.0, abs(value))
        else:
            assert delta[key] == value, key
    # delivered: acct_1's 120 events, each from the Record the old path made
    assert [r for r, _ in encoded] == [real(raw) for raw in raws[:120]]
    assert all(routes == ROUTE for _, routes in encoded)
    # the inspector kept acct_1's and acct_2's requests (one minute's window holds them all)
    assert hub.inspector.kept == [real(raw) for raw in raws[:150]]
    # Records made: one per request something needed, none for the unrouted request
    assert len(made) == 150 and raws[150] not in made


def test_past_the_inspectors_window_a_request_with_no_subscription_makes_no_record():
    hub, encoded = _hub({"acct_2": {}})
    hub.inspector.window["ep_2"] = (int(time.time() // 60), 10**9)  # spent
    made = []
    real = events.http_record
    events.http_record = lambda raw: made.append(raw) or real(raw)
    rate = inspector.DROPPED.labels("rate")
    try:
        before = rate._value.get()
        hub.queue.extend(_raw(i, account="acct_2", endpoint="ep_2") for i in range(80))
        asyncio.run(hub.drain())
    finally:
        events.http_record = real
    assert made == [] and encoded == [] and hub.inspector.kept == []
    assert rate._value.get() - before == 80  # each refusal counted, as offer counts it


def test_an_account_not_cached_is_read_once_and_its_records_made():
    hub, encoded = _hub({})
    reads = []

    async def subscriptions(account_id, now):
        reads.append(account_id)
        entry = hub.accounts[account_id] = events._Account(
            now, {"http_request_complete.v0": ROUTE}
        )
        return entry

    hub.subscriptions = subscriptions
    raws = [_raw(i) for i in range(5)]
    hub.queue.extend(raws)
    asyncio.run(hub.drain())
    assert reads == ["acct_1"]  # then cached: no await for the other four
    assert [r for r, _ in encoded] == [events.http_record(raw) for raw in raws]


def test_an_odd_request_is_dropped_and_counted_and_the_others_go_on():
    hub, encoded = _hub({"acct_1": {"http_request_complete.v0": ROUTE}})
    dropped = events.EVENTS_DROPPED.labels("record")
    before = dropped._value.get()
    odd = list(_raw(1))
    odd[13] = None  # no response
    hub.queue.extend([_raw(0), tuple(odd), _raw(2)])
    asyncio.run(hub.drain())
    assert dropped._value.get() - before == 1
    assert [r.target for r, _ in encoded] == ["/p/0", "/p/2"]


def test_inspector_offer_and_admits_keep_the_same_requests():
    async def run():
        offered, admitted = inspector.Inspector(), _Keeping()
        offered._write = lambda: None
        record = events.http_record(_raw(1))
        for _ in range(inspector.layout.PER_MINUTE + 5):
            offered.offer(record)
            if admitted.admits(record.account_id, record.endpoint_id):
                admitted.keep(record)
        return offered, admitted

    offered, admitted = asyncio.run(run())
    assert len(admitted.kept) == len(offered.pending) > 0
    assert not admitted.admits("", "ep_1") and not admitted.admits("acct_1", "")


class _Framing:
    def __init__(self):
        self.our_state, self.their_state = "DONE", "IDLE"
        self.trailing_data = (b"rest", False)
        self.fed, self.cycles = [], 0
        self.other = "through __getattr__"

    def receive_data(self, data):
        self.fed.append(data)

    def start_next_cycle(self):
        self.cycles += 1


def test_the_tap_passes_the_framings_members_through():
    class Writer:
        def get_extra_info(self, name):
            return ("127.0.0.1", 80)

    framing = _Framing()
    tap = observe.tap(framing, SimpleNamespace(), ("10.0.0.1", 1), Writer(), "http")
    assert (tap.our_state, tap.their_state, tap.trailing_data) == (
        "DONE",
        "IDLE",
        (b"rest", False),
    )
    framing.our_state = "SEND_BODY"
    assert tap.our_state == "SEND_BODY"  # read each time, never copied
    tap.receive_data(b"abc")
    tap.start_next_cycle()
    assert framing.fed == [b"abc"] and framing.cycles == 1 and tap.other == "through __getattr__"


def test_past_the_inspectors_window_a_subscribed_request_still_gets_its_record():
    hub, encoded = _hub({"acct_1": {"http_request_complete.v0": ROUTE}})
    hub.inspector.window["ep_1"] = (int(time.time() // 60), 10**9)  # spent
    raws = [_raw(i) for i in range(60)]
    hub.queue.extend(raws)
    asyncio.run(hub.drain())
    assert hub.inspector.kept == []
    assert [r for r, _ in encoded] == [events.http_record(raw) for raw in raws]


def _count_at_once(hub, raws):
    """What edge/fast_path.py does with the core's rows: each request counted at once
    (``Hub.count_http``), a ``Counted`` tuple queued only when a record is wanted."""
    now = time.monotonic()
    for raw in raws:
        admitted = hub.count_http(
            raw[3], raw[4], raw[13].status_code, raw[8] - raw[7], raw[10], raw[11], now
        )
        if admitted is not None:
            hub.record(events.Counted(raw, admitted))
    hub.flush_counts()


def test_requests_counted_at_once_leave_what_the_worker_leaves_for_their_tuples(monkeypatch):
    """The core's path (counted at once, a tuple queued only for a record) against raw tuples
    drained: the same metric deltas, the same Records kept by the inspector (its window
    spent past PER_MINUTE for both) and delivered to the subscribed account, none made for
    an account without subscriptions once the inspector's window is spent."""
    raws = [_raw(i, status=(200, 404, 502)[i % 3]) for i in range(150)]
    raws += [_raw(1000 + i, account="acct_2", endpoint="ep_2") for i in range(150)]

    # one minute for the inspector's window throughout (a minute's turn would reset it)
    fixed = time.time()
    monkeypatch.setattr(
        inspector, "time", SimpleNamespace(time=lambda: fixed, monotonic=time.monotonic)
    )

    def run(count):
        hub, encoded = _hub({"acct_1": {"http_request_complete.v0": ROUTE}, "acct_2": {}})
        made = []
        real = events.http_record
        events.http_record = lambda raw: made.append(raw) or real(raw)
        before = _metric_values()
        try:
            if count:
                _count_at_once(hub, raws)
            else:
                hub.queue.extend(raws)
            asyncio.run(hub.drain())
        finally:
            events.http_record = real
        return _delta(before, _metric_values()), encoded, hub.inspector.kept, made, hub

    drained, encoded, kept, made, _ = run(False)
    counted, encoded_c, kept_c, made_c, hub = run(True)
    assert counted.keys() == drained.keys()
    for key, value in drained.items():
        if key[0] == "_sum":
            assert abs(counted[key] - value) <= 1e-9 * max(1.0, abs(value))
        else:
            assert counted[key] == value, key
    assert [r for r, _ in encoded_c] == [r for r, _ in encoded]
    assert kept_c == kept and len(kept) == 2 * inspector.layout.PER_MINUTE
    # records made: acct_1's 150 (subscribed) and acct_2's first PER_MINUTE (the inspector)
    assert len(made_c) == 150 + inspector.layout.PER_MINUTE
    assert len(hub.queue) == 0


def test_an_unread_accounts_subscriptions_are_read_at_once_not_behind_the_queue(monkeypatch):
    """A request of an account whose subscriptions are unread (or stale) is wanted (its
    record queued) and makes one read of them start at once, however many such requests come,
    so the account's next requests need no record when it has no subscription (a quiet route
    of the core's), without waiting for the worker to reach a queued record."""
    hub, _ = _hub({})  # acct_2's subscriptions unread
    hub.inspector.window["ep_2"] = (int(time.time() // 60), 10**9)  # spent
    reads = []
    monkeypatch.setattr(
        events, "read_subscriptions", lambda account: reads.append(account) or ({}, {})
    )

    async def run():
        now = time.monotonic()
        raw = _raw(1, account="acct_2", endpoint="ep_2")
        args = (raw[3], raw[4], 200, 0.001, 0, 0, now)
        first = [hub.count_http(*args) for _ in range(5)]
        fetching = len(hub.fetching)
        await asyncio.sleep(0.05)  # the one read, done (the worker never ran)
        return first, fetching, hub.count_http(*args), hub.fetching

    first, fetching, after, left = asyncio.run(run())
    assert first == [False] * 5 and fetching == 1 and reads == ["acct_2"]
    assert after is None and left == {}
