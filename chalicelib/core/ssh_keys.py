"""SSH public keys: the ``public_key`` of an SSH credential (an OpenSSH ``authorized_keys``
line) checked, made canonical and fingerprinted; the one rule both planes use.

The API checks the line when an SSH credential is created (chalicelib.ssh_credentials); the
edge's SSH gateway finds a credential by the key a client authenticates with
(chalicelib.core.binding.authenticate_ssh_key). Both name a key by the SHA-256 of its wire
blob (the bytes the base64 of the line carries, which an SSH client sends as it is), so the
two meet on the same lookup item (chalicelib.core.keys).

Parsed in pure Python, as certificate authorities are: the API's Lambda package carries no
``cryptography`` (docs/BENCHMARKS.md, "The deployment package"). tests/unit/test_ssh_keys.py
holds it to cryptography's ``load_ssh_public_key``: every line accepted here loads there and
names the same key.

Rules (the hosted docs give none beyond "an SSH public key"; decided here):
- ``<type> <base64> [comment]``, one line of at most MAX_LINE_BYTES; no ``authorized_keys``
  options before the type (they would be silently meaningless here);
- types: ``ssh-ed25519``, ``ecdsa-sha2-nistp256`` / ``-nistp384`` / ``-nistp521`` (the point
  uncompressed and on its curve) and ``ssh-rsa`` of RSA_BITS bits (a public exponent that is
  odd, at least 3 and below the modulus). DSA (removed from OpenSSH), security-key (``sk-``)
  types and certificates are refused;
- the blob is canonical: its type is the line's, nothing follows the key, integers are
  minimal and positive. So one key has one blob and one fingerprint, and the same key cannot
  be stored twice under two spellings;
- the stored line is ``<type> <base64 of the blob> [comment]`` (whitespace collapsed around
  the three parts; the comment kept, printable ASCII and spaces only).
"""

import base64
import binascii
import hashlib
import re
from typing import List, Tuple

MAX_LINE_BYTES = 8192  # an RSA key of 8192 bits is ~1.4 KB as a line
RSA_BITS = (2048, 8192)

ED25519 = "ssh-ed25519"
RSA = "ssh-rsa"
# curve name in the blob -> (field prime p, curve coefficient b, coordinate bytes); a = -3
_P256 = 2**256 - 2**224 + 2**192 + 2**96 - 1
_P384 = 2**384 - 2**128 - 2**96 + 2**32 - 1
_P521 = 2**521 - 1
CURVES = {
    "nistp256": (
        _P256,
        0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
        32,
    ),
    "nistp384": (
        _P384,
        int(
            "b3312fa7e23ee7e4988e056be3f82d19181d9c6efe8141120314088f5013875a"
            "c656398d8a2ed19d2a85c8edd3ec2aef",
            16,
        ),
        48,
    ),
    "nistp521": (
        _P521,
        int(
            "0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef1"
            "09e156193951ec7e937b1652c0bd3bb1bf073573df883d2c34f1ef451fd46b503f00",
            16,
        ),
        66,
    ),
}
TYPES = (ED25519, *(f"ecdsa-sha2-{c}" for c in CURVES), RSA)

_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_COMMENT = re.compile(r"^[\x20-\x7e]*$")


class InvalidKey(ValueError):
    """The line is not an SSH public key this service accepts; ``str()`` says why."""


def _take_string(blob: bytes, pos: int) -> Tuple[bytes, int]:
    if pos + 4 > len(blob):
        raise InvalidKey("the key data ends early")
    size = int.from_bytes(blob[pos : pos + 4], "big")
    end = pos + 4 + size
    if end > len(blob):
        raise InvalidKey("the key data ends early")
    return blob[pos + 4 : end], end


