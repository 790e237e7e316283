"""Scheduler benchmarks: decision time, whole-trace simulation time, and job completion times
of fairshare against the fifo-gang and Tiresias-style baselines, all in this one run.

    python bench/bench_scheduler.py [--trace PATH] [--start-day D] [--load RHO ...] [--seeds N]
                                                                    (make bench runs it)

Job completion times are measured twice on the same one-week window: replayed whole (the
raw week, sized for Philly's own cluster, so an overload of 64 or 256 slots), and as
load-matched workloads sampled from it at offered load RHO (default 1.0) with seeds
0..N-1 (default 5; scheduler.simulate.trace.sample_load). The tables go to
bench/results/scheduler.md. Goals (issue 4): fairshare + placement decides
1,000 jobs on 1,024 slots in <= 10 ms and 10,000 on 10,000 in <= 100 ms; the whole Philly
trace at 1,024 slots simulates in <= 10 minutes; on one-week windows at 64 and 256 slots,
fairshare's average JCT is <= 0.5x fifo-gang's and <= 0.75x Tiresias-style's, with a p99
no worse than Tiresias-style's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from scheduler.placement import Slot, place  # noqa: E402
from scheduler.policies import RUNNING, Decision, JobView, Snapshot, fairshare  # noqa: E402
from scheduler.simulate import (  # noqa: E402
    Config,
    Run,
    TraceJob,
    jobs_from_trace,
    offered_load,
    read_trace,
    run,
    sample_load,
)
from scheduler.simulate import window as trace_window  # noqa: E402
from scheduler.simulate.cluster import ClusterConfig  # noqa: E402
from scheduler.simulate.metrics import percentile  # noqa: E402
from scheduler.simulate.pollux_cli import Result, simulate_folder  # noqa: E402
from scheduler.simulate.speedup import load_fits, usable  # noqa: E402

# The shared inputs sit beside the checkout (../shared), or beside its parent for a worktree.
SHARED = next(
    (p / "shared" for p in (PROJECT.parent, PROJECT.parent.parent) if (p / "shared").exists()),
    PROJECT.parent / "shared",
)
TRACE = SHARED / "traces" / "pollux" / "philly.csv"
POLLUX = SHARED / "traces" / "pollux-osdi21"
RESULTS = PROJECT / "bench" / "results" / "scheduler.md"
SLOTS_PER_HOST = 8
WEEK = 7.0

# Decision-time scenarios: (jobs, slots, goal in ms, repeats).
DECISIONS = [(1_000, 1_024, 10.0, 31), (10_000, 10_000, 100.0, 11)]
WINDOW_SLOTS = [64, 256]
BASELINES = ["fifo-gang", "fifo-backfill", "tiresias"]
FAMILY = ["fairshare", "fairshare-las", "fairshare-speedup"]  # EDT's policies
POLICIES = [*FAMILY, *BASELINES]
LOADS = [1.0]  # offered loads of the sampled workloads
SEEDS = 5  # sampled workloads per (slots, load)


# Decision time ----------------------------------------------------------------------------


def cluster(slots: int) -> list[Slot]:
    return [
        Slot(
            f"h{i // SLOTS_PER_HOST}.{i % SLOTS_PER_HOST}",
            f"h{i // SLOTS_PER_HOST}",
            i % SLOTS_PER_HOST,
        )
        for i in range(slots)
    ]


def queued_jobs(count: int, seed: int = 1) -> list[JobView]:
    """Philly-like sizes (93% one GPU), priorities uniform over 1-10000."""
    rng = random.Random(seed)
    sizes = [1] * 93 + [2, 2, 4, 4, 8, 8, 16]
    return [
        JobView(f"j{i}", rng.choice(sizes), float(i), rng.randint(1, 10_000)) for i in range(count)
    ]


def decide_and_place(
    slots: list[Slot], jobs: list[JobView], current: dict[str, list[str]]
) -> tuple[dict[str, int], dict[str, tuple[str, ...]]]:
    decision = fairshare.decide(Snapshot(len(slots), jobs))
    return decision.targets, place(slots, current, decision.targets).members


def steady(slots: list[Slot], jobs: list[JobView]) -> tuple[list[JobView], dict[str, list[str]]]:
    """The cluster after every job was placed at its share: jobs hold their slots."""
    targets, members = decide_and_place(slots, jobs, {})
    held = [replace(j, current=targets[j.id], state=RUNNING) if targets[j.id] else j for j in jobs]
    return held, {job: list(m) for job, m in members.items() if m}


def timed(action: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Best and median wall, and median CPU milliseconds of ``action`` over ``repeats``."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls) * 1000, statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def decision_rows() -> list[str]:
    rows = []
    for count, size, goal, repeats in DECISIONS:
        slots, jobs = cluster(size), queued_jobs(count)
        held, current = steady(slots, jobs)
        arrival = [*held, JobView("new", 8, float(count), 10_000)]
        cases = {
            "one arrival at priority 10000 (steady cluster)": partial(
                decide_and_place, slots, arrival, current
            ),
            "cold start (every job new)": partial(decide_and_place, slots, jobs, {}),
        }
        for name, action in cases.items():
            best, wall, cpu = timed(action, repeats)
            mark = "✓" if wall <= goal else "✗"
            rows.append(
                f"| {count:,} | {size:,} | {name} | {repeats} | {best:.1f} | {wall:.1f} "
                f"| {cpu:.1f} | ≤ {goal:g} {mark} |"
            )
            print(rows[-1], flush=True)
    return rows


# Simulations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    trace: list[TraceJob]
    serials: list[float]
    model: str


def load_workload(path: Path) -> Workload:
    fits = load_fits(path.parent / "scalability")
    kept = usable(fits)
    model = ", ".join(f"{fit.app} s={fit.serial:.3f}" for fit in kept)
    dropped = ", ".join(fit.app for fit in fits if fit not in kept)
    return Workload(read_trace(path), [f.serial for f in kept], f"{model} (left out: {dropped})")


def median_week(trace: Sequence[TraceJob]) -> float:
    """Start day of the full week (weeks counted from day 0) with the median GPU demand."""
    last = max(job.submitted for job in trace) / 86400
    weeks = [WEEK * k for k in range(int(last // WEEK))]
    demand = {
        start: sum(j.duration * j.num_gpus for j in trace_window(trace, start, WEEK))
        for start in weeks
    }
    return sorted(weeks, key=lambda start: demand[start])[len(weeks) // 2]


def simulate(
    workload: Workload, trace: Sequence[TraceJob], gpus: int, policy: str, label: str = ""
) -> Run:
    result = run(jobs_from_trace(trace, gpus, workload.serials), Config(gpus, policy))
    s = result.summary
    print(
        f"  {gpus} slots{label} {policy}: avg {s.avg_jct:.0f} s, p99 {s.p99_jct:.0f} s, "
        f"{result.seconds:.1f} s",
        flush=True,
    )
    return result


def whole_trace_rows(workload: Workload) -> list[str]:
    result = simulate(workload, workload.trace, 1024, "fairshare")
    s, mark = result.summary, "✓" if result.seconds <= 600 else "✗"
    return [
        f"| {s.jobs:,} | 1,024 | fairshare | {result.decisions:,} | {result.seconds:.1f} s "
        f"(≤ 600 s {mark}) | {s.avg_jct:,.0f} | {s.p99_jct:,.0f} | {s.utilisation:.1%} |"
    ]


def hours(seconds: float, digits: int = 1) -> str:
    return f"{seconds / 3600:,.{digits}f}"


def window_rows(workload: Workload, start: float) -> tuple[list[str], list[str]]:
    trace = trace_window(workload.trace, start, WEEK)
    detail, ratios = [], []
    for gpus in WINDOW_SLOTS:
        runs = {p: simulate(workload, trace, gpus, p) for p in POLICIES}
        for policy, result in runs.items():
            s = result.summary
            detail.append(
                f"| {gpus} | {policy} | {hours(s.avg_jct)} | {hours(s.median_jct)} | "
                f"{hours(s.p99_jct)} | {s.makespan / 86400:.1f} | {s.utilisation:.1%} | "
                f"{s.jain:.3f} | {s.reallocations:.2f} | {result.seconds:.0f} |"
            )
        avg = {p: r.summary.avg_jct for p, r in runs.items()}
        p99 = {p: r.summary.p99_jct for p, r in runs.items()}
        ratios += [ratio_row(gpus, policy, avg, p99) for policy in FAMILY]
    return detail, ratios


def ratios(avg: dict[str, float], p99: dict[str, float], policy: str) -> tuple[float, ...]:
    """``policy``'s average JCT over fifo-gang's, fifo-backfill's and Tiresias'; its p99
    over Tiresias'."""
    return (
        avg[policy] / avg["fifo-gang"],
        avg[policy] / avg["fifo-backfill"],
        avg[policy] / avg["tiresias"],
        p99[policy] / p99["tiresias"],
    )


