"""Keys at rest and key checks: chalicelib.core.keywrap (sealing, local key file and KMS envelope),
chalicelib.core.keypairs (the pure-Python key/certificate match), the ACME queue's leases and
back-off (chalicelib.core.acme_orders)."""

import os
import random
import stat

import pytest
from asn1crypto import keys as asn1_keys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from chalicelib.core import keypairs, keywrap
from chalicelib.core import acme_orders as orders


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    path = tmp_path / "keys" / "tls-keys.secret"
    monkeypatch.setenv("TLS_KEY_FILE", str(path))
    monkeypatch.delenv("TLS_KMS_KEY_ID", raising=False)
    return path


def test_sealed_secrets_open_only_with_their_context_and_key(key_file):
    secret = b"-----BEGIN PRIVATE KEY-----\n" + os.urandom(300)
    sealed = keywrap.seal(secret, {"account_id": "a", "tls_certificate_id": "c"})
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert secret not in repr(sealed).encode()
    assert keywrap.open_sealed(sealed, {"account_id": "a", "tls_certificate_id": "c"}) == secret
    for context in (
        {"account_id": "b", "tls_certificate_id": "c"},
        {"account_id": "a", "tls_certificate_id": "d"},
        {},
    ):
        with pytest.raises(keywrap.SealError):
            keywrap.open_sealed(sealed, context)
    # any changed byte of the ciphertext, nonce, tag or wrapped key is refused
    import base64

    for path in (("ciphertext",), ("nonce",), ("tag",), ("wrapped_key", "local", "ciphertext")):
        changed = {
            **sealed,
            "wrapped_key": {
                **sealed["wrapped_key"],
                "local": dict(sealed["wrapped_key"]["local"]),
            },
        }
        holder = changed
        for part in path[:-1]:
            holder = holder[part]
        raw = bytearray(base64.b64decode(holder[path[-1]]))
        raw[random.randrange(len(raw))] ^= 0x01
        holder[path[-1]] = base64.b64encode(bytes(raw)).decode()
        with pytest.raises(keywrap.SealError):
            keywrap.open_sealed(changed, {"account_id": "a", "tls_certificate_id": "c"})
    # another master key (a lost or replaced key file) does not open it
    key_file.write_text(os.urandom(32).hex() + "\n")
    with pytest.raises(keywrap.SealError):
        keywrap.open_sealed(sealed, {"account_id": "a", "tls_certificate_id": "c"})


def test_two_processes_creating_the_key_file_agree(key_file):
    first = keywrap.master_key(create=True)
    assert keywrap.master_key(create=True) == first
    assert [p.name for p in key_file.parent.iterdir()] == [key_file.name]  # no temp left


def test_kms_envelope(monkeypatch, key_file):
    """With TLS_KMS_KEY_ID the data key comes from KMS (moto) and no key file is made."""
    from moto import mock_aws
    import boto3

    with mock_aws():
        key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
        monkeypatch.setenv("TLS_KMS_KEY_ID", key_id)
        sealed = keywrap.seal(b"secret key", {"account_id": "a"})
        assert "kms" in sealed["wrapped_key"] and not key_file.exists()
        assert keywrap.open_sealed(sealed, {"account_id": "a"}) == b"secret key"
        with pytest.raises(keywrap.SealError):
            keywrap.open_sealed(sealed, {"account_id": "b"})


