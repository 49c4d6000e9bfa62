"""/tls_certificates at both levels, and a reserved domain's certificate_id: parsed fields, the
key check, bounds, isolation between accounts, references; the reference client over HTTP."""

import hashlib

import ngrok
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from chalicelib import tls_certificates
from chalicelib.core import errors, ids
from chalicelib.core import acme_orders as orders
from stacks.certs import SmallCA, key_pem, pem, rsa_key
from chalicelib.core import certs

PATH = "/tls_certificates"
FIELDS = {
    "id",
    "uri",
    "created_at",
    "description",
    "metadata",
    "certificate_pem",
    "subject_common_name",
    "subject_alternative_names",
    "issued_at",
    "not_before",
    "not_after",
    "key_usages",
    "extended_key_usages",
    "private_key_type",
    "issuer_common_name",
    "serial_number",
    "subject_organization",
    "subject_organizational_unit",
    "subject_locality",
    "subject_province",
    "subject_country",
    "fingerprint",
}


@pytest.fixture(scope="module")
def ca():
    return SmallCA("Upload Test CA")


def upload(caller, body):
    resp = caller.post(PATH, body)
    assert resp.status == 201, resp
    return resp.json


def test_tls_certificate_crud_and_parsed_fields(account, ca):
    admin = account.admin
    cert, key = ca.leaf(["www.example.com", "example.com", "10.0.0.1"], org="Example Org")
    created = upload(
        admin,
        {
            "certificate_pem": pem(cert) + ca.pem,
            "private_key_pem": key_pem(key),
            "description": "site",
        },
    )
    assert set(created) == FIELDS and ids.is_valid(created["id"], "cert")
    assert created["certificate_pem"] == pem(cert) + ca.pem
    assert created["subject_common_name"] == "www.example.com"
    assert created["subject_alternative_names"] == {
        "dns_names": ["www.example.com", "example.com"],
        "ips": ["10.0.0.1"],
    }
    assert created["issuer_common_name"] == "Upload Test CA"
    assert created["subject_organization"] == "Example Org"
    assert created["subject_country"] == "" and created["subject_locality"] == ""
    assert created["serial_number"] == format(cert.serial_number, "x")
    assert created["private_key_type"] == "ecdsa" and created["issued_at"] is None
    assert created["key_usages"] == ["digital_signature"]
    assert created["extended_key_usages"] == ["server_auth"]
    assert created["not_after"] == cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (
        created["fingerprint"]
        == hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    )
    assert "private_key_pem" not in created and "private_key" not in created
    assert admin.get(f"{PATH}/{created['id']}").json == created
    assert admin.get(PATH).json["tls_certificates"] == [created]
    updated = admin.patch(f"{PATH}/{created['id']}", {"metadata": "m", "description": "d"})
    assert updated.status == 200 and updated.json == {
        **created,
        "metadata": "m",
        "description": "d",
    }
    refused = admin.patch(f"{PATH}/{created['id']}", {"certificate_pem": pem(cert)})
    assert refused.status == 400 and refused.json["error_code"] == errors.UNKNOWN_FIELD
    assert admin.delete(f"{PATH}/{created['id']}").status == 204
    assert admin.get(f"{PATH}/{created['id']}").status == 404
    assert admin.delete(f"{PATH}/{created['id']}").status == 404


def test_rsa_keys_in_both_pem_forms(account, ca):
    key = rsa_key(2048)
    cert, _ = ca.leaf(["rsa.example.com"], key=key)
    for traditional in (False, True):
        made = upload(
            account.admin,
            {"certificate_pem": pem(cert), "private_key_pem": key_pem(key, traditional)},
        )
        assert made["private_key_type"] == "rsa"
    ec_key = ec.generate_private_key(ec.SECP384R1())
    cert, _ = ca.leaf(["p384.example.com"], key=ec_key)
    assert (
        upload(
            account.admin, {"certificate_pem": pem(cert), "private_key_pem": key_pem(ec_key, True)}
        )["private_key_type"]
        == "ecdsa"
    )


def _refused(caller, body, field):
    resp = caller.post(PATH, body)
    assert resp.status == 400, resp
    assert resp.json["details"].get("field") == field, resp.json
    return resp.json["msg"]


