"""The pages for every resource a user manages (TLS certificates, certificate authorities,
edges with routes and modules, backends of every kind), the certificate status as it is, and
the smaller details of the pages, in headless Chromium against `make run` (the stack fixture).

Every example a form shows (its placeholders) is submitted here as it is, and the API must
accept it."""

from selenium.webdriver.common.by import By

from chalicelib.core import acme_orders
from stacks.agents import SdkAgent
from stacks.certs import SmallCA
from tests.dashboard.conftest import snapshot
from tests.dashboard.support import (
    accept_confirm,
    all_of,
    find,
    go,
    loaded,
    sign_in,
    text_of,
    wait,
    wait_text,
)
from tests.dashboard.test_dashboard import _EdgeOf, wait_for_session

NEW_PAGES = ["tls_certificates", "certificate_authorities", "edges", "backends"]
CHANGED_PAGES = ["reserved_domains", "agents", "endpoints", "overview"]

# Where a code element's text wraps: the character before each line break (Range rects).
BREAKS = """
const out = [];
for (const el of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let prevTop = null, prevChar = null;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i); range.setEnd(node, i + 1);
      const rect = range.getClientRects()[0];
      if (!rect) continue;
      if (prevTop !== null && rect.top > prevTop + 2) out.push([el.textContent, prevChar]);
      prevTop = rect.top; prevChar = node.data[i];
    }
  }
}
return out;
"""


def full_snapshot(driver, name: str) -> str:
    """The whole page (beyond the window's height) as a screenshot in the test output."""
    import base64
    import os

    from tests.dashboard.conftest import OUTPUT_DIR

    os.makedirs(OUTPUT_DIR, exist_ok=True)
    width = driver.execute_script("return document.documentElement.clientWidth")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path = os.path.join(OUTPUT_DIR, f"{name}.png")
    with open(path, "wb") as out:
        out.write(base64.b64decode(shot["data"]))
    return path


def _narrow(browser) -> None:
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
    )


def _no_overflow(browser, route: str) -> None:
    width = browser.execute_script("return document.documentElement.scrollWidth")
    inner = browser.execute_script("return window.innerWidth")
    assert width <= inner, f"{route}: {width} px wide in {inner} px"


def _fill_examples(form) -> dict:
    """Type every example (placeholder) of the form into its empty field, as a person
    copying the examples would; the examples used, by field name."""
    used = {}
    for box in form.find_elements(By.CSS_SELECTOR, "input[placeholder], textarea[placeholder]"):
        example = box.get_attribute("placeholder")
        if example and not box.get_attribute("value"):
            box.send_keys(example)
            used[box.get_attribute("name")] = example
    return used


def _set(driver, element, text: str) -> None:
    """A long value (a PEM) put in a field at once, as a paste would."""
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}))",
        element,
        text,
    )


def _submit(form) -> None:
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def _field_error(browser, form_css: str, name: str) -> str:
    error = find(browser, f"{form_css} [data-field='{name}'] .field-error")
    wait(browser, lambda d: error.text.strip())
    return error.text


