"""SSH credentials (the public keys the edge's SSH gateway authenticates): ``/ssh_credentials``.

Fields, as the hosted API and its official clients read them: id (``sshcr_…``), uri,
created_at, description, metadata, public_key, acl (``[]`` when none), owner_id.

Rules (where the spec is silent, decided here):
- ``public_key`` is one OpenSSH ``authorized_keys`` line, checked by chalicelib.core.ssh_keys
  (types, sizes, canonical blob; 400 ERR_NGROK_612 saying why) and stored canonical. Absent,
  null or empty: 400 ERR_NGROK_611. It is set at creation only (PATCH does not accept it).
- One key, one credential, service-wide: the edge finds the credential by the key a client
  authenticates with, so a key another credential of the account has is 409 ERR_NGROK_609,
  one of another account's 409 ERR_NGROK_610 (the hosted codes and messages). The lookup item
  ``U#ssh_public_key#<sha256 of the key's blob>`` (account, owner, credential) is written in
  the credential's transaction, conditioned on not existing; its condition failure names
  the holder, so telling 609 from 610 costs no read.
- ``acl``: the credentials' grammar (chalicelib.core.acl; at most 100 rules of 512 bytes),
  stored canonical; the edge applies it to what the SSH session binds as it does to an
  authtoken's.
- ``owner_id``: as credentials (chalicelib.credentials): the caller by default; only admins
  may name another user or bot of the account (403); set at creation only. A member or bot
  may update or delete only the SSH credentials it owns (403); every principal reads all.
  Deleting a bot deletes its SSH credentials with its API keys and credentials (the owner
  index, chalicelib.auth), and a deactivated bot's keys authenticate nothing.
- ``description`` ≤ 255 bytes, ``metadata`` ≤ 4096 bytes.

Store calls: POST one TransactWriteItems (credential, key lookup, owner index, owner check);
GET one GetItem; list one Query; PATCH one UpdateItem; DELETE one GetItem and one
TransactWriteItems.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import auth, web
from chalicelib.core import acl, errors, ids, keys, ssh_keys, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = keys.SSH_CREDENTIAL_COLLECTION
NAMESPACE = keys.SSH_KEY_NAMESPACE
PREFIX = ids.PREFIXES["ssh_credential"]
PATH = "/ssh_credentials"
LIST_KEY = "ssh_credentials"

ACL = Field("acl", "string_list", check=acl.check_field)
PUBLIC_KEY = Field("public_key", "string")

CREATE_FIELDS = [DESCRIPTION, METADATA, ACL, PUBLIC_KEY, Field("owner_id", "string")]
UPDATE_FIELDS = [DESCRIPTION, METADATA, ACL]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        "public_key": data["public_key"],
        "acl": list(data.get("acl") or []),
        "owner_id": data["owner_id"],
    }


def checked_key(value: Optional[str]) -> Tuple[str, bytes]:
    """(canonical line, blob) of a sent ``public_key``, or the hosted 611 / 612."""
    if value is None or not value.strip():
        raise errors.SshKeyMissing(
            "Public key is missing or empty.", details={"field": "public_key"}
        )
    try:
        return ssh_keys.parse(value)
    except ssh_keys.InvalidKey as exc:
        raise errors.SshKeyInvalid(
            f"Invalid public key '{_shown(value)}': {exc}", details={"field": "public_key"}
        ) from None


def _shown(value: str) -> str:
    text = " ".join(value.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _taken(account_id: str, line: str) -> Any:
    def explain(holder: Optional[store.Item]) -> Exception:
        if holder is not None and holder.account_id == account_id:
            return errors.SshKeyExists(
                f"The public key '{_shown(line)}' already exists on your account.",
                details={"field": "public_key"},
            )
        return errors.SshKeyOfAnotherAccount(
            f"The public key '{_shown(line)}' is already used in a different account. Remove "
            "it from the other account or generate a new SSH key pair (hint: use ssh-keygen).",
            details={"field": "public_key"},
        )

    return explain


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    line, blob = checked_key(fields.get("public_key"))
    owner_id, owner_kind = auth.new_owner(c, fields.get("owner_id"), "SSH credentials")
    item, _ = auth.create_secret(
        c.account_id,
        COLLECTION,
        NAMESPACE,
        owner_id,
        owner_kind,
        {
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "acl": fields.get("acl", []),
            "public_key": line,
        },
        hashed=ssh_keys.digest(blob),
        taken=_taken(c.account_id, line),
    )
    return render(c, item)


def _get(c: Ctx, credential_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, credential_id, "SSH credential")


def get(c: Ctx, credential_id: str) -> Dict[str, Any]:
    return render(c, _get(c, credential_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, credential_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (owner-conditioned for members and bots)."""
    return render(
        c,
        auth.update_owned(
            c, COLLECTION, PREFIX, credential_id, fields, "SSH credential", "SSH credentials"
        ),
    )


@store.retrying
def delete(c: Ctx, credential_id: str) -> None:
    """Reads first (1 GetItem: owner rule and digest), then one transaction (credential,
    key lookup, owner index entry). The edge ends live sessions of the key within its check
    (EDGE_CHECK_SECONDS)."""
    item = _get(c, credential_id)
    auth.require_owner_or_admin(c, item, "SSH credentials")
    store.commit(auth.secret_delete_ops(item, NAMESPACE))
