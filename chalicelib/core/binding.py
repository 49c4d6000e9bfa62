"""Who may bind what: the rules the edge enforces on agent sessions (one implementation).

The edge (``edge/``) calls these when an agent authenticates and binds; they read the same
table as the API. Each refusal is a :class:`Refused` carrying the hosted service's documented
``ERR_NGROK_…`` code, which the edge hands to the agent SDK as its error.

| situation                                                    | code              |
|--------------------------------------------------------------|-------------------|
| authtoken that cannot be a credential token (empty, bad form) | ERR_NGROK_105     |
| unknown or deleted credential, owner gone                    | ERR_NGROK_107     |
| owner is a deactivated bot user                              | ERR_NGROK_107     |
| domain or address outside the credential's ACL               | ERR_NGROK_399 (*) |
| labels outside the credential's ACL                          | ERR_NGROK_399     |
| domain reserved by another account                           | ERR_NGROK_320     |
| custom domain nobody reserved (not under the base domain)    | ERR_NGROK_7117    |
| TCP address not reserved by the account                      | ERR_NGROK_7113    |
| SSH public key of no SSH credential (the SSH gateway)        | ERR_NGROK_1100    |

(*) The hosted docs define ERR_NGROK_399 for labels the ACL refuses; they name no separate
code for domains and addresses, so the same code is used for every ACL refusal.

Domain ownership: a domain may be bound by an account when it reserved it exactly, or reserved
a wildcard that covers it (``*.example.com`` covers ``a.example.com`` and ``b.a.example.com``),
or when it is a name under the service's base domain that no other account reserved. A name
under the base domain is otherwise free to any account (first come, first served, one endpoint
per hostname: that is the edge's claim, see chalicelib.core.online).
"""

import re
import secrets
import string
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from chalicelib.core import acl, edge_errors, hostnames, ids, keys, reservations, ssh_keys, store
from chalicelib.core.config import get_settings

_TOKEN_FORM = re.compile(r"^[A-Za-z0-9_\-]{16,256}$")
_LABEL_ALPHABET = string.ascii_lowercase + string.digits