def _https_status(stack, host: str, port: int) -> int:
    """The status an HTTPS GET of ``host`` on the edge's ``port`` answers (SNI ``host``, the
    edge's CA trusted)."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=stack.ca_path)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                chunk = tls.recv(4096)
                if not chunk:
                    break
                head += chunk
    return int(head.split(b" ", 2)[1])


def _by(stack, path, key, pred):
    return [x for x in stack.api("GET", path)[key] if pred(x)]


# ---- every new page at both widths -----------------------------------------------------
def test_new_pages_at_both_widths_without_overflow(stack, browser_factory):
    """Each new or changed page at 1440 px (Sign out on the brand's row) and 390 px (nothing
    wider than the window), a screenshot of each, no error state, every control labelled."""
    from tests.dashboard.test_dashboard import UNLABELLED

    ca = SmallCA("Pages CA")
    ca_made = stack.api(
        "POST", "/certificate_authorities", {"ca_pem": ca.pem, "description": "pages"}
    )
    domain = stack.api(
        "POST", "/reserved_domains", {"domain": "*.widths.example.com", "description": "both"}
    )
    cert = stack.api("POST", "/tls_certificates", ca.upload_body(["*.widths.example.com"]))
    stack.api("PATCH", f"/reserved_domains/{domain['id']}", {"certificate_id": cert["id"]})
    backend = stack.api("POST", "/backends/http_response", {"status_code": 503, "body": "down"})
    stack.api("POST", "/backends/tunnel_group", {"labels": {"service": "widths"}})
    edge = stack.api("POST", "/edges/https", {"hostports": ["a.widths.example.com:443"]})
    stack.api(
        "POST",
        f"/edges/https/{edge['id']}/routes",
        {"match_type": "path_prefix", "match": "/", "backend": {"backend_id": backend["id"]}},
    )
    tls_edge = stack.api(  # a TLS edge with every module set: its row at both widths
        "POST",
        "/edges/tls",
        {
            "hostports": ["tls.widths.example.com:443"],
            "description": "TLS edge at both widths",
            "backend": {"backend_id": backend["id"]},
            "tls_termination": {"terminate_at": "edge", "min_version": "1.2"},
            "mutual_tls": {"certificate_authority_ids": [ca_made["id"]]},
            "traffic_policy": {"value": "on_tcp_connect: [{actions: [{type: deny}]}]"},
        },
    )
    wide = browser_factory(width=1440, height=900)
    sign_in(wide, stack.dashboard_url, stack.key)
    for route in NEW_PAGES + CHANGED_PAGES:
        go(wide, route)
        assert not all_of(wide, ".state.error"), text_of(wide)
        assert wide.execute_script(UNLABELLED) == [], route
        sign_out = find(wide, "#sign-out").rect
        brand = find(wide, ".brand").rect
        assert sign_out["y"] < brand["y"] + brand["height"], (sign_out, brand)  # one row
        # every table fits its width at 1440 px: a row's buttons are in view, not scrolled to
        assert (
            wide.execute_script(
                "return [...document.querySelectorAll('.table-wrap')]"
                ".filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.ariaLabel)"
            )
            == []
        ), route
        full_snapshot(wide, f"1440-{route}")
    narrow = browser_factory(width=500, height=844)
    _narrow(narrow)
    sign_in(narrow, stack.dashboard_url, stack.key)
    for route in NEW_PAGES + CHANGED_PAGES:
        narrow.get(f"{stack.dashboard_url}#/{route}")
        wait(narrow, lambda d: all_of(d, f".page-{route}"))
        loaded(narrow)
        assert not all_of(narrow, ".state.error"), text_of(narrow)
        full_snapshot(narrow, f"390-{route}")
        _no_overflow(narrow, route)
    # the editors opened in a row (a domain's, a TLS edge's) fit the narrow window too
    for route, row in (
        ("reserved_domains", f"tr[data-id='{domain['id']}']"),
        ("edges", f"[data-list=tls_edges] tr[data-id='{tls_edge['id']}']"),
    ):
        for browser, width in ((wide, 1440), (narrow, 390)):
            browser.get(f"{stack.dashboard_url}#/{route}")
            find(browser, f"{row} button[data-action=edit]").click()
            find(browser, f"{row} form")
            loaded(browser)
            full_snapshot(browser, f"{width}-{route}-editor")
            _no_overflow(browser, f"{route} editor")


# ---- item 4: the smaller items ---------------------------------------------------------
def test_long_names_break_at_dots_not_mid_word(stack, browser_factory):
    """CNAME targets and names wrap only after . - / : @ (never inside a word, nor inside an
    id) at 1440 and 390 px; nothing overflows at 390."""
    made = stack.api("POST", "/reserved_domains", {"domain": "*.long-names.shop.example.com"})
    for width in (1440, 390):
        browser = browser_factory(width=max(width, 500), height=900)
        if width == 390:
            _narrow(browser)
        sign_in(browser, stack.dashboard_url, stack.key)
        browser.get(f"{stack.dashboard_url}#/reserved_domains")
        find(browser, f"tr[data-id='{made['id']}']")
        loaded(browser)
        breaks = browser.execute_script(BREAKS, f"tr[data-id='{made['id']}'] code")
        assert all(char in ".-/:@" for _, char in breaks), breaks
        if width == 390:
            assert breaks, "nothing wrapped at 390 px: the check checked nothing"
            _no_overflow(browser, "reserved_domains")
        snapshot(browser, f"long-names-{width}")


def test_agents_are_named_by_their_authtokens_description(stack, browser):
    cred = stack.api("POST", "/credentials", {"description": "laptop agent"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "agents")
    agent = SdkAgent(_EdgeOf(stack), cred["token"], [{"proto": "http"}])
    try:
        agent.start()
        session = wait_for_session(stack, cred["id"])
        row = f"tr[data-id='{session}']"
        wait(browser, lambda d: "laptop agent" in find(d, row, 30).text, 30)
        assert cred["id"] in find(browser, row).text  # the id below it
        snapshot(browser, "agents-by-description")
        go(browser, "overview")
        wait(browser, lambda d: "laptop agent" in find(d, row, 30).text, 30)
        # an agent endpoint and a cloud endpoint show the API's url and host:port alike
        cloud = stack.api(
            "POST",
            "/endpoints",
            {
                "url": "https://same-shape.tunnels.localhost",
                "type": "cloud",
                "traffic_policy": "on_http_request: [{actions: [{type: deny}]}]",
            },
        )
        # both name the port the edge serves HTTPS on (make run: not 443)
        port = stack.https_port
        assert cloud["url"] == f"https://same-shape.tunnels.localhost:{port}", cloud
        assert cloud["hostport"] == f"same-shape.tunnels.localhost:{port}", cloud
        go(browser, "endpoints")
        shown = 0
        for endpoint in stack.api("GET", "/endpoints")["endpoints"]:
            if endpoint["id"] not in (cloud["id"],) and endpoint["type"] != "agent":
                continue
            if endpoint["type"] == "agent" and endpoint["scheme"] == "https":
                assert endpoint["url"].endswith(f":{port}"), endpoint
            cell = find(browser, f"tr[data-id='{endpoint['id']}'] .endpoint-url")
            assert endpoint["url"] in cell.text.replace("\n", "")
            assert endpoint["hostport"] in cell.text.replace("\n", "")
            shown += 1
        assert shown >= 2
        # the URL shown is served there: the cloud endpoint's policy answers on that port
        assert _https_status(stack, "same-shape.tunnels.localhost", port) == 403
        snapshot(browser, "endpoints-urls")
        stack.api("DELETE", f"/endpoints/{cloud['id']}")
    finally:
        agent.stop()


def test_domain_description_and_the_certificate_served_without_acme(stack, browser):
    """`make run` has no ACME directory: a managed domain says the edge serves its fallback
    certificate and why, never "in progress"."""
    made = stack.api(
        "POST", "/reserved_domains", {"domain": "fallback.example.com", "description": "shop"}
    )
    job = made["certificate_management_status"]["provisioning_job"]
    assert job["msg"] == acme_orders.NO_ACME_FALLBACK_MSG
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "reserved_domains")
    row = find(browser, f"tr[data-id='{made['id']}']")
    assert "shop" in row.find_element(By.CSS_SELECTOR, ".description").text
    cert = row.find_element(By.CSS_SELECTOR, ".cert").text
    assert "fallback certificate" in cert and "No ACME directory is configured" in cert
    assert "in progress" not in cert
    snapshot(browser, "domain-fallback-certificate")


def test_an_error_at_a_field_carries_the_operation_id(stack, browser, expected_errors):
    expected_errors.expect(400)
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "endpoints")
    css = "form[aria-label='New cloud endpoint']"
    form = find(browser, css)
    form.find_element(By.NAME, "url").send_keys("https://op-id.tunnels.localhost")
    form.find_element(By.NAME, "traffic_policy").send_keys("on_http_request: [{actions: [x]}]")
    _submit(form)
    text = _field_error(browser, css, "traffic_policy")
    assert "ERR_NGROK_18002" in text and "operation op_" in text, text


def test_the_cloud_endpoint_forms_examples_are_accepted(stack, browser):
    stack.api("POST", "/reserved_domains", {"domain": "examples-cloud.example.com"})
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "endpoints")
    css = "form[aria-label='New cloud endpoint']"
    wait(
        browser,
        lambda d: find(d, f"{css} input[name=url]").get_attribute("placeholder"),
        message="no URL example",
    )
    used = _fill_examples(find(browser, css))
    assert set(used) == {"url", "traffic_policy"}, used
    _submit(find(browser, css))
    host = used["url"].split("://")[1]  # the API shows it with the edge's port
    wait(browser, lambda d: _by(stack, "/endpoints", "endpoints", lambda e: e["host"] == host))
    [made] = _by(stack, "/endpoints", "endpoints", lambda e: e["host"] == host)
    assert made["url"] == f"{used['url']}:{stack.https_port}"
    assert made["traffic_policy"] == used["traffic_policy"]
    stack.api("DELETE", f"/endpoints/{made['id']}")


# ---- item 2: TLS certificates and certificate authorities -------------------------------
def test_upload_a_certificate_attach_it_to_a_domain_and_detach_it(stack, browser, expected_errors):
    expected_errors.expect(400)
    ca = SmallCA("Upload CA")
    domain = stack.api("POST", "/reserved_domains", {"domain": "upload.example.com"})
    body = ca.upload_body(["upload.example.com"])
    other = ca.upload_body(["upload.example.com"])
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "tls_certificates")
    css = "form[aria-label='Upload a TLS certificate']"
    form = find(browser, css)
    form.find_element(By.NAME, "description").send_keys("shop certificate")
    _set(browser, form.find_element(By.NAME, "certificate_pem"), body["certificate_pem"])
    _set(browser, form.find_element(By.NAME, "private_key_pem"), other["private_key_pem"])
    _submit(form)  # another key: the API's 400 at the key
    assert "operation op_" in _field_error(browser, css, "private_key_pem")
    _set(
        browser,
        find(browser, css).find_element(By.NAME, "private_key_pem"),
        body["private_key_pem"],
    )
    _submit(find(browser, css))
    wait_text(browser, "shop certificate")
    [cert] = _by(
        stack,
        "/tls_certificates",
        "tls_certificates",
        lambda c: c["description"] == "shop certificate",
    )
    row = f"tr[data-id='{cert['id']}']"
    assert "valid" in find(browser, row).text and "Uploaded" in find(browser, row).text
    assert "upload.example.com" in find(browser, row).text
    find(browser, f"{row} button[data-action=attach]").click()
    attach = find(browser, f"{row} form")
    attach.find_element(
        By.CSS_SELECTOR, f"select[name=certificate_id] option[value='{domain['id']}']"
    ).click()
    _submit(attach)
    wait(
        browser,
        lambda d: (stack.api("GET", f"/reserved_domains/{domain['id']}")["certificate"] or {}).get(
            "id"
        )
        == cert["id"],
    )
    wait(browser, lambda d: "no domain" not in find(d, row).text)
    snapshot(browser, "tls-certificate-attached")
    go(browser, "reserved_domains")
    domain_row = f"tr[data-id='{domain['id']}']"
    assert cert["id"] in find(browser, f"{domain_row} .served").text
    find(browser, f"{domain_row} .served button").click()  # Detach
    accept_confirm(browser)
    wait(browser, lambda d: "fallback certificate" in find(d, f"{domain_row} .served").text)
    assert stack.api("GET", f"/reserved_domains/{domain['id']}")["certificate"] is None
    go(browser, "tls_certificates")
    find(browser, f"{row} button.danger").click()
    accept_confirm(browser)
    wait(browser, lambda d: not all_of(d, row))


def test_upload_a_certificate_authority(stack, browser, expected_errors):
    expected_errors.expect(400)
    ca = SmallCA("Clients CA")
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "certificate_authorities")
    css = "form[aria-label='Upload a certificate authority']"
    form = find(browser, css)
    form.find_element(By.NAME, "ca_pem").send_keys("not a certificate")
    _submit(form)
    assert "ERR_" in _field_error(browser, css, "ca_pem")
    form = find(browser, css)
    form.find_element(By.NAME, "description").send_keys("clients")
    _set(browser, form.find_element(By.NAME, "ca_pem"), ca.pem)
    _submit(form)
    wait_text(browser, "Clients CA")
    [made] = _by(
        stack,
        "/certificate_authorities",
        "certificate_authorities",
        lambda c: c["description"] == "clients",
    )
    assert "key_cert_sign" in find(browser, f"tr[data-id='{made['id']}']").text
    snapshot(browser, "certificate-authority-uploaded")


# ---- item 2: edges, routes, modules ----------------------------------------------------
def test_edges_forms_examples_are_accepted_and_modules_edited(stack, browser, expected_errors):
    """The HTTPS edge, route and TCP edge forms filled with their own examples (hostports
    from the account's reservations) are accepted; a route is edited (a module emptied is
    removed); an invalid pattern is the API's error at its field."""
    expected_errors.expect(400)
    stack.api("POST", "/reserved_domains", {"domain": "edges-form.example.com"})
    addr = stack.api("POST", "/reserved_addrs", {"description": "edges form"})
    backend = stack.api(
        "POST", "/backends/http_response", {"description": "edges form", "status_code": 200}
    )
    policy = stack.api("POST", "/ip_policies", {"description": "edges form"})
    ca = stack.api(
        "POST",
        "/certificate_authorities",
        {"ca_pem": SmallCA("Edge CA").pem, "description": "edge"},
    )
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "edges")
    css = "form[aria-label='New HTTPS edge']"
    wait(  # the examples and choices are the account's own: there once read
        browser,
        lambda d: find(d, f"{css} input[name=hostports]").get_attribute("placeholder"),
        message="no hostport example",
    )
    form = find(browser, css)
    used = _fill_examples(form)
    assert used == {"hostports": "edges-form.example.com:443"}, used
    form.find_element(
        By.CSS_SELECTOR, "select[name='tls_termination.min_version'] option[value='1.3']"
    ).click()
    form.find_element(By.CSS_SELECTOR, f"option[value='{ca['id']}']").click()
    _submit(form)
    wait(
        browser,
        lambda d: _by(
            stack,
            "/edges/https",
            "https_edges",
            lambda e: e["hostports"] == ["edges-form.example.com:443"],
        ),
    )
    [edge] = _by(
        stack,
        "/edges/https",
        "https_edges",
        lambda e: e["hostports"] == ["edges-form.example.com:443"],
    )
    assert edge["tls_termination"]["min_version"] == "1.3"
    assert [c["id"] for c in edge["mutual_tls"]["certificate_authorities"]] == [ca["id"]]
    row = f"[data-list=https_edges] tr[data-id='{edge['id']}']"
    find(browser, f"{row} button[data-action=add-route]").click()
    route_css = f"{row} form"
    route_form = find(browser, route_css)
    used = _fill_examples(route_form)
    assert len(used) == 8, used  # match, policy, allow, deny, 2 x add, 2 x remove
    route_form.find_element(By.CSS_SELECTOR, f"option[value='{backend['id']}']").click()
    route_form.find_element(By.CSS_SELECTOR, f"option[value='{policy['id']}']").click()
    _submit(route_form)
    wait(browser, lambda d: stack.api("GET", f"/edges/https/{edge['id']}")["routes"])
    [route] = stack.api("GET", f"/edges/https/{edge['id']}")["routes"]
    assert route["match"] == "/" and route["backend"]["backend"]["id"] == backend["id"]
    assert route["ip_restriction"]["ip_policies"][0]["id"] == policy["id"]
    assert route["user_agent_filter"]["allow"] == [used["user_agent_filter.allow"]]
    assert route["request_headers"]["remove"] == [used["request_headers.remove"]]
    assert route["traffic_policy"]["value"] == used["traffic_policy.value"]
    item = f"{row} li[data-route='{route['id']}']"
    wait(browser, lambda d: "user_agent_filter" in find(d, item).text)
    snapshot(browser, "edges-route-added")
    # edit: an invalid pattern is refused at its field; then the filter emptied is removed
    find(browser, f"{item} button[data-action=edit-route]").click()
    editor = find(browser, route_css)
    allow = editor.find_element(By.NAME, "user_agent_filter.allow")
    allow.clear()
    allow.send_keys("(")
    _submit(editor)
    assert "RE2" in _field_error(browser, route_css, "user_agent_filter.allow")
    editor = find(browser, route_css)
    for name in ("user_agent_filter.allow", "user_agent_filter.deny"):
        editor.find_element(By.NAME, name).clear()
    editor.find_element(By.NAME, "match").clear()
    editor.find_element(By.NAME, "match").send_keys("/shop")
    _submit(editor)

    def saved() -> bool:  # the PATCH, then the emptied module's DELETE
        now = stack.api("GET", f"/edges/https/{edge['id']}/routes/{route['id']}")
        return now["match"] == "/shop" and now["user_agent_filter"] is None

    wait(browser, lambda d: saved())
    now = stack.api("GET", f"/edges/https/{edge['id']}/routes/{route['id']}")
    assert now["backend"] is not None and now["request_headers"] is not None  # kept
    # the TCP edge form with its examples: the reserved address and the policy
    tcp_css = "form[aria-label='New TCP edge']"
    used = _fill_examples(find(browser, tcp_css))
    assert used["hostports"] == addr["addr"], used
    _submit(find(browser, tcp_css))
    wait(
        browser,
        lambda d: _by(
            stack, "/edges/tcp", "tcp_edges", lambda e: e["hostports"] == [addr["addr"]]
        ),
    )
    [tcp] = _by(stack, "/edges/tcp", "tcp_edges", lambda e: e["hostports"] == [addr["addr"]])
    assert tcp["traffic_policy"]["value"] == used["traffic_policy.value"]
    find(browser, f"[data-list=tcp_edges] tr[data-id='{tcp['id']}']")
    snapshot(browser, "edges-tcp-added")
    # clean up: the edges free the names and the backend
    stack.api("DELETE", f"/edges/tcp/{tcp['id']}")
    stack.api("DELETE", f"/edges/https/{edge['id']}")


