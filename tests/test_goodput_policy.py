"""The goodput policy and its arithmetic: tables (each case also run with the jobs in reverse
order), brute-force optima, hypothesis properties, and the simulators running it. Pure code:
no database, no Redis."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policies import (
    QUEUED,
    RUNNING,
    Decision,
    JobView,
    Snapshot,
    Team,
    ThroughputModel,
    decide,
    fairshare,
    las,
    slots_by_team,
)
from scheduler.policies import goodput as policy
from scheduler.policies.throughput import best_batch, efficiency, goodput, split
from scheduler.simulate import Config, TraceJob, jobs_from_trace, simulate
from scheduler.simulate.__main__ import main
from scheduler.simulate.cluster import Cluster, ClusterConfig, simulate_workload
from scheduler.simulate.pollux import (
    Application,
    WorkloadJob,
    load_applications,
    trace_profiles,
)
from scheduler.simulate.speedup import AppFit
from tests.harness.policies import ORDERS, job
from tests.harness.processes import PROJECT_DIR

POLLUX = PROJECT_DIR / "tests" / "data" / "pollux-osdi21"

# A job that computes 1 ms per sample plus 20 ms per micro-batch; all-reduce 20 ms on one
# host of 4 slots, 100 ms across hosts, each growing a little per learner.
MODEL = ThroughputModel(0.02, 0.001, 0.02, 0.002, 0.1, 0.005, min_micro_batch=8)
PER_HOST = 4


def gjob(job_id: str, max_workers: int = 16, submitted: float = 0.0, **fields: Any) -> JobView:
    """A goodput-mode job: batches 64..4096, LR given for 64, micro-batches of 256 at most."""
    fields.setdefault("state", RUNNING if fields.get("current") else QUEUED)
    fields.setdefault("batch_range", (64, 4096))
    fields.setdefault("max_micro_batch", 256)
    fields.setdefault("gns", 2000.0)
    fields.setdefault("base_batch", 64)
    fields.setdefault("throughput", MODEL)
    return JobView(job_id, max_workers, submitted, **fields)


def run(capacity: int, jobs: list[JobView], reverse: bool = False, **options: Any) -> Decision:
    teams = tuple(options.pop("teams", ()))
    if reverse:
        jobs, teams = jobs[::-1], teams[::-1]
    snapshot = Snapshot(capacity, jobs, teams, slots_per_host=options.pop("per_host", PER_HOST))
    return policy.decide(snapshot, **options)


def rate(job: JobView, n: int, batch: int) -> float:
    """Pollux's goodput written out: samples per second at ``batch`` on ``n`` learners (the
    iteration's time, checked by hand below) times the statistical efficiency
    ``(gns + base) / (gns + batch)``, at the noise scale rounded to a power of 1.02 as the
    policy's tables are."""
    assert job.throughput is not None and job.batch_range is not None
    gns = 1.02 ** round(math.log(job.gns, 1.02)) if job.gns > 0 else 0.0
    base = job.base_batch or job.batch_range[0]
    seconds = job.throughput.iteration(n, batch, job.max_micro_batch, PER_HOST)
    return batch / seconds * (gns + base) / (gns + batch)


def useful(job: JobView, capacity: int) -> int:
    """The smallest slot count of a goodput job's highest goodput (its best batch on each
    count from ``best_batch``, which is checked against every batch below)."""
    assert job.throughput is not None and job.batch_range is not None
    low, high = job.batch_range
    gns = 1.02 ** round(math.log(job.gns, 1.02)) if job.gns > 0 else 0.0
    base, micro = job.base_batch or low, job.max_micro_batch
    counts = range(1, min(job.max_workers, capacity, high) + 1)
    value = {n: best_batch(job.throughput, n, low, high, gns, base, micro, PER_HOST)[1]
             for n in counts}  # fmt: skip
    top = max(value.values())
    return min(n for n in counts if value[n] >= top * (1 - 1e-12))


def capped(job: JobView, capacity: int) -> JobView:
    """The job as fair share should see it: a goodput job's max lowered to its useful size."""
    if not job.goodput_mode:
        return job
    return replace(job, max_workers=max(job.min_workers, useful(job, capacity)))


def brute(job: JobView, n: int) -> tuple[int, float]:
    """The best batch on n slots by trying every batch (ties: the smaller)."""
    assert job.batch_range is not None
    low, high = job.batch_range
    best = max(range(max(low, n), high + 1), key=lambda b: (rate(job, n, b), -b))
    return best, rate(job, n, best)


# The arithmetic --------------------------------------------------------------------------


