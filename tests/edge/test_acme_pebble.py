"""Managed certificates end to end against Pebble as a process: the worker (chalicelib.acme.
worker, run as ``python -m chalicelib.acme.worker --once``) orders for reserved domains, the
edge answers HTTP-01 and TLS-ALPN-01, the certificate is served and verified by a client that
trusts only Pebble's root; a domain that does not resolve to the edge fails with the status
fields set and is retried; a crashed order is resumed; a short-lived certificate is renewed;
an agent ingress's certificate is ordered by HTTP-01 and served by the agent listener."""

import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest
from cryptography import x509

from chalicelib.core import acme_orders
from tests.edge.test_edge_certificates import served, wait_served
from tests.support import pebble as pebble_support
from stacks.dns_server import ServiceDns
from stacks.paths import PROJECT_DIR

VALIDITY = 40  # seconds: every certificate Pebble issues here is short-lived (renewal test)


@pytest.fixture(scope="module")
def own_dns(stack, tmp_path_factory):
    """The service's own DNS server (chalicelib.acme.dns) on the stack's store, as `make run`
    starts it with DNS_LISTEN."""
    server = ServiceDns(stack.store_env(), str(tmp_path_factory.mktemp("dns") / "dns.log"))
    yield server.port
    server.stop()


@pytest.fixture(scope="module")
def pebble(edge, own_dns, tmp_path_factory):
    missing = pebble_support.available()
    if missing:
        pytest.fail(f"{missing} missing: `make test` installs the Debian package (pebble)")
    server = pebble_support.Pebble(
        str(tmp_path_factory.mktemp("pebble")),
        edge.http_port,
        edge.https_port,
        validity_seconds=VALIDITY,
    )
    resolver = pebble_support.CnameResolver(upstream=server.dns_port, authority=own_dns)
    server.resolver_port = resolver.port
    server.resolver = resolver
    server.own_dns = own_dns
    server.start()
    root = tmp_path_factory.mktemp("pebble-root") / "root.pem"
    root.write_text(server.root_pem())
    server.root_path = str(root)
    yield server
    server.stop()
    resolver.stop()


def run_worker(stack, pebble, challenges="http-01,tls-alpn-01", code=None):
    env = stack.store_env()
    env.update(
        {
            "ACME_DIRECTORY_URL": pebble.directory_url,
            "ACME_CA_BUNDLE": pebble.ca_bundle,
            "ACME_EMAIL": "ops@example.com",
            "ACME_CHALLENGES": challenges,
            "ACME_ORDER_TIMEOUT": "60",
            "BASE_DOMAIN": "tunnels.localhost",
            "DNS_LISTEN": f"127.0.0.1:{pebble.own_dns}",
        }
    )
    args = ["-c", code] if code else ["-m", "chalicelib.acme.worker", "--once"]
    done = subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def reserve(admin, domain, **fields):
    resp = admin.post("/reserved_domains", {"domain": domain, **fields})
    assert resp.status == 201, resp
    return resp.json


def issue(stack, pebble, admin, rd, challenges):
    outcome, log = run_worker(stack, pebble, challenges)
    key = [k for k in outcome if k.endswith(rd["id"])]
    warnings = [line for line in log.splitlines() if "WARNING" in line or "Error" in line]
    assert key and outcome[key[0]] == "issued", (outcome, warnings, pebble.log()[-1500:])
    now = admin.get(f"/reserved_domains/{rd['id']}").json
    assert now["certificate"] is not None
    status = now["certificate_management_status"]
    assert status["provisioning_job"] is None and status["renews_at"]
    cert = admin.get(f"/tls_certificates/{now['certificate']['id']}").json
    assert cert["issued_at"] and cert["subject_alternative_names"]["dns_names"] == [rd["domain"]]
    return now, cert


@pytest.mark.parametrize("challenge", ["http-01", "tls-alpn-01"])
def test_issuance_served_and_verified_against_pebbles_root(
    stack, edge, account, pebble, challenge
):
    domain = f"{challenge.replace('-', '')}.acme-test.example"
    rd = reserve(account.admin, domain)
    # the edge stack's API has no ACME_DIRECTORY_URL (only this module's worker runs against
    # Pebble): until the worker issues, the job says so (chalicelib/reserved_domains.py)
    assert (
        rd["certificate_management_status"]["provisioning_job"]["msg"]
        == acme_orders.NO_ACME_FALLBACK_MSG
    )
    now, cert = issue(stack, pebble, account.admin, rd, challenge)
    wait_served(edge, domain, pebble.root_path, cert["fingerprint"])
    renews = now["certificate_management_status"]["renews_at"]
    assert cert["not_before"] < renews < cert["not_after"]
    # nothing is due any more: the next pass leaves it alone
    outcome, _ = run_worker(stack, pebble, challenge)
    assert not [k for k in outcome if k.endswith(rd["id"])]