# The bounds on ratios(): issue 4 (≤ 0.5x fifo-gang), none against fifo-backfill, issue 12
# (the best of EDT's policies ≤ 0.8x Tiresias on average, ≤ 1x at the p99).
GOALS: tuple[float | None, ...] = (0.5, None, 0.8, 1.0)


def mark(value: float, goal: float | None) -> str:
    return "" if goal is None else " ✓" if value <= goal else " ✗"


def ratio_row(gpus: int, policy: str, avg: dict[str, float], p99: dict[str, float]) -> str:
    marked = [
        f"{value:.2f}{mark(value, goal)}"
        for value, goal in zip(ratios(avg, p99, policy), GOALS, strict=True)
    ]
    return f"| {gpus} | {policy} | {' | '.join(marked)} |"


# Load-matched workloads -------------------------------------------------------------------


@dataclass(frozen=True)
class Sampled:
    """One (slots, load) cell: a run per seed and policy, and each seed's workload."""

    gpus: int
    load: float
    traces: list[list[TraceJob]]
    runs: list[dict[str, Run]]


def sampled_cells(
    workload: Workload, start: float, loads: Sequence[float], seeds: int
) -> list[Sampled]:
    week = trace_window(workload.trace, start, WEEK)
    cells = []
    for gpus in WINDOW_SLOTS:
        for load in loads:
            traces = [sample_load(week, gpus, WEEK * 86400, load, seed) for seed in range(seeds)]
            runs = [
                {p: simulate(workload, t, gpus, p, f" load {load:g} seed {i}") for p in POLICIES}
                for i, t in enumerate(traces)
            ]
            cells.append(Sampled(gpus, load, traces, runs))
    return cells


