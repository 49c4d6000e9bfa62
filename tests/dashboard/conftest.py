"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, scripts/install_test_deps.sh) driven by Selenium, against the stack as
`make run` starts it (scripts/serve.py --edge as a process, once per session, on free ports),
signed in with the admin API key it prints, at the dashboard URL it prints.

The reserved domains' DNS check asks a DNS server of the tests' own on the loopback
(DNS_CHECK_RESOLVER; it knows no name, so every record is missing).

After each test: its final page is kept as a screenshot in test-output/dashboard/<test>.png
(TEST_OUTPUT_DIR overrides test-output/), and the browser's console must hold no error.
"""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Dict

import pytest
import requests

from stacks.paths import SDK_PYTHON
from stacks.paths import PROJECT_DIR
from stacks.dns_server import LoopbackDns
from tests.support.fixtures import session_make_run  # noqa: F401 (a fixture)

OUTPUT_DIR = os.path.join(
    os.environ.get("TEST_OUTPUT_DIR") or os.path.join(PROJECT_DIR, "test-output"), "dashboard"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@dataclass
class Stack:
    process: subprocess.Popen
    output: str
    key: str
    dashboard_url: str
    api_url: str
    agent_addr: str
    ca_path: str
    http_port: int
    https_port: int

    def api(self, method: str, path: str, body: Any = None) -> Any:
        resp = requests.request(
            method,
            self.api_url + path,
            json=body,
            timeout=30,
            headers={"Authorization": f"Bearer {self.key}", "Ngrok-Version": "2"},
        )
        assert resp.status_code < 300, resp.text
        return resp.json() if resp.text else None


@pytest.fixture(scope="session")
def dns_server():
    with LoopbackDns() as server:
        yield server


@pytest.fixture(scope="session")
def stack(dns_server, session_make_run):  # noqa: F811 (a fixture)
    """`make run` (serve.py --edge) with its own ports and data directory."""
    if not os.path.exists(SDK_PYTHON):
        pytest.fail(f"{SDK_PYTHON} missing: `make install` makes the agent virtualenv")
    run = session_make_run(
        ports=("EDGE_METRICS_PORT",),
        env={"DNS_CHECK_RESOLVER": dns_server.address, "EDGE_CHECK_SECONDS": "1"},
    )
    with run:
        yield Stack(
            process=run.proc,
            output=run.banner,
            key=run.key,
            dashboard_url=run.dashboard_url,
            api_url=run.api_url,
            agent_addr=run.agent_addr,
            ca_path=run.ca_path,
            http_port=run.ports["EDGE_HTTP_PORT"],
            https_port=run.ports["EDGE_HTTPS_PORT"],
        )


def _driver(width: int, height: int, tz: str = ""):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--password-store=basic",
        f"--window-size={width},{height}",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    env = {**os.environ, "TZ": tz} if tz else None  # the browser's own time zone
    return webdriver.Chrome(
        options=options, service=Service(executable_path=CHROMEDRIVER, env=env)
    )


class ExpectedErrors:
    """Console errors a test provokes on purpose: the browser logs every API answer of 4xx as
    a failed load ("status of 400"); a test that asks for one says so with ``expect(400)``.
    Nothing else is forgiven (script errors, CSP refusals, missing files)."""

    def __init__(self) -> None:
        self.statuses = set()

    def expect(self, status: int) -> None:
        self.statuses.add(status)

    def forgiven(self, entry: Dict[str, Any]) -> bool:
        message = entry.get("message", "")
        return entry.get("source") == "network" and any(
            f"status of {status} " in message for status in self.statuses
        )


@pytest.fixture
def expected_errors():
    return ExpectedErrors()


@pytest.fixture
def browser_factory(request, expected_errors):
    """``browser_factory(width=1440)``: a fresh Chromium (empty storage); after the test, its
    final page is saved and its console checked for errors."""
    made = []

    def make(width: int = 1440, height: int = 900, tz: str = ""):
        driver = _driver(width, height, tz)
        made.append(driver)
        return driver

    yield make
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    errors = []
    for index, driver in enumerate(made):
        suffix = f"-{index}" if index else ""
        try:
            driver.save_screenshot(os.path.join(OUTPUT_DIR, f"{name}{suffix}.png"))
            errors += [e for e in console_errors(driver) if not expected_errors.forgiven(e)]
        finally:
            driver.quit()
    failed = getattr(request.node, "rep_call", None)
    if errors and not (failed and failed.failed):
        pytest.fail(f"console errors: {errors}")


@pytest.fixture
def browser(browser_factory):
    return browser_factory()


def snapshot(driver, name: str) -> str:
    """A screenshot of the page as it is now (besides the final one every test keeps)."""
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    path = os.path.join(OUTPUT_DIR, f"{name}.png")
    driver.save_screenshot(path)
    return path


def console_errors(driver) -> list:
    """The browser log's errors (SEVERE): script errors, CSP refusals, failed loads."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
