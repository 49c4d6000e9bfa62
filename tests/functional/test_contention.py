"""Concurrent writers of one resource: PATCHes of different fields do not conflict.

Each PATCH is one UpdateItem of the fields it sends (chalicelib.core.store.set_fields), so 20 at
once all succeed and every field keeps a value one of its writers sent. Over real HTTP
against the local stack (threaded server, the embedded store); the store's own rule (20
single-field writers at once: every field lands, the version moves by 20) against the
embedded store as a process.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from chalicelib.core import ids, store

WRITERS = 20
FIELDS = ("description", "metadata", "body", "headers")


def _value(field, i):
    return {f"x-writer-{i}": str(i)} if field == "headers" else f"{field}-{i}"


def test_twenty_concurrent_patches_of_different_fields_all_succeed(http_api):
    account = http_api.new_account()
    token = account.admin.token
    backend = account.admin.post("/backends/http_response", {"body": "start"}).json
    url = http_api.base_url + f"/backends/http_response/{backend['id']}"
    headers = {
        "Authorization": f"Bearer {token}",
        "Service-Version": "2",
        "Content-Type": "application/json",
    }
    start = threading.Barrier(WRITERS)

    def patch(i):
        field = FIELDS[i % len(FIELDS)]
        start.wait()
        return requests.patch(url, json={field: _value(field, i)}, headers=headers, timeout=60)

    with ThreadPoolExecutor(WRITERS) as pool:
        responses = list(pool.map(patch, range(WRITERS)))
    assert [r.status_code for r in responses] == [200] * WRITERS, [
        r.text for r in responses if r.status_code != 200
    ]
    final = account.admin.get(f"/backends/http_response/{backend['id']}").json
    for index, field in enumerate(FIELDS):
        sent = [_value(field, i) for i in range(index, WRITERS, len(FIELDS))]
        assert final[field] in sent, (field, final[field])
    assert final["status_code"] == 200


def test_twenty_concurrent_single_field_writes_lose_nothing(http_api):
    # Against the embedded store as a process (what `make run` serves on), as DynamoDB would
    # be: moto's in-process mock is not thread-safe (its ADD lost an increment under load).
    with http_api.service_store():
        _twenty_writers(f"A#{ids.new_id('account')}#thing")


def _twenty_writers(pk):
    item = store.new_item(pk, "th_1", kind="thing", account_id="acct", data={})
    store.commit([store.put_new(item)])
    start = threading.Barrier(WRITERS)

    def write(i):
        start.wait()
        store.write(store.set_fields(pk, "th_1", {f"f{i}": i}))

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, range(WRITERS)))
    stored = store.get(pk, "th_1")
    assert stored.data == {f"f{i}": i for i in range(WRITERS)}
    assert stored.version == 1 + WRITERS
