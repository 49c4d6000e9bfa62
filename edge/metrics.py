"""The edge's operator endpoint (``EDGE_METRICS_PORT``; off when unset): Prometheus metrics
and the muxado stream table of one session, on 127.0.0.1 like every listener.

- ``GET /metrics``: the Prometheus text format (``prometheus_client``), computed when scraped:
  agent sessions, tunnels, muxado streams open by who opened them, finished streams waiting
  for the agent's FIN, and the process's own metrics (RSS, CPU, open files).
- ``GET /limits``: every bound and quota in force (JSON).
- ``GET /sessions/<id>``: ``{"streams_open", "edge_opened", "agent_opened", "lingering"}``
  of that session (404 when this instance does not hold it).

Bounds: a request head of at most 8 KiB that arrives within 5 s; one request per connection.
"""

import asyncio
import dataclasses
import json
import logging
from typing import Any, Iterator, Tuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from edge import events, open_files
from edge.connections import connection_handler

log = logging.getLogger("edge.metrics")

HEAD_LIMIT = 8 * 1024
HEAD_TIMEOUT = 5.0


class _EdgeCollector:
    def __init__(self, edge: Any):
        self.edge = edge

    def collect(self) -> Iterator[Metric]:
        sessions = [s for s in list(self.edge.sessions) if not s.ended]
        yield GaugeMetricFamily(
            "edge_agent_sessions", "Agent sessions open on this instance", value=len(sessions)
        )
        yield GaugeMetricFamily(
            "edge_tunnels", "Tunnels bound on this instance", value=len(self.edge.registry.by_id)
        )
        streams = GaugeMetricFamily(
            "edge_mux_streams_open",
            "muxado streams in the session tables, by who opened them",
            labels=["opened_by"],
        )
        streams.add_metric(["edge"], sum(s.mux.local_open for s in sessions))
        streams.add_metric(["agent"], sum(s.mux.remote_open for s in sessions))
        yield streams
        # the caps are applied by Python (HTTPS, TCP, connections the core handed over) and
        # by the core (the plain-HTTP listener's connections it holds): the sums
        admission = self.edge.admission
        core = self.edge.carrier.public_counters()
        yield GaugeMetricFamily(
            "edge_public_connections", "Public connections held", value=admission.total + core.held
        )
        yield CounterMetricFamily(
            "edge_public_connections_evicted",
            "Waiting public connections closed to make room",
            value=admission.evicted + core.evicted,
        )
        yield CounterMetricFamily(
            "edge_public_connections_refused",
            "Public connections refused at a cap",
            value=admission.refused + core.refused,
        )
        yield CounterMetricFamily(
            "edge_accept_failures",
            "Connections an asyncio listener could not accept: no descriptor or memory left",
            value=open_files.Failures.count,
        )
        yield CounterMetricFamily(
            "edge_core_http_requests",
            "Public HTTP requests the compiled core served by itself (plain routes)",
            value=core.served,
        )
        yield CounterMetricFamily(
            "edge_core_http_handed_over",
            "Public HTTP connections the compiled core handed to Python",
            value=core.handed,
        )
        yield GaugeMetricFamily(
            "edge_core_http_routes",
            "Hosts whose requests the compiled core serves by itself",
            value=self.edge.carrier.route_count(),
        )
        decider = self.edge.fast_path.decider
        yield CounterMetricFamily(
            "edge_core_http_decided",
            "Requests of decided routes (a traffic policy's request phase run on the head the "
            "compiled core read) that Python decided: forwarded, answered or closed",
            value=decider.decided,
        )
        yield CounterMetricFamily(
            "edge_core_http_decisions_handed_back",
            "Requests of decided routes whose connection Python took back (the route changed)",
            value=decider.handed,
        )
        yield GaugeMetricFamily(
            "edge_core_http_deciding",
            "Requests of decided routes waiting for Python's decision now",
            value=self.edge.carrier.deciding(),
        )
        held, held_bytes = self.edge.carrier.held_counts()
        yield CounterMetricFamily(
            "edge_core_http_held",
            "Requests of decided routes the compiled core served by a decision Python made for "
            "an earlier request with the same facts (a held decision), Python not asked",
            value=held,
        )
        yield GaugeMetricFamily(
            "edge_core_held_decision_bytes",
            "Bytes of the held decisions and their keys, every route's",
            value=held_bytes,
        )
        yield GaugeMetricFamily(
            "edge_core_quiet_routes",
            "Plain routes whose requests the compiled core counts without a record of each "
            "(nothing wanted of them: edge/fast_path.py)",
            value=self.edge.carrier.quiet_count(),
        )
        carrying, carried = self.edge.carrier.splice_counts()
        yield GaugeMetricFamily(
            "edge_core_carried_connections",
            "Connections whose bytes the compiled core carries once Python decided (TCP, TLS "
            "passthrough, upgraded HTTP/1.1, a cluster's relayed connections)",
            value=carrying,
        )
        yield CounterMetricFamily(
            "edge_core_carried_connections_ended",
            "Connections the compiled core carried to their end",
            value=carried,
        )
        relayed, relays_refused = self.edge.carrier.relay_counts()
        yield CounterMetricFamily(
            "edge_core_relayed",
            "A cluster's connections the compiled core relayed to the instance holding their "
            "endpoint by itself (a relay route: edge/fast_path.py FastPath.relay)",
            value=relayed,
        )
        yield CounterMetricFamily(
            "edge_core_relays_refused",
            "Relay routes' connections the holder did not take (or could not be reached): "
            "handed to Python",
            value=relays_refused,
        )
        yield GaugeMetricFamily(
            "edge_mux_streams_lingering",
            "Streams the edge finished, waiting for the agent's FIN",
            value=sum(s.mux.lingering for s in sessions),
        )


