"""The ``conn.tls.client.*`` variables: what the engine reads of the client certificate the
edge verified on a mutual-TLS handshake.

The edge hands the engine the leaf certificate as DER (``Conn.tls_client_der``: empty when
the connection is not TLS, or its handshake asked for no client certificate); this module
parses it once per certificate and group of variables (:func:`value`, cached) into the hosted service's variables,
named and typed as its reference lists them ("Connection TLS Client Variables"). Values follow
what the hosted service shows (its examples come from Go's ``crypto/x509``):

- ``subject`` / ``issuer``: the distinguished name as RFC 4514 writes it (the last RDN
  first: ``CN=E1,O=Let's Encrypt,C=US``); ``.common_name`` the first CN ("" without one);
  ``.country``, ``.locality``, ``.organization``, ``.organizational_unit``, ``.postal_code``,
  ``.province``, ``.street_address`` lists of the attribute's values, in order;
- ``san``: every subject alternative name in certificate order, OpenSSL's way (``DNS:a,
  DNS:b, IP Address:192.168.1.1, email:x@y, URI:https://…``); ``san.dns_names``,
  ``.email_addresses``, ``.ip_addresses``, ``.uris`` lists;
- ``serial_number``: lower-case hex without leading zeros or colons (Go's ``%x``);
- ``signature_algorithm``: Go's names (``SHA256-RSA``, ``ECDSA-SHA256``, ``SHA256-RSAPSS``,
  ``Ed25519``, …), the dotted OID for one Go does not name;
- ``extensions``: ``[{id: dotted OID, critical: bool, value: bytes (the extension's DER
  value)}]``, in certificate order;
- ``validity.not_before`` / ``.not_after``: timestamps (UTC);
- ``pem``: the certificate as PEM, ``\\n`` line ends, ending with ``-----END CERTIFICATE-----``.

Without a certificate every variable is its type's zero value ("" / [] / the timestamp
1970-01-01T00:00:00Z: the Unix epoch), so a policy naming them runs on any connection and tells a
certificate's presence by ``conn.tls.client.pem != ''``. ``cryptography`` is imported on first
use: only the edge, which has it, ever parses (the API only compiles).
"""

import datetime
import functools
from typing import Any, Dict, List

# what the validity variables read without a certificate: the Unix epoch (Go's zero time,
# year 1, is below what the CEL runtime converts)
ZERO_TIME = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

NAME_PARTS = (  # variable member -> OID dotted string (X.520)
    ("country", "2.5.4.6"),
    ("locality", "2.5.4.7"),
    ("organization", "2.5.4.10"),
    ("organizational_unit", "2.5.4.11"),
    ("postal_code", "2.5.4.17"),
    ("province", "2.5.4.8"),
    ("street_address", "2.5.4.9"),
)
COMMON_NAME_OID = "2.5.4.3"

# Go's crypto/x509 SignatureAlgorithm names, by signature OID
_SIGNATURE_NAMES = {
    "1.2.840.113549.1.1.2": "MD2-RSA",
    "1.2.840.113549.1.1.4": "MD5-RSA",
    "1.2.840.113549.1.1.5": "SHA1-RSA",
    "1.2.840.113549.1.1.11": "SHA256-RSA",
    "1.2.840.113549.1.1.12": "SHA384-RSA",
    "1.2.840.113549.1.1.13": "SHA512-RSA",
    "1.2.840.10040.4.3": "DSA-SHA1",
    "2.16.840.1.101.3.4.3.2": "DSA-SHA256",
    "1.2.840.10045.4.1": "ECDSA-SHA1",
    "1.2.840.10045.4.3.2": "ECDSA-SHA256",
    "1.2.840.10045.4.3.3": "ECDSA-SHA384",
    "1.2.840.10045.4.3.4": "ECDSA-SHA512",
    "1.3.101.112": "Ed25519",
}
_PSS_OID = "1.2.840.113549.1.1.10"

# (variable suffix, type tag) of every conn.tls.client variable; celenv declares them
STRING, STRINGS, TIMESTAMP, EXTENSIONS = "string", "strings", "timestamp", "extensions"
VARIABLES = (
    [
        ("extensions", EXTENSIONS),
        ("issuer", STRING),
        ("issuer.common_name", STRING),
    ]
    + [(f"issuer.{member}", STRINGS) for member, _ in NAME_PARTS]
    + [
        ("pem", STRING),
        ("san", STRING),
        ("san.dns_names", STRINGS),
        ("san.email_addresses", STRINGS),
        ("san.ip_addresses", STRINGS),
        ("san.uris", STRINGS),
        ("serial_number", STRING),
        ("signature_algorithm", STRING),
        ("subject", STRING),
        ("subject.common_name", STRING),
    ]
    + [(f"subject.{member}", STRINGS) for member, _ in NAME_PARTS]
    + [("validity.not_after", TIMESTAMP), ("validity.not_before", TIMESTAMP)]
)


def _zero(kind: str) -> Any:
    return {STRING: "", STRINGS: [], TIMESTAMP: ZERO_TIME, EXTENSIONS: []}[kind]


EMPTY: Dict[str, Any] = {name: _zero(kind) for name, kind in VARIABLES}


