"""TLS certificates: ``/tls_certificates`` (uploaded by the caller, or issued by ACME for a
reserved domain's ``certificate_management_policy``: chalicelib.acme).

Fields (the hosted object's): id, uri, created_at, description, metadata, certificate_pem,
subject_common_name, subject_alternative_names ``{dns_names, ips}``, issued_at (null for an
upload), not_before, not_after, key_usages, extended_key_usages, private_key_type (``rsa`` or
``ecdsa``), issuer_common_name, serial_number (lower-case hex), subject_organization,
subject_organizational_unit, subject_locality, subject_province, subject_country; and beyond
the hosted object, ``fingerprint``: the SHA-256 of the leaf certificate's DER, lower-case hex.

Rules (where the hosted docs are silent, decided here):
- ``certificate_pem``: 1 to :data:`MAX_CHAIN` PEM certificates, leaf first, at most
  :data:`MAX_CERT_PEM_BYTES` bytes, each parsed strictly as a CA's is
  (chalicelib.certificate_authorities: DER, versions 1-3, no extension twice); nothing else
  in it (a key, another block type: 400). Stored re-encoded (canonical PEM).
- ``private_key_pem``: one unencrypted PEM private key (PKCS#8, PKCS#1 or SEC 1), RSA 2048 to
  8192 bits or ECDSA P-256/P-384, at most :data:`MAX_KEY_PEM_BYTES` bytes; it must be the
  private half of the leaf's public key (chalicelib.core.keypairs checks it from the key's own
  numbers, in pure Python): otherwise 400. It is **never returned** by any call and is stored
  only sealed (chalicelib.core.keywrap: KMS envelope encryption in AWS, a key file locally), bound
  to the account and certificate id.
- Update: description and metadata. The certificate and key cannot be changed (upload a new
  one and point the reserved domain's ``certificate_id`` at it).
- A certificate a reserved domain uses (``certificate_id``) cannot be deleted (409, its
  ``refs``); a certificate issued by ACME belongs to its domain (or agent ingress: its
  ``managed_for``) and is replaced (deleted) by the next issuance, or deleted with it.
- Another account's certificate is a 404, and a reserved domain cannot name it (400).

What the edge reads (pure functions, no HTTP): :func:`served_index` (1 Query: every reserved
domain with a certificate, by domain name) and :func:`key_pair` (1 GetItem, the key opened).
"""

import hashlib
import re
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import validation, web
from chalicelib.core import errors, ids, keypairs, keywrap, refs, store
from chalicelib.certificate_authorities import (
    _COMMON_NAME,
    _EKU_NAMES,
    _KEY_USAGE_BITS,
    _certificate,
    _rfc3339,
)
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx
from chalicelib.core import certs

COLLECTION = certs.CERTIFICATE_COLLECTION
PREFIX = ids.PREFIXES["tls_certificate"]
PATH = "/tls_certificates"
LIST_KEY = "tls_certificates"
MAX_CERT_PEM_BYTES = 65536
MAX_KEY_PEM_BYTES = 16384
MAX_CHAIN = 10

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)
_SUBJECT_OIDS = {
    "subject_organization": "2.5.4.10",
    "subject_organizational_unit": "2.5.4.11",
    "subject_locality": "2.5.4.7",
    "subject_province": "2.5.4.8",
    "subject_country": "2.5.4.6",
}
FIELDS = (
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
)


def _bad(field: str, msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}' {msg}", details={"field": field})


def _name_attr(name: Any, oid: str) -> str:
    values = [
        attribute["value"].native
        for rdn in name.chosen
        for attribute in rdn
        if attribute["type"].dotted == oid
    ]
    return str(values[0]) if values else ""


