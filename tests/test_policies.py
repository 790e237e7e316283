"""Scheduling policies: tables (each case also run with the jobs in reverse order) and
hypothesis properties. Pure code: no database, no Redis."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policies import (
    POLICIES,
    Decision,
    JobView,
    Snapshot,
    decide,
    fairshare,
    speedup,
    tiresias,
)
from tests.harness.policies import ORDERS, job
from tests.harness.processes import PROJECT_DIR


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


# The seeds' scenario on 8 slots (docs/architecture.md, "Scheduling contract").
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


def test_a_changed_job_records_its_own_inputs_and_the_decisions_totals() -> None:
    jobs = [job("A", 4, min_workers=2, current=4), job("B", priority=10000)]
    decision = decide(Snapshot(8, jobs))
    summary = decision.summary()
    assert summary == {
        "policy": "fairshare",
        "capacity": 8,
        "jobs": 2,
        "total_weight": 15000,
        "total_min": 3,
    }
    assert decision.job_inputs(jobs[0], summary) == {
        **summary,
        "weight": 5000,
        "demand": [2, 4],
        "current": 4,
        "target": 3,
        "share": 2.667,
    }  # nothing about B but the totals


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


BACKFILL = {
    "a gang that does not fit lets a later, smaller one start": (
        8, [job("A", 6), job("B", 4, 1), job("C", 2, 2)], {"A": 6, "B": 0, "C": 2}
    ),
    "running gangs are kept and never resized": (
        8, [job("A", 8, current=4), job("B", 6, 1), job("C", 4, 2)], {"A": 4, "B": 0, "C": 4}
    ),
    "submission order among those that fit": (
        6, [job("A", 2, 2), job("B", 4, 0), job("C", 2, 1)], {"A": 0, "B": 4, "C": 2}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", BACKFILL.values(), ids=BACKFILL.keys())
def test_fifo_backfill_table(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run("fifo-backfill", capacity, jobs, reverse).targets == expected


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


# Least attained service and speedup-aware shares ---------------------------------------------

NEW = ["fairshare-las", "fairshare-speedup"]
HOUR = 3600.0
LINEAR = tuple(float(n) for n in range(1, 9))
FLAT_AFTER_2 = (1.0, 1.9, 2.0, 2.0, 2.05, 2.05, 2.1, 2.1)


@ORDERS
@pytest.mark.parametrize("policy", NEW)
@pytest.mark.parametrize("jobs, expected", SEEDS.values(), ids=SEEDS.keys())
def test_the_new_policies_reproduce_the_seeds_numbers(
    jobs: list[JobView], expected: dict[str, int], reverse: bool, policy: str
) -> None:
    assert run(policy, 8, jobs, reverse).targets == expected


@ORDERS
@pytest.mark.parametrize("jobs, expected", SEEDS.values(), ids=SEEDS.keys())
def test_speedup_aware_shares_keep_the_seeds_numbers_when_both_jobs_scale(
    jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    """With measured curves that keep scaling (even sublinearly), nothing changes."""
    curve = tuple(n**0.8 for n in range(1, 9))
    jobs = [replace(j, speedup=curve) for j in jobs]
    assert run("fairshare-speedup", 8, jobs, reverse).targets == expected


LAS = {
    "less attained service is admitted first": (
        2, [job("A", current=1, attained=5 * HOUR), job("B", submitted=1), job("C", submitted=2)],
        {"A": 0, "B": 1, "C": 1},
    ),
    "priorities still dominate attained service": (
        2,
        [job("A", current=1, attained=50 * HOUR, priority=9000), job("B", submitted=1),
         job("C", submitted=2)],
        {"A": 1, "B": 1, "C": 0},
    ),
    "nearly equal service is one class: submission order, no eviction": (
        1, [job("A", current=1, attained=1.5 * HOUR), job("B", submitted=1, attained=1.1 * HOUR)],
        {"A": 1, "B": 0},
    ),
    "everyone fits: attained service changes nothing": (
        8, [job("A", attained=9 * HOUR), job("B", submitted=1)], {"A": 4, "B": 4}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("policy", NEW)
@pytest.mark.parametrize("capacity, jobs, expected", LAS.values(), ids=LAS.keys())
def test_least_attained_service_admission(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool, policy: str
) -> None:
    decision = run(policy, capacity, jobs, reverse)
    assert decision.targets == expected
    for job_id, reason in decision.reasons.items():
        if decision.targets[job_id] == 0:
            assert "less attained service" in reason


def test_fairshare_alone_still_admits_by_submission() -> None:
    jobs = [job("A", current=1, attained=5 * HOUR), job("B", submitted=1), job("C", submitted=2)]
    assert decide(Snapshot(2, jobs)).targets == {"A": 1, "B": 1, "C": 0}


SPEEDUP = {
    "a job that stops scaling leaves its share to one that scales": (
        8, [job("A", speedup=FLAT_AFTER_2), job("B", submitted=1, speedup=LINEAR)],
        {"A": 2, "B": 6},
    ),
    "slots no one uses well still go where they add the most (work conserving)": (
        8, [job("A", speedup=FLAT_AFTER_2), job("B", 4, 1, speedup=FLAT_AFTER_2[:4])],
        {"A": 5, "B": 3},
    ),
    "an unknown curve counts as linear": (
        8, [job("A", speedup=FLAT_AFTER_2), job("B", submitted=1)], {"A": 2, "B": 6}
    ),
    "a minimum is kept even where slots add nothing": (
        8, [job("A", min_workers=5, speedup=FLAT_AFTER_2), job("B", submitted=1)],
        {"A": 5, "B": 3},
    ),
    "spare slots cross a host boundary to where the envelope rises": (
        12,
        [job("A", 12, speedup=(1.0, 2.0, 3.0, 4.0, 3.0, 3.2, 3.5, 7.9, 8, 8, 8, 8)),
         job("B", 4, 1, speedup=(1.0, 1.1, 1.2, 1.3))],
        {"A": 8, "B": 4},
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, expected", SPEEDUP.values(), ids=SPEEDUP.keys())
def test_speedup_aware_shares(
    capacity: int, jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    decision = run("fairshare-speedup", capacity, jobs, reverse)
    assert decision.targets == expected
    assert all(reason for reason in decision.reasons.values())


def test_a_speedup_curve_from_observed_samples_per_second() -> None:
    assert speedup.from_rates({}, 8) == ()
    curve = speedup.from_rates({1: 100.0, 4: 300.0}, 6)
    assert curve == pytest.approx((1.0, 5 / 3, 7 / 3, 3.0, 3.75, 4.5))
    # Only a larger size seen: linear below it, its efficiency above it.
    assert speedup.from_rates({2: 180.0}, 3) == pytest.approx((1.0, 2.0, 3.0))


@st.composite
def curves(draw: st.DrawFn, top: int) -> tuple[float, ...]:
    """A speedup curve up to ``top`` (empty: unknown), not necessarily monotone."""
    if draw(st.booleans()):
        return ()
    step = st.sampled_from([-0.3, 0.0, 0.1, 0.5, 1.0])
    gains = draw(st.lists(step, min_size=top - 1, max_size=top - 1))
    values = [1.0]
    for gain in gains:
        values.append(max(0.1, values[-1] + gain))
    return tuple(values)


@st.composite
def snapshots_with_curves(draw: st.DrawFn) -> Snapshot:
    base = draw(snapshots())
    jobs = [replace(j, speedup=draw(curves(j.max_workers))) for j in base.jobs]
    return Snapshot(base.capacity, jobs)


CURVED = settings(max_examples=60, deadline=None)


@CURVED
@given(snapshots_with_curves(), st.sampled_from(NEW))
def test_new_policies_respect_min_max_and_are_work_conserving(
    snapshot: Snapshot, policy: str
) -> None:
    targets = decide(snapshot, policy).targets
    assert sum(targets.values()) <= snapshot.capacity
    free = snapshot.capacity - sum(targets.values())
    for j in snapshot.jobs:
        assert targets[j.id] == 0 or j.min_workers <= targets[j.id] <= j.max_workers
        if free:
            assert targets[j.id] == j.max_workers or (targets[j.id] == 0 and j.min_workers > free)


@PROPERTY
@given(snapshots())
def test_without_curves_speedup_aware_shares_are_fair_shares(snapshot: Snapshot) -> None:
    las = decide(snapshot, "fairshare-las").targets
    assert decide(snapshot, "fairshare-speedup").targets == las
    # ... and the same jobs are admitted as fairshare's whenever everyone's minimum fits.
    if sum(j.min_workers for j in snapshot.jobs) <= snapshot.capacity:
        assert las == decide(snapshot, "fairshare").targets


@CURVED
@given(snapshots_with_curves(), st.randoms(use_true_random=False))
def test_speedup_aware_shares_do_not_depend_on_the_input_order(
    snapshot: Snapshot, rng: random.Random
) -> None:
    shuffled = list(snapshot.jobs)
    rng.shuffle(shuffled)
    first = decide(snapshot, "fairshare-speedup")
    second = decide(Snapshot(snapshot.capacity, shuffled), "fairshare-speedup")
    assert (first.targets, first.reasons) == (second.targets, second.reasons)
