"""In Chromium: the Cluster page's chart names a job whose first allocation reached the page
before any of its events was stored (on a busy machine the scheduler's allocation message
comes first): the legend takes the job's name from the allocation itself, at once, and
never says "job N".

The test's server speaks HTTP only (pytest-django's live server); the page's WebSocket is
answered by the test with one allocation frame, as the cluster consumer sends it
(``edtweb/dashboard/consumers.py``; that it names the job is tests/test_websocket.py's
check). The history the page reads is the real API's, with no event of the job in it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from playwright.sync_api import WebSocketRoute

from edtweb.training.models import Job
from tests.browser import browser_page, log_in_as
from tests.harness.waiting import load_factor

pytestmark = pytest.mark.django_db(transaction=True)

LEGEND = """Object.fromEntries((document.getElementById('chart-allocation').data || [])
            .map(t => [t.name, t.y[t.y.length - 1]]))"""


def test_a_job_allocated_before_its_first_event_is_named_in_the_legend_by_its_allocation(
    live_server: Any, alice: Any
) -> None:
    job = Job.objects.create(owner=alice, name="robot-arm", state=Job.State.RUNNING,
                             max_workers=2)  # fmt: skip
    base = live_server.url

    def answer(ws: WebSocketRoute) -> None:  # the scheduler's first allocation for the job
        ws.send(json.dumps({"type": "allocation", "job": job.pk, "at": time.time(),
                            "workers": 2, "name": "robot-arm"}))  # fmt: skip

    with browser_page() as page:
        page.route_web_socket("**/ws/cluster/", answer)
        log_in_as(page, base, "alice", "alice-pass-1")
        page.wait_for_function(f"({LEGEND})['robot-arm'] === 2",
                               timeout=30_000 * load_factor())  # fmt: skip
        assert page.evaluate(LEGEND) == {"robot-arm": 2}
    assert not job.events.exists()  # the history had nothing to name it with
