"""The dashboard in headless Chromium against `make run`: what a person does, page by page."""

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.dashboard.conftest import snapshot
from tests.dashboard.support import (
    accept_confirm,
    all_of,
    find,
    go,
    loaded,
    sign_in,
    text_of,
    until,
    wait,
    wait_text,
)
from stacks.agents import SdkAgent

ROUTES = [
    "overview",
    "endpoints",
    "traffic",
    "agents",
    "credentials",
    "ssh_credentials",
    "api_keys",
    "bot_users",
    "reserved_domains",
    "reserved_addrs",
    "agent_ingresses",
    "tls_certificates",
    "certificate_authorities",
    "ssh_certificate_authorities",
    "ssh_certificates",
    "ip_policies",
    "ip_restrictions",
    "edges",
    "backends",
]


# Form controls without a label, and buttons or links without a name, on the page.
UNLABELLED = """
const bad = [];
for (const el of document.querySelectorAll("input, select, textarea")) {
  const labelled = (el.id && document.querySelector(`label[for="${el.id}"]`)) ||
                   el.getAttribute("aria-label") || el.closest("label");
  if (!labelled) bad.push(el.outerHTML.slice(0, 80));
}
for (const el of document.querySelectorAll("button, a[href]")) {
  if (!(el.textContent.trim() || el.getAttribute("aria-label"))) bad.push(el.outerHTML.slice(0, 80));
}
return bad;
"""


def test_sign_in_and_every_page_without_console_errors(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    assert browser.current_url.startswith(stack.dashboard_url)
    assert stack.key not in browser.current_url
    for route in ROUTES:
        go(browser, route)
        assert not all_of(browser, ".state.error"), text_of(browser)
        assert browser.find_element(By.CSS_SELECTOR, "h1").text
        assert stack.key not in browser.current_url
        assert browser.execute_script(UNLABELLED) == [], route
        snapshot(browser, f"1440-{route}")
    # the key is in this tab's sessionStorage only
    assert browser.execute_script("return window.localStorage.length") == 0
    assert (
        browser.execute_script("return window.sessionStorage.getItem('dashboard.apiKey')")
        == stack.key
    )
    assert stack.key not in browser.execute_script("return document.cookie")


def test_credential_token_is_shown_once_and_not_after_a_reload(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "credentials")
    form = find(browser, "form[aria-label='New authtoken']")
    form.find_element(By.NAME, "description").send_keys("browser-made")
    form.find_element(By.CSS_SELECTOR, ".add-rule").click()
    form.find_element(By.CSS_SELECTOR, "input.acl-rule").send_keys(
        "bind:browser.tunnels.localhost"
    )
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    token = find(browser, ".secret .secret-value").text.strip()
    snapshot(browser, "credential-token-once")
    assert len(token) > 20
    made = [
        c
        for c in stack.api("GET", "/credentials")["credentials"]
        if c["description"] == "browser-made"
    ]
    assert len(made) == 1 and made[0]["acl"] == ["bind:browser.tunnels.localhost"]
    assert made[0]["token"] is None  # the API never shows it again either
    wait_text(browser, made[0]["id"])
    browser.refresh()
    loaded(browser)
    find(browser, "#sign-out")  # still signed in (sessionStorage) …
    wait_text(browser, made[0]["id"])
    assert token not in browser.page_source  # … and the token is gone
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
    wait(
        browser,
        lambda d: stack.api("GET", f"/credentials/{cred['id']}")["acl"] == ["bind:*.example.com"],
    )
    wait_text(browser, "bind:*.example.com")


def test_reserved_domain_create_dns_check_missing_and_delete(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "reserved_domains")
    form = find(browser, "form[aria-label='Reserve a domain']")
    form.find_element(By.NAME, "domain").send_keys("*.shop.example.com")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_text(browser, "*.shop.example.com")
    domain = [
        d
        for d in stack.api("GET", "/reserved_domains")["reserved_domains"]
        if d["domain"] == "*.shop.example.com"
    ][0]
    row = find(browser, f"tr[data-id='{domain['id']}']")
    assert domain["cname_target"] in row.text  # both records to add
    assert domain["acme_challenge_cname_target"] in row.text
    assert "_acme-challenge.shop.example.com" in row.text
    row.find_element(By.CSS_SELECTOR, "button.dns-check").click()
    wait(browser, lambda d: len(all_of(d, f"tr[data-id='{domain['id']}'] li.check")) == 2)
    checks = all_of(browser, f"tr[data-id='{domain['id']}'] li.check")
    assert [c.get_attribute("data-status") for c in checks] == ["missing", "missing"]
    assert "Missing" in checks[0].text and "*.shop.example.com" in checks[0].text
    snapshot(browser, "reserved-domain-dns-check")
    assert "certificate" in row.text.lower() or "provisioning" in row.text.lower()
    row.find_element(By.CSS_SELECTOR, "button.danger").click()
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, f"tr[data-id='{domain['id']}']"))
    assert all(
        d["id"] != domain["id"] for d in stack.api("GET", "/reserved_domains")["reserved_domains"]
    )


