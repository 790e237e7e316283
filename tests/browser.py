"""Playwright driving Debian's Chromium (never a browser Playwright downloads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def browser_page() -> Iterator[Page]:
    assert CHROMIUM.exists(), "Chromium is missing: apt-get install chromium (.ci/run does)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page
            assert errors == [], f"JavaScript errors on the page: {errors}"
        finally:
            browser.close()
