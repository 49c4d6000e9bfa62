"""/ssh_certificate_authorities, /ssh_host_certificates and /ssh_user_certificates at both
levels (in-process and over HTTP): the CA's key generated and kept sealed, certificates that
OpenSSH's own ``ssh-keygen -L`` reads as signed by that CA with the principals, validity,
options and extensions asked for, the hosted codes (1949, 1950, 1952), and every bound at its
edge (docs/SSH.md, "SSH certificates")."""

import base64
import json
import re
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from chalicelib import ssh_certificates as sc
from chalicelib.core import errors, ids, keys, ssh_keys, store
from tests.functional.test_ssh_credentials import public_line

CA_FIELDS = {"id", "uri", "created_at", "description", "metadata", "public_key", "key_type"}
HOST_FIELDS = CA_FIELDS | {
    "ssh_certificate_authority_id",
    "principals",
    "valid_after",
    "valid_until",
    "certificate",
}
USER_FIELDS = HOST_FIELDS | {"critical_options", "extensions"}


def _ts(when):
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def keygen_list(tmp_path, certificate):
    """``ssh-keygen -L -f`` of a certificate line: what OpenSSH itself reads in it."""
    path = tmp_path / f"c{abs(hash(certificate))}-cert.pub"
    path.write_text(certificate + "\n")
    out = subprocess.run(
        ["ssh-keygen", "-L", "-f", str(path)], capture_output=True, text=True, timeout=10
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _ca(principal, **body):
    made = principal.post("/ssh_certificate_authorities", body)
    assert made.status == 201, made
    return made.json


@pytest.mark.parametrize(
    "body,key_type,prefix",
    [
        ({}, "ed25519", "ssh-ed25519 "),
        ({"private_key_type": "ed25519"}, "ed25519", "ssh-ed25519 "),
        ({"private_key_type": "ecdsa"}, "ecdsa", "ecdsa-sha2-nistp256 "),
        ({"private_key_type": "ecdsa", "elliptic_curve": "p384"}, "ecdsa", "ecdsa-sha2-nistp384 "),
        ({"private_key_type": "ecdsa", "elliptic_curve": "p521"}, "ecdsa", "ecdsa-sha2-nistp521 "),
        ({"private_key_type": "rsa", "key_size": 2048}, "rsa", "ssh-rsa "),
    ],
)
def test_a_ca_of_each_key_type(account, tmp_path, body, key_type, prefix):
    ca = _ca(account.admin, description="hosts", **body)
    assert set(ca) == CA_FIELDS
    assert ids.is_valid(ca["id"], "sshca") and ca["key_type"] == key_type
    assert ca["public_key"].startswith(prefix)
    ssh_keys.parse(ca["public_key"])  # a valid authorized_keys line
    cert = account.admin.post(
        "/ssh_host_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line()},
    )
    assert cert.status == 201, cert
    listed = keygen_list(tmp_path, cert.json["certificate"])
    fingerprint = ssh_keys.fingerprint(ssh_keys.parse(ca["public_key"])[1])
    assert f"Signing CA: {'ED25519' if key_type == 'ed25519' else key_type.upper()}" in listed
    assert fingerprint in listed


def test_rsa_4096_is_the_default_size(account):
    ca = _ca(account.admin, private_key_type="rsa")
    _, blob = ssh_keys.parse(ca["public_key"])
    # the modulus: the third string of the blob (type, e, n)
    pos, parts = 0, []
    while pos < len(blob):
        size = int.from_bytes(blob[pos : pos + 4], "big")
        parts.append(blob[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert int.from_bytes(parts[2], "big").bit_length() == 4096


@pytest.mark.parametrize(
    "body,field",
    [
        ({"private_key_type": "dsa"}, "private_key_type"),
        ({"private_key_type": "rsa", "key_size": 1024}, "key_size"),
        ({"private_key_type": "rsa", "key_size": 8192}, "key_size"),
        ({"private_key_type": "ed25519", "key_size": 2048}, "key_size"),
        ({"private_key_type": "ecdsa", "elliptic_curve": "p192"}, "elliptic_curve"),
        ({"private_key_type": "rsa", "elliptic_curve": "p256"}, "elliptic_curve"),
        ({"key_size": "2048"}, "key_size"),
    ],
)
def test_ca_shapes_refused(account, body, field):
    refused = account.admin.post("/ssh_certificate_authorities", body)
    assert refused.status == 400 and refused.json["details"]["field"] == field, refused
    assert (
        account.admin.get("/ssh_certificate_authorities").json["ssh_certificate_authorities"] == []
    )


def test_ca_crud_and_the_private_key_never_leaves(account, store_env_of=None):
    admin = account.admin
    ca = _ca(admin, description="d", metadata="m")
    assert admin.get(f"/ssh_certificate_authorities/{ca['id']}").json == ca
    assert admin.get("/ssh_certificate_authorities").json["ssh_certificate_authorities"] == [ca]
    patched = admin.patch(f"/ssh_certificate_authorities/{ca['id']}", {"description": "e"})
    assert patched.json == {**ca, "description": "e"}
    text = json.dumps([patched.json, admin.get("/ssh_certificate_authorities").json])
    assert "PRIVATE" not in text and "private_key" not in text
    assert (
        admin.patch(f"/ssh_certificate_authorities/{ca['id']}", {"public_key": "x"}).status == 400
    )
    assert admin.delete(f"/ssh_certificate_authorities/{ca['id']}").status == 204
    assert admin.get(f"/ssh_certificate_authorities/{ca['id']}").status == 404
    assert admin.delete(f"/ssh_certificate_authorities/{ca['id']}").status == 404


def test_the_ca_key_is_stored_sealed_and_its_lookup_goes_with_it(inprocess_api):
    account = inprocess_api.new_account()
    ca = _ca(account.admin)
    item = store.get(store.collection_pk(account.id, keys.SSH_CA_COLLECTION), ca["id"])
    sealed = item.data["private_key"]
    assert set(sealed) >= {"alg", "wrapped_key", "ciphertext", "tag"}
    assert b"OPENSSH PRIVATE KEY" not in json.dumps(item.data).encode()
    _, blob = ssh_keys.parse(ca["public_key"])
    found = keys.lookup_ssh_ca_key(blob)
    assert found["account_id"] == account.id and found["ssh_certificate_authority_id"] == ca["id"]
    # sealed to this CA: another CA id as context does not open it
    from chalicelib.core import keywrap

    with pytest.raises(keywrap.SealError):
        keywrap.open_sealed(sealed, {"account": account.id, "ssh_certificate_authority": "x"})
    assert account.admin.delete(f"/ssh_certificate_authorities/{ca['id']}").status == 204
    assert keys.lookup_ssh_ca_key(blob) is None


def test_a_user_certificate_as_ssh_keygen_reads_it(account, tmp_path):
    admin = account.admin
    ca = _ca(admin, private_key_type="ecdsa")
    key = public_line("ed25519", comment="alice@laptop")
    after = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    until = after + timedelta(hours=2)
    made = admin.post(
        "/ssh_user_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": key,
            "principals": ["v2", "alice"],
            "critical_options": {"force-command": "http", "source-address": "10.0.0.0/8,::1"},
            "extensions": {"permit-port-forwarding": "", "permit-pty": ""},
            "valid_after": _ts(after),
            "valid_until": _ts(until),
            "description": "alice",
            "metadata": "{}",
        },
    )
    assert made.status == 201, made
    body = made.json
    assert set(body) == USER_FIELDS and ids.is_valid(body["id"], "sucrt")
    assert body["key_type"] == "ed25519" and body["public_key"] == key
    assert body["principals"] == ["v2", "alice"]
    assert body["valid_after"] == _ts(after) and body["valid_until"] == _ts(until)
    assert body["certificate"].startswith("ssh-ed25519-cert-v01@openssh.com ")
    listed = keygen_list(tmp_path, body["certificate"])
    assert "Type: ssh-ed25519-cert-v01@openssh.com user certificate" in listed
    assert f'Key ID: "{body["id"]}"' in listed
    assert re.search(r"Principals:\s*\n\s*v2\n\s*alice\n", listed), listed
    local = lambda when: when.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
    assert f"Valid: from {local(after)} to {local(until)}" in listed
    assert re.search(r"force-command http", listed) and "source-address 10.0.0.0/8,::1" in listed
    assert "permit-port-forwarding" in listed and "permit-pty" in listed
    assert "permit-user-rc" not in listed
    # the signed key is the one sent
    _, blob = ssh_keys.parse(key)
    assert ssh_keys.fingerprint(blob) in listed
    assert admin.get(f"/ssh_user_certificates/{body['id']}").json == body
    assert [
        c["id"] for c in admin.get("/ssh_user_certificates").json["ssh_user_certificates"]
    ] == [body["id"]]
    assert admin.patch(f"/ssh_user_certificates/{body['id']}", {"metadata": "x"}).json == {
        **body,
        "metadata": "x",
    }
    assert admin.delete(f"/ssh_user_certificates/{body['id']}").status == 204
    assert admin.get(f"/ssh_user_certificates/{body['id']}").status == 404


def test_defaults_hosted_extensions_and_24_hours(account, tmp_path):
    ca = _ca(account.admin)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    made = account.member.post(
        "/ssh_user_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": public_line("ecdsa"),
            "principals": [],
            "critical_options": {},
            "extensions": {},
            "valid_after": "",
            "valid_until": "",
            "description": "",
            "metadata": "",
        },
    )
    assert made.status == 201, made
    body = made.json
    assert body["extensions"] == {"permit-pty": "", "permit-user-rc": ""}  # {} sent: default
    assert body["critical_options"] == {} and body["principals"] == []
    after = datetime.fromisoformat(body["valid_after"].replace("Z", "+00:00"))
    until = datetime.fromisoformat(body["valid_until"].replace("Z", "+00:00"))
    assert before <= after <= before + timedelta(seconds=5)
    assert until - after == timedelta(hours=24)
    listed = keygen_list(tmp_path, body["certificate"])
    assert re.search(r"Principals: \(none\)", listed)
    host = account.member.post(
        "/ssh_host_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line("rsa2048")},
    ).json
    assert set(host) == HOST_FIELDS and ids.is_valid(host["id"], "shcrt")
    h_after = datetime.fromisoformat(host["valid_after"].replace("Z", "+00:00"))
    h_until = datetime.fromisoformat(host["valid_until"].replace("Z", "+00:00"))
    assert h_until - h_after == timedelta(days=365)
    assert "host certificate" in keygen_list(tmp_path, host["certificate"])


def test_hosted_codes_for_the_key_and_the_ca(account, other_account):
    ca = _ca(account.admin)
    foreign = _ca(other_account.admin)
    for path in ("/ssh_user_certificates", "/ssh_host_certificates"):
        missing = account.admin.post(path, {"ssh_certificate_authority_id": ca["id"]})
        assert missing.status == 400 and missing.json["error_code"] == errors.SSH_CERT_KEY_MISSING
        empty = account.admin.post(
            path, {"ssh_certificate_authority_id": ca["id"], "public_key": "  "}
        )
        assert empty.json["error_code"] == errors.SSH_CERT_KEY_MISSING
        for kind in ("ssh-dss", "sk-ssh-ed25519@openssh.com", "ssh-ed25519-cert-v01@openssh.com"):
            typed = account.admin.post(
                path, {"ssh_certificate_authority_id": ca["id"], "public_key": f"{kind} AAAA"}
            )
            assert typed.status == 400 and typed.json["error_code"] == errors.SSH_CERT_KEY_TYPE
            assert kind in typed.json["msg"]
        garbage = account.admin.post(
            path, {"ssh_certificate_authority_id": ca["id"], "public_key": "ssh-ed25519 AAAA"}
        )
        assert garbage.status == 400 and garbage.json["details"]["field"] == "public_key"
        for ca_id in (foreign["id"], "sshca_nope", "", None):
            body = {"public_key": public_line()}
            if ca_id is not None:
                body["ssh_certificate_authority_id"] = ca_id
            unknown = account.admin.post(path, body)
            assert unknown.status == 400, unknown
            assert unknown.json["error_code"] == errors.SSH_CA_UNKNOWN
        assert account.admin.get(path).json[path.strip("/")] == []


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"principals": ["a,b"]}, "principals"),
        ({"principals": ["has space"]}, "principals"),
        ({"principals": [""]}, "principals"),
        ({"principals": ["p"] * (sc.MAX_PRINCIPALS + 1)}, "principals"),
        ({"principals": ["x" * (sc.MAX_PRINCIPAL_BYTES + 1)]}, "principals"),
        ({"valid_after": "yesterday"}, "valid_after"),
        ({"valid_until": "2026-01-01T00:00:00"}, "valid_until"),
        (
            {"valid_after": "2026-01-02T00:00:00Z", "valid_until": "2026-01-01T00:00:00Z"},
            "valid_until",
        ),
        (
            {"valid_after": "2026-01-01T00:00:00Z", "valid_until": "2026-01-01T00:00:00Z"},
            "valid_until",
        ),
        ({"critical_options": {"permit-everything": ""}}, "critical_options"),
        ({"critical_options": {"verify-required": "yes"}}, "critical_options"),
        ({"critical_options": {"source-address": "10.0.0.0/8,nonsense"}}, "critical_options"),
        (
            {"critical_options": {"source-address": ",".join(["10.0.0.1"] * 33)}},
            "critical_options",
        ),
        ({"critical_options": {"force-command": "x" * 1025}}, "critical_options"),
        ({"extensions": {f"e{i}": "" for i in range(sc.MAX_EXTENSIONS + 1)}}, "extensions"),
        ({"extensions": {"x" * 65: ""}}, "extensions"),
        ({"extensions": {"e": "v" * 1025}}, "extensions"),
    ],
)
def test_certificate_rules_refused(account, extra, field):
    ca = _ca(account.admin)
    refused = account.admin.post(
        "/ssh_user_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line(), **extra},
    )
    named = refused.json["details"]["field"].split(".")[0]
    assert refused.status == 400 and named == field, refused
    assert account.admin.get("/ssh_user_certificates").json["ssh_user_certificates"] == []


