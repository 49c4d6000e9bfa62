"""bench_peers.py's ``growth`` case: does the edge's cost per request grow with what it holds?

- edge CPU per small GET (20 connections, to one endpoint) with the bench's 3 endpoints, then
  with ``ENDPOINTS`` more bound by more SDK sessions (``PER_AGENT`` each, every agent on an
  account of its own), then with ``SESSIONS`` idle agent sessions more (raw protocol clients
  from this process: TLS + muxado + Auth, as bench/edge_bench/bench_edge.py holds them;
  ``PER_CREDENTIAL`` on each credential);
- the edge's RSS before and after those idle sessions (memory per idle session) and, before
  anything is bound, with ``IN_FLIGHT`` requests in flight (a POST whose head and first bytes
  are sent and whose body never ends: the client connection, its proxy stream and the SDK's
  upstream connection held open), per request.
"""

import asyncio
import json
import ssl
import threading
import time
from typing import Any, Dict, List

from edge import protocol
from stacks import muxado

ENDPOINTS = 200  # --endpoints sets it
# A bind's quota check reads the account's endpoints (one Query: O(n) in the embedded store,
# ~0.2 ms an item) and an Auth's the credential's sessions: 1,000 endpoints of one account
# took over 10 minutes to bind. Spread over accounts and credentials, each bind and each Auth
# reads at most this many.
PER_AGENT = 250
PER_CREDENTIAL = 100
SESSIONS = 1000  # idle sessions send no heartbeat: measured within the edge's 125 s
HEARTBEAT_EVERY = 20.0
IN_FLIGHT = 400  # under the edge's streams per session (480) and connections per address (512)


async def _idle_session(port: int, token: str, ctx: ssl.SSLContext):
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
    )
    auth = json.dumps(
        {
            "Version": ["2"],
            "ClientId": "",
            "Extra": {
                "AuthToken": token,
                "OS": "bench",
                "Version": "bench",
                "HeartbeatInterval": 30 * 10**9,
                "HeartbeatTolerance": 60 * 10**9,
            },
        }
    ).encode()
    writer.write(muxado.data(1, (0).to_bytes(4, "big") + auth, syn=True))
    await writer.drain()
    parser, reply = muxado.FrameParser(), b""
    while not reply.endswith(b"}"):
        chunk = await reader.read(65536)
        if not chunk:
            raise RuntimeError("the edge closed an idle session before answering its Auth")
        for frame in parser.feed(chunk):
            if frame.type == muxado.DATA and frame.stream_id == 1:
                reply += frame.payload
    if b'"Error"' in reply:
        raise RuntimeError(reply.decode())
    # a heartbeat stream (type HEARTBEAT, then a 4-byte id every HEARTBEAT_EVERY seconds, which
    # the edge echoes): a session that sends none is reaped after 125 s, and opening 1,000 on a
    # loaded machine takes longer than that
    writer.write(muxado.data(3, protocol.U32.pack(protocol.HEARTBEAT) + b"beat", syn=True))
    asyncio.ensure_future(_beat(writer))
    return reader, writer


async def _beat(writer) -> None:
    while not writer.is_closing():
        await asyncio.sleep(HEARTBEAT_EVERY)
        if not writer.is_closing():
            writer.write(muxado.data(3, b"beat"))


async def _in_flight(port: int, host: str):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1048576\r\n\r\n".encode()
        + b"x" * 1024
    )
    await writer.drain()
    return reader, writer