def test_efficiency_is_pollux_statistical_efficiency() -> None:
    # E(M) = (gns + M0) / (gns + M): 1 at the base batch, falling as the batch outgrows gns.
    assert efficiency(64, 1000, 64) == 1.0
    assert efficiency(1064, 1000, 64) == pytest.approx(1064 / 2064)
    assert efficiency(1064, 0, 64) == pytest.approx(64 / 1064)  # unknown: no gain in samples


def test_an_iteration_computes_the_largest_slice_in_micro_batches_then_all_reduces() -> None:
    assert split(4, 1000, 0) == (250, 0)
    assert split(3, 1000, 100) == (84, 3)  # 334 samples in 4 micro-batches of at most 100
    assert MODEL.iteration(1, 64) == pytest.approx(0.02 + 0.064)  # one learner: no all-reduce
    assert MODEL.iteration(4, 1024, 0, 4) == pytest.approx(0.02 + 0.256 + 0.02 + 0.004)
    assert MODEL.iteration(8, 1024, 0, 4) == pytest.approx(0.02 + 0.128 + 0.1 + 0.03)
    one_host = MODEL.iteration(8, 1024, 0, 8)  # hosts of 8: one; unknown (0): spread
    assert MODEL.iteration(8, 1024, 0, 0) == pytest.approx(one_host - 0.032 + 0.13)
    assert MODEL.iteration(4, 16) == pytest.approx(0.02 + 0.008 + 0.1 + 0.01)  # 4 < min micro
    overlapped = replace(MODEL, overlap=2.0)
    assert overlapped.iteration(2, 512, 0, 4) == pytest.approx(math.hypot(0.02 + 0.256, 0.02))


MODELS = [
    MODEL,
    ThroughputModel(0.09, 0.009, 0.05, 0.003, 0.1, 0.007),  # a large fixed cost per micro-batch
    ThroughputModel(0.01, 0.0003, 0.005, 0.0005, 0.3, 0.001, min_micro_batch=32),
    replace(MODEL, overlap=3.0),
]


@pytest.mark.parametrize("model", MODELS, ids=["base", "costly micro-batch", "slow net", "overlap"])
@pytest.mark.parametrize("learners", [1, 3, 4, 12])
@pytest.mark.parametrize("gns", [0.0, 50.0, 3000.0, 1e5])
@pytest.mark.parametrize("micro", [0, 16, 100])
def test_the_best_batch_is_the_best_of_every_batch(
    model: ThroughputModel, learners: int, gns: float, micro: int
) -> None:
    low, high = 32, 2048
    batch, value = best_batch(model, learners, low, high, gns, low, micro, PER_HOST)
    tried = {
        b: goodput(model, learners, b, gns, low, micro, PER_HOST)
        for b in range(max(low, learners), high + 1)
    }
    best = max(tried.values())
    assert value == pytest.approx(tried[batch])
    # Exact where compute and all-reduce add up (closed form); a fine grid otherwise.
    assert value >= best * (1 - (1e-9 if model.overlap == 1 else 0.01))


def test_bad_models_and_goodput_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="not negative"):
        ThroughputModel(-0.1, 0.001)
    with pytest.raises(ValueError, match="some time"):
        ThroughputModel(0.0, 0.0)
    with pytest.raises(ValueError, match="overlap"):
        ThroughputModel(0.1, 0.001, overlap=0.5)
    with pytest.raises(ValueError, match="batch_range"):
        gjob("a", batch_range=(128, 64))
    with pytest.raises(ValueError, match="less than a sample each"):
        gjob("a", min_workers=8, batch_range=(4, 4))
    with pytest.raises(ValueError, match="gns"):
        gjob("a", gns=math.nan)
    with pytest.raises(ValueError, match="fairness exponent"):
        policy.decide(Snapshot(8, [gjob("a")]), fairness=2)


# One job ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gns", [30.0, 500.0, 5000.0, 50000.0])
@pytest.mark.parametrize("max_workers", [3, 8, 16])
def test_one_job_gets_the_slots_and_batch_of_the_highest_goodput(
    gns: float, max_workers: int
) -> None:
    one = gjob("a", max_workers, gns=gns)
    decision = run(64, [one])
    best = {n: brute(one, n) for n in range(1, max_workers + 1)}
    top = max(value for _, value in best.values())
    # The smallest count that reaches the highest goodput (more slots would not add any).
    size = min(n for n, (_, value) in best.items() if value >= top * (1 - 1e-12))
    assert decision.targets == {"a": size}
    assert decision.batches == {"a": best[size][0]}