def test_cloud_endpoint_policy_error_is_shown_at_the_policy(stack, browser, expected_errors):
    expected_errors.expect(400)
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "endpoints")
    form = find(browser, "form[aria-label='New cloud endpoint']")
    form.find_element(By.NAME, "url").send_keys("https://cloud-ui.tunnels.localhost")
    form.find_element(By.NAME, "traffic_policy").send_keys(
        "on_http_request:\n  - actions:\n      - type: no-such-action\n"
    )
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    error = find(
        browser, "form[aria-label='New cloud endpoint'] [data-field=traffic_policy] .field-error"
    )
    assert error.text and "ERR_" in error.text
    area = browser.find_element(
        By.CSS_SELECTOR, "form[aria-label='New cloud endpoint'] textarea[name=traffic_policy]"
    )
    assert area.get_attribute("aria-invalid") == "true"
    assert browser.switch_to.active_element == area


def test_online_sdk_agent_appears_on_the_overview_and_leaves_without_a_reload(stack, browser):
    cred = stack.api("POST", "/credentials", {"description": "overview agent"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "overview")
    wait_text(browser, "No agent is online")
    marker = browser.execute_script("window.__sameDocument = 'yes'; return 1")
    agent = SdkAgent(_EdgeOf(stack), cred["token"], [{"proto": "http"}])
    try:
        url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
        session = wait_for_session(stack, cred["id"])
        wait(
            browser,
            lambda d: all_of(d, f"[data-list=tunnel_sessions] tr[data-id='{session}']"),
            30,
            "the agent's session never showed",
        )
        wait_text(browser, url.split("://")[1])  # its endpoint too
        snapshot(browser, "overview-agent-online")
    finally:
        agent.stop()
    wait(
        browser,
        lambda d: not all_of(d, f"tr[data-id='{session}']"),
        60,
        "the stopped agent's session is still shown",
    )
    wait_text(browser, "No agent is online")
    assert marker == 1 and browser.execute_script("return window.__sameDocument") == "yes"


class _EdgeOf:
    """What SdkAgent needs of an edge, from `make run`'s printed lines."""

    def __init__(self, stack):
        self.server_addr, self.ca_path = stack.agent_addr, stack.ca_path


def wait_for_session(stack, credential_id: str) -> str:
    found = []

    def online() -> bool:
        found[:] = [
            s["id"]
            for s in stack.api("GET", "/tunnel_sessions")["tunnel_sessions"]
            if (s.get("credential") or {}).get("id") == credential_id
        ]
        return bool(found)

    assert until(online, 30), "the API never listed the agent's session"
    return found[0]


def _listed(stack, session_id: str) -> bool:
    sessions = stack.api("GET", "/tunnel_sessions")["tunnel_sessions"]
    return any(s["id"] == session_id for s in sessions)


def test_readable_at_360_px(stack, browser_factory):
    """Every page fits a 360 px wide window: nothing wider than the window."""
    browser = browser_factory(width=360, height=780)
    # headless windows are at least 500 px wide: the page is laid out as a 360 px phone's
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 360, "height": 780, "deviceScaleFactor": 1, "mobile": True},
    )
    stack.api("POST", "/reserved_domains", {"domain": "narrow.example.com"})
    sign_in(browser, stack.dashboard_url, stack.key)
    for route in ROUTES:
        browser.get(f"{stack.dashboard_url}#/{route}")
        wait(browser, lambda d: all_of(d, f".page-{route}"))
        loaded(browser)
        width = browser.execute_script("return document.documentElement.scrollWidth")
        inner = browser.execute_script("return window.innerWidth")
        snapshot(browser, f"360-{route}")
        assert inner == 360 and width <= inner, f"{route}: {width} px wide in {inner} px"


