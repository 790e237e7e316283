"""In Chromium: the Cluster page's chart names a job whose first allocation reached the page
before its first generation event was stored (on a busy machine the scheduler's allocation
message comes first): the legend says "job N" only until the event is there, then the
job's name, with no further allocation message.

The test's server speaks HTTP only (pytest-django's live server); the page's WebSocket is
answered by the test with one allocation frame, in the format the cluster consumer sends
(``edtweb/dashboard/consumers.py``). The history, the names and the event are the real
API's and database's.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import WebSocketRoute

from edtweb.training import services
from edtweb.training.models import Job
from tests.browser import browser_page
from tests.harness.waiting import load_factor

pytestmark = pytest.mark.django_db(transaction=True)

LEGEND = """Object.fromEntries((document.getElementById('chart-allocation').data || [])
            .map(t => [t.name, t.y[t.y.length - 1]]))"""


def test_a_job_allocated_before_its_first_event_gets_its_name_in_the_legend(
    live_server: Any, alice: Any
) -> None:
    job = Job.objects.create(owner=alice, name="robot-arm", state=Job.State.RUNNING,
                             max_workers=2)  # fmt: skip
    base = live_server.url

    def answer(ws: WebSocketRoute) -> None:  # the scheduler's first allocation for the job
        ws.send(json.dumps({"type": "allocation", "job": job.pk, "at": time.time(),
                            "workers": 2}))  # fmt: skip

    with browser_page() as page:
        page.route_web_socket("**/ws/cluster/", answer)
        page.goto(base + "/accounts/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-pass-1")
        page.click("form[action='/accounts/login/'] button[type=submit]")
        page.wait_for_url(base + "/")  # the Cluster page
        wait = {"timeout": 30_000 * load_factor()}
        page.wait_for_function(f"({LEGEND})['job {job.pk}'] === 2", **wait)

        # Its generation event is stored now (from another thread: Playwright's loop runs
        # in this one); the page reads the history again and names the job.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(services.record_event, job.pk, "generation", "2 learners",
                        workers=2).result()  # fmt: skip
        page.wait_for_function(f"({LEGEND})['robot-arm'] === 2", **wait)
        assert page.evaluate(LEGEND) == {"robot-arm": 2}