def test_a_low_noise_scale_prefers_small_batches_a_high_one_big_batches() -> None:
    scales = (0.0, 20.0, 200.0, 2000.0, 1e6)
    batches = {gns: run(64, [gjob("a", gns=gns)]).batches["a"] for gns in scales}
    slots = {gns: run(64, [gjob("a", gns=gns)]).targets["a"] for gns in scales}
    assert batches[0.0] == batches[20.0] == 64  # nothing (unknown) or little gained by more
    assert batches[20.0] < batches[200.0] < batches[2000.0] < batches[1e6] == 4096
    assert slots[20.0] < slots[2000.0]  # and a small batch has less use for many slots


def test_a_job_not_measured_yet_runs_at_its_base_batch_taken_as_linear() -> None:
    fresh = gjob("a", 8, throughput=None, base_batch=128)
    decision = run(8, [fresh, job("b", 8)])
    assert decision.targets == {"a": 4, "b": 4} and decision.batches == {"a": 128}


def test_a_fitted_model_is_trusted_up_to_explore_times_the_largest_batch_it_timed() -> None:
    # The fit's best batch lies far past what was timed: the job is sent EXPLORE times the
    # largest timed batch at most (the best batch there, on the slots it gets), and its
    # slots are the whole fit's, as without the bound. Once timed at the fit's best, it
    # goes where an unbounded fit goes.
    free = run(64, [gjob("a", 8)])
    assert free.batches["a"] > policy.EXPLORE * 64
    timed = gjob("a", 8, timed_batch=64)
    bounded = run(64, [timed])
    n = bounded.targets["a"]
    ok = replace(timed, batch_range=(64, policy.EXPLORE * 64))
    assert bounded.targets == free.targets
    assert bounded.batches["a"] == brute(ok, n)[0] <= policy.EXPLORE * 64
    prof = policy.profile(timed, 64, PER_HOST)
    assert all(b <= policy.EXPLORE * 64 for b in prof.batch)
    assert prof.rate == policy.profile(gjob("a", 8), 64, PER_HOST).rate
    there = run(64, [replace(timed, timed_batch=free.batches["a"])])
    assert (there.targets, there.batches) == (free.targets, free.batches)
    # No model yet: the base batch, the bound not consulted; and never below a sample a
    # learner, however small the batch timed.
    untimed = gjob("b", 8, throughput=None, base_batch=512, timed_batch=64)
    assert run(8, [untimed]).batches == {"b": 512}
    tiny = gjob("c", 8, batch_range=(1, 4096), base_batch=1, timed_batch=1)
    assert policy.profile(tiny, 8, PER_HOST).top == 8
    with pytest.raises(ValueError, match="timed_batch"):
        gjob("d", timed_batch=-1)


@ORDERS
def test_the_bound_on_the_batch_neither_shrinks_a_job_nor_holds_it_small(reverse: bool) -> None:
    # Alone on 64 slots, holding 8 on two hosts: it keeps its 8 at a batch within the
    # bound, as it keeps them at the fit's best without one (a first fit timed only at the
    # batch it grew at must not send it back to 4 slots with 60 idle).
    held = gjob("a", 8, current=8, batch=64)
    free = run(64, [held], reverse)
    bounded = run(64, [replace(held, timed_batch=64)], reverse)
    assert free.targets == bounded.targets == {"a": 8}
    assert bounded.batches["a"] <= policy.EXPLORE * 64 < free.batches["a"]
    # Beside a waiting fixed-batch job on 4 slots: the slots the whole fit gives (2, to
    # time a batch past 64), not the 1 slot that batch 64 alone would be worth.
    fit = ThroughputModel(0.0, 0.001, 0.028)  # timed at 64 on 1 and 4 learners only
    both = [gjob("g", 4, batch_range=(64, 1024), gns=1000.0, throughput=fit), job("f", 4)]
    timed = [replace(both[0], timed_batch=64), both[1]]
    assert run(4, timed, reverse).targets == run(4, both, reverse).targets
    assert run(4, timed, reverse).targets["g"] >= 2
    # The reason names the goodput at the batch given, not the fit's best beyond the bound.
    moving = gjob("a", 8, current=2, batch=64, timed_batch=64)
    d = run(64, [moving], reverse)
    target, batch = d.targets["a"], d.batches["a"]
    gain = rate(moving, target, batch) / rate(moving, 2, 64)
    assert d.reasons["a"].startswith(f"2→{target}: batch {batch} on {target} slots: goodput "
                                     f"{gain:.2f}x of 64 on 2; ")  # fmt: skip


# Many jobs: the objective ------------------------------------------------------------------


def objective(decision: Decision, targets: dict[str, int], fairness: float) -> float:
    """Σ f · S^p / p with S = G(n) / G(f) over the jobs with slots (see the module)."""
    snapshot = decision.snapshot
    total = 0.0
    for j in snapshot.jobs:
        n = targets[j.id]
        if not n:
            continue
        prof = policy.profile(j, snapshot.capacity, snapshot.slots_per_host)
        share = decision.shares[j.id]
        speedup = prof.rate[n] / prof.at(share)
        total += share * (math.log(speedup) if fairness == 0 else speedup**fairness / fairness)
    return total