def test_sign_out_forgets_the_key(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    find(browser, "#sign-out").click()
    find(browser, "#sign-in input[name=api_key]")
    assert browser.execute_script("return window.sessionStorage.length") == 0
    assert browser.execute_script("return window.localStorage.length") == 0
    browser.refresh()
    find(browser, "#sign-in input[name=api_key]")
    assert not all_of(browser, "#sign-out")


def test_a_wrong_key_gets_the_apis_message_at_the_field(stack, browser, expected_errors):
    expected_errors.expect(401)
    browser.get(stack.dashboard_url)
    find(browser, "#sign-in input[name=api_key]").send_keys("not-a-key")
    browser.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()
    error = find(browser, "#sign-in [data-field=api_key] .field-error")
    assert "ERR_NGROK" in error.text
    assert browser.execute_script("return window.sessionStorage.length") == 0


def test_keyboard_only(stack, browser):
    """Sign in with the keyboard, then every page link and the sign-out button are reached
    with Tab, and a link is followed with Enter."""
    browser.get(stack.dashboard_url)
    box = find(browser, "#sign-in input[name=api_key]")
    assert browser.switch_to.active_element == box  # focus starts in the field
    box.send_keys(stack.key, Keys.ENTER)
    find(browser, "#sign-out")
    loaded(browser)
    body = browser.find_element(By.TAG_NAME, "body")
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    reached = set()
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        active = browser.switch_to.active_element
        reached.add(active.get_attribute("href") or active.get_attribute("id") or active.text)
    for route in ROUTES:
        assert any(r and r.endswith(f"#/{route}") for r in reached), (route, reached)
    assert "sign-out" in reached
    link = browser.find_element(By.CSS_SELECTOR, '#nav a[href="#/reserved_domains"]')
    browser.execute_script("arguments[0].focus()", link)
    link.send_keys(Keys.ENTER)
    find(browser, ".page-reserved_domains")
    assert body is not None


def test_times_are_shown_in_the_browsers_zone(stack, browser_factory):
    browser = browser_factory(tz="Asia/Tokyo")
    made = stack.api("POST", "/reserved_addrs", {"description": "zone check"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "reserved_addrs")
    cell = find(browser, f"tr[data-id='{made['id']}'] time")
    assert cell.get_attribute("datetime") == made["created_at"]
    utc = datetime.strptime(made["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    tokyo = utc.astimezone(timezone(timedelta(hours=9)))
    hour = tokyo.hour % 12 or 12
    assert f"{hour}:{tokyo:%M:%S}" in cell.text, (cell.text, tokyo)


def _agents_page_then_an_agent(stack, browser, **handlers):
    """The Agents page opened first, then an SDK agent started: its row appears live (no
    reload). The agent and its session id."""
    cred = stack.api("POST", "/credentials", {"description": "agents page"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "agents")
    browser.execute_script("window.__sameDocument = 'yes'")
    agent = SdkAgent(_EdgeOf(stack), cred["token"], [{"proto": "http"}], **handlers)
    agent.start()
    session = wait_for_session(stack, cred["id"])
    # the row, named by its authtoken's description once that is read (the row is drawn
    # again then: a click before it could land on the row being replaced)
    wait(browser, lambda d: "agents page" in find(d, f"tr[data-id='{session}']", 30).text, 30)
    return agent, session


def _same_document(browser) -> bool:
    return browser.execute_script("return window.__sameDocument") == "yes"


def _click(browser, session: str, action: str) -> None:
    find(browser, f"tr[data-id='{session}'] button[data-action='{action}']").click()
    accept_confirm(browser)


def test_stop_an_agent_from_the_agents_page(stack, browser):
    """The page follows sessions live: the agent's row appears and, once its agent accepted
    the Stop, leaves, with the success notice; never a reload."""
    agent, session = _agents_page_then_an_agent(stack, browser, stop_handler="exit")
    try:
        snapshot(browser, "agents-online")
        _click(browser, session, "stop")
        wait_text(browser, f"The agent of session {session} accepted: stopped.", 30)
        assert not _listed(stack, session)  # the API's 204 came after the session ended
        assert until(lambda: agent.process.poll() is not None, 30), "the agent did not stop"
        wait(browser, lambda d: not all_of(d, f"tr[data-id='{session}']"), 10)
        assert not all_of(browser, ".action-error")
        assert _same_document(browser)
        snapshot(browser, "agents-stopped")
    finally:
        agent.stop()


def test_a_refused_stop_shows_the_agents_answer_in_its_row(stack, browser, expected_errors):
    """An SDK agent without a stop handler refuses: the API's ERR_NGROK_805 with the agent's
    reason in that row's error line, which stays while the page follows the list; the session
    stays listed."""
    expected_errors.expect(400)
    agent, session = _agents_page_then_an_agent(stack, browser, stop_handler="none")
    try:
        _click(browser, session, "stop")
        line = f"tr[data-id='{session}'] .action-error"
        wait(browser, lambda d: "ERR_NGROK_805" in find(d, line).text, 30)
        text = find(browser, line).text
        assert "This ngrok agent does not support remote stopping:" in text, text
        assert "operation op_" in text
        assert not all_of(browser, ".notice:not(:empty)")
        # the focus stayed on the row's Stop button through its redraws (waiting, answered)
        focused = browser.execute_script(
            "const a = document.activeElement; window.__stop = a;"
            "return a.dataset.action + ' ' + a.closest('tr').dataset.id"
        )
        assert focused == f"stop {session}", focused
        time.sleep(3)  # a poll or more later: the row and its error line are still there,
        assert "ERR_NGROK_805" in find(browser, line).text  # not even drawn again (unchanged)
        assert browser.execute_script("return window.__stop.isConnected") is True
        assert _listed(stack, session) and agent.process.poll() is None
        assert _same_document(browser)
        snapshot(browser, "agents-stop-refused")
    finally:
        agent.stop()
    wait(browser, lambda d: not all_of(d, f"tr[data-id='{session}']"), 60)


def test_restart_an_agent_from_the_agents_page(stack, browser):
    agent, session = _agents_page_then_an_agent(stack, browser, restart_handler="exit")
    try:
        _click(browser, session, "restart")
        wait_text(browser, f"The agent of session {session} accepted: restarted.", 30)
        agent.wait_for("restart_command", 5)
        wait(browser, lambda d: not all_of(d, f"tr[data-id='{session}']"), 10)
        assert _same_document(browser)
    finally:
        agent.stop()


def test_edit_a_cloud_endpoints_policy(stack, browser):
    made = stack.api(
        "POST",
        "/endpoints",
        {
            "url": "https://policy-edit.tunnels.localhost",
            "type": "cloud",
            "traffic_policy": "on_http_request:\n  - actions:\n      - type: deny\n",
        },
    )
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "endpoints")
    row = find(browser, f"tr[data-id='{made['id']}']")
    row.find_element(By.CSS_SELECTOR, "button.edit-policy").click()
    area = find(browser, f"tr[data-id='{made['id']}'] textarea[name=traffic_policy]")
    assert browser.switch_to.active_element == area
    area.clear()
    area.send_keys(
        "on_http_request:\n  - actions:\n      - type: custom-response\n"
        "        config:\n          status_code: 418\n"
    )
    browser.find_element(
        By.CSS_SELECTOR, f"tr[data-id='{made['id']}'] form button[type=submit]"
    ).click()
    wait(
        browser, lambda d: "418" in stack.api("GET", f"/endpoints/{made['id']}")["traffic_policy"]
    )
    wait(browser, lambda d: "status_code: 418" in find(d, f"tr[data-id='{made['id']}'] pre").text)
    snapshot(browser, "endpoint-policy-edited")
    stack.api("DELETE", f"/endpoints/{made['id']}")


def test_bot_user_with_an_api_key_shown_once(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "bot_users")
    form = find(browser, "form[aria-label='New bot user']")
    form.find_element(By.NAME, "name").send_keys("ci-bot")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_text(browser, "ci-bot")
    bot = [b for b in stack.api("GET", "/bot_users")["bot_users"] if b["name"] == "ci-bot"][0]
    go(browser, "api_keys")
    form = find(browser, "form[aria-label='New API key']")
    form.find_element(By.NAME, "description").send_keys("for the bot")
    form.find_element(By.NAME, "owner_id").send_keys(bot["id"])
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    token = find(browser, ".secret .secret-value").text.strip()
    key = [k for k in stack.api("GET", "/api_keys")["keys"] if k["description"] == "for the bot"][
        0
    ]
    assert key["owner_id"] == bot["id"] and key["token"] is None
    wait_text(browser, key["id"])
    go(browser, "bot_users")
    go(browser, "api_keys")
    assert token not in browser.page_source


def test_ip_policy_with_a_rule_and_a_tcp_address(stack, browser):
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "ip_policies")
    form = find(browser, "form[aria-label='New IP policy']")
    form.find_element(By.NAME, "description").send_keys("office")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    rule_form = find(browser, "form[aria-label='New rule']")
    rule_form.find_element(By.NAME, "cidr").send_keys("203.0.113.0/24")
    rule_form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_text(browser, "203.0.113.0/24")
    [rule] = [
        r
        for r in stack.api("GET", "/ip_policy_rules")["ip_policy_rules"]
        if r["cidr"] == "203.0.113.0/24"
    ]
    assert rule["action"] == "allow"
    go(browser, "reserved_addrs")
    form = find(browser, "form[aria-label='Reserve a TCP address']")
    form.find_element(By.NAME, "description").send_keys("db")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    addr = wait(
        browser,
        lambda d: [
            a
            for a in stack.api("GET", "/reserved_addrs")["reserved_addrs"]
            if a["description"] == "db"
        ],
    )[0]
    wait_text(browser, addr["addr"])
    find(browser, f"tr[data-id='{addr['id']}'] button.danger").click()
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, f"tr[data-id='{addr['id']}']"))


CLS_SCRIPT = """
const done = arguments[arguments.length - 1];
let total = 0, inputs = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (entry.hadRecentInput) inputs += 1; else total += entry.value;
  }
}).observe({type: "layout-shift", buffered: true});
setTimeout(() => done(total), 600);
"""


def test_no_layout_shift_when_data_arrives(stack, browser):
    """Cumulative layout shift of each page, loaded afresh, while its lists arrive: under 0.1
    (what Web Vitals call good)."""
    stack.api("POST", "/reserved_domains", {"domain": "cls.example.com"})
    stack.api("POST", "/credentials", {"description": "cls", "acl": ["bind:cls.example.com"]})
    sign_in(browser, stack.dashboard_url, stack.key)
    # every request takes 300 ms more: the loading states are painted before the data comes
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 300, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    scores = {}
    for route in ROUTES:
        browser.get(f"{stack.dashboard_url}#/{route}")
        browser.refresh()  # a fresh document: its own shift record
        wait(browser, lambda d: all_of(d, f".page-{route}"))
        loaded(browser)
        scores[route] = browser.execute_async_script(CLS_SCRIPT)
    assert all(score < 0.1 for score in scores.values()), sorted(
        scores.items(), key=lambda kv: -kv[1]
    )
    # the measure itself: a block pushed in above the lists is seen as a shift
    browser.execute_script(
        "setTimeout(() => document.querySelector('main').prepend("
        "Object.assign(document.createElement('div'), "
        "{className: 'card', textContent: 'x'.repeat(3000)})), 50)"
    )
    assert browser.execute_async_script(CLS_SCRIPT) > 0.01


def test_a_deleted_key_signs_the_page_out_with_the_apis_message(stack, browser, expected_errors):
    expected_errors.expect(401)
    made = stack.api("POST", "/api_keys", {"description": "short-lived"})
    sign_in(browser, stack.dashboard_url, made["token"])
    go(browser, "overview")
    stack.api("DELETE", f"/api_keys/{made['id']}")
    find(browser, "#sign-in input[name=api_key]", timeout=30)  # the next poll is refused
    assert "ERR_NGROK" in find(browser, ".sign-in-page .state.error").text
    assert browser.execute_script("return window.sessionStorage.length") == 0


def test_lists_page_over_the_apis_cursors(stack, browser):
    """More bot users than a page holds: the first page, then "Load more" follows
    next_page_uri until the last one."""
    names = [f"pager-{i:03d}" for i in range(101)]
    for name in names:
        stack.api("POST", "/bot_users", {"name": name})
    total = len(stack.api("GET", "/bot_users?limit=100")["bot_users"])
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "bot_users")
    rows = lambda d: all_of(d, "[data-list=bot_users] tbody tr")  # noqa: E731
    assert len(rows(browser)) == total == 100
    for _ in range(5):  # follow "Load more" to the last page
        buttons = all_of(browser, "[data-list=bot_users] .more button")
        if not buttons:
            break
        before = len(rows(browser))
        buttons[0].click()
        wait(browser, lambda d: len(rows(d)) > before)
    shown = [r.find_elements(By.CSS_SELECTOR, "td")[1].text for r in rows(browser)]
    assert set(names) <= set(shown) and len(shown) == len(
        set(r.get_attribute("data-id") for r in rows(browser))
    )
    assert not all_of(browser, "[data-list=bot_users] .more button")


