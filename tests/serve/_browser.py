"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver.

Without selenium, ``/usr/bin/chromium`` or ``/usr/bin/chromedriver`` the browser tests skip,
or fail when ``CODEMODE_REQUIRE_BROWSER`` is set (CI, where ``./dev test`` installs them).
Selenium is given both paths, so it never runs Selenium Manager (which would download a driver).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

REQUIRE_BROWSER = os.environ.get("CODEMODE_REQUIRE_BROWSER", "").strip() not in ("", "0", "false", "no")
CHROMIUM = Path(os.environ.get("CODEMODE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("CODEMODE_CHROMEDRIVER", "/usr/bin/chromedriver"))

# Headless, and quiet on the network: no QUIC, no first-run pages, no background fetches,
# component updates or sync. The tests only ever open 127.0.0.1.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
)


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when CODEMODE_REQUIRE_BROWSER is set."""
    if REQUIRE_BROWSER:
        pytest.fail(f"CODEMODE_REQUIRE_BROWSER is set but {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def chromium(profile: Path) -> Generator[WebDriver]:
    """A headless Chromium with a fresh profile in ``profile``."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed (pip install -e '.[dev]')")
    for binary, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not binary.is_file() or not os.access(binary, os.X_OK):
            unavailable(f"{binary} is missing (Debian: apt-get install {package})")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER), log_output=os.devnull)
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except Exception as exc:
        unavailable(f"Chromium did not start under chromedriver: {exc}")
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
