"""Certificates for the stacks' clients, the tests and the benchmarks, made with
``cryptography`` (the service's virtualenv): a CA of a day and client certificates it signs
(mutual TLS: :func:`make_ca`, :func:`make_client_cert`), and :class:`SmallCA`, a CA of ten
years that signs server (leaf) certificates, with the body that uploads one
(``/tls_certificates``)."""

import datetime
import ipaddress
from typing import Any, List, Optional, Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)


def make_ca(name: str, expired: bool = False) -> Tuple[Any, x509.Certificate]:
    """A self-signed CA (P-256): its key and certificate, valid for a day (``expired``: the
    day before yesterday until a minute ago)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    if expired:
        start, end = now - datetime.timedelta(days=2), now - datetime.timedelta(minutes=1)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_client_cert(
    ca: Tuple[Any, x509.Certificate],
    name: str = "client",
    dns_names: Tuple[str, ...] = (),
    serial: int = 0,
    curve: Optional[ec.EllipticCurve] = None,
) -> Tuple[bytes, bytes]:
    """A client certificate signed by ``ca``: (certificate PEM, PKCS#8 key PEM); subject CN
    ``name``, DNS subject alternative names ``dns_names`` (none: no SAN extension), serial
    number ``serial`` (0: a random one), its key on ``curve`` (None: P-256)."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(curve or ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial or x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key, traditional: bool = False) -> str:
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if traditional
        else serialization.PrivateFormat.PKCS8
    )
    return key.private_bytes(
        serialization.Encoding.PEM, fmt, serialization.NoEncryption()
    ).decode()


class SmallCA:
    """A CA (EC P-256) that signs leaf certificates."""

    def __init__(self, name: str = "Test Root CA"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(days=1))
            .not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> str:
        return pem(self.cert)

    def leaf(
        self, names: List[str], key=None, days: int = 90, cn: Optional[str] = None, org: str = ""
    ) -> Tuple[x509.Certificate, object]:
        key = key or ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn or names[0])]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        sans = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - datetime.timedelta(hours=1))
            .not_valid_after(NOW + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .sign(self.key, hashes.SHA256())
        )
        return cert, key

    def upload_body(self, names: List[str], key=None, chain: bool = True, **fields) -> dict:
        cert, key = self.leaf(names, key)
        return {
            "certificate_pem": pem(cert) + (self.pem if chain else ""),
            "private_key_pem": key_pem(key),
            **fields,
        }


def rsa_key(bits: int = 2048):
    return rsa.generate_private_key(65537, bits)