class Refused(Exception):
    """A refusal with the hosted service's error code; ``str()`` is the message."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Grant:
    """What an authtoken is allowed: its credential, account, owner and ACL (as read)."""

    account_id: str
    credential_id: str
    owner_id: str
    owner_kind: str
    acl: List[str] = field(default_factory=list)


def authenticate(token: str) -> Grant:
    """The grant of an agent's authtoken, read afresh (the credential and its owner), or Refused.

    One GetItem (the token's digest lookup) and one BatchGetItem (the credential and its
    owner: :func:`recheck`). Called at Auth and
    again periodically by the edge so that deleting a credential or deactivating its bot
    ends live sessions."""
    if not isinstance(token, str) or not _TOKEN_FORM.match(token):
        raise Refused(
            edge_errors.AUTHTOKEN_MALFORMED,
            "The authtoken you specified does not look like a proper authtoken credential.",
        )
    data = keys.lookup_secret(keys.TOKEN_NAMESPACE, token)
    if data is None:
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            "The authtoken you specified is properly formed, but "
            "it is invalid: no such credential (deleted or never "
            "issued).",
        )
    return recheck(data["account_id"], data["credential_id"], data["owner_id"], data["owner_kind"])


def authenticate_ssh_key(blob: bytes) -> Grant:
    """The grant of the SSH credential whose public key is ``blob`` (the key's wire blob, as
    an SSH client sends it), read afresh, or Refused: one GetItem (the key's lookup) and one
    BatchGetItem (the SSH credential and its owner), as :func:`authenticate`. The edge's SSH gateway asks this for
    each key a client offers, before the client proves it holds the private key."""
    data = keys.lookup_ssh_key(blob)
    if data is None:
        raise Refused(
            edge_errors.SSH_KEY_UNKNOWN,
            f"The public key {ssh_keys.fingerprint(blob)} is not the key of an SSH "
            "credential. Add your public key with POST /ssh_credentials, then connect with "
            "its private key (ssh -i).",
        )
    return recheck(
        data["account_id"], data["ssh_credential_id"], data["owner_id"], data["owner_kind"]
    )


def authenticate_ssh_certificate(ca_blob: bytes, certificate_id: str) -> Grant:
    """The grant of an SSH user certificate this service issued (its key id is its id,
    ``sucrt_…``) and signed with the CA whose public key is ``ca_blob``, or Refused: the CA's
    lookup (its account), then as :func:`recheck` (the certificate, its CA, its issuer).
    The caller checked the certificate itself first (signature, validity, principals)."""
    data = keys.lookup_ssh_ca_key(ca_blob)
    if data is None:
        raise Refused(
            edge_errors.SSH_KEY_UNKNOWN,
            f"The SSH certificate is signed by {ssh_keys.fingerprint(ca_blob)}, which is not "
            "the key of an SSH certificate authority of any account here (deleted, or never "
            "created with POST /ssh_certificate_authorities).",
        )
    if not ids.is_valid(certificate_id, ids.PREFIXES["ssh_user_certificate"]):
        raise Refused(
            edge_errors.SSH_KEY_UNKNOWN,
            f"The SSH certificate's key id '{certificate_id[:64]}' is not an SSH user "
            "certificate of this service; sign the key with POST /ssh_user_certificates.",
        )
    return _certificate_grant(
        data["account_id"], certificate_id, data["ssh_certificate_authority_id"]
    )


def _certificate_grant(account_id: str, certificate_id: str, ca_id: Optional[str]) -> Grant:
    """An SSH user certificate's grant: the certificate item (deleted: revoked), its CA (of
    the same account, still there), still valid, its issuer usable. Three GetItems."""
    item = store.get(
        store.collection_pk(account_id, keys.SSH_USER_CERT_COLLECTION), certificate_id
    )
    if item is None or (ca_id is not None and item.data["ssh_certificate_authority_id"] != ca_id):
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The SSH user certificate {certificate_id} has been deleted (revoked) and is no "
            "longer valid.",
        )
    ca_id = item.data["ssh_certificate_authority_id"]
    if store.get(store.collection_pk(account_id, keys.SSH_CA_COLLECTION), ca_id) is None:
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The SSH certificate authority {ca_id} that signed the SSH user certificate "
            f"{certificate_id} has been deleted; nothing it signed is valid any more.",
        )
    until = item.data["valid_until"]
    if until <= time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()):
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The SSH user certificate {certificate_id} expired at {until}.",
        )
    owner, why = keys.usable_owner(
        {
            "account_id": account_id,
            "owner_id": item.data["owner_id"],
            "owner_kind": item.data["owner_kind"],
        }
    )
    if owner is None:
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The SSH user certificate {certificate_id} cannot be used: {why}.",
        )
    return Grant(
        account_id=account_id,
        credential_id=certificate_id,
        owner_id=item.data["owner_id"],
        owner_kind=item.data["owner_kind"],
        acl=[],
    )


def recheck(account_id: str, credential_id: str, owner_id: str, owner_kind: str) -> Grant:
    """The grant of a known credential (an authtoken's, an SSH credential's or an SSH user
    certificate's: told by its id), read afresh, or Refused (deleted, owner unusable): one
    BatchGetItem of the credential and its owner."""
    if ids.is_valid(credential_id, ids.PREFIXES["ssh_user_certificate"]):
        return _certificate_grant(account_id, credential_id, None)
    wanted = _recheck_keys(account_id, credential_id, owner_id, owner_kind)
    return _grant_read(account_id, credential_id, owner_id, owner_kind, store.get_many(wanted))


# A recheck of many credentials reads this many at most in one BatchGetItem (two keys each:
# the credential and its owner, within the call's 100).
RECHECK_BATCH = 50


def recheck_many(grants: Sequence[Grant]) -> List[Union[Grant, Refused]]:
    """:func:`recheck` of each grant (the edge's periodic check of the credentials in use),
    in order: the grant read afresh, or the Refused that ends its sessions. The credentials
    and their owners are read RECHECK_BATCH at a time, one BatchGetItem each (an SSH user
    certificate's grant as :func:`recheck` reads it). A store failure raises (no grant is
    refused for it)."""
    out: List[Union[Grant, Refused]] = list(grants)
    keyed = []
    for at, grant in enumerate(grants):
        if ids.is_valid(grant.credential_id, ids.PREFIXES["ssh_user_certificate"]):
            try:
                out[at] = _certificate_grant(grant.account_id, grant.credential_id, None)
            except Refused as exc:
                out[at] = exc
        else:
            keyed.append(at)
    for first in range(0, len(keyed), RECHECK_BATCH):
        batch = keyed[first : first + RECHECK_BATCH]
        found = store.get_many([key for at in batch for key in _recheck_keys(*_named(grants[at]))])
        for at in batch:
            try:
                out[at] = _grant_read(*_named(grants[at]), found)
            except Refused as exc:
                out[at] = exc
    return out


def _named(grant: Grant) -> Tuple[str, str, str, str]:
    return grant.account_id, grant.credential_id, grant.owner_id, grant.owner_kind


def _recheck_keys(
    account_id: str, credential_id: str, owner_id: str, owner_kind: str
) -> List[Tuple[str, str]]:
    """The keys a recheck reads: the credential's (an authtoken's or an SSH credential's: told
    by its id) and its owner's."""
    ssh = ids.is_valid(credential_id, ids.PREFIXES["ssh_credential"])
    collection = keys.SSH_CREDENTIAL_COLLECTION if ssh else keys.CREDENTIAL_COLLECTION
    return [
        (store.collection_pk(account_id, collection), credential_id),
        keys.owner_key(account_id, owner_id, owner_kind),
    ]


def _grant_read(
    account_id: str, credential_id: str, owner_id: str, owner_kind: str, found: Dict[Any, Any]
) -> Grant:
    """The grant from the items read (``found``: by key), or Refused."""
    credential_key, owner_key = _recheck_keys(account_id, credential_id, owner_id, owner_kind)
    ssh = ids.is_valid(credential_id, ids.PREFIXES["ssh_credential"])
    item = found.get(credential_key)
    what = "SSH credential" if ssh else "authtoken credential"
    if item is None:
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The {what} {credential_id} has been deleted and is no longer valid.",
        )
    owner, why = keys.owner_usable(found.get(owner_key), owner_kind)
    if owner is None:
        raise Refused(
            edge_errors.AUTHTOKEN_INVALID,
            f"The {what} {credential_id} cannot be used: {why}.",
        )
    return Grant(
        account_id=account_id,
        credential_id=credential_id,
        owner_id=owner_id,
        owner_kind=owner_kind,
        acl=list(item.data.get("acl") or []),
    )


