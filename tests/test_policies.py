"""Scheduling policies: tables (each case also run with the jobs in reverse order) and
hypothesis properties. Pure code: no database, no Redis."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policies import (
    POLICIES,
    QUEUED,
    RUNNING,
    Decision,
    JobView,
    Snapshot,
    decide,
    fairshare,
    tiresias,
)
from tests.conftest import PROJECT_DIR

ORDERS = pytest.mark.parametrize("reverse", [False, True], ids=["given-order", "reversed"])


def job(job_id: str, max_workers: int = 8, submitted: float = 0.0, **fields: Any) -> JobView:
    """A job; RUNNING when it holds slots, unless a state is given."""
    fields.setdefault("state", RUNNING if fields.get("current") else QUEUED)
    return JobView(job_id, max_workers, submitted, **fields)


def run(policy: str, capacity: int, jobs: list[JobView], reverse: bool) -> Decision:
    return decide(Snapshot(capacity, jobs[::-1] if reverse else jobs), policy)


def test_policies_import_nothing_from_django_redis_celery_or_torch() -> None:
    code = (
        "import sys, scheduler.policies, scheduler.placement, scheduler.simulate\n"
        "banned = {'django', 'redis', 'celery', 'kombu', 'torch', 'channels'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# The seeds' scenario on 8 slots (DESIGN.md, "Scheduling contract").
SEEDS = {
    "A alone gets 8": ([job("A")], {"A": 8}),
    "B arrives at equal priority: 4/4": (
        [job("A", current=8), job("B", submitted=1)], {"A": 4, "B": 4}
    ),
    "B at 10000 vs A at 5000: 5/3": (
        [job("A", current=4), job("B", submitted=1, current=4, priority=10000)],
        {"A": 3, "B": 5},
    ),
    "A done: B gets 8": (
        [job("A", current=3, state="COMPLETED"), job("B", submitted=1, current=5, priority=10000)],
        {"B": 8},
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("jobs, expected", SEEDS.values(), ids=SEEDS.keys())
def test_fairshare_reproduces_the_seeds_numbers_on_8_slots(
    jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("fairshare", 8, jobs, reverse).targets == expected


def test_each_changed_job_gets_a_readable_reason_and_unchanged_ones_none() -> None:
    jobs = [job("A", current=4), job("B", submitted=1, current=4, priority=10000), job("C", 1)]
    decision = decide(Snapshot(9, jobs))
    assert decision.targets == {"B": 5, "A": 3, "C": 1}
    assert set(decision.reasons) == {"A", "B", "C"}
    two = decide(Snapshot(8, jobs[:2]))
    assert two.reasons["A"] == (
        "4→3: shares 8 slots with B at priority 10000 vs 5000; exact share 2.67"
    )
    assert two.changes() == {"A": (4, 3), "B": (4, 5)}
    steady = decide(Snapshot(8, [job("A", current=3), job("B", 8, 1, current=5, priority=10000)]))
    assert steady.reasons == {}


def test_a_decision_records_its_inputs() -> None:
    decision = decide(Snapshot(8, [job("A", 4, min_workers=2), job("B", priority=10000)]))
    assert decision.inputs() == {
        "policy": "fairshare",
        "capacity": 8,
        "weights": {"A": 5000, "B": 10000},
        "demands": {"A": [2, 4], "B": [1, 8]},
        "current": {"A": 0, "B": 0},
        "shares": {"A": 2.667, "B": 5.333},
    }


FAIRSHARE = {
    "a capped job's surplus is refilled to the others": (
        8, [job("A", 2), job("B", 8, 1), job("C", 8, 2)], {"A": 2, "B": 3, "C": 3}
    ),
    "weights are priorities": (
        10, [job("A", priority=1000), job("B", 9, 1, priority=4000)], {"A": 2, "B": 8}
    ),
    "largest remainders go to the earlier submissions": (
        8, [job("A", submitted=0), job("B", submitted=1), job("C", submitted=2)],
        {"A": 3, "B": 3, "C": 2},
    ),
    "a minimum is a floor": (8, [job("A", min_workers=6), job("B", 8, 1)], {"A": 6, "B": 2}),
    "below the sum of minimums, priority then submission": (
        8,
        [job("A", min_workers=4), job("B", 8, 1, min_workers=4, priority=10000),
         job("C", 8, 2, min_workers=4)],
        {"A": 4, "B": 4, "C": 0},
    ),
    "a minimum that does not fit lets a smaller one behind it start": (
        5, [job("A", min_workers=4), job("B", 8, 1, min_workers=4), job("C", 8, 2)],
        {"A": 4, "B": 0, "C": 1},
    ),
    "every max fits: each job gets its max": (16, [job("A", 3), job("B", 5, 1)], {"A": 3, "B": 5}),
    "no slots: everyone waits": (0, [job("A", current=2), job("B", 4, 1)], {"A": 0, "B": 0}),
    "a high priority job is still capped at its max": (
        8, [job("A", 2, priority=10000), job("B", 8, 1, priority=1)], {"A": 2, "B": 6}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", FAIRSHARE.values(), ids=FAIRSHARE.keys())
def test_fairshare_table(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("fairshare", capacity, jobs, reverse).targets == expected


def test_a_running_job_that_loses_its_minimum_is_suspended_with_a_reason() -> None:
    jobs = [job("A", min_workers=4, current=4), job("B", 8, 1, min_workers=6, priority=9000)]
    decision = decide(Snapshot(8, jobs))
    assert decision.targets == {"B": 8, "A": 0}
    assert decision.reasons["A"].startswith("4→0: suspended: minimums total 10 > 8 slots")


PRIORITY = {
    "the highest priority is filled to its max first": (
        8, [job("A", 6, priority=10000), job("B", 8, 1)], {"A": 6, "B": 2}
    ),
    "equal priorities: the earlier submission first": (
        8, [job("A", 6, 1), job("B", 6, 0)], {"A": 2, "B": 6}
    ),
    "a minimum that does not fit waits, a smaller one behind it runs": (
        8, [job("A", 6), job("B", 4, 1, min_workers=3), job("C", 4, 2)], {"A": 6, "B": 0, "C": 2}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", PRIORITY.values(), ids=PRIORITY.keys())
def test_priority_table(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("priority", capacity, jobs, reverse).targets == expected


FIFO_GANG = {
    "a gang starts whole or not at all, in submission order": (
        8, [job("A", 6), job("B", 4, 1), job("C", 2, 2)], {"A": 6, "B": 0, "C": 0}
    ),
    "a running gang is never resized, even with free slots": (
        8, [job("A", 8, current=4)], {"A": 4}
    ),
    "a gang larger than the cluster runs on the whole cluster": (8, [job("A", 16)], {"A": 8}),
    "a gang whose slots were lost goes back to the queue": (
        4, [job("A", 4, current=4), job("B", 2, 1, current=2)], {"A": 4, "B": 0}
    ),
    "priority is ignored": (4, [job("A", 4), job("B", 4, 1, priority=10000)], {"A": 4, "B": 0}),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", FIFO_GANG.values(), ids=FIFO_GANG.keys())
def test_fifo_gang_table(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("fifo-gang", capacity, jobs, reverse).targets == expected


LIMIT = tiresias.DEFAULT_THRESHOLD
TIRESIAS = {
    "less attained service first: a new job preempts one past the threshold": (
        4, [job("A", 4, current=4, attained=LIMIT), job("B", 4, 1)], {"A": 0, "B": 4}
    ),
    "within a queue, submission order": (
        4, [job("A", 4, 1, current=4, attained=10.0), job("B", 4, 0)], {"A": 0, "B": 4}
    ),
    "a gang that does not fit is skipped, a smaller one runs": (
        6, [job("A", 4), job("B", 4, 1), job("C", 2, 2)], {"A": 4, "B": 0, "C": 2}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", TIRESIAS.values(), ids=TIRESIAS.keys())
def test_tiresias_table(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("tiresias", capacity, jobs, reverse).targets == expected


def test_it_rejects_invalid_jobs_and_unknown_policies() -> None:
    with pytest.raises(ValueError, match="min_workers"):
        JobView("A", 2, min_workers=3)
    with pytest.raises(ValueError, match="priority"):
        JobView("A", 2, priority=10001)
    with pytest.raises(ValueError, match="share an id"):
        decide(Snapshot(4, [job("A"), job("A", 2, 1)]))
    with pytest.raises(ValueError, match="unknown policy"):
        decide(Snapshot(4, []), "lottery")


# Properties -------------------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """Up to 12 jobs on up to 64 slots; few distinct priorities and times, so ties happen."""
    count = draw(st.integers(0, 12))
    jobs = []
    for index in range(count):
        top = draw(st.integers(1, 16))
        jobs.append(
            JobView(
                f"j{index}",
                top,
                submitted=draw(st.integers(0, 4)),
                priority=draw(st.sampled_from([1, 2500, 5000, 7000, 10000])),
                min_workers=draw(st.integers(1, top)),
                current=draw(st.integers(0, top)),
                attained=draw(st.sampled_from([0.0, LIMIT])),
            )
        )
    return Snapshot(draw(st.integers(0, 64)), jobs)


ELASTIC = ["fairshare", "priority"]
PROPERTY = settings(max_examples=150, deadline=None)


@PROPERTY
@given(snapshots(), st.sampled_from(sorted(POLICIES)))
def test_no_policy_hands_out_more_slots_than_exist(snapshot: Snapshot, policy: str) -> None:
    assert sum(decide(snapshot, policy).targets.values()) <= snapshot.capacity


@PROPERTY
@given(snapshots(), st.sampled_from(ELASTIC))
def test_elastic_policies_respect_min_and_max(snapshot: Snapshot, policy: str) -> None:
    targets = decide(snapshot, policy).targets
    for j in snapshot.jobs:
        assert targets[j.id] == 0 or j.min_workers <= targets[j.id] <= j.max_workers


@PROPERTY
@given(snapshots(), st.sampled_from(ELASTIC))
def test_elastic_policies_are_work_conserving(snapshot: Snapshot, policy: str) -> None:
    """No free slot while a running job is below its max, or a waiting job's min would fit."""
    targets = decide(snapshot, policy).targets
    free = snapshot.capacity - sum(targets.values())
    if free:
        for j in snapshot.jobs:
            assert targets[j.id] == j.max_workers or (targets[j.id] == 0 and j.min_workers > free)