def test_a_key_that_does_not_match_is_a_400_and_stores_nothing(account, ca):
    cert, _ = ca.leaf(["a.example.com"])
    other = ec.generate_private_key(ec.SECP256R1())
    msg = _refused(
        account.admin,
        {"certificate_pem": pem(cert), "private_key_pem": key_pem(other)},
        "private_key_pem",
    )
    assert "does not match" in msg
    # an RSA key against an EC certificate, and the CA's own key against the leaf
    _refused(
        account.admin,
        {"certificate_pem": pem(cert), "private_key_pem": key_pem(rsa_key())},
        "private_key_pem",
    )
    _refused(
        account.admin,
        {"certificate_pem": pem(cert) + ca.pem, "private_key_pem": key_pem(ca.key)},
        "private_key_pem",
    )
    assert account.admin.get(PATH).json["tls_certificates"] == []


def test_hostile_and_malformed_input_is_a_clear_400(account, ca):
    admin = account.admin
    cert, key = ca.leaf(["b.example.com"])
    good_cert, good_key = pem(cert), key_pem(key)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    ).decode()
    assert "encrypted" in _refused(
        admin, {"certificate_pem": good_cert, "private_key_pem": encrypted}, "private_key_pem"
    )
    _refused(
        admin,
        {"certificate_pem": good_cert, "private_key_pem": good_key + good_key},
        "private_key_pem",
    )
    _refused(admin, {"certificate_pem": good_cert, "private_key_pem": "junk"}, "private_key_pem")
    _refused(admin, {"certificate_pem": "junk", "private_key_pem": good_key}, "certificate_pem")
    _refused(
        admin,
        {"certificate_pem": good_cert + good_key, "private_key_pem": good_key},
        "certificate_pem",
    )
    assert "at most 10" in _refused(
        admin, {"certificate_pem": good_cert * 11, "private_key_pem": good_key}, "certificate_pem"
    )
    broken = good_cert.replace(good_cert.splitlines()[3], "A" * 64)
    _refused(admin, {"certificate_pem": broken, "private_key_pem": good_key}, "certificate_pem")
    too_big = good_cert + "\n" * tls_certificates.MAX_CERT_PEM_BYTES
    _refused(admin, {"certificate_pem": too_big, "private_key_pem": good_key}, "certificate_pem")
    big_key = good_key + " " * tls_certificates.MAX_KEY_PEM_BYTES
    _refused(admin, {"certificate_pem": good_cert, "private_key_pem": big_key}, "private_key_pem")
    small = rsa_key(1024)
    small_cert, _ = ca.leaf(["small.example.com"], key=small)
    assert "2048" in _refused(
        admin,
        {"certificate_pem": pem(small_cert), "private_key_pem": key_pem(small)},
        "private_key_pem",
    )
    missing = admin.post(PATH, {"certificate_pem": good_cert})
    assert missing.status == 400 and missing.json["error_code"] == errors.MISSING_FIELD
    assert admin.get(PATH).json["tls_certificates"] == []


def test_list_pages_newest_first(account, ca):
    made = [upload(account.admin, ca.upload_body([f"p{i}.example.com"]))["id"] for i in range(3)]
    page = account.admin.get(PATH + "?limit=2").json
    assert [c["id"] for c in page["tls_certificates"]] == made[::-1][:2]
    assert page["next_page_uri"].endswith(f"before_id={made[1]}&limit=2")
    rest = account.admin.get(f"{PATH}?limit=2&before_id={made[1]}").json
    assert [c["id"] for c in rest["tls_certificates"]] == [made[0]]
    assert rest["next_page_uri"] is None


def test_another_accounts_certificates_are_out_of_reach(account, other_account, ca):
    mine = upload(account.admin, ca.upload_body(["mine.example.com"]))
    theirs = other_account.admin
    assert theirs.get(f"{PATH}/{mine['id']}").status == 404
    assert theirs.patch(f"{PATH}/{mine['id']}", {"description": "x"}).status == 404
    assert theirs.delete(f"{PATH}/{mine['id']}").status == 404
    assert theirs.get(PATH).json["tls_certificates"] == []
    # nor can their reserved domain use it
    resp = theirs.post(
        "/reserved_domains", {"domain": "mine.example.com", "certificate_id": mine["id"]}
    )
    assert resp.status == 400 and resp.json["details"]["field"] == "certificate_id"
    assert account.admin.get(f"{PATH}/{mine['id']}").status == 200


