"""What the dashboard tests do in the page, as a person would: wait for text, click, type."""

import time
from typing import Callable, List

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 20.0


def wait(driver, condition: Callable, timeout: float = WAIT, message: str = ""):
    # a page that re-renders between finding an element and reading it leaves the element
    # stale: the condition is asked again, as a person would look again
    return WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition, message)


def find(driver, css: str, timeout: float = WAIT):
    return wait(
        driver,
        EC.visibility_of_element_located((By.CSS_SELECTOR, css)),
        timeout,
        f"no visible {css}",
    )


def all_of(driver, css: str) -> List:
    return driver.find_elements(By.CSS_SELECTOR, css)


def text_of(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


def wait_text(driver, text: str, timeout: float = WAIT) -> None:
    wait(driver, lambda d: text in text_of(d), timeout, f"{text!r} never shown")


def wait_no_text(driver, text: str, timeout: float = WAIT) -> None:
    wait(driver, lambda d: text not in text_of(d), timeout, f"{text!r} still shown")


def loaded(driver, timeout: float = WAIT) -> None:
    """Every list of the page has left its loading state."""
    wait(driver, lambda d: not all_of(d, ".state.loading"), timeout, "still loading")


def sign_in(driver, url: str, key: str) -> None:
    driver.get(url)
    box = find(driver, "#sign-in input[name=api_key]")
    box.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()
    find(driver, "#sign-out")
    loaded(driver)


def go(driver, route: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'#nav a[href="#/{route}"]').click()
    wait(driver, lambda d: all_of(d, f".page-{route}"), message=f"page {route} not shown")
    loaded(driver)


def accept_confirm(driver) -> None:
    wait(driver, EC.alert_is_present(), 5).accept()


def until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False
