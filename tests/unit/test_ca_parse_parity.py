"""chalicelib/certificate_authorities.py parses CA certificates with asn1crypto (pure Python,
so the API's Lambda package needs no cryptography). These tests hold it to what cryptography
reads of the same certificates (the parser it replaced, kept here as the oracle): the same
stored fields, or a 400 for both."""

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from chalicelib import certificate_authorities
from chalicelib.core import errors

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
EKU = {
    "1.3.6.1.5.5.7.3.1": "server_auth",
    "1.3.6.1.5.5.7.3.2": "client_auth",
    "1.3.6.1.5.5.7.3.3": "code_signing",
    "1.3.6.1.5.5.7.3.4": "email_protection",
    "1.3.6.1.5.5.7.3.8": "time_stamping",
    "1.3.6.1.5.5.7.3.9": "ocsp_signing",
}
USAGES = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
)


def with_cryptography(text):
    """What the API stored when it parsed with cryptography; None for a refusal."""
    if text.count("-----BEGIN CERTIFICATE-----") != 1:
        return None
    try:
        cert = x509.load_pem_x509_certificate(text.strip().encode("utf-8"))
        try:
            if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
                return None
        except x509.ExtensionNotFound:
            pass
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        usages = []
        try:
            usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
            usages = [n for n in USAGES if getattr(usage, n)]
            if usage.key_agreement:
                usages += [n for n in ("encipher_only", "decipher_only") if getattr(usage, n)]
        except x509.ExtensionNotFound:
            pass
        try:
            extended = [
                EKU.get(o.dotted_string, o.dotted_string)
                for o in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            ]
        except x509.ExtensionNotFound:
            extended = []
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        return {
            "ca_pem": cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
            "subject_common_name": str(names[0].value) if names else "",
            "not_before": cert.not_valid_before_utc.strftime(stamp),
            "not_after": cert.not_valid_after_utc.strftime(stamp),
            "key_usages": usages,
            "extended_key_usages": extended,
        }
    except Exception:  # ValueError, and x509.InvalidVersion, DuplicateExtension, …
        return None


def ours(text):
    try:
        return certificate_authorities.parse_pem(text)
    except errors.InvalidField:
        return None


def build(
    key=RSA_KEY, subject=None, ca=True, usage=None, eku=None, before=None, after=None, extra=()
):
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    subject = (
        subject
        if subject is not None
        else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(before or now)
        .not_valid_after(after or now + datetime.timedelta(days=3650))
    )
    if ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
    if usage is not None:
        builder = builder.add_extension(x509.KeyUsage(**usage), True)
    if eku is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), False)
    for extension in extra:
        builder = builder.add_extension(extension, False)
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM).decode()


def usage(**on):
    fields = dict.fromkeys(USAGES + ("encipher_only", "decipher_only"), False)
    fields.update(on)
    return fields


CN = NameOID.COMMON_NAME
VALID = {
    "rsa": build(),
    "ec": build(EC_KEY),
    "ed25519": build(ED_KEY),
    "no extensions": build(ca=None),
    "usages": build(
        usage=usage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=True
        )
    ),
    "key agreement qualifiers": build(usage=usage(key_agreement=True, encipher_only=True)),
    "key agreement both": build(usage=usage(key_agreement=True, decipher_only=True)),
    "eku": build(
        eku=[
            ExtendedKeyUsageOID.CLIENT_AUTH,
            ExtendedKeyUsageOID.SERVER_AUTH,
            ExtendedKeyUsageOID.OCSP_SIGNING,
            ObjectIdentifier("1.2.3.4.5"),
        ]
    ),
    "no CN": build(subject=x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org")])),
    "two CNs": build(
        subject=x509.Name([x509.NameAttribute(CN, "first"), x509.NameAttribute(CN, "second")])
    ),
    "multi-valued RDN": build(
        subject=x509.Name(
            [
                x509.RelativeDistinguishedName(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "O"),
                        x509.NameAttribute(CN, "in rdn"),
                    ]
                )
            ]
        )
    ),
    "unicode CN": build(subject=x509.Name([x509.NameAttribute(CN, "Zürich – 東京 CA")])),
    "BMPString CN": build(
        subject=x509.Name([x509.NameAttribute(CN, "bmp", _type=x509.name._ASN1Type.BMPString)])
    ),
    "generalized time": build(after=datetime.datetime(2051, 1, 1, tzinfo=datetime.timezone.utc)),
    "UTCTime/GeneralizedTime boundary": build(
        before=datetime.datetime(2049, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc),
        after=datetime.datetime(2050, 1, 1, tzinfo=datetime.timezone.utc),
    ),
    "UniversalString CN": build(
        subject=x509.Name(
            [x509.NameAttribute(CN, "universal 😀", _type=x509.name._ASN1Type.UniversalString)]
        )
    ),
    "TeletexString CN": build(
        subject=x509.Name([x509.NameAttribute(CN, "teletex", _type=x509.name._ASN1Type.T61String)])
    ),
    "PrintableString CN": build(
        subject=x509.Name(
            [x509.NameAttribute(CN, "printable", _type=x509.name._ASN1Type.PrintableString)]
        )
    ),
    "IA5String CN": build(
        subject=x509.Name([x509.NameAttribute(CN, "ia5", _type=x509.name._ASN1Type.IA5String)])
    ),
    "old": build(
        before=datetime.datetime(1990, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc),
        after=datetime.datetime(1999, 1, 1, tzinfo=datetime.timezone.utc),
    ),
    "other extensions": build(
        extra=[
            x509.SubjectAlternativeName([x509.DNSName("a.example")]),
            x509.SubjectKeyIdentifier.from_public_key(RSA_KEY.public_key()),
        ]
    ),
}
VALID["surrounding text"] = "issued by us\n" + VALID["rsa"] + "\ntrailing words\n"
VALID["CRLF"] = VALID["rsa"].replace("\n", "\r\n")
VALID["no final newline"] = VALID["ec"].rstrip("\n")