def _name_fields(prefix: str, name: Any, out: Dict[str, Any]) -> None:
    out[prefix] = name.rfc4514_string()
    values: Dict[str, List[str]] = {}
    for attribute in name:
        values.setdefault(attribute.oid.dotted_string, []).append(str(attribute.value))
    out[f"{prefix}.common_name"] = (values.get(COMMON_NAME_OID) or [""])[0]
    for member, oid in NAME_PARTS:
        out[f"{prefix}.{member}"] = list(values.get(oid, []))


def _signature_algorithm(cert: Any) -> str:
    oid = cert.signature_algorithm_oid.dotted_string
    if oid == _PSS_OID:
        hashed = cert.signature_hash_algorithm
        return f"{hashed.name.upper()}-RSAPSS" if hashed is not None else "RSAPSS"
    return _SIGNATURE_NAMES.get(oid, oid)


def _san(cert: Any, out: Dict[str, Any]) -> None:
    from cryptography import x509

    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (x509.ExtensionNotFound, ValueError):
        return
    parts: List[str] = []
    for general in names:
        if isinstance(general, x509.DNSName):
            out["san.dns_names"].append(general.value)
            parts.append(f"DNS:{general.value}")
        elif isinstance(general, x509.RFC822Name):
            out["san.email_addresses"].append(general.value)
            parts.append(f"email:{general.value}")
        elif isinstance(general, x509.IPAddress):
            out["san.ip_addresses"].append(str(general.value))
            parts.append(f"IP Address:{general.value}")
        elif isinstance(general, x509.UniformResourceIdentifier):
            out["san.uris"].append(general.value)
            parts.append(f"URI:{general.value}")
        elif isinstance(general, x509.DirectoryName):
            parts.append(f"DirName:{general.value.rfc4514_string()}")
        elif isinstance(general, x509.RegisteredID):
            parts.append(f"Registered ID:{general.value.dotted_string}")
        else:
            parts.append("othername:<unsupported>")
    out["san"] = ", ".join(parts)


def _extensions(cert: Any) -> List[Dict[str, Any]]:
    found = []
    try:
        extensions = list(cert.extensions)
    except ValueError:  # an extension cryptography cannot parse: none are listed
        return []
    for extension in extensions:
        try:
            value = extension.value.public_bytes()
        except (AttributeError, NotImplementedError, ValueError):
            value = getattr(extension.value, "value", b"")
            value = value if isinstance(value, bytes) else b""
        found.append(
            {
                "id": extension.oid.dotted_string,
                "critical": bool(extension.critical),
                "value": value,
            }
        )
    return found


@functools.lru_cache(maxsize=256)  # one parse per certificate, not per request
def _certificate(der: bytes) -> Any:
    """The parsed certificate, or None (no certificate, or one that does not parse)."""
    if not der:
        return None
    from cryptography import x509

    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        return None


def _group_subject(cert: Any, out: Dict[str, Any]) -> None:
    _name_fields("subject", cert.subject, out)


def _group_issuer(cert: Any, out: Dict[str, Any]) -> None:
    _name_fields("issuer", cert.issuer, out)


def _group_misc(cert: Any, out: Dict[str, Any]) -> None:
    from cryptography.hazmat.primitives.serialization import Encoding

    out["serial_number"] = format(cert.serial_number, "x")
    out["signature_algorithm"] = _signature_algorithm(cert)
    out["validity.not_before"] = cert.not_valid_before_utc
    out["validity.not_after"] = cert.not_valid_after_utc
    out["pem"] = cert.public_bytes(Encoding.PEM).decode("ascii").rstrip("\n")


def _group_extensions(cert: Any, out: Dict[str, Any]) -> None:
    out["extensions"] = _extensions(cert)


# each variable's group: what one parse computes (a policy reading only the subject's common
# name pays for the subject alone; measured: the whole certificate about 0.4 ms)
_GROUPS = {
    "subject": _group_subject,
    "issuer": _group_issuer,
    "san": _san,
    "extensions": _group_extensions,
}


@functools.lru_cache(maxsize=1024)  # (certificate, group): 256 certificates × 4 groups
def _group(der: bytes, group: str) -> Dict[str, Any]:
    cert = _certificate(der)
    if cert is None:
        return EMPTY
    out: Dict[str, Any] = {}
    for name, kind in VARIABLES:
        if _group_of(name) == group:
            out[name] = _zero(kind)
    _GROUPS.get(group, _group_misc)(cert, out)
    return out


def _group_of(name: str) -> str:
    head = name.split(".", 1)[0]
    return head if head in _GROUPS else "misc"


def fields(der: bytes) -> Dict[str, Any]:
    """Every conn.tls.client.* value (name without the prefix -> value) of the DER
    certificate ``der``; :data:`EMPTY` for no certificate or one that does not parse."""
    if _certificate(der) is None:
        return EMPTY
    out: Dict[str, Any] = {}
    for group in (*_GROUPS, "misc"):
        out.update(_group(der, group))
    return out


def value(der: bytes, name: str) -> Any:
    """One variable (``name`` without ``conn.tls.client.``) of the certificate ``der``: its
    group is computed once per certificate (cached), the others not at all."""
    return _group(der, _group_of(name))[name]
