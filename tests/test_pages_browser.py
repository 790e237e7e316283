"""Every page (a queued, a running and an ended job's among them, and the API explorer; the
admin's aside) in Chromium at 1440x900 and 390x844: nothing scrolls sideways on a phone,
axe-core finds no serious or critical violation, and a screenshot of each lands in
tests/artifacts/. Also: a waiting job says why, and a dataset uploads from the keyboard.
Runs on the run's live EDT (tests/harness/stack.py)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser import DEMO_DATASET, DEMO_MODEL, browser_page, log_in, start_job, stop_job
from tests.harness.pages import ARTIFACTS, SIZES, looked_over, settled, violations
from tests.harness.stack import LiveEdt
from tests.harness.waiting import wait_for
from workers.learner.datasets import write_cifar10


def link_to(page: Page, base: str, listing: str, text: str) -> str:
    page.goto(base + listing)
    href = page.get_by_role("link", name=text, exact=True).first.get_attribute("href")
    assert href
    return href


@pytest.mark.browser
def test_every_page_fits_a_phone_passes_axe_and_is_photographed(live: LiveEdt) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with browser_page() as page:
        plotly: list[dict[str, str]] = []
        page.on(
            "response", lambda r: plotly.append(r.headers) if "plotly-basic.min" in r.url else None
        )
        log_in(page, live.url, live.data_dir)
        # The Cluster page as it first looks (on a fresh EDT: no jobs yet, first steps).
        page.set_viewport_size({"width": 1440, "height": 900})
        settled(page)
        page.screenshot(path=str(ARTIFACTS / "cluster-first-desktop.png"), full_page=True)
        ended = start_job(page, live.url, "short", epochs=1)
        page.wait_for_function(
            "document.getElementById('job-state').textContent === 'completed'", timeout=120_000
        )
        running = start_job(page, live.url, "long", epochs=2000, max_workers=1)
        page.wait_for_function(  # it runs, and has drawn its first iterations
            "document.getElementById('chart-loss').data?.[0]?.x?.length > 3", timeout=120_000
        )
        waiting = start_job(page, live.url, "too big", epochs=1, min_workers=3, max_workers=3)
        pages = {
            "cluster": "/",
            "jobs": "/jobs/",
            "job": ended.removeprefix(live.url),
            "job-running": running.removeprefix(live.url),
            "job-queued": waiting.removeprefix(live.url),
            "train": "/train/",
            "datasets": "/datasets/",
            "dataset": link_to(page, live.url, "/datasets/", DEMO_DATASET),
            "models": "/models/",
            "model": link_to(page, live.url, "/models/", DEMO_MODEL),
            "api": "/api/v1/docs/",
        }
        found = looked_over(page, live.url, pages)
        stop_job(page, waiting)
        stop_job(page, running)
        # plotly.js (its basic bundle: 1.2 MB) goes out gzipped, hashed, cached for good.
        assert plotly and plotly[0].get("content-encoding") == "gzip", plotly[:1]
        assert "immutable" in plotly[0].get("cache-control", "")
        page.context.clear_cookies()
        for size, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            page.goto(live.url + "/accounts/login/")
            page.screenshot(path=str(ARTIFACTS / f"login-{size}.png"), full_page=True)
            if bad := violations(page):
                found[f"login at {size}"] = bad
    assert not found, "\n".join(f"{where}: {what}" for where, what in found.items())


@pytest.mark.browser
def test_a_waiting_job_says_why_in_words(live: LiveEdt) -> None:
    with browser_page() as page:
        log_in(page, live.url, live.data_dir)
        url = start_job(page, live.url, "waits", epochs=1, min_workers=3, max_workers=4)
        reason = page.locator("#waiting")
        reason.wait_for()
        # The scheduler's words, once it decided (the page polls its status).
        page.wait_for_function("document.getElementById('waiting').textContent.includes('queue;')")
        text = reason.inner_text()
        said = r"\d+(st|nd|rd|th) in group default's queue; waits: "
        assert re.search(said, text), text
        assert "Jan 2000" not in page.inner_text("main")
        page.wait_for_selector("#chart-loss[data-empty]", state="attached")  # drawn by JS
        assert "min 3, max 4" in page.inner_text("#job-config")
        # The slider's arrow keys preview; only Enter applies.
        page.focus("#priority")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("document.getElementById('preview').textContent.includes('would')")
        assert priority(page, url) == 5000
        page.keyboard.press("Enter")
        wait_for(lambda: priority(page, url) == 5100, 10, "the priority to apply")  # a step
        page.fill("#priority-number", "6543")  # any value, exactly, in the field beside it
        page.press("#priority-number", "Enter")
        wait_for(lambda: priority(page, url) == 6543, 10, "the typed priority to apply")
        clone = page.get_attribute("#clone-job", "href") or ""
        assert "min_workers=3" in clone and "max_workers=4" in clone
        page.wait_for_selector("#live", state="visible")  # a waiting job's page is live
        stop_job(page, url)
        # Ended, nothing on its page is live: the badge goes when the state changes, and a
        # fresh page shows none, its socket open or not.
        page.wait_for_selector("#live", state="hidden")
        page.reload()
        page.wait_for_selector("#live[data-socket=open]", state="attached")
        page.wait_for_selector("#chart-loss[data-empty]", state="attached")
        assert not page.is_visible("#live"), page.inner_text("#live")
        # Stopped, it offers Resume: it waits again (from its latest checkpoint, if any).
        page.click("#resume-job")
        page.wait_for_selector("#waiting")
        assert page.inner_text("#job-state") == "suspended"
        page.wait_for_selector("#live", state="visible")
        stop_job(page, url)
        page.goto(live.url + clone)
        assert page.input_value("#id_min_workers") == "3"


def priority(page: Page, url: str) -> int:
    return int(page.request.get(url + "state").json()["priority"])


def archive(folder: Path) -> Path:
    path = folder / "keyboard.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(write_cifar10(folder / "src", train=64, test=16), arcname="cifar-10-batches-py")
    return path


def intercept_file_choosers(page: Any) -> None:
    """Have Chromium hand every file chooser to the test from now on. ``expect_file_chooser``
    turns that on only when it starts waiting, in a message that can reach the browser after
    the key press it waits on: on a loaded host the chooser then opened natively and no event
    came (puppeteer#6040). A listener registered before the page loads has it on in time."""
    page.on("filechooser", lambda _chooser: None)


def test_a_dataset_uploads_with_the_keyboard_alone(live: LiveEdt, tmp_path: Path) -> None:
    file = archive(tmp_path)
    with browser_page() as page:
        intercept_file_choosers(page)
        log_in(page, live.url, live.data_dir)
        page.goto(live.url + "/datasets/")
        page.focus("#dataset-name")
        page.keyboard.type("typed")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "drop"
        with page.expect_file_chooser() as chooser:
            page.keyboard.press("Enter")
        chooser.value.set_files(str(file))
        page.wait_for_url(re.compile(r".*/datasets/\d+/$"), timeout=60_000)
        assert page.inner_text("h1").startswith("typed")
        # "choose a file" is reachable by Tab too, and Space on it opens the chooser.
        page.goto(live.url + "/datasets/")
        page.focus("#drop")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "choose-file"
        with page.expect_file_chooser():
            page.keyboard.press(" ")
