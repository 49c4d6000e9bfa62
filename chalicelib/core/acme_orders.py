"""The store side of managed certificates (no ACME library here: the API and the edge import it).

Items (one table, chalicelib.core.store):

- work queue entry, one per reserved domain or agent ingress with a policy: ``ACME#queue`` /
  ``<account>#<domain or ingress id>`` (written by the API with the domain or ingress; taken
  by workers);
- challenge answers the edge reads: ``ACME#challenge`` / ``http-01#<token>`` (HTTP-01) and
  ``tls-alpn-01#<domain>`` (TLS-ALPN-01), written by the worker;
- the ACME account (key sealed): ``ACME#account`` / SHA-256 of the directory URL.

**Leases.** A worker takes an entry with one conditional UpdateItem (``due_at <= now`` and the
lease free or expired → its owner id and ``lease_until``); only the holder may write the order
it is working on (every write conditioned on ``lease_owner``), so two workers never order the
same certificate. The order in progress (its URL, the CSR and the new key, sealed) is written
to the entry before its challenges are answered, so a worker that dies mid-order leaves it to
the next one once the lease expires (``LEASE_SECONDS``), which resumes that order instead of
placing another.
"""

import hashlib
import time
from typing import Any, Dict, List, Optional

from chalicelib.core import store

QUEUE_PK = "ACME#queue"
CHALLENGE_PK = "ACME#challenge"
ACCOUNT_PK = "ACME#account"
QUEUE_KIND = "acme_queue"
CHALLENGE_KIND = "acme_challenge"
LEASE_SECONDS = 300
CHALLENGE_TTL = 3600
PROVISIONING_MSG = "Managed certificate provisioning in progress."
RENEWING_MSG = "Managed certificate renewal in progress."
# What a managed domain's provisioning job says when the service has no ACME directory
# (ACME_DIRECTORY_URL unset): nothing will be issued, and what the edge serves instead.
NO_ACME_FALLBACK_MSG = (
    "No ACME directory is configured on this service (ACME_DIRECTORY_URL), so no managed "
    "certificate is issued: the edge serves its own fallback certificate for this domain "
    "(under make run, one signed by the local CA in ca.pem; else EDGE_TLS_CERT), which "
    "browsers do not trust. Attach an uploaded certificate, or configure ACME."
)
NO_ACME_UPLOADED_MSG = (
    "No ACME directory is configured on this service (ACME_DIRECTORY_URL), so no managed "
    "certificate is issued: the edge keeps serving the attached certificate {cert_id}."
)
# error_code values the hosted API documents: a condition the user must correct, a temporary one
DNS_ERROR = "DNS_ERROR"
INTERNAL_ERROR = "INTERNAL_ERROR"
# First retry within 5 minutes, then longer (seconds), capped at the last.
RETRY_BACKOFF = (60, 300, 900, 3600, 4 * 3600, 12 * 3600)


class LeaseLost(Exception):
    """Another worker holds this entry (or it was removed): stop working on it."""


def queue_sk(account_id: str, domain_id: str) -> str:
    return f"{account_id}#{domain_id}"


def retry_delay(attempts: int) -> int:
    """Seconds before retry number ``attempts`` (1 = the first retry)."""
    return RETRY_BACKOFF[min(max(attempts, 1), len(RETRY_BACKOFF)) - 1]


# ---- what the API writes with a reserved domain or an agent ingress ---------------------------
def enqueue_op(account_id: str, domain_id: str, domain: str, due_at: float = 0.0) -> store.Op:
    """The domain's queue entry, due at ``due_at`` (0: now), no order in progress."""
    return store.put_raw(
        QUEUE_PK,
        queue_sk(account_id, domain_id),
        QUEUE_KIND,
        {
            "account_id": account_id,
            "domain_id": domain_id,
            "domain": domain,
            "due_at": due_at,
            "attempts": 0,
            "lease_owner": None,
            "lease_until": 0,
            "order": None,
        },
    )


def dequeue_op(account_id: str, domain_id: str) -> store.Op:
    return store.drop(QUEUE_PK, queue_sk(account_id, domain_id))


