"""/certificate_authorities at both levels: PEM checks, fields read from the certificate."""

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chalicelib import certificate_authorities
from chalicelib.core import ids

PATH = "/certificate_authorities"
FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "ca_pem",
    "subject_common_name",
    "not_before",
    "not_after",
    "key_usages",
    "extended_key_usages",
}


def make_cert(cn="Test CA", ca=True, extensions=True):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=365))
    )
    if extensions:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        )
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False
        )
    cert = builder.sign(key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key


def upload(caller, pem=None, **fields):
    resp = caller.post(PATH, {"ca_pem": pem or make_cert()[0], **fields})
    assert resp.status == 201, resp
    return resp.json


def test_certificate_authority_crud(account):
    admin = account.admin
    pem, _ = make_cert("Office CA")
    ca = upload(admin, pem, description="office")
    assert set(ca) == FIELDS and ids.is_valid(ca["id"], "ca")
    assert ca["ca_pem"] == pem and ca["subject_common_name"] == "Office CA"
    assert ca["not_before"] == "2026-01-01T00:00:00Z"
    assert ca["not_after"] == "2027-01-01T00:00:00Z"
    assert ca["key_usages"] == ["digital_signature", "key_cert_sign", "crl_sign"]
    assert ca["extended_key_usages"] == ["client_auth"]
    assert admin.get(f"{PATH}/{ca['id']}").json == ca
    assert admin.get(PATH).json["certificate_authorities"] == [ca]
    updated = admin.patch(f"{PATH}/{ca['id']}", {"metadata": "m"})
    assert updated.status == 200 and updated.json == {**ca, "metadata": "m"}
    assert admin.patch(f"{PATH}/{ca['id']}", {"ca_pem": pem}).status == 400
    assert admin.delete(f"{PATH}/{ca['id']}").status == 204
    assert admin.get(f"{PATH}/{ca['id']}").status == 404


def test_certificate_without_extensions_is_accepted(account):
    ca = upload(account.admin, make_cert("Old CA", extensions=False)[0])
    assert ca["key_usages"] == [] and ca["extended_key_usages"] == []


def test_bad_pems_return_400(account):
    pem, key = make_cert()
    leaf, _ = make_cert(ca=False)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    broken = pem.replace(pem.splitlines()[3], "A" * len(pem.splitlines()[3]))
    for bad in (
        "",
        "hello",
        key_pem,
        pem + pem,
        leaf,
        broken,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        pem + " " * (certificate_authorities.MAX_PEM_BYTES - len(pem) + 1),
    ):
        resp = account.admin.post(PATH, {"ca_pem": bad})
        assert resp.status == 400, (bad[:80], resp)
        assert resp.json["details"]["field"] == "ca_pem"
    assert account.admin.post(PATH, {}).json["details"]["field"] == "ca_pem"
    assert account.admin.get(PATH).json["certificate_authorities"] == []
    # the size limit is inclusive
    padded = pem + "\n" * (certificate_authorities.MAX_PEM_BYTES - len(pem))
    assert upload(account.admin, padded)["ca_pem"] == pem


def test_ca_used_by_mutual_tls_cannot_be_deleted(account, other_account):
    admin = account.admin
    ca, ca2 = upload(admin), upload(admin)
    edge = admin.post("/edges/https", {"mutual_tls": {"certificate_authority_ids": [ca["id"]]}})
    assert edge.status == 201, edge
    edge = edge.json
    assert edge["mutual_tls"] == {
        "enabled": True,
        "certificate_authorities": [{"id": ca["id"], "uri": ca["uri"]}],
    }
    assert admin.delete(f"{PATH}/{ca['id']}").status == 409
    theirs = upload(other_account.admin)
    resp = admin.put(
        f"/edges/https/{edge['id']}/mutual_tls", {"certificate_authority_ids": [theirs["id"]]}
    )
    assert resp.status == 400 and theirs["id"] in resp.json["msg"]
    replaced = admin.put(
        f"/edges/https/{edge['id']}/mutual_tls",
        {"enabled": False, "certificate_authority_ids": [ca2["id"]]},
    )
    assert replaced.status == 200 and replaced.json["enabled"] is False
    assert admin.delete(f"{PATH}/{ca['id']}").status == 204
    assert admin.delete(f"{PATH}/{ca2['id']}").status == 409
    assert admin.delete(f"/edges/https/{edge['id']}/mutual_tls").status == 204
    assert admin.delete(f"{PATH}/{ca2['id']}").status == 204


def test_pems_reads_what_the_edge_needs(api, account):
    if api.level != "inprocess":
        pytest.skip("a function over the store: called in-process")
    a, b = upload(account.admin), upload(account.admin)
    missing = "ca_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    assert certificate_authorities.pems(account.id, [b["id"], missing, a["id"]]) == [
        b["ca_pem"],
        a["ca_pem"],
    ]
