"""The dashboard in headless Chromium against `make run`: what a person does, page by page."""
from selenium.webdriver.common.by import By

from tests.dashboard.support import (accept_confirm, all_of, find, go, loaded, sign_in, text_of,
                                     wait, wait_text)

ROUTES = ["overview", "endpoints", "agents", "credentials", "api_keys", "bot_users",
          "reserved_domains", "reserved_addrs", "ip_policies", "legacy"]


def test_sign_in_and_every_page_without_console_errors(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    assert browser.current_url.startswith(stack.dashboard_url)
    assert stack.key not in browser.current_url
    for route in ROUTES:
        go(browser, route)
        assert not all_of(browser, ".state.error"), text_of(browser)
        assert browser.find_element(By.CSS_SELECTOR, "h1").text
    # the key is in this tab's sessionStorage only
    assert browser.execute_script("return window.localStorage.length") == 0
    assert browser.execute_script(
        "return window.sessionStorage.getItem('dashboard.apiKey')") == stack.key
    assert stack.key not in browser.execute_script("return document.cookie")


def test_credential_token_is_shown_once_and_not_after_a_reload(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "credentials")
    form = find(browser, "form[aria-label='New authtoken']")
    form.find_element(By.NAME, "description").send_keys("browser-made")
    form.find_element(By.CSS_SELECTOR, ".add-rule").click()
    form.find_element(By.CSS_SELECTOR, "input.acl-rule").send_keys("bind:browser.tunnels.localhost")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    token = find(browser, ".secret .secret-value").text.strip()
    assert len(token) > 20
    made = [c for c in stack.api("GET", "/credentials")["credentials"]
            if c["description"] == "browser-made"]
    assert len(made) == 1 and made[0]["acl"] == ["bind:browser.tunnels.localhost"]
    assert made[0]["token"] is None      # the API never shows it again either
    wait_text(browser, made[0]["id"])
    browser.refresh()
    loaded(browser)
    find(browser, "#sign-out")           # still signed in (sessionStorage) …
    wait_text(browser, made[0]["id"])
    assert token not in browser.page_source   # … and the token is gone
    assert not all_of(browser, ".secret")


def test_acl_edit_shows_the_api_error_at_the_editor(stack, browser, expected_errors):
    expected_errors.expect(400)
    cred = stack.api("POST", "/credentials", {"description": "acl-edit"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "credentials")
    row = find(browser, f"tr[data-id='{cred['id']}']")
    row.find_element(By.XPATH, ".//button[text()='Edit ACL']").click()
    editor = find(browser, f"tr[data-id='{cred['id']}'] form")
    editor.find_element(By.CSS_SELECTOR, ".add-rule").click()
    editor.find_element(By.CSS_SELECTOR, "input.acl-rule").send_keys("not a rule")
    editor.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = find(browser, f"tr[data-id='{cred['id']}'] .acl-editor .field-error")
    assert "acl" in error.text.lower()
    editor = find(browser, f"tr[data-id='{cred['id']}'] form")
    editor.find_element(By.CSS_SELECTOR, "input.acl-rule").clear()
    editor.find_element(By.CSS_SELECTOR, "input.acl-rule").send_keys("bind:*.example.com")
    editor.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: stack.api("GET", f"/credentials/{cred['id']}")["acl"] == [
        "bind:*.example.com"])
    wait_text(browser, "bind:*.example.com")


def test_reserved_domain_create_dns_check_missing_and_delete(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "reserved_domains")
    form = find(browser, "form[aria-label='Reserve a domain']")
    form.find_element(By.NAME, "domain").send_keys("*.shop.example.com")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_text(browser, "*.shop.example.com")
    domain = [d for d in stack.api("GET", "/reserved_domains")["reserved_domains"]
              if d["domain"] == "*.shop.example.com"][0]
    row = find(browser, f"tr[data-id='{domain['id']}']")
    assert domain["cname_target"] in row.text                     # both records to add
    assert domain["acme_challenge_cname_target"] in row.text
    assert "_acme-challenge.shop.example.com" in row.text
    row.find_element(By.CSS_SELECTOR, "button.dns-check").click()
    wait(browser, lambda d: len(all_of(d, f"tr[data-id='{domain['id']}'] li.check")) == 2)
    checks = all_of(browser, f"tr[data-id='{domain['id']}'] li.check")
    assert [c.get_attribute("data-status") for c in checks] == ["missing", "missing"]
    assert "Missing" in checks[0].text and "*.shop.example.com" in checks[0].text
    assert "certificate" in row.text.lower() or "provisioning" in row.text.lower()
    row.find_element(By.CSS_SELECTOR, "button.danger").click()
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, f"tr[data-id='{domain['id']}']"))
    assert all(d["id"] != domain["id"]
               for d in stack.api("GET", "/reserved_domains")["reserved_domains"])


def test_cloud_endpoint_policy_error_is_shown_at_the_policy(stack, browser, expected_errors):
    expected_errors.expect(400)
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "endpoints")
    form = find(browser, "form[aria-label='New cloud endpoint']")
    form.find_element(By.NAME, "url").send_keys("https://cloud-ui.tunnels.localhost")
    form.find_element(By.NAME, "traffic_policy").send_keys(
        "on_http_request:\n  - actions:\n      - type: no-such-action\n")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = find(browser, "form[aria-label='New cloud endpoint'] [data-field=traffic_policy] "
                          ".field-error")
    assert error.text and "ERR_" in error.text
    area = browser.find_element(By.CSS_SELECTOR, "form[aria-label='New cloud endpoint'] "
                                                 "textarea[name=traffic_policy]")
    assert area.get_attribute("aria-invalid") == "true"
    assert browser.switch_to.active_element == area
