"""The edge serves the certificates the store holds, per SNI name: a reserved domain's uploaded
certificate (exact, and one label under a wildcard reservation), the local CA for every other
name; a replaced certificate is picked up by new handshakes while open connections go on."""

import hashlib
import socket
import ssl
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from stacks.certs import SmallCA, key_pem, pem


def served(edge, name: str, cafile: str) -> x509.Certificate:
    """The certificate the HTTPS listener presents for SNI ``name``, verified against
    ``cafile`` only (ssl.SSLCertVerificationError otherwise)."""
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", edge.https_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def wait_served(edge, name, cafile, fingerprint, timeout=10.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            cert = served(edge, name, cafile)
            last = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
            if last == fingerprint:
                return cert
        except ssl.SSLError as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise AssertionError(f"{name}: served {last}, not {fingerprint}")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    authority = SmallCA("Edge Upload CA")
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    path.write_text(authority.pem)
    return authority, str(path)


def upload(admin, authority, names):
    cert, key = authority.leaf(names)
    resp = admin.post(
        "/tls_certificates",
        {"certificate_pem": pem(cert) + authority.pem, "private_key_pem": key_pem(key)},
    )
    assert resp.status == 201, resp
    return resp.json


def test_uploaded_certificates_are_served_by_sni(edge, account, ca):
    authority, cafile = ca
    admin = account.admin
    exact = upload(admin, authority, ["shop.upload-test.example"])
    wild = upload(admin, authority, ["*.apps.upload-test.example"])
    assert (
        admin.post(
            "/reserved_domains",
            {"domain": "shop.upload-test.example", "certificate_id": exact["id"]},
        ).status
        == 201
    )
    rd = admin.post(
        "/reserved_domains", {"domain": "*.apps.upload-test.example", "certificate_id": wild["id"]}
    )
    assert rd.status == 201
    wait_served(edge, "shop.upload-test.example", cafile, exact["fingerprint"])
    wait_served(edge, "a.apps.upload-test.example", cafile, wild["fingerprint"])
    # two labels under the wildcard: no certificate covers it, the local CA serves it
    with pytest.raises(ssl.SSLCertVerificationError):
        served(edge, "b.a.apps.upload-test.example", cafile)
    assert served(edge, "b.a.apps.upload-test.example", edge.ca_path)
    # a name nothing else covers keeps the local CA
    assert served(edge, "other.upload-test.example", edge.ca_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        served(edge, "other.upload-test.example", cafile)
    # detached: back to the local CA
    assert admin.delete(f"/reserved_domains/{rd.json['id']}/certificate").status == 204
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            served(edge, "a.apps.upload-test.example", edge.ca_path)
            break
        except ssl.SSLCertVerificationError:
            time.sleep(0.2)
    else:
        raise AssertionError("the detached certificate is still served")


def test_a_replaced_certificate_is_picked_up_without_dropping_connections(edge, account, ca):
    authority, cafile = ca
    admin = account.admin
    first = upload(admin, authority, ["swap.upload-test.example"])
    rd = admin.post(
        "/reserved_domains", {"domain": "swap.upload-test.example", "certificate_id": first["id"]}
    ).json
    wait_served(edge, "swap.upload-test.example", cafile, first["fingerprint"])
    ctx = ssl.create_default_context(cafile=cafile)
    raw = socket.create_connection(("127.0.0.1", edge.https_port), timeout=10)
    kept = ctx.wrap_socket(raw, server_hostname="swap.upload-test.example")
    try:
        second = upload(admin, authority, ["swap.upload-test.example"])
        assert (
            admin.patch(f"/reserved_domains/{rd['id']}", {"certificate_id": second["id"]}).status
            == 200
        )
        wait_served(edge, "swap.upload-test.example", cafile, second["fingerprint"])
        # the connection made before the swap still carries requests
        kept.sendall(b"GET / HTTP/1.1\r\nHost: swap.upload-test.example\r\n\r\n")
        head = kept.recv(4096)
        assert head.startswith(b"HTTP/1.1 404"), head
    finally:
        kept.close()


def test_another_accounts_certificate_never_serves_my_name(edge, api, ca):
    """The served certificate is the one the domain's own account attached: another account
    cannot attach a certificate to a domain it does not hold (the API refuses), and its
    certificate for the same name is never served."""
    authority, cafile = ca
    owner, intruder = api.new_account(), api.new_account()
    mine = upload(owner.admin, authority, ["owned.upload-test.example"])
    assert (
        owner.admin.post(
            "/reserved_domains",
            {"domain": "owned.upload-test.example", "certificate_id": mine["id"]},
        ).status
        == 201
    )
    theirs = upload(intruder.admin, authority, ["owned.upload-test.example"])
    taken = intruder.admin.post(
        "/reserved_domains",
        {"domain": "owned.upload-test.example", "certificate_id": theirs["id"]},
    )
    assert taken.status == 409
    wait_served(edge, "owned.upload-test.example", cafile, mine["fingerprint"])
