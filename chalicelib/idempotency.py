"""Idempotent creates: ``POST`` with an ``Idempotency-Key`` header.

The hosted service has no such header; its users retry creates and get duplicates. Here a
create (every ``POST`` of a collection, chalicelib.rest) that carries ``Idempotency-Key``
is run at most once per key:

- The first request with a key claims it: a record ``I#<account>#<sha256(key)>`` is written
  with an item-must-not-exist condition, holding a digest of the request (principal, method,
  path and the body's JSON, keys sorted). Then the create runs and its response (status and
  body) is saved in the record.
- A later request with the same key and the same request gets that response again (also when
  it was a 4xx), with ``Idempotent-Replayed: true``; nothing is created.
- The same key with another request (another body, path or principal) is a 409
  ``ERR_IDEMPOTENCY_KEY_REUSED`` and changes nothing.
- Concurrent duplicates: the claim's condition lets exactly one of them run the create; the
  others wait for its response (polling the record for up to :data:`WAIT_SECONDS`) and return
  it; if it is still running after that, they get a 409 asking to retry. A claim whose
  request died before saving a response (a crashed process) is taken over after
  :data:`PENDING_SECONDS` (in that window a crash after the create could have created the
  resource once already: the only case a retry may create a second one).
- A response 5xx is not kept (the claim is released), so a retry runs the create again.
- Records live ``IDEMPOTENCY_TTL_SECONDS`` (default 24 h, ``expires_at``; DynamoDB's
  TTL removes them later, and an expired record is treated as absent).
- Keys: 1–255 printable ASCII characters (400 otherwise); scoped to the account.
- Secrets are never stored: a create whose response shows a secret once (``token`` of API
  keys and credentials) is replayed with ``token: null``; the secret is only in the first
  response (the store keeps secrets as digests only, see chalicelib.auth).
"""

import hashlib
import json
import time
from typing import Any, Callable, Dict, Optional, Tuple

from chalicelib.core import errors, store
from chalicelib.core.config import get_settings

HEADER = "idempotency-key"
MAX_KEY_LENGTH = 255
WAIT_SECONDS = 10.0
POLL_SECONDS = 0.05
PENDING_SECONDS = 60
SECRET_FIELDS = ("token",)

Result = Tuple[int, Dict[str, Any]]  # status, body


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= ch <= "~" for ch in key):
        raise errors.BadRequest(
            f"Header 'Idempotency-Key' must be 1 to {MAX_KEY_LENGTH} printable ASCII characters",
            error_code=errors.INVALID_FIELD,
            details={"header": "Idempotency-Key"},
        )
    return key


def request_digest(principal_id: str, method: str, path: str, body: Any) -> str:
    canonical = json.dumps(
        [principal_id, method, path, body],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _without_secrets(body: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (None if k in SECRET_FIELDS else v) for k, v in body.items()}


def _record(account_id: str, key: str) -> Tuple[str, str]:
    return (
        store.idempotency_pk(account_id, hashlib.sha256(key.encode()).hexdigest()),
        store.IDEMPOTENCY_SK,
    )


def _live(item: Optional[store.Item], now: float) -> Optional[store.Item]:
    if item is None or (item.expires_at is not None and item.expires_at <= now):
        return None
    return item


def _replayed(item: store.Item, digest: str) -> Optional[Result]:
    data = item.data or {}
    if data.get("digest") != digest:
        raise errors.IdempotencyConflict(
            "This Idempotency-Key was already used with a different request; use a new key "
            "for a new request",
            details={"header": "Idempotency-Key"},
        )
    if data.get("state") == "done":
        return data["status"], data["body"]
    return None


def run(
    account_id: str,
    key: str,
    digest: str,
    create: Callable[[], Result],
    clock: Callable[[], float] = time.time,
) -> Tuple[Result, bool]:
    """The response for this request and whether it is a replay."""
    pk, sk = _record(account_id, key)
    ttl_seconds = get_settings().idempotency_ttl_seconds
    deadline = clock() + WAIT_SECONDS
    while True:
        now = clock()
        if now >= deadline:
            raise errors.Conflict(
                "A request with this Idempotency-Key is still being processed; retry it later",
                details={"header": "Idempotency-Key"},
            )
        stored = store.get(pk, sk)
        existing = _live(stored, now)
        if existing is not None:
            replay = _replayed(existing, digest)
            if replay is not None:
                return replay, True
            started = (existing.data or {}).get("started", 0)
            if now - started < PENDING_SECONDS:
                time.sleep(POLL_SECONDS)
                continue
        claim = store.new_item(
            pk,
            sk,
            kind="idempotency",
            account_id=account_id,
            data={"digest": digest, "state": "pending", "started": now},
        )
        claim.expires_at = int(now) + ttl_seconds
        if stored is not None:  # an abandoned claim or an expired record: take it over
            claim.version = stored.version
        try:
            # version None: put-if-absent; else: only if nobody changed it since our read
            store.commit([store.save(claim)])
        except store.VersionConflict:
            continue  # someone else claimed it first: read again
        break
    try:
        status, body = create()
    except errors.ApiError as exc:
        if exc.status_code >= 500:
            store.commit([store.delete(claim)])
            raise
        status, body = exc.status_code, exc.body("")
        body["details"].pop("operation_id", None)
        _finish(claim, status, body)
        raise
    except Exception:
        store.commit([store.delete(claim)])
        raise
    _finish(claim, status, _without_secrets(body))
    return (status, body), False


def _finish(claim: store.Item, status: int, body: Dict[str, Any]) -> None:
    claim.data = {**claim.data, "state": "done", "status": status, "body": body}
    store.commit([store.save(claim)])
