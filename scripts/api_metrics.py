"""`make run`'s API server's operator listener: ``GET /metrics`` in the Prometheus text format
(``prometheus_client``) on 127.0.0.1:``API_METRICS_PORT`` (off when unset; ``0``: any free
port, printed at start: what the Makefile's ``run`` sets). Never on the API's own port, so
an API exposed beyond the loopback does not expose its metrics.

Metrics: ``api_requests_total{method, status_class}``, ``api_request_duration_seconds``
(histogram by method), ``store_call_duration_seconds{operation}`` (every DynamoDB call of the
process: edge.events.time_store_calls), and the process's own (RSS, CPU, open files).
"""

import time
from typing import Any, Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.process_collector import ProcessCollector

from edge import events

REQUESTS = Counter(
    "api_requests",
    "API requests answered, by method and status class",
    ["method", "status_class"],
    registry=None,
)
LATENCY = Histogram(
    "api_request_duration_seconds",
    "API request handling time, by method",
    ["method"],
    registry=None,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


class _Collector:
    def collect(self) -> Any:
        yield from REQUESTS.collect()
        yield from LATENCY.collect()
        yield from events.STORE_LATENCY.collect()


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(_Collector())
    reg.register(ProcessCollector(registry=None))
    return reg


def timed(app: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``app`` with every answer counted and timed."""
    events.time_store_calls()

    def run(req: Any) -> Any:
        started = time.perf_counter()
        response = app(req)
        LATENCY.labels(req.method).observe(time.perf_counter() - started)
        REQUESTS.labels(req.method, f"{response.status // 100}xx").inc()
        return response

    return run


def start(port: Optional[int], http_server: Any, error: Any) -> Optional[Any]:
    """The operator listener on the loopback, or None when ``port`` is None."""
    if port is None:
        return None
    reg = registry()

    def answer(req: Any) -> Any:
        if req.method == "GET" and req.target == "/metrics":
            return http_server.Response(
                200, [("Content-Type", "text/plain; version=0.0.4")], generate_latest(reg)
            )
        return http_server.Response(404, [("Content-Type", "text/plain")], b"GET /metrics\n")

    return http_server.HttpServer("127.0.0.1", port, answer, error, max_body=0).start()
