"""The operator console in a real headless Chromium (Debian's), driven by Selenium.

An operator logs in with a token, sees a run through ``codemode serve`` waiting for approval
(the page updates itself: it is never reloaded), approves it by clicking, and sees the run
finish. A non-operator is refused, and a cross-site form post is rejected.
"""

from __future__ import annotations

import contextlib
import html
import os
import threading
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._background import BackgroundRun
from ._browser import chromium
from .conftest import TOKENS
from .test_serve import JOIN, WRITE, text_of

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOT_ENV = "CODEMODE_CONSOLE_SCREENSHOT"
"""Set to a path (e.g. docs/console.png) to keep the screenshot taken while a run waits."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def wait_for(driver: WebDriver, css: str, timeout: float = 60.0) -> WebElement:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    condition: Any = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)


def log_in(driver: WebDriver, console: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(console)  # no session: the console sends the browser to its login form
    assert driver.current_url.endswith("/console/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()


@contextlib.contextmanager
def foreign_site(page: str) -> Generator[str]:
    """Another origin (127.0.0.1, another port) serving one page; its URL."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_non_operator_is_refused(browser: WebDriver, console_url: str) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, console_url, TOKENS["bob"])
    error = wait_for(browser, "#error").text
    assert "bob is not an operator" in error and 'roles = ["operator"]' in error
    browser.get(console_url)
    assert browser.current_url.endswith("/console/login"), "no session was opened for bob"
    assert not browser.find_elements(By.ID, "operator")


def test_an_operator_sees_a_run_wait_approves_it_and_sees_it_finish(
    browser: WebDriver, console_url: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, console_url, TOKENS["ops"])
    assert wait_for(browser, "#operator").text == "ops"
    assert browser.find_elements(By.ID, "no-pending"), "nothing waits yet"

    # A read-only run finishes without asking anyone; the open page lists it as it ends.
    done = BackgroundRun(console_url.removesuffix("/console") + "/mcp", TOKENS["bob"], JOIN)
    assert not done.wait().is_error
    row = wait_for(browser, f'tr.run[data-run="{done.summary["run_id"]}"][data-status="ok"]')
    assert "bob@acme" in row.text

    # (2) A real run through serve whose crm/add_note needs approval; this client cannot give it.
    run = BackgroundRun(console_url.removesuffix("/console") + "/mcp", TOKENS["alice"], WRITE)
    ticket = wait_for(browser, "tr.ticket")  # appears by polling: the page is not reloaded
    call_id = ticket.get_attribute("data-call") or ""
    run_id = call_id.rsplit("/", 1)[0]
    assert "crm/add_note" in ticket.text and "alice@acme" in ticket.text
    assert "CUST-0001" in ticket.text and "expires in" in ticket.text
    wait_for(browser, f'tr.run[data-run="{run_id}"][data-status="waiting"]')
    picture = tmp_path / "console.png"
    assert browser.save_screenshot(str(picture)) and picture.stat().st_size > 10_000
    if os.environ.get(SCREENSHOT_ENV):
        browser.save_screenshot(os.environ[SCREENSHOT_ENV])

    # (3) Approve by clicking.
    ticket.find_element(By.CSS_SELECTOR, "button.approve").click()
    assert f"You approved call {call_id}." in wait_for(browser, "#notice").text

    # (4) The run finishes, and the page shows it.
    finished = wait_for(browser, f'tr.run[data-run="{run_id}"][data-status="ok"]')
    assert "ok" in finished.text
    result = run.wait()
    assert not result.is_error, text_of(result)
    assert "rcpt_" in text_of(result)

    # Its call's evidence names the operator's approval, bound to this call.
    browser.find_element(By.CSS_SELECTOR, f'a[href="/console/runs/{run_id}"]').click()
    approval = wait_for(browser, f'article[data-call="{call_id}"] tr[data-link="approval"]')
    assert "console:ops" in approval.text and "✓ ok" in approval.text


def test_a_cross_site_post_is_rejected(browser: WebDriver, console_url: str) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, console_url, TOKENS["ops"])
    run = BackgroundRun(console_url.removesuffix("/console") + "/mcp", TOKENS["alice"], WRITE)
    ticket = wait_for(browser, "tr.ticket")
    call_id = ticket.get_attribute("data-call") or ""
    digest = ticket.find_element(By.NAME, "args_digest").get_attribute("value") or ""

    # Another site knows the call and its digest (not the CSRF token) and posts an approval
    # from the operator's own browser, where the operator is logged in.
    attack = f"""<!doctype html><title>free coupons</title>
    <form id="f" method="post" action="{html.escape(console_url)}/approvals">
      <input name="call_id" value="{html.escape(call_id)}">
      <input name="args_digest" value="{html.escape(digest)}">
      <input name="decision" value="approve">
    </form><script>document.getElementById("f").submit();</script>"""
    with foreign_site(attack) as evil:
        browser.get(evil)
        refused = wait_for(browser, "#error").text
    assert "Origin header does not name this codemode server" in refused

    browser.get(console_url)
    still = wait_for(browser, f'tr.ticket[data-call="{call_id}"]')  # nothing was approved
    still.find_element(By.CSS_SELECTOR, "button.deny").click()
    wait_for(browser, "#notice")
    result = run.wait()
    assert result.is_error and "denied by operator ops in the console" in text_of(result)