def parse_chain(text: str) -> Tuple[List[Any], str]:
    """The certificates of a PEM chain (asn1crypto, leaf first) and its canonical PEM."""
    from asn1crypto import pem

    field = "certificate_pem"
    blocks = list(_BLOCK.finditer(text))
    if not blocks:
        raise _bad(field, "must hold PEM certificates ('-----BEGIN CERTIFICATE-----'), found none")
    others = sorted({b.group(1) for b in blocks if b.group(1) != "CERTIFICATE"})
    if others:
        raise _bad(field, f"must hold only certificates; it holds a {others[0]!r} block")
    if len(blocks) > MAX_CHAIN:
        raise _bad(
            field,
            f"holds {len(blocks)} certificates; at most {MAX_CHAIN} (the leaf "
            "and its intermediates)",
        )
    chain = []
    for index, block in enumerate(blocks):
        try:
            chain.append(_certificate(block.group(0)))
        except Exception as exc:
            raise _bad(
                field,
                f"certificate {index} is not a valid PEM X.509 certificate: {str(exc)[:200]}",
            ) from None
    canonical = "".join(pem.armor("CERTIFICATE", c.dump()).decode("ascii") for c in chain)
    return chain, canonical


def parse(certificate_pem: str, private_key_pem: str) -> Tuple[Dict[str, Any], str]:
    """(the stored fields of a certificate, the key as PKCS#8 PEM), or a 400."""
    chain, canonical = parse_chain(certificate_pem)
    leaf = chain[0]
    try:
        key = keypairs.load_private_key(private_key_pem)
    except keypairs.KeyError_ as exc:
        raise _bad("private_key_pem", str(exc)) from None
    try:
        matched = keypairs.matches(key, leaf.public_key)
    except keypairs.KeyError_ as exc:
        raise _bad("certificate_pem", str(exc)) from None
    if not matched:
        raise _bad(
            "private_key_pem",
            "does not match the certificate: it is not the private "
            "key of the leaf (first) certificate's public key",
        )
    try:
        san = leaf.subject_alt_name_value
        dns_names, ips = [], []
        for general in san or []:
            if general.name == "dns_name":
                dns_names.append(str(general.native).lower())
            elif general.name == "ip_address":
                ips.append(str(general.native))
        usage = leaf.key_usage_value
        bits = set(usage.native) if usage is not None else set()
        eku = leaf.extended_key_usage_value
        validity = leaf["tbs_certificate"]["validity"]
        fields: Dict[str, Any] = {
            "certificate_pem": canonical,
            "subject_common_name": _name_attr(leaf.subject, _COMMON_NAME),
            "subject_alternative_names": {"dns_names": dns_names, "ips": ips},
            "issued_at": None,
            "not_before": _rfc3339(validity["not_before"].native),
            "not_after": _rfc3339(validity["not_after"].native),
            "key_usages": [
                name
                for bit, name in _KEY_USAGE_BITS.items()
                if bit in bits
                and (name not in ("encipher_only", "decipher_only") or "key_agreement" in bits)
            ],
            "extended_key_usages": [_EKU_NAMES.get(o.dotted, o.dotted) for o in eku]
            if eku
            else [],
            "private_key_type": key.kind,
            "issuer_common_name": _name_attr(leaf.issuer, _COMMON_NAME),
            "serial_number": format(leaf.serial_number, "x"),
            **{name: _name_attr(leaf.subject, oid) for name, oid in _SUBJECT_OIDS.items()},
            "fingerprint": hashlib.sha256(leaf.dump()).hexdigest(),
        }
    except Exception as exc:
        raise _bad("certificate_pem", f"could not be read: {str(exc)[:200]}") from None
    return fields, keypairs.pkcs8_pem(key)


def covers(fields: Dict[str, Any], name: str) -> bool:
    """True when the certificate's DNS names cover ``name`` (a host, or a ``*.`` reservation:
    then the certificate must hold that wildcard itself); one-label wildcards as TLS has them."""
    names = set((fields.get("subject_alternative_names") or {}).get("dns_names") or [])
    if not names and fields.get("subject_common_name"):
        names = {fields["subject_common_name"].lower()}
    if name in names:
        return True
    head, _, rest = name.partition(".")
    return head != "*" and bool(rest) and f"*.{rest}" in names


