"""A learner move, live (docs/architecture.md, "Learner moves"): real slot workers on two
hosts, a real scheduler, real gloo learners and Redis. A job spread over two hosts moves
its learner onto the host holding the other once a slot frees there: in one generation, the
count unchanged, no step lost and at most the iteration in flight trained again."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from edtweb.training import services
from edtweb.training.models import Job, Metric
from scheduler.store import Store
from tests.harness.cluster import Cluster, descendants, is_learner
from tests.harness.jobs import redone, stream_steps, submit, workers_of
from tests.harness.waiting import bound, wait_for
from workers.learner.datasets import write_cifar10

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis("private_redis")]


def members(job: Job) -> list[str]:
    jobs = services.job_store(job.pk)
    return jobs.members(jobs.adopted())


def host(slot: str) -> str:
    return slot.rpartition(".")[0]


def test_a_spread_job_moves_its_learner_next_to_the_other_without_losing_a_step(
    cluster: Cluster, store: Store, alice: Any, tmp_path: Path
) -> None:
    cluster.env["EDT_MOVE_INTERVAL"] = "15"  # a move pays back within 15 s: 10 % for 1 s
    cluster.start_slots(2)
    cluster.start_scheduler()
    data = write_cifar10(tmp_path / "data", train=1024, test=64)
    blocker = submit(alice, "blocker", data, epochs=200, max_workers=1)
    wait_for(lambda: workers_of(blocker) == 1, 60, "the blocker on one slot of the first host")
    other = f"{cluster.host}b"
    second = cluster.start_host(other, 1)
    job = submit(alice, "spread", data, epochs=100, max_workers=2)
    wait_for(lambda: workers_of(job) == 2, 60, "the job on 2 slots")
    before = members(job)
    assert {host(s) for s in before} == {cluster.host, other}, before  # spread over both
    (old,) = [s for s in before if host(s) == other]

    stopped_at = time.time()
    services.stop_job(blocker.pk)  # a slot frees on the host holding the job's other learner
    wait_for(lambda: {host(s) for s in members(job)} == {cluster.host} and workers_of(job) == 2,
             30, "the job's learners on one host")  # fmt: skip
    moved_at = time.time()
    after = members(job)
    step_at_move = stream_steps(job)[-1]
    wait_for(lambda: stream_steps(job)[-1] >= step_at_move + 10, 30, "10 steps after the move")

    # The old learner left on its own, its slot free; the new one is a member.
    wait_for(lambda: not [p for p in descendants(second.pid) if is_learner(p)], 15,
             "the old learner to exit")  # fmt: skip
    record = store.allocations().jobs[job.pk]
    assert old not in (*record.members, *record.joiners)
    assert set(record.members) == set(after) and old not in after and before[0] in after
    # One generation: no failure, no restart, nothing trained twice beyond one iteration.
    kinds = list(job.events.values_list("kind", flat=True))
    assert "failure" not in kinds and "restart" not in kinds, kinds
    assert kinds.count("moved") == 1, kinds
    generations = [e.data for e in job.events.filter(kind="generation")]
    assert [g["why"] for g in generations if g["why"].startswith("move")] == [
        f"move {old} -> {next(s for s in after if s not in before)}"
    ]
    assert len(generations) == 2, generations  # grow to 2, then the move: nothing between
    steps = stream_steps(job)
    assert sorted(set(steps)) == list(range(1, max(steps) + 1)), f"a step was lost: {steps}"
    assert redone(job) <= 1, f"{redone(job)} iterations trained again: {steps}"
    stored = [m.step for m in Metric.objects.filter(job=job, kind="train")]
    assert stored == list(range(1, len(stored) + 1))
    # The move's pause: the longest gap between two steps around it, against an iteration.
    times = [r["time"] for _, r in services.job_store(job.pk).read_metrics()
             if r.get("type") == "train" and not r.get("replay")]  # fmt: skip
    gaps = [b - a for a, b in itertools.pairwise(times)]
    iteration = statistics.median(gaps)
    around = [b - a for a, b in itertools.pairwise(times) if stopped_at <= b <= moved_at + 1]
    pause = max(around)
    print(f"move pause {pause:.3f} s, iteration {iteration:.3f} s, "
          f"{moved_at - stopped_at:.1f} s from the stop to the move")  # fmt: skip
    assert pause <= iteration + bound(2.0), f"the move paused the job {pause:.2f} s"