def _public(key):
    return asn1_keys.PublicKeyInfo.load(
        key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _pem(key, fmt=serialization.PrivateFormat.PKCS8):
    return key.private_bytes(
        serialization.Encoding.PEM, fmt, serialization.NoEncryption()
    ).decode()


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1()])
def test_ec_match_is_computed_from_the_scalar(curve):
    key = ec.generate_private_key(curve)
    loaded = keypairs.load_private_key(_pem(key))
    assert keypairs.matches(loaded, _public(key))
    assert not keypairs.matches(loaded, _public(ec.generate_private_key(curve)))
    # a key file that embeds the certificate's public key beside another scalar is refused
    other = ec.generate_private_key(curve)
    forged = asn1_keys.ECPrivateKey.load(
        other.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    forged["public_key"] = _public(key)["public_key"].native
    from asn1crypto import pem

    text = pem.armor("EC PRIVATE KEY", forged.dump()).decode()
    assert not keypairs.matches(keypairs.load_private_key(text), _public(key))


def test_inconsistent_rsa_numbers_are_refused():
    key = rsa.generate_private_key(65537, 2048)
    parsed = asn1_keys.RSAPrivateKey.load(
        key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    parsed["private_exponent"] = parsed["private_exponent"].native + 2
    from asn1crypto import pem

    with pytest.raises(keypairs.KeyError_, match="not a consistent RSA key"):
        keypairs.load_private_key(pem.armor("RSA PRIVATE KEY", parsed.dump()).decode())


def test_unsupported_keys_are_refused_with_the_reason():
    from cryptography.hazmat.primitives.asymmetric import ed25519

    with pytest.raises(keypairs.KeyError_, match="ed25519"):
        keypairs.load_private_key(_pem(ed25519.Ed25519PrivateKey.generate()))
    with pytest.raises(keypairs.KeyError_, match="secp521r1"):
        keypairs.load_private_key(_pem(ec.generate_private_key(ec.SECP521R1())))


def test_corrupted_keys_never_crash():
    """Every single-byte corruption of a key's DER is a KeyError_ or still a key (never
    another exception: a 500)."""
    from asn1crypto import pem

    key = ec.generate_private_key(ec.SECP256R1())
    der = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for position in range(len(der)):
        changed = bytearray(der)
        changed[position] ^= 0xFF
        text = pem.armor("PRIVATE KEY", bytes(changed)).decode()
        try:
            loaded = keypairs.load_private_key(text)
            keypairs.matches(loaded, _public(key))
        except keypairs.KeyError_:
            pass


def test_retry_backoff_first_within_five_minutes_then_longer():
    delays = [orders.retry_delay(n) for n in range(1, 9)]
    assert delays[0] <= 300
    assert delays == sorted(delays) and delays[-1] == delays[-2] and delays[1] > delays[0]


def test_http01_tokens_are_bounded_before_any_read(store_env):
    assert orders.http01_answer("a.example.com", "x" * 129) is None
    assert orders.http01_answer("a.example.com", "../../etc") is None
    orders.put_challenge(orders.http01_sk("tok_1"), "a.example.com", "tok_1.thumb")
    assert orders.http01_answer("a.example.com", "tok_1") == "tok_1.thumb"
    assert orders.http01_answer("b.example.com", "tok_1") is None  # another host


def test_two_workers_never_hold_the_same_entry(store_env):
    from chalicelib.core import store

    store.commit([orders.enqueue_op("acct_1", "rd_1", "a.example.com")])
    sk = orders.queue_sk("acct_1", "rd_1")
    held = orders.claim(sk, "worker_a", now=1000.0, lease_seconds=60)
    assert held.data["lease_owner"] == "worker_a"
    with pytest.raises(orders.LeaseLost):
        orders.claim(sk, "worker_b", now=1010.0, lease_seconds=60)
    with pytest.raises(orders.LeaseLost):  # only the holder writes the order
        orders.update_held(sk, "worker_b", {"order": {"url": "x"}})
    orders.update_held(sk, "worker_a", {"order": {"url": "x"}})
    # the lease expired (the holder died): another worker takes it, with the order kept
    taken = orders.claim(sk, "worker_b", now=1061.0, lease_seconds=60)
    assert taken.data["lease_owner"] == "worker_b" and taken.data["order"] == {"url": "x"}
    with pytest.raises(orders.LeaseLost):
        orders.update_held(sk, "worker_a", {"order": None})
    # not due yet: nobody takes it
    orders.update_held(sk, "worker_b", {"due_at": 5000.0, "lease_until": 0})
    with pytest.raises(orders.LeaseLost):
        orders.claim(sk, "worker_c", now=2000.0)


def test_own_dns_server_answers_only_its_zone(store_env):
    import dns.flags
    import dns.message
    import dns.rcode
    from chalicelib.acme import dns as own_dns

    own = own_dns.OwnServer()
    zone = "cname.example.test"
    name = f"abc.acme-challenge.{zone}"

    def ask(qname, rdtype="TXT"):
        return dns.message.from_wire(
            own_dns.answer(dns.message.make_query(qname, rdtype).to_wire(), zone, own)
        )

    assert ask(name).rcode() == dns.rcode.NXDOMAIN
    own.publish(name, "value-1")
    own.publish(name, "value-2")
    own.publish(name, "value-1")  # once
    reply = ask(name.upper())
    assert reply.flags & dns.flags.AA and reply.rcode() == dns.rcode.NOERROR
    assert sorted(r.strings[0].decode() for r in reply.answer[0]) == ["value-1", "value-2"]
    assert ask("example.com").rcode() == dns.rcode.REFUSED
    assert ask(f"other.{zone}").rcode() == dns.rcode.NXDOMAIN
    for i in range(30):  # bounded: the newest 8 values are kept
        own.publish(name, "x" * 40 + f"{i:03d}")
    assert len(own.values(name)) == 8
    full = ask(name)  # and they fit a plain 512-byte UDP answer
    assert len(full.answer[0]) == 8 and not full.flags & dns.flags.TC
    two = dns.message.make_query(name, "TXT")
    two.question.append(two.question[0])
    assert (
        dns.message.from_wire(own_dns.answer(two.to_wire(), zone, own)).rcode()
        == dns.rcode.FORMERR
    )
    assert own_dns.answer(b"\x00garbage", zone, own) is None
    for value in own.values(name):
        own.remove(name, value)
    assert ask(name).rcode() == dns.rcode.NXDOMAIN


def test_own_dns_server_reads_the_ingress_index_at_most_every_refresh(store_env, monkeypatch):
    """A flood of questions for names outside the zone costs one index Query per
    INGRESS_REFRESH, not one read per question; without DNS_INGRESS_ADDRESSES an ingress
    domain is refused as any other name; a bad address stops the server's start."""
    import dns.message
    import dns.rcode
    from chalicelib.acme import dns as own_dns
    from chalicelib.core import ingresses, store

    store.commit(
        [
            store.put_new(
                store.new_item(
                    ingresses.INDEX_PK,
                    "connect.example.com",
                    kind="agent_ingress_index",
                    data={"account_id": "acct_1", "agent_ingress_id": "agin_1"},
                )
            )
        ]
    )
    reads = []
    real_index = ingresses.index
    monkeypatch.setattr(ingresses, "index", lambda: reads.append(1) or real_index())
    clock = {"now": 100.0}
    own = own_dns.OwnServer(clock=lambda: clock["now"])

    def ask(qname, addresses=("192.0.2.1",)):
        wire = dns.message.make_query(qname, "A").to_wire()
        return dns.message.from_wire(own_dns.answer(wire, "cname.example.test", own, addresses))

    assert ask("connect.example.com", addresses=()).rcode() == dns.rcode.REFUSED
    assert reads == []  # no addresses: nothing read
    for n in range(200):
        assert ask(f"n{n}.example.org").rcode() == dns.rcode.REFUSED
    assert [r.to_text() for r in ask("connect.example.com").answer[0]] == ["192.0.2.1"]
    assert len(reads) == 1
    clock["now"] += own_dns.INGRESS_REFRESH - 0.01
    ask("connect.example.com")
    assert len(reads) == 1
    clock["now"] += 0.01
    ask("connect.example.com")
    assert len(reads) == 2
    assert own_dns.ingress_addresses(" 192.0.2.1,2001:db8::1,") == ["192.0.2.1", "2001:db8::1"]
    with pytest.raises(ValueError, match="'edge.example.com' is not an IP address"):
        own_dns.ingress_addresses("192.0.2.1,edge.example.com")
