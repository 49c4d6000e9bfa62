"""chalicelib/core/policy/jwks.py checks inline JWKS without PyJWT or cryptography (the API's
Lambda package has neither). The edge verifies tokens with PyJWT: a document this check
accepts must be one PyJWT builds every key of, and the refusals are tested rule by rule."""

import base64
import copy
import json
import random

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from chalicelib.core.policy import jwks


def _jwk(algorithm, public_key, **extra):
    return {**json.loads(algorithm.to_jwk(public_key)), **extra}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


RSA = _jwk(
    jwt.algorithms.RSAAlgorithm, rsa.generate_private_key(65537, 2048).public_key(), kid="rsa"
)
EC = {
    name: _jwk(jwt.algorithms.ECAlgorithm, ec.generate_private_key(curve).public_key())
    for name, curve in (
        ("P-256", ec.SECP256R1()),
        ("P-384", ec.SECP384R1()),
        ("P-521", ec.SECP521R1()),
        ("secp256k1", ec.SECP256K1()),
    )
}
ED = _jwk(jwt.algorithms.OKPAlgorithm, ed25519.Ed25519PrivateKey.generate().public_key())
OCT = {"kty": "oct", "k": _b64(b"a shared secret of 32 bytes long"), "alg": "HS256"}
VALID_KEYS = [
    RSA,
    ED,
    OCT,
    *EC.values(),
    {**RSA, "alg": "PS384"},
    {**EC["P-384"], "alg": "ES384"},
    {**ED, "alg": "EdDSA"},
]


def pyjwt_uses_every_key(document) -> bool:
    try:
        keyset = jwt.PyJWKSet.from_dict(copy.deepcopy(document))
    except Exception:
        return False
    return len(keyset.keys) == len(document["keys"])


def accepted(document) -> bool:
    try:
        jwks.check(document)
        return True
    except jwks.JwksError:
        return False


@pytest.mark.parametrize(
    "key", VALID_KEYS, ids=lambda k: f"{k['kty']}-{k.get('crv', '')}-{k.get('alg', '')}"
)
def test_a_valid_public_key_is_accepted_here_and_by_pyjwt(key):
    document = {"keys": [key]}
    assert accepted(document) and pyjwt_uses_every_key(document)


def test_a_set_of_every_kind_is_accepted():
    assert accepted({"keys": VALID_KEYS}) and pyjwt_uses_every_key({"keys": VALID_KEYS})


