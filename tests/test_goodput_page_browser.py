"""In Chromium: a goodput-mode job's page charts its global batch and statistical
efficiency over time beside the workers, from its metrics records as the learners wrote
them (docs/architecture.md, "Goodput mode"); a fixed-batch job's page has no such chart.

The test's server speaks HTTP only (pytest-django's live server); the jobs have ended, so
their pages read their history over HTTP at once, as any ended job's does.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import Page

from edtweb.training.models import Job, Metric
from scheduler.store import Store
from tests.browser import browser_page, log_in_as
from tests.harness.pages import ARTIFACTS

pytestmark = pytest.mark.django_db(transaction=True)

# (step, workers, global batch, efficiency): a job that grew and took larger batches
STEPS = [(1, 1, 64, 1.0), (2, 1, 64, 1.0), (3, 2, 128, 0.71), (4, 2, 128, 0.7),
         (5, 4, 256, 0.45), (6, 4, 256, 0.46)]  # fmt: skip


def ended_job(owner: Any, name: str, goodput: bool) -> Job:
    extra = {"batch_min": 32, "batch_max": 512} if goodput else {}
    job = Job.objects.create(owner=owner, name=name, state=Job.State.COMPLETED, max_workers=4,
                             total_steps=len(STEPS), steps_done=len(STEPS), **extra)  # fmt: skip
    start = time.time() - 60
    for step, workers, batch, efficiency in STEPS:
        record = {"type": "train", "step": step, "epoch": 0, "time": start + step,
                  "loss": 2.0 / step, "workers": workers,
                  "samples_per_s": 100.0 * batch}  # fmt: skip
        if goodput:
            record.update(
                batch=batch, efficiency=efficiency, gns=80.0, gain=efficiency * batch / 64
            )
        Metric.from_record(job.pk, record).save()
    return job


def trace(page: Page, name: str) -> list[float]:
    found: list[float] = page.evaluate(
        """name => {
          const data = document.getElementById("chart-batch").data || [];
          const t = data.find((d) => d.name === name);
          return t ? t.y : [];
        }""",
        name,
    )
    return found


@pytest.mark.browser
def test_a_goodput_jobs_page_charts_its_batch_and_efficiency(
    live_server: Any, store: Store, django_user_model: Any
) -> None:
    alice = django_user_model.objects.create_user("alice", password="alice-pass-1")
    goodput = ended_job(alice, "adaptive", goodput=True)
    fixed = ended_job(alice, "fixed", goodput=False)
    with browser_page() as page:
        log_in_as(page, live_server.url, "alice", "alice-pass-1")
        page.goto(f"{live_server.url}/jobs/{goodput.pk}/")
        page.wait_for_function("document.getElementById('chart-batch').data?.length === 2")
        assert trace(page, "global batch") == [batch for _, _, batch, _ in STEPS]
        assert trace(page, "efficiency") == [eff for _, _, _, eff in STEPS]
        assert page.inner_text("#batch") == "256"  # its batch at the last step
        assert "32 to 512, the scheduler's choice" in page.inner_text("#job-batch")
        # beside the workers chart, which shows the same steps
        top = "id => Math.round(document.getElementById(id).getBoundingClientRect().top)"
        assert page.evaluate(top, "chart-batch") == page.evaluate(top, "chart-workers")
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator(".charts").screenshot(path=str(ARTIFACTS / "job-goodput-charts.png"))
        page.goto(f"{live_server.url}/jobs/{fixed.pk}/")
        page.wait_for_function("document.getElementById('chart-workers').data?.length === 1")
        assert page.query_selector("#chart-batch") is None and page.query_selector("#batch") is None
