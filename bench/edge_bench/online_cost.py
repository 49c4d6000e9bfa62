"""Store writes of the online state per agent session: the previous design (each session
heartbeats its own item, chalicelib.core.online.session_heartbeat) against the built one
(per-instance leases, only transitions written: docs/CLUSTER.md), measured by driving the real
calls (the edge's own edge.online_keeper.OnlineKeeper and instance registry for the built
design) for thousands of sessions against the embedded store (scripts/embedded_store.py, a
process), and counting every write call the store client makes. Then the monthly on-demand
cost of each at 1k / 100k / 1M agents on 100 instances.

    .venv/bin/python bench/edge_bench/online_cost.py [--sessions 1000] [--instances 4]
        [--simulated-seconds 30] [--reconnects-per-day 1]

Simulated time: the clock of chalicelib.core.online is advanced by the script (heartbeat every
15 s: EDGE_CHECK_SECONDS 5 x 3 checks; lease renewal every instances.renew_seconds(); the
edge's check every EDGE_CHECK_SECONDS), so the run takes the store's time for the calls, not
wall time.
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

from stacks.ports import free_port

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
PRICE_PER_MILLION_WRITES = 0.625  # USD, DynamoDB on-demand, us-east-1 standard (Nov 2024)
MONTH = 30 * 86400
HEARTBEAT_SECONDS = 15.0  # the previous design: EDGE_CHECK_SECONDS 5 x 3 checks
CHECK_SECONDS = 5.0  # EDGE_CHECK_SECONDS' default
COMMAND_POLL_SECONDS = 1.0  # EDGE_COMMAND_POLL_SECONDS' default


class Counter:
    def __init__(self) -> None:
        self.writes = 0
        self.reads = 0

    def __call__(self, model: object = None, params: object = None, **kwargs: object) -> None:
        """Write request units, an item under 1 KB each (a transaction's items count twice,
        as DynamoDB bills them)."""
        name = getattr(model, "name", "")
        body = params if isinstance(params, dict) else {}
        if name == "TransactWriteItems":
            self.writes += 2 * len(body.get("TransactItems", [])) or 2
        elif name == "BatchWriteItem":
            self.writes += sum(len(v) for v in body.get("RequestItems", {}).values()) or 1
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
        from edge.online_keeper import REFRESH_SECONDS, OnlineKeeper

        store.configure()
        store.create_table()
        counter = Counter()
        client = online.raw_client()
        client.meta.events.register("before-parameter-build.dynamodb.*", counter)
        clock = [time.time()]
        online.now = lambda: clock[0]  # simulated time
        names = [f"edge_{k}" for k in range(args.instances)]
        for name in names:  # each instance registers its lease before it takes agents
            instances.register(name, "")

        # connect: what a session's start writes (session, tunnel + endpoint, claim)
        before = counter.writes
        sessions = []
        for i in range(args.sessions):
            account, sid = f"acct_{i % 50}", online.new_session_id()
            instance = names[i % args.instances]
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
                owner_id="usr_x",
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

        # before (the previous design): every session heartbeats its item every 15 s
        before, start = counter.writes, time.monotonic()
        rounds = int(args.simulated_seconds // HEARTBEAT_SECONDS)
        for _ in range(rounds):
            clock[0] += HEARTBEAT_SECONDS
            for account, sid, instance in sessions:
                online.session_heartbeat(account, sid, instance)
        today_per_session = (counter.writes - before) / args.simulated_seconds / args.sessions
        took = time.monotonic() - start

        # after (built): each instance renews its lease (edge/cluster.py, or
        # edge/online_keeper.keep_lease without a cluster), runs the edge's check
        # (OnlineKeeper.check: the TTL refresh of sessions due) every EDGE_CHECK_SECONDS and
        # reads its commands (OnlineKeeper.commands) every EDGE_COMMAND_POLL_SECONDS; the
        # sessions themselves write nothing.
        keepers = {name: OnlineKeeper(name) for name in names}
        held = {name: [(a, s) for a, s, i in sessions if i == name] for name in names}
        for name in names:  # a first check: each session's refresh is scheduled
            keepers[name].check(held[name])
        before, reads_before = counter.writes, counter.reads
        elapsed, next_lease, next_check = 0.0, 0.0, 0.0
        step = min(instances.renew_seconds(), CHECK_SECONDS, COMMAND_POLL_SECONDS)
        while elapsed < args.simulated_seconds:
            elapsed += step
            clock[0] += step
            if elapsed >= next_lease:
                next_lease = elapsed + instances.renew_seconds()
                for name in names:
                    instances.register(name, "")
            if elapsed >= next_check:
                next_check = elapsed + CHECK_SECONDS
                for name in names:
                    keepers[name].check(held[name])
            for name in names:  # every step is a poll (step <= COMMAND_POLL_SECONDS)
                keepers[name].commands()
        steady = counter.writes - before
        lease_per_instance = steady / args.simulated_seconds / args.instances
        reads_per_instance = (
            (counter.reads - reads_before) / args.simulated_seconds / args.instances
        )
        # every session online, though its own item was last written long ago
        visible = sum(
            len(online.live_sessions(a, [s for acct, s, _ in sessions if acct == a]))
            for a in {acct for acct, _, _ in sessions}
        )
        # the TTL refresh, once per REFRESH_SECONDS of a session's life
        clock[0] += REFRESH_SECONDS
        before = counter.writes
        for name in names:
            instances.register(name, "")
        for name in names:
            keepers[name].check(held[name])
        refresh_writes = (counter.writes - before - args.instances) / args.sessions

        # disconnect: what a session's end writes
        before = counter.writes
        for account, sid, _ in sessions[:200]:
            online.session_ended(account, sid)
        end_writes = (counter.writes - before) / min(200, len(sessions))
    finally:
        store_proc.terminate()
        store_proc.wait()
    transitions = connect_writes + end_writes
    per_day = args.reconnects_per_day / 86400
    refresh = refresh_writes / REFRESH_SECONDS
    print(
        f"sessions driven: {args.sessions} on {args.instances} instances, "
        f"{args.simulated_seconds:.0f} simulated seconds ({took:.1f}s of heartbeats)"
    )
    print(f"write units per connect: {connect_writes:.1f}; per disconnect: {end_writes:.1f}")
    print(
        f"before:   {today_per_session:.4f} writes/s per session (heartbeat every "
        f"{HEARTBEAT_SECONDS:.0f} s)"
    )
    print(
        f"after:    {steady} writes in {args.simulated_seconds:.0f} s by "
        f"{args.instances} instances = {lease_per_instance:.3f} writes/s per instance (lease), "
        f"0 per session ({visible}/{args.sessions} sessions online by their leases alone); "
        f"{reads_per_instance:.3f} reads/s per instance (commands)"
    )
    print(
        f"          + per session: {refresh_writes:.1f} writes per TTL refresh every "
        f"{REFRESH_SECONDS / 3600:.0f} h = {refresh:.6f} writes/s (a session never "
        f"reconnecting), {transitions * per_day:.6f} writes/s of transitions "
        f"({args.reconnects_per_day:g} reconnect a day x {transitions:.1f} writes)"
    )
    print(
        f"{'agents':>10} {'before w/s':>11} {'before $/mo':>12} {'after w/s':>10} "
        f"{'after $/mo':>11}   (100 instances, ${PRICE_PER_MILLION_WRITES}/M writes)"
    )
    rows: Dict[int, tuple] = {}
    for agents in (1_000, 100_000, 1_000_000):
        today = agents * today_per_session
        after = 100 * lease_per_instance + agents * (transitions * per_day + refresh)
        rows[agents] = (today, after)
        print(
            f"{agents:>10,} {today:>11,.1f} {monthly(today):>12,.0f} {after:>10,.1f} "
            f"{monthly(after):>11,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