def _with(key, **changes):
    out = dict(key)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def _flip(text: str) -> str:
    try:
        raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:  # not base64url to begin with: change its last character
        return text[:-1] + ("B" if text.endswith("A") else "A")
    raw[len(raw) // 2] ^= 0x01
    return _b64(bytes(raw))


RSA_N = int.from_bytes(base64.urlsafe_b64decode(RSA["n"] + "=="), "big")
REFUSED = {
    "not an object": "nope",
    "no keys": {},
    "empty keys": {"keys": []},
    "keys not a list": {"keys": {"kty": "oct"}},
    "a key not an object": {"keys": [RSA, "x"]},
    "unknown kty": {"keys": [_with(RSA, kty="DSA")]},
    "no kty": {"keys": [_with(RSA, kty=None)]},
    "rsa private d": {"keys": [_with(RSA, d=RSA["n"])]},
    "rsa no n": {"keys": [_with(RSA, n=None)]},
    "rsa padded n": {"keys": [_with(RSA, n=RSA["n"] + "==")]},
    "rsa standard base64": {"keys": [_with(RSA, n=RSA["n"].replace("-", "+") + "+")]},
    "rsa even e": {"keys": [_with(RSA, e=_b64((65536).to_bytes(3, "big")))]},
    "rsa e of 1": {"keys": [_with(RSA, e=_b64(b"\x01"))]},
    "rsa even n": {"keys": [_with(RSA, n=_b64((RSA_N - 1).to_bytes(256, "big")))]},
    "rsa 512-bit n": {"keys": [_with(RSA, n=_b64((RSA_N >> 1536 | 1).to_bytes(64, "big")))]},
    "rsa alg for EC": {"keys": [_with(RSA, alg="ES256")]},
    "unknown alg": {"keys": [_with(RSA, alg="RS1")]},
    "ec off the curve": {"keys": [_with(EC["P-256"], y=_flip(EC["P-256"]["y"]))]},
    "ec short x": {"keys": [_with(EC["P-256"], x="AQ", y="AQ")]},
    "ec crv mismatch": {"keys": [_with(EC["P-256"], crv="P-384")]},
    "ec unknown crv": {"keys": [_with(EC["P-256"], crv="P-192")]},
    "ec crv not a string": {"keys": [_with(EC["P-256"], crv=["P-256"])]},
    "okp crv not a string": {"keys": [_with(ED, crv={"Ed25519": 1})]},
    "kty not a string": {"keys": [_with(RSA, kty=["RSA"])]},
    "alg not a string": {"keys": [_with(RSA, alg=["RS256"])]},
    "ec no y": {"keys": [_with(EC["P-256"], y=None)]},
    "ec alg of another curve": {"keys": [_with(EC["P-256"], alg="ES384")]},
    "ec private d": {"keys": [_with(EC["P-256"], d=EC["P-256"]["x"])]},
    "okp Ed448": {"keys": [_with(ED, crv="Ed448")]},
    "okp short x": {"keys": [_with(ED, x="AQ")]},
    "okp no crv": {"keys": [_with(ED, crv=None)]},
    "oct empty k": {"keys": [_with(OCT, k="")]},
    "oct no k": {"keys": [_with(OCT, k=None)]},
    "oct alg RS256": {"keys": [_with(OCT, alg="RS256")]},
    "one bad key among good ones": {"keys": [RSA, _with(ED, x="AQ"), OCT]},
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_key_that_breaks_a_rule_is_refused_with_where_and_why(name):
    with pytest.raises(jwks.JwksError) as refused:
        jwks.check(REFUSED[name])
    if (
        isinstance(REFUSED[name], dict)
        and REFUSED[name].get("keys")
        and isinstance(REFUSED[name]["keys"], list)
        and len(REFUSED[name]["keys"]) > 1
    ):
        assert str(refused.value).startswith("keys[1]: ")


def test_whatever_is_accepted_here_pyjwt_uses_every_key_of():
    """Random corruptions of valid keys (members dropped, changed, swapped, bytes flipped,
    curves and algs exchanged): whenever the check accepts one, PyJWT builds every key."""
    rng = random.Random(1234)
    members = ["kty", "crv", "x", "y", "n", "e", "k", "alg", "d"]
    values = [
        "RSA",
        "EC",
        "OKP",
        "oct",
        "P-256",
        "P-384",
        "P-521",
        "secp256k1",
        "Ed25519",
        "ES256",
        "RS256",
        "HS256",
        "EdDSA",
        "AQ",
        "AQAB",
        "",
        7,
        None,
    ]
    accepted_count = refused_count = 0
    for _ in range(3000):
        key = copy.deepcopy(rng.choice(VALID_KEYS))
        for _ in range(rng.randint(1, 3)):
            member, roll = rng.choice(members), rng.random()
            if roll < 0.3:
                key.pop(member, None)
            elif roll < 0.6:
                key[member] = rng.choice(values)
            elif roll < 0.8 and isinstance(key.get(member), str) and len(key[member]) > 8:
                key[member] = _flip(key[member])
            else:
                other = rng.choice(VALID_KEYS)
                if member in other:
                    key[member] = other[member]
        document = {"keys": [key]}
        if accepted(document):
            accepted_count += 1
            assert pyjwt_uses_every_key(document), key
        else:
            refused_count += 1
    assert accepted_count > 100 and refused_count > 100  # both sides were exercised
