"""Sign-in at the edge walked through in Chromium: an official SDK endpoint with the ``oidc``
option pointed at a real identity provider (tests/edge/oidc_provider.py, a process); the
browser opens the endpoint, is sent to the provider, types an email address into its login
form, comes back through /ngrok/callback to the page it asked for, and the upstream sees the
identity; the session cookie then serves the next visit without the provider; logout ends
it. The browser-like client of tests/edge/test_identity.py covers the refusals (state,
tampered cookie, open redirects, revocation); this is the same flow in a real browser (its
cookie rules, its redirects, SameSite=Lax on the provider's redirect back)."""

import json

import pytest

from tests.dashboard.conftest import _driver
from tests.edge.conftest import CLIENT_ID, CLIENT_SECRET
from tests.edge.test_identity import _endpoint, _origin


def _page_json(driver):
    from selenium.webdriver.common.by import By

    return json.loads(driver.find_element(By.TAG_NAME, "body").text)


def _wait(driver, predicate, seconds=30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.2).until(lambda d: predicate(d))


@pytest.fixture
def chromium():
    driver = _driver(1280, 900)
    try:
        yield driver
    finally:
        driver.quit()


def test_an_sdk_endpoints_oidc_option_signs_in_through_chromium(
    edge, account, agents, idp, chromium
):
    from selenium.webdriver.common.by import By

    # the SDK's oidc(issuer, client id, secret, scopes, allowed domains)
    host = _endpoint(
        edge, account, agents, {"oidc": [idp, CLIENT_ID, CLIENT_SECRET, None, ["example.com"]]}
    )
    origin = _origin(edge, host)
    chromium.get(origin + "/echo?from=chromium")
    _wait(chromium, lambda d: d.current_url.startswith(idp + "/"))  # at the provider
    chromium.find_element(By.NAME, "email").send_keys("carol@example.com")
    chromium.find_element(By.TAG_NAME, "button").click()
    _wait(chromium, lambda d: d.current_url.startswith(origin + "/echo"))  # back, signed in
    assert chromium.current_url == origin + "/echo?from=chromium"
    seen = {k.lower(): v for k, v in _page_json(chromium)["headers"].items()}
    assert seen["ngrok-auth-user-email"] == "carol@example.com"
    cookies = {c["name"]: c for c in chromium.get_cookies()}
    session = cookies["ngrok_session_oidc"]
    assert session["httpOnly"] and session["sameSite"] == "Lax"
    # the next visit goes straight through: the browser's cookie, no provider
    chromium.get(origin + "/echo?again=1")
    assert chromium.current_url == origin + "/echo?again=1"
    assert _page_json(chromium)["headers"]
    # logout ends it: the next visit is sent to the provider again
    chromium.get(origin + "/ngrok/logout")
    chromium.get(origin + "/echo")
    _wait(chromium, lambda d: d.current_url.startswith(idp + "/"))