def reference_shares(jobs: list[JobView], capacity: int) -> dict[str, float]:
    """Weighted max-min by bisection on the water level: independent of the policy's sweep."""
    if sum(j.max_workers for j in jobs) <= capacity:
        return {j.id: float(j.max_workers) for j in jobs}

    def total(level: float) -> float:
        return sum(min(max(level * j.priority, j.min_workers), j.max_workers) for j in jobs)

    low, high = 0.0, max(j.max_workers / j.priority for j in jobs)
    for _ in range(200):
        middle = (low + high) / 2
        if total(middle) < capacity:
            low = middle
        else:
            high = middle
    return {j.id: min(max(high * j.priority, j.min_workers), j.max_workers) for j in jobs}


@PROPERTY
@given(snapshots())
def test_fairshare_is_within_one_slot_of_the_exact_weighted_share(snapshot: Snapshot) -> None:
    targets = fairshare.decide(snapshot).targets
    admitted = [j for j in snapshot.jobs if targets[j.id] > 0]
    exact = reference_shares(admitted, snapshot.capacity)
    for j in admitted:
        assert abs(targets[j.id] - exact[j.id]) < 1 + 1e-9


@PROPERTY
@given(snapshots(), st.sampled_from(sorted(POLICIES)), st.randoms(use_true_random=False))
def test_every_policy_gives_the_same_answer_for_any_input_order(
    snapshot: Snapshot, policy: str, rng: random.Random
) -> None:
    shuffled = list(snapshot.jobs)
    rng.shuffle(shuffled)
    first, second = decide(snapshot, policy), decide(Snapshot(snapshot.capacity, shuffled), policy)
    assert (first.targets, first.reasons) == (second.targets, second.reasons)
