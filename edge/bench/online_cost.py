"""Store writes of the online state per agent session: today's design (each session
heartbeats its own item) against per-instance leases with only transitions written
(docs/CLUSTER.md), measured by driving the real chalicelib.core.online / instances calls for
thousands of sessions against the embedded store (scripts/embedded_store.py, a process), and
counting every write call the store client makes. Then the monthly on-demand cost of each at
1k / 100k / 1M agents on 100 instances.

    .venv/bin/python edge/bench/online_cost.py [--sessions 1000] [--instances 4]
        [--simulated-seconds 30] [--reconnects-per-day 1]

Simulated time: the clock of chalicelib.core.online is advanced by the script (heartbeat every
15 s: EDGE_CHECK_SECONDS 5 x HEARTBEAT_EVERY 3; lease renewal every RENEW_SECONDS), so the
run takes the store's time for the calls, not wall time.
"""

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, PROJECT_DIR)

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
PRICE_PER_MILLION_WRITES = 0.625  # USD, DynamoDB on-demand, us-east-1 standard (Nov 2024)
MONTH = 30 * 86400
HEARTBEAT_SECONDS = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Counter:
    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0

    def __call__(self, model: object = None, params: object = None, **kwargs: object) -> None:
        """Write request units, an item under 1 KB each (a transaction's items count twice,
        as DynamoDB bills them)."""
        name = getattr(model, "name", "")
        body = params.get("body", {}) if isinstance(params, dict) else {}
        if name == "TransactWriteItems":
            self.writes += (
                2 * len(body.get("TransactItems", []) if isinstance(body, dict) else []) or 2
            )
        elif name == "BatchWriteItem":
            items = body.get("RequestItems", {}) if isinstance(body, dict) else {}
            self.writes += sum(len(v) for v in items.values()) or 1
        elif name in WRITES:
            self.writes += 1
        else:
            self.reads += 1


def monthly(writes_per_second: float) -> float:
    return writes_per_second * MONTH / 1e6 * PRICE_PER_MILLION_WRITES


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--simulated-seconds", type=float, default=30.0)
    parser.add_argument("--reconnects-per-day", type=float, default=1.0)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="online-cost-")
    port = free_port()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench" + secrets.token_hex(4),
        "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16),
        "AWS_DEFAULT_REGION": "us-east-1",
        "DYNAMODB_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "TABLE_NAME": "online-cost",
    }
    store_proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(PROJECT_DIR, "scripts", "embedded_store.py"),
            "--port",
            str(port),
            "--data-dir",
            tmp,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    os.environ.update(env)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        from chalicelib.core import instances, online, store

        store.configure()
        store.create_table()
        counter = Counter()
        client = online.raw_client()
        client.meta.events.register("before-call.dynamodb.*", counter)
        clock = [time.time()]
        online.now = lambda: clock[0]  # simulated time

        # connect: what a session's start writes (session, tunnel + endpoint, claim)
        before = counter.writes
        sessions = []
        for i in range(args.sessions):
            account, sid = f"acct_{i % 50}", online.new_session_id()
            instance = f"edge_{i % args.instances}"
            online.session_started(
                account_id=account,
                session_id=sid,
                credential_id="cr_x",
                instance_id=instance,
                agent_version="1",
                os="linux",
                ip="127.0.0.1",
                metadata="",
                region="local",
            )
            tid = online.new_tunnel_id()
            name = f"s{i}.tunnels.localhost"
            online.claim_hostname(
                name, account_id=account, endpoint_id="ep_" + tid[3:], instance_id=instance
            )
            online.tunnel_started(
                account_id=account,
                session_id=sid,
                tunnel_id=tid,
                instance_id=instance,
                proto="https",
                public_url=f"https://{name}",
                hostname=name,
                port=None,
                labels=None,
                forwards_to="",
                metadata="",
                endpoint_id="ep_" + tid[3:],
                traffic_policy="",
                pooling_enabled=False,
                bindings=["public"],
            )
            sessions.append((account, sid, instance))
        connect_writes = (counter.writes - before) / args.sessions

        # today: every session heartbeats its item every 15 s
        before, start = counter.writes, time.monotonic()
        rounds = int(args.simulated_seconds // HEARTBEAT_SECONDS)
        for _ in range(rounds):
            clock[0] += HEARTBEAT_SECONDS
            for account, sid, instance in sessions:
                online.session_heartbeat(account, sid, instance)
        today_per_session = (counter.writes - before) / args.simulated_seconds / args.sessions
        took = time.monotonic() - start

        # proposed: one lease per instance every RENEW_SECONDS; sessions write nothing
        before = counter.writes
        lease_rounds = int(args.simulated_seconds // instances.RENEW_SECONDS)
        for _ in range(lease_rounds):
            clock[0] += instances.RENEW_SECONDS
            for k in range(args.instances):
                instances.register(f"edge_{k}", f"127.0.0.1:{7000 + k}")
        lease_per_instance = (counter.writes - before) / args.simulated_seconds / args.instances

        # disconnect: what a session's end writes
        before = counter.writes
        for account, sid, _ in sessions[:200]:
            online.session_ended(account, sid)
        end_writes = (counter.writes - before) / min(200, len(sessions))
    finally:
        store_proc.terminate()
        store_proc.wait()
    transitions = connect_writes + end_writes
    print(
        f"sessions driven: {args.sessions} on {args.instances} instances, "
        f"{args.simulated_seconds:.0f} simulated seconds ({took:.1f}s of heartbeats)"
    )
    print(f"write units per connect: {connect_writes:.1f}; per disconnect: {end_writes:.1f}")
    print(
        f"today:    {today_per_session:.4f} writes/s per session (heartbeat every "
        f"{HEARTBEAT_SECONDS:.0f} s)"
    )
    per_day = args.reconnects_per_day / 86400
    print(
        f"proposed: {lease_per_instance:.3f} writes/s per instance (lease) + "
        f"{transitions * per_day:.6f} writes/s per session "
        f"({args.reconnects_per_day:g} reconnect a day x {transitions:.1f} writes)"
    )
    print(
        f"{'agents':>10} {'today w/s':>11} {'today $/mo':>11} {'proposed w/s':>13} "
        f"{'proposed $/mo':>14}   (100 instances, ${PRICE_PER_MILLION_WRITES}/M writes)"
    )
    rows: Dict[int, tuple] = {}
    for agents in (1_000, 100_000, 1_000_000):
        today = agents * today_per_session
        proposed = 100 * lease_per_instance + agents * transitions * per_day
        rows[agents] = (today, proposed)
        print(
            f"{agents:>10,} {today:>11,.1f} {monthly(today):>11,.0f} {proposed:>13,.1f} "
            f"{monthly(proposed):>14,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
