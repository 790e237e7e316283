"""In Chromium, on the run's live EDT (tests/harness/stack.py: real learners on 2 CPU
slots, the sweep driver): a sweep made on the New sweep page over the example MLP's
learning rate; its page shows its trials appear, train and end without a reload; the
parallel-coordinates plot draws a line per trial over the learning rate and the objective;
two trials ticked open the compare page, where the learning rate is marked as what
differs and their curves are overlaid, as from two jobs ticked on the jobs list. Then the
pages (the jobs list with its boxes too) fit a phone and pass axe."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser import DEMO_DATASET, DEMO_MODEL, browser_page, log_in
from tests.harness.pages import ARTIFACTS, looked_over
from tests.harness.stack import LiveEdt

pytestmark = pytest.mark.timeout(900)


def parcoords(page: Page) -> dict[str, Any]:
    """The parallel-coordinates trace as Plotly holds it: its axes and their values."""
    found: dict[str, Any] = page.evaluate(
        """() => {
          const el = document.getElementById("chart-parcoords");
          const t = el && el.data && el.data[0];
          return t ? {type: t.type, labels: t.dimensions.map((d) => d.label),
                      lines: t.dimensions[0].values.length} : {};
        }"""
    )
    return found


@pytest.mark.browser
def test_a_sweep_made_on_its_page_runs_its_trials_draws_them_and_compares_two(
    live: LiveEdt,
) -> None:
    with browser_page() as page:
        log_in(page, live.url, live.data_dir)
        page.click("nav >> text=Sweeps")
        page.click("#new-sweep")
        page.fill("#id_name", "lr search")
        page.select_option("#id_model", label=DEMO_MODEL)
        page.select_option("#id_dataset", label=DEMO_DATASET)
        # The first row: lr on a log scale; a second row added, then removed.
        page.fill("#space-rows tr:nth-child(1) [name=p_name]", "lr")
        page.select_option("#space-rows tr:nth-child(1) [name=p_type]", "loguniform")
        page.fill("#space-rows tr:nth-child(1) [name=p_low]", "0.001")
        page.fill("#space-rows tr:nth-child(1) [name=p_high]", "0.2")
        page.click("#add-row")
        page.fill("#space-rows tr:nth-child(2) [name=p_name]", "unused")
        page.click("#space-rows tr:nth-child(2) .remove-row")
        assert page.locator("#space-rows tr").count() == 1
        page.fill("#id_objective", "test_loss")
        page.select_option("#id_algorithm", "random")
        page.fill("#id_max_trials", "3")
        page.fill("#id_max_parallel", "2")
        page.fill("#id_epochs", "1")
        page.fill("#id_batch_size", "256")
        page.click("#create-sweep")
        page.wait_for_url(re.compile(r".*/sweeps/\d+/$"), timeout=60_000)
        sweep_url = page.url
        assert "Sweep" in page.inner_text(".flash")

        # Trials appear and end while the page is open (it polls the sweep's state).
        page.wait_for_selector("#trials tbody tr[data-trial]", timeout=120_000)
        page.wait_for_function(
            "document.getElementById('sweep-state').textContent === 'completed'",
            timeout=600_000,
        )
        rows = page.locator("#trials tbody tr[data-trial]")
        assert rows.count() == 3
        states = [rows.nth(i).get_attribute("data-state") for i in range(3)]
        assert states == ["COMPLETE"] * 3, states
        assert page.inner_text("#count-completed") == "3"
        assert page.locator("#stop-form").is_hidden()
        best = page.inner_text("#best-body")
        assert "Trial" in best and "test_loss" in best
        assert page.get_attribute("#best-download", "href").endswith("/files/model.pt")

        # The parallel-coordinates plot: a line per trial, over lr (log) and the objective.
        page.locator("#chart-parcoords").scroll_into_view_if_needed()
        page.wait_for_function("document.getElementById('chart-parcoords').data")
        drawn = parcoords(page)
        assert drawn == {"type": "parcoords", "labels": ["lr (log10)", "test_loss"], "lines": 3}
        assert page.locator("#chart-parcoords .parcoords").count() == 1  # drawn, not only data
        page.wait_for_function(
            "document.getElementById('chart-curves').data?.length === 3", timeout=30_000
        )
        page.select_option("#curves-metric", "test_loss")
        page.wait_for_function(
            "document.getElementById('chart-curves').data[0].mode === 'lines+markers'"
        )

        # Two trials compared.
        page.check("#trials tbody tr[data-trial='0'] .pick")
        page.check("#trials tbody tr[data-trial='2'] .pick")
        page.click("#compare-trials")
        page.wait_for_url(re.compile(r".*/compare/\?ids=\d+,\d+$"))
        assert page.inner_text("h1") == "Compare 2 jobs"
        assert page.get_attribute("#compare-config tr[data-key='lr']", "class") == "differs"
        assert page.get_attribute("#compare-config tr[data-key='epochs']", "class") is None
        page.wait_for_function("document.getElementById('chart-compare').data?.length === 2")
        page.select_option("#curves-axis", "time")
        page.wait_for_function(
            "document.getElementById('chart-compare').layout.xaxis.type === 'date'"
        )
        assert "ids=" in (page.get_attribute("#compare-csv", "href") or "")
        compare_url = page.url

        # The jobs list: ticking the same two jobs opens the same comparison. The rows are
        # found by job, not by place: the admin sees every job of this shared EDT, and a row
        # another test's sweep adds on top moves the others down as the list refreshes.
        compared = compare_url.partition("ids=")[2].split(",")
        page.click("nav >> text=Jobs")
        page.check(f"#jobs tbody tr[data-job='{compared[0]}'] .pick")
        assert page.is_disabled("#compare-jobs")
        page.check(f"#jobs tbody tr[data-job='{compared[1]}'] .pick")
        page.click("#compare-jobs")
        page.wait_for_url(re.compile(r".*/compare/\?ids=\d+,\d+$"))
        assert sorted(page.url.partition("ids=")[2].split(",")) == sorted(compared)

        # Each sweep page fits a phone and passes axe.
        ARTIFACTS.mkdir(exist_ok=True)
        pages = {"jobs-picked": "/jobs/", "sweeps": "/sweeps/", "sweep-new": "/sweeps/new/",
                 "sweep": sweep_url.removeprefix(live.url),
                 "compare": compare_url.removeprefix(live.url)}  # fmt: skip
        found = looked_over(page, live.url, pages)
        assert not found, "\n".join(f"{where}: {what}" for where, what in found.items())
