"""A job page left open on a busy machine: its history is fetched once per (re)connection
or gap in the live sequence, never in a chain, and its charts keep moving. Runs on the
run's live EDT (tests/harness/stack.py).

Besides two busy loops, Chromium delays each of the page's HTTP requests (a server slow to
answer, whatever the machine's load is at the time): live updates then keep arriving while
a history fetch is in flight. A page that answers each of those with a fetch of its own
(the reload storm) fails here; with the delay left out it could pass on a quiet machine."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from itertools import pairwise
from typing import Any

import pytest
from playwright.sync_api import CDPSession, Page, WebSocket

from tests.browser import browser_page, log_in, start_job, stop_job
from tests.harness.stack import LiveEdt, live_edt

WATCH_S = 40  # a reload storm shows within seconds: an update a second, each fetch 1.5 s late
SAMPLES = 4
SLOW_MS = 1500  # added to every HTTP request of the watched page


def slow_server(page: Page) -> CDPSession:
    """A DevTools session on ``page``, for ``delay``."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    return cdp


def delay(cdp: CDPSession, latency_ms: int) -> None:
    """Chromium answers each HTTP request of the page ``latency_ms`` late (DevTools' network
    emulation: the responses are the server's own); 0 ends it."""
    unlimited = {"downloadThroughput": -1, "uploadThroughput": -1}
    cdp.send(
        "Network.emulateNetworkConditions", {"offline": False, "latency": latency_ms, **unlimited}
    )


class LiveCounter:
    """History fetches, WebSocket (re)connections and gaps in the sequence of live updates
    of one job page, as the browser sees them."""

    def __init__(self, page: Page, job: str) -> None:
        self.fetches = self.connections = self.gaps = 0
        self.in_flight = self.most_in_flight = 0
        self.job = job
        page.on("request", self.on_request)
        page.on("requestfinished", self.on_done)
        page.on("requestfailed", self.on_done)
        page.on("websocket", self.on_websocket)

    def history(self, request: Any) -> bool:
        return re.search(rf"/jobs/{self.job}/metrics\b", request.url) is not None

    def on_request(self, request: Any) -> None:
        if self.history(request):
            self.fetches += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def on_done(self, request: Any) -> None:
        if self.history(request):
            self.in_flight -= 1

    def on_websocket(self, ws: WebSocket) -> None:
        if f"/ws/jobs/{self.job}/" not in ws.url:
            return
        self.connections += 1
        last: list[int] = []

        def frame(payload: str | bytes) -> None:
            data = json.loads(payload)
            if data.get("type") != "metrics":
                return
            if last and data["from"] > last[0]:
                self.gaps += 1
            last[:] = [max(data["to"], last[0] if last else 0)]

        ws.on("framereceived", frame)


def last_step(page: Page) -> float:
    x = page.evaluate("document.getElementById('chart-loss').data?.[0]?.x || []")
    return float(x[-1]) if x else -1.0


@pytest.mark.browser
@pytest.mark.timeout(600)  # the live EDT may start here; 40 s of watching
def test_a_job_page_under_cpu_load_reloads_once_per_gap_and_keeps_drawing(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    live: LiveEdt = live_edt(request.config, tmp_path_factory)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with browser_page() as page:
            log_in(page, live.url, live.data_dir)
            url = start_job(page, live.url, "watched", epochs=2000)
            job = url.rstrip("/").split("/")[-1]
            drawn = "document.getElementById('chart-loss').data?.[0]?.x?.length > 3"
            page.wait_for_function(drawn, timeout=120_000)  # it runs: updates keep coming
            page.goto("about:blank")  # count the requests of one fresh job page only
            counter = LiveCounter(page, job)
            cdp = slow_server(page)
            delay(cdp, SLOW_MS)
            page.goto(url)
            page.wait_for_function(drawn, timeout=120_000)
            steps = [last_step(page)]
            for _ in range(SAMPLES):
                time.sleep(WATCH_S / SAMPLES)
                steps.append(last_step(page))
            assert all(b > a for a, b in pairwise(steps)), steps
            assert counter.connections >= 1
            allowed = counter.connections + counter.gaps
            assert 1 <= counter.fetches <= allowed, vars(counter)
            assert counter.most_in_flight == 1, vars(counter)
            delay(cdp, 0)
            stop_job(page, url)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait(timeout=10)
