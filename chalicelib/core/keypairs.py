"""Does a private key belong to a certificate? Pure Python (asn1crypto + integers), because the
API's Lambda package carries no ``cryptography`` (docs/BENCHMARKS.md, "The deployment package").

:func:`load_private_key` reads one unencrypted PEM private key: PKCS#8 (``PRIVATE KEY``),
PKCS#1 (``RSA PRIVATE KEY``) or SEC 1 (``EC PRIVATE KEY``, optionally after an ``EC
PARAMETERS`` block), RSA (2048 to 8192 bits) or ECDSA on P-256 or P-384. :func:`matches`
compares it with a certificate's public key, from the key's own secret numbers, not from what
the key file claims: for RSA ``n = p·q``, ``e·d ≡ 1 (mod λ(n))`` and (n, e) equal to the
certificate's; for EC the public point is computed as ``d·G`` (a key file's embedded public
key is not trusted) and compared with the certificate's point. Bounded cost: at most one
8192-bit modular check or one scalar multiplication (about 10 ms for P-384 in CPython).
"""

import math
import re
from typing import Any, Optional, Tuple

MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192


class KeyError_(ValueError):
    """The private key cannot be used (why is the message)."""


# ---- short Weierstrass curves y² = x³ - 3x + b (mod p) ---------------------------------------
CURVES = {
    "secp256r1": dict(
        p=0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF,
        b=0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
        gx=0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
        gy=0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
        n=0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    ),
    "secp384r1": dict(
        p=int(
            "fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffe"
            "ffffffff0000000000000000ffffffff",
            16,
        ),
        b=int(
            "b3312fa7e23ee7e4988e056be3f82d19181d9c6efe8141120314088f5013875a"
            "c656398d8a2ed19d2a85c8edd3ec2aef",
            16,
        ),
        gx=int(
            "aa87ca22be8b05378eb1c71ef320ad746e1d3b628ba79b9859f741e082542a38"
            "5502f25dbf55296c3a545e3872760ab7",
            16,
        ),
        gy=int(
            "3617de4a96262c6f5d9e98bf9292dc29f8f41dbd289a147ce9da3113b5f0b8c0"
            "0a60b1ce1d7e819d7a431d7c90ea0e5f",
            16,
        ),
        n=int(
            "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf"
            "581a0db248b0a77aecec196accc52973",
            16,
        ),
    ),
}


def _double(point: Tuple[int, int, int], p: int) -> Tuple[int, int, int]:
    x, y, z = point
    if y == 0 or z == 0:
        return (0, 1, 0)
    zz = z * z % p
    m = 3 * (x - zz) * (x + zz) % p  # a = -3
    yy = y * y % p
    s = 4 * x * yy % p
    x3 = (m * m - 2 * s) % p
    y3 = (m * (s - x3) - 8 * yy * yy) % p
    return (x3, y3, 2 * y * z % p)


def _add(a: Tuple[int, int, int], b: Tuple[int, int, int], p: int) -> Tuple[int, int, int]:
    if a[2] == 0:
        return b
    if b[2] == 0:
        return a
    x1, y1, z1 = a
    x2, y2, z2 = b
    z1z1, z2z2 = z1 * z1 % p, z2 * z2 % p
    u1, u2 = x1 * z2z2 % p, x2 * z1z1 % p
    s1, s2 = y1 * z2 * z2z2 % p, y2 * z1 * z1z1 % p
    if u1 == u2:
        return _double(a, p) if s1 == s2 else (0, 1, 0)
    h, r = (u2 - u1) % p, (s2 - s1) % p
    hh = h * h % p
    hhh = h * hh % p
    v = u1 * hh % p
    x3 = (r * r - hhh - 2 * v) % p
    y3 = (r * (v - x3) - s1 * hhh) % p
    return (x3, y3, z1 * z2 * h % p)


def scalar_base(curve: str, d: int) -> Tuple[int, int]:
    """``d·G`` on ``curve`` in affine coordinates."""
    c = CURVES[curve]
    p = c["p"]
    result, addend = (0, 1, 0), (c["gx"], c["gy"], 1)
    while d:
        if d & 1:
            result = _add(result, addend, p)
        addend = _double(addend, p)
        d >>= 1
    x, y, z = result
    if z == 0:
        raise KeyError_("the EC private key is not a valid scalar")
    zi = pow(z, -1, p)
    return x * zi * zi % p, y * zi * zi * zi % p


def _decode_point(curve: str, data: bytes) -> Tuple[int, int]:
    c = CURVES[curve]
    size = (c["p"].bit_length() + 7) // 8
    if len(data) == 1 + 2 * size and data[0] == 4:
        return int.from_bytes(data[1 : 1 + size], "big"), int.from_bytes(data[1 + size :], "big")
    if len(data) == 1 + size and data[0] in (2, 3):
        p = c["p"]
        x = int.from_bytes(data[1:], "big")
        y = pow((x * x * x - 3 * x + c["b"]) % p, (p + 1) // 4, p)  # p ≡ 3 (mod 4)
        if y % 2 != data[0] % 2:
            y = p - y
        return x, y
    raise KeyError_("the certificate's EC public key is not a point of its curve")


# ---- loading ---------------------------------------------------------------------------------
_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)


class PrivateKey:
    """A parsed private key: ``kind`` "rsa" or "ecdsa", and its numbers."""

    def __init__(self, kind: str, der_pkcs8: bytes, **numbers: Any):
        self.kind = kind
        self.pkcs8 = der_pkcs8
        self.numbers = numbers


