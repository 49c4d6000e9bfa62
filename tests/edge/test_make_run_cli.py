"""`make run` as a new user of the agent CLI meets it: scripts/serve.py --edge prints the admin
key, the agent address and the CA path; a credential; the CLI 2.x with a three-line config
file (server_addr, root_cas, authtoken) serves ``ngrok http``; one Ctrl-C stops the stack."""

import subprocess
import sys
import time

import pytest
import requests

from stacks.agents import CLI_BIN, cli_binary
from stacks.ports import free_port


def test_make_run_then_the_cli_with_a_three_line_config(tmp_path, make_run):
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform")
    with make_run() as run:
        upstream = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(free_port())],
            cwd=str(tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (tmp_path / "index.html").write_text("hello from the upstream")
        cli = None
        try:
            ports, ca = run.ports, run.ca_path
            token = run.credential("cli")["token"]
            config = tmp_path / "ngrok.yml"
            config.write_text(
                f"server_addr: {run.agent_addr}\nroot_cas: {ca}\nauthtoken: {token}\n"
            )
            upstream_port = upstream.args[-1]
            cli = subprocess.Popen(
                [CLI_BIN, "http", "-config", str(config), "-subdomain", "newuser", upstream_port],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            host = "newuser.tunnels.localhost"
            deadline = time.time() + 30
            resp = None
            while time.time() < deadline:
                resp = requests.get(
                    f"http://127.0.0.1:{ports['EDGE_HTTP_PORT']}/",
                    headers={"Host": host},
                    timeout=30,
                )
                if resp.status_code == 200:
                    break
                time.sleep(0.3)
            assert resp.status_code == 200 and resp.text == "hello from the upstream"
            https = subprocess.run(
                [
                    "curl",
                    "-sS",
                    "--cacert",
                    ca,
                    "--resolve",
                    f"{host}:{ports['EDGE_HTTPS_PORT']}:127.0.0.1",
                    f"https://{host}:{ports['EDGE_HTTPS_PORT']}/",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert https.stdout == "hello from the upstream", https.stderr
            assert run.interrupt() == 0
        finally:
            if cli is not None:
                cli.terminate()
                cli.wait(timeout=10)
            upstream.terminate()
            upstream.wait(timeout=10)
