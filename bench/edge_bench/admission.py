"""Agent admission against ``make run``'s embedded store: how fast agents authenticate with
10 and with 1,000 sessions already live, and what the store spends per authentication and per
idle live session.

    PYTHONPATH=. .venv/bin/python bench/edge_bench/admission.py [--live 10,1000] [--agents 1000]
        [--concurrency 16] [--credentials 40] [--idle-seconds 60] [--json out.json]

The stack is the test stacks' (stacks/api.py: scripts/serve.py, whose embedded store,
scripts/embedded_store.py, is a child process; stacks/edge.py: python -m edge), one account
with ``--credentials`` authtokens (sessions spread over them round-robin, so the default
quotas hold: 100 live sessions and 120 Auths a minute per credential). Live sessions and the
agents that authenticate are raw protocol clients (TLS + muxado + Auth, as
tests/edge/test_hostile_agents.py's): a live session heartbeats on its heartbeat stream every
10 s (the SDKs' default interval) and reads the edge's echoes. Per level:

1. ``live`` sessions are opened (not measured), then the store and the edge idle for
   ``--idle-seconds``: the store's CPU per minute per live session (the edge's check loop,
   lease renewals, command polls; no per-session write: docs/STORE.md) is read from /proc;
2. ``--agents`` agents authenticate, ``--concurrency`` at a time, each kept open: sessions/s
   (wall: the machine is shared, so read it with the load printed beside it) and the CPU per
   authentication of the store process and of the edge (/proc, whatever the load);
3. one official SDK agent (stacks/agents.py's SdkAgent, the Python SDK) starts and binds an
   HTTP endpoint with all of them live: its start time is printed as a check.

Then all sessions close (the edge's session_ended for each, not measured).
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
    os.environ.setdefault(_name, "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

from edge import protocol  # noqa: E402
from stacks import muxado  # noqa: E402
from stacks.agents import SdkAgent  # noqa: E402
from stacks.api import ApiProcess  # noqa: E402
from stacks.edge import EdgeProcess  # noqa: E402

HEARTBEAT_SECONDS = 10.0


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def store_pid(parent: int) -> int:
    """The embedded store: the child of scripts/serve.py running scripts/embedded_store.py."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read()
        except OSError:
            continue
        if ppid == parent and b"embedded_store.py" in argv:
            return int(pid)
    raise RuntimeError("the embedded store's process was not found")


def load_average() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


