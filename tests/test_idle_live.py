"""Idle jobs on a live EDT of 4 CPU slots (docs/architecture.md, "Idle jobs"), with a model
that sleeps in its step (tests/models/sleeping_mlp.py) and an idle time of a few seconds:
two such jobs of 2 slots each, one in team "lazy" whose rule shrinks idle jobs, one in
team "kept" whose rule does not. Both are flagged idle in the API, `edt why`, `/metrics`,
the job page and the Cluster page; lazy's job is shrunk to its minimum of 1, never stopped,
with an event saying why; kept's keeps its 2 slots."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from edtweb.redis_server import RedisServer
from tests.browser import browser_page, log_in_as
from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.stack import LiveEdt, dataset_archive, edt_of_its_own
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

SLEEPING = PROJECT_DIR / "tests" / "models" / "sleeping_mlp.py"  # 0.5 s a forward, asleep
IDLE_SECONDS = 4
IDLE_PERCENT = 10


def submit(live: LiveEdt, user: str, name: str) -> int:
    job = live.json(user, "submit", "--model", "sleepy", "--dataset", "shapes", "--name", name,
                    "--min-workers", "1", "--max-workers", "2", "--batch-size", "32",
                    "--epochs", "1000")  # fmt: skip
    return int(job["id"])


def shown(live: LiveEdt, user: str, job: int) -> dict[str, Any]:
    answer: dict[str, Any] = live.json(user, "jobs", "show", str(job))
    return answer


def idle_gauges(url: str) -> dict[tuple[str, str], float]:
    """(gauge, job) -> value of ``/metrics``' idle gauges."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    return {
        (s.name, s.labels["job"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("edt_job_idle", "edt_job_idle_held")
    }


def events(live: LiveEdt, user: str, job: int) -> list[dict[str, Any]]:
    """The job's timeline over the REST API, as ``user``."""
    login = {"username": user, "password": f"{user}-pass-1"}
    token = requests.post(f"{live.url}/api/v1/auth/token/", json=login, timeout=30).json()
    answer = requests.get(f"{live.url}/api/v1/jobs/{job}/events/", timeout=30,
                          headers={"Authorization": f"Token {token['token']}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()
    return found


def test_a_sleeping_job_is_flagged_and_shrunk_only_where_its_teams_rule_says(
    tmp_path: Path,
) -> None:
    server = RedisServer(
        tmp_path / "redis", appendonly=False, password=secrets.token_hex(16), dies_with_parent=True
    )
    server.start()
    env = subprocess_env(tmp_path / "data", REDIS_URL=server.url,
                         EDT_IDLE_SECONDS=str(IDLE_SECONDS),
                         EDT_IDLE_UTILISATION=str(IDLE_PERCENT))  # fmt: skip
    for name in ("DATABASE_URL", "EDT_LEARNER_USER"):
        env.pop(name, None)
    with edt_of_its_own(tmp_path, env, slots=4, redis=server) as live:
        live.login("sam")
        live.json("sam", "admin", "teams", "add", "lazy", "--shrink-idle")
        live.json("sam", "admin", "teams", "add", "kept")
        for team, user in (("lazy", "carol"), ("kept", "dave")):
            added = live.edt("sam", "admin", "teams", "members", team, "add", user)
            assert added.returncode == 0, added.stderr
            live.login(user)
        archive = dataset_archive(tmp_path / "upload", train=256, test=32)
        live.json("carol", "datasets", "upload", str(archive), "--name", "shapes", timeout=300)
        model = live.json("carol", "models", "upload", str(SLEEPING), "--name", "sleepy",
                          timeout=300)  # fmt: skip
        assert model["status"] == "VALID", model
        archive_dave = dataset_archive(tmp_path / "upload-dave", train=256, test=32)
        live.json("dave", "datasets", "upload", str(archive_dave), "--name", "shapes", timeout=300)
        live.json("dave", "models", "upload", str(SLEEPING), "--name", "sleepy", timeout=300)

        lazy, kept = submit(live, "carol", "lazy-sleeper"), submit(live, "dave", "kept-sleeper")
        assert shown(live, "carol", lazy)["team"] == "lazy"
        both = (("carol", lazy), ("dave", kept))
        grown: set[int] = set()  # lazy's may be flagged and shrunk before kept's has grown

        def both_grew() -> bool:
            grown.update(j for u, j in both if shown(live, u, j)["workers"] == 2)
            return len(grown) == len(both)

        wait_for(both_grew, 180, "both jobs on 2 slots")
        started = time.monotonic()

        # Both are flagged: in the API, and in `edt why`.
        wait_for(lambda: shown(live, "carol", lazy)["idle"] and shown(live, "dave", kept)["idle"],
                 120, "both jobs flagged idle")  # fmt: skip
        print(f"flagged idle {time.monotonic() - started:.1f} s after both held 2 slots")
        slots = live.json("sam", "cluster")["slots"]
        print("slots' utilisation:", [s["telemetry"].get("utilisation") for s in slots])
        kept_status = shown(live, "dave", kept)
        assert "no rule of its team or group shrinks it" in kept_status["idle"], kept_status
        why = live.edt("dave", "why", str(kept))
        assert kept_status["idle"].split(" (")[0].startswith("idle for"), kept_status
        assert "no rule of its team or group shrinks it" in why.stdout, why.stdout

        # Lazy's rule shrinks its job to its minimum, never stopping it; kept's does not.
        wait_for(lambda: shown(live, "carol", lazy)["workers"] == 1, 60, "lazy's job at 1 slot")
        rule = f"under {IDLE_PERCENT} % utilisation for {IDLE_SECONDS} s"
        said = f"idle: {rule}; shrunk to its minimum of 1 by team lazy's rule"
        scaled = [e for e in events(live, "carol", lazy) if e["kind"] == "scaled"]
        assert scaled and scaled[-1]["message"] == said, scaled
        lazy_status = shown(live, "carol", lazy)
        assert lazy_status["state"] == "RUNNING", lazy_status
        assert "held at its minimum by team lazy's rule" in lazy_status["idle"], lazy_status
        assert lazy_status["reason"] == said, lazy_status  # its standing says it too
        kinds = [e["kind"] for e in events(live, "dave", kept)]
        assert "idle" in kinds, kinds
        assert all("shrunk" not in e["message"] for e in events(live, "dave", kept))

        # /metrics flags both, and which one a rule holds.
        wait_for(lambda: idle_gauges(live.url).get(("edt_job_idle_held", str(lazy))) == 1, 30,
                 "lazy's job held in /metrics")  # fmt: skip
        gauges = idle_gauges(live.url)
        assert gauges[("edt_job_idle", str(lazy))] == 1 and gauges[("edt_job_idle", str(kept))] == 1
        assert gauges[("edt_job_idle_held", str(kept))] == 0, gauges

        # The pages: the job's Idle card, the idle badge on the Cluster page's slots.
        with browser_page() as page:
            log_in_as(page, live.url, "carol", "carol-pass-1")
            page.wait_for_selector(".badge.idle-job")
            page.goto(f"{live.url}/jobs/{lazy}/")
            page.wait_for_selector("#idle:not([hidden])")
            assert "held at its minimum by team lazy's rule" in page.inner_text("#idle")

        # Held, not flapping: still at 1 (and kept's at 2) after another idle time and settle.
        deadline = time.monotonic() + 3 * IDLE_SECONDS
        while time.monotonic() < deadline:
            assert shown(live, "carol", lazy)["workers"] == 1
            assert shown(live, "dave", kept)["workers"] == 2
        for user, job in both:
            assert live.edt(user, "stop", str(job)).returncode == 0