# ---- item 2: backends ------------------------------------------------------------------
def test_backends_forms_examples_are_accepted_and_edited(stack, browser, expected_errors):
    expected_errors.expect(400)
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "backends")
    made = {}
    for kind in ("http_response", "tunnel_group"):
        css = f"form[data-kind={kind}]"
        find(browser, css).find_element(By.NAME, "description").send_keys(f"examples {kind}")
        used = _fill_examples(find(browser, css))
        assert used, kind
        _submit(find(browser, css))
        wait(
            browser,
            lambda d: _by(
                stack,
                f"/backends/{kind}",
                "backends",
                lambda b: b["description"] == f"examples {kind}",
            ),
        )
        [made[kind]] = _by(
            stack,
            f"/backends/{kind}",
            "backends",
            lambda b: b["description"] == f"examples {kind}",
        )
    assert made["http_response"]["status_code"] == 503
    assert made["http_response"]["headers"] == {"content-type": "text/plain"}
    assert made["tunnel_group"]["labels"] == {"service": "shop"}
    for kind in ("failover", "weighted"):
        css = f"form[data-kind={kind}]"
        # the examples are the account's own members: there once the lists arrived
        wait(
            browser,
            lambda d: find(d, f"{css} textarea[name=backends]").get_attribute("placeholder"),
        )
        find(browser, css).find_element(By.NAME, "description").send_keys(f"examples {kind}")
        used = _fill_examples(find(browser, css))
        _submit(find(browser, css))
        wait(
            browser,
            lambda d: _by(
                stack,
                f"/backends/{kind}",
                "backends",
                lambda b: b["description"] == f"examples {kind}",
            ),
        )
        [made[kind]] = _by(
            stack,
            f"/backends/{kind}",
            "backends",
            lambda b: b["description"] == f"examples {kind}",
        )
    assert len(made["failover"]["backends"]) >= 1
    assert sum(made["weighted"]["backends"].values()) > 0
    snapshot(browser, "backends-made")
    # an invalid label: the API's message at the labels field
    css = "form[data-kind=tunnel_group]"
    find(browser, css).find_element(By.NAME, "labels").send_keys("a b=x")
    _submit(find(browser, css))
    assert "labels" in _field_error(browser, css, "labels")
    # edit the HTTP response backend's status in its row
    row = f"[data-list=backends_http_response] tr[data-id='{made['http_response']['id']}']"
    find(browser, f"{row} button[data-action=edit]").click()
    status = find(browser, f"{row} form input[name=status_code]")
    status.clear()
    status.send_keys("418")
    _submit(find(browser, f"{row} form"))
    wait(
        browser,
        lambda d: stack.api("GET", f"/backends/http_response/{made['http_response']['id']}")[
            "status_code"
        ]
        == 418,
    )
    wait(browser, lambda d: "418" in find(d, row).text)
    for kind in ("weighted", "failover", "tunnel_group", "http_response"):
        stack.api("DELETE", f"/backends/{kind}/{made[kind]['id']}")