def sampled_rows(workload: Workload, cells: Sequence[Sampled]) -> tuple[list[str], list[str]]:
    """The per-policy table (means over seeds) and the ratio table (mean, min-max)."""
    mean = statistics.fmean
    detail, ratio = [], []
    for cell in cells:
        loads = [offered_load(t, cell.gpus, WEEK * 86400) for t in cell.traces]
        jobs = mean(len(t) for t in cell.traces)
        head = f"| {cell.gpus} | {cell.load:.2f} | {jobs:,.0f} | {mean(loads):.3f} |"
        alone = [
            [j.isolated for j in jobs_from_trace(t, cell.gpus, workload.serials)]
            for t in cell.traces
        ]
        bound = [mean(a) for a in alone]  # no policy's average JCT can be lower
        detail.append(
            f"{head} alone (bound) | {hours(mean(bound), 2)} | "
            f"{hours(mean(statistics.median(a) for a in alone), 2)} | "
            f"{hours(mean(percentile(a, 0.99) for a in alone), 2)} | | | | |"
        )
        for policy in POLICIES:
            s = [r[policy].summary for r in cell.runs]
            detail.append(
                f"{head} {policy} | {hours(mean(x.avg_jct for x in s), 2)} | "
                f"{hours(mean(x.median_jct for x in s), 2)} | "
                f"{hours(mean(x.p99_jct for x in s), 2)} | "
                f"{mean(x.utilisation for x in s):.1%} | {mean(x.jain for x in s):.3f} | "
                f"{mean(x.reallocations for x in s):.2f} | "
                f"{sum(r[policy].seconds for r in cell.runs):.1f} |"
            )
        best = [b / r["tiresias"].summary.avg_jct for b, r in zip(bound, cell.runs, strict=True)]
        for policy in FAMILY:
            per_seed = [
                ratios(
                    {p: r[p].summary.avg_jct for p in POLICIES},
                    {p: r[p].summary.p99_jct for p in POLICIES},
                    policy,
                )
                for r in cell.runs
            ]
            columns = []
            for values, goal in zip(zip(*per_seed, strict=True), GOALS, strict=True):
                average = mean(values)
                columns.append(
                    f"{average:.2f}{mark(average, goal)} ({min(values):.2f}-{max(values):.2f})"
                )
            columns.append(f"{mean(best):.2f} ({min(best):.2f}-{max(best):.2f})")
            ratio.append(f"| {cell.gpus} | {cell.load:.2f} | {policy} | {' | '.join(columns)} |")
    return detail, ratio


# The Pollux artifact's workloads ------------------------------------------------------------

POLLUX_LOADS = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}
ARTIFACT = ["pollux", "tiresias", "optimus"]
# Our runs: (label, config). Tiresias as the artifact runs it (gangs of the workload's replicas
# at its batch, 30 s per restart); EDT's policies at the workload's batch, 30 s to start or
# resume, EDT's measured 0.1 s per resize; the last row charges 30 s per resize instead.
POLLUX_RUNS = [
    ("tiresias", ClusterConfig("tiresias")),
    *[(policy, ClusterConfig(policy)) for policy in FAMILY],
    ("fairshare-speedup, 30 s resizes", ClusterConfig("fairshare-speedup", resize_pause=30.0)),
]
FIDELITY = 0.10  # our Tiresias within ±10 % of the artifact's, at every load


def artifact(load: float, policy: str) -> tuple[float, float, dict[str, float]]:
    """The artifact's average JCT (mean of the workloads'), p99 over every job, and each
    job's JCT (keyed workload/job), in seconds."""
    path = POLLUX / "results-jobload" / f"{policy}-{load:.1f}" / "summary.json"
    data = json.loads(path.read_text())
    jcts = {f"{w}/{job}": jct for w, jobs in data["jcts"].items() for job, jct in jobs.items()}
    return data["mean"], percentile(list(jcts.values()), 0.99), jcts