def test_host_certificates_take_no_user_options(account):
    ca = _ca(account.admin)
    refused = account.admin.post(
        "/ssh_host_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": public_line(),
            "extensions": {"permit-pty": ""},
        },
    )
    assert refused.status == 400 and refused.json["error_code"] == errors.UNKNOWN_FIELD


def test_validity_bounds_at_their_edges(account):
    ca = _ca(account.admin)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def make(until, after=start):
        return account.admin.post(
            "/ssh_host_certificates",
            {
                "ssh_certificate_authority_id": ca["id"],
                "public_key": public_line(),
                "valid_after": _ts(after),
                "valid_until": _ts(until),
            },
        )

    assert make(start + sc.MAX_VALIDITY).status == 201
    too_long = make(start + sc.MAX_VALIDITY + timedelta(seconds=1))
    assert too_long.status == 400 and too_long.json["details"]["field"] == "valid_until"
    assert make(start + timedelta(seconds=1)).status == 201  # expired long ago: accepted
    # offsets are read as the same instant
    offset = account.admin.post(
        "/ssh_host_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": public_line(),
            "valid_after": "2026-01-01T02:00:00+02:00",
            "valid_until": "2026-01-02T00:00:00Z",
        },
    )
    assert offset.json["valid_after"] == "2026-01-01T00:00:00Z"