body = VALID["rsa"].split("\n")
INVALID = {
    "CA:FALSE": build(ca=False),
    "two certificates": VALID["rsa"] + VALID["ec"],
    "no certificate": "hello",
    "private key": RSA_KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode(),
    "garbage base64": (
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!!\n-----END CERTIFICATE-----\n"
    ),
    "truncated DER": "\n".join(body[:5] + body[-2:]),
    "no end line": "\n".join(body[:-2]),
    "empty block": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
}


def _armor(der: bytes) -> str:
    text = base64.b64encode(der).decode()
    return (
        "-----BEGIN CERTIFICATE-----\n"
        + "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
        + "\n-----END CERTIFICATE-----\n"
    )


def _der(text: str) -> bytes:
    return x509.load_pem_x509_certificate(text.encode()).public_bytes(serialization.Encoding.DER)


def _doubled_extension() -> str:
    """The certificate with its first extension twice (RFC 5280 4.2 forbids it; the builder
    refuses to make one, so asn1crypto re-encodes it; the signature no longer matches, which
    neither parser checks)."""
    from asn1crypto import x509 as asn1_x509

    cert = asn1_x509.Certificate.load(_der(VALID["usages"]))
    extensions = cert["tbs_certificate"]["extensions"]
    extensions.append(extensions[0].copy())
    return _armor(cert.dump(force=True))


_RSA_DER = _der(VALID["rsa"])  # SEQUENCE with a 2-byte length: 30 82 hi lo
INVALID.update(
    {
        "duplicate extension": _doubled_extension(),
        "trailing byte after the DER": _armor(_RSA_DER + b"\x00"),
        "BER: non-minimal length": _armor(b"\x30\x83\x00" + _RSA_DER[2:]),
        "BER: indefinite length": _armor(b"\x30\x80" + _RSA_DER[4:] + b"\x00\x00"),
    }
)


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_certificate_is_read_as_cryptography_reads_it(name):
    expected = with_cryptography(VALID[name])
    assert expected is not None, "the oracle refused a certificate meant to be valid"
    assert ours(VALID[name]) == expected


@pytest.mark.parametrize("name", sorted(INVALID))
def test_what_cryptography_refuses_is_a_400(name):
    assert with_cryptography(INVALID[name]) is None
    assert ours(INVALID[name]) is None


@pytest.mark.parametrize(
    "name", ["usages", "eku", "ec", "ed25519", "multi-valued RDN", "generalized time"]
)
def test_a_corrupted_certificate_is_never_read_differently_nor_accepted_when_refused(name):
    """Corrupt the certificate's DER, each byte in turn. Where cryptography
    refuses, so do we (the edge hands these PEMs to OpenSSL); where it reads a certificate,
    we read the same fields or refuse (asn1crypto decodes every field: a corrupted issuer
    name, which cryptography never reads, is refused here)."""
    import base64

    pem = VALID[name]
    der = bytearray(base64.b64decode("".join(pem.strip().split("\n")[1:-1])))
    wrong = []
    for position in range(len(der)):
        broken = bytearray(der)
        broken[position] ^= 0x41
        text = (
            "-----BEGIN CERTIFICATE-----\n"
            + base64.b64encode(bytes(broken)).decode()
            + "\n-----END CERTIFICATE-----\n"
        )
        theirs, mine = with_cryptography(text), ours(text)
        if mine is not None and mine != theirs:
            wrong.append((position, theirs, mine))
    assert not wrong, wrong[:3]
