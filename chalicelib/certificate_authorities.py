"""Certificate authorities: ``/certificate_authorities`` (for the ``mutual_tls`` edge module).

Fields: id, uri, created_at, description, metadata, ca_pem, subject_common_name, not_before,
not_after (RFC 3339), key_usages, extended_key_usages.

Rules (where the spec is silent, decided here):
- ``ca_pem`` is required: one X.509 certificate in PEM form (``-----BEGIN CERTIFICATE-----``),
  at most :data:`MAX_PEM_BYTES` bytes, parsed with ``cryptography``. Anything else (no
  certificate, several, a private key, garbage) is a 400. A certificate whose basic
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

from chalicelib import errors, ids, refs, store, validation, web
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "certificate_authority"
PREFIX = ids.PREFIXES["certificate_authority"]
PATH = "/certificate_authorities"
LIST_KEY = "certificate_authorities"
MAX_PEM_BYTES = 16384
_BEGIN = "-----BEGIN CERTIFICATE-----"

_KEY_USAGES = ("digital_signature", "content_commitment", "key_encipherment",
               "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign")
# cryptography's ExtendedKeyUsageOID, by dotted string: cryptography is imported by parse_pem
# only (about 20 ms at cold start that only a certificate authority's creation should pay).
_EKU_NAMES = {
    "1.3.6.1.5.5.7.3.1": "server_auth",
    "1.3.6.1.5.5.7.3.2": "client_auth",
    "1.3.6.1.5.5.7.3.3": "code_signing",
    "1.3.6.1.5.5.7.3.4": "email_protection",
    "1.3.6.1.5.5.7.3.8": "time_stamping",
    "1.3.6.1.5.5.7.3.9": "ocsp_signing",
}


def _bad(msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field 'ca_pem' {msg}", details={"field": "ca_pem"})


def _rfc3339(value: Any) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_pem(text: str) -> Dict[str, Any]:
    """The stored fields of a CA certificate in PEM form, or a 400 naming ``ca_pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import NameOID
    blocks = text.count(_BEGIN)
    if blocks != 1:
        raise _bad("must hold exactly one PEM certificate ('-----BEGIN CERTIFICATE-----'), "
                   f"found {blocks}")
    try:
        cert = x509.load_pem_x509_certificate(text.strip().encode("utf-8"))
    except ValueError as exc:
        raise _bad(f"is not a valid PEM X.509 certificate: {exc}") from None
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        if not constraints.ca:
            raise _bad("is not a certificate authority (its basic constraints say CA:FALSE)")
    except x509.ExtensionNotFound:
        pass
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    key_usages: List[str] = []
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        for name in _KEY_USAGES:
            if getattr(usage, name):
                key_usages.append(name)
        if usage.key_agreement:
            key_usages += [n for n in ("encipher_only", "decipher_only") if getattr(usage, n)]
    except x509.ExtensionNotFound:
        pass
    extended: List[str] = []
    try:
        for oid in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value:
            extended.append(_EKU_NAMES.get(oid.dotted_string, oid.dotted_string))
    except x509.ExtensionNotFound:
        pass
    return {"ca_pem": cert.public_bytes(Encoding.PEM).decode("ascii"),
            "subject_common_name": str(names[0].value) if names else "",
            "not_before": _rfc3339(cert.not_valid_before_utc),
            "not_after": _rfc3339(cert.not_valid_after_utc),
            "key_usages": key_usages, "extended_key_usages": extended}


CREATE_FIELDS = [DESCRIPTION, METADATA,
                 Field("ca_pem", "string", required=True, max_bytes=MAX_PEM_BYTES,
                       check=lambda n, v: parse_pem(v))]
UPDATE_FIELDS = [DESCRIPTION, METADATA]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {**web.resource_fields(c, PATH, item),
            **{k: data[k] for k in ("ca_pem", "subject_common_name", "not_before", "not_after")},
            "key_usages": list(data["key_usages"]),
            "extended_key_usages": list(data["extended_key_usages"])}


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    data = {"description": fields.get("description", ""), "metadata": fields.get("metadata", ""),
            **fields["ca_pem"], "created_at": validation.now_rfc3339()}
    item = store.new_item(store.collection_pk(c.account_id, COLLECTION), ids.new_id(PREFIX),
                          kind=COLLECTION, account_id=c.account_id, data=data)
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
    store.write(refs.delete_unreferenced(
        store.collection_pk(c.account_id, COLLECTION), ca_id, missing, errors.Conflict(
            f"Certificate authority '{ca_id}' is used by an HTTPS edge's mutual_tls module; "
            "remove it from the edge first")))


def pems(account_id: str, ca_ids: List[str]) -> List[str]:
    """The PEMs of these CAs (for the edge's client-certificate check); one BatchGetItem.
    CAs that no longer exist are left out."""
    keys = [(store.collection_pk(account_id, COLLECTION), ca_id) for ca_id in ca_ids]
    found = {item.sk: item.data["ca_pem"]
             for item in store.model().batch_get(keys, consistent_read=True)}
    return [found[ca_id] for ca_id in ca_ids if ca_id in found]


def pems_by_id(account_id: str, ca_ids: List[str]) -> Dict[str, str]:
    """CA id → PEM for those of ``ca_ids`` that exist (one BatchGetItem): the edge caches each
    CA's PEM by id (a CA's certificate never changes)."""
    keys = [(store.collection_pk(account_id, COLLECTION), ca_id) for ca_id in ca_ids]
    return {item.sk: item.data["ca_pem"]
            for item in store.model().batch_get(keys, consistent_read=True)}
