"""Vaults ``/vaults`` and their secrets ``/vault_secrets`` (and ``GET /vaults/{id}/secrets``).

Vault fields: id, uri, created_at, updated_at, name, description, metadata, created_by,
last_updated_by (the principal's id). Secret fields: id, uri, created_at, updated_at, name,
description, metadata, created_by and last_updated_by (Refs), vault (a Ref), vault_name.
A secret's ``value`` is write-only: accepted by create and update, stored sealed
(chalicelib.core.vault_secrets), never returned. Traffic policies read it as
``${secrets.get('<vault name>', '<secret name>')}`` (resolved by the edge).

Rules (where the hosted docs are silent, decided here):
- names are 1-64 characters of letters, digits, ``-``, ``_`` and ``.``; a vault's is unique
  in its account, a secret's in its vault (409 otherwise); both may be changed by PATCH;
- a secret is created in the vault named by ``vault_id`` or ``vault_name`` (400 naming the
  field when the account has no such vault) and stays in it;
- a value is at most MAX_VALUE_BYTES (4096) bytes of UTF-8 and must not be empty;
- a vault holds at most MAX_SECRETS_PER_VAULT (100) secrets (400 beyond);
- a vault holding secrets cannot be deleted (409): delete its secrets first.
A policy naming a secret its account does not have is a 400 where the account is known
(chalicelib.traffic_policy.check_ip_policies and cloud endpoints), as for IP policies.
"""

import re
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import rest, validation, web
from chalicelib.core import errors, ids, keywrap, store
from chalicelib.core import vault_secrets as vs
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

VAULT_PATH = "/vaults"
SECRET_PATH = "/vault_secrets"
MAX_VALUE_BYTES = 4096
MAX_SECRETS_PER_VAULT = 100
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _check_name(name: str, value: str) -> str:
    if not _NAME.match(value):
        raise errors.InvalidField(
            f"Field '{name}' must be 1 to 64 letters, digits, '-', '_' or '.'",
            details={"field": name},
        )
    return value


def _check_value(name: str, value: str) -> str:
    if not value:
        raise errors.InvalidField(f"Field '{name}' must not be empty", details={"field": name})
    return value


NAME = Field("name", "string", max_bytes=64, check=_check_name)
VALUE = Field("value", "string", max_bytes=MAX_VALUE_BYTES, check=_check_value)
VAULT_CREATE = [
    Field("name", "string", required=True, max_bytes=64, check=_check_name),
    DESCRIPTION,
    METADATA,
]
VAULT_UPDATE = [NAME, DESCRIPTION, METADATA]
SECRET_CREATE = [
    Field("name", "string", required=True, max_bytes=64, check=_check_name),
    Field("value", "string", required=True, max_bytes=MAX_VALUE_BYTES, check=_check_value),
    DESCRIPTION,
    METADATA,
    Field("vault_id", "string", max_bytes=64),
    Field("vault_name", "string", max_bytes=64),
]
SECRET_UPDATE = [NAME, VALUE, DESCRIPTION, METADATA]


# ---- vaults -----------------------------------------------------------------------------------
def render_vault(c: Ctx, item: store.Item) -> Dict[str, Any]:
    d = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{VAULT_PATH}/{item.sk}"),
        "created_at": d["created_at"],
        "updated_at": d.get("updated_at", d["created_at"]),
        "name": d["name"],
        "description": d.get("description", ""),
        "metadata": d.get("metadata", ""),
        "created_by": d.get("created_by", ""),
        "last_updated_by": d.get("last_updated_by", ""),
    }


def _vault_taken(name: str) -> errors.Conflict:
    return errors.Conflict(
        f"A vault named '{name}' already exists in this account", details={"field": "name"}
    )


def _no_vault(vault_id: str) -> errors.NotFound:
    return errors.NotFound(f"No vault with id '{vault_id}' exists")