MIXES = {
    "three goodput jobs": [gjob("a", 8, gns=100), gjob("b", 8, 1, gns=3000), gjob("c", 8, 2)],
    "goodput and fixed": [gjob("a", 10, gns=400), job("b", 10, 1), job("c", 4, 2)],
    "a fixed job with a curve": [
        gjob("a", 8, gns=50000),
        job("b", 8, 1, speedup=(1.0, 1.8, 2.4, 2.8, 3.0, 3.1, 3.1, 3.1)),
    ],
    "priorities": [gjob("a", 8, priority=10000), gjob("b", 8, 1, priority=2500), job("c", 6, 2)],
}


@pytest.mark.parametrize("fairness", [1.0, 0.0, -1.0, -4.0])
@pytest.mark.parametrize("jobs", MIXES.values(), ids=MIXES.keys())
def test_many_jobs_share_slots_for_the_best_power_mean_of_speedups(
    jobs: list[JobView], fairness: float
) -> None:
    """Against every allocation of the 12 slots: none has a better objective (the profiles on
    one host, so concave and the greedy exact)."""
    decision = run(12, jobs, fairness=fairness, per_host=16)
    caps = {}
    for j in jobs:
        prof = policy.profile(j, 12, 16)
        caps[j.id] = min(prof.useful, j.max_workers) if j.goodput_mode else j.max_workers
    best = -math.inf
    for counts in itertools.product(*(range(j.min_workers, caps[j.id] + 1) for j in jobs)):
        if sum(counts) <= 12:
            targets = {j.id: n for j, n in zip(jobs, counts, strict=True)}
            best = max(best, objective(decision, targets, fairness))
    assert objective(decision, decision.targets, fairness) >= best - 1e-9 * abs(best)


def test_the_fairness_exponent_trades_total_speedup_for_the_job_that_scales_worst() -> None:
    # A goodput job whose small noise scale caps it near 4 slots, beside a linear one on 16.
    jobs = [gjob("sat", gns=30), job("lin", 16, 1)]
    given = {p: run(16, jobs, fairness=p).targets["sat"] for p in (1.0, 0.0, -1.0, -4.0)}
    assert given[1.0] <= given[0.0] <= given[-1.0] <= given[-4.0]
    assert given[1.0] < given[-4.0]


@ORDERS
def test_priorities_weigh_as_in_fair_share(reverse: bool) -> None:
    jobs = [gjob("hi", 16, priority=10000), gjob("lo", 16, 1, priority=2500)]
    decision = run(16, jobs, reverse)
    assert decision.shares == {"hi": pytest.approx(12.8), "lo": pytest.approx(3.2)}
    assert decision.targets["hi"] > decision.targets["lo"] >= 1
    # Linear jobs (fixed batch, no curve) beside a goodput job: their fair shares.
    jobs = [gjob("g", 16, gns=30), job("a", 16, 1, priority=10000), job("b", 16, 2)]
    decision = run(16, jobs, reverse)
    assert decision.shares["a"] == 2 * decision.shares["b"]
    assert abs(decision.targets["a"] - 2 * decision.targets["b"]) <= 1


# Teams -----------------------------------------------------------------------------------

