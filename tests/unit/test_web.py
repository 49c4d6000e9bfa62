"""chalicelib.web's request-level rules that need no store."""
from types import SimpleNamespace

import pytest

from chalicelib import errors, web


def _request(context=None, headers=None):
    return SimpleNamespace(context=context or {}, headers=headers or {})


def test_view_without_authorizer_context_refuses():
    with pytest.raises(errors.Unauthorized):
        web.principal(_request())


@pytest.mark.parametrize("context", [
    {"account_id": "acct_1", "principal_id": "usr_1", "principal_kind": "user",
     "role": "root", "api_key_id": "ak_1"},
    {"account_id": "", "principal_id": "usr_1", "principal_kind": "user", "role": "admin",
     "api_key_id": "ak_1"},
    {"principal_id": "usr_1"},
])
def test_incomplete_or_odd_authorizer_context_refuses(context):
    with pytest.raises(errors.Unauthorized):
        web.principal(_request({"authorizer": context}))


def test_principal_from_authorizer_context():
    found = web.principal(_request({"authorizer": {
        "account_id": "acct_1", "principal_id": "usr_1", "principal_kind": "user",
        "role": "member", "api_key_id": "ak_1", "principalId": "usr_1"}}))
    assert found.account_id == "acct_1" and not found.is_admin
    with pytest.raises(errors.Forbidden):
        found.require_admin("do this")


def test_base_url_uses_forwarded_proto_host_and_stage():
    req = _request({"stage": "api", "path": "/api/api_keys"},
                   {"host": "abc.execute-api.us-east-1.amazonaws.com",
                    "x-forwarded-proto": "https"})
    assert web.base_url(req) == "https://abc.execute-api.us-east-1.amazonaws.com/api"
    local = _request({"path": "/api_keys"}, {"host": "127.0.0.1:8000"})
    assert web.base_url(local) == "http://127.0.0.1:8000"


def test_public_base_url_wins(monkeypatch):
    from chalicelib import config
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://api.example.test/")
    config.reset_settings()
    try:
        assert web.base_url(_request({}, {"host": "x"})) == "https://api.example.test"
    finally:
        monkeypatch.delenv("PUBLIC_BASE_URL")
        config.reset_settings()


def test_page_continues_after_the_last_item_or_the_cursor_given():
    c = web.Ctx(principal=None, base_url="http://h")
    page = web.page(c, "/things", "things", [{"id": "t_2"}, {"id": "t_1"}], True, 2)
    assert page["next_page_uri"] == "http://h/things?before_id=t_1&limit=2"
    # a list that skipped items past its last one names where it stopped reading
    page = web.page(c, "/things", "things", [], True, 2, cursor="t_0")
    assert page == {"things": [], "uri": "http://h/things",
                    "next_page_uri": "http://h/things?before_id=t_0&limit=2"}
    assert web.page(c, "/things", "things", [{"id": "t_1"}], False, 2)["next_page_uri"] is None
