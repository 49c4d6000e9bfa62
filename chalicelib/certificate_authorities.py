"""Certificate authorities: ``/certificate_authorities`` (for the ``mutual_tls`` edge module).

Fields: id, uri, created_at, description, metadata, ca_pem, subject_common_name, not_before,
not_after (RFC 3339), key_usages, extended_key_usages.

Rules (where the spec is silent, decided here):
- ``ca_pem`` is required: one X.509 certificate in PEM form (``-----BEGIN CERTIFICATE-----``),
  at most :data:`MAX_PEM_BYTES` bytes, parsed with ``asn1crypto`` (pure Python: the API's
  Lambda package carries no ``cryptography``, whose 4.2 MB were most of it; the fields are
  the same as cryptography reads, checked by tests/unit/test_ca_parse_parity.py), strictly:
  every field decoded, DER that re-encodes to the same bytes, version 1 to 3, no extension
  twice (RFC 5280 4.2). Anything else
  (no certificate, several, a private key, garbage, BER) is a 400. A certificate whose basic
  constraints say it is not a CA (``CA:FALSE``) is a 400: it cannot have signed client
  certificates. It cannot be changed; update takes description and metadata.
- ``subject_common_name`` is the subject's CN (``""`` when none); ``key_usages`` and
  ``extended_key_usages`` name the certificate's usages (``digital_signature``,
  ``key_cert_sign``, …; ``server_auth``, ``client_auth``, … or the dotted OID), ``[]`` when
  the extension is absent. The stored PEM is the certificate re-encoded (canonical form).
- A certificate authority used by an HTTPS edge's ``mutual_tls`` module cannot be deleted
  (409) until the edge stops using it (``refs``).
"""

from datetime import timezone
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import validation, web
from chalicelib.core import errors, ids, refs, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx
from chalicelib.core import certs

COLLECTION = certs.CA_COLLECTION
PREFIX = ids.PREFIXES["certificate_authority"]
PATH = "/certificate_authorities"
LIST_KEY = "certificate_authorities"
MAX_PEM_BYTES = 16384
_BEGIN = "-----BEGIN CERTIFICATE-----"
# Extended key usages by dotted OID, named as cryptography's ExtendedKeyUsageOID names them.
_EKU_NAMES = {
    "1.3.6.1.5.5.7.3.1": "server_auth",
    "1.3.6.1.5.5.7.3.2": "client_auth",
    "1.3.6.1.5.5.7.3.3": "code_signing",
    "1.3.6.1.5.5.7.3.4": "email_protection",
    "1.3.6.1.5.5.7.3.8": "time_stamping",
    "1.3.6.1.5.5.7.3.9": "ocsp_signing",
}
# asn1crypto's KeyUsage bit names -> the stored names (X.509's, as cryptography names them);
# encipher_only and decipher_only count only with key_agreement (they qualify it)
_KEY_USAGE_BITS = {
    "digital_signature": "digital_signature",
    "non_repudiation": "content_commitment",
    "key_encipherment": "key_encipherment",
    "data_encipherment": "data_encipherment",
    "key_agreement": "key_agreement",
    "key_cert_sign": "key_cert_sign",
    "crl_sign": "crl_sign",
    "encipher_only": "encipher_only",
    "decipher_only": "decipher_only",
}
_COMMON_NAME = "2.5.4.3"


