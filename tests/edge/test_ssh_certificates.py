"""SSH user certificates at the edge's SSH gateway, with Debian's OpenSSH client as a process
(docs/SSH.md, "SSH certificates"): ``ssh-keygen`` makes a key, the API signs it with an SSH
certificate authority of the account, and ``ssh -R … -o CertificateFile=`` opens an endpoint
that traffic reaches. Refused, each with the hosted code printed: an expired certificate, a
revoked one (deleted), one whose CA was deleted (also ending a live session), one of a CA that
is not this service's, principals without the user name, no permit-port-forwarding, and a
certificate of another account's CA binding this account's domain."""

import subprocess
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from chalicelib.core import edge_errors
from stacks.ssh import new_key
from tests.edge.support import answering_upstream, host, no_traceback_after, wait
from tests.support.fixtures import ssh_agents  # noqa: F401 (a fixture)

FORWARDING = {"permit-port-forwarding": ""}


@pytest.fixture(autouse=True)
def _clean_log(edge):
    yield from no_traceback_after(edge)


@pytest.fixture(scope="module")
def upstream():
    yield from answering_upstream(lambda request: f"certified {request.path}")


def _ts(when):
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def certified(tmp_path):
    """``certified(principal, ca_id=None, **cert_fields)`` → (key path, certificate path,
    CA id, certificate): a key pair made by ssh-keygen, signed through the API."""

    def make(principal, ca_id=None, **fields):
        if ca_id is None:
            made = principal.post("/ssh_certificate_authorities", {"private_key_type": "ecdsa"})
            assert made.status == 201, made
            ca_id = made.json["id"]
        key, line = new_key(str(tmp_path / uuid.uuid4().hex[:8]))
        body = {
            "ssh_certificate_authority_id": ca_id,
            "public_key": line,
            "principals": ["v2"],
            "extensions": FORWARDING,
            **fields,
        }
        cert = principal.post("/ssh_user_certificates", body)
        assert cert.status == 201, cert
        path = f"{key}-cert.pub"
        with open(path, "w") as handle:
            handle.write(cert.json["certificate"] + "\n")
        return key, path, ca_id, cert.json

    return make


def _ssh(ssh_agents, edge, key, cert_path, upstream, forward=None, **kw):  # noqa: F811
    return ssh_agents(
        edge,
        key,
        forward or f"0:localhost:{upstream}",
        ["http"],
        options=["-o", f"CertificateFile={cert_path}"],
        **kw,
    )


def _refused(agent, *words):
    code = agent.wait(timeout=40)
    assert code == 255, agent.printed()  # authentication failed: ssh's own status
    assert "Permission denied" in agent.err and "Forwarding" not in agent.out
    for word in words:
        assert word in agent.err, agent.printed()


