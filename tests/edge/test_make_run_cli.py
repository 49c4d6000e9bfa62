"""`make run` as a new user of the agent CLI meets it: scripts/serve.py --edge prints the admin
key, the agent address and the CA path; a credential; the CLI 2.x with a three-line config
file (server_addr, root_cas, authtoken) serves ``ngrok http``; one Ctrl-C stops the stack."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from tests.edge.cli_agent import CLI_BIN, cli_binary
from tests.edge.conftest import _free_range
from tests.support.api import PROJECT_DIR, free_port


def test_make_run_then_the_cli_with_a_three_line_config(tmp_path):
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform")
    with tempfile.TemporaryDirectory(prefix="make-run-cli-") as data_dir:
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
        upstream = subprocess.Popen([sys.executable, "-m", "http.server", "--bind",
                                     "127.0.0.1", str(free_port())], cwd=str(tmp_path),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (tmp_path / "index.html").write_text("hello from the upstream")
        cli = None
        try:
            lines = []
            deadline = time.time() + 90
            while time.time() < deadline and not any("serving on" in x for x in lines):
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            out = "".join(lines)
            key = out.split("admin API key:\n", 1)[1].split("\n", 1)[0].strip()
            agent_addr = re.search(r"agents connect to (\S+) \(TLS", out).group(1)
            ca = re.search(r"edge CA certificate: (\S+)", out).group(1)
            api = f"http://127.0.0.1:{ports['PORT']}"
            token = requests.post(f"{api}/credentials", json={"description": "cli"},
                                  headers={"Authorization": f"Bearer {key}",
                                           "Ngrok-Version": "2"}, timeout=30).json()["token"]
            config = tmp_path / "ngrok.yml"
            config.write_text(f"server_addr: {agent_addr}\nroot_cas: {ca}\n"
                              f"authtoken: {token}\n")
            upstream_port = upstream.args[-1]
            cli = subprocess.Popen([CLI_BIN, "http", "-config", str(config), "-subdomain",
                                    "newuser", upstream_port],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            host = "newuser.tunnels.localhost"
            deadline = time.time() + 30
            resp = None
            while time.time() < deadline:
                resp = requests.get(f"http://127.0.0.1:{ports['EDGE_HTTP_PORT']}/",
                                    headers={"Host": host}, timeout=30)
                if resp.status_code == 200:
                    break
                time.sleep(0.3)
            assert resp.status_code == 200 and resp.text == "hello from the upstream"
            https = subprocess.run(
                ["curl", "-sS", "--cacert", ca, "--resolve",
                 f"{host}:{ports['EDGE_HTTPS_PORT']}:127.0.0.1",
                 f"https://{host}:{ports['EDGE_HTTPS_PORT']}/"],
                capture_output=True, text=True, timeout=60)
            assert https.stdout == "hello from the upstream", https.stderr
        finally:
            if cli is not None:
                cli.terminate()
                cli.wait(timeout=10)
            upstream.terminate()
            upstream.wait(timeout=10)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
