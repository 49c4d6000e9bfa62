"""The pages of SSH credentials and IP restrictions, in headless Chromium against `make run`
(the stack fixture): each created, listed, edited and deleted through its page, the API's
validation errors shown at their fields, every example a form shows accepted by the API as it
is, and both pages at 1440 and 390 px without overflow (a long key, long ACL rules, policies
and metadata wrap inside their cells).

One Chromium serves the whole module (signed in once; each test opens its page afresh), as in
test_ssh_and_ingress_pages.py, whose fixtures these are: each test's final page is kept as
test-output/dashboard/<test>.png and the browser's console must hold no error."""

import base64
import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.dashboard.conftest import snapshot
from tests.dashboard.support import all_of, find, wait
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
from tests.dashboard import test_ssh_and_ingress_pages as ssh_pages
from tests.dashboard.test_ssh_and_ingress_pages import INSIDE, delete_row, open_page, public_key

# that module's fixtures, for this module: its one Chromium (signed in), and the browser each
# test gets from it (the final screenshot kept, the console checked)
chromium = ssh_pages.chromium
browser = ssh_pages.browser

PAGES = ["ssh_credentials", "ip_restrictions"]
CRED_PATH = "/ssh_credentials"
RESTRICTION_PATH = "/ip_restrictions"


def fingerprint(line: str) -> str:
    """``SHA256:…`` of an OpenSSH public key line, as ssh-keygen -l prints it."""
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _select(form, name: str, *values: str) -> None:
    """Exactly ``values`` chosen in the form's (multiple) select ``name``."""
    choice = Select(form.find_element(By.NAME, name))
    if choice.is_multiple:
        choice.deselect_all()
    for value in values:
        choice.select_by_value(value)


# ---- SSH credentials -------------------------------------------------------------------
def test_ssh_credential_created_listed_edited_and_deleted(stack, browser, expected_errors):
    """Not a key: the API's ERR_NGROK_612 at the key; an ACL rule the API refuses: its 400 at
    the ACL; the form's examples (description, ACL rule) with a key: created as typed, listed
    with the key whole (copied by its button), its SHA256 fingerprint, the ACL and how to
    connect with ssh -R; the same key again: ERR_NGROK_609 at the key; description, metadata
    and ACL edited in the row; deleted after the confirmation."""
    expected_errors.expect(400)
    expected_errors.expect(409)
    open_page(browser, stack, "ssh_credentials")
    css = "form[aria-label='New SSH credential']"
    form = find(browser, css)
    _set(browser, form.find_element(By.NAME, "public_key"), "ssh-ed25519 AAAA laptop")
    _submit(form)
    text = _field_error(browser, css, "public_key")
    assert "ERR_NGROK_612" in text and "operation op_" in text, text
    key = public_key("ops@laptop")
    _set(browser, form.find_element(By.NAME, "public_key"), key)
    form.find_element(By.CSS_SELECTOR, "button.add-rule").click()
    form.find_element(By.CSS_SELECTOR, "input.acl-rule").send_keys("bind:not a name")
    _submit(form)
    text = _field_error(browser, css, "acl")
    assert "Invalid ACL rule" in text and "operation op_" in text, text
    assert not _by(stack, CRED_PATH, "ssh_credentials", lambda c: c["public_key"] == key)
    form.find_element(By.CSS_SELECTOR, "input.acl-rule").clear()
    used = _fill_examples(form)
    assert sorted(used.values()) == ["bind:app.example.com", "laptop"], used
    _submit(form)

    def made():
        return _by(stack, CRED_PATH, "ssh_credentials", lambda c: c["public_key"] == key)

    wait(browser, lambda d: made())
    [cred] = made()
    assert cred["description"] == used["description"] == "laptop"
    assert cred["acl"] == ["bind:app.example.com"]
    row = f"tr[data-id='{cred['id']}']"
    assert find(browser, f"{row} .copy-value").text == key
    wait(browser, lambda d: find(d, f"{row} .fingerprint").text == fingerprint(key))
    shown = find(browser, row).text
    assert "bind:app.example.com" in shown.replace("\n", "") and cred["owner_id"] in shown
    usage = find(browser, ".usage").text
    assert "ssh -R 0:localhost:8080 -p <SSH port> v2@<edge host> http" in usage.replace("\n", "")
    snapshot(browser, "ssh-credential-created")
    # the same key (another comment) again: the API's 409 at the key
    form = find(browser, css)
    _set(browser, form.find_element(By.NAME, "public_key"), key.replace("ops@laptop", "again"))
    _submit(form)
    text = _field_error(browser, css, "public_key")
    assert "ERR_NGROK_609" in text and "operation op_" in text, text
    assert made() == [cred]
    # edited in its row: what the API's PATCH takes
    find(browser, f"{row} button[data-action=edit]").click()
    editor = find(browser, f"{row} form")
    assert not editor.find_elements(By.NAME, "public_key")  # set at creation only
    for name, value in (("description", "laptop (2026)"), ("metadata", '{"team": "ops"}')):
        box = editor.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)
    rule = editor.find_element(By.CSS_SELECTOR, "input.acl-rule")
    rule.clear()
    rule.send_keys("bind:*.example.com")
    editor.find_element(By.CSS_SELECTOR, "button.add-rule").click()
    editor.find_elements(By.CSS_SELECTOR, "input.acl-rule")[1].send_keys(
        "bind:db.example.com:5432"
    )
    _submit(editor)
    path = f"{CRED_PATH}/{cred['id']}"
    wait(browser, lambda d: stack.api("GET", path)["metadata"] == '{"team": "ops"}')
    now = stack.api("GET", path)
    assert now["description"] == "laptop (2026)"
    assert now["acl"] == ["bind:*.example.com", "bind:db.example.com:5432"]
    assert now["public_key"] == key
    wait(browser, lambda d: "laptop (2026)" in find(d, f"{row} .description").text)
    assert "bind:db.example.com:5432" in find(browser, row).text.replace("\n", "")
    delete_row(browser, row)
    wait(browser, lambda d: not made())
    wait(browser, lambda d: not all_of(d, row))


