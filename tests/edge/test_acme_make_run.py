"""The operator's check of managed certificates: Pebble and its DNS test server started by hand,
`make run` (scripts/serve.py --edge) with the three ACME variables, a domain reserved through
the official API client, then a TLS client trusting only Pebble's root reaches an endpoint on
that domain."""

import json
import os
import socket
import ssl
import tempfile
import time

import ngrok
import pytest

from tests.support import pebble as pebble_support


def test_make_run_with_acme_serves_a_trusted_certificate(make_run):
    missing = pebble_support.available()
    if missing:
        pytest.fail(f"{missing} missing: `make test` installs the Debian package (pebble)")
    with tempfile.TemporaryDirectory(prefix="make-run-acme-") as folder:
        run = make_run(drop=("TLS_KEY_FILE",))  # its defaults
        pebble = pebble_support.Pebble(
            os.path.join(folder, "pebble"),
            run.ports["EDGE_HTTP_PORT"],
            run.ports["EDGE_HTTPS_PORT"],
        ).start()
        run.env.update(
            {
                "ACME_DIRECTORY_URL": pebble.directory_url,
                "ACME_CA_BUNDLE": pebble.ca_bundle,
                "ACME_EMAIL": "ops@example.com",
                "ACME_WORKER_SECONDS": "1",
            }
        )
        try:
            run.start()
            assert "acme worker" in run.banner, run.banner
            key, ports = run.key, run.ports
            client = ngrok.Client(key, base_url=f"http://127.0.0.1:{ports['PORT']}")
            domain = "operator.acme-run.example"
            rd = client.reserved_domains.create(domain=domain)
            assert rd.certificate_management_policy.authority == "letsencrypt"
            policy = {
                "on_http_request": [
                    {
                        "actions": [
                            {
                                "type": "custom-response",
                                "config": {"status_code": 200, "body": "trusted"},
                            }
                        ]
                    }
                ]
            }
            client.endpoints.create(
                url=f"https://{domain}", type="cloud", traffic_policy=json.dumps(policy)
            )
            root = os.path.join(folder, "pebble-root.pem")
            with open(root, "w") as fh:
                fh.write(pebble.root_pem())
            ctx = ssl.create_default_context(cafile=root)  # Pebble's root only
            answer, error = b"", None
            deadline = time.time() + 60
            while time.time() < deadline and not answer:
                try:
                    with socket.create_connection(
                        ("127.0.0.1", ports["EDGE_HTTPS_PORT"]), timeout=10
                    ) as raw:
                        with ctx.wrap_socket(raw, server_hostname=domain) as tls:
                            tls.sendall(
                                f"GET / HTTP/1.1\r\nHost: {domain}\r\n"
                                "Connection: close\r\n\r\n".encode()
                            )
                            while chunk := tls.recv(4096):
                                answer += chunk
                except (ssl.SSLError, OSError) as exc:
                    error = exc
                    time.sleep(0.5)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"trusted"), (
                answer,
                error,
                pebble.log()[-2000:],
            )
            now = client.reserved_domains.get(rd.id)
            assert now.certificate is not None
            assert now.certificate_management_status.provisioning_job is None
            assert now.certificate_management_status.renews_at
            assert run.interrupt(timeout=20) == 0
            assert "Traceback" not in run.output(), run.output()
        finally:
            run.stop()  # before Pebble (the fixture would stop it after the test)
            pebble.stop()