def _bad(msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field 'ca_pem' {msg}", details={"field": "ca_pem"})


def _rfc3339(value: Any) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _certificate(text: str) -> Any:
    """The one certificate of ``text``, wholly parsed (DER decoding is lazy in asn1crypto:
    reading ``native`` decodes every field, so a malformed one fails here)."""
    from asn1crypto import pem, x509

    data = text.strip().encode("utf-8")
    start = data.find(_BEGIN.encode())
    end_marker = b"-----END CERTIFICATE-----"
    end = data.find(end_marker, start)
    if end < 0:
        raise ValueError("no '-----END CERTIFICATE-----' line")
    kind, _, der = pem.unarmor(data[start : end + len(end_marker)])
    if kind != "CERTIFICATE":
        raise ValueError(f"a PEM block of type {kind!r}")
    cert = x509.Certificate.load(der, strict=True)
    cert.native  # noqa: B018 (decodes every field)
    version = cert["tbs_certificate"]["version"].native
    if version not in ("v1", "v2", "v3"):
        raise ValueError(f"{version} is not a valid X509 version")
    # DER is canonical: what asn1crypto (lenient, BER-minded) decoded must encode back to the
    # same bytes, as a strict DER parser (cryptography's, OpenSSL's) would require
    if cert.dump(force=True) != der:
        raise ValueError("not DER-encoded (it does not encode back to the same bytes)")
    # RFC 5280 4.2: at most one instance of an extension (cryptography refused duplicates;
    # asn1crypto would read one of them)
    seen = [extension["extn_id"].dotted for extension in cert["tbs_certificate"]["extensions"]]
    duplicates = sorted({oid for oid in seen if seen.count(oid) > 1})
    if duplicates:
        raise ValueError(f"duplicate extension {', '.join(duplicates)}")
    return cert


def parse_pem(text: str) -> Dict[str, Any]:
    """The stored fields of a CA certificate in PEM form, or a 400 naming ``ca_pem``."""
    from asn1crypto import pem

    blocks = text.count(_BEGIN)
    if blocks != 1:
        raise _bad(
            "must hold exactly one PEM certificate ('-----BEGIN CERTIFICATE-----'), "
            f"found {blocks}"
        )
    try:
        cert = _certificate(text)
        constraints = cert.basic_constraints_value
        if constraints is not None and not constraints.native.get("ca"):
            raise _bad("is not a certificate authority (its basic constraints say CA:FALSE)")
        names = [
            attribute["value"].native
            for rdn in cert.subject.chosen
            for attribute in rdn
            if attribute["type"].dotted == _COMMON_NAME
        ]
        usage = cert.key_usage_value
        bits = set(usage.native) if usage is not None else set()
        key_usages = [
            name
            for bit, name in _KEY_USAGE_BITS.items()
            if bit in bits
            and (name not in ("encipher_only", "decipher_only") or "key_agreement" in bits)
        ]
        eku = cert.extended_key_usage_value
        extended = [_EKU_NAMES.get(oid.dotted, oid.dotted) for oid in eku] if eku else []
        validity = cert["tbs_certificate"]["validity"]
        fields = {
            "ca_pem": pem.armor("CERTIFICATE", cert.dump()).decode("ascii"),
            "subject_common_name": str(names[0]) if names else "",
            "not_before": _rfc3339(validity["not_before"].native),
            "not_after": _rfc3339(validity["not_after"].native),
            "key_usages": key_usages,
            "extended_key_usages": extended,
        }
    except errors.InvalidField:
        raise
    except Exception as exc:  # asn1crypto raises ValueError, TypeError, OSError, … on bad DER
        raise _bad(f"is not a valid PEM X.509 certificate: {exc}") from None
    return fields


CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field(
        "ca_pem", "string", required=True, max_bytes=MAX_PEM_BYTES, check=lambda n, v: parse_pem(v)
    ),
]
UPDATE_FIELDS = [DESCRIPTION, METADATA]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        **{k: data[k] for k in ("ca_pem", "subject_common_name", "not_before", "not_after")},
        "key_usages": list(data["key_usages"]),
        "extended_key_usages": list(data["extended_key_usages"]),
    }


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    data = {
        "description": fields.get("description", ""),
        "metadata": fields.get("metadata", ""),
        **fields["ca_pem"],
        "created_at": validation.now_rfc3339(),
    }
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        ids.new_id(PREFIX),
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    store.commit([store.put_new(item)])
    return render(c, item)


def get_item(account_id: str, ca_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, ca_id, "certificate authority")


def get(c: Ctx, ca_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, ca_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, ca_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (404 when absent)."""
    return web.updated(c, COLLECTION, PREFIX, ca_id, fields, "certificate authority", render)


def delete(c: Ctx, ca_id: str) -> None:
    """One conditional DeleteItem: absent is 404, used by an edge (``refs`` > 0) 409."""
    missing = errors.NotFound(f"No certificate authority with id '{ca_id}' exists")
    if not ids.is_valid(ca_id, PREFIX):
        raise missing
    store.write(
        refs.delete_unreferenced(
            store.collection_pk(c.account_id, COLLECTION),
            ca_id,
            missing,
            errors.Conflict(
                f"Certificate authority '{ca_id}' is used by an HTTPS edge's mutual_tls module; "
                "remove it from the edge first"
            ),
        )
    )


def pems(account_id: str, ca_ids: List[str]) -> List[str]:
    """The PEMs of these CAs (for the edge's client-certificate check); one BatchGetItem.
    CAs that no longer exist are left out."""
    keys = [(store.collection_pk(account_id, COLLECTION), ca_id) for ca_id in ca_ids]
    found = {
        item.sk: item.data["ca_pem"]
        for item in store.model().batch_get(keys, consistent_read=True)
    }
    return [found[ca_id] for ca_id in ca_ids if ca_id in found]
