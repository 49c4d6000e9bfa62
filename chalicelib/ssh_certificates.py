"""SSH certificate authorities and the certificates they sign: ``/ssh_certificate_authorities``,
``/ssh_host_certificates``, ``/ssh_user_certificates`` (docs/SSH.md, "SSH certificates").

Fields, as the hosted API and its official clients read them:
- a CA: id (``sshca_…``), uri, created_at, description, metadata, public_key (the CA's public
  key as an ``authorized_keys`` line, what ``TrustedUserCAKeys`` / ``@cert-authority`` take),
  key_type (``rsa``, ``ecdsa``, ``ed25519``);
- a certificate: id (``shcrt_…`` host, ``sucrt_…`` user), uri, created_at, description,
  metadata, public_key (the signed key, canonical), key_type (the signed key's), ssh_certificate_authority_id,
  principals, valid_after, valid_until, certificate (OpenSSH's ``…-cert-v01@openssh.com`` line,
  what ``ssh-keygen -L -f`` reads and ``ssh -o CertificateFile=`` presents); user
  certificates also critical_options and extensions.

Rules (where the hosted reference is silent, decided here):
- A CA's key is generated here and never leaves the service: ``private_key_type`` ``ed25519``
  (the default, also for ``""``), ``ecdsa`` with ``elliptic_curve`` ``p256`` (default),
  ``p384`` or ``p521``, ``rsa`` with ``key_size`` 2048 or 4096 (default 4096: the hosted
  reference's two sizes). A size with another type, or a curve without ecdsa: 400. The private
  key is stored sealed (chalicelib.core.keywrap, as TLS certificates' keys: KMS or the local
  master key; context account + CA id) and no call returns it. At most MAX_CAS per account
  (409). PATCH takes description and metadata.
- Deleting a CA is allowed while certificates it signed exist: their records stay (listed,
  readable, deletable) but nothing signed by it authenticates any more (the edge's lookup of
  the CA key goes with the CA, in the same transaction).
- A certificate: ``ssh_certificate_authority_id`` a CA of the account (400 ERR_NGROK_1949
  otherwise); ``public_key`` one ``authorized_keys`` line (chalicelib.core.ssh_keys: absent or
  empty 400 ERR_NGROK_1952; a type that cannot be certified, e.g. ``ssh-dss``, 400
  ERR_NGROK_1950; otherwise refused 400 naming the field); ``principals`` at most
  MAX_PRINCIPALS of 1–255 printable ASCII bytes without commas (none: valid for every
  user/host, as the hosted reference warns); ``valid_after`` / ``valid_until`` RFC 3339 (``""``
  or absent: now / now + DEFAULT_USER_VALIDITY for users, DEFAULT_HOST_VALIDITY for hosts),
  ``valid_until`` after ``valid_after`` and at most MAX_VALIDITY later (a past ``valid_until``
  is accepted: such a certificate is simply expired). User certificates:
  ``critical_options`` only ``force-command`` (≤ 1024 bytes), ``source-address`` (a comma list
  of at most 32 CIDRs or addresses) and ``verify-required`` (value ``""``): OpenSSH refuses a
  certificate with any other critical option, so it is refused here (400) instead of issued
  unusable; ``extensions`` at most 32 names of ≤ 64 bytes with values ≤ 1024 bytes, default
  ``{"permit-pty": "", "permit-user-rc": ""}`` when absent or empty (the hosted default; the
  official clients always send ``{}``; the SSH gateway needs
  ``permit-port-forwarding``). The certificate's key id is the certificate's own id, its serial
  64 random bits. At most MAX_CERTIFICATES host and MAX_CERTIFICATES user certificates per
  account (409). PATCH takes description and metadata; DELETE of a user certificate revokes it
  at the edge (the gateway reads it at authentication and every EDGE_CHECK_SECONDS).
- Signing uses ``cryptography``'s SSHCertificateBuilder, imported on first use: the API's
  Lambda gets it from the layer it shares with the ACME worker (scripts/deploy_stack.py), so
  no other route loads it at cold start.

Store calls: CA create one Query (the count) + one TransactWriteItems (the CA and the lookup
``U#ssh_ca_key#<sha256 of its blob>`` the edge reads); certificate create one Query (the
count), one GetItem (the CA, its sealed key opened) + one PutItem; GET one GetItem; list one
Query; PATCH one UpdateItem; DELETE a CA one GetItem + one TransactWriteItems, a certificate
one GetItem + one DeleteItem.
"""

