"""CORS answers the dashboard's origin (DASHBOARD_ORIGIN) and no other; unset, none at all."""

import pytest

from chalicelib.core import config

ORIGIN = "https://dashboard.example.com"


@pytest.fixture
def dashboard_origin(monkeypatch):
    monkeypatch.setenv("DASHBOARD_ORIGIN", ORIGIN + "/")
    config.reset_settings()
    yield
    config.reset_settings()


@pytest.fixture
def admin(inprocess_api):
    return inprocess_api.new_account().admin


def test_preflight_of_the_dashboard_origin(inprocess_api, dashboard_origin):
    resp = inprocess_api.request(
        "OPTIONS",
        "/credentials",
        version=None,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, ngrok-version",
        },
    )
    assert resp.status == 204, resp
    assert resp.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in resp.headers["access-control-allow-methods"]
    allowed = resp.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type", "ngrok-version"} <= {
        h.strip() for h in allowed.split(",")
    }
    assert "access-control-allow-credentials" not in resp.headers


def test_responses_to_the_dashboard_origin_carry_it_errors_too(admin, dashboard_origin):
    ok = admin.get("/credentials", headers={"Origin": ORIGIN})
    assert ok.status == 200 and ok.headers["access-control-allow-origin"] == ORIGIN
    assert "Operation-Id" in ok.headers["access-control-expose-headers"]
    bad = admin.post("/credentials", {"nope": 1}, headers={"Origin": ORIGIN})
    assert bad.status == 400 and bad.headers["access-control-allow-origin"] == ORIGIN


def test_another_origin_gets_no_cors(inprocess_api, admin, dashboard_origin):
    other = "https://evil.example.com"
    resp = admin.get("/credentials", headers={"Origin": other})
    assert resp.status == 200 and "access-control-allow-origin" not in resp.headers
    pre = inprocess_api.request(
        "OPTIONS",
        "/credentials",
        version=None,
        headers={"Origin": other, "Access-Control-Request-Method": "GET"},
    )
    assert pre.status in (400, 405) and "access-control-allow-origin" not in pre.headers


def test_unset_no_cors_and_options_is_refused(inprocess_api, admin):
    config.reset_settings()
    resp = admin.get("/credentials", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in resp.headers
    pre = inprocess_api.request(
        "OPTIONS",
        "/credentials",
        version=None,
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"},
    )
    assert pre.status in (400, 405), pre  # as any unrouted method: version check, then 405


def test_unset_options_with_the_version_header_is_a_405_on_every_path(inprocess_api):
    """No dashboard origin: OPTIONS on every routed path, a preflight or not, reaches the
    error translation (405 with the contract's body), never a 500."""
    config.reset_settings()
    from app import app

    for path in sorted(app.routes):
        concrete = "/".join("x" if p.startswith("{") else p for p in path.split("/"))
        for headers in ({}, {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}):
            resp = inprocess_api.request("OPTIONS", concrete, headers=headers)
            assert resp.status == 405, (path, resp)
            assert "access-control-allow-origin" not in resp.headers
