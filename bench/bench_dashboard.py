"""Dashboard benchmarks: live latency to a browser with and without 20 API clients, first
load of a job page with an empty cache, a 100,000-point job page, and the cost of 50 open
job pages to a running job. Everything runs in this one invocation.

Latency and first load compare, in interleaved pairs, EDT's web layout (pages and API from
one Daphne, WebSockets from a second; static files collected: hashed, gzipped, cached)
with the baseline of one Daphne serving everything with static files straight from the
source folders (what `make run` did before).

    python bench/bench_dashboard.py [--pairs 5] [--no-open-pages]   (make bench runs it)

Writes bench/results/dashboard.md; the processes' logs stay in the temporary folder it
names. Every window's records have steps of their own: the metrics consumer keeps one
record per (kind, step), so a step sent again is dropped (as a learner's retry must be).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
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
# benchmark harness's own, one at a time. Both layouts share the database and the key.
os.environ.update(
    EDT_DATA_DIR=str(TMP / "data"),
    DATABASE_URL=f"sqlite:///{TMP / 'edt.sqlite3'}",
    SECRET_KEY="bench-" + "k" * 50,
    DJANGO_SETTINGS_MODULE="edtweb.settings",
    DJANGO_ALLOW_ASYNC_UNSAFE="true",
)
API_CLIENTS = 20
PAIRS = 5  # --pairs

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
from protocol.connection import connect  # noqa: E402
from protocol.jobstore import JobStore  # noqa: E402
from scheduler.store import Store  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

PASSWORD = "bench-password-1"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
COLLECT = """(url) => { window.arrivals = []; if (window.liveWs) window.liveWs.close();
  const ws = new WebSocket(url); window.liveWs = ws;
  ws.onmessage = (e) => { const d = JSON.parse(e.data); const now = Date.now() / 1000;
    if (d.type === "metrics") for (const r of d.records) window.arrivals.push(now - r.time); };
  return new Promise((ok) => { ws.onopen = ok; }); }"""


LOGS = TMP / "logs"
LOGS.mkdir()
_names = itertools.count()


def start(*args: str, **extra: str) -> subprocess.Popen[bytes]:
    """A Python process of the layout, its output in ``LOGS`` (name: its command)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    words = list(args[1:] if args[0] == "-m" else args)  # a script or module, then its command
    what = "-".join(Path(w).stem for w in words[:2] if not w.startswith("-") and w != "manage.py")
    with (LOGS / f"{next(_names):02d}-{what}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=PROJECT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


_off_loop = concurrent.futures.ThreadPoolExecutor(1)


def off_loop(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` in a thread of its own: Playwright's sync API keeps an event loop in this
    one, where the live pushes of ``services`` (``async_to_sync``) cannot run."""
    return _off_loop.submit(fn, *args, **kwargs).result()


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


_steps = itertools.count(1)  # the latency job's steps, on across windows


def live_latency(page: Page, live: str, job: Job, count: int = 1000) -> list[float]:
    """Latencies of ``count`` records emitted at 100 a second, to a socket on ``live``."""
    page.evaluate(COLLECT, f"ws://{live[7:]}/ws/jobs/{job.pk}/")
    jobs = JobStore(connect(REDIS.url), job.store_id)
    for step in itertools.islice(_steps, count):  # a job doing 100 iterations a second
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
    arrivals = list(page.evaluate("window.arrivals"))
    if not arrivals:
        raise SystemExit(f"no record reached the page's socket on {live}; logs in {LOGS}")
    return arrivals


def api_load(base: str, token: str, job: Job) -> subprocess.Popen[bytes]:
    """API_CLIENTS clients, each asking in a loop for the job list, the slots and the
    metrics of a 2,000-point job (what a script or a dashboard polls)."""
    return start(str(Path(__file__)), "--api-load", base, token, str(job.pk))


def run_api_load(base: str, token: str, job: str) -> None:
    import threading

    import requests

    def client() -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        while True:
            for path in ("/api/v1/jobs/", "/api/v1/cluster/slots/", f"/api/v1/jobs/{job}/metrics/"):
                try:
                    session.get(base + path, timeout=60)
                except requests.RequestException:
                    time.sleep(0.1)

    for _ in range(API_CLIENTS):
        threading.Thread(target=client, daemon=True).start()
    threading.Event().wait()


TIMINGS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const rows = performance.getEntriesByType("resource").map((r) => ({
    name: r.name.split("?")[0].split("/").slice(3).join("/"), start: r.startTime,
    end: r.responseEnd, bytes: r.encodedBodySize, size: r.decodedBodySize }));
  return { html: nav.responseEnd, dcl: nav.domContentLoadedEventEnd, bytes: nav.encodedBodySize,
    drawn: performance.now(), resources: rows };
}"""


def first_load(browser: Any, state: Any, url: str) -> tuple[float, dict[str, Any]]:
    """Seconds from navigation to drawn charts, in a fresh context (an empty cache), and
    the page's own timings (ms from navigation: HTML, DOMContentLoaded, each request)."""
    context = browser.new_context(storage_state=state)
    page = context.new_page()
    page.set_default_timeout(180_000)
    started = time.monotonic()
    page.goto(url, wait_until="commit")
    page.wait_for_function("document.getElementById('chart-loss').data?.[0]?.x?.length > 0",
                           polling=20)  # fmt: skip
    seconds = time.monotonic() - started
    timings = page.evaluate(TIMINGS)
    context.close()
    return seconds, timings


def small_job(owner: Any, points: int = 2000) -> Job:
    job = services.submit_job(owner, name="first-load", model_path="-", data_path="-")
    Job.objects.filter(pk=job.pk).update(state=Job.State.COMPLETED, metrics_count=points)
    Metric.objects.bulk_create(
        Metric(job=job, kind="train", step=i, epoch=0, time=1e9 + i,
               values={"loss": 1 / i, "workers": 2, "samples_per_s": 100.0})
        for i in range(1, points + 1)
    )  # fmt: skip
    return job


def big_page(page: Page, base: str, owner: Any, points: int = 100_000) -> list[float]:
    job = off_loop(services.submit_job, owner, name="big", model_path="-", data_path="-")
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
    job = off_loop(
        services.submit_job,
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
    quiet_page = base + "/accounts/login/"  # same origin, no script, no socket
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
    off_loop(services.stop_job, job.pk)
    return statistics.median(quiet), statistics.median(watched), ratios


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Layout:
    """One way of serving the web: ``base`` for pages and API, ``live`` for WebSockets."""

    def __init__(self, name: str, base: str, live: str) -> None:
        self.name, self.base, self.live = name, base, live


def daphne(port: int, **extra: str) -> subprocess.Popen[bytes]:
    return start("-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "edtweb.asgi:application",
                 **extra)  # fmt: skip


def serve_both() -> tuple[Layout, Layout, list[subprocess.Popen[bytes]]]:
    """The baseline (one Daphne, static files uncollected: its own data dir without them)
    and EDT's layout (collected static files; a second Daphne for WebSockets)."""
    ports = [free_port() for _ in range(3)]
    procs = [daphne(ports[0], EDT_DATA_DIR=str(TMP / "baseline-data"))]
    call_command("collectstatic", interactive=False, verbosity=0)
    procs += [daphne(ports[1], EDT_LIVE_PORT=str(ports[2])), daphne(ports[2])]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    return Layout("one Daphne", urls[0], urls[0]), Layout("EDT", urls[1], urls[2]), procs


def compare(browser: Any, page: Page, layouts: tuple[Layout, Layout], job: Job, token: str,
            done: Job, pairs: int) -> dict[str, Any]:  # fmt: skip
    """``pairs`` interleaved rounds: each layout quiet, then under API load; first loads."""
    state = page.context.storage_state()
    kinds = ("quiet", "loaded", "load", "timings")
    out: dict[str, Any] = {f"{x.name} {k}": [] for x in layouts for k in kinds}
    out["loadavg"] = []  # the 1-minute load average after each window
    for _ in range(pairs):
        for layout in layouts:
            page.goto(f"{layout.base}/accounts/login/")  # the page holds no socket
            url = f"{layout.base}/jobs/{done.pk}/"
            seconds, timings = first_load(browser, state, url)
            out[f"{layout.name} load"].append(seconds)
            out[f"{layout.name} timings"].append(timings)
            out[f"{layout.name} quiet"].append(live_latency(page, layout.live, job, 300))
            out["loadavg"].append(os.getloadavg()[0])
            load = api_load(layout.base, token, done)
            time.sleep(2)  # the clients are connected and busy
            out[f"{layout.name} loaded"].append(live_latency(page, layout.live, job, 300))
            out["loadavg"].append(os.getloadavg()[0])
            os.killpg(load.pid, 15)
            load.wait()
    return out


def main() -> None:
    if sys.argv[1:2] == ["--api-load"]:
        run_api_load(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=PAIRS, help="interleaved rounds (5)")
    parser.add_argument("--no-open-pages", action="store_true",
                        help="leave out the 100,000-point page and the 50 open pages")  # fmt: skip
    parser.add_argument("--out", type=Path, default=PROJECT / "bench/results/dashboard.md")
    args = parser.parse_args()
    print(f"logs in {LOGS}", flush=True)
    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user("bench", "", PASSWORD)
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=owner).key
    layouts = serve_both()
    baseline, edt, procs = layouts
    procs.append(start("manage.py", "edt_scheduler"))
    procs.append(start("manage.py", "edt_metrics"))  # the stream to the database and pages
    base = edt.base
    try:
        job = fake_running_job(owner)
        done = small_job(owner)
        time.sleep(3)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page()
            page.set_default_timeout(180_000)
            login(page, base)
            pairs = compare(browser, page, (baseline, edt), job, token, done, args.pairs)
            off_loop(services.stop_job, job.pk)
            Store(connect(REDIS.url)).forget_slot("bench.0")
            others: tuple[Any, ...] | None = None
            if not args.no_open_pages:
                opens = big_page(page, base, owner)
                procs.append(start("manage.py", "edt_worker", "--cpu-slots", "1", "--host-name",
                                   "bw"))  # fmt: skip
                others = (opens, *open_pages_cost(page, edt.live, owner))
            browser.close()
    finally:
        for proc in procs:
            os.killpg(proc.pid, 15)
        for proc in procs:
            proc.wait()
        REDIS.stop()
    write(args.out, pairs, others)


def p95_ms(windows: list[list[float]]) -> list[float]:
    return [1000 * percentile(w, 0.95) for w in windows]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def latency_rows(pairs: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = []
    n = len(pairs["EDT load"])
    for cond, goal in (("quiet", "<= 250"), ("loaded", "<= 1000")):
        for name in ("one Daphne", "EDT"):
            windows = pairs[f"{name} {cond}"]
            ms = [1000 * v for w in windows for v in w]
            what = "no API load" if cond == "quiet" else f"{API_CLIENTS} API clients"
            rows.append((f"live latency, {what}, {name}: p50 / p95 (ms), {len(ms)} records",
                         f"{statistics.median(ms):.0f} / {percentile(ms, 0.95):.0f}",
                         goal if name == "EDT" else ""))  # fmt: skip
        base, edt = p95_ms(pairs[f"one Daphne {cond}"]), p95_ms(pairs[f"EDT {cond}"])
        ratios = [b / max(e, 1e-9) for b, e in zip(base, edt, strict=True)]
        rows.append((f"p95 ratio one Daphne / EDT, {cond}: min / median / max of {n} pairs",
                     spread(ratios), ""))  # fmt: skip
        rows.append((f"EDT p95 of each {cond} window (ms)", ", ".join(f"{v:.0f}" for v in edt),
                     ""))  # fmt: skip
    for name in ("one Daphne", "EDT"):
        loads = pairs[f"{name} load"]
        goal = "<= 2" if name == "EDT" else ""
        rows.append((f"job page first load, empty cache, {name} (s): median of {n}",
                     f"{statistics.median(loads):.2f}", goal))  # fmt: skip
    rows.append(("EDT first loads (s)", ", ".join(f"{v:.2f}" for v in pairs["EDT load"]), ""))
    ratios = [b / e for b, e in zip(pairs["one Daphne load"], pairs["EDT load"], strict=True)]
    rows.append((f"first load ratio one Daphne / EDT: min / median / max of {n} pairs",
                 spread(ratios), ""))  # fmt: skip
    rows.append(("1-minute load average after each latency window: min / median / max",
                 spread(pairs["loadavg"]), ""))  # fmt: skip
    return rows


def breakdown(pairs: dict[str, Any]) -> str:
    """The median EDT first load, request by request (ms from navigation)."""
    loads, timings = pairs["EDT load"], pairs["EDT timings"]
    t = timings[sorted(range(len(loads)), key=loads.__getitem__)[len(loads) // 2]]
    lines = [f"| the page (HTML) | 0 | {t['html']:.0f} | {t['bytes']:,} | |"]
    for r in sorted(t["resources"], key=lambda r: r["start"]):
        lines.append(f"| `{r['name']}` | {r['start']:.0f} | {r['end']:.0f} | {r['bytes']:,} "
                     f"| {r['size']:,} |")  # fmt: skip
    return (
        "\n\nThe median EDT first load, request by request (ms from navigation; bytes as "
        f"sent, and decoded). DOMContentLoaded at {t['dcl']:.0f} ms, charts drawn at "
        f"{t['drawn']:.0f} ms.\n\n| request | start | end | bytes | decoded |\n"
        "|---|---|---|---|---|\n" + "\n".join(lines) + "\n"
    )


def write(out: Path, pairs: dict[str, Any], others: tuple[Any, ...] | None) -> None:
    rows = latency_rows(pairs)
    if others is not None:
        opens, quiet, watched, ratios = others
        rows += [
            (
                "job page with 100,000 loss points: open (s), median of 5",
                f"{statistics.median(opens):.2f}",
                "<= 1",
            ),
            (
                f"iteration time (CNN, batch 64), no page open (ms), median of {ROUNDS + 1} "
                "windows",
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
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    text = (
        "# Dashboard benchmarks\n\nOne run of `python bench/bench_dashboard.py` on this "
        f"machine ({os.cpu_count()} cores; load average at the end {load}): web (Daphne), "
        "scheduler, metrics consumer, Redis and Chromium on the same host. Latency: from a "
        "record entering the job's Redis stream (as a learner emits it) to its arrival in a "
        "WebSocket of a page in Chromium, through the metrics consumer (`edt_metrics`); 300 "
        "records at 100 a second per window, each window with steps of its own. API load: "
        f"{API_CLIENTS} clients (one process, threads) asking in a loop for the job list, "
        "the slots and a 2,000-point job's metrics, against the layout's web port. One "
        "Daphne: pages, API, WebSockets and uncompressed static files from one process "
        "(the baseline). EDT: pages and API from one Daphne, WebSockets from a second "
        "(`make run`), static files collected (hashed names, compressed). First load: a "
        "fresh browser context (empty cache), from navigation to the drawn charts of a "
        "2,000-point job."
        + (
            " Open pages: 50 WebSockets on the job's live group, opened and closed in "
            "alternating windows while a CNN trains on one CPU slot."
            if others is not None
            else ""
        )
        + "\n\n"
        + table
        + breakdown(pairs)
    )
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
