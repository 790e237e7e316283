"""Teams on a live EDT of 8 CPU slots, through the CLI as an admin and two users drive it
(issue: teams, quotas and resource groups):

1. two teams of equal weight: carol's 3 jobs (team vision) and dave's one (team nlp) get 4
   and 4, not 6 and 2: fair share is between teams, then users, then jobs;
2. a guarantee taken back in place: nlp borrows every slot while vision is idle; vision is
   given a guarantee of 6 and submits: it holds 6 or more soon after, and nlp's job shrank
   in place: no step lost, none trained twice beyond one per shrink, never started again.

The time each change took is printed (the reclaim's own benchmark is bench/bench_teams_live.py).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.stack import LiveEdt, dataset_archive, edt_of_its_own
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.timeout(1200)

PACED = PROJECT_DIR / "tests" / "models" / "paced_mlp.py"  # 50 ms a step


def prepare(live: LiveEdt, user: str) -> None:
    live.login(user)
    archive = dataset_archive(live.tmp / user, train=512, test=64)
    live.json(user, "datasets", "upload", str(archive), "--name", "shapes", timeout=300)
    model = live.json(user, "models", "upload", str(PACED), "--name", "paced", timeout=300)
    assert model["status"] == "VALID", model


def submit(live: LiveEdt, user: str, name: str) -> int:
    job = live.json(user, "submit", "--model", "paced", "--dataset", "shapes", "--name", name,
                    "--max-workers", "8", "--batch-size", "64", "--epochs", "2000")  # fmt: skip
    return int(job["id"])


def workers(live: LiveEdt, user: str, job_id: int) -> int:
    return int(live.json(user, "jobs", "show", str(job_id))["workers"] or 0)


def timed(what: str, done: Callable[[], bool], seconds: float) -> float:
    started = time.monotonic()
    wait_for(done, seconds, what)  # scaled by the load there
    took = time.monotonic() - started
    print(f"{what}: {took:.1f} s")
    return took


def training_records(redis_url: str, job_id: int) -> list[dict[str, Any]]:
    """The job's training records as its learners wrote them (the stream, before the
    database keeps each step once); a record written twice by a retry (one time) once."""
    client = connect(redis_url)
    try:
        seen, records = set(), []
        for _, r in JobStore(client, str(job_id)).read_metrics():
            if (
                r.get("type") == "train"
                and not r.get("replay")
                and (r["step"], r["time"]) not in seen
            ):
                seen.add((r["step"], r["time"]))
                records.append(r)
        return records
    finally:
        client.close()


def test_two_teams_share_eight_slots_and_a_guarantee_is_taken_back_in_place(
    tmp_path: Path,
) -> None:
    server = RedisServer(
        tmp_path / "redis", appendonly=False, password=secrets.token_hex(16), dies_with_parent=True
    )
    server.start()
    env = subprocess_env(tmp_path / "data", REDIS_URL=server.url)
    for name in ("DATABASE_URL", "EDT_LEARNER_USER"):
        env.pop(name, None)
    with edt_of_its_own(tmp_path, env, slots=8, redis=server) as live:
        live.login("sam")
        for team, user in (("vision", "carol"), ("nlp", "dave")):
            live.json("sam", "admin", "teams", "add", team)
            added = live.edt("sam", "admin", "teams", "members", team, "add", user)
            assert added.returncode == 0, added.stderr
        prepare(live, "carol")
        prepare(live, "dave")

        # 1. Carol's three jobs take the 8 slots; Dave's one comes: 4 and 4.
        carols = [submit(live, "carol", f"c{i}") for i in range(3)]
        timed("carol's 3 jobs on 8 slots",
              lambda: sum(workers(live, "carol", j) for j in carols) == 8, 120)  # fmt: skip
        nlp = submit(live, "dave", "d")
        timed("4/4 between the teams after dave's submit",
              lambda: workers(live, "dave", nlp) == 4
              and sum(workers(live, "carol", j) for j in carols) == 4, 60)  # fmt: skip
        shown = live.json("dave", "jobs", "show", str(nlp))
        assert shown["team"] == "nlp", shown

        # 2. Vision stops; nlp borrows everything; vision gets a guarantee of 6 and submits.
        for job in carols:
            assert live.edt("carol", "stop", str(job)).returncode == 0
        timed("nlp borrowing all 8 slots", lambda: workers(live, "dave", nlp) == 8, 60)
        steps_before = len(training_records(server.url, nlp))
        live.json("sam", "admin", "teams", "set", "vision", "--guarantee", "6")
        vision = submit(live, "carol", "v")
        timed("vision holding its guarantee of 6",
              lambda: workers(live, "carol", vision) >= 6, 60)  # fmt: skip
        assert workers(live, "dave", nlp) <= 2
        timed("nlp training on after the reclaim",
              lambda: len(training_records(server.url, nlp)) >= steps_before + 20, 60)  # fmt: skip

        records = training_records(server.url, nlp)
        steps = [int(r["step"]) for r in records]
        assert sorted(set(steps)) == list(range(1, max(steps) + 1)), "a step was lost"
        assert all(b >= a - 1 for a, b in pairwise(steps)), (
            "the job started again instead of shrinking in place"
        )
        sizes = [int(r["workers"]) for r in records]
        shrinks = sum(1 for a, b in pairwise(sizes) if b < a)
        redone = sum(n - 1 for n in Counter(steps).values())
        assert shrinks >= 1 and redone <= shrinks, (shrinks, redone)
        events = live.json("dave", "jobs", "show", str(nlp))
        assert events["state"] == "RUNNING", events
