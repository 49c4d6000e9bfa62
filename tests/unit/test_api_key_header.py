"""The Authorization header's rule (chalicelib.auth.bearer_token): ``Bearer <API key>``, the
scheme in any case, one token without spaces; anything else is a 401 from the authorizer."""

import pytest

from chalicelib import auth


@pytest.mark.parametrize(
    "header, token",
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER abc", "abc"),
        ("  Bearer   abc  ", "abc"),
    ],
)
def test_a_bearer_header_gives_its_token(header, token):
    assert auth.bearer_token(header) == token


@pytest.mark.parametrize(
    "header, reason",
    [
        (None, "missing Authorization header"),
        ("", "missing Authorization header"),
        ("Basic abc", "Authorization header must be 'Bearer <API key>'"),
        ("Bearer", "Authorization header must be 'Bearer <API key>'"),
        ("Bearer ", "Authorization header must be 'Bearer <API key>'"),
        ("Bearer a b", "Authorization header must be 'Bearer <API key>'"),
        ("Bearerabc", "Authorization header must be 'Bearer <API key>'"),
        ("Token abc", "Authorization header must be 'Bearer <API key>'"),
    ],
)
def test_anything_else_is_refused_with_its_reason(header, reason):
    with pytest.raises(auth.AuthFailed) as refused:
        auth.bearer_token(header)
    assert refused.value.reason == reason
    # the message a Lambda authorizer must raise for API Gateway to answer 401
    assert str(refused.value) == "Unauthorized"
