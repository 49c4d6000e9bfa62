"""Private keys at rest: envelope encryption of TLS certificates' keys (and the ACME account key).

Each sealed secret has its own random 256-bit data key. The data key encrypts the secret; the
data key itself is stored only wrapped:

- **AWS** (``TLS_KMS_KEY_ID`` set: a KMS key id, ARN or alias): the data key comes from KMS
  ``GenerateDataKey`` and is stored as the ``CiphertextBlob`` KMS returned; opening calls KMS
  ``Decrypt``. The encryption context (account and certificate id) is bound by KMS too, so a
  sealed key copied onto another certificate or account does not open.
- **Locally** (no ``TLS_KMS_KEY_ID``): the data key is wrapped with a master key kept in a
  file, ``TLS_KEY_FILE`` (default ``$DATA_DIR/tls-keys.secret``), created on first use with
  mode 0600 (exclusively: two processes creating it at once agree on one).

The cipher is built from the standard library (the API's Lambda package carries no
``cryptography``; docs/BENCHMARKS.md, "The deployment package"): HMAC-SHA256 as a
pseudo-random function in counter mode for the keystream, then HMAC-SHA256 over the context, nonce and ciphertext
(encrypt-then-MAC; separate encryption and MAC keys derived from the data key). A changed
byte anywhere, another context, or another master key makes :func:`open_sealed` raise
:class:`SealError`; nothing partial is returned.
"""

import base64
import hashlib
import hmac
import json
import os
import secrets
from typing import Any, Dict, Optional

ALG = "hmac-sha256-ctr+hmac-sha256"
KEY_BYTES = 32
NONCE_BYTES = 16
MAX_PLAINTEXT = 64 * 1024


class SealError(Exception):
    """A sealed secret that does not open (changed, another context or master key)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise SealError("sealed field is not a string")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SealError("sealed field is not base64") from None


def _aad(context: Dict[str, str]) -> bytes:
    return json.dumps(context, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _keystream_xor(key: bytes, nonce: bytes, data: bytes) -> bytes:
    out = bytearray()
    for counter in range((len(data) + 31) // 32):
        out += hmac.new(key, nonce + counter.to_bytes(8, "big"), hashlib.sha256).digest()
    return bytes(a ^ b for a, b in zip(data, out))


def _subkeys(key: bytes) -> tuple:
    return (
        hmac.new(key, b"tunnel-service keywrap enc", hashlib.sha256).digest(),
        hmac.new(key, b"tunnel-service keywrap mac", hashlib.sha256).digest(),
    )


def encrypt(key: bytes, plaintext: bytes, aad: bytes) -> Dict[str, str]:
    """AEAD encryption of ``plaintext`` under a 32-byte ``key``, bound to ``aad``."""
    if len(key) != KEY_BYTES:
        raise ValueError("key must be 32 bytes")
    enc, mac = _subkeys(key)
    nonce = secrets.token_bytes(NONCE_BYTES)
    ciphertext = _keystream_xor(enc, nonce, plaintext)
    tag = hmac.new(
        mac, len(aad).to_bytes(8, "big") + aad + nonce + ciphertext, hashlib.sha256
    ).digest()
    return {"nonce": _b64(nonce), "ciphertext": _b64(ciphertext), "tag": _b64(tag)}


def decrypt(key: bytes, box: Dict[str, Any], aad: bytes) -> bytes:
    enc, mac = _subkeys(key)
    nonce, ciphertext, tag = (_unb64(box.get(k)) for k in ("nonce", "ciphertext", "tag"))
    want = hmac.new(
        mac, len(aad).to_bytes(8, "big") + aad + nonce + ciphertext, hashlib.sha256
    ).digest()
    if not hmac.compare_digest(want, tag):
        raise SealError(
            "the sealed secret does not authenticate (changed, or another context or key)"
        )
    return _keystream_xor(enc, nonce, ciphertext)


# ---- where the master key lives -----------------------------------------------------------------
def kms_key_id() -> Optional[str]:
    return (os.environ.get("TLS_KMS_KEY_ID") or "").strip() or None


def key_file() -> str:
    explicit = (os.environ.get("TLS_KEY_FILE") or "").strip()
    if explicit:
        return explicit
    return os.path.join(os.environ.get("DATA_DIR") or ".data", "tls-keys.secret")


def master_key(create: bool) -> bytes:
    """The local master key (TLS_KEY_FILE), created on first use when ``create``; also the
    root the edge derives its sign-in cookie keys from when EDGE_IDENTITY_KEY is unset."""
    path = key_file()
    if create and not os.path.exists(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp-{secrets.token_hex(4)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise SealError(f"cannot create the key file {path}: {exc}") from None
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(KEY_BYTES) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)  # exclusive: the first process to link wins, others read it
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    try:
        with open(path) as fh:
            key = bytes.fromhex(fh.read().strip())
    except FileNotFoundError:
        raise SealError(f"the key file {path} does not exist (TLS_KEY_FILE / DATA_DIR)") from None
    except ValueError:
        raise SealError(f"the key file {path} is not a hex key") from None
    if len(key) != KEY_BYTES:
        raise SealError(f"the key file {path} does not hold a 256-bit key")
    return key


def _kms() -> Any:
    import boto3

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client(
        "kms", region_name=region, endpoint_url=os.environ.get("KMS_ENDPOINT_URL") or None
    )


# ---- sealing --------------------------------------------------------------------------------
def seal(plaintext: bytes, context: Dict[str, str]) -> Dict[str, Any]:
    """``plaintext`` sealed for storage, bound to ``context`` (e.g. account and certificate
    ids: the same context must be given to open it)."""
    if len(plaintext) > MAX_PLAINTEXT:
        raise ValueError("secret too large to seal")
    aad = _aad(context)
    kms_id = kms_key_id()
    if kms_id:
        answer = _kms().generate_data_key(
            KeyId=kms_id, KeySpec="AES_256", EncryptionContext=dict(context)
        )
        data_key, wrapped = (
            answer["Plaintext"],
            {"kms": _b64(answer["CiphertextBlob"]), "key_id": answer.get("KeyId", kms_id)},
        )
    else:
        data_key = secrets.token_bytes(KEY_BYTES)
        master = master_key(create=True)
        wrapped = {
            "local": encrypt(master, data_key, aad),
            "key_id": hashlib.sha256(master).hexdigest()[:16],
        }
    return {"alg": ALG, "wrapped_key": wrapped, **encrypt(data_key, plaintext, aad)}


def open_sealed(sealed: Dict[str, Any], context: Dict[str, str]) -> bytes:
    """The plaintext of :func:`seal`'s result, or SealError."""
    if not isinstance(sealed, dict) or sealed.get("alg") != ALG:
        raise SealError("not a sealed secret of this service")
    aad = _aad(context)
    wrapped = sealed.get("wrapped_key") or {}
    if "kms" in wrapped:
        try:
            data_key = _kms().decrypt(
                CiphertextBlob=_unb64(wrapped["kms"]), EncryptionContext=dict(context)
            )["Plaintext"]
        except SealError:
            raise
        except Exception as exc:
            if type(exc).__name__ in ("InvalidCiphertextException",) or "InvalidCiphertext" in str(
                exc
            ):
                raise SealError("KMS refused the wrapped key (another context)") from None
            raise
    elif "local" in wrapped:
        data_key = decrypt(master_key(create=False), wrapped["local"], aad)
    else:
        raise SealError("the sealed secret names no key")
    return decrypt(data_key, sealed, aad)