import ipaddress
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import rest, validation, web
from chalicelib.core import errors, ids, keys, keywrap, ssh_keys, store
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

CA_COLLECTION = keys.SSH_CA_COLLECTION
HOST_COLLECTION = keys.SSH_HOST_CERT_COLLECTION
USER_COLLECTION = keys.SSH_USER_CERT_COLLECTION
CA_PREFIX = ids.PREFIXES["ssh_certificate_authority"]
HOST_PREFIX = ids.PREFIXES["ssh_host_certificate"]
USER_PREFIX = ids.PREFIXES["ssh_user_certificate"]

MAX_CAS = 10
MAX_CERTIFICATES = 100  # host certificates per account; the same for user certificates
MAX_PRINCIPALS = 64
MAX_PRINCIPAL_BYTES = 255
MAX_EXTENSIONS = 32
MAX_EXTENSION_NAME_BYTES = 64
MAX_OPTION_VALUE_BYTES = 1024
MAX_SOURCE_ADDRESSES = 32
DEFAULT_USER_VALIDITY = timedelta(hours=24)
DEFAULT_HOST_VALIDITY = timedelta(days=365)
MAX_VALIDITY = timedelta(days=5 * 365)
RSA_SIZES = (2048, 4096)
CURVES = ("p256", "p384", "p521")
DEFAULT_EXTENSIONS = {"permit-pty": "", "permit-user-rc": ""}
CRITICAL_OPTIONS = ("force-command", "source-address", "verify-required")

# a public key's ssh type -> key_type as the API names it
_KEY_TYPES = {ssh_keys.ED25519: "ed25519", ssh_keys.RSA: "rsa"}
_KEY_TYPES.update({f"ecdsa-sha2-{c}": "ecdsa" for c in ssh_keys.CURVES})
_CERTIFIABLE_ELSEWHERE = ("ssh-dss", "sk-", "-cert-v01@openssh.com")


# ---- certificate authorities -----------------------------------------------------------------
def _check_type(name: str, value: str) -> str:
    value = value.strip().lower()
    if value not in ("", "ed25519", "ecdsa", "rsa"):
        raise errors.InvalidField(
            f"Field '{name}' must be one of rsa, ecdsa, ed25519", details={"field": name}
        )
    return value or "ed25519"


def _check_curve(name: str, value: str) -> str:
    value = value.strip().lower()
    if value not in ("", *CURVES):
        raise errors.InvalidField(
            f"Field '{name}' must be one of {', '.join(CURVES)}", details={"field": name}
        )
    return value


CA_CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("private_key_type", "string", check=_check_type),
    Field("elliptic_curve", "string", check=_check_curve),
    Field("key_size", "integer"),
]
CA_UPDATE_FIELDS = [DESCRIPTION, METADATA]
CA_PATH = "/ssh_certificate_authorities"


def _key_context(account_id: str, ca_id: str) -> Dict[str, str]:
    return {"account": account_id, "ssh_certificate_authority": ca_id}


