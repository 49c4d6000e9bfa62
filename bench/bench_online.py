"""Online state (chalicelib.core.online): DynamoDB calls and time per operation.

Runs against moto's in-process DynamoDB (no HTTP), and counts the DynamoDB API calls each
operation makes, which is what it costs on real DynamoDB:

1. a heartbeat of a session holding 10 tunnels/endpoints (not due / due for the TTL refresh);
2. session_started, tunnel_started (tunnel + endpoint + session link: one transaction),
   claim_hostname (free / contested by a live endpoint / taken over from a stale one);
3. one page (limit=10) of /endpoints' reads for an account with 100 live endpoints, and with
   100 / 1000 offline endpoints (of dead sessions) newer than the live ones (1000: the page
   ends early, after MAX_EXAMINED_PER_PAGE items, with a next_page_uri).

Times are moto's (a Python dict, with `make run`'s patches: scripts/embedded_store.py), good
for comparing operations, not for predicting DynamoDB; the call counts carry over.
"""

import os
import statistics
import time
from collections import Counter

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "TABLE_NAME": "tunnel-service-bench",
}.items():
    os.environ[_name] = _value
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from moto import mock_aws  # noqa: E402

from chalicelib.core import config, online, store

from scripts.embedded_store import patch_moto  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "200"))
calls: Counter = Counter()


def _count(event_name, **_):
    calls[event_name.rsplit(".", 1)[-1]] += 1


def measure(label, func, samples=SAMPLES):
    times, per_call = [], None
    for _ in range(samples):
        calls.clear()
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000)
        per_call = dict(calls)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    print(
        f"{label:<52} p50={statistics.median(times):7.2f} ms  p99={p99:7.2f} ms  calls={per_call}",
        flush=True,
    )


def session(account, ago=0.0):
    sid = online.new_session_id()
    real = online.now
    online.now = lambda: time.time() - ago
    try:
        online.session_started(
            account_id=account,
            session_id=sid,
            credential_id="cr_x",
            instance_id="edge-1",
            agent_version="1.4.0",
            os="linux",
            ip="127.0.0.1",
            metadata="",
            region="local",
            owner_id="usr_x",
        )
    finally:
        online.now = real
    return sid


def tunnel(account, sid, n):
    eid = online.new_endpoint_id()
    online.tunnel_started(
        account_id=account,
        session_id=sid,
        tunnel_id=online.new_tunnel_id(),
        instance_id="edge-1",
        proto="https",
        public_url=f"https://h{n}-{eid[-8:].lower()}.example.test",
        endpoint_id=eid,
        forwards_to="http://localhost:80",
    )
    return eid


def main():
    patch_moto()
    with mock_aws():
        config.reset_settings()
        store.reset()
        store.create_table()
        store.connection().client.meta.events.register("before-call.dynamodb.*", _count)

        sid = session("acct_hb")
        for n in range(10):
            tunnel("acct_hb", sid, n)
        measure(
            "heartbeat (10 children, refresh not due)",
            lambda: online.session_heartbeat("acct_hb", sid, "edge-1"),
        )

        def due():
            store.connection().client.update_item(
                TableName=config.get_settings().table_name,
                Key={
                    "pk": {"S": store.collection_pk("acct_hb", online.SESSIONS)},
                    "sk": {"S": sid},
                },
                UpdateExpression="SET children_refresh_at = :z",
                ExpressionAttributeValues={":z": {"N": "0"}},
            )
            calls.clear()
            online.session_heartbeat("acct_hb", sid, "edge-1")

        measure("heartbeat when the TTL refresh is due (+1 setup call)", due, samples=20)

        measure("session_started", lambda: session("acct_w"))
        sw = session("acct_w")
        counter = iter(range(10**9))
        measure("tunnel_started (tunnel + endpoint)", lambda: tunnel("acct_w", sw, next(counter)))
        measure(
            "claim_hostname (free name)",
            lambda: online.claim_hostname(
                f"c{next(counter)}.example.test",
                account_id="acct_w",
                endpoint_id=online.new_endpoint_id(),
                instance_id="edge-1",
            ),
        )
        held = tunnel("acct_w", sw, -1)
        online.claim_hostname(
            "held.example.test", account_id="acct_w", endpoint_id=held, instance_id="edge-1"
        )

        def contested():
            try:
                online.claim_hostname(
                    "held.example.test",
                    account_id="acct_x",
                    endpoint_id=online.new_endpoint_id(),
                    instance_id="edge-2",
                )
            except Exception:  # noqa: BLE001 - the Conflict is the expected answer
                pass

        measure("claim_hostname (held by a live endpoint: 409)", contested)

        dead = session("acct_w", ago=3600)

        def take_over():
            eid = online.new_endpoint_id()
            name = f"t{next(counter)}.example.test"
            online.tunnel_started(
                account_id="acct_w",
                session_id=dead,
                tunnel_id=online.new_tunnel_id(),
                instance_id="edge-1",
                proto="https",
                hostname=name,
                endpoint_id=eid,
            )
            online.claim_hostname(name, account_id="acct_w", endpoint_id=eid, instance_id="edge-1")
            calls.clear()
            online.claim_hostname(
                name,
                account_id="acct_w",
                endpoint_id=online.new_endpoint_id(),
                instance_id="edge-2",
            )

        measure("claim_hostname (holder's session stale: take over)", take_over, samples=50)

        for offline in (0, 100, 1000):
            account = f"acct_page_{offline}"
            live = session(account)
            for n in range(100):
                tunnel(account, live, n)
            if offline:
                gone = [session(account, ago=3600) for _ in range(max(1, offline // 10))]
                for n in range(offline):
                    tunnel(account, gone[n % len(gone)], n)

            def page():
                calls.clear()
                online.session_heartbeat(account, live, "edge-1")  # keep it live while we measure
                calls.clear()
                pairs, more, _ = online.live_page(account, online.ENDPOINTS, 10, None)
                assert more and (len(pairs) == 10 or offline >= online.MAX_EXAMINED_PER_PAGE)

            measure(
                f"/endpoints page (limit 10), 100 live + {offline} newer offline",
                page,
                samples=50 if offline < 1000 else 10,
            )


if __name__ == "__main__":
    main()