def test_a_user_certificate_opens_an_endpoint_and_traffic_flows(
    edge,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    key, cert_path, _, cert = certified(account.admin)
    agent = _ssh(ssh_agents, edge, key, cert_path, upstream)
    url = agent.url()
    name = host(url)
    assert edge.http("GET", name, "/a").text == "certified /a"
    assert edge.public("GET", url, "/b").text == "certified /b"
    sessions = wait(
        lambda: [
            s
            for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
            if s["credential"]["id"] == cert["id"]
        ]
    )
    assert sessions[0]["transport"] == "ssh"
    assert sessions[0]["credential"]["uri"].endswith(f"/ssh_user_certificates/{cert['id']}")
    agent.stop()


def test_an_expired_certificate_is_refused(
    edge,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    now = datetime.now(timezone.utc)
    key, cert_path, _, cert = certified(
        account.admin,
        valid_after=_ts(now - timedelta(hours=2)),
        valid_until=_ts(now - timedelta(hours=1)),
    )
    agent = _ssh(ssh_agents, edge, key, cert_path, upstream)
    _refused(agent, edge_errors.SSH_KEY_UNKNOWN, "expired at", cert["id"])


def test_a_certificate_not_yet_valid_is_refused(
    edge,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    now = datetime.now(timezone.utc)
    key, cert_path, _, _ = certified(
        account.admin,
        valid_after=_ts(now + timedelta(hours=1)),
        valid_until=_ts(now + timedelta(hours=2)),
    )
    _refused(_ssh(ssh_agents, edge, key, cert_path, upstream), "is not valid before")


def test_principals_and_extensions_are_honoured(
    edge,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    key, cert_path, ca_id, _ = certified(account.admin, principals=["alice"])
    _refused(
        _ssh(ssh_agents, edge, key, cert_path, upstream),
        edge_errors.SSH_KEY_UNKNOWN,
        "principals alice",
    )
    as_alice = _ssh(ssh_agents, edge, key, cert_path, upstream, user="alice")
    assert as_alice.url()
    as_alice.stop()
    key, cert_path, _, _ = certified(account.admin, ca_id=ca_id, extensions={"permit-pty": ""})
    _refused(_ssh(ssh_agents, edge, key, cert_path, upstream), "does not permit port forwarding")
    key, cert_path, _, _ = certified(
        account.admin, ca_id=ca_id, critical_options={"source-address": "192.0.2.0/24"}
    )
    _refused(_ssh(ssh_agents, edge, key, cert_path, upstream), "may only be used from")
    key, cert_path, _, _ = certified(
        account.admin, ca_id=ca_id, principals=[], critical_options={"source-address": "127.0.0.1"}
    )
    anyone = _ssh(ssh_agents, edge, key, cert_path, upstream, user="whoever")
    assert anyone.url()
    anyone.stop()


def test_a_revoked_certificate_and_a_deleted_ca(
    edge,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    key, cert_path, ca_id, cert = certified(account.admin)
    assert account.admin.delete(f"/ssh_user_certificates/{cert['id']}").status == 204
    _refused(
        _ssh(ssh_agents, edge, key, cert_path, upstream),
        edge_errors.AUTHTOKEN_INVALID,
        "revoked",
    )
    # a live session ends when its CA is deleted (the edge's check, EDGE_CHECK_SECONDS)
    key, cert_path, _, cert = certified(account.admin, ca_id=ca_id)
    live = _ssh(ssh_agents, edge, key, cert_path, upstream)
    name = host(live.url())
    assert account.admin.delete(f"/ssh_certificate_authorities/{ca_id}").status == 204
    assert live.wait(timeout=20) == 1, live.printed()
    assert edge_errors.AUTHTOKEN_INVALID in live.err and ca_id in live.err
    assert wait(lambda: edge.http("GET", name, "/").status_code == 404)
    _refused(
        _ssh(ssh_agents, edge, key, cert_path, upstream),
        edge_errors.SSH_KEY_UNKNOWN,
        "not the key of an SSH certificate authority",
    )


def test_a_certificate_of_a_ca_not_of_this_service(
    edge,
    tmp_path,
    upstream,
    ssh_agents,  # noqa: F811
):
    ca, _ = new_key(str(tmp_path / "own-ca"))
    key, _ = new_key(str(tmp_path / "user"))
    subprocess.run(
        ["ssh-keygen", "-q", "-s", ca, "-I", "sucrt_0000000000000000000000000000", "-n", "v2"]
        + ["-O", "permit-port-forwarding", f"{key}.pub"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    _refused(
        _ssh(ssh_agents, edge, key, f"{key}-cert.pub", upstream),
        edge_errors.SSH_KEY_UNKNOWN,
        "not the key of an SSH certificate authority",
    )


def test_another_accounts_certificate_cannot_bind_this_accounts_domain(
    edge,
    api,
    account,
    certified,
    upstream,
    ssh_agents,  # noqa: F811
):
    domain = f"cert-{uuid.uuid4().hex[:8]}.example.com"
    assert account.admin.post("/reserved_domains", {"domain": domain}).status == 201
    other = api.new_account()
    key, cert_path, _, _ = certified(other.admin)
    refused = _ssh(
        ssh_agents, edge, key, cert_path, upstream, forward=f"{domain}:443:localhost:{upstream}"
    )
    assert refused.wait(timeout=40) == 1, refused.printed()
    assert edge_errors.DOMAIN_OF_ANOTHER_ACCOUNT in refused.err
    # the account's own certificate binds it
    key, cert_path, _, _ = certified(account.admin)
    own = _ssh(
        ssh_agents, edge, key, cert_path, upstream, forward=f"{domain}:443:localhost:{upstream}"
    )
    assert host(own.url()) == domain
    assert edge.http("GET", domain, "/mine").text == "certified /mine"
    own.stop()
