"""A basic auth option's credentials (the SDKs' ``basic_auth``, the agent CLI 2.x's ``-auth``,
the SSH gateway's ``--basic-auth``) are refused at the bind with the hosted service's codes and
messages, at their bounds, before they become the basic-auth action."""

import pytest

from chalicelib.core import binding, edge_errors
from edge import enforce, legacy


def _bind(credentials):
    return enforce.http_options({"BasicAuth": {"credentials": credentials}})


def _cred(user, password):
    return {"username": user, "cleartext_password": password}


@pytest.mark.parametrize(
    "user, password, code, message",
    [
        (
            "alice",
            "x" * 7,
            edge_errors.BASIC_AUTH_PASSWORD_LENGTH,
            "between 8 and 128 characters, got 7",
        ),
        ("alice", "x" * 129, edge_errors.BASIC_AUTH_PASSWORD_LENGTH, "got 129"),
        ("alice", "", edge_errors.BASIC_AUTH_PASSWORD_LENGTH, "got 0"),
        ("", "x" * 8, edge_errors.BASIC_AUTH_USERNAME_EMPTY, "Username must not be zero length"),
        (
            "u" * 129,
            "x" * 8,
            edge_errors.BASIC_AUTH_USERNAME_LENGTH,
            "at most 128 characters, got 129",
        ),
    ],
)
def test_a_credential_outside_the_bounds_is_refused_with_the_hosted_code(
    user, password, code, message
):
    with pytest.raises(binding.Refused) as caught:
        _bind([_cred("bob", "long-enough"), _cred(user, password)])
    assert caught.value.code == code
    assert caught.value.message.startswith("Invalid basic auth credential.")
    assert message in caught.value.message


@pytest.mark.parametrize("user, password", [("a", "x" * 8), ("u" * 128, "x" * 128)])
def test_a_credential_at_the_bounds_is_served(user, password):
    enforcement = _bind([_cred(user, password)])
    assert enforcement.policy is not None
    assert f"{user}:{password}" in enforcement.document


def test_a_hashed_password_alone_is_an_option_this_edge_cannot_honour():
    with pytest.raises(binding.Refused) as caught:
        _bind([{"username": "alice", "hashed_password": "c2VjcmV0"}])
    assert caught.value.code == edge_errors.INVALID_OPTION


@pytest.mark.parametrize(
    "auth, code",
    [
        ("alice:short", edge_errors.BASIC_AUTH_PASSWORD_LENGTH),
        ("alice", edge_errors.BASIC_AUTH_PASSWORD_LENGTH),  # no ':': no password
        (":long-enough", edge_errors.BASIC_AUTH_USERNAME_EMPTY),
    ],
)
def test_the_cli_auth_string_is_checked_as_the_option_is(auth, code):
    with pytest.raises(binding.Refused) as caught:
        enforce.http_options(legacy.http_options({"Auth": auth}))
    assert caught.value.code == code