def test_a_followed_list_is_left_alone_once_a_person_loaded_more(stack, browser):
    """The overview follows its lists, but once "Load more" brought the second page of
    endpoints, a change of the first page (a new endpoint) does not draw the list again: the
    rows the person paged to stay."""

    def cloud(name: str) -> str:
        body = {
            "url": f"https://{name}.tunnels.localhost",
            "type": "cloud",
            "traffic_policy": "on_http_request: [{actions: [{type: deny}]}]",
        }
        return stack.api("POST", "/endpoints", body)["id"]

    with ThreadPoolExecutor(4) as pool:  # the API serves requests in threads
        made = list(pool.map(cloud, [f"follow-{i:03d}" for i in range(101)]))
    try:
        total = len(stack.api("GET", "/endpoints")["endpoints"])
        nxt = stack.api("GET", "/endpoints")["next_page_uri"]
        total += len(stack.api("GET", nxt[nxt.index("/endpoints") :])["endpoints"])
        sign_in(browser, stack.dashboard_url, stack.key)
        go(browser, "overview")
        rows = lambda d: all_of(d, "[data-list=endpoints] tbody tr")  # noqa: E731
        wait(browser, lambda d: len(rows(d)) == 100)
        find(browser, "[data-list=endpoints] .more button").click()
        wait(browser, lambda d: len(rows(d)) == total)
        made.append(cloud("follow-new"))
        time.sleep(5)  # two polls
        assert len(rows(browser)) == total
        assert made[-1] not in [r.get_attribute("data-id") for r in rows(browser)]
    finally:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda e: stack.api("DELETE", f"/endpoints/{e}"), made))


