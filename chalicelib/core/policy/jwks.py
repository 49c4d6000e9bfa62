"""The check of an inline JWKS (``jwt-validation``'s ``jws.keys.jwks``) when a policy is
compiled, in pure Python: the API's Lambda package carries neither PyJWT nor cryptography
(4.2 MB of the package's 10; the edge, which verifies tokens, keeps both).

It is stricter than what PyJWT takes (``PyJWKSet.from_dict`` skips a key it cannot use; here
every key must be usable, so a typo is a 400 at the API instead of a key silently missing at
the edge), and never looser: a document accepted here is one PyJWT builds every key of,
which tests/unit/test_policy_jwks.py checks over valid and corrupted documents.

Rules, per key (``keys[i]``):
- a JSON object whose ``kty`` is ``RSA``, ``EC``, ``OKP`` or ``oct``; no private members
  (``d``, ``p``, ``q``, ``dp``, ``dq``, ``qi``, ``oth``: a policy holds public keys);
- ``alg``, when given, is one the key type signs with (RS*/PS* for RSA; ES256, ES384, ES512,
  ES256K for EC, by curve; EdDSA for OKP; HS* for oct);
- members are base64url without padding; RSA: ``n`` odd, of at least 1024 bits, ``e`` odd with
  3 <= e < n; EC: ``crv`` P-256, P-384, P-521 or secp256k1, ``x`` and ``y`` of the curve's size
  and a point on the curve; OKP: ``crv`` Ed25519 and a 32-byte ``x``; oct: a non-empty ``k``.
"""

import base64
import re
from typing import Any, Dict, Tuple

_B64URL = re.compile(r"[A-Za-z0-9_-]*\Z")
_PRIVATE = ("d", "p", "q", "dp", "dq", "qi", "oth")
# name: (field prime p, a, b, coordinate bytes, the alg it signs with)
_CURVES = {
    "P-256": (
        2**256 - 2**224 + 2**192 + 2**96 - 1,
        -3,
        0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
        32,
        "ES256",
    ),
    "P-384": (
        2**384 - 2**128 - 2**96 + 2**32 - 1,
        -3,
        int(
            "B3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875A"
            "C656398D8A2ED19D2A85C8EDD3EC2AEF",
            16,
        ),
        48,
        "ES384",
    ),
    "P-521": (
        2**521 - 1,
        -3,
        int(
            "0051953EB9618E1C9A1F929A21A0B68540EEA2DA725B99B315F3B8B489918EF1"
            "09E156193951EC7E937B1652C0BD3BB1BF073573DF883D2C34F1EF451FD46B50"
            "3F00",
            16,
        ),
        66,
        "ES512",
    ),
    "secp256k1": (2**256 - 2**32 - 977, 0, 7, 32, "ES256K"),
}
_ALGS: Dict[str, Tuple[str, ...]] = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "OKP": ("EdDSA",),
    "oct": ("HS256", "HS384", "HS512"),
}


class JwksError(ValueError):
    """Why a JWKS is refused (the message names the key and the member)."""


def _bytes(key: Dict[str, Any], member: str, where: str) -> bytes:
    value = key.get(member)
    if not isinstance(value, str) or not value:
        raise JwksError(f"{where}: '{member}' must be a non-empty base64url string")
    if not _B64URL.match(value) or len(value) % 4 == 1:
        raise JwksError(f"{where}: '{member}' is not base64url (unpadded)")
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def _check_key(key: Any, where: str) -> None:
    if not isinstance(key, dict):
        raise JwksError(f"{where}: must be a JSON object")
    kty = key.get("kty")
    if kty not in ("RSA", "EC", "OKP", "oct"):
        raise JwksError(f"{where}: 'kty' must be RSA, EC, OKP or oct")
    private = [m for m in _PRIVATE if m in key]
    if private and kty != "oct":
        raise JwksError(
            f"{where}: holds private key members ({', '.join(private)}); a "
            "policy holds public keys only"
        )
    alg = key.get("alg")
    if kty == "EC":
        crv = key.get("crv")
        if not isinstance(crv, str) or crv not in _CURVES:
            raise JwksError(f"{where}: 'crv' must be one of {', '.join(_CURVES)}")
        p, a, b, size, signs = _CURVES[crv]
        x, y = _bytes(key, "x", where), _bytes(key, "y", where)
        if len(x) != size or len(y) != size:
            raise JwksError(f"{where}: 'x' and 'y' must be {size} bytes for {crv}")
        xi, yi = int.from_bytes(x, "big"), int.from_bytes(y, "big")
        if xi >= p or yi >= p or (yi * yi - (xi * xi * xi + a * xi + b)) % p:
            raise JwksError(f"{where}: ('x', 'y') is not a point on {crv}")
        allowed: Tuple[str, ...] = (signs,)
    elif kty == "RSA":
        n = int.from_bytes(_bytes(key, "n", where), "big")
        e = int.from_bytes(_bytes(key, "e", where), "big")
        if n.bit_length() < 1024 or n % 2 == 0:
            raise JwksError(f"{where}: 'n' must be an odd modulus of at least 1024 bits")
        if e < 3 or e >= n or e % 2 == 0:
            raise JwksError(f"{where}: 'e' must be odd, at least 3 and less than 'n'")
        allowed = _ALGS["RSA"]
    elif kty == "OKP":
        if key.get("crv") != "Ed25519":
            raise JwksError(f"{where}: 'crv' must be Ed25519")
        if len(_bytes(key, "x", where)) != 32:
            raise JwksError(f"{where}: 'x' must be 32 bytes for Ed25519")
        allowed = _ALGS["OKP"]
    else:
        if private:
            raise JwksError(f"{where}: an oct key has no member {private[0]!r}")
        _bytes(key, "k", where)
        allowed = _ALGS["oct"]
    if alg is not None and alg not in allowed:
        raise JwksError(f"{where}: 'alg' must be {' or '.join(allowed)} for this key")


def check(document: Any) -> None:
    """None when ``document`` is a usable JWKS; JwksError saying why not."""
    if not isinstance(document, dict):
        raise JwksError("must be a JSON object with 'keys'")
    keys = document.get("keys")
    if not isinstance(keys, list) or not keys:
        raise JwksError("'keys' must be a non-empty list of JSON Web Keys")
    for index, key in enumerate(keys):
        _check_key(key, f"keys[{index}]")
