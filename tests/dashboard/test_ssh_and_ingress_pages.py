"""The pages of SSH certificate authorities, SSH host and user certificates and agent
ingresses, in headless Chromium against `make run` (the stack fixture): each created,
listed, edited and deleted through its page, the API's validation error shown at its field,
the text a person copies (a CA's public key, a certificate) copied by its button, every
example a form shows accepted by the API as it is, and the pages at 1440 and 390 px without
overflow (long ids, keys and certificates wrap inside their cells).

One Chromium serves the whole module (signed in once; each test opens its page afresh): the
module's tests take a few seconds each. As with the conftest's browser, each test's final page
is kept as test-output/dashboard/<test>.png and the browser's console must hold no error."""

import os
import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.dashboard.conftest import OUTPUT_DIR, _driver, console_errors, snapshot
from tests.dashboard.support import (
    accept_confirm,
    all_of,
    find,
    go,
    sign_in,
    text_of,
    wait,
)
from tests.dashboard.test_resource_pages import (
    BREAKS,
    _by,
    _field_error,
    _fill_examples,
    _narrow,
    _no_overflow,
    _set,
    _submit,
    full_snapshot,
)

PAGES = ["ssh_certificate_authorities", "ssh_certificates", "agent_ingresses"]
CA_PATH = "/ssh_certificate_authorities"

# Elements of the page wider than their box (a key, a certificate, an id in a heading) or
# reaching past the window: a table-wrap that scrolls sideways would pass the page's own
# width check.
INSIDE = """
  const skip = (e) => e.closest('.visually-hidden, thead')
    || ['INPUT', 'TEXTAREA', 'SELECT', 'OPTION'].includes(e.tagName);
  const edge = document.documentElement.clientWidth + 1;
  return [...document.querySelectorAll('main *')]
    .filter((e) => !skip(e) && e.getClientRects().length
            && ((e.clientWidth && e.scrollWidth > e.clientWidth + 1)
                || e.getBoundingClientRect().right > edge))
    .map((e) => `${e.tagName}.${e.className}: ${e.textContent.slice(0, 40)}`);
"""


@pytest.fixture(scope="module")
def chromium(stack):
    """The module's one Chromium, signed in, allowed to use the clipboard (Copy buttons)."""
    driver = _driver(1440, 900)
    try:
        sign_in(driver, stack.dashboard_url, stack.key)
        origin = re.match(r"https?://[^/]+", stack.dashboard_url).group(0)
        driver.execute_cdp_cmd(
            "Browser.grantPermissions",
            {"origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
        )
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium, request, expected_errors):
    """The module's Chromium at 1440 px; after the test its final page is kept and its
    console (read since the test began) must hold no error but the expected ones."""
    chromium.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    console_errors(chromium)  # reading the log empties it: an earlier test's are its own
    yield chromium
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    chromium.save_screenshot(os.path.join(OUTPUT_DIR, f"{name}.png"))
    errors = [e for e in console_errors(chromium) if not expected_errors.forgiven(e)]
    failed = getattr(request.node, "rep_call", None)
    if errors and not (failed and failed.failed):
        pytest.fail(f"console errors: {errors}")


def open_page(driver, stack, route: str) -> None:
    """The page afresh (a reload: no editor or error left by an earlier test), reached by
    its link in the navigation."""
    driver.get(f"{stack.dashboard_url}#/overview")
    driver.refresh()
    find(driver, "#sign-out")
    go(driver, route)


def public_key(comment: str = "laptop") -> str:
    """A new Ed25519 key's public key line (its private key is dropped)."""
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{line.decode()} {comment}"


def copied(driver, row: str, expected: str) -> None:
    """The row's Copy button puts ``expected`` on the clipboard, and says so."""
    find(driver, f"{row} button[data-action=copy]").click()
    wait(driver, lambda d: "Copied" in find(d, f"{row} .copy-status").text)
    text = driver.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('! ' + e))"
    )
    assert text == expected


def edit_description(driver, row: str, description: str, metadata: str) -> None:
    find(driver, f"{row} button[data-action=edit]").click()
    editor = find(driver, f"{row} form")
    for name, value in (("description", description), ("metadata", metadata)):
        box = editor.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)
    _submit(editor)


def delete_row(driver, row: str) -> None:
    find(driver, f"{row} button.danger").click()
    accept_confirm(driver)