def app_of(job: str) -> str:
    return job.rsplit("/", 1)[-1].rsplit("-", 1)[0]


def per_app(jcts: dict[str, float]) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for job, jct in jcts.items():
        groups.setdefault(app_of(job), []).append(jct)
    return {app: statistics.fmean(values) for app, values in groups.items()}


def our_jcts(result: Result) -> dict[str, float]:
    return {
        f"{w}/{o.name}": o.jct
        for w, outcomes in zip(result.workloads, result.outcomes, strict=True)
        for o in outcomes
    }


def pollux_parts() -> dict[str, list[str]]:
    summary, tables, apps = [], [], []
    for load, folder in POLLUX_LOADS.items():
        ref = {policy: artifact(load, policy) for policy in ARTIFACT}
        pollux_avg = ref["pollux"][0]
        results: dict[str, Result] = {}
        seconds: dict[str, float] = {}
        for label, config in POLLUX_RUNS:
            started = time.perf_counter()
            results[label] = simulate_folder(POLLUX / folder, config, procs=2)
            seconds[label] = time.perf_counter() - started
            print(f"  pollux load {load:g} {label}: {results[label].avg_jct / 3600:.3f} h "
                  f"({seconds[label]:.0f} s)", flush=True)  # fmt: skip
        jobs = sum(len(w) for w in results["tiresias"].outcomes) // len(
            results["tiresias"].outcomes
        )
        bound = statistics.fmean(results["tiresias"].bounds)
        tables += [
            f"### Load {load:g}x ({jobs} jobs per workload, 8 workloads)",
            "",
            "| source | policy | avg JCT h | p99 JCT h | avg vs Pollux | sim s |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for policy in ARTIFACT:
            avg, p99, _ = ref[policy]
            tables.append(
                f"| artifact | {policy} | {avg / 3600:.3f} | {p99 / 3600:.2f} | "
                f"{avg / pollux_avg:.2f} | |"
            )
        for label, result in results.items():
            tables.append(
                f"| ours | {label} | {result.avg_jct / 3600:.3f} | {result.p99_jct / 3600:.2f} | "
                f"{result.avg_jct / pollux_avg:.2f} | {seconds[label]:.0f} |"
            )
        tables += [
            f"| bound | every job alone at its best size, fixed batch | {bound / 3600:.3f} | | "
            f"{bound / pollux_avg:.2f} | |",
            "",
        ]
        fidelity = results["tiresias"].avg_jct / ref["tiresias"][0]
        best = min(FAMILY, key=lambda p: results[p].avg_jct)
        ratio = results[best].avg_jct / pollux_avg
        summary.append(
            f"| {load:g} | {pollux_avg / 3600:.3f} | {ref['tiresias'][0] / 3600:.3f} | "
            f"{results['tiresias'].avg_jct / 3600:.3f} ({fidelity - 1:+.1%}"
            f"{' ✓' if abs(fidelity - 1) <= FIDELITY else ' ✗'}) | {best} "
            f"{results[best].avg_jct / 3600:.3f} | {ratio:.2f}{' ✓' if ratio <= 1 else ' ✗'} | "
            f"{results[best].p99_jct / 3600:.2f} vs {ref['pollux'][1] / 3600:.2f} | "
            f"{bound / 3600:.3f} ({bound / pollux_avg:.2f}) |"
        )
        ours = per_app(our_jcts(results[best]))
        theirs = per_app(ref["pollux"][2])
        tiresias = per_app(our_jcts(results["tiresias"]))
        counts: dict[str, int] = {}
        for job in our_jcts(results[best]):
            counts[app_of(job)] = counts.get(app_of(job), 0) + 1
        for app in sorted(ours, key=lambda a: -counts[a]):
            apps.append(
                f"| {load:g} | {app} | {counts[app]} | {tiresias[app] / 3600:.2f} | "
                f"{ours[app] / 3600:.2f} | {theirs[app] / 3600:.2f} | "
                f"{ours[app] / theirs[app]:.2f} |"
            )
    return {"pollux_summary": summary, "pollux_tables": tables, "pollux_apps": apps}


def pollux_section(parts: dict[str, list[str]]) -> list[str]:
    return [
        "## The Pollux artifact's workloads (OSDI'21): 64 GPUs, 16 nodes x 4",
        "",
        f"Inputs: `{POLLUX}` (the artifact's 8 workloads per load, its measured throughput "
        "per placement and batch, its statistical efficiency, and its own results). Our "
        "simulator (`python -m scheduler.simulate pollux`, `scheduler/simulate/cluster.py`) "
        "steps the cluster as the artifact does: a decision every 60 s, throughput "
        "interpolated from the measured placements, goodput = throughput x statistical "
        "efficiency at the job's batch, a job ends after its application's last epoch. "
        "Our Tiresias runs gangs of the workload's replica counts at the workload's batch "
        "sizes with 30 s per restart, as the artifact's does. EDT's policies keep every "
        "job's batch size (the workload's) on 1 GPU up to its best size, pay 30 s to start "
        "or resume from a checkpoint and EDT's measured 0.1 s (bench/results/engine.md) per "
        "resize; *fairshare-speedup* sees each job's speedup curve at its batch, measured "
        "from the same data. Pollux instead picks each job's batch size and GPUs together.",
        "",
        "| load | Pollux avg h | artifact Tiresias h | our Tiresias h (vs artifact) | "
        "best EDT policy, avg h | vs Pollux (goal ≤ 1) | p99 h: ours vs Pollux | "
        "bound h (vs Pollux) |",
        "|---:|---:|---:|---|---|---|---|---|",
        *parts["pollux_summary"],
        "",
        "*bound*: every job alone on the cluster from its submission, at its best GPU count "
        "for its fixed batch, never paused: no policy that keeps the users' batch sizes can "
        "have a lower average JCT.",
        "",
        "Why the goal (≤ Pollux) is out of reach with fixed batch sizes, by how much choosing "
        "the batch helps each application and the cluster's GPU-hours: "
        "bench/results/pollux-why.md (`python bench/pollux_goodput.py`).",
        "",
        *parts["pollux_tables"],
        "Per application, the best EDT policy against Pollux (avg JCT h over the 8 workloads):",
        "",
        "| load | application | jobs | our Tiresias | best EDT policy | Pollux | EDT / Pollux |",
        "|---:|---|---:|---:|---:|---:|---:|",
        *parts["pollux_apps"],
    ]


# The live decision path -----------------------------------------------------------------------

LIVE = [(1_000, 1_024, 10.0), (10_000, 10_000, 100.0)]  # jobs, slots, goal ms per step
COLD_GOAL_MS = 1000.0  # a 10k cold start
PAIRS = 5
RUNS = 3  # fresh processes per size: a cold start is measured once in each
ARRIVALS, SETTLE = 5, 3  # arrivals per run, untimed steps after each
# The same steps at 1,000 jobs before each step read every job at once (the run of
# 2026-11-23 13:03 UTC, load average 16): cold start, steady step, one arrival, in ms.
BEFORE_1K = (117_536, 18_166, 13_751)


def live_child(jobs: int, slots: int) -> dict[str, object]:
    """In a fresh process: a data directory, SQLite and a redis-server of its own; ``jobs``
    queued jobs and ``slots`` alive slots; LiveScheduler.step timed end to end."""
    import tempfile

    data = Path(tempfile.mkdtemp(prefix="edt-bench-"))
    os.environ |= {
        "EDT_DATA_DIR": str(data),
        "DATABASE_URL": f"sqlite:///{data / 'bench.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "edtweb.settings",
    }
    from edtweb.redis_server import RedisServer

    redis = RedisServer(data / "redis", appendonly=False, dies_with_parent=True).start()
    os.environ["REDIS_URL"] = redis.url
    try:
        return _live_timings(jobs, slots)
    finally:
        redis.stop()


def _live_timings(count: int, size: int) -> dict[str, object]:
    import logging

    import django

    django.setup()
    logging.disable(logging.INFO)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from edtweb.training.live_adapter import live_scheduler
    from edtweb.training.models import Job
    from protocol.keys import ALIVE
    from protocol.slots import SlotInfo
    from scheduler.live.loop import collector_paused
    from scheduler.policies import decide

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-only")
    views = queued_jobs(count)
    Job.objects.bulk_create(
        [
            Job(owner=user, name=v.id, model_path="m.py", data_path="d",
                max_workers=v.max_workers, priority=v.priority)
            for v in views
        ],
        batch_size=500,
    )  # fmt: skip
    alive = [
        SlotInfo(s.id, s.host, s.index, "cpu", f"edt.slot.{s.id}", ALIVE) for s in cluster(size)
    ]
    live = live_scheduler("fairshare")
    collections = GcClock()

    def step() -> list[float]:
        """Wall and CPU ms of one step; the collector's time after it is added at the end."""
        started, cpu = time.perf_counter(), time.process_time()
        live.step(alive)
        ended = time.perf_counter()
        collections.steps.append((started, ended))
        return [(ended - started) * 1000, (time.process_time() - cpu) * 1000]

    cold = step()
    steady = [step() for _ in range(7)][2:]  # the first after a cold start grants no ACL now
    arrivals = []
    for n in range(ARRIVALS):
        Job.objects.create(owner=user, name=f"new{n}", model_path="m.py", data_path="d",
                           max_workers=8, priority=10_000)  # fmt: skip
        arrivals.append(step())
        for _ in range(SETTLE):  # the shrinks it set off, carried out
            step()
    step()
    timed_steps = {0: cold, **{3 + i: s for i, s in enumerate(steady)}}
    timed_steps |= {8 + i * (SETTLE + 1): s for i, s in enumerate(arrivals)}
    for i, sample in timed_steps.items():
        sample.append(collections.after(i))
    # The policy alone on the same jobs (a cold start's decision), as a step runs it: with
    # the collector paused (else a full collection of the runners lands in it); median of 3.
    snapshot = Snapshot(size, views)
    pure_runs = []
    for _ in range(3):
        with collector_paused():
            started = time.perf_counter()
            decision = decide(snapshot)
            pure_runs.append((time.perf_counter() - started) * 1000)
    pure = statistics.median(pure_runs)
    # Recording a cold start's 'scaled' events: every job's inputs per changed job (before)
    # against the decision's totals once and each job's own slice (now), serialised as the
    # database stores them; interleaved pairs (at 1,000 jobs only: before is minutes at 10k).
    pairs = []
    for _ in range(PAIRS if count <= 1_000 else 0):
        before, now = _record_old(decision), _record_new(decision)
        pairs.append((before, now))
    return {
        "cold": [cold],
        "steady": steady,
        "arrival": arrivals,
        "pure": [pure],
        "changes": len(decision.reasons),
        "pairs": pairs,
    }


class GcClock:
    """When Python's cyclic garbage collector ran, and for how long (``gc.callbacks``), and
    when the steps ran: what it cost between the timed steps is reported beside them."""

    def __init__(self) -> None:
        self.runs: list[tuple[float, float]] = []  # (start, end)
        self.steps: list[tuple[float, float]] = []
        self.began = 0.0
        gc.callbacks.append(self.observe)

    def observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.perf_counter()
        else:
            self.runs.append((self.began, time.perf_counter()))

    def after(self, i: int) -> float:
        """Ms of collections from the end of step ``i`` to the start of the next one: the
        collector paused during a step catches up there."""
        end = self.steps[i][1]
        until = self.steps[i + 1][0] if i + 1 < len(self.steps) else float("inf")
        return sum(b - a for a, b in self.runs if end <= a < until) * 1000


def _record_old(decision: Decision) -> float:
    started = time.perf_counter()
    for _ in decision.reasons:
        json.dumps(decision.inputs())
    return (time.perf_counter() - started) * 1000


def _record_new(decision: Decision) -> float:
    started = time.perf_counter()
    summary = decision.summary()
    views = {v.id: v for v in decision.snapshot.jobs}
    for key in decision.reasons:
        json.dumps(decision.job_inputs(views[key], summary))
    return (time.perf_counter() - started) * 1000


def _live_row(size: str, old: dict[str, int], what: str, key: str, goal_ms: float | None,
              samples: list[list[float]]) -> str:  # fmt: skip
    """Best and median wall ms, median CPU ms, median and largest collector ms after the
    step; the goal judged on the median wall."""
    best = min(s[0] for s in samples)
    wall, cpu, gc_ms = (statistics.median(s[i] for s in samples) for i in (0, 1, 2))
    ok = "" if goal_ms is None else f"≤ {goal_ms:,.0f} {'✓' if wall <= goal_ms else '✗'}"
    was = f"{old[key]:,}" if key in old else ""
    after = f"{gc_ms:,.1f} / {max(s[2] for s in samples):,.1f}"
    cells = [size, what, str(len(samples)), f"{best:,.1f}", f"{wall:,.1f}", f"{cpu:,.1f}", after,
             was, ok]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def live_section() -> list[str]:
    rows, pairs = [], []
    for jobs, slots, goal in LIVE:
        before = machine()
        runs = []
        for _ in range(RUNS):
            out = subprocess.run(
                [sys.executable, __file__, "--live-child", str(jobs), str(slots)],
                capture_output=True, text=True, check=True, cwd=PROJECT,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        t = {key: [x for run in runs for x in run[key]] for key in ("cold", "steady", "arrival")}
        pairs = pairs or runs[0]["pairs"]
        old = (
            dict(zip(("cold", "steady", "arrival"), BEFORE_1K, strict=True))
            if jobs == 1_000
            else {}
        )
        row = partial(_live_row, f"{jobs:,} / {slots:,}", old)
        cold_goal = COLD_GOAL_MS if jobs == 10_000 else None
        pure = statistics.median(x for run in runs for x in run["pure"])
        rows += [
            row(f"cold start ({runs[0]['changes']:,} jobs get slots)", "cold", cold_goal,
                t["cold"]),
            row("steady step, nothing changes", "steady", goal, t["steady"]),
            row("one arrival at priority 10000", "arrival", goal, t["arrival"]),
            f"| {jobs:,} / {slots:,} | the policy alone (fairshare, the same jobs all new) | "
            f"{len(runs)} | | {pure:.1f} | | | | |",
        ]  # fmt: skip
        rows.append(f"| | *machine before this size: {before}* | | | | | | | |")
    section = [
        "## The live decision path: LiveScheduler.step end to end",
        "",
        "Queued jobs on CPU slots (8 per host), SQLite and a redis-server of the run's own, "
        "no slot workers (learners are dispatched, none runs). `LiveScheduler.step` reads the "
        "jobs (one query, as rows), takes Redis' set of changed jobs (which learner writes add "
        "to) and reads those jobs alone in one Lua script, reads the pending learners' leases "
        "in one `MGET` at most every 0.25 s, decides, places, records a *scaled* event per "
        "changed job (one bulk insert per step, one merged page push per step), dispatches "
        "learners (every token and Celery message in one Lua script) and ticks only the "
        "runners whose inputs changed, with Python's cyclic garbage collector paused for the "
        "step: *GC after* is the collector's time between the step's end and the next step "
        "(catching up on what the step left; not in the wall ms). *Before*: the same steps at "
        "1,000 jobs when each "
        "runner read Redis on its own and each event was its own row and push "
        "(2026-11-23 13:03 UTC, load average 16). CPU ms: this process only (Redis and SQLite "
        f"work in other processes or the kernel is not in it). Each size runs {RUNS} fresh "
        f"processes: one cold start each, then 5 steady steps, then {ARRIVALS} arrivals each "
        f"followed by {SETTLE} untimed steps; best and median over all of them, the goal "
        "judged on the median. The leases are looked at every 0.25 s whatever the step, as "
        "live: some steps pay that look (every dispatched learner's lease, none held here).",
        "",
        "| jobs / slots | situation | samples | best wall ms | median wall ms | median CPU ms "
        "| GC after ms (median / max) | before ms | goal (median wall ms) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
        *rows,
    ]
    if pairs:
        ratios = [new / old for old, new in pairs]
        section += [
            "",
            f"Recording a cold start's *scaled* events' inputs as JSON at 1,000 jobs (build + "
            f"serialise, no database), {PAIRS} interleaved pairs: every job's inputs per "
            f"changed job (before) {statistics.median(o for o, _ in pairs):,.1f} ms median; "
            f"the decision's totals once and each job's own inputs (now) "
            f"{statistics.median(n for _, n in pairs):,.2f} ms; now / before min "
            f"{min(ratios):.4f}, median {statistics.median(ratios):.4f}, max {max(ratios):.4f}.",
        ]
    return section


# Report -----------------------------------------------------------------------------------


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load}"
    )