class Session:
    """One raw agent session: Auth, then a heartbeat every HEARTBEAT_SECONDS; the edge's
    frames are read (and dropped) so its windows never fill."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.tasks: List[asyncio.Task] = []

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext, token: str) -> "Session":
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
        )
        auth = {
            "Version": ["2"],
            "ClientId": "",
            "Extra": {
                "AuthToken": token,
                "OS": "bench",
                "Version": "bench",
                "HeartbeatInterval": int(HEARTBEAT_SECONDS * 1e9),
                "HeartbeatTolerance": int(15 * 1e9),
            },
        }
        body = protocol.stream_type(protocol.AUTH) + json.dumps(auth).encode()
        writer.write(muxado.data(1, body, syn=True))
        await writer.drain()
        parser, reply = muxado.FrameParser(), protocol.JsonReader()
        async with asyncio.timeout(120):
            answer = None
            while answer is None:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the edge closed the session before its Auth reply")
                for frame in parser.feed(data):
                    if frame.stream_id == 1 and frame.type == muxado.DATA and frame.payload:
                        answer = reply.feed(frame.payload) if answer is None else answer
        if answer.get("Error"):
            raise RuntimeError(f"Auth refused: {answer['Error']}")
        session = cls(reader, writer)
        session.tasks = [
            asyncio.ensure_future(session._drain()),
            asyncio.ensure_future(session._beat()),
        ]
        return session

    async def _drain(self) -> None:
        while await self.reader.read(65536):
            pass

    async def _beat(self) -> None:
        self.writer.write(
            muxado.data(3, protocol.stream_type(protocol.HEARTBEAT) + os.urandom(4), syn=True)
        )
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            self.writer.write(muxado.data(3, os.urandom(4)))
            await self.writer.drain()

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.writer.close()


async def open_many(
    port: int, ctx: ssl.SSLContext, tokens: List[str], count: int, concurrency: int, first: int
) -> List[Session]:
    opened: List[Session] = []
    queue = iter(range(first, first + count))

    async def worker() -> None:
        for n in queue:
            opened.append(await Session.open(port, ctx, tokens[n % len(tokens)]))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return opened


async def level(args: argparse.Namespace, edge: EdgeProcess, store: int, tokens, live: int):
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    edge_pid = edge.process.pid
    held = await open_many(edge.agent_port, ctx, tokens, live, args.concurrency, 0)
    await asyncio.sleep(2)  # the last opens' writes done
    idle_store, idle_edge, idle_at = cpu_seconds(store), cpu_seconds(edge_pid), time.monotonic()
    await asyncio.sleep(args.idle_seconds)
    idle_wall = time.monotonic() - idle_at
    idle_store = cpu_seconds(store) - idle_store
    idle_edge = cpu_seconds(edge_pid) - idle_edge
    load_before = load_average()
    s0, e0, t0 = cpu_seconds(store), cpu_seconds(edge_pid), time.monotonic()
    held += await open_many(edge.agent_port, ctx, tokens, args.agents, args.concurrency, live)
    wall = time.monotonic() - t0
    s1, e1 = cpu_seconds(store), cpu_seconds(edge_pid)
    row = {
        "live": live,
        "agents": args.agents,
        "concurrency": args.concurrency,
        "seconds": round(wall, 1),
        "sessions_per_s": round(args.agents / wall, 1),
        "store_cpu_ms_per_auth": round(1000 * (s1 - s0) / args.agents, 2),
        "edge_cpu_ms_per_auth": round(1000 * (e1 - e0) / args.agents, 2),
        "idle_store_cpu_ms_per_min_per_live_session": round(
            1000 * idle_store * 60 / idle_wall / max(1, live), 3
        ),
        "idle_store_cpu_pct": round(100 * idle_store / idle_wall, 1),
        "idle_edge_cpu_pct": round(100 * idle_edge / idle_wall, 1),
        "load": f"{load_before} -> {load_average()}",
    }
    return row, held


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--live", default="10,1000")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--credentials", type=int, default=40)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--json", default="")
    parser.add_argument("--no-sdk", action="store_true", help="skip the SDK agent's check")
    args = parser.parse_args()
    rows: List[Dict] = []
    for live in [int(n) for n in args.live.split(",")]:
        with tempfile.TemporaryDirectory(prefix="admission-") as tmp:
            stack = ApiProcess(data_dir=os.path.join(tmp, "api"))
            os.makedirs(stack.data_dir)
            stack.start()
            edge = EdgeProcess(data_dir=os.path.join(tmp, "edge"), store_url=stack.store_url)
            os.makedirs(edge.data_dir)
            edge.start(stack.store_env())
            held: List[Session] = []
            loop = asyncio.new_event_loop()
            try:
                admin = stack.new_admin("admission")
                tokens = [
                    admin.post("/credentials", {"description": f"c{n}"}).json["token"]
                    for n in range(args.credentials)
                ]
                store = store_pid(stack.process.pid)
                row, held = loop.run_until_complete(level(args, edge, store, tokens, live))
                if not args.no_sdk:
                    started = time.monotonic()
                    agent = SdkAgent(edge, tokens[0], [{"proto": "http"}])
                    try:
                        bound = agent.start()
                        assert bound and bound[0].get("url"), bound
                        row["sdk_agent_start_s"] = round(time.monotonic() - started, 2)
                    finally:
                        agent.stop()
                rows.append(row)
                print(json.dumps(row), flush=True)
            finally:
                for session in held:
                    session.close()
                loop.run_until_complete(asyncio.sleep(0.5))
                loop.close()
                edge.stop()
                stack.stop()
    print(f"machine: {os.cpu_count()} cores")
    print(
        f"{'live':>5} {'agents':>6} {'s':>6} {'auth/s':>7} {'store ms/auth':>13} "
        f"{'edge ms/auth':>12} {'idle store ms/min/session':>25}  load"
    )
    for r in rows:
        print(
            f"{r['live']:>5} {r['agents']:>6} {r['seconds']:>6} {r['sessions_per_s']:>7} "
            f"{r['store_cpu_ms_per_auth']:>13} {r['edge_cpu_ms_per_auth']:>12} "
            f"{r['idle_store_cpu_ms_per_min_per_live_session']:>25}  {r['load']}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