def create_vault(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    now = validation.now_rfc3339()
    vault_id = ids.new_id(vs.VAULT_PREFIX)
    data = {
        "description": "",
        "metadata": "",
        **fields,
        "created_at": now,
        "updated_at": now,
        "created_by": c.principal.id,
        "last_updated_by": c.principal.id,
    }
    item = store.new_item(
        store.collection_pk(c.account_id, vs.VAULTS),
        vault_id,
        kind=vs.VAULTS,
        account_id=c.account_id,
        data=data,
    )
    store.commit(
        [
            store.put_new(item),
            store.unique(
                vs.VAULT_NAMES,
                vs.vault_name_key(c.account_id, fields["name"]),
                {"account_id": c.account_id, "vault_id": vault_id},
                _vault_taken(fields["name"]),
            ),
        ]
    )
    return render_vault(c, item)


def _vault_item(account_id: str, vault_id: str) -> store.Item:
    return store.get_by_id(account_id, vs.VAULTS, vs.VAULT_PREFIX, vault_id, "vault")


def get_vault(c: Ctx, vault_id: str) -> Dict[str, Any]:
    return render_vault(c, _vault_item(c.account_id, vault_id))


def list_vaults(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, vs.VAULTS, limit, before_id, render_vault)


@store.retrying
def update_vault(c: Ctx, vault_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem; a new name: read first, then the vault (unchanged since) and the name
    moved in one transaction."""
    if not fields or not ids.is_valid(vault_id, vs.VAULT_PREFIX):
        return get_vault(c, vault_id)
    fields = {**fields, "updated_at": validation.now_rfc3339(), "last_updated_by": c.principal.id}
    pk = store.collection_pk(c.account_id, vs.VAULTS)
    old = _vault_item(c.account_id, vault_id) if "name" in fields else None
    if old is not None and fields["name"] != old.data["name"]:
        store.commit(
            [
                store.set_fields(
                    pk,
                    vault_id,
                    fields,
                    missing=store.VersionConflict(),
                    require=lambda e: f"{e.path('version')} = {e.value(old.version)}",
                ),
                store.release(vs.VAULT_NAMES, vs.vault_name_key(c.account_id, old.data["name"])),
                store.unique(
                    vs.VAULT_NAMES,
                    vs.vault_name_key(c.account_id, fields["name"]),
                    {"account_id": c.account_id, "vault_id": vault_id},
                    _vault_taken(fields["name"]),
                ),
            ]
        )
        return get_vault(c, vault_id)
    return render_vault(
        c, store.write(store.set_fields(pk, vault_id, fields, missing=_no_vault(vault_id)))
    )


@store.retrying
def delete_vault(c: Ctx, vault_id: str) -> None:
    """Reads first (its name), then one transaction: the vault, on condition that it holds
    no secrets (409 otherwise) and is unchanged, and its name released."""
    old = _vault_item(c.account_id, vault_id)
    store.commit(
        [
            store.remove_item(
                store.collection_pk(c.account_id, vs.VAULTS),
                vault_id,
                require=lambda e: f"{e.path('refs')} = {e.value(0)} AND "
                f"{e.path('version')} = {e.value(old.version)}",
                missing=_no_vault(vault_id),
                explain=lambda item: errors.Conflict(
                    f"Vault '{vault_id}' still holds {item.refs} secret(s); delete them first"
                )
                if item.refs
                else store.VersionConflict(),
            ),
            store.release(vs.VAULT_NAMES, vs.vault_name_key(c.account_id, old.data["name"])),
        ]
    )


def list_vault_secrets(
    c: Ctx, vault_id: str, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    """The secrets of one vault, newest first (404 for a vault the account does not have)."""
    vault = _vault_item(c.account_id, vault_id)
    mine = [
        i
        for i in store.query_all(store.collection_pk(c.account_id, vs.SECRETS))
        if i.data.get("vault_id") == vault_id
    ]
    mine.sort(key=lambda i: i.sk, reverse=True)
    if before_id:
        mine = [i for i in mine if i.sk < before_id]
    return [render_secret(c, i, vault.data["name"]) for i in mine[:limit]], len(mine) > limit


# ---- secrets ----------------------------------------------------------------------------------
def render_secret(c: Ctx, item: store.Item, vault_name: Optional[str] = None) -> Dict[str, Any]:
    d = item.data
    if vault_name is None:
        vault = store.get(store.collection_pk(c.account_id, vs.VAULTS), d["vault_id"])
        vault_name = vault.data["name"] if vault is not None else ""
    return {
        "id": item.sk,
        "uri": c.uri(f"{SECRET_PATH}/{item.sk}"),
        "created_at": d["created_at"],
        "updated_at": d.get("updated_at", d["created_at"]),
        "name": d["name"],
        "description": d.get("description", ""),
        "metadata": d.get("metadata", ""),
        "created_by": {"id": d.get("created_by", ""), "uri": ""},
        "last_updated_by": {"id": d.get("last_updated_by", ""), "uri": ""},
        "vault": c.ref(VAULT_PATH, d["vault_id"]),
        "vault_name": vault_name,
    }


def _secret_taken(name: str) -> errors.Conflict:
    return errors.Conflict(
        f"A secret named '{name}' already exists in this vault", details={"field": "name"}
    )


def _no_secret(secret_id: str) -> errors.NotFound:
    return errors.NotFound(f"No secret with id '{secret_id}' exists")


def _vault_of(c: Ctx, fields: Dict[str, Any]) -> store.Item:
    if fields.get("vault_id"):
        field, vault_id = "vault_id", fields["vault_id"]
    elif fields.get("vault_name"):
        field = "vault_name"
        vault_id = vs.vault_id_of(c.account_id, fields["vault_name"]) or ""
    else:
        raise errors.InvalidField(
            "Field 'vault_id' or 'vault_name' is required", details={"field": "vault_id"}
        )
    item = (
        store.get(store.collection_pk(c.account_id, vs.VAULTS), vault_id)
        if ids.is_valid(vault_id, vs.VAULT_PREFIX)
        else None
    )
    if item is None:
        raise errors.InvalidField(
            f"Field '{field}': no vault '{str(fields[field])[:64]}' exists in this account",
            details={"field": field},
        )
    return item


def _seal(account_id: str, secret_id: str, value: str) -> Dict[str, Any]:
    try:
        return keywrap.seal(value.encode("utf-8"), vs.seal_context(account_id, secret_id))
    except keywrap.SealError as exc:
        raise errors.Internal(f"The secret could not be sealed: {exc}") from None


def create_secret(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One transaction: the secret, its name in its vault, and the vault's ``refs`` + 1 on
    condition that it exists and holds fewer than MAX_SECRETS_PER_VAULT."""
    vault = _vault_of(c, fields)
    secret_id = ids.new_id(vs.SECRET_PREFIX)
    now = validation.now_rfc3339()
    data = {
        "description": fields.get("description", ""),
        "metadata": fields.get("metadata", ""),
        "name": fields["name"],
        "vault_id": vault.sk,
        "created_at": now,
        "updated_at": now,
        "created_by": c.principal.id,
        "last_updated_by": c.principal.id,
        "sealed": _seal(c.account_id, secret_id, fields["value"]),
    }
    item = store.new_item(
        store.collection_pk(c.account_id, vs.SECRETS),
        secret_id,
        kind=vs.SECRETS,
        account_id=c.account_id,
        data=data,
    )
    full = errors.InvalidField(
        f"Vault '{vault.sk}' holds {MAX_SECRETS_PER_VAULT} secrets, the limit",
        details={"field": "vault_id"},
    )
    store.commit(
        [
            store.put_new(item),
            store.unique(
                vs.SECRET_NAMES,
                vs.secret_name_key(vault.sk, fields["name"]),
                {"account_id": c.account_id, "secret_id": secret_id},
                _secret_taken(fields["name"]),
            ),
            store.set_fields(
                store.collection_pk(c.account_id, vs.VAULTS),
                vault.sk,
                {},
                refs=1,
                require=lambda e: f"{e.path('refs')} < {e.value(MAX_SECRETS_PER_VAULT)}",
                explain=lambda old: full,
                missing=errors.InvalidField(
                    "Field 'vault_id': the vault was deleted", details={"field": "vault_id"}
                ),
            ),
        ]
    )
    return render_secret(c, item, vault.data["name"])


def _secret_item(account_id: str, secret_id: str) -> store.Item:
    return store.get_by_id(account_id, vs.SECRETS, vs.SECRET_PREFIX, secret_id, "secret")


def get_secret(c: Ctx, secret_id: str) -> Dict[str, Any]:
    return render_secret(c, _secret_item(c.account_id, secret_id))


def list_secrets(
    c: Ctx, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    """One Query of the page, then one BatchGetItem of its vaults (their names)."""
    items, more = store.query_page(store.collection_pk(c.account_id, vs.SECRETS), limit, before_id)
    pk = store.collection_pk(c.account_id, vs.VAULTS)
    wanted = sorted({i.data["vault_id"] for i in items})
    names = (
        {
            v.sk: v.data["name"]
            for v in store.model().batch_get(
                [(pk, vault_id) for vault_id in wanted], consistent_read=True
            )
        }
        if wanted
        else {}
    )
    return [render_secret(c, i, names.get(i.data["vault_id"], "")) for i in items], more


@store.retrying
def update_secret(c: Ctx, secret_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Reads first; then the secret (unchanged since), and a new name moved, in one
    transaction. A new value is sealed anew."""
    old = _secret_item(c.account_id, secret_id)
    if not fields:
        return render_secret(c, old)
    changes = {k: v for k, v in fields.items() if k != "value"}
    if "value" in fields:
        changes["sealed"] = _seal(c.account_id, secret_id, fields["value"])
    changes.update(updated_at=validation.now_rfc3339(), last_updated_by=c.principal.id)
    ops = [
        store.set_fields(
            store.collection_pk(c.account_id, vs.SECRETS),
            secret_id,
            changes,
            missing=_no_secret(secret_id),
            require=lambda e: f"{e.path('version')} = {e.value(old.version)}",
            explain=lambda item: store.VersionConflict(),
        )
    ]
    vault_id = old.data["vault_id"]
    if "name" in fields and fields["name"] != old.data["name"]:
        ops += [
            store.release(vs.SECRET_NAMES, vs.secret_name_key(vault_id, old.data["name"])),
            store.unique(
                vs.SECRET_NAMES,
                vs.secret_name_key(vault_id, fields["name"]),
                {"account_id": c.account_id, "secret_id": secret_id},
                _secret_taken(fields["name"]),
            ),
        ]
    store.commit(ops)
    old.data.update(changes)  # as written (rendered without reading it again)
    return render_secret(c, old)


@store.retrying
def delete_secret(c: Ctx, secret_id: str) -> None:
    """Reads first; then the secret (unchanged since), its name, and its vault's ``refs`` - 1
    in one transaction."""
    old = _secret_item(c.account_id, secret_id)
    store.commit(
        [
            store.delete(old),
            store.release(
                vs.SECRET_NAMES, vs.secret_name_key(old.data["vault_id"], old.data["name"])
            ),
            store.set_fields(
                store.collection_pk(c.account_id, vs.VAULTS),
                old.data["vault_id"],
                {},
                refs=-1,
                missing=store.VersionConflict(),
            ),
        ]
    )


VAULT_OPS = rest.Ops(
    prefix=vs.VAULT_PREFIX,
    list_key="vaults",
    create=create_vault,
    get=get_vault,
    list_page=list_vaults,
    update=update_vault,
    delete=delete_vault,
    create_fields=VAULT_CREATE,
    update_fields=VAULT_UPDATE,
)
BY_VAULT_OPS = rest.Ops(prefix=vs.SECRET_PREFIX, list_key="secrets", list_page=list_vault_secrets)
SECRET_OPS = rest.Ops(
    prefix=vs.SECRET_PREFIX,
    list_key="secrets",
    create=create_secret,
    get=get_secret,
    list_page=list_secrets,
    update=update_secret,
    delete=delete_secret,
    create_fields=SECRET_CREATE,
    update_fields=SECRET_UPDATE,
)