def test_edge_route_module_and_backend_read_and_delete(stack, browser, expected_errors):
    expected_errors.expect(409)  # the backend is still used by the route
    backend = stack.api("POST", "/backends/http_response", {"body": "hi", "status_code": 200})
    edge = stack.api("POST", "/edges/https", {"hostports": ["legacy-ui.tunnels.localhost:443"]})
    route = stack.api(
        "POST",
        f"/edges/https/{edge['id']}/routes",
        {"match_type": "path_prefix", "match": "/app", "backend": {"backend_id": backend["id"]}},
    )
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "edges")
    edge_row = f"[data-list=https_edges] tr[data-id='{edge['id']}']"
    route_item = f"{edge_row} li[data-route='{route['id']}']"
    assert "legacy-ui.tunnels.localhost:443" in find(browser, edge_row).text
    assert "/app" in find(browser, route_item).text and "backend" in find(browser, route_item).text
    backend_row = f"[data-list=backends_http_response] tr[data-id='{backend['id']}']"
    go(browser, "backends")
    find(browser, f"{backend_row} button.danger").click()
    accept_confirm(browser)
    refused = find(browser, f"{backend_row} .action-error")  # the API's 409, at the button
    assert "still used" in refused.text and "ERR_CONFLICT" in refused.text
    go(browser, "edges")
    find(browser, f"{route_item} .modules button").click()  # remove the route's backend
    accept_confirm(browser)
    wait(browser, lambda d: "no module" in find(d, route_item).text)
    assert stack.api("GET", f"/edges/https/{edge['id']}/routes/{route['id']}")["backend"] is None
    find(browser, f"{route_item} .actions button.danger").click()  # delete the route
    accept_confirm(browser)
    wait(browser, lambda d: "no route" in find(d, edge_row).text)
    snapshot(browser, "legacy-edges")
    find(browser, f"{edge_row} .row-actions button.danger").click()  # delete the edge
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, edge_row))
    go(browser, "backends")
    find(browser, f"{backend_row} .row-actions button.danger").click()
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, backend_row))