def limits_of(edge: Any) -> dict:
    """Every bound and quota in force on this instance (docs/SECURITY.md says what each does)."""
    from edge import agents, server, session

    settings = edge.settings
    return {
        "quotas": dataclasses.asdict(settings.limits),
        "public_connections": {
            "max": settings.max_connections,
            "max_per_address": settings.max_connections_per_address,
            "head_timeout_s": settings.head_timeout,
            "idle_timeout_s": settings.idle_timeout,
        },
        "agent_connections": {
            "auth_timeout_s": agents.AUTH_TIMEOUT,
            "max_unauthenticated": server.MAX_UNAUTHENTICATED,
            "max_unauthenticated_per_address": server.MAX_UNAUTHENTICATED_PER_ADDRESS,
            "pre_auth_streams": session.PRE_AUTH_STREAMS,
            "pre_auth_bytes": session.PRE_AUTH_BYTES,
            "max_agent_streams": session.MAX_STREAMS,
            "max_edge_streams": session.MAX_LOCAL_STREAMS,
            "heartbeat_interval_s": list(agents.HEARTBEAT_INTERVAL_RANGE),
            "heartbeat_tolerance_s": list(agents.HEARTBEAT_TOLERANCE_RANGE),
        },
    }


def session_streams(session: Any) -> dict:
    mux = session.mux
    return {
        "streams_open": mux.open_streams,
        "edge_opened": mux.local_open,
        "agent_opened": mux.remote_open,
        "lingering": mux.lingering,
    }


class MetricsServer:
    def __init__(self, edge: Any):
        self.edge = edge
        self.registry = CollectorRegistry()
        self.registry.register(_EdgeCollector(edge))
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(events.Collector(edge))  # requests, latency, events, store

    @connection_handler
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except (
            asyncio.LimitOverrunError,
            asyncio.IncompleteReadError,
            asyncio.TimeoutError,
            ConnectionError,
        ):
            writer.close()
            return
        status, ctype, body = self.answer(head.split(b"\r\n", 1)[0])
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n"
            % (status, _REASONS[status], ctype.encode(), len(body))
            + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    def answer(self, request_line: bytes) -> Tuple[int, str, bytes]:
        parts = request_line.split(b" ")
        if len(parts) != 3 or parts[0] != b"GET":
            return 400, "text/plain", b"GET /metrics, /limits or /sessions/<id>\n"
        path = parts[1].decode("latin-1")
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", generate_latest(self.registry)
        if path == "/limits":
            return 200, "application/json", json.dumps(limits_of(self.edge), indent=1).encode()
        if path.startswith("/sessions/"):
            session = self.edge.registry.sessions.get(path[len("/sessions/") :])
            if session is not None:
                return 200, "application/json", json.dumps(session_streams(session)).encode()
        return 404, "text/plain", b"not found\n"


_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}


async def start(edge: Any, host: str, port: int) -> asyncio.Server:
    server = MetricsServer(edge)
    return await asyncio.start_server(server.handle, host, port, limit=HEAD_LIMIT)
