"""What the edge's per-request reads cost: DynamoDB calls and latency of each lookup.

Runs in-process over moto's mock DynamoDB (no network), for
- ``https_edges.edge_for_hostport`` with 1, 10 and 50 routes (1 GetItem + 1 Query),
- ``tcp_edges.edge_for_hostport`` (1 GetItem),
- ``backends.resolve`` of each kind (1 GetItem, +1 BatchGetItem for failover/weighted),
- ``reserved_domains.reservation_of`` of a name four labels deep (1 BatchGetItem),
and prints calls per lookup (counted on the boto client: the number DynamoDB would bill)
and p50/p99 latency. Latencies are moto's, on this machine: they compare lookups with each
other; against DynamoDB each call is a network round trip (a few ms), so calls matter most.

    .venv/bin/python bench/bench_edge_reads.py   (BENCH_SAMPLES=… to change)
"""

import os
import statistics
import time

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "TABLE_NAME": "bench-edge-reads",
}.items():
    os.environ[_name] = _value
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from moto import mock_aws  # noqa: E402
from chalicelib.core import reservations
from chalicelib.core import routing
from stacks.paths import PROJECT_DIR  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "300"))


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.core import config, store
        from stacks.inprocess import InProcessApi

        config.reset_settings()
        store.reset()
        store.create_table()
        base = config.get_settings().base_domain
        with Client(app, stage_name="dev", project_dir=PROJECT_DIR) as client:
            api = InProcessApi(client)
            account = api.new_account()
            admin = account.admin
            lookups = []
            for count in (1, 10, 50):
                hp = f"r{count}.{base}:443"
                edge = admin.post("/edges/https", {"hostports": [hp]}).json
                for i in range(count):
                    admin.post(
                        f"/edges/https/{edge['id']}/routes",
                        {"match_type": "path_prefix", "match": f"/{i}"},
                    )
                lookups.append(
                    (
                        f"https edge_for_hostport, {count} routes",
                        lambda hp=hp: routing.https_edge_for_hostport(hp),
                    )
                )
            addr = admin.post("/reserved_addrs", {}).json["addr"]
            admin.post("/edges/tcp", {"hostports": [addr]})
            lookups.append(("tcp edge_for_hostport", lambda: routing.tcp_edge_for_hostport(addr)))
            tg = admin.post("/backends/tunnel_group", {"labels": {"app": "web"}}).json["id"]
            hr = admin.post("/backends/http_response", {"body": "x"}).json["id"]
            fo = admin.post("/backends/failover", {"backends": [tg, hr]}).json["id"]
            wt = admin.post("/backends/weighted", {"backends": {tg: 1, hr: 1}}).json["id"]
            for name, backend_id in (
                ("tunnel_group", tg),
                ("http_response", hr),
                ("failover", fo),
                ("weighted", wt),
            ):
                lookups.append(
                    (
                        f"backends.resolve {name}",
                        lambda b=backend_id: routing.resolve_backend(account.id, b),
                    )
                )
            admin.post("/reserved_domains", {"domain": "*.example.org"})
            lookups.append(
                (
                    "reserved_domains.reservation_of a.b.c.example.org",
                    lambda: reservations.domain_reservation("a.b.c.example.org"),
                )
            )

            calls = []
            events = store.connection().client.meta.events
            events.register("before-call.dynamodb", lambda **kw: calls.append(kw["model"].name))
            print(f"{'lookup':55s} {'calls':>22s} {'p50 ms':>8s} {'p99 ms':>8s}")
            for name, lookup in lookups:
                assert lookup() is not None, name
                calls.clear()
                lookup()
                per_lookup = ",".join(calls)
                times = []
                for _ in range(SAMPLES):
                    start = time.perf_counter()
                    lookup()
                    times.append((time.perf_counter() - start) * 1000)
                print(
                    f"{name:55s} {per_lookup:>22s} {statistics.median(times):8.2f} "
                    f"{percentile(times, 99):8.2f}"
                )


if __name__ == "__main__":
    main()