def test_reserved_domain_certificate_id(account, ca):
    admin = account.admin
    cert = upload(admin, ca.upload_body(["shop.example.com"]))
    wild = upload(admin, ca.upload_body(["*.apps.example.com"]))
    domain = admin.post(
        "/reserved_domains", {"domain": "shop.example.com", "certificate_id": cert["id"]}
    )
    assert domain.status == 201, domain
    rd = domain.json
    assert rd["certificate"] == {"id": cert["id"], "uri": cert["uri"]}
    assert rd["certificate_management_policy"] is None
    assert rd["certificate_management_status"] is None
    # a certificate in use cannot be deleted
    busy = admin.delete(f"{PATH}/{cert['id']}")
    assert busy.status == 409 and busy.json["error_code"] == errors.CONFLICT
    # one that does not cover the domain is refused; so is a policy with it
    refused = admin.post(
        "/reserved_domains", {"domain": "other.example.com", "certificate_id": cert["id"]}
    )
    assert refused.status == 400 and "does not cover" in refused.json["msg"]
    both = admin.post(
        "/reserved_domains",
        {
            "domain": "x.apps.example.com",
            "certificate_id": wild["id"],
            "certificate_management_policy": {"authority": "letsencrypt"},
        },
    )
    assert both.status == 400 and "mutually exclusive" in both.json["msg"]
    wild_rd = admin.post(
        "/reserved_domains", {"domain": "*.apps.example.com", "certificate_id": wild["id"]}
    )
    assert wild_rd.status == 201 and wild_rd.json["certificate"]["id"] == wild["id"]
    # switching to another certificate moves the reference
    second = upload(admin, ca.upload_body(["shop.example.com"]))
    moved = admin.patch(f"/reserved_domains/{rd['id']}", {"certificate_id": second["id"]})
    assert moved.status == 200 and moved.json["certificate"]["id"] == second["id"]
    assert admin.get(f"/reserved_domains/{rd['id']}").json == moved.json
    assert admin.delete(f"{PATH}/{cert['id']}").status == 204
    assert admin.delete(f"{PATH}/{second['id']}").status == 409
    # detaching frees it
    assert admin.delete(f"/reserved_domains/{rd['id']}/certificate").status == 204
    assert admin.get(f"/reserved_domains/{rd['id']}").json["certificate"] is None
    assert admin.delete(f"{PATH}/{second['id']}").status == 204
    # deleting the domain releases its certificate
    assert admin.delete(f"/reserved_domains/{wild_rd.json['id']}").status == 204
    assert admin.delete(f"{PATH}/{wild['id']}").status == 204


def test_policy_and_uploaded_certificate_replace_each_other(account, ca):
    admin = account.admin
    rd = admin.post("/reserved_domains", {"domain": "managed.example.com"}).json
    assert rd["certificate_management_policy"] is not None
    cert = upload(admin, ca.upload_body(["managed.example.com"]))
    attached = admin.patch(f"/reserved_domains/{rd['id']}", {"certificate_id": cert["id"]}).json
    assert attached["certificate_management_policy"] is None
    assert attached["certificate_management_status"] is None
    assert attached["certificate"]["id"] == cert["id"]
    managed = admin.patch(
        f"/reserved_domains/{rd['id']}",
        {"certificate_management_policy": {"private_key_type": "rsa"}},
    ).json
    assert managed["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "rsa",
    }
    job = managed["certificate_management_status"]["provisioning_job"]
    # no ACME directory here: the job says the attached upload keeps being served
    assert job["msg"] == orders.NO_ACME_UPLOADED_MSG.format(cert_id=cert["id"])
    # the uploaded certificate serves until the managed one is issued
    assert managed["certificate"]["id"] == cert["id"]