# ---- the API ----------------------------------------------------------------------------------
CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("certificate_pem", "string", required=True, max_bytes=MAX_CERT_PEM_BYTES),
    Field("private_key_pem", "string", required=True, max_bytes=MAX_KEY_PEM_BYTES),
]
UPDATE_FIELDS = [DESCRIPTION, METADATA]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    sans = data.get("subject_alternative_names") or {}
    return {
        **web.resource_fields(c, PATH, item),
        **{name: data.get(name) for name in FIELDS},
        "subject_alternative_names": {
            "dns_names": list(sans.get("dns_names") or []),
            "ips": list(sans.get("ips") or []),
        },
        "key_usages": list(data.get("key_usages") or []),
        "extended_key_usages": list(data.get("extended_key_usages") or []),
    }


def new_item(
    account_id: str,
    fields: Dict[str, Any],
    key_pem: str,
    *,
    description: str = "",
    metadata: str = "",
    issued_at: Optional[str] = None,
    domain_id: Optional[str] = None,
) -> store.Item:
    """A certificate item with its key sealed (not yet written)."""
    cert_id = ids.new_id(PREFIX)
    data = {
        "description": description,
        "metadata": metadata,
        **fields,
        "created_at": validation.now_rfc3339(),
        "private_key": keywrap.seal(
            key_pem.encode("ascii"), certs.key_context(account_id, cert_id)
        ),
    }
    if issued_at is not None:
        data["issued_at"] = issued_at
        data["managed_for"] = domain_id
    return store.new_item(
        store.collection_pk(account_id, COLLECTION),
        cert_id,
        kind=COLLECTION,
        account_id=account_id,
        data=data,
    )


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One conditional PutItem (the parse and key check run before it: nothing is written
    for a 400)."""
    parsed, key_pem = parse(fields["certificate_pem"], fields["private_key_pem"])
    item = new_item(
        c.account_id,
        parsed,
        key_pem,
        description=fields.get("description", ""),
        metadata=fields.get("metadata", ""),
    )
    store.commit([store.put_new(item)])
    return render(c, item)


def get_item(account_id: str, cert_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, cert_id, "TLS certificate")


def get(c: Ctx, cert_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, cert_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, cert_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (404 when absent)."""
    return web.updated(c, COLLECTION, PREFIX, cert_id, fields, "TLS certificate", render)


def delete(c: Ctx, cert_id: str) -> None:
    """One conditional DeleteItem: absent is 404, used by a reserved domain 409."""
    missing = errors.NotFound(f"No TLS certificate with id '{cert_id}' exists")
    if not ids.is_valid(cert_id, PREFIX):
        raise missing
    store.write(
        refs.delete_unreferenced(
            store.collection_pk(c.account_id, COLLECTION),
            cert_id,
            missing,
            errors.Conflict(
                f"TLS certificate '{cert_id}' is used by a reserved domain; detach it first "
                "(DELETE /reserved_domains/{id}/certificate) or point the domain at another"
            ),
        )
    )


# ---- the served index (written with reserved domains) ----------------------------------------
def served_op(
    domain: str, account_id: str, domain_id: str, cert_id: str, fields: Dict[str, Any]
) -> store.Op:
    return store.put_raw(
        certs.SERVED_PK,
        domain,
        certs.SERVED_KIND,
        {
            "account_id": account_id,
            "reserved_domain_id": domain_id,
            "tls_certificate_id": cert_id,
            "fingerprint": fields["fingerprint"],
            "not_after": fields["not_after"],
        },
    )


def unserved_op(domain: str) -> store.Op:
    return store.drop(certs.SERVED_PK, domain)


def ingress_served_op(
    domain: str, account_id: str, ingress_id: str, cert_id: str, fields: Dict[str, Any]
) -> store.Op:
    """An agent ingress's issued certificate, for the edge's agent listener only
    (chalicelib.core.certs.INGRESS_SERVED)."""
    return store.put_raw(
        certs.SERVED_PK,
        certs.ingress_served_sk(domain),
        certs.SERVED_KIND,
        {
            "account_id": account_id,
            "agent_ingress_id": ingress_id,
            "tls_certificate_id": cert_id,
            "fingerprint": fields["fingerprint"],
            "not_after": fields["not_after"],
        },
    )


def ingress_unserved_op(domain: str) -> store.Op:
    return store.drop(certs.SERVED_PK, certs.ingress_served_sk(domain))