class _Holder:
    """An event loop in a thread holding connections open while wrk runs."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.held: List[Any] = []
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coro, timeout: float = 3600) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def open(self, make, count: int, batch: int = 10) -> None:
        """``count`` connections, ``batch`` at a time (an edge whose store is slow on a loaded
        machine closes a session not authenticated within 10 s: those are opened again);
        ``make(i)`` opens the i-th."""

        async def go():
            while len(self.held) < count:
                start = len(self.held)
                got = await asyncio.gather(
                    *(make(start + i) for i in range(min(batch, count - len(self.held)))),
                    return_exceptions=True,
                )
                self.held += [g for g in got if not isinstance(g, BaseException)]

        self.run(go())

    def close(self) -> None:
        async def go():
            for _, writer in self.held:
                writer.close()
            self.held = []

        self.run(go())


def run(
    stack: Any,
    procs: Any,
    seconds: float,
    runs: int,
    endpoints: int = ENDPOINTS,
    sessions: int = SESSIONS,
) -> Dict[str, Any]:
    from bench.edge_bench.bench_peers import (
        Group,
        measure,
        median_of,
        print_http,
        rss_kb,
        tree,
        wrk,
    )

    del tree
    edge_pid = stack.edge.process.pid
    group = Group({"edge": edge_pid, "sdk": stack.agent.pid, "upstream": stack.upstream.pid})

    def get20() -> Dict[str, Any]:
        # A route idle longer than ROUTE_KEEP (the binds, the sessions' opening) is the core's
        # again only from its first request on; a connection handed to Python before that stays
        # Python's: one second of load first, so the runs measure the route in the core.
        wrk(stack.url("edge", "/echo"), 20, 1, stack.tmp, stack.host)
        return median_of(
            [
                measure(
                    group,
                    lambda: wrk(stack.url("edge", "/echo"), 20, seconds, stack.tmp, stack.host),
                )
                for _ in range(runs)
            ]
        )

    rows: Dict[str, Any] = {}
    out: Dict[str, Any] = {"rows": rows}
    rows["edge: 3 endpoints, 1 session"] = get20()
    # requests in flight first: measured after 10,000 sessions closed, the allocator reused
    # what they freed and the figure said nothing
    holder = _Holder()
    time.sleep(1)
    rss2 = rss_kb(edge_pid)
    holder.open(lambda _: _in_flight(stack.edge.http_port, stack.host), IN_FLIGHT)
    time.sleep(2)
    rss3 = rss_kb(edge_pid)
    out["in_flight_request_kb"] = round((rss3 - rss2) / IN_FLIGHT, 1)
    holder.close()
    started = time.time()
    agents = 0
    for first in range(0, endpoints, PER_AGENT):
        binds = [
            {"proto": "http", "upstream": f"http://127.0.0.1:{stack.up_port}"}
            for _ in range(min(PER_AGENT, endpoints - first))
        ]
        admin = stack.api.new_admin(f"growth-{first}")
        token = admin.post("/credentials", {"description": "growth"}).json["token"]
        stack.start_agent(binds, procs, token)
        agents += 1
    out["bind_seconds"] = round(time.time() - started, 1)
    rows[f"edge: {endpoints + 3} endpoints, {agents + 1} sessions"] = get20()
    ctx = ssl.create_default_context(cafile=stack.edge.ca_path)
    admin = stack.api.new_admin("growth-sessions")
    tokens = [
        admin.post("/credentials", {"description": f"idle {i}"}).json["token"]
        for i in range(0, sessions, PER_CREDENTIAL)
    ]
    time.sleep(1)
    rss0 = rss_kb(edge_pid)
    started = time.time()
    holder.open(
        lambda i: _idle_session(stack.edge.agent_port, tokens[i // PER_CREDENTIAL], ctx),
        sessions,
    )
    out["session_seconds"] = round(time.time() - started, 1)
    time.sleep(2)
    rss1 = rss_kb(edge_pid)
    out["idle_session_kb"] = round((rss1 - rss0) / sessions, 1)
    rows[f"edge: {endpoints + 3} endpoints, {sessions + agents + 1} sessions"] = get20()
    holder.close()
    out["edge_rss_mb"] = {
        f"before {IN_FLIGHT} requests in flight": round(rss2 / 1024, 1),
        f"{IN_FLIGHT} requests in flight": round(rss3 / 1024, 1),
        "before sessions": round(rss0 / 1024, 1),
        f"{sessions} idle sessions": round(rss1 / 1024, 1),
    }
    print_http(
        "growth: small GET, 20 connections, to one endpoint",
        rows,
        base="edge: 3 endpoints, 1 session",
    )
    print(
        f"  memory: {out['idle_session_kb']} KiB per idle agent session ({sessions} held; "
        f"edge RSS {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MB), "
        f"{out['in_flight_request_kb']} KiB per request in flight ({IN_FLIGHT} held: "
        f"{rss2 / 1024:.0f} -> {rss3 / 1024:.0f} MB); {endpoints} endpoints bound in "
        f"{out['bind_seconds']} s by {agents} agents, {sessions} idle sessions opened in "
        f"{out['session_seconds']} s"
    )
    return out