def test_the_reference_client(http_api, ca):
    account = http_api.new_account()
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    body = ca.upload_body(["client.example.com"])
    made = client.tls_certificates.create(
        certificate_pem=body["certificate_pem"],
        private_key_pem=body["private_key_pem"],
        description="from the client",
    )
    assert made.id.startswith("cert_") and made.description == "from the client"
    assert made.subject_alternative_names.dns_names == ["client.example.com"]
    assert made.private_key_type == "ecdsa" and made.issued_at is None
    assert (
        client.tls_certificates.get(made.id)._props["fingerprint"] == made._props["fingerprint"]
    )  # beyond the hosted object: the client keeps it as sent
    updated = client.tls_certificates.update(made.id, metadata="m")
    assert updated.metadata == "m" and updated.description == "from the client"
    assert [c.id for c in client.tls_certificates.list()] == [made.id]
    rd = client.reserved_domains.create(domain="client.example.com", certificate_id=made.id)
    assert rd.certificate.id == made.id
    with pytest.raises(ngrok.Error) as refused:
        client.tls_certificates.delete(made.id)
    assert refused.value.http_status_code == 409
    client.reserved_domains.delete_certificate(rd.id)
    assert client.reserved_domains.get(rd.id).certificate is None
    client.tls_certificates.delete(made.id)
    with pytest.raises(ngrok.NotFoundError):
        client.tls_certificates.get(made.id)
    bad = ca.upload_body(["client.example.com"])
    with pytest.raises(ngrok.Error) as mismatch:
        client.tls_certificates.create(
            certificate_pem=bad["certificate_pem"],
            private_key_pem=key_pem(ec.generate_private_key(ec.SECP256R1())),
        )
    assert mismatch.value.http_status_code == 400


def test_the_stored_key_is_sealed(inprocess_api, ca):
    """The item holds no key material in the clear, and the edge's read opens it."""
    from chalicelib.core import store

    account = inprocess_api.new_account()
    cert, key = ca.leaf(["sealed.example.com"])
    made = upload(account.admin, {"certificate_pem": pem(cert), "private_key_pem": key_pem(key)})
    item = store.get(store.collection_pk(account.id, "tls_certificate"), made["id"])
    raw = repr(item.data)
    numbers = key.private_numbers()
    assert "PRIVATE KEY" not in raw and format(numbers.private_value, "x") not in raw
    chain, opened, fingerprint = certs.key_pair(account.id, made["id"])
    assert fingerprint == made["fingerprint"] and chain == made["certificate_pem"]
    loaded = serialization.load_pem_private_key(opened.encode(), None)
    assert loaded.private_numbers() == numbers
    # the sealed key does not open as another account's or another certificate's
    from chalicelib.core import keywrap

    with pytest.raises(keywrap.SealError):
        keywrap.open_sealed(item.data["private_key"], certs.key_context("acct_other", made["id"]))
    assert x509.load_pem_x509_certificate(chain.encode()).subject == cert.subject


def test_a_policy_puts_the_domain_on_the_acme_queue_and_removing_it_takes_it_off(inprocess_api):
    from chalicelib.core import store

    account = inprocess_api.new_account()
    admin = account.admin
    rd = admin.post("/reserved_domains", {"domain": "queued.example.com"}).json
    sk = orders.queue_sk(account.id, rd["id"])
    entry = store.get(orders.QUEUE_PK, sk)
    assert entry is not None and entry.data["domain"] == "queued.example.com"
    assert entry.data["due_at"] == 0
    assert (
        admin.delete(f"/reserved_domains/{rd['id']}/certificate_management_policy").status == 204
    )
    assert store.get(orders.QUEUE_PK, sk) is None
    again = admin.patch(f"/reserved_domains/{rd['id']}", {"certificate_management_policy": {}})
    assert again.status == 200 and store.get(orders.QUEUE_PK, sk) is not None
    assert (
        again.json["certificate_management_status"]["provisioning_job"]["msg"]
        == orders.NO_ACME_FALLBACK_MSG
    )
    assert admin.delete(f"/reserved_domains/{rd['id']}").status == 204
    assert store.get(orders.QUEUE_PK, sk) is None
    # a domain under the service's own base domain never gets one
    own = admin.post("/reserved_domains", {"domain": "mine.tunnels.localhost"}).json
    assert store.get(orders.QUEUE_PK, orders.queue_sk(account.id, own["id"])) is None
