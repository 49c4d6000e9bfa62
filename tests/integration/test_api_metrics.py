"""`make run`'s API server's /metrics (scripts/api_metrics.py): on its own loopback listener
(API_METRICS_PORT), never on the API's port; parses as Prometheus text and moves with
requests; store calls are timed."""

import tempfile

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from stacks.api import ApiProcess
from stacks.ports import free_port
from tests.support.api import HttpApi


def _value(text, name, **labels):
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture(scope="module")
def metered():
    metrics_port = free_port()
    with tempfile.TemporaryDirectory(prefix="api-metrics-") as data_dir:
        stack = ApiProcess(data_dir=data_dir, extra_env={"API_METRICS_PORT": str(metrics_port)})
        stack.start()
        try:
            yield stack, f"http://127.0.0.1:{metrics_port}/metrics"
        finally:
            stack.stop()


def test_api_metrics_parse_and_move_with_requests(metered):
    stack, url = metered
    before = requests.get(url, timeout=10).text
    api = HttpApi(stack)
    account = api.new_account()
    for _ in range(3):
        assert account.admin.get("/ip_policies").status == 200
    assert account.admin.get("/ip_policies/nope").status == 404
    after = requests.get(url, timeout=10).text
    assert (
        _value(after, "api_requests_total", method="GET", status_class="2xx")
        - _value(before, "api_requests_total", method="GET", status_class="2xx")
        >= 3
    )
    assert (
        _value(after, "api_requests_total", method="GET", status_class="4xx")
        - _value(before, "api_requests_total", method="GET", status_class="4xx")
        >= 1
    )
    assert _value(after, "api_request_duration_seconds_count", method="GET") >= 4
    assert _value(after, "store_call_duration_seconds_count", operation="Query") >= 3
    assert _value(after, "process_resident_memory_bytes") > 0


def test_metrics_are_not_on_the_api_port(metered):
    stack, _ = metered
    resp = requests.get(stack.base_url + "/metrics", timeout=10)
    assert resp.status_code in (401, 403, 404)
    assert "api_requests_total" not in resp.text