# ---- IP restrictions -------------------------------------------------------------------
def _policy(stack, description: str) -> dict:
    """An IP policy allowing every address (an enforced restriction of it refuses nothing,
    so the other tests of the session are not refused while this one runs)."""
    policy = stack.api("POST", "/ip_policies", {"description": description})
    for cidr in ("0.0.0.0/0", "::/0"):
        stack.api(
            "POST",
            "/ip_policy_rules",
            {"ip_policy_id": policy["id"], "cidr": cidr, "action": "allow"},
        )
    return policy


def _delete_policies(stack, *policies) -> None:
    for policy in policies:
        for rule in stack.api("GET", "/ip_policy_rules")["ip_policy_rules"]:
            if rule["ip_policy"]["id"] == policy["id"]:
                stack.api("DELETE", f"/ip_policy_rules/{rule['id']}")
        stack.api("DELETE", f"/ip_policies/{policy['id']}")


def test_ip_restriction_created_listed_edited_and_deleted(stack, browser, expected_errors):
    """The four hosted types offered and the warning shown (and tied to the Enforced box); no
    policy chosen: the API's 400 at the policies; a type the API refuses: its 400 at the
    type; an endpoints restriction created, listed with its policy by name, not enforced; the
    editor refuses no policy at all (the API's PATCH would keep them), then saves another
    policy, enforced, description and metadata; deleted after the confirmation."""
    expected_errors.expect(400)
    office, vpn = _policy(stack, "office"), _policy(stack, "VPN")
    created = []
    try:
        open_page(browser, stack, "ip_restrictions")
        css = "form[aria-label='New IP restriction']"
        wait(browser, lambda d: all_of(d, f"{css} option[value='{vpn['id']}']"))
        form = find(browser, css)
        types = [
            o.get_attribute("value") for o in Select(form.find_element(By.NAME, "type")).options
        ]
        assert types == ["agent", "endpoints", "api", "dashboard"]
        warning = find(browser, ".warning").text
        assert "refuses" in warning and "do not allow" in warning, warning
        box = form.find_element(By.NAME, "enforced")
        hint = browser.execute_script(
            "return arguments[0].getAttribute('aria-describedby').split(' ')"
            ".map((id) => document.getElementById(id).textContent).join(' ')",
            box,
        )
        assert "refused" in hint, hint
        # no policy chosen: the API's 400 at the policies
        _submit(form)
        text = _field_error(browser, css, "ip_policy_ids")
        assert "ip_policy_ids" in text and "operation op_" in text, text
        # the api and dashboard types are created as chosen (not enforced: they only log);
        # a type the API never heard of is its 400 at the type
        browser.execute_script(
            "arguments[0].append(new Option('bogus', 'bogus'))", form.find_element(By.NAME, "type")
        )
        for kind in ("api", "dashboard"):
            _select(form, "ip_policy_ids", office["id"])  # a create resets the form
            _select(form, "type", kind)
            _submit(form)
            taken = wait(
                browser,
                lambda d: _by(
                    stack, RESTRICTION_PATH, "ip_restrictions", lambda r: r["type"] == kind
                ),
            )
            assert taken and taken[0]["enforced"] is False, kind
            created += taken
            # the page is done with this create (its form reset, its list read again) only
            # once the row is drawn: the API can list the restriction before the page has read
            # its answer, and a reset after the next choices below would clear them
            find(browser, f"tr[data-id='{taken[0]['id']}']")
        _select(form, "ip_policy_ids", office["id"])
        _select(form, "type", "bogus")
        _submit(form)
        text = _field_error(browser, css, "type")
        assert "'bogus'" in text and "operation op_" in text, text
        assert not _by(stack, RESTRICTION_PATH, "ip_restrictions", lambda r: r["type"] == "bogus")
        _select(form, "type", "endpoints")
        form.find_element(By.NAME, "description").send_keys("office only")
        _submit(form)

        def made():
            return _by(
                stack,
                RESTRICTION_PATH,
                "ip_restrictions",
                lambda r: r["description"] == "office only",
            )

        wait(browser, lambda d: made())
        [restriction] = made()
        created.append(restriction)
        assert restriction["type"] == "endpoints" and restriction["enforced"] is False
        assert [p["id"] for p in restriction["ip_policies"]] == [office["id"]]
        row = f"tr[data-id='{restriction['id']}']"
        wait(browser, lambda d: "office" in find(d, f"{row} .policies .name").text)
        assert office["id"] in find(browser, f"{row} .policies").text
        assert "not enforced" in find(browser, row).text
        snapshot(browser, "ip-restriction-created")
        # the editor: no policy at all is the page's own error (the API would keep them)
        find(browser, f"{row} button[data-action=edit]").click()
        editor = find(browser, f"{row} form")
        assert not editor.find_elements(By.NAME, "type")  # set at creation only
        _select(editor, "ip_policy_ids")
        _submit(editor)
        text = _field_error(browser, f"{row} form", "ip_policy_ids")
        assert "at least one IP policy" in text, text
        editor = find(browser, f"{row} form")
        _select(editor, "ip_policy_ids", vpn["id"])
        editor.find_element(By.NAME, "enforced").click()
        for name, value in (("description", "VPN only"), ("metadata", "ticket 12")):
            box = editor.find_element(By.NAME, name)
            box.clear()
            box.send_keys(value)
        _submit(editor)
        path = f"{RESTRICTION_PATH}/{restriction['id']}"
        wait(browser, lambda d: stack.api("GET", path)["enforced"])
        now = stack.api("GET", path)
        assert (now["description"], now["metadata"]) == ("VPN only", "ticket 12")
        assert [p["id"] for p in now["ip_policies"]] == [vpn["id"]]
        wait(browser, lambda d: "VPN" in find(d, f"{row} .policies .name").text)
        assert "enforced" in find(browser, f"{row} .badge").text
        assert "not enforced" not in find(browser, row).text
        assert "VPN only" in find(browser, f"{row} .description").text
        delete_row(browser, row)
        wait(browser, lambda d: not made())
        wait(browser, lambda d: not all_of(d, row))
    finally:
        for restriction in created:
            if _by(
                stack, RESTRICTION_PATH, "ip_restrictions", lambda r: r["id"] == restriction["id"]
            ):
                stack.api("DELETE", f"{RESTRICTION_PATH}/{restriction['id']}")
        _delete_policies(stack, office, vpn)


