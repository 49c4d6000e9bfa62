"""The edge's local certificate authority and the server certificates it issues.

On first start the edge creates a CA (EC P-256, 10 years) in the data directory:
``ca.pem`` (certificate: give it to ``curl --cacert`` and to the SDK's ``root_cas``) and
``ca-key.pem`` (mode 0600). Server certificates (agent listener; each HTTPS hostname, issued
on demand through SNI and cached in memory) are signed by it and valid for 90 days. A
deployment may name its own certificate and key instead (EDGE_TLS_CERT / EDGE_TLS_KEY): then
that pair serves every name.

**Certificates from the store** come first: a reserved domain's certificate (uploaded through
``/tls_certificates`` or issued by ACME; chalicelib.core.certs) serves the domain's SNI
name, and a wildcard reservation's (``*.example.com``) serves the names one label under it.
:meth:`ServerCertificates.refresh_store` reads the served index (1 Query) with the TLS
settings (edge.tls, every second), and each new certificate once (1 GetItem, its key
opened); a renewed certificate has a new fingerprint, so new handshakes get it while open
connections keep theirs. When the store cannot be read the last certificates stay in force.
The local CA (or EDGE_TLS_CERT) serves only names no stored certificate covers. An agent
ingress's issued certificate is in the same index under ``agent_ingress#<domain>``
(chalicelib.core.certs.INGRESS_SERVED), which no SNI name looks up: only the agent listener
serves it (:meth:`ServerCertificates.ingress_pair`, edge/server.py).
"""

import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
from collections import OrderedDict
import logging
from typing import Any, Dict, List, Optional, Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from chalicelib.core import certs as stored
from edge import tls_spec