def _take_mpint(blob: bytes, pos: int) -> Tuple[int, int]:
    raw, pos = _take_string(blob, pos)
    if not raw:
        return 0, pos
    if raw[0] & 0x80:
        raise InvalidKey("a key integer is negative")
    if raw[0] == 0 and (len(raw) == 1 or not raw[1] & 0x80):
        raise InvalidKey("a key integer is not minimally encoded")
    return int.from_bytes(raw, "big"), pos


def _check_ecdsa(curve: str, blob: bytes, pos: int) -> int:
    name, pos = _take_string(blob, pos)
    if name != curve.encode():
        raise InvalidKey(f"the key's curve is not {curve}")
    point, pos = _take_string(blob, pos)
    p, b, size = CURVES[curve]
    if len(point) != 1 + 2 * size or point[0] != 4:
        raise InvalidKey("the key's point is not an uncompressed point of its curve")
    x = int.from_bytes(point[1 : 1 + size], "big")
    y = int.from_bytes(point[1 + size :], "big")
    if x >= p or y >= p or (y * y - (x * x * x - 3 * x + b)) % p:
        raise InvalidKey("the key's point is not on its curve")
    return pos


def _check_rsa(blob: bytes, pos: int) -> int:
    e, pos = _take_mpint(blob, pos)
    n, pos = _take_mpint(blob, pos)
    low, high = RSA_BITS
    if not low <= n.bit_length() <= high:
        raise InvalidKey(f"an RSA key of {n.bit_length()} bits; {low} to {high} bits are accepted")
    if not n & 1 or e < 3 or e >= n or not e & 1:
        raise InvalidKey("the RSA key's numbers are not those of a public key")
    return pos


def check_blob(key_type: str, blob: bytes) -> None:
    """The wire blob of a ``key_type`` key, checked (InvalidKey otherwise)."""
    name, pos = _take_string(blob, 0)
    if name != key_type.encode():
        raise InvalidKey(f"the key data is not a {key_type} key")
    if key_type == ED25519:
        raw, pos = _take_string(blob, pos)
        if len(raw) != 32:
            raise InvalidKey("an ssh-ed25519 key is 32 bytes")
    elif key_type == RSA:
        pos = _check_rsa(blob, pos)
    else:
        pos = _check_ecdsa(key_type[len("ecdsa-sha2-") :], blob, pos)
    if pos != len(blob):
        raise InvalidKey("the key data goes on past the key")


def parse(line: str) -> Tuple[str, bytes]:
    """``(canonical line, blob)`` of an ``authorized_keys`` line, or InvalidKey saying why."""
    if len(line.encode("utf-8")) > MAX_LINE_BYTES:
        raise InvalidKey(f"the key is over {MAX_LINE_BYTES} bytes")
    if "\n" in line.strip() or "\r" in line.strip():
        raise InvalidKey("the key must be one line")
    parts: List[str] = line.split(None, 2)
    if len(parts) < 2:
        raise InvalidKey("expected '<type> <base64 key> [comment]'")
    key_type, text = parts[0], parts[1]
    comment = " ".join(parts[2].split()) if len(parts) == 3 else ""
    if key_type not in TYPES:
        raise InvalidKey(
            f"'{key_type[:40]}' is not an accepted key type ({', '.join(TYPES)}); "
            "authorized_keys options are not accepted"
        )
    if not _BASE64.match(text):
        raise InvalidKey("the key is not base64")
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidKey("the key is not base64") from None
    check_blob(key_type, blob)
    if not _COMMENT.match(comment):
        raise InvalidKey("the comment must be printable ASCII")
    canonical = f"{key_type} {base64.b64encode(blob).decode()}"
    return (f"{canonical} {comment}" if comment else canonical), blob


def digest(blob: bytes) -> str:
    """What the store names a key by: the SHA-256 of its blob, hex."""
    return hashlib.sha256(blob).hexdigest()


def fingerprint(blob: bytes) -> str:
    """The key's fingerprint as OpenSSH prints it (``SHA256:<base64, unpadded>``)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
