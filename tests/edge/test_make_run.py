"""`make run` as a new user meets it: scripts/serve.py --edge prints the admin key, the agent
address and the CA path; an official SDK pointed at them serves traffic; one Ctrl-C stops all."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import requests

from tests.edge.conftest import SdkAgent, _free_range
from tests.support.api import PROJECT_DIR, free_port


def test_serve_with_edge_prints_what_an_sdk_needs_and_serves_it():
    with tempfile.TemporaryDirectory(prefix="make-run-") as data_dir:
        low = _free_range(3)
        ports = {"PORT": free_port(), "STORE_PORT": free_port(), "EDGE_AGENT_PORT": free_port(),
                 "EDGE_HTTP_PORT": free_port(), "EDGE_HTTPS_PORT": free_port()}
        env = {k: v for k, v in os.environ.items() if k != "DYNAMODB_ENDPOINT_URL"}
        env.update({k: str(v) for k, v in ports.items()})
        env.update({"DATA_DIR": data_dir, "EDGE_TCP_PORTS": f"{low}-{low + 2}",
                    "PYTHONUNBUFFERED": "1"})
        proc = subprocess.Popen([sys.executable, "scripts/serve.py", "--edge"], cwd=PROJECT_DIR,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines = []
        try:
            deadline = time.time() + 90
            while time.time() < deadline and not any("serving on" in l for l in lines):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            out = "".join(lines)
            assert "serving on" in out, out
            key = out.split("admin API key:\n", 1)[1].split("\n", 1)[0].strip()
            agent_addr = re.search(r"agents connect to (\S+) \(TLS", out).group(1)
            ca = re.search(r"edge CA certificate: (\S+)", out).group(1)
            assert agent_addr == f"127.0.0.1:{ports['EDGE_AGENT_PORT']}"
            assert ca == os.path.join(data_dir, "ca.pem") and os.path.exists(ca)
            api = f"http://127.0.0.1:{ports['PORT']}"
            cred = requests.post(f"{api}/credentials", json={"description": "sdk"},
                                 headers={"Authorization": f"Bearer {key}",
                                          "Ngrok-Version": "2"}, timeout=30).json()

            class _Edge:  # what SdkAgent needs of an edge
                server_addr, ca_path = agent_addr, ca
            agent = SdkAgent(_Edge, cred["token"], [{"proto": "http"}])
            try:
                url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
                host = url.split("://")[1].split(":")[0]
                resp = requests.get(f"http://127.0.0.1:{ports['EDGE_HTTP_PORT']}/echo",
                                    headers={"Host": host}, timeout=30)
                assert resp.status_code == 200
            finally:
                agent.stop()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
            rest = proc.stdout.read()
            assert rest.rstrip().endswith("stopped") and "Traceback" not in rest, rest
            # a first start is clean: no part reads the store before its table exists
            assert "ResourceNotFound" not in out + rest, out + rest
            assert "could not read" not in out + rest, out + rest
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


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


def test_make_run_restarts_a_killed_part_and_the_sdk_serves_again_within_10_s():
    """kill -9 of the edge: restarted, and the official SDK (which backs off ~2 minutes after
    two refused reconnects) serves its URL again within 10 s, because the edge's sockets stay
    open across the restart. kill -9 of the API and of the store: restarted, data intact."""
    with tempfile.TemporaryDirectory(prefix="make-run-") as data_dir:
        low = _free_range(3)
        ports = {"PORT": free_port(), "STORE_PORT": free_port(), "EDGE_AGENT_PORT": free_port(),
                 "EDGE_HTTP_PORT": free_port(), "EDGE_HTTPS_PORT": free_port()}
        env = {k: v for k, v in os.environ.items() if k != "DYNAMODB_ENDPOINT_URL"}
        env.update({k: str(v) for k, v in ports.items()})
        env.update({"DATA_DIR": data_dir, "EDGE_TCP_PORTS": f"{low}-{low + 2}",
                    "PYTHONUNBUFFERED": "1"})
        proc = subprocess.Popen([sys.executable, "scripts/serve.py", "--edge"], cwd=PROJECT_DIR,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines = []
        import threading
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
        agent = None
        try:
            deadline = time.time() + 90
            while time.time() < deadline and not any("serving on" in l for l in lines):
                time.sleep(0.1)
            out = "".join(lines)
            key = out.split("admin API key:\n", 1)[1].split("\n", 1)[0].strip()
            api = f"http://127.0.0.1:{ports['PORT']}"
            headers = {"Authorization": f"Bearer {key}", "Ngrok-Version": "2"}
            cred = requests.post(f"{api}/credentials", json={"description": "sdk"},
                                 headers=headers, timeout=30).json()

            class _Edge:
                server_addr = f"127.0.0.1:{ports['EDGE_AGENT_PORT']}"
                ca_path = os.path.join(data_dir, "ca.pem")
            agent = SdkAgent(_Edge, cred["token"], [{"proto": "http"}])
            url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
            host = url.split("://")[1].split(":")[0]

            def serves():
                try:
                    return requests.get(f"http://127.0.0.1:{ports['EDGE_HTTP_PORT']}/echo",
                                        headers={"Host": host}, timeout=5).status_code == 200
                except requests.RequestException:
                    return False
            assert serves()
            os.kill(_child(proc.pid, "-m edge"), signal.SIGKILL)
            killed = time.monotonic()
            while time.monotonic() - killed < 30 and not serves():
                time.sleep(0.1)
            took = time.monotonic() - killed
            print(f"the edge killed: its SDK endpoint served again after {took:.1f} s")
            if took >= 10:
                open("/tmp/makerun-fail.log", "w").write("".join(lines))
            assert took < 10, took
            assert any("edge: exited with status -9; restarting" in l for l in lines)

            for part in ("api_server.py", "embedded_store.py"):
                os.kill(_child(proc.pid, part), signal.SIGKILL)
                again = time.monotonic()
                ok = False
                while time.monotonic() - again < 30 and not ok:
                    try:
                        ok = requests.get(f"{api}/credentials/{cred['id']}", headers=headers,
                                          timeout=5).status_code == 200
                    except requests.RequestException:
                        time.sleep(0.2)
                assert ok, (part, "".join(lines[-20:]))
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            if agent is not None:
                agent.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
