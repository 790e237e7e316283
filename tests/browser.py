"""Playwright driving Debian's Chromium (never a browser Playwright downloads)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.harness.waiting import load_factor

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
            # Every wait of the page is on a condition; this bounds a hang, scaled by the
            # machine's load as every wait of the suite is (tests/harness/waiting.py).
            bound = 30_000 * load_factor()
            page.set_default_timeout(bound)
            expect.set_options(timeout=bound)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page
            assert errors == [], f"JavaScript errors on the page: {errors}"
        finally:
            browser.close()


def log_in(page: Page, base: str, data_dir: Path, user: str = "admin") -> None:
    """Log in as the launcher's admin (its password is kept in the data directory)."""
    log_in_as(page, base, user, (data_dir / "admin-password").read_text().strip())


def log_in_as(page: Page, base: str, user: str, password: str) -> None:
    """Log in through the login form; back on the Cluster page."""
    page.goto(base + "/accounts/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("form[action='/accounts/login/'] button[type=submit]")
    page.wait_for_url(base + "/", timeout=60_000 * load_factor())


DEMO_DATASET = "CIFAR-10 demo (synthetic)"
DEMO_MODEL = "MLP (example)"


def start_job(page: Page, base: str, name: str, epochs: int, **fields: int) -> str:
    """Submit a job on the demo dataset and example MLP from the Train page; its URL."""
    page.goto(base + "/train/")
    page.fill("#id_name", name)
    page.select_option("#id_model", label=DEMO_MODEL)
    page.select_option("#id_dataset", label=DEMO_DATASET)
    page.fill("#id_epochs", str(epochs))
    if page.locator("#advanced").count():  # the folded fields, opened as a person would
        page.click("#advanced summary")
    for field, value in fields.items():
        page.fill(f"#id_{field}", str(value))
    page.click("#train-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"), timeout=60_000 * load_factor())
    return page.url


def stop_job(page: Page, url: str) -> None:
    """Stop the job at ``url``, or find it ended on its own (a job near its end can finish
    between the caller's look at its state and the click): either way its page then offers
    Delete."""
    page.goto(url)
    page.once("dialog", lambda dialog: dialog.accept())
    page.wait_for_selector("#stop-job:visible, #delete-job:visible")
    if page.locator("#stop-job").is_visible():
        try:
            page.click("#stop-job", timeout=10_000 * load_factor())
        except PlaywrightTimeoutError:
            if not page.locator("#delete-job").is_visible():
                raise
    page.wait_for_selector("#delete-job", state="visible")