# ---- TLS edges -------------------------------------------------------------------------
def _tls_edge_by_hostport(stack, hostport):
    return _by(stack, "/edges/tls", "tls_edges", lambda e: e["hostports"] == [hostport])


def test_tls_edges_form_examples_accepted_and_modules_set_and_cleared(
    stack, browser, expected_errors
):
    """The TLS edge form with its examples (a free reserved domain's :443, the on_tcp_connect
    policy), a backend, an IP policy, TLS termination at the edge and a CA is created as typed;
    mutual TLS with a passed-through handshake is the API's ERR_NGROK_1694 at the mutual TLS
    field with the operation id; the editor empties TLS termination and mutual TLS (both
    removed, the rest kept); a module's Remove button; the edge's Delete."""
    from selenium.webdriver.support.ui import Select

    expected_errors.expect(400)
    stack.api("POST", "/reserved_domains", {"domain": "tls-edge-a.example.com"})
    stack.api("POST", "/reserved_domains", {"domain": "*.tls-edge-b.example.com"})
    backend = stack.api("POST", "/backends/tunnel_group", {"labels": {"service": "tls-edge"}})
    policy = stack.api("POST", "/ip_policies", {"description": "tls edge"})
    ca = stack.api(
        "POST",
        "/certificate_authorities",
        {"ca_pem": SmallCA("TLS edge CA").pem, "description": "tls edge"},
    )
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "edges")
    css = "form[aria-label='New TLS edge']"
    wait(
        browser,
        lambda d: find(d, f"{css} option[value='{ca['id']}']")
        and find(d, f"{css} input[name=hostports]").get_attribute("placeholder"),
        message="no hostport example",
    )
    https_example = find(browser, "form[aria-label='New HTTPS edge'] input[name=hostports]")
    form = find(browser, css)
    used = _fill_examples(form)
    assert set(used) == {"hostports", "traffic_policy.value"}, used
    # the HTTPS form offers another free domain when there is one
    assert https_example.get_attribute("placeholder") != used["hostports"]
    Select(form.find_element(By.NAME, "backend.backend_id")).select_by_value(backend["id"])
    Select(form.find_element(By.NAME, "ip_restriction.ip_policy_ids")).select_by_value(
        policy["id"]
    )
    Select(form.find_element(By.NAME, "mutual_tls.certificate_authority_ids")).select_by_value(
        ca["id"]
    )
    Select(form.find_element(By.NAME, "tls_termination.min_version")).select_by_value("upstream")
    _submit(form)  # mutual TLS needs termination at the edge: the API's 400 at that field
    text = _field_error(browser, css, "mutual_tls.certificate_authority_ids")
    assert "ERR_NGROK_1694" in text and "operation op_" in text, text
    assert not _tls_edge_by_hostport(stack, used["hostports"])
    form = find(browser, css)
    Select(form.find_element(By.NAME, "tls_termination.min_version")).select_by_value("1.3")
    _submit(form)
    wait(browser, lambda d: _tls_edge_by_hostport(stack, used["hostports"]))
    [edge] = _tls_edge_by_hostport(stack, used["hostports"])
    assert edge["tls_termination"] == {
        "enabled": True,
        "terminate_at": "edge",
        "min_version": "1.3",
    }
    assert [c["id"] for c in edge["mutual_tls"]["certificate_authorities"]] == [ca["id"]]
    assert edge["backend"]["backend"]["id"] == backend["id"]
    assert edge["ip_restriction"]["ip_policies"][0]["id"] == policy["id"]
    assert edge["traffic_policy"]["value"] == used["traffic_policy.value"]
    row = f"[data-list=tls_edges] tr[data-id='{edge['id']}']"
    wait(browser, lambda d: "TLS 1.3 minimum" in find(d, row).text)
    assert "mutual_tls" in find(browser, row).text
    snapshot(browser, "edges-tls-added")
    # edit: TLS termination and mutual TLS emptied: both removed (mutual TLS first), the
    # backend, IP restriction and policy kept
    find(browser, f"{row} button[data-action=edit]").click()
    editor = find(browser, f"{row} form")
    Select(editor.find_element(By.NAME, "tls_termination.min_version")).select_by_value("")
    Select(editor.find_element(By.NAME, "mutual_tls.certificate_authority_ids")).deselect_all()
    editor.find_element(By.NAME, "description").send_keys("passthrough")
    _submit(editor)

    def cleared() -> bool:
        now = stack.api("GET", f"/edges/tls/{edge['id']}")
        return now["tls_termination"] is None and now["mutual_tls"] is None

    wait(browser, lambda d: cleared())
    now = stack.api("GET", f"/edges/tls/{edge['id']}")
    assert now["description"] == "passthrough"
    assert now["backend"] and now["ip_restriction"] and now["traffic_policy"]
    wait(browser, lambda d: "mutual_tls" not in find(d, row).text)
    # a module's Remove button
    find(browser, f"{row} li[data-module=traffic_policy] button").click()
    accept_confirm(browser)
    wait(browser, lambda d: stack.api("GET", f"/edges/tls/{edge['id']}")["traffic_policy"] is None)
    wait(browser, lambda d: not all_of(d, f"{row} li[data-module=traffic_policy]"))
    # set again in the editor: termination passed through to the upstream
    find(browser, f"{row} button[data-action=edit]").click()
    editor = find(browser, f"{row} form")
    Select(editor.find_element(By.NAME, "tls_termination.min_version")).select_by_value("upstream")
    _submit(editor)
    wait(
        browser,
        lambda d: (stack.api("GET", f"/edges/tls/{edge['id']}")["tls_termination"] or {}).get(
            "terminate_at"
        )
        == "upstream",
    )
    wait(browser, lambda d: "at the upstream (passthrough)" in find(d, row).text)
    snapshot(browser, "edges-tls-edited")
    # delete the edge after the confirmation
    find(browser, f"{row} .row-actions button:not([data-action])").click()
    accept_confirm(browser)
    wait(browser, lambda d: not _tls_edge_by_hostport(stack, used["hostports"]))
    wait(browser, lambda d: not all_of(d, row))
    stack.api("DELETE", f"/backends/tunnel_group/{backend['id']}")