SECTIONS = ["decisions", "live", "pollux", "philly"]
SECTION = re.compile(r"<!-- section (\w+) -->\n(.*?)<!-- /section \1 -->\n", re.S)


def previous_sections(results: Path = RESULTS) -> dict[str, str]:
    """The sections of the last report, kept for the parts this run does not repeat."""
    if not results.exists():
        return {}
    return dict(SECTION.findall(results.read_text()))


def report(
    sections: dict[str, list[str]],
    notes: dict[str, str],
    title: str = "Scheduler benchmarks",
    script: str = "bench/bench_scheduler.py",
    results: Path = RESULTS,
    order: Sequence[str] = SECTIONS,
) -> str:
    """The report of ``script``: this run's sections, in ``order``, and the last report's
    (``results``) for those it did not run."""
    kept = previous_sections(results)
    lines = [f"# {title}", ""]
    for name in order:
        if name in sections:
            body = "\n".join(
                [
                    f"Run {notes['date']} with `python {script}`; machine at "
                    f"start: {notes['start']}; at the end: {machine()}.",
                    "",
                    *sections[name],
                ]
            )
            body += "\n"
        elif name in kept:
            body = kept[name]
        else:
            continue
        lines += [f"<!-- section {name} -->", body + f"<!-- /section {name} -->", ""]
    return "\n".join(lines)


