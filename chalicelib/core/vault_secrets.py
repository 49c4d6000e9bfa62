"""Vaults and their secrets in the store, as both planes read them (the API writes them in
chalicelib/vaults.py; the edge resolves ``${secrets.get('vault', 'name')}`` through
:func:`lookup`).

Layout (docs/IDENTITY.md, "Vaults and secrets"):
- a vault: ``A#<account>#vaults`` / ``vault_…``; data name, description, metadata,
  created_at, updated_at, created_by, last_updated_by; ``refs`` counts its secrets;
- a secret: ``A#<account>#vault_secrets`` / ``secret_…``; the same fields, ``vault_id``, and
  ``sealed``: the value sealed by :mod:`chalicelib.core.keywrap` (KMS envelope when
  ``TLS_KMS_KEY_ID`` is set, else the local key file) bound to the account and the secret's
  id. The value is never rendered;
- names are unique: a vault's in its account (``U#vault_name#<account>#<name>``, owner
  ``vault_id``), a secret's in its vault (``U#vault_secret_name#<vault_id>#<name>``, owner
  ``secret_id``), claimed in the transaction that writes the name.

A lookup by names is three GetItems (the vault's name, the secret's name, the secret); the
edge caches the answer (edge/secrets.py).
"""

from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from chalicelib.core import ids, keywrap, store

VAULTS = "vaults"
SECRETS = "vault_secrets"
VAULT_PREFIX = ids.PREFIXES["vault"]
SECRET_PREFIX = ids.PREFIXES["vault_secret"]
VAULT_NAMES = "vault_name"
SECRET_NAMES = "vault_secret_name"


def vault_name_key(account_id: str, name: str) -> str:
    return f"{account_id}#{name}"


def secret_name_key(vault_id: str, name: str) -> str:
    return f"{vault_id}#{name}"


def seal_context(account_id: str, secret_id: str) -> Dict[str, str]:
    return {"account_id": account_id, "vault_secret_id": secret_id}


def vault_id_of(account_id: str, vault_name: str) -> Optional[str]:
    item = store.get(
        store.unique_pk(VAULT_NAMES, vault_name_key(account_id, vault_name)), store.UNIQUE_SK
    )
    return None if item is None else (item.data or {}).get("vault_id")


def lookup(account_id: str, vault_name: str, name: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(secret id, its data) of the account's secret ``name`` in its vault ``vault_name``;
    None when there is none. At most three GetItems."""
    vault_id = vault_id_of(account_id, vault_name)
    if not vault_id:
        return None
    owner = store.get(
        store.unique_pk(SECRET_NAMES, secret_name_key(vault_id, name)), store.UNIQUE_SK
    )
    secret_id = None if owner is None else (owner.data or {}).get("secret_id")
    if not secret_id:
        return None
    item = store.get(store.collection_pk(account_id, SECRETS), secret_id)
    if item is None or item.data.get("vault_id") != vault_id:
        return None
    return secret_id, item.data


def reveal(account_id: str, secret_id: str, data: Dict[str, Any]) -> str:
    """The value of a secret read by :func:`lookup` (keywrap.SealError if it does not open)."""
    return keywrap.open_sealed(data["sealed"], seal_context(account_id, secret_id)).decode("utf-8")


def value_of(account_id: str, vault_name: str, name: str) -> Optional[str]:
    found = lookup(account_id, vault_name, name)
    return None if found is None else reveal(account_id, found[0], found[1])


def missing_of(account_id: str, refs: Iterable[Tuple[str, str]]) -> Set[Tuple[str, str]]:
    """The (vault name, secret name) pairs among ``refs`` the account does not have."""
    missing: Set[Tuple[str, str]] = set()
    seen: List[Tuple[str, str]] = []
    for ref in refs:
        if ref in seen:
            continue
        seen.append(ref)
        if lookup(account_id, ref[0], ref[1]) is None:
            missing.add(ref)
    return missing