# ---- reserved domains edited ----------------------------------------------------------
def test_edit_a_reserved_domains_description_metadata_and_certificate(
    stack, browser, expected_errors
):
    """A domain's row editor: description, metadata, key type of the managed certificate and
    points of presence saved (and shown); a policy and a certificate at once is the API's 400
    at the certificate with the operation id; an uploaded certificate attached (management
    stops); then managed again with the upload detached."""
    from selenium.webdriver.support.ui import Select

    expected_errors.expect(400)
    made = stack.api(
        "POST", "/reserved_domains", {"domain": "edit-me.example.com", "description": "before"}
    )
    assert made["certificate_management_policy"]["private_key_type"] == "ecdsa"
    cert = stack.api(
        "POST", "/tls_certificates", SmallCA("Edit CA").upload_body(["edit-me.example.com"])
    )
    sign_in(browser, stack.dashboard_url, stack.key)
    go(browser, "reserved_domains")
    row = f"tr[data-id='{made['id']}']"
    path = f"/reserved_domains/{made['id']}"

    def edit(**choices):
        find(browser, f"{row} button[data-action=edit]").click()
        editor = find(browser, f"{row} form")
        for name, value in choices.items():
            element = editor.find_element(By.NAME, name)
            if element.tag_name == "select":
                select = Select(element)
                if select.is_multiple:
                    select.deselect_all()
                select.select_by_value(value)
            else:
                element.clear()
                element.send_keys(value)
        if "metadata" in choices:
            snapshot(browser, "domain-editor")
        _submit(editor)

    edit(
        description="shop front",
        metadata='{"team": "web"}',
        certificate_management_policy="rsa",
        resolves_to="eu",
    )
    wait(browser, lambda d: stack.api("GET", path)["description"] == "shop front")
    now = stack.api("GET", path)
    assert now["metadata"] == '{"team": "web"}'
    assert now["certificate_management_policy"] == {
        "authority": "letsencrypt",
        "private_key_type": "rsa",
    }
    assert now["resolves_to"] == [{"value": "eu"}]
    wait(browser, lambda d: "shop front" in find(d, f"{row} .description").text)
    assert '{"team": "web"}' in find(browser, f"{row} .metadata").text
    wait(browser, lambda d: "Managed (letsencrypt, rsa)" in find(d, f"{row} .cert").text)
    snapshot(browser, "domain-edited")
    # a policy change and a certificate at once: the API's 400 at the certificate
    edit(certificate_management_policy="ecdsa", certificate_id=cert["id"])
    text = _field_error(browser, f"{row} form", "certificate_id")
    assert "mutually exclusive" in text and "operation op_" in text, text
    assert stack.api("GET", path)["certificate"] is None
    # the certificate alone: attached, management stopped
    find(browser, f"{row} form button.secondary").click()  # Cancel
    edit(certificate_id=cert["id"])
    wait(browser, lambda d: (stack.api("GET", path)["certificate"] or {}).get("id") == cert["id"])
    assert stack.api("GET", path)["certificate_management_policy"] is None
    wait(browser, lambda d: f"Served: certificate {cert['id']}" in find(d, f"{row} .cert").text)
    # managed again and the upload detached: a PATCH of the policy, then the DELETE
    edit(certificate_management_policy="ecdsa", certificate_id="")
    wait(
        browser,
        lambda d: stack.api("GET", path)["certificate"] is None
        and stack.api("GET", path)["certificate_management_policy"] is not None,
    )
    wait(browser, lambda d: "Managed (letsencrypt, ecdsa)" in find(d, f"{row} .cert").text)
    assert stack.api("GET", path)["description"] == "shop front"
    # a name of the service's own domain: its certificate is the service's, no choice of it
    own = stack.api("POST", "/reserved_domains", {"domain": "edit-own.tunnels.localhost"})
    own_row = f"tr[data-id='{own['id']}']"
    find(browser, f"{row} button[data-action=edit]")  # the list drawn again
    browser.refresh()
    loaded(browser)
    find(browser, f"{own_row} button[data-action=edit]").click()
    editor = find(browser, f"{own_row} form")
    names = [e.get_attribute("name") for e in editor.find_elements(By.CSS_SELECTOR, "[name]")]
    assert names == ["description", "metadata", "resolves_to"], names
    editor.find_element(By.NAME, "description").send_keys("own name")
    _submit(editor)
    wait(browser, lambda d: stack.api("GET", f"/reserved_domains/{own['id']}")["description"])
    stack.api("DELETE", f"/reserved_domains/{own['id']}")
    stack.api("DELETE", path)
    stack.api("DELETE", f"/tls_certificates/{cert['id']}")
