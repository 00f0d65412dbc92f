"""Driving Chromium through Selenium on pages that replace themselves: what console/test_00_console and
benchmarks/console_acceptance.py share (imported only where Selenium is installed)."""

from __future__ import annotations

import shutil
from typing import Any


def chromium(window: str = "1280,1000", *arguments: str) -> Any:
    """Debian's headless Chromium through its chromedriver, keeping the browser's console log
    (every check reads it for errors), pages given 60 s to load; the caller quits it."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")  # type: ignore[assignment]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={window}", *arguments):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    driver.set_page_load_timeout(60)
    return driver


def follow(driver: Any, element: Any) -> None:
    """Click `element` (a link or a submit button) and wait for the next page to replace this
    one and finish loading."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 60, poll_frequency=0.05).until(lambda _: replaced(page))
    WebDriverWait(driver, 60, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def replaced(element: Any) -> bool:
    """Whether the document `element` belongs to has been replaced. Selenium's staleness_of is
    not enough: during a navigation ChromeDriver may answer for an element of the old document
    with "unknown error: Node with given id does not belong to the document" instead of a stale
    element reference, which staleness_of lets through as an error."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


def verify_result(driver: Any, timeout_s: float = 60) -> tuple[str, str]:
    """The verify page's result, state and text, once it shows one. While verify runs the page
    reloads itself every second, so a look may meet a document being replaced (a stale
    element, or ChromeDriver's answer `replaced` describes): the look is tried again. The page
    that shows the result does not reload, so what follows reads it."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def finished(d: Any) -> tuple[str, str] | bool:
        found = d.find_elements(By.ID, "verify-state")
        state = found[0].get_attribute("data-state") if found else None
        return (state, found[0].text) if state in ("ok", "failed", "error") else False

    wait = WebDriverWait(driver, timeout_s, poll_frequency=0.2, ignored_exceptions=(WebDriverException,))
    return wait.until(finished)
