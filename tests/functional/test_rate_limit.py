"""Per-account rate limiting (chalicelib.ratelimit): in-process, with a fixed clock."""

import pytest

from chalicelib import web
from chalicelib.core import config, errors
from tests.functional.test_api_keys import assert_contract_error

START = 1_800_000_000.0  # a minute boundary (divisible by 60)


@pytest.fixture
def limited(inprocess_api, monkeypatch):
    """The in-process API with RATE_LIMIT_PER_MINUTE=3 and a clock the test moves."""
    clock = {"now": START + 10}
    monkeypatch.setenv("RATE_LIMIT_PER_MINUTE", "3")
    config.reset_settings()
    monkeypatch.setattr(web, "_clock", lambda: clock["now"])
    yield inprocess_api, clock
    monkeypatch.delenv("RATE_LIMIT_PER_MINUTE")
    config.reset_settings()


def test_limit_allows_n_requests_then_429_with_retry_after(limited):
    api, clock = limited
    account = api.new_account()
    for _ in range(3):
        assert account.admin.get("/api_keys").status == 200
    refused = account.admin.get("/api_keys")
    assert_contract_error(refused, 429, errors.RATE_LIMITED)
    assert refused.headers["retry-after"] == "50"
    assert "3 API requests per minute" in refused.json["msg"]
    # a refused write changes nothing
    assert account.admin.post("/ip_policies", {}).status == 429
    clock["now"] = START + 60  # the next minute
    assert account.admin.get("/ip_policies").json["ip_policies"] == []


def test_limit_is_per_account(limited):
    api, _ = limited
    busy, other = api.new_account(), api.new_account()
    for _ in range(3):
        busy.admin.get("/api_keys")
    assert busy.member.get("/api_keys").status == 429  # same account, other principal
    assert other.admin.get("/api_keys").status == 200


def test_retry_after_rounds_up_and_is_at_least_one_second(limited):
    api, clock = limited
    account = api.new_account()
    clock["now"] = START + 59.5
    for _ in range(3):
        account.admin.get("/api_keys")
    assert account.admin.get("/api_keys").headers["retry-after"] == "1"


def test_unauthenticated_requests_do_not_count(limited):
    api, _ = limited
    account = api.new_account()
    for _ in range(5):
        assert api.request("GET", "/api_keys").status == 401
    assert account.admin.get("/api_keys").status == 200


def test_off_by_default(inprocess_api, monkeypatch):
    monkeypatch.delenv("RATE_LIMIT_PER_MINUTE", raising=False)
    config.reset_settings()
    assert config.get_settings().rate_limit_per_minute == 0
    account = inprocess_api.new_account()
    for _ in range(10):
        assert account.admin.get("/api_keys").status == 200


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_bad_setting_is_refused(monkeypatch, value):
    monkeypatch.setenv("RATE_LIMIT_PER_MINUTE", value)
    config.reset_settings()
    try:
        with pytest.raises(ValueError):
            config.get_settings()
    finally:
        monkeypatch.delenv("RATE_LIMIT_PER_MINUTE")
        config.reset_settings()