def test_a_domain_that_does_not_reach_the_edge_fails_with_status_and_retries(
    stack, edge, account, pebble
):
    domain = "elsewhere.acme-test.example"
    pebble.set_a(domain, ["127.0.0.2"])  # nothing listens there
    rd = reserve(account.admin, domain)
    started = time.time()
    outcome, _ = run_worker(stack, pebble, "http-01")
    assert [v for k, v in outcome.items() if k.endswith(rd["id"])] == ["failed"]
    job = account.admin.get(f"/reserved_domains/{rd['id']}").json["certificate_management_status"][
        "provisioning_job"
    ]
    assert job["error_code"] == "DNS_ERROR"
    assert domain in job["msg"] and "http-01" in job["msg"]
    retries = time.mktime(time.strptime(job["retries_at"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert started < retries <= time.time() + 300  # the first retry within 5 minutes
    # not due before retries_at: a pass now leaves it alone
    outcome, _ = run_worker(stack, pebble, "http-01")
    assert not [k for k in outcome if k.endswith(rd["id"])]
    # once due again (moved forward here) and the name reaches the edge, it is issued
    pebble.set_a(domain, [])
    run_worker(
        stack,
        pebble,
        code=(
            "from chalicelib.core import store, acme_orders as orders; store.configure();"
            f"store.write(store.set_fields(orders.QUEUE_PK, '{account.id}#{rd['id']}', "
            "{'due_at': 0}))\nprint('{}')"
        ),
    )
    now, cert = issue(stack, pebble, account.admin, rd, "http-01")
    wait_served(edge, domain, pebble.root_path, cert["fingerprint"])


def test_an_order_left_by_a_crashed_worker_is_resumed(stack, edge, account, pebble):
    domain = "resume.acme-test.example"
    rd = reserve(account.admin, domain)
    sk = f"{account.id}#{rd['id']}"
    # a worker takes the entry with a 1 s lease, places the order, and dies
    placed, _ = run_worker(
        stack,
        pebble,
        code=(
            "import json, sys\n"
            "from chalicelib.core import store\n"
            "from chalicelib.acme import worker\n"
            "from chalicelib.core import acme_orders as orders\n"
            "store.configure()\n"
            "s = worker.Settings.from_env(); s.lease_seconds = 1\n"
            f"entry = orders.claim('{sk}', s.owner, lease_seconds=1)\n"
            f"domain = store.get(store.collection_pk('{account.id}', 'reserved_domain'), "
            f"'{rd['id']}').data\n"
            "orderr, order = worker._begin(worker._acme_client(s), entry, domain, s.owner)\n"
            "print(json.dumps({'url': order['url']}))\n"
        ),
    )
    time.sleep(1.5)
    outcome, log = run_worker(stack, pebble, "http-01")
    assert [v for k, v in outcome.items() if k == sk] == ["issued"], log[-2000:]
    # the same order was finished, not a second one placed
    assert f"resuming order {placed['url']} for {domain}" in log
    now = account.admin.get(f"/reserved_domains/{rd['id']}").json
    cert = account.admin.get(f"/tls_certificates/{now['certificate']['id']}").json
    wait_served(edge, domain, pebble.root_path, cert["fingerprint"])


def test_a_short_lived_certificate_is_renewed_without_dropping_connections(
    stack, edge, account, pebble
):
    import http.client
    import socket
    import ssl

    domain = "renew.acme-test.example"
    rd = reserve(account.admin, domain)
    now, first = issue(stack, pebble, account.admin, rd, "http-01")
    wait_served(edge, domain, pebble.root_path, first["fingerprint"])
    answer = {
        "on_http_request": [
            {
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "kept"}}
                ]
            }
        ]
    }
    assert (
        account.admin.post(
            "/endpoints",
            {"url": f"https://{domain}", "type": "cloud", "traffic_policy": json.dumps(answer)},
        ).status
        == 201
    )
    ctx = ssl.create_default_context(cafile=pebble.root_path)
    time.sleep(1.5)  # the edge's endpoint lookups are cached for a second
    kept = ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", edge.https_port), timeout=10),
        server_hostname=domain,
    )

    def request_on_kept() -> int:
        kept.sendall(f"GET / HTTP/1.1\r\nHost: {domain}\r\n\r\n".encode())
        response = http.client.HTTPResponse(kept)
        response.begin()
        response.read()
        return response.status

    try:
        assert request_on_kept() == 200  # kept alive (a request now, another after renewal)
        renews = (
            time.mktime(
                time.strptime(
                    now["certificate_management_status"]["renews_at"], "%Y-%m-%dT%H:%M:%SZ"
                )
            )
            - time.timezone
        )
        time.sleep(max(0.0, renews - time.time()) + 1)
        outcome, log = run_worker(stack, pebble, "http-01")
        assert [v for k, v in outcome.items() if k.endswith(rd["id"])] == ["issued"], log
        renewed = account.admin.get(f"/reserved_domains/{rd['id']}").json
        assert renewed["certificate"]["id"] != first["id"]
        # the previous issued certificate is gone with the renewal
        assert account.admin.get(f"/tls_certificates/{first['id']}").status == 404
        second = account.admin.get(f"/tls_certificates/{renewed['certificate']['id']}").json
        wait_served(edge, domain, pebble.root_path, second["fingerprint"])
        assert request_on_kept() == 200  # the connection from before the renewal goes on
    finally:
        kept.close()