def initial_status(now_rfc3339: str) -> Dict[str, Any]:
    return {
        "renews_at": None,
        "provisioning_job": {
            "error_code": None,
            "msg": PROVISIONING_MSG,
            "started_at": now_rfc3339,
            "retries_at": None,
        },
    }


# ---- the worker's side ------------------------------------------------------------------------
def entries() -> List[store.Item]:
    """Every queue entry (one Query; one item per managed domain)."""
    return store.query_all(QUEUE_PK)


def claim(
    sk: str, owner: str, now: Optional[float] = None, lease_seconds: int = LEASE_SECONDS
) -> store.Item:
    """Take the entry for ``owner`` if it is due and its lease is free or expired (one
    conditional UpdateItem); LeaseLost otherwise."""
    now = time.time() if now is None else now

    def require(e: store.Expr) -> str:
        return f"{e.data('due_at')} <= {e.value(now)} AND {e.data('lease_until')} < {e.value(now)}"

    try:
        return _updated(
            store.write(
                store.set_fields(
                    QUEUE_PK,
                    sk,
                    {"lease_owner": owner, "lease_until": now + lease_seconds},
                    require=require,
                    missing=LeaseLost(sk),
                    explain=lambda old: LeaseLost(sk),
                )
            )
        )
    except store.VersionConflict:
        raise LeaseLost(sk) from None


def _updated(item: Optional[store.Item]) -> store.Item:
    """An update's ``write`` returns the item as it is now, never None."""
    assert item is not None
    return item


def update_held(sk: str, owner: str, fields: Dict[str, Any]) -> store.Item:
    """Write fields of an entry this worker holds (LeaseLost when it does not any more)."""
    try:
        return _updated(
            store.write(
                store.set_fields(
                    QUEUE_PK,
                    sk,
                    fields,
                    require=lambda e: f"{e.data('lease_owner')} = {e.value(owner)}",
                    missing=LeaseLost(sk),
                    explain=lambda old: LeaseLost(sk),
                )
            )
        )
    except store.VersionConflict:
        raise LeaseLost(sk) from None


def held_op(sk: str, owner: str, fields: Dict[str, Any]) -> store.Op:
    """The same as a transaction part."""
    return store.set_fields(
        QUEUE_PK,
        sk,
        fields,
        require=lambda e: f"{e.data('lease_owner')} = {e.value(owner)}",
        missing=LeaseLost(sk),
        explain=lambda old: LeaseLost(sk),
    )


# ---- challenge answers (the edge reads them) --------------------------------------------------
def http01_sk(token: str) -> str:
    return f"http-01#{token}"


def tls_alpn01_sk(domain: str) -> str:
    return f"tls-alpn-01#{domain}"


def put_challenge(sk: str, domain: str, key_authorization: str) -> None:
    store.commit(
        [
            store.put_raw(
                CHALLENGE_PK,
                sk,
                CHALLENGE_KIND,
                {
                    "domain": domain,
                    "key_authorization": key_authorization,
                    "expires": time.time() + CHALLENGE_TTL,
                },
            )
        ]
    )


def drop_challenge(sk: str) -> None:
    store.commit([store.drop(CHALLENGE_PK, sk)])


def challenge(sk: str) -> Optional[Dict[str, Any]]:
    """The answer stored under ``sk`` (1 GetItem), None when absent or expired."""
    item = store.get(CHALLENGE_PK, sk)
    if item is None or not isinstance(item.data, dict):
        return None
    if float(item.data.get("expires") or 0) < time.time():
        return None
    return dict(item.data)


def http01_answer(host: str, token: str) -> Optional[str]:
    """The key authorization for an HTTP-01 request of ``token`` on ``host``, or None (the
    token is bounded and must be base64url, as RFC 8555 8.3 makes it)."""
    if not token or len(token) > 128 or any(ch not in _B64URL for ch in token):
        return None
    found = challenge(http01_sk(token))
    if found is None or found.get("domain") != host:
        return None
    return found["key_authorization"]


_B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def account_sk(directory_url: str) -> str:
    return hashlib.sha256(directory_url.encode("utf-8")).hexdigest()