def load_private_key(text: str) -> PrivateKey:
    from asn1crypto import keys, pem

    blocks = [(m.group(1), m.group(0)) for m in _BLOCK.finditer(text)]
    kinds = [kind for kind, _ in blocks if kind != "EC PARAMETERS"]
    if "ENCRYPTED PRIVATE KEY" in kinds or "Proc-Type: 4,ENCRYPTED" in text:
        raise KeyError_("is encrypted; send the key unencrypted (it is stored encrypted here)")
    if len(kinds) != 1:
        raise KeyError_(
            f"must hold exactly one PEM private key, found {len(kinds)} PEM blocks of a key"
        )
    kind, block = next((k, b) for k, b in blocks if k != "EC PARAMETERS")
    if kind not in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"):
        raise KeyError_(f"holds a PEM block of type {kind!r}, not a private key")
    try:
        _, _, der = pem.unarmor(block.encode("ascii"))
        if kind == "PRIVATE KEY":
            info = keys.PrivateKeyInfo.load(der, strict=True)
            algorithm = info["private_key_algorithm"]["algorithm"].native
            if algorithm == "rsa":
                inner = info["private_key"].parsed
                return _rsa(inner, der)
            if algorithm == "ec":
                params = info["private_key_algorithm"]["parameters"]
                return _ec(info["private_key"].parsed, params, der)
            raise KeyError_(
                f"is a {algorithm} key; only RSA and ECDSA (P-256, P-384) keys are accepted"
            )
        if kind == "RSA PRIVATE KEY":
            inner = keys.RSAPrivateKey.load(der, strict=True)
            return _rsa(inner, keys.PrivateKeyInfo.wrap(inner, "rsa").dump())
        inner = keys.ECPrivateKey.load(der, strict=True)
        params = inner["parameters"]
        if params.native is None:
            ec_params = [b for k, b in blocks if k == "EC PARAMETERS"]
            if not ec_params:
                raise KeyError_("is an EC key without its curve")
            params = keys.ECDomainParameters.load(pem.unarmor(ec_params[0].encode())[2])
        return _ec(inner, params, None)
    except KeyError_:
        raise
    except Exception as exc:  # asn1crypto raises ValueError, TypeError, … on bad DER
        raise KeyError_(f"is not a valid PEM private key: {str(exc)[:200]}") from None


def _rsa(inner: Any, pkcs8: bytes) -> PrivateKey:
    native = {
        name: inner[name].native
        for name in ("modulus", "public_exponent", "private_exponent", "prime1", "prime2")
    }
    n, e, d, p, q = (
        native[k] for k in ("modulus", "public_exponent", "private_exponent", "prime1", "prime2")
    )
    bits = n.bit_length()
    if not MIN_RSA_BITS <= bits <= MAX_RSA_BITS:
        raise KeyError_(
            f"is a {bits}-bit RSA key; {MIN_RSA_BITS} to {MAX_RSA_BITS} bits are accepted"
        )
    if (
        p < 2
        or q < 2
        or p * q != n
        or e < 3
        or e % 2 == 0
        or (e * d) % (math.lcm(p - 1, q - 1)) != 1
    ):
        raise KeyError_("is not a consistent RSA key (its numbers do not agree)")
    return PrivateKey("rsa", pkcs8, n=n, e=e)


def _ec(inner: Any, params: Any, pkcs8: Optional[bytes]) -> PrivateKey:
    from asn1crypto import keys

    if params.name != "named":
        raise KeyError_(
            "is an EC key with explicit curve parameters; use a named curve (P-256 or P-384)"
        )
    curve = params.chosen.native
    if curve not in CURVES:
        raise KeyError_(
            f"is an EC key on {curve}; P-256 (secp256r1) and P-384 (secp384r1) are accepted"
        )
    d = inner["private_key"].native
    if not isinstance(d, int):
        d = int.from_bytes(d, "big")
    if not 1 <= d < CURVES[curve]["n"]:
        raise KeyError_("is not a valid EC key (its scalar is out of range)")
    if pkcs8 is None:
        stripped = keys.ECPrivateKey(
            {
                "version": "ecPrivkeyVer1",
                "private_key": inner["private_key"].native,
                "public_key": inner["public_key"].native,
            }
        )
        pkcs8 = keys.PrivateKeyInfo(
            {
                "version": 0,
                "private_key_algorithm": {"algorithm": "ec", "parameters": params},
                "private_key": stripped,
            }
        ).dump()
    return PrivateKey("ecdsa", pkcs8, curve=curve, d=d)


def matches(key: PrivateKey, public_key_info: Any) -> bool:
    """True when ``key`` is the private half of the certificate's ``public_key`` (asn1crypto
    ``PublicKeyInfo``)."""
    algorithm = public_key_info["algorithm"]["algorithm"].native
    if key.kind == "rsa":
        if algorithm != "rsa":
            return False
        parsed = public_key_info["public_key"].parsed
        return (parsed["modulus"].native, parsed["public_exponent"].native) == (
            key.numbers["n"],
            key.numbers["e"],
        )
    if algorithm != "ec":
        return False
    params = public_key_info["algorithm"]["parameters"]
    if params.name != "named" or params.chosen.native != key.numbers["curve"]:
        return False
    point = _decode_point(key.numbers["curve"], public_key_info["public_key"].native)
    return scalar_base(key.numbers["curve"], key.numbers["d"]) == point


def pkcs8_pem(key: PrivateKey) -> str:
    from asn1crypto import pem

    return pem.armor("PRIVATE KEY", key.pkcs8).decode("ascii")