def test_at_most_ten_cas_per_account(inprocess_api):
    account = inprocess_api.new_account()
    for _ in range(sc.MAX_CAS):
        _ca(account.admin)
    refused = account.admin.post("/ssh_certificate_authorities", {})
    assert refused.status == 409 and str(sc.MAX_CAS) in refused.json["msg"]
    assert (
        len(account.admin.get("/ssh_certificate_authorities").json["ssh_certificate_authorities"])
        == sc.MAX_CAS
    )
    other = inprocess_api.new_account()
    assert other.admin.post("/ssh_certificate_authorities", {}).status == 201


@pytest.mark.parametrize("path", ["/ssh_user_certificates", "/ssh_host_certificates"])
def test_at_most_max_certificates_per_account(inprocess_api, path, monkeypatch):
    """The bound's rule at its edge, with the bound made 3 (100 creates cost ~1 min in moto;
    docs/SSH.md states the real one, test_documented_limits holds the two together)."""
    monkeypatch.setattr(sc, "MAX_CERTIFICATES", 3)
    account = inprocess_api.new_account()
    ca = _ca(account.admin)
    key = public_line()
    body = {"ssh_certificate_authority_id": ca["id"], "public_key": key}
    for _ in range(sc.MAX_CERTIFICATES):
        assert account.admin.post(path, body).status == 201
    refused = account.admin.post(path, body)
    assert refused.status == 409 and str(sc.MAX_CERTIFICATES) in refused.json["msg"]
    first = account.admin.get(f"{path}?limit=1").json[path.strip("/")][0]["id"]
    assert account.admin.delete(f"{path}/{first}").status == 204
    assert account.admin.post(path, body).status == 201


