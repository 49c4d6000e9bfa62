"""The operator's check of managed certificates: Pebble and its DNS test server started by hand,
`make run` (scripts/serve.py --edge) with the three ACME variables, a domain reserved through
the official API client, then a TLS client trusting only Pebble's root reaches an endpoint on
that domain."""
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import ngrok
import pytest

from tests.edge.conftest import _free_range
from tests.support import pebble as pebble_support
from tests.support.api import PROJECT_DIR, free_port


def test_make_run_with_acme_serves_a_trusted_certificate():
    missing = pebble_support.available()
    if missing:
        pytest.fail(f"{missing} missing: `make test` installs the Debian package (pebble)")
    with tempfile.TemporaryDirectory(prefix="make-run-acme-") as folder:
        data_dir = os.path.join(folder, "data")
        ports = {"PORT": free_port(), "STORE_PORT": free_port(), "EDGE_AGENT_PORT": free_port(),
                 "EDGE_HTTP_PORT": free_port(), "EDGE_HTTPS_PORT": free_port()}
        pebble = pebble_support.Pebble(os.path.join(folder, "pebble"), ports["EDGE_HTTP_PORT"],
                                       ports["EDGE_HTTPS_PORT"]).start()
        low = _free_range(3)
        env = {k: v for k, v in os.environ.items()
               if k not in ("DYNAMODB_ENDPOINT_URL", "TLS_KEY_FILE")}   # make run's defaults
        env.update({k: str(v) for k, v in ports.items()})
        env.update({"DATA_DIR": data_dir, "EDGE_TCP_PORTS": f"{low}-{low + 2}",
                    "PYTHONUNBUFFERED": "1", "ACME_DIRECTORY_URL": pebble.directory_url,
                    "ACME_CA_BUNDLE": pebble.ca_bundle, "ACME_EMAIL": "ops@example.com",
                    "ACME_WORKER_SECONDS": "1"})
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
            assert "serving on" in out and "acme worker" in out, out
            key = out.split("admin API key:\n", 1)[1].split("\n", 1)[0].strip()
            client = ngrok.Client(key, base_url=f"http://127.0.0.1:{ports['PORT']}")
            domain = "operator.acme-run.example"
            rd = client.reserved_domains.create(domain=domain)
            assert rd.certificate_management_policy.authority == "letsencrypt"
            policy = {"on_http_request": [{"actions": [{"type": "custom-response", "config": {
                "status_code": 200, "body": "trusted"}}]}]}
            client.endpoints.create(url=f"https://{domain}", type="cloud",
                                    traffic_policy=json.dumps(policy))
            root = os.path.join(folder, "pebble-root.pem")
            with open(root, "w") as fh:
                fh.write(pebble.root_pem())
            ctx = ssl.create_default_context(cafile=root)   # Pebble's root only
            answer, error = b"", None
            deadline = time.time() + 60
            while time.time() < deadline and not answer:
                try:
                    with socket.create_connection(("127.0.0.1", ports["EDGE_HTTPS_PORT"]),
                                                  timeout=10) as raw:
                        with ctx.wrap_socket(raw, server_hostname=domain) as tls:
                            tls.sendall(f"GET / HTTP/1.1\r\nHost: {domain}\r\n"
                                        "Connection: close\r\n\r\n".encode())
                            while chunk := tls.recv(4096):
                                answer += chunk
                except (ssl.SSLError, OSError) as exc:
                    error = exc
                    time.sleep(0.5)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"trusted"), \
                (answer, error, pebble.log()[-2000:])
            now = client.reserved_domains.get(rd.id)
            assert now.certificate is not None
            assert now.certificate_management_status.provisioning_job is None
            assert now.certificate_management_status.renews_at
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
            rest = proc.stdout.read()
            assert "Traceback" not in rest, rest
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            pebble.stop()
