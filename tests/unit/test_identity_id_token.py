"""ID token verification at the edge (edge.identity.verify_id_token): signature by a key of
the provider's JWKS, iss, aud, exp, iat, sub, nonce; alg none and HMAC never accepted; an
unknown kid makes the JWKS be fetched once more (key rotation)."""

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from edge import identity

ISSUER = "https://idp.test"
DOC = {
    "issuer": ISSUER,
    "jwks_uri": f"{ISSUER}/jwks",
    "id_token_signing_alg_values_supported": ["RS256", "HS256", "none"],
}


def _key(kid):
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    public.update({"kid": kid, "alg": "RS256", "use": "sig"})
    return private, public


KEY, JWK = _key("k1")
OTHER, OTHER_JWK = _key("k2")


@pytest.fixture
def jwks(monkeypatch):
    served = {"keys": [JWK]}
    fetches = []

    def cached(url, now, what, refresh=False):
        fetches.append(refresh)
        return served

    monkeypatch.setattr(identity, "_cached", cached)
    return served, fetches


def _token(key=KEY, kid="k1", alg="RS256", **claims):
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": "client",
        "sub": "u1",
        "iat": now,
        "exp": now + 300,
        "nonce": "n1",
        "email": "a@x.test",
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid})


def _verify(token, nonce="n1"):
    return identity.verify_id_token(token, DOC, "client", nonce, time.time())


def test_a_good_token(jwks):
    assert _verify(_token())["email"] == "a@x.test"


@pytest.mark.parametrize(
    "claims, words",
    [
        ({"aud": "another-client"}, "not valid"),
        ({"iss": "https://evil.test"}, "not valid"),
        ({"exp": int(time.time()) - 3600}, "not valid"),
        ({"exp": None}, "not valid"),
        ({"sub": None}, "not valid"),
        ({"nonce": "other"}, "nonce"),
        ({"nonce": None}, "nonce"),
    ],
)
def test_refused_claims(jwks, claims, words):
    with pytest.raises(identity.SigninError, match=words):
        _verify(_token(**claims))


def test_a_signature_by_another_key_is_refused(jwks):
    with pytest.raises(identity.SigninError):
        _verify(_token(key=OTHER, kid="k1"))


def test_alg_none_and_hmac_are_never_accepted(jwks):
    unsigned = jwt.encode(
        {
            "iss": ISSUER,
            "aud": "client",
            "sub": "u",
            "nonce": "n1",
            "iat": int(time.time()),
            "exp": int(time.time()) + 60,
        },
        None,
        algorithm="none",
    )
    with pytest.raises(identity.SigninError, match="algorithm"):
        _verify(unsigned)
    # HS256 (the classic key confusion): refused by its algorithm, whatever the key
    hmac_token = jwt.encode(
        {"iss": ISSUER, "aud": "client", "sub": "u", "nonce": "n1"},
        "s" * 32,
        algorithm="HS256",
        headers={"kid": "k1"},
    )
    with pytest.raises(identity.SigninError, match="algorithm"):
        _verify(hmac_token)


def test_an_unknown_kid_fetches_the_jwks_once_more(jwks):
    served, fetches = jwks
    token = _token(key=OTHER, kid="k2")
    with pytest.raises(identity.SigninError, match="no key"):
        _verify(token)
    assert fetches == [False, True]
    served["keys"].append(OTHER_JWK)  # the provider rotated
    assert _verify(token)["sub"] == "u1"
