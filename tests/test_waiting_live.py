"""For the people who wait, on a live EDT (tests/harness/stack.py, two slots): a job
submitted to an idle cluster never reads that a slot is missing; a job queued behind it
shows its place, the scheduler's reason and when it should start, as a range; `edt why`
and the page say what the scheduler's event says, and `edt why` the share its team holds
against its entitlement; it starts within its range."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser import browser_page, log_in, start_job, stop_job
from tests.harness.stack import LiveEdt
from tests.harness.waiting import load_factor, wait_for

pytestmark = pytest.mark.browser
SLACK_S = 20  # a job's start-up beyond the projection: learners forked, data loaded, READY


def state(page: Page, url: str) -> dict[str, Any]:
    answer: dict[str, Any] = page.request.get(url + "state").json()
    return answer


def test_a_queued_job_shows_its_place_reason_and_start_and_the_cli_agrees(live: LiveEdt) -> None:
    live.login("sam")  # staff: `edt why` of the admin's jobs
    with browser_page() as page:
        log_in(page, live.url, live.data_dir)
        first = start_job(
            page, live.url, "idle-first", epochs=100, max_workers=2
        )  # long enough to queue the second behind it, and to read why, on a quiet machine
        said: list[str] = []

        def running() -> bool:
            text = (
                page.locator("#waiting").all_inner_texts()
                if page.locator("#waiting").count()
                else []
            )
            said.extend(t for t in text if t)
            said.append(state(page, first)["waiting"])
            return bool(state(page, first)["state"] == "RUNNING")

        wait_for(running, 120, "the first job to run", step=0.2)
        for text in said:
            assert not re.search(r"\bfree\b|needs \d+ slot|missing", text), said
        # Its page says the rule that set its size; its pace gives an ETA.
        page.wait_for_selector("#why:not([hidden])")
        assert "2 slots" in page.inner_text("#why") or "its max" in page.inner_text("#why")
        wait_for(lambda: state(page, first)["eta"] is not None, 120, "a pace for the first job")

        # Below the first's priority it waits for the first whatever their remaining work
        # (at the same priority an unmeasured job goes first, to be measured, and takes the
        # first's slots as soon as the scheduler has read the first's pace).
        second = start_job(page, live.url, "queued-second", epochs=1, min_workers=2,
                           max_workers=2, priority=1000)  # fmt: skip
        job = second.rstrip("/").rsplit("/", 1)[1]
        submitted = time.time()
        page.wait_for_function("document.getElementById('waiting').textContent.includes('queue;')")
        page.wait_for_function("document.getElementById('estimate').textContent.includes('starts')")
        waiting, estimate = page.inner_text("#waiting"), state(page, second)
        assert "1st in group default's queue; waits: " in waiting, waiting
        assert estimate["position"] == 1 and estimate["start_estimate"], estimate
        early, late = estimate["start_estimate"]
        # The scheduler's event, the page and `edt why` say one reason.
        events = page.request.get(f"{live.url}/api/v1/jobs/{job}/events/").json()
        event = next(e for e in events if e["kind"] == "waiting")
        assert event["data"]["position"] == 1 and event["message"] in waiting, (event, waiting)
        why = live.edt("sam", "why", job)
        assert why.returncode == 0 and event["message"] in why.stdout, why.stdout + why.stderr
        shown = json.loads(live.edt("sam", "--json", "why", job).stdout)
        assert shown["reason"] == estimate["reason"] and shown["position"] == 1
        # Why this share: its team's (here: jobs of no team) entitlement and what it holds.
        assert shown["share"]["held"] == 2 and shown["share"]["capacity"] == 2, shown
        assert "jobs of no team in group default: holds 2 of 2 slots" in why.stdout, why.stdout

        wait_for(lambda: state(page, second)["state"] == "RUNNING", 300, "the second to start")
        started = time.time() - submitted
        print(f"estimated start {early:.0f}-{late:.0f} s; started after {started:.0f} s")
        assert started <= (late + SLACK_S) * load_factor(), (early, late, started)
        for url in (second, first):  # whichever still runs
            if state(page, url)["state"] in ("QUEUED", "RUNNING", "SUSPENDED"):
                stop_job(page, url)