def _acl_refused(grant: Grant, what: str, value: str) -> Refused:
    return Refused(
        edge_errors.ACL_REFUSED,
        f"The credential ACL policy does not permit binding this "
        f"{what}. Credential ID: {grant.credential_id} "
        f"{what.capitalize()}: {value}",
    )


def check_domain(grant: Grant, domain: str) -> str:
    """The canonical domain ``grant`` may serve, or Refused (ACL, ownership)."""
    try:
        name = hostnames.parse(domain, min_labels=2)
    except hostnames.InvalidHostname as exc:
        raise Refused(edge_errors.INVALID_OPTION, f"Invalid domain '{domain}': {exc}") from None
    if not acl.may_bind(grant.acl, domain=name):
        raise _acl_refused(grant, "domain", name)
    reservation = reservations.domain_reservation(name)
    other = _reserved_for_other(grant, name)
    if (
        reservation is not None
        and reservation.get("account_id") != grant.account_id
        or reservations.bind_conflict(grant.account_id, name) is not None
    ):
        raise other
    if reservation is not None:
        return name
    base = get_settings().base_domain
    if hostnames.is_within(name, base) and name.count(".") == base.count(".") + 1:
        return name  # a free name: one label under the base domain
    raise Refused(
        edge_errors.DOMAIN_NOT_RESERVED,
        f"The domain {name} is not reserved. Reserve it through "
        "POST /reserved_domains, or use a name of one label "
        f"under {base}.",
    )


def _reserved_for_other(grant: Grant, name: str) -> Refused:
    """ERR_NGROK_320: ``name`` is another account's (reserved exactly, under a wildcard of
    theirs, under a name of theirs, or above one: chalicelib.core.reservations)."""
    return Refused(
        edge_errors.DOMAIN_OF_ANOTHER_ACCOUNT,
        "This domain is reserved for another account. Failed to "
        f"create an endpoint with the domain {name} for the "
        f"account {grant.account_id}.",
    )


def check_labels(grant: Grant, labels: Mapping[str, str]) -> Dict[str, str]:
    if not labels:
        raise Refused(edge_errors.INVALID_OPTION, "A labeled tunnel needs at least one label.")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or not value:
            raise Refused(
                edge_errors.INVALID_OPTION, "Labels are non-empty string keys and values."
            )
        if not acl.may_bind(grant.acl, labels={key: value}):
            raise _acl_refused(grant, "label", f"{key}={value}")
    return dict(labels)


def check_address(grant: Grant, address: str, requested: bool = False) -> str:
    """``host:port`` the grant may bind: allowed by the ACL, and not reserved by another
    account (/reserved_addrs); an address the agent asked for by name must be reserved by
    the grant's account (generated ones are free ports nobody reserved)."""
    if not acl.may_bind(grant.acl, address=address):
        raise _acl_refused(grant, "address", address)
    reservation = reservations.addr_reservation(address)
    if reservation is not None and reservation["account_id"] != grant.account_id:
        raise Refused(
            edge_errors.ADDRESS_NOT_RESERVED,
            f"The address {address} is reserved for another account.",
        )
    if requested and reservation is None:
        raise Refused(
            edge_errors.ADDRESS_NOT_RESERVED,
            f"The address {address} is not reserved. Reserve one through POST /reserved_addrs.",
        )
    return address


def generated_domain() -> str:
    """A fresh random name under the base domain (the edge claims it before use)."""
    label = "".join(secrets.choice(_LABEL_ALPHABET) for _ in range(12))
    return f"{label}.{get_settings().base_domain}"


def acl_allows_domain(grant: Grant, domain: str) -> bool:
    return acl.may_bind(grant.acl, domain=domain)