# ---- SSH certificate authorities -------------------------------------------------------
def test_ssh_ca_created_copied_edited_and_deleted(stack, browser, expected_errors):
    """A curve with an Ed25519 key: the API's 400 at the curve, with the operation id; an
    ECDSA P-384 CA created, its public key shown as the API has it and copied; description and
    metadata edited in its row; deleted after the confirmation."""
    expected_errors.expect(400)

    def ops_cas():
        return _by(
            stack, CA_PATH, "ssh_certificate_authorities", lambda c: c["description"] == "ops CA"
        )

    open_page(browser, stack, "ssh_certificate_authorities")
    css = "form[aria-label='New SSH certificate authority']"
    form = find(browser, css)
    form.find_element(By.NAME, "description").send_keys("ops CA")
    Select(form.find_element(By.NAME, "elliptic_curve")).select_by_value("p384")
    _submit(form)  # ed25519 (the default) with a curve
    text = _field_error(browser, css, "elliptic_curve")
    assert "only for private_key_type ecdsa" in text and "operation op_" in text, text
    assert not ops_cas()
    Select(find(browser, css).find_element(By.NAME, "private_key_type")).select_by_value("ecdsa")
    _submit(find(browser, css))
    wait(browser, lambda d: ops_cas())
    [ca] = ops_cas()
    assert ca["description"] == "ops CA" and ca["key_type"] == "ecdsa"
    assert ca["public_key"].startswith("ecdsa-sha2-nistp384 ")
    row = f"tr[data-id='{ca['id']}']"
    assert find(browser, f"{row} .copy-value").text == ca["public_key"]
    assert "ops CA" in find(browser, f"{row} .description").text
    copied(browser, row, ca["public_key"])
    snapshot(browser, "ssh-ca-created")
    edit_description(browser, row, "ops CA (2026)", '{"team": "ops"}')
    wait(browser, lambda d: stack.api("GET", f"{CA_PATH}/{ca['id']}")["metadata"])
    now = stack.api("GET", f"{CA_PATH}/{ca['id']}")
    assert (now["description"], now["metadata"]) == ("ops CA (2026)", '{"team": "ops"}')
    wait(browser, lambda d: "ops CA (2026)" in find(d, f"{row} .description").text)
    assert '{"team": "ops"}' in find(browser, f"{row} .metadata").text
    delete_row(browser, row)
    wait(
        browser,
        lambda d: not _by(
            stack, CA_PATH, "ssh_certificate_authorities", lambda c: c["id"] == ca["id"]
        ),
    )
    wait(browser, lambda d: not all_of(d, row))


