"""What a name asks of the TLS handshake (:class:`TlsSpec`): the minimum version and the CAs a
client certificate must chain to, from an HTTPS edge's modules or an agent endpoint's
``MutualTLSCA`` Bind option, and :func:`apply` to make a server context require it.

Read by the HTTPS listener (edge/tls.py), the certificate cache (edge/certs.py) and TLS
passthrough (edge/passthrough.py); why the spec is chosen before the handshake starts:
edge/tls.py.
"""

import base64
import binascii
import hashlib
import re
import ssl
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple, Union

from chalicelib.core import binding, edge_errors

MIN_VERSIONS = {
    "1.0": ssl.TLSVersion.TLSv1_2,
    "1.1": ssl.TLSVersion.TLSv1_2,
    "1.2": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass(frozen=True)
class TlsSpec:
    """What a name requires: the minimum TLS version and the CAs a client certificate must
    chain to (``cadata``: PEM text or DER bytes, as ``load_verify_locations`` takes them;
    None: no client certificate asked; empty: required, and none can pass)."""

    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    cadata: Optional[Union[str, bytes]] = field(default=None, compare=False)
    ca_digest: str = ""
    # terminate-tls's max_version (1.2 or 1.3); in the key only when it is not the default
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3

    @property
    def key(self) -> Tuple[Any, ...]:
        if self.max_version != ssl.TLSVersion.TLSv1_3:
            return int(self.min_version), self.ca_digest, int(self.max_version)
        return int(self.min_version), self.ca_digest

    @property
    def mutual(self) -> bool:
        return self.cadata is not None


DEFAULT = TlsSpec()


def spec_of(
    min_version: Optional[str], ca_pems: Optional[List[str]], max_version: Optional[str] = None
) -> TlsSpec:
    """The spec of an HTTPS edge's modules, or of a terminate-tls action: ``min_version``
    ("1.0".."1.3" or None), the PEMs of its mutual TLS CAs (None: no mutual TLS), and
    ``max_version`` ("1.2", "1.3" or None: 1.3)."""
    version = MIN_VERSIONS.get(min_version or "1.2", ssl.TLSVersion.TLSv1_2)
    highest = ssl.TLSVersion.TLSv1_2 if max_version == "1.2" else ssl.TLSVersion.TLSv1_3
    if ca_pems is None:
        return TlsSpec(version, max_version=highest)
    text = "".join(p if p.endswith("\n") else p + "\n" for p in sorted(ca_pems))
    digest = "pem:" + hashlib.sha256(text.encode()).hexdigest()
    return TlsSpec(version, text, digest, max_version=highest)


def spec_of_bind(option: Any) -> Optional[TlsSpec]:
    """The spec of an agent endpoint's ``MutualTLSCA`` Bind option (``{"mutual_tls_ca":
    base64}``: PEM certificates, or DER certificates end to end, as the Go SDK sends them);
    None when unset; Refused (ERR_NGROK_1602) when it holds no usable CA certificate."""
    if option is None or option == {}:
        return None
    raw = option.get("mutual_tls_ca") if isinstance(option, dict) else None
    try:
        data = base64.b64decode(raw or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        data = b""
    cadata: Union[str, bytes] = data
    if b"-----BEGIN" in data:
        cadata = data.decode("ascii", "replace")
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        if not data:
            raise ssl.SSLError("empty")
        probe.load_verify_locations(cadata=cadata)
    except (ssl.SSLError, ValueError) as exc:
        raise binding.Refused(
            edge_errors.INVALID_OPTION,
            "MutualTLSCA must hold one or more CA "
            "certificates (PEM or DER); it could not be "
            f"loaded: {str(exc)[:200]}",
        ) from None
    if not probe.cert_store_stats().get("x509"):
        raise binding.Refused(edge_errors.INVALID_OPTION, "MutualTLSCA holds no certificate")
    digest = hashlib.sha256(data).hexdigest()
    return TlsSpec(ssl.TLSVersion.TLSv1_2, cadata, "bind:" + digest)


_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def ca_ders(spec: TlsSpec) -> List[bytes]:
    """The CA certificates of ``spec`` (its ``cadata``: PEM text, or DER certificates end to
    end), each as DER, in order; [] when there are none, or they do not parse."""
    data = spec.cadata
    if isinstance(data, str):
        try:
            return [ssl.PEM_cert_to_DER_cert(block) for block in _PEM_CERT.findall(data)]
        except ValueError:
            return []
    found, pos = [], 0
    raw = data or b""
    while pos < len(raw):  # each a SEQUENCE: 0x30, its length (short or long form), body
        if raw[pos] != 0x30 or pos + 2 > len(raw):
            return []
        first = raw[pos + 1]
        if first < 0x80:
            head, length = 2, first
        else:
            count = first & 0x7F
            if not 1 <= count <= 4 or pos + 2 + count > len(raw):
                return []
            head, length = 2 + count, int.from_bytes(raw[pos + 2 : pos + 2 + count], "big")
        end = pos + head + length
        if end > len(raw):
            return []
        found.append(raw[pos:end])
        pos = end
    return found


def apply(ctx: ssl.SSLContext, spec: TlsSpec) -> ssl.SSLContext:
    """Make a fresh server context require what ``spec`` says."""
    ctx.minimum_version = spec.min_version
    ctx.maximum_version = spec.max_version
    if spec.mutual:
        ctx.verify_mode = ssl.CERT_REQUIRED
        if spec.cadata:
            ctx.load_verify_locations(cadata=spec.cadata)
    return ctx
