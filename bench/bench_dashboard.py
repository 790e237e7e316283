"""Dashboard benchmarks: live latency to a browser, a 100,000-point job page, and the cost
of 50 open job pages to a running job. Everything runs in this one invocation.

    python bench/bench_dashboard.py        (make bench runs it)

Writes bench/results/dashboard.md.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
TMP = Path(tempfile.mkdtemp(prefix="edt-bench-dash-"))
# Playwright's sync API keeps an event loop in this thread; the ORM calls here are a
# benchmark harness's own, one at a time.
os.environ.update(
    EDT_DATA_DIR=str(TMP / "data"),
    DJANGO_SETTINGS_MODULE="edtweb.settings",
    DJANGO_ALLOW_ASYNC_UNSAFE="true",
)

from edtweb.redis_server import RedisServer, free_port  # noqa: E402

REDIS = RedisServer(TMP / "redis", appendonly=False).start()
os.environ["REDIS_URL"] = REDIS.url

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from playwright.sync_api import Page, sync_playwright  # noqa: E402

from edtweb.training import services  # noqa: E402
from edtweb.training.models import Job, Metric  # noqa: E402
from scheduler.store import JobStore, Store, connect  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

PASSWORD = "bench-password-1"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
COLLECT = """(url) => { window.arrivals = []; const ws = new WebSocket(url);
  ws.onmessage = (e) => { const d = JSON.parse(e.data); const now = Date.now() / 1000;
    if (d.type === "metrics") for (const r of d.records) window.arrivals.push(now - r.time); };
  return new Promise((ok) => { ws.onopen = ok; }); }"""


def start(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def fake_running_job(owner: Any) -> Job:
    """A RUNNING job whose learner is this benchmark: it writes the metric records."""
    job = services.submit_job(owner, name="latency", model_path="-", data_path="-")
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING)
    store = Store(connect(REDIS.url))
    store.register_slot("bench", 0, "cpu", os.getpid())
    store.heartbeat("bench.0", {"kind": "cpu"}, ttl=3600)
    jobs = JobStore(store.r, job.store_id)
    jobs.set_dispatch("bench.0", "bench-token")
    jobs.adopt(jobs.publish_generation(["bench.0"]))
    return job


def login(page: Page, base: str) -> None:
    page.goto(base + "/accounts/login/")
    page.fill("#id_username", "bench")
    page.fill("#id_password", PASSWORD)
    page.click("form[action='/accounts/login/'] button[type=submit]")
    page.wait_for_url(base + "/")


def live_latency(page: Page, base: str, job: Job, count: int = 1000) -> list[float]:
    page.goto(f"{base}/jobs/{job.pk}/")
    page.evaluate(COLLECT, f"ws://{base[7:]}/ws/jobs/{job.pk}/")
    jobs = JobStore(connect(REDIS.url), job.store_id)
    for step in range(1, count + 1):  # a job doing 100 iterations a second
        jobs.emit(
            {
                "type": "train",
                "step": step,
                "epoch": 0,
                "iteration": step,
                "loss": 1.0,
                "workers": 1,
                "lr": 0.01,
                "samples_per_s": 1000.0,
                "time": time.time(),
            }
        )
        time.sleep(0.01)
    deadline = time.monotonic() + 30
    while page.evaluate("window.arrivals.length") < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(page.evaluate("window.arrivals"))


def big_page(page: Page, base: str, owner: Any, points: int = 100_000) -> list[float]:
    job = services.submit_job(owner, name="big", model_path="-", data_path="-")
    Job.objects.filter(pk=job.pk).update(state=Job.State.COMPLETED, metrics_count=points)
    rows = [
        Metric(
            job=job,
            kind="train",
            step=i,
            epoch=i // 1000,
            time=1e9 + i,
            values={"loss": 1 / i, "workers": 4, "samples_per_s": 100.0},
        )
        for i in range(1, points + 1)
    ]
    Metric.objects.bulk_create(rows, batch_size=5000)
    seconds = []
    for _ in range(5):
        started = time.monotonic()
        page.goto(f"{base}/jobs/{job.pk}/")
        page.wait_for_function("document.getElementById('chart-loss').data?.[0]?.x?.length > 0")
        seconds.append(time.monotonic() - started)
    return seconds


def step_times(job: Job, seconds: float) -> list[float]:
    since = time.time()
    time.sleep(seconds)
    times = list(
        Metric.objects.filter(job=job, kind="train", time__gte=since)
        .order_by("step")
        .values_list("time", flat=True)
    )
    return [b - a for a, b in itertools.pairwise(times)]


ROUNDS = 4  # alternating quiet and watched windows: this host's speed drifts over a run
WINDOW = 8.0  # seconds of iterations per window


def open_pages_cost(page: Page, base: str, owner: Any) -> tuple[float, float, list[float]]:
    """Median iteration time with no page open and with 50 open (their WebSockets), and the
    per-round ratios watched / mean of the quiet windows either side."""
    data = write_cifar10(TMP / "cifar", train=20_000, test=100)
    job = services.submit_job(
        owner,
        name="steady",
        model_path=str(PROJECT / "examples/cnn.py"),
        data_path=str(data),
        max_workers=1,
        epochs=1000,
    )
    deadline = time.monotonic() + 60
    while Metric.objects.filter(job=job).count() < 50 and time.monotonic() < deadline:
        time.sleep(0.5)
    quiet_page = base + "/static/edt/favicon.svg"  # same origin, no script, no socket
    page.goto(quiet_page)
    quiet = [statistics.median(step_times(job, WINDOW))]
    watched, ratios = [], []
    for _ in range(ROUNDS):
        for _ in range(50):
            page.evaluate(COLLECT, f"ws://{base[7:]}/ws/jobs/{job.pk}/")
        watched.append(statistics.median(step_times(job, WINDOW)))
        page.goto(quiet_page)  # the 50 sockets close
        quiet.append(statistics.median(step_times(job, WINDOW)))
        ratios.append(watched[-1] / ((quiet[-2] + quiet[-1]) / 2))
    services.stop_job(job.pk)
    return statistics.median(quiet), statistics.median(watched), ratios


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench", "", PASSWORD)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs = [
        start("-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "edtweb.asgi:application"),
        start("manage.py", "edt_scheduler"),
    ]
    try:
        job = fake_running_job(owner)
        time.sleep(3)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page()
            login(page, base)
            latencies = live_latency(page, base, job)
            services.stop_job(job.pk)
            Store(connect(REDIS.url)).forget_slot("bench.0")
            opens = big_page(page, base, owner)
            procs.append(start("manage.py", "edt_worker", "--cpu-slots", "1", "--host-name", "bw"))
            quiet, watched, ratios = open_pages_cost(page, base, owner)
            browser.close()
    finally:
        for proc in procs:
            os.killpg(proc.pid, 15)
        for proc in procs:
            proc.wait()
        REDIS.stop()
    write(latencies, opens, quiet, watched, ratios)


def write(
    latencies: list[float], opens: list[float], quiet: float, watched: float, ratios: list[float]
) -> None:
    ms = [1000 * v for v in latencies]
    rows = [
        (f"live latency p50 (ms), {len(ms)} records", f"{statistics.median(ms):.0f}", ""),
        ("live latency p95 (ms)", f"{percentile(ms, 0.95):.0f}", "<= 250"),
        (
            "job page with 100,000 loss points: open (s), median of 5",
            f"{statistics.median(opens):.2f}",
            "<= 1",
        ),
        (
            f"iteration time (CNN, batch 64), no page open (ms), median of {ROUNDS + 1} windows",
            f"{1000 * quiet:.1f}",
            "",
        ),
        (
            f"iteration time, 50 job pages open (ms), median of {ROUNDS} windows",
            f"{1000 * watched:.1f}",
            "",
        ),
        (
            "slowdown with 50 pages: median of the rounds (each against the quiet windows "
            "either side)",
            f"{100 * (statistics.median(ratios) - 1):+.1f} %",
            "within 2 %",
        ),
        ("the rounds", ", ".join(f"{100 * (r - 1):+.1f} %" for r in ratios), ""),
    ]
    table = "| measure | value | goal |\n|---|---|---|\n" + "".join(
        f"| {a} | {b} | {c} |\n" for a, b, c in rows
    )
    text = (
        "# Dashboard benchmarks\n\nOne run of `python bench/bench_dashboard.py` on this "
        f"machine ({os.cpu_count()} cores): web (Daphne), scheduler, Redis and Chromium on "
        "the same host. Latency: from a record entering the job's Redis stream (as a "
        "learner emits it) to its arrival in a WebSocket of a page in Chromium. Open "
        "pages: 50 WebSockets on the job's live group (what each open job page costs the "
        "server in live updates), opened and closed in alternating windows while a CNN "
        "trains on one CPU slot.\n\n" + table
    )
    (PROJECT / "bench" / "results").mkdir(exist_ok=True)
    (PROJECT / "bench" / "results" / "dashboard.md").write_text(text)
    print(text)
    print(json.dumps({"latencies_ms": len(ms)}))


if __name__ == "__main__":
    main()
