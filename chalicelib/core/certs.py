"""What the edge's TLS needs from the store: the certificates it serves for reserved domains
and agent ingresses (with their keys, unsealed by :mod:`chalicelib.core.keywrap`) and the PEMs
of the certificate authorities an HTTPS edge's ``mutual_tls`` names. Written by
``chalicelib.tls_certificates``, ``chalicelib.reserved_domains``,
``chalicelib.agent_ingresses``, the ACME worker (chalicelib.acme.worker) and
``chalicelib.certificate_authorities``.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import keywrap, store

CERTIFICATE_COLLECTION = "tls_certificate"
CA_COLLECTION = "certificate_authority"


# Derived copies, one per reserved domain that has a certificate (sk: the domain), written in
# the transaction that attaches or replaces it: what the edge's HTTPS listener serves.
SERVED_PK = "TLS#domain_certificate"


SERVED_KIND = "domain_certificate"
# An agent ingress's issued certificate has its own entry in the same partition, under
# ``agent_ingress#<domain>`` (never an SNI name: ``#`` is not in a host name), so the HTTPS
# listener never serves it and a reservation of the same name keeps its own; the agent
# listener reads it for the ingress's domain (edge/server.py).
INGRESS_SERVED = "agent_ingress#"


def ingress_served_sk(domain: str) -> str:
    return f"{INGRESS_SERVED}{domain}"


def key_context(account_id: str, cert_id: str) -> Dict[str, str]:
    return {"account_id": account_id, "tls_certificate_id": cert_id}


# ---- what the edge reads ----------------------------------------------------------------------
def served_index() -> Dict[str, Dict[str, Any]]:
    """Domain (exact or ``*.`` wildcard) → ``{account_id, reserved_domain_id,
    tls_certificate_id, fingerprint, not_after}`` for every reserved domain with a
    certificate, and ``agent_ingress#<domain>`` → the same with ``agent_ingress_id`` for every
    agent ingress with an issued one; one Query (paged by DynamoDB beyond 1 MB)."""
    return {item.sk: dict(item.data) for item in store.query_all(SERVED_PK)}


def key_pair(account_id: str, cert_id: str) -> Optional[Tuple[str, str, str]]:
    """(certificate chain PEM, private key PEM, fingerprint) of a certificate, its key
    opened (1 GetItem; in AWS also 1 KMS Decrypt); None when it no longer exists."""
    item = store.get(store.collection_pk(account_id, CERTIFICATE_COLLECTION), cert_id)
    if item is None:
        return None
    data = item.data
    key = keywrap.open_sealed(data["private_key"], key_context(account_id, cert_id))
    return data["certificate_pem"], key.decode("ascii"), data["fingerprint"]


def pems_by_id(account_id: str, ca_ids: List[str]) -> Dict[str, str]:
    """CA id → PEM for those of ``ca_ids`` that exist (one BatchGetItem): the edge caches each
    CA's PEM by id (a CA's certificate never changes)."""
    keys = [(store.collection_pk(account_id, CA_COLLECTION), ca_id) for ca_id in ca_ids]
    return {
        item.sk: item.data["ca_pem"]
        for item in store.model().batch_get(keys, consistent_read=True)
    }