# ---- both pages at both widths ---------------------------------------------------------
def test_both_pages_at_both_widths_without_overflow(stack, browser):
    """With long data (an RSA 4096 key, long ACL rules, ten policies with long descriptions,
    long metadata): at 1440 px every table fits its page and Sign out is on the brand's row; at
    1440 and 390 px nothing is wider than its box or reaches past the window, at 390 px with a
    row's editor open too; the long ACL rule wraps after dots and dashes only. A whole-page
    screenshot of each page at both widths."""

    long_meta = '{"purpose": "' + "long-metadata-" * 12 + '"}'
    key = rsa.generate_private_key(public_exponent=65537, key_size=4096).public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    long_rule = "bind:*.agents.eu-central.very-long-subdomain-name.deployments.example.com"
    cred = stack.api(
        "POST",
        CRED_PATH,
        {
            "public_key": f"{line.decode()} build-server-for-the-release-pipeline@example.com",
            "acl": [long_rule, "bind:db.internal.example.com:5432"],
            "description": "release pipeline",
            "metadata": long_meta,
        },
    )
    policies = [
        stack.api(
            "POST", "/ip_policies", {"description": f"branch office {n} of the northern region"}
        )
        for n in range(10)
    ]
    restriction = stack.api(
        "POST",
        RESTRICTION_PATH,
        {
            "type": "agent",
            "ip_policy_ids": [p["id"] for p in policies],
            "description": "agents from the branch offices only",
            "metadata": long_meta,
        },
    )
    rows = {
        "ssh_credentials": f"tr[data-id='{cred['id']}']",
        "ip_restrictions": f"tr[data-id='{restriction['id']}']",
    }
    try:
        for route in PAGES:
            open_page(browser, stack, route)
            find(browser, rows[route])
            if route == "ip_restrictions":  # the policies' names arrived
                wait(browser, lambda d: len(all_of(d, f"{rows[route]} .policies .name")) == 10)
            ssh_pages.check_wide(browser, route)
        _narrow(browser)
        for route in PAGES:
            open_page(browser, stack, route)
            find(browser, rows[route])
            full_snapshot(browser, f"390-{route}")
            _no_overflow(browser, route)
            assert browser.execute_script(INSIDE) == [], route
            if route == "ssh_credentials":  # the long rule wraps after dots and dashes only
                breaks = browser.execute_script(BREAKS, f"{rows[route]} td[data-label=ACL] code")
                assert breaks and all(char in ".-" for _, char in breaks), breaks
            ssh_pages.check_row_editor(browser, route, rows[route])
    finally:
        stack.api("DELETE", f"{RESTRICTION_PATH}/{restriction['id']}")
        for policy in policies:
            stack.api("DELETE", f"/ip_policies/{policy['id']}")
        stack.api("DELETE", f"{CRED_PATH}/{cred['id']}")
