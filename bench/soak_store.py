"""`make soak`: the `make run` stack under a long write load, and list pages vs table size.

1. SOAK_WRITES (default 10,000) writes over HTTP, SOAK_CONCURRENCY (default 8) clients:
   create an API key, delete it, again (so the table does not grow: any memory growth is a
   leak). Prints req/s and the RSS of every process of the stack (store, api, serve.py) every
   2,000 writes, and the data directory's size (compaction keeps it bounded).
2. A list page (``GET /api_keys?limit=100``) of an account holding 100 keys, timed with 100
   items in the table, then with 20,000 more items in other accounts' partitions, then with
   20,000 keys in the account's own partition (written straight to the store, with the
   stack's secret). Query reads one partition, through a sorted index: the ratios should be
   about 1.0.
3. The restart: how long the store takes to replay that data.

Numbers are for this machine (2 shared cores, loopback); run it alone for clean numbers.
"""

import json
import os
import re
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from stacks.api import ApiProcess


WRITES = int(os.environ.get("SOAK_WRITES", "10000"))
CONCURRENCY = int(os.environ.get("SOAK_CONCURRENCY", "8"))
FILL = int(os.environ.get("SOAK_FILL", "20000"))
PAGE_SAMPLES = int(os.environ.get("SOAK_PAGE_SAMPLES", "100"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as handle:
        return int(re.search(r"VmRSS:\s+(\d+)", handle.read()).group(1))


def stack_pids(stack):
    pid = stack.process.pid
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        children = [int(p) for p in handle.read().split()]
    names = {}
    for child in children:
        with open(f"/proc/{child}/cmdline", "rb") as handle:
            cmd = handle.read().decode()
        names["store" if "embedded_store" in cmd else "api"] = child
    names["serve.py"] = pid
    return names


def dir_kb(path):
    return (
        sum(
            os.path.getsize(os.path.join(root, f))
            for root, _, files in os.walk(path)
            for f in files
        )
        // 1024
    )


def rss_line(stack):
    return "  ".join(
        f"{name} {rss_kb(pid) / 1024:6.1f} MB" for name, pid in sorted(stack_pids(stack).items())
    )


def soak(stack, token):
    sessions = [requests.Session() for _ in range(CONCURRENCY)]
    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
    errors = []

    def pair(i):
        session = sessions[i % CONCURRENCY]
        resp = session.post(
            stack.base_url + "/api_keys", headers=headers, json={"description": "soak"}, timeout=30
        )
        if resp.status_code != 201:
            errors.append(resp.status_code)
            return
        gone = session.delete(resp.json()["uri"], headers=headers, timeout=30)
        if gone.status_code != 204:
            errors.append(gone.status_code)

    print(f"soak: {WRITES} writes (create + delete pairs), {CONCURRENCY} clients")
    print(
        f"  {'writes':>7}  {'req/s':>7}  RSS: {rss_line(stack)}  data {dir_kb(stack.data_dir)} KB"
    )
    first = {name: rss_kb(pid) for name, pid in stack_pids(stack).items()}
    done, step = 0, 2000
    rates = []
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        while done < WRITES:
            pairs = min(step, WRITES - done) // 2
            start = time.perf_counter()
            list(pool.map(pair, range(pairs)))
            rate = pairs * 2 / (time.perf_counter() - start)
            rates.append(rate)
            done += pairs * 2
            print(
                f"  {done:>7}  {rate:7.1f}  RSS: {rss_line(stack)}  "
                f"data {dir_kb(stack.data_dir)} KB",
                flush=True,
            )
    last = {name: rss_kb(pid) for name, pid in stack_pids(stack).items()}
    print(
        "  RSS growth over the soak: "
        + "  ".join(f"{n} {(last[n] - first[n]) / 1024:+.1f} MB" for n in sorted(last))
        + f"; mean {statistics.mean(rates):.1f} req/s"
        + (f"; ERRORS {len(errors)}: {errors[:5]}" if errors else "; no errors")
    )


def page_p50(stack, token):
    session = requests.Session()
    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
    times = []
    for _ in range(PAGE_SAMPLES):
        start = time.perf_counter()
        resp = session.get(stack.base_url + "/api_keys?limit=100", headers=headers, timeout=30)
        times.append((time.perf_counter() - start) * 1000)
        assert resp.status_code == 200 and len(resp.json()["keys"]) == 100, resp.text[:200]
    return statistics.median(times)


def fill(stack, pk, template, count, prefix):
    """``count`` copies of ``template`` under partition ``pk``, straight into the store."""
    from chalicelib.core import ids

    client = stack.store_client()
    items = []
    for _ in range(count):
        key_id = ids.new_id(prefix)
        item = json.loads(json.dumps(template))
        item["pk"] = {"S": pk}
        item["sk"] = {"S": key_id}
        items.append(item)
    for start in range(0, len(items), 25):
        pending = {
            "tunnel-service": [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]
        }
        while pending:
            pending = client.batch_write_item(RequestItems=pending)["UnprocessedItems"]


def pages(stack, token):
    client = stack.store_client()
    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
    session = requests.Session()
    for _ in range(98):  # 100 keys with the bootstrap key and ... one more below
        session.post(stack.base_url + "/api_keys", headers=headers, json={}, timeout=30)
    session.post(stack.base_url + "/api_keys", headers=headers, json={}, timeout=30)
    one = session.get(stack.base_url + "/api_keys?limit=1", headers=headers, timeout=30).json()
    account_id = json.loads(open(os.path.join(stack.data_dir, "local-admin.json")).read())[
        "account_id"
    ]
    pk = f"A#{account_id}#api_key"
    template = client.get_item(
        TableName="tunnel-service", Key={"pk": {"S": pk}, "sk": {"S": one["keys"][0]["id"]}}
    )["Item"]
    count = client.scan(TableName="tunnel-service", Select="COUNT")["Count"]
    print(f"list page (limit=100), median of {PAGE_SAMPLES}:")
    base = page_p50(stack, token)
    print(f"  {count:>6} items in the table, 100 in the partition: {base:7.2f} ms")
    fill(stack, "A#acct_other#api_key", template, FILL, "ak")
    other = page_p50(stack, token)
    print(
        f"  +{FILL} items in another partition:              {other:7.2f} ms  "
        f"(ratio {other / base:.2f})"
    )
    fill(stack, pk, template, FILL, "ak")
    same = page_p50(stack, token)
    print(
        f"  +{FILL} items in the listed partition itself:    {same:7.2f} ms  "
        f"(ratio {same / base:.2f})"
    )


def main():
    with tempfile.TemporaryDirectory(prefix="soak-") as data_dir:
        stack = ApiProcess(data_dir=data_dir).start(bootstrap=True)
        try:
            token = json.loads(open(os.path.join(data_dir, "local-admin.json")).read())["token"]
            soak(stack, token)
            pages(stack, token)
        finally:
            stack.stop()
        started = time.monotonic()
        again = ApiProcess(data_dir=data_dir).start(bootstrap=True)
        took = time.monotonic() - started
        restored = [line for line in again.log().splitlines() if "restored" in line]
        again.stop()
        print(f"restart: stack serving after {took:.1f}s; {restored[0] if restored else ''}")
        print(f"data directory: {dir_kb(data_dir)} KB")


if __name__ == "__main__":
    main()