# ---- SSH host and user certificates ----------------------------------------------------
def test_ssh_certificates_from_the_forms_examples_copied_edited_and_deleted(
    stack, browser, expected_errors
):
    """Each form with its examples (principals, validity, critical options, extensions) and a
    public key is signed as typed; an invalid key is the API's 400 at the key, an unknown
    critical option at the options, a validity that ends before it starts at valid until; the
    certificates are listed with the CA that signed them and copied; a description edited;
    both deleted."""
    expected_errors.expect(400)
    ca = stack.api("POST", CA_PATH, {"description": "signing CA"})
    try:
        open_page(browser, stack, "ssh_certificates")
        made = {}
        for kind in ("user", "host"):
            css = f"form[data-kind={kind}]"
            wait(browser, lambda d: all_of(d, f"{css} option[value='{ca['id']}']"))
            form = find(browser, css)
            key = public_key(f"{kind}@example")
            if kind == "user":  # not a key: the API's 400 at the key field
                _set(browser, form.find_element(By.NAME, "public_key"), "ssh-ed25519 AAAA")
                _submit(form)
                text = _field_error(browser, css, "public_key")
                assert "public_key" in text and "operation op_" in text, text
                # a critical option OpenSSH does not know: the API's 400 at the options
                _set(browser, form.find_element(By.NAME, "public_key"), key)
                form.find_element(By.NAME, "critical_options").send_keys("permit-x11")
                _submit(form)
                text = _field_error(browser, css, "critical_options")
                assert "'permit-x11'" in text and "operation op_" in text, text
                form.find_element(By.NAME, "critical_options").clear()
            else:  # a validity that ends before it starts: the API's 400 at valid_until
                _set(browser, form.find_element(By.NAME, "public_key"), key)
                form.find_element(By.NAME, "valid_after").send_keys("2030-01-02T00:00:00Z")
                form.find_element(By.NAME, "valid_until").send_keys("2030-01-01T00:00:00Z")
                _submit(form)
                text = _field_error(browser, css, "valid_until")
                assert "after valid_after" in text and "operation op_" in text, text
                for name in ("valid_after", "valid_until"):
                    form.find_element(By.NAME, name).clear()
            form = find(browser, css)
            _set(browser, form.find_element(By.NAME, "public_key"), key)
            form.find_element(By.NAME, "description").send_keys(f"{kind} from examples")
            used = _fill_examples(form)
            expected = {"principals", "valid_after", "valid_until"}
            if kind == "user":
                expected |= {"critical_options", "extensions"}
            assert set(used) == expected, used
            _submit(form)
            path = f"/ssh_{kind}_certificates"
            listed = f"ssh_{kind}_certificates"

            def signed():
                return _by(
                    stack, path, listed, lambda c: c["description"] == f"{kind} from examples"
                )

            wait(browser, lambda d: signed())
            [made[kind]] = signed()
            cert = made[kind]
            assert cert["public_key"] == key
            assert cert["ssh_certificate_authority_id"] == ca["id"]
            assert cert["principals"] == used["principals"].split("\n")
            assert (cert["valid_after"], cert["valid_until"]) == (
                used["valid_after"],
                used["valid_until"],
            )
            if kind == "user":
                assert cert["critical_options"] == {"source-address": "203.0.113.0/24"}
                assert cert["extensions"] == {"permit-pty": "", "permit-port-forwarding": ""}
            assert cert["certificate"].startswith("ssh-ed25519-cert-v01@openssh.com ")
            row = f"[data-list={listed}] tr[data-id='{cert['id']}']"
            shown = find(browser, row)
            assert find(browser, f"{row} .copy-value").text == cert["certificate"]
            assert ca["id"] in shown.find_element(By.CSS_SELECTOR, ".signed-by").text
            assert "signing CA" in shown.find_element(By.CSS_SELECTOR, ".signed-by").text
            assert "valid" in shown.text and used["principals"] in shown.text
            copied(browser, row, cert["certificate"])
        snapshot(browser, "ssh-certificates-signed")
        user_row = f"[data-list=ssh_user_certificates] tr[data-id='{made['user']['id']}']"
        assert "source-address=203.0.113.0/24" in find(browser, user_row).text
        edit_description(browser, user_row, "deploy key", "ticket 7")
        user_path = f"/ssh_user_certificates/{made['user']['id']}"
        wait(browser, lambda d: stack.api("GET", user_path)["description"] == "deploy key")
        assert stack.api("GET", user_path)["metadata"] == "ticket 7"
        wait(browser, lambda d: "deploy key" in find(d, f"{user_row} .description").text)
        for kind in ("user", "host"):
            row = f"[data-list=ssh_{kind}_certificates] tr[data-id='{made[kind]['id']}']"
            delete_row(browser, row)
            wait(browser, lambda d: not all_of(d, row))
            assert not _by(
                stack,
                f"/ssh_{kind}_certificates",
                f"ssh_{kind}_certificates",
                lambda c: c["id"] == made[kind]["id"],
            )
    finally:
        stack.api("DELETE", f"{CA_PATH}/{ca['id']}")


# ---- agent ingresses -------------------------------------------------------------------
def test_agent_ingress_from_the_example_edited_and_deleted(stack, browser, expected_errors):
    """A name of the service's own domain: the API's ERR_NGROK_6705 at the domain; the form's
    example domain is created, listed with the API's name servers and connect names; its
    description edited; deleted after the confirmation."""
    expected_errors.expect(400)
    open_page(browser, stack, "agent_ingresses")
    css = "form[aria-label='New agent ingress']"
    find(browser, css).find_element(By.NAME, "domain").send_keys("connect.tunnels.localhost")
    _submit(find(browser, css))
    text = _field_error(browser, css, "domain")
    assert "ERR_NGROK_6705" in text and "operation op_" in text, text
    form = find(browser, css)
    form.find_element(By.NAME, "domain").clear()
    form.find_element(By.NAME, "description").send_keys("office agents")
    used = _fill_examples(form)
    assert set(used) == {"domain"} and used["domain"].endswith(".example.com"), used
    _submit(form)

    def made():
        return _by(stack, "/agent_ingresses", "ingresses", lambda i: i["domain"] == used["domain"])

    wait(browser, lambda d: made())
    [ingress] = made()
    assert ingress["description"] == "office agents"
    row = f"tr[data-id='{ingress['id']}']"
    shown = find(browser, row).text
    for name in ingress["ns_targets"] + ingress["region_domains"]:
        assert name in shown.replace("\n", ""), name
    assert "Not managed" in shown  # the API's certificate status is null
    # the example is now another free domain
    wait(
        browser,
        lambda d: find(d, f"{css} input[name=domain]").get_attribute("placeholder")
        not in ("", used["domain"]),
    )
    snapshot(browser, "agent-ingress-created")
    edit_description(browser, row, "office agents (Berlin)", "rack 4")
    path = f"/agent_ingresses/{ingress['id']}"
    wait(browser, lambda d: stack.api("GET", path)["metadata"] == "rack 4")
    assert stack.api("GET", path)["description"] == "office agents (Berlin)"
    wait(browser, lambda d: "office agents (Berlin)" in find(d, f"{row} .description").text)
    delete_row(browser, row)
    wait(browser, lambda d: not made())
    wait(browser, lambda d: not all_of(d, row))


