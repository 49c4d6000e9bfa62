"""The openid-connect and oauth actions' configs (chalicelib.core.policy.identity) and the
edge's sealed cookies and redirect checks (edge/identity.py), without a provider."""

import base64
import json

import pytest

from chalicelib.core.policy import PolicyError, compile_policy
from chalicelib.core.policy.identity import MAX_AUTHZ_PARAMS, MAX_SCOPES, parse_duration
from chalicelib.core.policy.model import Endpoint
from edge import identity

ISSUER = "https://issuer.example"


def oidc(**config):
    base = {"issuer_url": ISSUER, "client_id": "c", "client_secret": "s"}
    base.update(config)
    return {"on_http_request": [{"actions": [{"type": "openid-connect", "config": base}]}]}


def refused(doc):
    with pytest.raises(PolicyError) as info:
        compile_policy(json.dumps(doc))
    return info.value


def test_a_valid_config_compiles_with_its_defaults():
    action = compile_policy(json.dumps(oidc())).phases["on_http_request"][0].actions[0]
    assert action.max_session == 24 * 3600 and action.idle_session == 0
    assert action.kind == "oidc" and action.auth_id == ""


@pytest.mark.parametrize(
    "config, path, words",
    [
        ({"issuer_url": "ftp://x"}, "config.issuer_url", "http or https"),
        ({"client_id": None}, "config.client_id", "required"),
        ({"auth_id": "has space"}, "config.auth_id", "letters"),
        ({"max_session_duration": "forever"}, "config.max_session_duration", "duration"),
        ({"max_session_duration": "1000h"}, "config.max_session_duration", "from 60s"),
        ({"idle_session_duration": "10s"}, "config.idle_session_duration", "from 60s"),
        ({"scopes": ["a b"]}, "config.scopes[0]", "without spaces"),
        ({"scopes": ["s"] * (MAX_SCOPES + 1)}, "config.scopes", "the limit is"),
        (
            {"authz_url_params": {f"p{i}": "v" for i in range(MAX_AUTHZ_PARAMS + 1)}},
            "config.authz_url_params",
            "the limit is",
        ),
        ({"authz_url_params": {"state": "x"}}, "config.authz_url_params.state", "sign-in flow"),
        ({"nope": 1}, "config.nope", "unknown field"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(config, path, words):
    error = refused(oidc(**config))
    assert error.path == f"on_http_request[0].actions[0].{path}" and words in error.message


def test_the_actions_run_only_in_on_http_request():
    doc = {"on_http_response": oidc()["on_http_request"]}
    assert "cannot run in on_http_response" in refused(doc).message


def test_oauth_needs_a_known_provider_or_its_endpoints_and_the_operators_client():
    def oauth(**config):
        return {"on_http_request": [{"actions": [{"type": "oauth", "config": config}]}]}

    assert "oauth2" in refused(oauth(provider="myspace")).message
    assert "managed OAuth" in refused(oauth(provider="github")).message
    assert (
        "required for provider oauth2"
        in refused(oauth(provider="oauth2", client_id="c", client_secret="s")).message
    )
    action = (
        compile_policy(json.dumps(oauth(provider="github", client_id="c", client_secret="s")))
        .phases["on_http_request"][0]
        .actions[0]
    )
    assert action.endpoints[0] == "https://github.com/login/oauth/authorize"
    assert action.scopes == ["read:user", "user:email"]


def test_identity_variables_are_known_to_later_rules():
    doc = oidc()
    doc["on_http_request"].append(
        {
            "expressions": ["actions.ngrok.oidc.identity.email.endsWith('@x.test')"],
            "actions": [
                {
                    "type": "add-headers",
                    "config": {
                        "headers": {
                            "a": "${actions.ngrok.oidc.identity.name}",
                            "b": "${actions.ngrok.oauth.identity.provider_user_id}",
                        }
                    },
                }
            ],
        }
    )
    compile_policy(json.dumps(doc))


@pytest.mark.parametrize(
    "text, seconds", [("24h", 86400), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400), ("500ms", 0.5)]
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "h", "1d", "1h 2m", "-1h"])
def test_not_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


# ---- the edge's sealed cookies ---------------------------------------------------------------
@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("EDGE_IDENTITY_KEY", "11" * 32)
    monkeypatch.setattr(identity, "_root", None)


def _binding(url="https://a.example", account="acct_1", kind="oidc", auth_id=""):
    return identity._binding(Endpoint(url=url, account_id=account), kind, auth_id)


def test_a_sealed_cookie_opens_only_for_its_endpoint_kind_provider_and_purpose():
    sealed = identity.seal(_binding(), "session", {"sub": "u1"})
    assert identity.unseal(_binding(), "session", sealed) == {"sub": "u1"}
    for other in (
        _binding(url="https://b.example"),
        _binding(account="acct_2"),
        _binding(kind="oauth"),
        _binding(auth_id="other"),
    ):
        assert identity.unseal(other, "session", sealed) is None
    assert identity.unseal(_binding(), "login", sealed) is None


def test_every_changed_byte_of_a_sealed_cookie_is_refused():
    sealed = identity.seal(_binding(), "session", {"sub": "u1", "em": "a@b.test"})
    raw = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4))
    for index in range(len(raw)):
        changed = bytearray(raw)
        changed[index] ^= 0x80
        text = base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        assert identity.unseal(_binding(), "session", text) is None
    assert identity.unseal(_binding(), "session", sealed[:-1]) is None
    assert identity.unseal(_binding(), "session", "!!!") is None


def test_another_key_opens_nothing(monkeypatch):
    sealed = identity.seal(_binding(), "session", {"sub": "u1"})
    monkeypatch.setenv("EDGE_IDENTITY_KEY", "22" * 32)
    monkeypatch.setattr(identity, "_root", None)
    assert identity.unseal(_binding(), "session", sealed) is None


@pytest.mark.parametrize("char", ["\U0001f600", '"', "\\", "\u00e9", "\x01", "a"])
def test_the_largest_session_fits_the_cookie_bound(char):
    """Claims are cut to MAX_CLAIM_BYTES bytes of UTF-8, control characters dropped: a
    session of the longest claims of the costliest characters (4-byte UTF-8, or ones JSON
    escapes) still seals under MAX_COOKIE_BYTES, and a longer cookie is not even opened."""
    worst = identity._cut(char * 10_000)
    assert len(worst.encode("utf-8")) <= identity.MAX_CLAIM_BYTES
    session = {
        "sid": "appses_" + "x" * 27,
        "iat": 2**40,
        "seen": 2**40,
        "exp": 2**40,
        "sub": worst,
        "em": worst,
        "nm": worst,
    }
    sealed = identity.seal(_binding(), "session", session)
    assert len(sealed) <= identity.MAX_COOKIE_BYTES, len(sealed)
    assert identity.unseal(_binding(), "session", sealed) == session
    assert identity.unseal(_binding(), "session", "A" * (identity.MAX_COOKIE_BYTES + 1)) is None


@pytest.mark.parametrize(
    "value, safe",
    [
        ("/app?x=1", "/app?x=1"),
        ("/", "/"),
        ("", "/"),
        ("//evil.test", "/"),
        ("https://evil.test/", "/"),
        ("/\\evil.test", "/"),
        ("http:evil.test", "/"),
        ("/a\r\nSet-Cookie: x", "/"),
        ("evil.test", "/"),
        ("/" + "a" * 3000, "/"),
    ],
)
def test_only_paths_of_this_endpoint_are_redirect_targets(value, safe):
    assert identity.safe_path(value) == safe