def test_wildcard_by_dns01_through_the_acme_challenge_cname(stack, edge, account, pebble):
    """The TXT is published by the service's own DNS server at the domain's
    acme_challenge_cname_target; the user's _acme-challenge CNAME points there."""
    rd = reserve(account.admin, "*.wild.acme-test.example")
    target = rd["acme_challenge_cname_target"]
    assert target.endswith(".acme-challenge.cname.example.test")
    # without the user's CNAME the validation fails, with the status saying so
    outcome, _ = run_worker(stack, pebble, "http-01")
    assert [v for k, v in outcome.items() if k.endswith(rd["id"])] == ["failed"]
    job = account.admin.get(f"/reserved_domains/{rd['id']}").json["certificate_management_status"][
        "provisioning_job"
    ]
    assert job["error_code"] == "DNS_ERROR" and "dns-01" in job["msg"]
    pebble.resolver.cnames["_acme-challenge.wild.acme-test.example"] = target
    run_worker(
        stack,
        pebble,
        code=(
            "from chalicelib.core import store, acme_orders as orders; store.configure();"
            f"store.write(store.set_fields(orders.QUEUE_PK, '{account.id}#{rd['id']}', "
            "{'due_at': 0}))\nprint('{}')"
        ),
    )
    now, cert = issue(stack, pebble, account.admin, rd, "http-01")
    assert cert["subject_alternative_names"]["dns_names"] == ["*.wild.acme-test.example"]
    wait_served(edge, "api.wild.acme-test.example", pebble.root_path, cert["fingerprint"])
    # the answer was removed once validated
    import dns.message
    import dns.query

    reply = dns.query.udp(
        dns.message.make_query(target, "TXT"), "127.0.0.1", port=pebble.own_dns, timeout=5
    )
    assert not reply.answer


def test_rsa_policy_and_the_issued_certificate_goes_with_its_domain(stack, edge, account, pebble):
    domain = "rsa.acme-test.example"
    rd = reserve(account.admin, domain, certificate_management_policy={"private_key_type": "rsa"})
    _, cert = issue(stack, pebble, account.admin, rd, "tls-alpn-01")
    assert cert["private_key_type"] == "rsa"
    wait_served(edge, domain, pebble.root_path, cert["fingerprint"])
    # an issued certificate in use cannot be deleted on its own; it goes with the domain
    assert account.admin.delete(f"/tls_certificates/{cert['id']}").status == 409
    assert account.admin.delete(f"/reserved_domains/{rd['id']}").status == 204
    assert account.admin.get(f"/tls_certificates/{cert['id']}").status == 404
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            served(edge, domain, edge.ca_path)  # back to the local CA
            break
        except Exception:
            time.sleep(0.2)
    else:
        raise AssertionError("the deleted domain's certificate is still served")


def test_an_agent_ingress_certificate_is_served_by_the_agent_listener(
    stack, edge, account, pebble
):
    """An agent ingress with a policy: the worker orders for it by HTTP-01 even when asked for
    TLS-ALPN-01 only (its port 443 may be the agent listener), and the agent listener serves
    the issued certificate for the domain by SNI; the HTTPS listener does not (it keeps its
    own for the name); deleting the policy takes it off."""
    from cryptography.hazmat.primitives import serialization

    domain = "connect.ingress.acme-test.example"
    made = account.admin.post(
        "/agent_ingresses", {"domain": domain, "certificate_management_policy": {}}
    )
    assert made.status == 201, made
    ingress = made.json
    outcome, log = run_worker(stack, pebble, "tls-alpn-01")
    key = [k for k in outcome if k.endswith(ingress["id"])]
    assert key and outcome[key[0]] == "issued", (outcome, log[-2000:], pebble.log()[-1500:])
    # validated by HTTP-01 on the edge's HTTP listener, though asked for TLS-ALPN-01 only
    assert f"http://{domain}:{edge.http_port}/.well-known/acme-challenge/" in pebble.log()
    now = account.admin.get(f"/agent_ingresses/{ingress['id']}").json
    status = now["certificate_management_status"]
    assert status["provisioning_job"] is None and status["renews_at"]
    port = int(edge.server_addr.rsplit(":", 1)[1])

    def on_agent_listener(cafile):
        ctx = ssl.create_default_context(cafile=cafile)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=domain) as tls:
                return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))

    deadline, last = time.time() + 10, None
    while time.time() < deadline:
        try:
            cert = on_agent_listener(pebble.root_path)  # verified against Pebble's root only
            break
        except ssl.SSLError as exc:
            last = exc
            time.sleep(0.2)
    else:
        raise AssertionError(f"{domain}: the agent listener does not serve Pebble's: {last!r}")
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [domain]
    der = cert.public_bytes(serialization.Encoding.DER)
    with pytest.raises(ssl.SSLCertVerificationError):
        served(edge, domain, pebble.root_path)  # the HTTPS listener's is not it
    assert (
        account.admin.delete(
            f"/agent_ingresses/{ingress['id']}/certificate_management_policy"
        ).status
        == 204
    )
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if on_agent_listener(edge.ca_path).public_bytes(serialization.Encoding.DER) != der:
                break  # back to the local CA's
        except ssl.SSLError:
            pass
        time.sleep(0.2)
    else:
        raise AssertionError("the agent listener still serves the removed certificate")
    assert account.admin.delete(f"/agent_ingresses/{ingress['id']}").status == 204


