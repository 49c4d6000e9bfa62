"""`make run` as a new user meets it: scripts/serve.py --edge prints the admin key, the agent
address and the CA path; an official SDK pointed at them serves traffic; one Ctrl-C stops all."""

import os
import signal
import time

import requests

from stacks.agents import SdkAgent


def test_serve_with_edge_prints_what_an_sdk_needs_and_serves_it(make_run):
    with make_run() as run:
        data_dir = run.data_dir
        assert run.agent_addr == f"127.0.0.1:{run.ports['EDGE_AGENT_PORT']}"
        assert run.ca_path == os.path.join(data_dir, "ca.pem")
        assert os.path.exists(run.ca_path)
        agent = SdkAgent(run, run.credential("sdk")["token"], [{"proto": "http"}])
        try:
            url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
            host = url.split("://")[1].split(":")[0]
            resp = requests.get(
                f"http://127.0.0.1:{run.ports['EDGE_HTTP_PORT']}/echo",
                headers={"Host": host},
                timeout=30,
            )
            assert resp.status_code == 200
        finally:
            agent.stop()
        assert run.interrupt(timeout=20) == 0
        out = run.output()
        assert out.rstrip().endswith("stopped") and "Traceback" not in out, out
        # a first start is clean: no part reads the store before its table exists
        assert "ResourceNotFound" not in out, out
        assert "could not read" not in out, out


def _child(parent: int, marker: str) -> int:
    """The pid of ``parent``'s child whose command line contains ``marker``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and marker in cmdline:
            return int(pid)
    raise AssertionError(f"no child of {parent} runs {marker!r}")


def test_make_run_restarts_a_killed_part_and_the_sdk_serves_again_within_10_s(make_run):
    """kill -9 of the edge: restarted, and the official SDK (which backs off ~2 minutes after
    two refused reconnects) serves its URL again within 10 s, because the edge's sockets stay
    open across the restart. kill -9 of the API and of the store: restarted, data intact."""
    with make_run() as run:
        proc, lines, api = run.proc, run.lines, run.api_url
        headers = {"Authorization": f"Bearer {run.key}", "Ngrok-Version": "2"}
        cred = run.credential("sdk")
        agent = SdkAgent(run, cred["token"], [{"proto": "http"}])
        try:
            url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
            host = url.split("://")[1].split(":")[0]

            def serves():
                try:
                    return (
                        requests.get(
                            f"http://127.0.0.1:{run.ports['EDGE_HTTP_PORT']}/echo",
                            headers={"Host": host},
                            timeout=5,
                        ).status_code
                        == 200
                    )
                except requests.RequestException:
                    return False

            assert serves()
            os.kill(_child(proc.pid, "-m edge"), signal.SIGKILL)
            killed = time.monotonic()
            while time.monotonic() - killed < 30 and not serves():
                time.sleep(0.1)
            took = time.monotonic() - killed
            print(f"the edge killed: its SDK endpoint served again after {took:.1f} s")
            assert took < 10, (took, "".join(lines[-30:]))
            assert any("edge: exited with status -9; restarting" in l for l in lines)

            for part in ("api_server.py", "embedded_store.py"):
                os.kill(_child(proc.pid, part), signal.SIGKILL)
                again = time.monotonic()
                ok = False
                while time.monotonic() - again < 30 and not ok:
                    try:
                        ok = (
                            requests.get(
                                f"{api}/credentials/{cred['id']}", headers=headers, timeout=5
                            ).status_code
                            == 200
                        )
                    except requests.RequestException:
                        time.sleep(0.2)
                assert ok, (part, "".join(lines[-20:]))
            assert run.interrupt(timeout=20) == 0
        finally:
            agent.stop()