def decision_section(rows: list[str]) -> list[str]:
    return [
        "## Decision time: fairshare + placement (best and median of repeated runs)",
        "",
        "| jobs | slots | situation | runs | best wall ms | median wall ms | median CPU ms "
        "| goal (median wall ms) |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
        *rows,
    ]


def simulation_sections(parts: dict[str, list[str]], notes: dict[str, str]) -> list[str]:
    return [
        "",
        f"Trace: `{notes['trace']}`. Speedup: Amdahl fitted from the Pollux scalability data, "
        f"{notes['model']} (fairshare-speedup sees each job's Amdahl curve). Pauses: resize "
        "1 s, restart from checkpoint 30 s (suspensions, Tiresias preemptions); fifo-gang "
        "and fifo-backfill never resize.",
        "",
        "## Whole trace at 1,024 slots",
        "",
        "| jobs | slots | policy | decisions | simulation time | avg JCT s | p99 JCT s | util |",
        "|---:|---:|---|---:|---|---:|---:|---:|",
        *parts["whole"],
        "",
        f"## One-week window from day {notes['week']} (the median-demand full week), "
        f"{notes['jobs']} jobs, replayed whole",
        "",
        f"Offered load (GPU-time / (slots x one week)): {notes['raw_loads']}. The week's "
        "jobs came from a much larger cluster, so at these sizes (load > 1) it is an "
        "overload: the queue does not drain within the week and JCT is mostly queueing.",
        "",
        "| slots | policy | avg JCT h | median JCT h | p99 JCT h | makespan days | util | "
        "Jain | reallocs/job | sim s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *parts["detail"],
        "",
        "EDT's policies as a fraction of the baselines (goals: avg ≤ 0.5x fifo-gang; "
        "the best policy's avg ≤ 0.8x Tiresias and p99 ≤ 1x Tiresias):",
        "",
        "| slots | policy | avg vs fifo-gang | avg vs fifo-backfill | avg vs Tiresias | "
        "p99 vs Tiresias |",
        "|---:|---|---|---|---|---|",
        *parts["ratios"],
        "",
        f"## Load-matched workloads sampled from the same week ({notes['seeds']})",
        "",
        "Per seed, jobs drawn uniformly without replacement from the week, with their own "
        "submission times, until their GPU-time is the target load of the cluster's week "
        "(`scheduler.simulate.trace.sample_load`, after the Pollux artifact's sampled "
        "workloads); every policy runs the same workloads. Means over the seeds; "
        "*alone (bound)*: each job alone on the cluster at its max, a floor for any policy's "
        "average and p99 JCT.",
        "",
        "| slots | load | jobs | sampled load | policy | avg JCT h | median JCT h | p99 JCT h | "
        "util | Jain | reallocs/job | sim s (all seeds) |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *parts["sampled_detail"],
        "",
        "EDT's policies as a fraction of the baselines, mean of the per-seed ratios (min-max "
        "over seeds); ✓/✗ on the mean against the goals (avg ≤ 0.5x fifo-gang, ≤ 0.8x "
        "Tiresias; p99 ≤ 1x Tiresias). Last column: the average JCT of the jobs alone over "
        "Tiresias', the lowest *avg vs Tiresias* any policy could reach on these workloads:",
        "",
        "| slots | load | policy | avg vs fifo-gang | avg vs fifo-backfill | avg vs Tiresias | "
        "p99 vs Tiresias | bound: alone vs Tiresias (avg) |",
        "|---:|---:|---|---|---|---|---|---|",
        *parts["sampled_ratios"],
    ]


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--live-child"]:
        print(json.dumps(live_child(int(argv[1]), int(argv[2]))))
        return 0
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--trace", type=Path, default=TRACE)
    args.add_argument("--start-day", type=float, help="window start (default: the median week)")
    args.add_argument(
        "--load",
        type=float,
        nargs="+",
        default=LOADS,
        help="offered load(s) of the sampled workloads (default 1.0)",
    )
    args.add_argument("--seeds", type=int, default=SEEDS, help="sampled workloads per cell")
    args.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=SECTIONS,
        help="run only these parts; the report keeps the others from its last run",
    )
    options = args.parse_args(argv)
    if options.seeds < 1 or min(options.load) <= 0:
        args.error("--seeds must be at least 1 and --load positive")
    notes = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "start": machine()}
    sections: dict[str, list[str]] = {}
    if "decisions" in options.only:
        sections["decisions"] = decision_section(decision_rows())
    if "live" in options.only:
        sections["live"] = live_section()
    if "pollux" in options.only:
        if (POLLUX / "workloads").exists():
            sections["pollux"] = pollux_section(pollux_parts())
        else:
            print(f"no Pollux artifact data at {POLLUX}: skipped", file=sys.stderr)
    if "philly" in options.only:
        if options.trace.exists():
            sections["philly"] = philly_section(options)
        else:
            print(f"no trace at {options.trace}: skipped", file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report(sections, notes))
    print(f"wrote {RESULTS}")
    return 0


def philly_section(options: argparse.Namespace) -> list[str]:
    workload = load_workload(options.trace)
    start = options.start_day if options.start_day is not None else median_week(workload.trace)
    parts = {"whole": whole_trace_rows(workload)}
    parts["detail"], parts["ratios"] = window_rows(workload, start)
    cells = sampled_cells(workload, start, options.load, options.seeds)
    parts["sampled_detail"], parts["sampled_ratios"] = sampled_rows(workload, cells)
    week = trace_window(workload.trace, start, WEEK)
    notes = {
        "trace": str(options.trace),
        "model": workload.model,
        "week": f"{start:g}",
        "jobs": f"{len(week):,}",
        "raw_loads": ", ".join(
            f"{offered_load(week, gpus, WEEK * 86400):.2f} on {gpus} slots" for gpus in WINDOW_SLOTS
        ),
        "seeds": f"{options.seeds} seeds: {', '.join(map(str, range(options.seeds)))}",
    }
    return ["## The Philly trace", "", *simulation_sections(parts, notes)]


if __name__ == "__main__":
    sys.exit(main())
