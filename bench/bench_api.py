"""`make bench`: the service over HTTP on loopback (scripts/serve.py = chalice local + moto).

Measures, for /api_keys:
1. create / get / list latency (p50, p99) and throughput, REQUESTS requests per kind with
   CONCURRENCY client threads;
2. the latency of one list page (limit=10) in an account holding 10 keys and in one holding
   1000: a page is one Query of limit+1 items, so its cost must not grow with the account.

Numbers are for this machine and the local stack (moto, single-process dev server); they
compare requests with each other, they do not predict Lambda + DynamoDB latencies.
"""
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import requests

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_DIR)
for _name, _value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                      "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ.setdefault(_name, _value)

from tests.support.api import HttpApi, LocalStack  # noqa: E402




REQUESTS = int(os.environ.get("BENCH_REQUESTS", "500"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "4"))
PAGE_SAMPLES = int(os.environ.get("BENCH_PAGE_SAMPLES", "200"))


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(kind, count, make_request):
    def one(i):
        start = time.perf_counter()
        status = make_request(i)
        return time.perf_counter() - start, status

    start = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        results = list(pool.map(one, range(count)))
    wall = time.perf_counter() - start
    latencies = [r[0] * 1000 for r in results]
    bad = [r[1] for r in results if r[1] >= 400]
    print(f"{kind:<28} n={count:<5} p50={percentile(latencies, 50):7.2f} ms  "
          f"p99={percentile(latencies, 99):7.2f} ms  mean={statistics.mean(latencies):7.2f} ms  "
          f"{count / wall:7.1f} req/s" + (f"  ERRORS={len(bad)}" if bad else ""), flush=True)
    return latencies


def main():
    with tempfile.TemporaryDirectory(prefix="bench-api-") as data_dir:
        stack = LocalStack(data_dir=data_dir).start()  # what `make run` runs, store included
        try:
            api = HttpApi(stack)
            small, large, main_acct = api._seed(3, False)
            base = stack.base_url
            sessions = [requests.Session() for _ in range(CONCURRENCY)]

            def call(i, method, path, token, body=None):
                headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
                kwargs = {}
                if body is not None:
                    kwargs["json"] = body
                return sessions[i % CONCURRENCY].request(method, base + path, headers=headers,
                                                         timeout=30, **kwargs)

            token = main_acct["admin"]["token"]
            print(f"local stack {base}; {REQUESTS} requests per kind, concurrency {CONCURRENCY}")
            created = []

            def create(i):
                resp = call(i, "POST", "/api_keys", token, {"description": f"bench {i}"})
                if resp.status_code == 201:
                    created.append(resp.json()["id"])
                return resp.status_code

            run("POST /api_keys", REQUESTS, create)
            run("GET /api_keys/{id}", REQUESTS,
                lambda i: call(i, "GET", f"/api_keys/{created[i % len(created)]}", token).status_code)
            run("GET /api_keys (limit=100)", REQUESTS,
                lambda i: call(i, "GET", "/api_keys?limit=100", token).status_code)

            # Page cost vs account size: fill one account with 1000 keys, another with 10.
            for account, total in ((small, 10), (large, 1000)):
                have = 2  # seed gave it an admin and a member key
                run(f"  fill {total} keys", total - have,
                    lambda i, t=account["admin"]["token"]: call(
                        i, "POST", "/api_keys", t, {"description": "fill"}).status_code)
            print("list page (limit=10), sequential:")
            results = {}
            for account, total in ((small, 10), (large, 1000)):
                t = account["admin"]["token"]
                assert len(call(0, "GET", "/api_keys?limit=100", t).json()["keys"]) == min(total, 100)
                latencies = []
                for _ in range(PAGE_SAMPLES):
                    start = time.perf_counter()
                    resp = call(0, "GET", "/api_keys?limit=10", t)
                    latencies.append((time.perf_counter() - start) * 1000)
                    assert resp.status_code == 200 and len(resp.json()["keys"]) == 10
                results[total] = latencies
                print(f"  account with {total:>4} keys     n={PAGE_SAMPLES:<5} "
                      f"p50={percentile(latencies, 50):7.2f} ms  "
                      f"p99={percentile(latencies, 99):7.2f} ms")
            ratio = percentile(results[1000], 50) / percentile(results[10], 50)
            print(f"  p50 ratio 1000 keys / 10 keys: {ratio:.2f} (1.0 = independent of size)")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