# ---- the pages at both widths ----------------------------------------------------------
def check_wide(browser, route):
    """The page shown at 1440 px (its rows read): no error state, every control labelled,
    "Sign out" on the brand's row, no table wider than its box, nothing outside its box; a
    whole-page screenshot."""
    from tests.dashboard.test_dashboard import UNLABELLED

    assert not all_of(browser, ".state.error"), text_of(browser)
    assert browser.execute_script(UNLABELLED) == [], route
    sign_out = find(browser, "#sign-out").rect
    brand = find(browser, ".brand").rect
    assert sign_out["y"] < brand["y"] + brand["height"], (sign_out, brand)
    assert (
        browser.execute_script(
            "return [...document.querySelectorAll('.table-wrap')]"
            ".filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.ariaLabel)"
        )
        == []
    ), route
    assert browser.execute_script(INSIDE) == [], route
    full_snapshot(browser, f"1440-{route}")


def check_row_editor(browser, route, row):
    """The row's editor opened at the narrow width: nothing overflows, nothing outside its
    box; a whole-page screenshot."""
    find(browser, f"{row} button[data-action=edit]").click()
    find(browser, f"{row} form")
    full_snapshot(browser, f"390-{route}-editor")
    _no_overflow(browser, f"{route} editor")
    assert browser.execute_script(INSIDE) == [], f"{route} editor"


def test_the_pages_at_both_widths_without_overflow(stack, browser):
    """With data whose texts are long (an RSA CA's key, certificates, a long domain and
    metadata): at 1440 px every table fits its page, Sign out on the brand's row, every
    control labelled; at 390 px nothing is wider than the window, a row's editor open too;
    every key and certificate wraps inside its box; the domain wraps only after a dot or a
    dash. A whole-page screenshot of each page at both widths."""

    long_meta = '{"purpose": "' + "long-metadata-" * 12 + '"}'
    ca = stack.api(
        "POST",
        CA_PATH,
        {
            "private_key_type": "rsa",
            "key_size": 2048,
            "description": "wide CA",
            "metadata": long_meta,
        },
    )
    user = stack.api(
        "POST",
        "/ssh_user_certificates",
        {
            "ssh_certificate_authority_id": ca["id"],
            "public_key": public_key(),
            "principals": ["deploy", "a-rather-long-principal-name-for-a-service-account"],
            "critical_options": {
                "force-command": "/usr/local/bin/backup --all",
                "verify-required": "",
            },
            "extensions": {"permit-port-forwarding": ""},
            "description": "wide user certificate",
            "metadata": long_meta,
        },
    )
    host = stack.api(
        "POST",
        "/ssh_host_certificates",
        {"ssh_certificate_authority_id": ca["id"], "public_key": public_key(), "principals": []},
    )
    ingress = stack.api(
        "POST",
        "/agent_ingresses",
        {
            "domain": "agents.eu-central.very-long-subdomain-name.connect.example.com",
            "metadata": long_meta,
        },
    )
    rows = {
        "ssh_certificate_authorities": f"tr[data-id='{ca['id']}']",
        "ssh_certificates": f"tr[data-id='{user['id']}']",
        "agent_ingresses": f"tr[data-id='{ingress['id']}']",
    }
    try:
        for route in PAGES:
            open_page(browser, stack, route)
            find(browser, rows[route])
            check_wide(browser, route)
        _narrow(browser)
        for route in PAGES:
            open_page(browser, stack, route)
            find(browser, rows[route])
            full_snapshot(browser, f"390-{route}")
            _no_overflow(browser, route)
            assert browser.execute_script(INSIDE) == [], route
            check_row_editor(browser, route, rows[route])
        # the long domain wraps after dots and dashes only (and does wrap at 390 px)
        open_page(browser, stack, "agent_ingresses")
        breaks = browser.execute_script(BREAKS, f"{rows['agent_ingresses']} .domain-name")
        assert breaks and all(char in ".-" for _, char in breaks), breaks
    finally:
        stack.api("DELETE", f"/ssh_user_certificates/{user['id']}")
        stack.api("DELETE", f"/ssh_host_certificates/{host['id']}")
        stack.api("DELETE", f"{CA_PATH}/{ca['id']}")
        stack.api("DELETE", f"/agent_ingresses/{ingress['id']}")