# ---- the worker as AWS runs it: the scheduled function, from the package and its layer ------
_LAMBDA_PASS = """
import json, sys
import app
outcome = app.acme_worker({   # an EventBridge scheduled event, as the runtime passes it
    "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "source": "aws.events",
    "detail-type": "Scheduled Event", "account": "123456789012", "region": "us-east-1",
    "time": "2026-01-01T00:00:00Z", "detail": {},
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/acme_worker"]}, None)
loaded = {name: sys.modules[name].__file__ for name in ("acme", "cryptography", "app")}
print(json.dumps({"outcome": outcome, "loaded": loaded}))
"""


@pytest.fixture(scope="module")
def lambda_bundle(tmp_path_factory):
    """`make deploy-aws`'s package: the deployment zip and the ACME layer, unpacked as Lambda
    lays them out (/var/task and /opt), plus the SDK the Lambda runtime provides."""
    import site
    import zipfile

    from scripts import deploy_stack

    root = tmp_path_factory.mktemp("lambda")
    deploy_stack.package("prod", str(root / "out"))
    with zipfile.ZipFile(root / "out" / "deployment.zip") as zf:
        zf.extractall(root / "task")
    with zipfile.ZipFile(root / "out" / deploy_stack.LAYER_ZIP) as zf:
        zf.extractall(root / "opt")
    runtime = root / "runtime"
    runtime.mkdir()
    packages = site.getsitepackages()[0]
    for name in ("boto3", "botocore", "s3transfer", "dateutil", "urllib3", "jmespath", "six.py"):
        os.symlink(os.path.join(packages, name), runtime / name)
    return str(root / "task"), str(root / "opt" / "python"), str(runtime)


def test_the_scheduled_function_from_the_package_and_its_layer_issues(
    stack, edge, account, pebble, lambda_bundle
):
    """app.acme_worker as the Lambda runtime calls it, in an interpreter that sees only the
    deployment package, the layer and the runtime's SDK: acme and cryptography come from the
    layer (manylinux2014 wheels), and the pass issues a certificate the edge serves."""
    task, layer, runtime = lambda_bundle
    domain = "lambda.acme-test.example"
    rd = reserve(account.admin, domain)
    env = {k: v for k, v in stack.store_env().items() if not k.startswith("PYTHON")}
    env.update(
        {
            # the function's code, its layer, the runtime's SDK: all its path (-P -S)
            "PYTHONPATH": os.pathsep.join([task, layer, runtime]),
            "ACME_DIRECTORY_URL": pebble.directory_url,
            "ACME_CA_BUNDLE": pebble.ca_bundle,
            "ACME_EMAIL": "ops@example.com",
            "ACME_CHALLENGES": "http-01",
            "ACME_ORDER_TIMEOUT": "60",
            "BASE_DOMAIN": "tunnels.localhost",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    done = subprocess.run(
        [sys.executable, "-P", "-S", "-B", "-c", _LAMBDA_PASS],
        cwd=task,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert [v for k, v in seen["outcome"].items() if k.endswith(rd["id"])] == ["issued"], (
        seen,
        done.stderr[-2000:],
    )
    assert seen["loaded"]["acme"].startswith(layer)
    assert seen["loaded"]["cryptography"].startswith(layer)
    assert seen["loaded"]["app"].startswith(task)
    now = account.admin.get(f"/reserved_domains/{rd['id']}").json
    cert = account.admin.get(f"/tls_certificates/{now['certificate']['id']}").json
    wait_served(edge, domain, pebble.root_path, cert["fingerprint"])