def _generate(key_type: str, curve: str, size: int) -> Tuple[bytes, str]:
    """(private key as OpenSSH PEM, public key line) of a new CA key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    key: Any
    if key_type == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=size)
    elif key_type == "ecdsa":
        curve_class = {"p256": ec.SECP256R1, "p384": ec.SECP384R1, "p521": ec.SECP521R1}[curve]
        key = ec.generate_private_key(curve_class())
    else:
        key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode("ascii")


def _ca_shape(fields: Dict[str, Any]) -> Tuple[str, str, int]:
    key_type = fields.get("private_key_type") or "ed25519"
    curve = fields.get("elliptic_curve") or ""
    size = fields.get("key_size") or 0
    if key_type == "rsa":
        size = size or 4096
        if size not in RSA_SIZES:
            raise errors.InvalidField(
                "Field 'key_size' must be 2048 or 4096 for an rsa key",
                details={"field": "key_size"},
            )
    elif size:
        raise errors.InvalidField(
            "Field 'key_size' is only for private_key_type rsa", details={"field": "key_size"}
        )
    if key_type == "ecdsa":
        curve = curve or "p256"
    elif curve:
        raise errors.InvalidField(
            "Field 'elliptic_curve' is only for private_key_type ecdsa",
            details={"field": "elliptic_curve"},
        )
    return key_type, curve, size


def _require_room(account_id: str, collection: str, limit: int, what: str) -> None:
    items, _ = store.query_page(store.collection_pk(account_id, collection), limit)
    if len(items) >= limit:
        raise errors.Conflict(
            f"This account has {limit} {what}, the most it may have; delete one first"
        )


def render_ca(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, CA_PATH, item),
        "public_key": data["public_key"],
        "key_type": data["key_type"],
    }


def create_ca(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    key_type, curve, size = _ca_shape(fields)
    _require_room(c.account_id, CA_COLLECTION, MAX_CAS, "SSH certificate authorities")
    ca_id = ids.new_id(CA_PREFIX)
    private, public = _generate(key_type, curve, size)
    _, blob = ssh_keys.parse(public)
    item = store.new_item(
        store.collection_pk(c.account_id, CA_COLLECTION),
        ca_id,
        kind=CA_COLLECTION,
        account_id=c.account_id,
        data={
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "public_key": public,
            "key_type": key_type,
            "digest": ssh_keys.digest(blob),
            "private_key": keywrap.seal(private, _key_context(c.account_id, ca_id)),
            "created_at": validation.now_rfc3339(),
        },
    )
    store.commit(
        [
            store.put_new(item),
            store.unique(
                keys.SSH_CA_KEY_NAMESPACE,
                ssh_keys.digest(blob),
                {
                    "account_id": c.account_id,
                    "ssh_certificate_authority_id": ca_id,
                    "digest": ssh_keys.digest(blob),
                },
                errors.Conflict("This CA key is already registered"),
            ),
        ]
    )
    return render_ca(c, item)


def _get_ca(account_id: str, ca_id: str) -> store.Item:
    return store.get_by_id(
        account_id, CA_COLLECTION, CA_PREFIX, ca_id, "SSH certificate authority"
    )


def get_ca(c: Ctx, ca_id: str) -> Dict[str, Any]:
    return render_ca(c, _get_ca(c.account_id, ca_id))


def list_cas(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, CA_COLLECTION, limit, before_id, render_ca)


def update_ca(c: Ctx, ca_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    return web.updated(
        c, CA_COLLECTION, CA_PREFIX, ca_id, fields, "SSH certificate authority", render_ca
    )


@store.retrying
def delete_ca(c: Ctx, ca_id: str) -> None:
    """One GetItem (its key's digest), then one transaction: the CA and the edge's lookup."""
    item = _get_ca(c.account_id, ca_id)
    store.commit(
        [store.delete(item), store.release(keys.SSH_CA_KEY_NAMESPACE, item.data["digest"])]
    )


# ---- certificates ----------------------------------------------------------------------------
def _check_principals(name: str, value: List[str]) -> List[str]:
    if len(value) > MAX_PRINCIPALS:
        raise errors.InvalidField(
            f"Field '{name}' has {len(value)} entries; the limit is {MAX_PRINCIPALS}",
            details={"field": name},
        )
    for index, principal in enumerate(value):
        raw = principal.encode("utf-8")
        if not 1 <= len(raw) <= MAX_PRINCIPAL_BYTES or not all(0x21 <= b <= 0x7E for b in raw):
            raise errors.InvalidField(
                f"Field '{name}[{index}]' must be 1 to {MAX_PRINCIPAL_BYTES} printable ASCII "
                "characters without spaces",
                details={"field": name},
            )
        if "," in principal:
            raise errors.InvalidField(
                f"Field '{name}[{index}]' must not contain ',' (OpenSSH separates principals "
                "with it)",
                details={"field": name},
            )
    return value


def _check_time(name: str, value: str) -> Optional[datetime]:
    if value == "":
        return None
    text = value.strip()
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise errors.InvalidField(
            f"Field '{name}' must be an RFC 3339 timestamp (e.g. 2026-01-02T15:04:05Z)",
            details={"field": name},
        ) from None
    if when.tzinfo is None:
        raise errors.InvalidField(
            f"Field '{name}' must name its time zone (Z or an offset)", details={"field": name}
        )
    return when.astimezone(timezone.utc).replace(microsecond=0)


def _check_critical(name: str, value: Dict[str, str]) -> Dict[str, str]:
    for option, text in value.items():
        if option not in CRITICAL_OPTIONS:
            raise errors.InvalidField(
                f"Field '{name}' has '{option[:64]}': the critical options are "
                f"{', '.join(CRITICAL_OPTIONS)} (OpenSSH refuses a certificate with any other)",
                details={"field": name},
            )
        if option == "verify-required" and text:
            raise errors.InvalidField(
                f"Field '{name}.verify-required' takes no value", details={"field": name}
            )
        if option == "source-address":
            entries = [e.strip() for e in text.split(",")]
            if not text.strip() or len(entries) > MAX_SOURCE_ADDRESSES:
                raise errors.InvalidField(
                    f"Field '{name}.source-address' must be 1 to {MAX_SOURCE_ADDRESSES} "
                    "comma-separated addresses or CIDRs",
                    details={"field": name},
                )
            for entry in entries:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    raise errors.InvalidField(
                        f"Field '{name}.source-address' has '{entry[:64]}', not an address or "
                        "CIDR",
                        details={"field": name},
                    ) from None
    return value


def _check_extensions(name: str, value: Dict[str, str]) -> Dict[str, str]:
    for extension in value:
        size = len(extension.encode("utf-8"))
        if not 1 <= size <= MAX_EXTENSION_NAME_BYTES:
            raise errors.InvalidField(
                f"Field '{name}' names must be 1 to {MAX_EXTENSION_NAME_BYTES} bytes",
                details={"field": name},
            )
    return value


def _cert_fields(user: bool) -> List[Field]:
    fields = [
        DESCRIPTION,
        METADATA,
        Field("ssh_certificate_authority_id", "string"),
        Field("public_key", "string"),
        Field("principals", "string_list", check=_check_principals),
        Field("valid_after", "string", max_bytes=64, check=_check_time),
        Field("valid_until", "string", max_bytes=64, check=_check_time),
    ]
    if user:
        fields += [
            Field(
                "critical_options",
                "string_map",
                max_items=len(CRITICAL_OPTIONS),
                max_bytes=MAX_OPTION_VALUE_BYTES,
                check=_check_critical,
            ),
            Field(
                "extensions",
                "string_map",
                max_items=MAX_EXTENSIONS,
                max_bytes=MAX_OPTION_VALUE_BYTES,
                check=_check_extensions,
            ),
        ]
    return fields


HOST_CREATE_FIELDS = _cert_fields(user=False)
USER_CREATE_FIELDS = _cert_fields(user=True)
CERT_UPDATE_FIELDS = [DESCRIPTION, METADATA]


def _signed_key(value: Optional[str]) -> Tuple[str, bytes, str]:
    """(canonical line, blob, key_type) of the key to certify, or the hosted 1952 / 1950."""
    if value is None or not value.strip():
        raise errors.SshCertificateKeyMissing(
            "The public key to sign in the certificate is required, but no public key was "
            "specified.",
            details={"field": "public_key"},
        )
    first = value.split(None, 1)[0]
    if first.startswith(_CERTIFIABLE_ELSEWHERE) or first.endswith(_CERTIFIABLE_ELSEWHERE):
        raise errors.SshCertificateKeyType(
            f"Certificates are not supported for public keys of type {first[:64]}.",
            details={"field": "public_key"},
        )
    try:
        line, blob = ssh_keys.parse(value)
    except ssh_keys.InvalidKey as exc:
        raise errors.InvalidField(
            f"Field 'public_key' is not a public key this service certifies: {exc}",
            details={"field": "public_key"},
        ) from None
    return line, blob, _KEY_TYPES[line.split(None, 1)[0]]


def _validity(fields: Dict[str, Any], default: timedelta) -> Tuple[datetime, datetime]:
    now = datetime.now(timezone.utc).replace(microsecond=0)
    after = fields.get("valid_after") or now
    until = fields.get("valid_until") or max(after, now) + default
    if until <= after:
        raise errors.InvalidField(
            "Field 'valid_until' must be after valid_after", details={"field": "valid_until"}
        )
    if until - after > MAX_VALIDITY:
        raise errors.InvalidField(
            f"Field 'valid_until' is more than {MAX_VALIDITY.days} days after valid_after",
            details={"field": "valid_until"},
        )
    return after, until


def _ca_for_signing(account_id: str, ca_id: Optional[str]) -> store.Item:
    unknown = errors.SshCertificateAuthorityUnknown(
        f"The SSH CA '{(ca_id or '')[:64]}' does not exist.",
        details={"field": "ssh_certificate_authority_id"},
    )
    if not ca_id or not ids.is_valid(ca_id, CA_PREFIX):
        raise unknown
    item = store.get(store.collection_pk(account_id, CA_COLLECTION), ca_id)
    if item is None:
        raise unknown
    return item


def _sign(
    ca: store.Item,
    line: str,
    cert_id: str,
    user: bool,
    principals: List[str],
    after: datetime,
    until: datetime,
    critical: Dict[str, str],
    extensions: Dict[str, str],
) -> str:
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_ssh_private_key(
        keywrap.open_sealed(ca.data["private_key"], _key_context(ca.account_id, ca.sk)), None
    )
    builder = (
        serialization.SSHCertificateBuilder()
        .public_key(serialization.load_ssh_public_key(line.encode("ascii")))  # type: ignore[arg-type]
        .serial(secrets.randbits(64))
        .type(
            serialization.SSHCertificateType.USER
            if user
            else serialization.SSHCertificateType.HOST
        )
        .key_id(cert_id.encode("ascii"))
        .valid_after(int(after.timestamp()))
        .valid_before(int(until.timestamp()))
    )
    builder = (
        builder.valid_principals([p.encode("utf-8") for p in principals])
        if principals
        else builder.valid_for_all_principals()
    )
    for name, value in sorted(critical.items()):
        builder = builder.add_critical_option(name.encode("utf-8"), value.encode("utf-8"))
    for name, value in sorted(extensions.items()):
        builder = builder.add_extension(name.encode("utf-8"), value.encode("utf-8"))
    cert = builder.sign(private)  # type: ignore[arg-type]
    return cert.public_bytes().decode("ascii")


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Certificates:
    """Host or user certificates (the two collections differ in a few fields)."""

    def __init__(self, user: bool):
        self.user = user
        self.collection = USER_COLLECTION if user else HOST_COLLECTION
        self.prefix = USER_PREFIX if user else HOST_PREFIX
        self.path = "/ssh_user_certificates" if user else "/ssh_host_certificates"
        self.what = "SSH user certificate" if user else "SSH host certificate"
        self.default = DEFAULT_USER_VALIDITY if user else DEFAULT_HOST_VALIDITY

    def render(self, c: Ctx, item: store.Item) -> Dict[str, Any]:
        data = item.data
        out = {
            **web.resource_fields(c, self.path, item),
            "public_key": data["public_key"],
            "key_type": data["key_type"],
            "ssh_certificate_authority_id": data["ssh_certificate_authority_id"],
            "principals": list(data.get("principals") or []),
        }
        if self.user:
            out["critical_options"] = dict(data.get("critical_options") or {})
            out["extensions"] = dict(data.get("extensions") or {})
        out.update(
            valid_after=data["valid_after"],
            valid_until=data["valid_until"],
            certificate=data["certificate"],
        )
        return out

    def create(self, c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
        line, _, key_type = _signed_key(fields.get("public_key"))
        after, until = _validity(fields, self.default)
        ca = _ca_for_signing(c.account_id, fields.get("ssh_certificate_authority_id"))
        _require_room(c.account_id, self.collection, MAX_CERTIFICATES, self.what + "s")
        principals = list(fields.get("principals") or [])
        critical = dict(fields.get("critical_options") or {}) if self.user else {}
        # absent or empty: the hosted default (the official clients always send {})
        extensions = dict(fields.get("extensions") or DEFAULT_EXTENSIONS) if self.user else {}
        cert_id = ids.new_id(self.prefix)
        certificate = _sign(
            ca, line, cert_id, self.user, principals, after, until, critical, extensions
        )
        data: Dict[str, Any] = {
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "public_key": line,
            "key_type": key_type,
            "ssh_certificate_authority_id": ca.sk,
            "principals": principals,
            "valid_after": _rfc3339(after),
            "valid_until": _rfc3339(until),
            "certificate": certificate,
            "created_at": validation.now_rfc3339(),
        }
        if self.user:
            data.update(
                critical_options=critical,
                extensions=extensions,
                owner_id=c.principal.id,
                owner_kind=c.principal.kind,
            )
        item = store.new_item(
            store.collection_pk(c.account_id, self.collection),
            cert_id,
            kind=self.collection,
            account_id=c.account_id,
            data=data,
        )
        store.commit([store.put_new(item)])
        return self.render(c, item)

    def get(self, c: Ctx, cert_id: str) -> Dict[str, Any]:
        return self.render(
            c, store.get_by_id(c.account_id, self.collection, self.prefix, cert_id, self.what)
        )

    def list_page(
        self, c: Ctx, limit: int, before_id: Optional[str]
    ) -> Tuple[List[Dict[str, Any]], bool]:
        return web.rendered_page(c, self.collection, limit, before_id, self.render)

    def update(self, c: Ctx, cert_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
        return web.updated(
            c, self.collection, self.prefix, cert_id, fields, self.what, self.render
        )

    def delete(self, c: Ctx, cert_id: str) -> None:
        missing = errors.NotFound(f"No {self.what} with id '{cert_id}' exists")
        if not ids.is_valid(cert_id, self.prefix):
            raise missing
        item = store.get(store.collection_pk(c.account_id, self.collection), cert_id)
        if item is None:
            raise missing
        store.commit([store.delete(item, error=missing)])


HOST = _Certificates(user=False)
USER = _Certificates(user=True)


CA_OPS = rest.Ops(
    prefix=CA_PREFIX,
    list_key="ssh_certificate_authorities",
    create=create_ca,
    get=get_ca,
    list_page=list_cas,
    update=update_ca,
    delete=delete_ca,
    create_fields=CA_CREATE_FIELDS,
    update_fields=CA_UPDATE_FIELDS,
)


def _ops(certs: _Certificates, list_key: str, create_fields: List[Field]) -> rest.Ops:
    return rest.Ops(
        prefix=certs.prefix,
        list_key=list_key,
        create=certs.create,
        get=certs.get,
        list_page=certs.list_page,
        update=certs.update,
        delete=certs.delete,
        create_fields=create_fields,
        update_fields=CERT_UPDATE_FIELDS,
    )


HOST_OPS = _ops(HOST, "ssh_host_certificates", HOST_CREATE_FIELDS)
USER_OPS = _ops(USER, "ssh_user_certificates", USER_CREATE_FIELDS)