def test_certificates_of_a_deleted_ca_stay_listed(account):
    ca = _ca(account.admin)
    cert = account.admin.post(
        "/ssh_user_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line()},
    ).json
    assert account.admin.delete(f"/ssh_certificate_authorities/{ca['id']}").status == 204
    assert account.admin.get(f"/ssh_user_certificates/{cert['id']}").json == cert
    again = account.admin.post(
        "/ssh_user_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line()},
    )
    assert again.json["error_code"] == errors.SSH_CA_UNKNOWN


def test_another_accounts_certificates_are_404(account, other_account):
    ca = _ca(account.admin)
    cert = account.admin.post(
        "/ssh_user_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_line()},
    ).json
    for path in (
        f"/ssh_certificate_authorities/{ca['id']}",
        f"/ssh_user_certificates/{cert['id']}",
    ):
        assert other_account.admin.get(path).status == 404
        assert other_account.admin.delete(path).status == 404
        assert other_account.admin.patch(path, {"description": "x"}).status == 404


def test_the_certificate_is_signed_by_the_cas_key(account):
    """Verified with cryptography's own loader: the certificate's signature checks against
    the CA's public key as returned."""
    from cryptography.hazmat.primitives import serialization

    ca = _ca(account.admin, private_key_type="rsa", key_size=2048)
    cert = account.admin.post(
        "/ssh_user_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": public_line(),
            "principals": ["p"],
        },
    ).json
    loaded = serialization.load_ssh_public_identity(cert["certificate"].encode())
    loaded.verify_cert_signature()
    signer = loaded.signature_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert signer.decode() == ca["public_key"]
    assert loaded.key_id == cert["id"].encode() and loaded.valid_principals == [b"p"]
    assert base64.b64decode(cert["certificate"].split()[1])  # one base64 blob


def test_the_bounds_are_the_documented_ones():
    """docs/SSH.md's table, written as it writes them (the bound tests above use the constants)."""
    assert (sc.MAX_CAS, sc.MAX_CERTIFICATES, sc.MAX_PRINCIPALS) == (10, 100, 64)
    assert sc.MAX_VALIDITY == timedelta(days=1825)
    assert sc.DEFAULT_USER_VALIDITY == timedelta(hours=24)
    assert sc.DEFAULT_HOST_VALIDITY == timedelta(days=365)
    assert sc.RSA_SIZES == (2048, 4096) and sc.CURVES == ("p256", "p384", "p521")
