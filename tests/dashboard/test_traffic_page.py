"""The Traffic page (the traffic inspector) in headless Chromium against `make run`: SDK
traffic through the edge shows up with its headers redacted, bodies once capture is on, and
a replay through the edge (an https:// endpoint: the API verifies it with make run's CA)."""

import requests
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.dashboard.conftest import snapshot
from tests.dashboard.support import find, go, sign_in, wait, wait_text
from tests.dashboard.test_dashboard import _EdgeOf
from stacks.agents import SdkAgent


def test_traffic_page_shows_requests_and_replays_one(stack, browser):
    cred = stack.api("POST", "/credentials", {"description": "traffic page"})
    agent = SdkAgent(_EdgeOf(stack), cred["token"], [{"proto": "http"}])
    try:
        url = [e for e in agent.start() if e["event"] == "bound"][0]["url"]
        host = url.split("://")[1].split(":")[0]
        endpoint = [
            e for e in stack.api("GET", "/endpoints")["endpoints"] if e["public_url"] == url
        ][0]["id"]

        def send(path, body=b""):
            return requests.post(
                f"http://127.0.0.1:{stack.http_port}{path}",
                data=body,
                timeout=30,
                headers={"Host": host, "Authorization": "Bearer page-secret"},
            )

        assert send("/echo?page=1").status_code == 200
        sign_in(browser, stack.dashboard_url, stack.key)
        go(browser, "traffic")
        find(browser, f"select[name=endpoint] option[value='{endpoint}']")  # listed
        Select(find(browser, "select[name=endpoint]")).select_by_value(endpoint)
        wait(
            browser,
            lambda d: "/echo?page=1" in d.find_element(By.CSS_SELECTOR, ".inspector").text,
            60,
            "the captured request never showed",
        )
        row = find(browser, "[data-list=captured_requests] tbody tr")
        assert "POST" in row.text and "200" in row.text
        row.find_element(By.CSS_SELECTOR, "details summary").click()
        headers = row.find_element(By.CSS_SELECTOR, "pre.headers").text
        assert "authorization: [redacted]" in headers and "page-secret" not in headers

        # capture on, from the page; then a body shows
        box = find(browser, "input[name=capture_bodies]")
        box.click()
        wait(
            browser,
            lambda d: stack.api("GET", f"/endpoints/{endpoint}/capture")["capture_bodies"],
            30,
            "capture was not turned on",
        )
        row.find_element(By.CSS_SELECTOR, "details summary").click()  # close: updates resume

        def body_shown(driver):
            send("/echo?page=2", b"a body from the page test")
            return "/echo?page=2" in driver.find_element(
                By.CSS_SELECTOR, ".inspector"
            ).text and any(
                r["bodies_captured"]
                for r in stack.api("GET", f"/endpoints/{endpoint}/captured_requests")[
                    "captured_requests"
                ]
            )

        wait(browser, body_shown, 60, "no body captured after capture was turned on")
        request_id = [
            r
            for r in stack.api("GET", f"/endpoints/{endpoint}/captured_requests")[
                "captured_requests"
            ]
            if r["bodies_captured"]
        ][0]["id"]
        assert (
            stack.api("POST", f"/endpoints/{endpoint}/captured_requests/{request_id}/replay", {})[
                "status_code"
            ]
            == 200
        )  # the API's answer, as the page shows it

        def click_replay(driver):
            # the list is re-rendered every 2 s: a row found a moment ago may be gone
            try:
                find(driver, f"tr[data-id='{request_id}'] .row-actions button", 10).click()
                return True
            except StaleElementReferenceException:
                return False

        wait(browser, click_replay, 30, "the captured request's Replay button never took a click")

        def replayed(driver):
            try:
                return "replayed: 200" in find(driver, f"tr[data-id='{request_id}']").text
            except StaleElementReferenceException:
                return False

        wait(browser, replayed, 30, "the replay did not answer")
        snapshot(browser, "traffic-replayed")
    finally:
        agent.stop()
    wait_text(browser, "replayed: 200")
