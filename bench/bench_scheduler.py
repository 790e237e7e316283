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
import os
import platform
import random
import statistics
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
from scheduler.policies import RUNNING, JobView, Snapshot, fairshare  # noqa: E402
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
from scheduler.simulate.metrics import percentile  # noqa: E402
from scheduler.simulate.speedup import load_fits, usable  # noqa: E402

TRACE = PROJECT.parent / "shared" / "traces" / "pollux" / "philly.csv"
RESULTS = PROJECT / "bench" / "results" / "scheduler.md"
SLOTS_PER_HOST = 8
WEEK = 7.0

# Decision-time scenarios: (jobs, slots, goal in ms, repeats).
DECISIONS = [(1_000, 1_024, 10.0, 31), (10_000, 10_000, 100.0, 11)]
WINDOW_SLOTS = [64, 256]
BASELINES = ["fifo-gang", "tiresias"]
POLICIES = ["fairshare", *BASELINES]
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


def timed(action: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``action`` over ``repeats`` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


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
            wall, cpu = timed(action, repeats)
            mark = "✓" if wall <= goal else "✗"
            rows.append(
                f"| {count:,} | {size:,} | {name} | {wall:.1f} | {cpu:.1f} | ≤ {goal:g} {mark} |"
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
        runs = {p: simulate(workload, trace, gpus, p) for p in ["fairshare", *BASELINES]}
        for policy, result in runs.items():
            s = result.summary
            detail.append(
                f"| {gpus} | {policy} | {hours(s.avg_jct)} | {hours(s.median_jct)} | "
                f"{hours(s.p99_jct)} | {s.makespan / 86400:.1f} | {s.utilisation:.1%} | "
                f"{s.jain:.3f} | {s.reallocations:.2f} | {result.seconds:.0f} |"
            )
        ratios.append(
            ratio_row(
                gpus,
                {p: r.summary.avg_jct for p, r in runs.items()},
                {p: r.summary.p99_jct for p, r in runs.items()},
            )
        )
    return detail, ratios


def ratios(avg: dict[str, float], p99: dict[str, float]) -> tuple[float, float, float]:
    """Fairshare's average JCT over fifo-gang's and Tiresias', its p99 over Tiresias'."""
    return (
        avg["fairshare"] / avg["fifo-gang"],
        avg["fairshare"] / avg["tiresias"],
        p99["fairshare"] / p99["tiresias"],
    )


GOALS = (0.5, 0.75, 1.0)  # the bounds on ratios(): issue 4


def ratio_row(gpus: int, avg: dict[str, float], p99: dict[str, float]) -> str:
    marked = [
        f"{value:.2f} {'✓' if value <= goal else '✗'}"
        for value, goal in zip(ratios(avg, p99), GOALS, strict=True)
    ]
    return f"| {gpus} | {' | '.join(marked)} |"


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
        per_seed = [
            ratios(
                {p: r[p].summary.avg_jct for p in POLICIES},
                {p: r[p].summary.p99_jct for p in POLICIES},
            )
            for r in cell.runs
        ]
        columns = []
        for values, goal in zip(zip(*per_seed, strict=True), GOALS, strict=True):
            average = mean(values)
            columns.append(
                f"{average:.2f} {'✓' if average <= goal else '✗'} "
                f"({min(values):.2f}-{max(values):.2f})"
            )
        best = [b / r["tiresias"].summary.avg_jct for b, r in zip(bound, cell.runs, strict=True)]
        columns.append(f"{mean(best):.2f} ({min(best):.2f}-{max(best):.2f})")
        ratio.append(f"| {cell.gpus} | {cell.load:.2f} | {' | '.join(columns)} |")
    return detail, ratio


# Report -----------------------------------------------------------------------------------


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load}"
    )


def report(parts: dict[str, list[str]], notes: dict[str, str]) -> str:
    lines = [
        "# Scheduler benchmarks",
        "",
        f"Run {notes['date']} with `python bench/bench_scheduler.py`; machine at start: "
        f"{notes['start']}; at the end: {machine()}.",
        "",
        "## Decision time: fairshare + placement (median of repeated runs)",
        "",
        "| jobs | slots | situation | wall ms | CPU ms | goal (wall ms) |",
        "|---:|---:|---|---:|---:|---|",
        *parts["decisions"],
    ]
    if "whole" in parts:
        lines += simulation_sections(parts, notes)
    return "\n".join(lines) + "\n"


def simulation_sections(parts: dict[str, list[str]], notes: dict[str, str]) -> list[str]:
    return [
        "",
        f"Trace: `{notes['trace']}`. Speedup: Amdahl fitted from the Pollux scalability data, "
        f"{notes['model']}. Pauses: resize 1 s, restart from checkpoint 30 s (suspensions, "
        "Tiresias preemptions); fifo-gang never resizes.",
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
        "Fairshare as a fraction of the baselines (goals: avg ≤ 0.5x fifo-gang, "
        "≤ 0.75x Tiresias; p99 ≤ 1x Tiresias):",
        "",
        "| slots | avg vs fifo-gang | avg vs Tiresias | p99 vs Tiresias |",
        "|---:|---|---|---|",
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
        "Fairshare as a fraction of the baselines, mean of the per-seed ratios (min-max "
        "over seeds); ✓/✗ on the mean against the goals (avg ≤ 0.5x fifo-gang, ≤ 0.75x "
        "Tiresias; p99 ≤ 1x Tiresias). Last column: the average JCT of the jobs alone over "
        "Tiresias', the lowest *avg vs Tiresias* any policy could reach on these workloads:",
        "",
        "| slots | load | avg vs fifo-gang | avg vs Tiresias | p99 vs Tiresias | "
        "bound: alone vs Tiresias (avg) |",
        "|---:|---:|---|---|---|---|",
        *parts["sampled_ratios"],
    ]


def main(argv: Sequence[str] | None = None) -> int:
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
    options = args.parse_args(argv)
    if options.seeds < 1 or min(options.load) <= 0:
        args.error("--seeds must be at least 1 and --load positive")
    notes = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "start": machine()}
    parts = {"decisions": decision_rows()}
    if options.trace.exists():
        workload = load_workload(options.trace)
        start = options.start_day if options.start_day is not None else median_week(workload.trace)
        parts["whole"] = whole_trace_rows(workload)
        parts["detail"], parts["ratios"] = window_rows(workload, start)
        cells = sampled_cells(workload, start, options.load, options.seeds)
        parts["sampled_detail"], parts["sampled_ratios"] = sampled_rows(workload, cells)
        week = trace_window(workload.trace, start, WEEK)
        notes |= {
            "trace": str(options.trace),
            "model": workload.model,
            "week": f"{start:g}",
            "jobs": f"{len(week):,}",
            "raw_loads": ", ".join(
                f"{offered_load(week, gpus, WEEK * 86400):.2f} on {gpus} slots"
                for gpus in WINDOW_SLOTS
            ),
            "seeds": f"{options.seeds} seeds: {', '.join(map(str, range(options.seeds)))}",
        }
    else:
        print(f"no trace at {options.trace}: decision times only", file=sys.stderr)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report(parts, notes))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