log = logging.getLogger("edge.certs")

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
HOST_CACHE = 1024


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write_private(path: str, data: bytes) -> None:
    """Atomic write, owner-only mode."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Authority:
    """The local CA: loads it from ``folder`` or creates it there."""

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.cert_path = os.path.join(folder, CA_CERT)
        key_path = os.path.join(folder, CA_KEY)
        if os.path.exists(self.cert_path) and os.path.exists(key_path):
            with open(key_path, "rb") as fh:
                key = serialization.load_pem_private_key(fh.read(), None)
            if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
                raise ValueError(f"{key_path}: the edge CA's key must be an EC or RSA key")
            self._key: "ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey" = key
            with open(self.cert_path, "rb") as fh:
                self._cert = x509.load_pem_x509_certificate(fh.read())
            self.created = False
        else:
            self._key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, "tunnel edge local CA"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tunnel-service"),
                ]
            )
            self._cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(self._key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(_now() - datetime.timedelta(minutes=5))
                .not_valid_after(_now() + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
                    x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                    critical=False,
                )
                .sign(self._key, hashes.SHA256())
            )
            # key first: a CA certificate without its key on disk is never left behind
            _write_private(
                key_path,
                self._key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ),
            )
            _write_private(self.cert_path, self._cert.public_bytes(serialization.Encoding.PEM))
            os.chmod(self.cert_path, 0o644)
            self.created = True

    def issue(self, names: List[str]) -> Tuple[bytes, bytes]:
        """A server certificate for ``names`` (DNS names or IP addresses): (cert PEM chain,
        key PEM)."""
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list = []
        for name in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + datetime.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self._cert.public_bytes(
            serialization.Encoding.PEM
        )
        return chain, key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def context_from_pem(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A server context from PEM bytes held in memory only (a memfd: no key on disk)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    fd = os.memfd_create("tls-pair", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert_pem + b"\n" + key_pem)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return ctx


def _context(cert_pem: bytes, key_pem: bytes, folder: str) -> ssl.SSLContext:
    """A server context from PEM bytes (ssl loads chains from files only: a private temp file)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    fd, path = tempfile.mkstemp(dir=folder, prefix=".tmp-cert-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(cert_pem + key_pem)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
    return ctx


class ServerCertificates:
    """TLS server contexts: a fixed pair when configured, else issued by the local CA per
    name (SNI). Issued pairs are cached per names and contexts per (names, what the name
    requires of the handshake: ``edge.tls_spec.TlsSpec``), both LRU, HOST_CACHE entries."""

    def __init__(
        self, data_dir: str, cert_file: Optional[str] = None, key_file: Optional[str] = None
    ):
        self._folder = data_dir
        self.authority: Optional[Authority] = None
        self._fixed: Optional[ssl.SSLContext] = None
        self._files: Tuple[str, str] = ("", "")
        if cert_file and key_file:
            self._files = (cert_file, key_file)
            self._fixed = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._fixed.minimum_version = ssl.TLSVersion.TLSv1_2
            self._fixed.load_cert_chain(cert_file, key_file)
        else:
            self.authority = Authority(data_dir)
        self._cache: "OrderedDict[Any, ssl.SSLContext]" = OrderedDict()
        self._pairs: "OrderedDict[str, Tuple[bytes, bytes]]" = OrderedDict()
        self._lock = threading.Lock()
        # certificates from the store: domain -> index entry; (account, cert id, fingerprint)
        # -> (chain PEM, key PEM)
        self.served: Dict[str, Dict[str, Any]] = {}
        self._store_pairs: Dict[Tuple[str, str, str], Tuple[bytes, bytes]] = {}

    # ---- certificates from the store --------------------------------------------------------
    async def refresh_store(self, edge: Any) -> None:
        """Re-read the served index; load each certificate not seen yet (a bad one is logged
        and skipped: the local CA serves its name meanwhile)."""
        index = await edge.call(stored.served_index)
        wanted = {
            (e["account_id"], e["tls_certificate_id"], e["fingerprint"]) for e in index.values()
        }
        pairs = {key: pair for key, pair in self._store_pairs.items() if key in wanted}
        for key in sorted(wanted - set(pairs)):
            try:
                found = await edge.call(stored.key_pair, key[0], key[1])
                if found is None or found[2] != key[2]:
                    continue  # replaced meanwhile: the next refresh sees the new one
                chain, private, _ = found
                context_from_pem(chain.encode(), private.encode())  # a pair that loads
                pairs[key] = (chain.encode(), private.encode())
            except Exception as exc:
                log.warning("cannot serve certificate %s: %r", key[1], exc)
        self._store_pairs = pairs
        self.served = index

    def stored_pair(self, name: str) -> Optional[Tuple[str, Tuple[bytes, bytes]]]:
        """(fingerprint, pair) of the stored certificate serving SNI ``name``: the domain's
        own, else the wildcard reservation one label above it."""
        if not name:
            return None
        head, _, rest = name.partition(".")
        for candidate in (name, f"*.{rest}" if rest and head != "*" else None):
            entry = self.served.get(candidate) if candidate else None
            if entry is None:
                continue
            key = (entry["account_id"], entry["tls_certificate_id"], entry["fingerprint"])
            pair = self._store_pairs.get(key)
            if pair is not None:
                return key[2], pair
        return None

    def ingress_pair(self, domain: str) -> Optional[Tuple[str, Tuple[bytes, bytes]]]:
        """(fingerprint, pair) of the certificate issued for the agent ingress ``domain``."""
        entry = self.served.get(stored.ingress_served_sk(domain))
        if entry is None:
            return None
        key = (entry["account_id"], entry["tls_certificate_id"], entry["fingerprint"])
        pair = self._store_pairs.get(key)
        return (key[2], pair) if pair is not None else None

    @property
    def ca_path(self) -> Optional[str]:
        return self.authority.cert_path if self.authority else None

    def _lru(self, cache: OrderedDict, key: Any, make) -> Any:
        with self._lock:
            value = cache.get(key)
            if value is not None:
                cache.move_to_end(key)
                return value
        value = make()
        with self._lock:
            cache[key] = value
            while len(cache) > HOST_CACHE:
                cache.popitem(last=False)
        return value

    def pair_for(self, names: List[str]) -> Tuple[bytes, bytes]:
        """(chain PEM, key PEM) serving ``names``: the fixed pair when configured, else one
        the local CA issued for them (cached as ``context_for``'s are). For the compiled
        core's listeners (edge/carrier.py), which take PEM, not an ssl context."""
        if self._fixed is not None:
            cert_file, key_file = self._files
            with open(cert_file, "rb") as chain, open(key_file, "rb") as key:
                return chain.read(), key.read()
        authority = self.authority
        if authority is None:
            raise RuntimeError("no fixed certificate and no authority")
        pair: Tuple[bytes, bytes] = self._lru(
            self._pairs, ",".join(names), lambda: authority.issue(names)
        )
        return pair

    def context_for(self, names: List[str], spec: Any = None) -> ssl.SSLContext:
        """The context serving ``names`` with what ``spec`` (an ``edge.tls_spec.TlsSpec``, None:
        nothing more than TLS 1.2) requires of the handshake."""
        stored = self.stored_pair(names[0]) if len(names) == 1 else None
        if stored is not None:
            fingerprint, (chain, private) = stored

            def from_store() -> ssl.SSLContext:
                ctx = context_from_pem(chain, private)
                return tls_spec.apply(ctx, spec) if spec is not None else ctx

            return self._lru(
                self._cache,
                ("store", fingerprint, spec.key if spec is not None else None),
                from_store,
            )
        if spec is None or spec.key == tls_spec.DEFAULT.key:
            if self._fixed is not None:
                return self._fixed
            spec = None
        if self._fixed is not None:

            def fixed() -> ssl.SSLContext:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(*self._files)
                return tls_spec.apply(ctx, spec)

            return self._lru(self._cache, ("", spec.key), fixed)
        name_key = ",".join(names)

        authority = self.authority
        if authority is None:
            raise RuntimeError("no fixed certificate and no authority")

        def make() -> ssl.SSLContext:
            cert, private = self._lru(self._pairs, name_key, lambda: authority.issue(names))
            ctx = _context(cert, private, self._folder)
            return tls_spec.apply(ctx, spec) if spec is not None else ctx

        return self._lru(self._cache, (name_key, spec.key if spec is not None else None), make)