TEAMS = {
    "each team its guarantee when both ask for more": (
        8, [Team("vision", guarantee=6), Team("nlp", guarantee=2)],
        [gjob("v1", team="vision", gns=1e5), job("n1", team="nlp")], {"vision": 6, "nlp": 2},
    ),
    "a team's goodput job that cannot use its guarantee lends it": (
        8, [Team("vision", guarantee=6), Team("nlp", guarantee=2)],
        [gjob("v1", team="vision", gns=30), job("n1", team="nlp")], {"vision": 4, "nlp": 4},
    ),
    "a limit binds goodput jobs too": (
        16, [Team("vision", limit=3), Team("nlp")],
        [gjob("v1", team="vision", gns=1e5), gjob("v2", 16, 1, team="vision", owner="bo"),
         job("n1", 4, team="nlp")], {"vision": 3, "nlp": 4},
    ),
    "sub-teams: guarantees, then the rest by weight, at every level": (
        16, [Team("org", guarantee=12), Team("a", parent="org", guarantee=8), Team("b", "org"),
             Team("c")],
        [gjob("a1", team="a", gns=1e5), gjob("a2", 16, 1, team="a", owner="al", gns=40),
         gjob("b1", 16, 2, team="b", gns=1e5), job("c1", 16, 3, team="c")],
        {"org": 14, "a": 11, "b": 3, "c": 2},
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, teams, jobs, totals", TEAMS.values(), ids=TEAMS.keys())
def test_teams_are_hard_constraints(
    capacity: int,
    teams: list[Team],
    jobs: list[JobView],
    totals: dict[str, int],
    reverse: bool,
) -> None:
    decision = run(capacity, jobs, reverse, teams=teams)
    held = slots_by_team(decision.snapshot, decision.targets)
    assert {team: held[team] for team in totals} == totals
    # Exactly fair share's team totals over the jobs with goodput ones at their useful size.
    fair = fairshare.decide(Snapshot(capacity, [capped(j, capacity) for j in jobs], tuple(teams)))
    assert held == slots_by_team(fair.snapshot, fair.targets)
    # Never below the entitlement's floor, where the team's jobs can use it.
    for team, entitled in decision.teams.items():
        if team:
            assert held[team] >= min(math.floor(entitled + 1e-9), totals.get(team, held[team]))


def test_within_a_team_the_objective_divides_its_slots_over_its_users_jobs() -> None:
    jobs = [
        gjob("a1", team="a", owner="ann", gns=1e5),
        gjob("a2", 16, 1, team="a", owner="al", gns=30),
        job("b1", 16, 2, team="b"),
    ]
    decision = run(16, jobs, teams=[Team("a", guarantee=10), Team("b")])
    # Team a: its guarantee 10 and half the 6 left (team b's weight is the same).
    assert slots_by_team(decision.snapshot, decision.targets)["a"] == 13
    assert decision.targets["a1"] > decision.targets["a2"]  # the job that gains more


# Fixed-batch jobs ------------------------------------------------------------------------

FIXED = {
    "the seeds' A alone": (8, [job("A")], ()),
    "4/4 at equal priority": (8, [job("A", current=8), job("B", submitted=1)], ()),
    "5/3 by priority": (
        8, [job("A", current=4), job("B", submitted=1, current=4, priority=10000)], ()
    ),
    "minimums do not all fit": (
        4, [job("A", 4, min_workers=3), job("B", 2, 1, min_workers=2, attained=9000.0),
            job("C", 2, 2)], (),
    ),
    "curves": (
        8, [job("A", speedup=(1.0, 1.9, 2.0, 2.0, 2.05, 2.05, 2.1, 2.1)), job("B", 8, 1)], (),
    ),
    "teams": (
        8, [job("v1", team="vision"), job("n1", 8, 1, team="nlp")],
        (Team("vision", guarantee=6), Team("nlp")),
    ),
    "owners": (
        8, [job("a1", owner="ann"), job("a2", 8, 1, owner="ann"), job("b1", 8, 2, owner="bo")], ()
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, jobs, teams", FIXED.values(), ids=FIXED.keys())
def test_fixed_batch_jobs_alone_are_scheduled_as_today(
    capacity: int, jobs: list[JobView], teams: tuple[Team, ...], reverse: bool
) -> None:
    decision = run(capacity, jobs, reverse, teams=teams)
    snapshot = decision.snapshot
    flat = not teams and len({j.owner for j in jobs}) <= 1
    today = las.decide_speedup(snapshot) if flat else fairshare.decide(snapshot)
    assert (decision.policy, decision.targets, decision.batches) == ("goodput", today.targets, {})


@pytest.mark.parametrize("gns", [30.0, 1e5])
def test_beside_goodput_jobs_fixed_ones_keep_their_batch_and_fill_what_is_left(
    gns: float,
) -> None:
    # The goodput job never beyond its useful size; the fixed one takes every other slot.
    decision = run(32, [gjob("g", 16, gns=gns), job("f", 32, 1)])
    assert 1 <= decision.targets["g"] <= useful(gjob("g", 16, gns=gns), 32)
    assert decision.targets["f"] == 32 - decision.targets["g"]
    assert set(decision.batches) == {"g"}


# Reasons ---------------------------------------------------------------------------------


def test_reasons_say_the_batch_the_slots_and_the_goodput_gained() -> None:
    now = gjob("a", 16, current=2, batch=256, gns=20000)
    decision = run(16, [now])
    target, batch = decision.targets["a"], decision.batches["a"]
    gain = rate(now, target, batch) / rate(now, 2, 256)
    expected = f"2→{target}: batch {batch} on {target} slots: goodput {gain:.2f}x of 256 on 2; "
    assert decision.reasons["a"].startswith(expected)
    assert "fair share 16.00" in decision.reasons["a"]
    waiting = run(2, [gjob("a", min_workers=2), gjob("b", min_workers=2, submitted=1)])
    assert waiting.targets["b"] == 0  # b waits behind a
    assert "b" not in waiting.batches and "b" not in waiting.reasons  # unchanged: no line
    teams = run(8, [gjob("v", team="vision", gns=1e5)], teams=[Team("vision", guarantee=6)])
    assert "team vision" in teams.reasons["v"] and "batch" in teams.reasons["v"]


def test_a_decision_records_the_batch_in_a_jobs_inputs() -> None:
    decision = run(8, [gjob("a", 8, current=1, batch=64)])
    data = decision.job_inputs(decision.snapshot.jobs[0], decision.summary())
    assert data["batch"] == decision.batches["a"] and data["batch_now"] == 64


# Properties ------------------------------------------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """Up to 10 jobs, goodput or fixed, on up to 48 slots, with or without teams."""
    teams = draw(st.sampled_from([(), (Team("t1", guarantee=4), Team("t2", limit=6))]))
    jobs = []
    for index in range(draw(st.integers(0, 10))):
        top = draw(st.integers(1, 16))
        fields: dict[str, Any] = {
            "submitted": draw(st.integers(0, 3)),
            "priority": draw(st.sampled_from([1, 5000, 10000])),
            "min_workers": draw(st.integers(1, min(top, 3))),
            "attained": draw(st.sampled_from([0.0, 1e5])),
            "owner": draw(st.sampled_from(["", "ann"])),
            "team": draw(st.sampled_from(["", *(t.id for t in teams)])),
        }
        fields["current"] = draw(st.integers(0, top))
        fields["state"] = RUNNING if fields["current"] else QUEUED
        if draw(st.booleans()):
            fields["gns"] = draw(st.sampled_from([0.0, 40.0, 3000.0, 1e5]))
            fields["batch"] = draw(st.sampled_from([0, 64, 300]))
            jobs.append(gjob(f"j{index}", top, **fields))
        else:
            jobs.append(job(f"j{index}", top, **fields))
    return Snapshot(draw(st.integers(0, 48)), jobs, teams, slots_per_host=PER_HOST)


PROPERTY = settings(max_examples=120, deadline=None)


@PROPERTY
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_answer_does_not_depend_on_the_input_order(
    snapshot: Snapshot, rng: random.Random
) -> None:
    jobs, teams = list(snapshot.jobs), list(snapshot.teams)
    rng.shuffle(jobs)
    rng.shuffle(teams)
    first = policy.decide(snapshot)
    second = policy.decide(Snapshot(snapshot.capacity, jobs, tuple(teams), PER_HOST))
    assert (first.targets, first.batches, first.reasons) == (
        second.targets,
        second.batches,
        second.reasons,
    )


@PROPERTY
@given(snapshots())
def test_slots_and_batches_stay_within_every_bound(snapshot: Snapshot) -> None:
    decision = policy.decide(snapshot)
    assert sum(decision.targets.values()) <= snapshot.capacity
    for j in snapshot.jobs:
        n = decision.targets[j.id]
        assert n == 0 or j.min_workers <= n <= j.max_workers
        if j.batch_range is None or not n:
            assert j.id not in decision.batches
            continue
        # Never beyond where goodput stops rising, but for hysteresis: the slots the job
        # holds now, kept rather than left idle, within the hosts its useful size fills.
        most = useful(j, snapshot.capacity)
        per_host = snapshot.slots_per_host
        held = min(j.current, j.max_workers, -(-most // per_host) * per_host)
        assert n <= max(j.min_workers, most, held)
        low, high = j.batch_range
        assert max(low, n) <= decision.batches[j.id] <= high


@PROPERTY
@given(snapshots())
def test_it_is_registered_and_runs_as_any_policy(snapshot: Snapshot) -> None:
    registered, direct = decide(snapshot, "goodput"), policy.decide(snapshot)
    assert (registered.policy, registered.targets, registered.batches) == (
        "goodput", direct.targets, direct.batches)  # fmt: skip


# The simulators --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def apps() -> dict[str, Application]:
    return load_applications(POLLUX / "traces")


def test_the_pollux_simulator_runs_goodput_jobs_at_the_batches_it_picks(
    apps: dict[str, Application],
) -> None:
    """A tiny workload: yolov3 alone gains most from its batch (bench/results/pollux-why.md:
    1.95x alone), then an imagenet and a cifar10 job beside it."""
    yolo = [WorkloadJob("yolov3-0", 0, "yolov3", 4, 64)]
    fixed = simulate_workload(yolo, apps, ClusterConfig("fairshare-speedup"))
    chosen = simulate_workload(yolo, apps, ClusterConfig("goodput"))
    assert chosen[0].jct < 0.7 * fixed[0].jct
    workload = [
        *yolo,
        WorkloadJob("imagenet-1", 60, "imagenet", 8, 3200),
        WorkloadJob("cifar10-2", 120, "cifar10", 4, 2048),
        WorkloadJob("ncf-3", 130, "ncf", 1, 32768),
    ]
    cluster = Cluster(workload, apps, ClusterConfig("goodput", gpus=16))
    seen: dict[str, set[int]] = {}
    decide_once = cluster._decide

    def watched() -> None:
        decide_once()
        for name, j in cluster.active.items():
            seen.setdefault(name, set()).add(j.batch)

    cluster._decide = watched  # type: ignore[method-assign]
    outcomes = cluster.run()
    assert sorted(o.name for o in outcomes) == sorted(j.name for j in workload)
    assert seen["ncf-3"] == {32768}  # ncf keeps its batch, as in the artifact
    for name, app in (("yolov3-0", "yolov3"), ("imagenet-1", "imagenet")):
        batches = seen[name]
        assert len(batches) > 1, name  # re-picked as its noise scale grew
        assert all(apps[app].init_batch <= b <= apps[app].max_batch for b in batches)


def test_a_learner_move_packs_a_spread_job_when_it_pays_back(
    apps: dict[str, Application],
) -> None:
    # 8 GPUs on 2 nodes: a 4-GPU yolov3 job on 2+2, four one-GPU ncf jobs on the rest.
    workload = [WorkloadJob("yolov3-0", 0, "yolov3", 4, 64)]
    workload += [WorkloadJob(f"ncf-{i}", 0, "ncf", 1, 32768) for i in range(1, 5)]
    for moves, nodes in ((False, 2), (True, 1)):
        cluster = Cluster(workload, apps, ClusterConfig("fairshare-speedup", gpus=8, moves=moves))
        for spec in workload:
            cluster.active[spec.name] = cluster._admit(spec)
        slots: dict[str, tuple[str, ...]] = {"yolov3-0": ("n000.0", "n000.1", "n001.0", "n001.1")}
        slots |= {"ncf-1": ("n000.2",), "ncf-2": ("n000.3",)}
        slots |= {"ncf-3": ("n001.2",), "ncf-4": ("n001.3",)}
        for name, members in slots.items():
            j = cluster.active[name]
            j.max_workers, j.restarts = len(members), 0
            cluster._seat(j, members)
        cluster._decide()
        yolo = cluster.active["yolov3-0"]
        assert len(yolo.placement) == nodes and yolo.moves == (1 if moves else 0)
        if moves:  # two one-GPU jobs swapped onto the slots it left, paying a resize each
            assert sum(cluster.active[f"ncf-{i}"].moves for i in range(1, 5)) == 2
            assert yolo.pause == cluster.config.resize_pause
        held = [s for j in cluster.active.values() for s in j.members]
        assert len(held) == len(set(held)) == 8


def test_trace_jobs_with_goodput_profiles_train_at_the_batch_goodput_picks(
    apps: dict[str, Application],
) -> None:
    fits = [AppFit("imagenet", 0.07, 1304), AppFit("cifar10", 0.1, 2570)]
    profiles = trace_profiles(apps, fits)
    assert [p.batch for p in profiles] == [1304, 2570]
    trace = [TraceJob(0, 0.0, 7200.0, 8), TraceJob(1, 100.0, 3600.0, 4)]
    jobs = jobs_from_trace(trace, 16, [0.1], profiles)
    assert [j.profile for j in jobs] == profiles
    # Alone at its GPUs and the user's batch, a job takes its trace duration.
    alone = simulate([replace(jobs[0], max_workers=8)], Config(16, "fairshare", restart_pause=0))
    assert alone[0].jct == pytest.approx(7200.0)
    fixed = {r.job.id: r.jct for r in simulate(jobs, Config(16, "fairshare-speedup"))}
    chosen = {r.job.id: r.jct for r in simulate(jobs, Config(16, "goodput"))}
    assert sum(chosen.values()) < sum(fixed.values())


def test_the_commands_run_goodput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "workloads-0.5"
    folder.mkdir()
    source = (POLLUX / "workloads-0.5" / "workload-1.csv").read_text().splitlines()
    (folder / "workload-1.csv").write_text("\n".join(source[:13]) + "\n")
    args = ["pollux", "--workloads", str(folder), "--traces", str(POLLUX / "traces")]
    assert main([*args, "--procs", "1", "--policy", "goodput", "--moves"]) == 0
    assert "policy goodput" in capsys.readouterr().out
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus\n2017-10-03 10:00:00,3600,4\n2017-10-03 10:05:00,600,1\n"
    )
    scalability = tmp_path / "scalability"
    scalability.mkdir()
    source_dir = POLLUX / "traces"
    for app in ("cifar10", "imagenet"):
        (scalability / f"{app}.csv").write_text((source_dir / app / "scalability.csv").read_text())
    command = ["--trace", str(trace), "--gpus", "8", "--policy", "goodput"]
    assert main([*command, "--goodput-profiles", str(source_dir)]) == 0
    out = capsys.readouterr().out
    assert "goodput profiles" in out and "cifar10 batch" in out and "average JCT" in out
    assert main([*command, "--goodput-profiles", str(tmp_path / "nowhere")]) == 1


def test_the_pollux_simulator_decides_at_each_arrival_and_completion_with_events(
    apps: dict[str, Application],
) -> None:
    """Stepped every 60 s, a job submitted at 10 s into an idle cluster is first seen at 60
    s; deciding on events (EDT) starts it at 10 s: the same run (30 s to start, alone on its
    slots) ends 50 s sooner. On one GPU, a second job submitted while the first runs starts
    at the first one's completion, not at the next tick."""
    one = [WorkloadJob("ncf-0", 10, "ncf", 1, 32768)]
    ticks = simulate_workload(one, apps, ClusterConfig("fairshare-speedup", gpus=4, per_node=4))
    events = simulate_workload(
        one, apps, ClusterConfig("fairshare-speedup", gpus=4, per_node=4, events=True)
    )
    assert ticks[0].jct - events[0].jct == pytest.approx(50.0)
    two = [*one, WorkloadJob("ncf-1", 20, "ncf", 1, 32768)]
    config = ClusterConfig("fairshare-speedup", gpus=1, per_node=1, events=True)
    finished = {o.name: (o.submitted + o.jct, o.restarts)
                for o in simulate_workload(two, apps, config)}  # fmt: skip
    alone = simulate_workload(one, apps, config)[0].jct - 30.0  # its run on the one GPU
    assert finished["ncf-0"] == (pytest.approx(10 + 30 + alone), 0)
    # It starts within the second the simulator rounds a completion to.
    assert finished["ncf-1"][0] == pytest.approx(finished["ncf-0"][0] + 30 + alone, abs=1.0)


@pytest.mark.parametrize(
    "remaining, attained, factor",
    [(0.0, 5000.0, 1.0), (900.0, 0.0, 4**0.1), (3600.0, 3600.0, 2.0), (10.0, 0.0, 60**0.1),
     (1e9, 0.0, 10**-0.1), (1e9, 3e9, 4 * 10**-0.1)],
)  # fmt: skip
def test_remaining_work_weighs_a_job_within_bounds(
    remaining: float, attained: float, factor: float
) -> None:
    """(remaining / 1 h) ^ -0.1, the remaining work taken within 1 min .. 10 h, times
    (attained + remaining) / remaining; unknown remaining work: 1."""
    job = gjob("a", remaining=remaining, attained=attained)
    assert policy.urgency(job) == pytest.approx(factor)


@ORDERS
def test_of_two_alike_jobs_the_one_nearer_its_end_gets_more_slots(reverse: bool) -> None:
    alike = run(8, [gjob("a"), gjob("b", submitted=1)], reverse)
    assert alike.targets["a"] == alike.targets["b"]
    near = [gjob("a", remaining=600.0, attained=6000.0), gjob("b", 1, remaining=36000.0)]
    decided = run(8, near, reverse)
    assert decided.targets["a"] > decided.targets["b"] > 0


# A job whose all-reduce takes seconds: one learner is its best (its useful size is 1).
SLOW_SYNC = ThroughputModel(0.02, 0.001, 5.0, 0.5, 10.0, 1.0, min_micro_batch=8)


@ORDERS
def test_a_goodput_job_does_not_shrink_only_to_leave_slots_idle(reverse: bool) -> None:
    """Its fit now says one learner is best: holding 4 slots that nobody else wants it
    keeps them (at its best batch on 4); new, it gets only its useful size; a fixed-batch
    job arriving takes the slots back down to what fair share and the objective give."""
    assert useful(gjob("s", 8, throughput=SLOW_SYNC), 8) == 1
    held = run(8, [gjob("s", 8, throughput=SLOW_SYNC, current=4, batch=256)], reverse)
    assert held.targets == {"s": 4} and held.reasons == {}
    assert run(8, [gjob("s", 8, throughput=SLOW_SYNC)], reverse).targets == {"s": 1}
    crowded = [gjob("s", 8, throughput=SLOW_SYNC, current=4, batch=256), job("f", 8, 1)]
    assert run(8, crowded, reverse).targets == {"s": 1, "f": 7}
