"""The goodput policy: decision time against fairshare, JCT on the Pollux artifact's
workloads against Pollux's published results, and the Philly week with goodput profiles.

    python bench/bench_goodput.py [--only decisions pollux philly] [--loads 0.5 1 1.5 2]
                                  [--seeds N] [--procs 2]

Writes bench/results/goodput.md (sections this run does not repeat are kept from the last).
Goals (issues 29 and 41): 1,000 jobs decided in <= 10 ms and 10,000 in <= 100 ms (median,
decision and placement); on the Pollux workloads at 64 GPUs, average JCT <= 0.90x Pollux's
at every load and p99 <= Pollux's (issue 29 asked 0.85x), the fixed-batch policies
unchanged.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from bench_scheduler import (  # noqa: E402  (bench/ is this script's directory)
    POLLUX,
    POLLUX_LOADS,
    TRACE,
    WEEK,
    app_of,
    artifact,
    cluster,
    machine,
    median_week,
    our_jcts,
    per_app,
)
from bench_scheduler import report as scheduler_report  # noqa: E402

from scheduler.placement import Slot, place  # noqa: E402
from scheduler.policies import RUNNING, JobView, Policy, Snapshot, fairshare  # noqa: E402
from scheduler.policies import goodput as goodput_policy  # noqa: E402
from scheduler.simulate import (  # noqa: E402
    Config,
    jobs_from_trace,
    offered_load,
    read_trace,
    run,
    sample_load,
    window,
)
from scheduler.simulate.cluster import ClusterConfig  # noqa: E402
from scheduler.simulate.pollux import load_applications, trace_profiles  # noqa: E402
from scheduler.simulate.pollux_cli import Result, simulate_folder  # noqa: E402
from scheduler.simulate.speedup import load_fits, usable  # noqa: E402

RESULTS = PROJECT / "bench" / "results" / "goodput.md"
SECTIONS = ["decisions", "pollux", "philly"]
PER_HOST = 8  # the decision benchmark's hosts (bench_scheduler's)
DECISIONS = [(1_000, 1_024, 10.0, 21), (10_000, 10_000, 100.0, 7)]  # jobs, slots, goal, pairs
RESIZE = 0.5  # s: the top of EDT's measured resize pause (bench/results/engine-resize.md)
GOAL_AVG = 0.90  # x Pollux's average JCT (issue 41)
LOADS = [0.5, 1.0, 1.5, 2.0]
PHILLY_SLOTS = [64, 256]
PHILLY_POLICIES = ["fairshare", "fairshare-speedup", "goodput"]


# Decision time ----------------------------------------------------------------------------


def goodput_jobs(count: int, seed: int = 1) -> list[JobView]:
    """Philly-like sizes (93% one GPU) and priorities (uniform over 1-10000); each job one of
    the Pollux artifact's applications, in goodput mode with its fitted throughput model,
    range of batches and micro-batch cap and a noise scale of its own (log-normal around
    the application's median), except ncf's jobs, which keep a fixed batch."""
    apps = load_applications(POLLUX / "traces")
    names = sorted(apps)
    middles = {
        name: statistics.median(app.noise_scale(app.init_batch, e) for e in range(app.max_epochs))
        for name, app in apps.items()
    }
    rng = random.Random(seed)
    sizes = [1] * 93 + [2, 2, 4, 4, 8, 8, 16]
    jobs = []
    for i in range(count):
        app = apps[rng.choice(names)]
        top, priority = rng.choice(sizes), rng.randint(1, 10_000)
        if app.name == "ncf":
            jobs.append(JobView(f"j{i}", top, float(i), priority))
            continue
        jobs.append(
            JobView(
                f"j{i}",
                min(top, app.max_batch),
                float(i),
                priority,
                batch_range=(app.init_batch, app.max_batch),
                max_micro_batch=int(app.max_local_bsz),
                gns=middles[app.name] * rng.lognormvariate(0, 1),
                base_batch=app.init_batch,
                throughput=app.model,
            )
        )
    return jobs


def decide_and_place(decide: Policy, slots: list[Slot], jobs: list[JobView],
                     current: dict[str, list[str]]) -> None:  # fmt: skip
    decision = decide(Snapshot(len(slots), jobs, slots_per_host=PER_HOST))
    place(slots, current, decision.targets)


def steady(slots: list[Slot], jobs: list[JobView]) -> tuple[list[JobView], dict[str, list[str]]]:
    """The cluster after the goodput policy placed every job: jobs hold their slots and
    batches."""
    decision = goodput_policy.decide(Snapshot(len(slots), jobs, slots_per_host=PER_HOST))
    members = place(slots, {}, decision.targets).members
    held = [
        replace(j, current=decision.targets[j.id], state=RUNNING,
                batch=decision.batches.get(j.id, 0)) if decision.targets[j.id] else j
        for j in jobs
    ]  # fmt: skip
    return held, {job: list(m) for job, m in members.items() if m}


def new_views(jobs: list[JobView]) -> None:
    """Every job new to the policy: what it kept on their views forgotten (a new job's view
    comes with nothing kept), the tables it built kept."""
    for job in jobs:
        job.derived.clear()


def cold_tables(jobs: list[JobView]) -> None:
    """Every job new and every table the goodput policy built forgotten (a scheduler that
    just started)."""
    goodput_policy._goodput.cache_clear()
    goodput_policy.envelope.cache_clear()
    goodput_policy.rounded_gns.cache_clear()
    new_views(jobs)


Action = Callable[[], object]


def paired(
    first: Action, second: Action, pairs: int, before_first: Action = lambda: None
) -> tuple[list[float], list[float]]:
    """Wall seconds of ``first`` and ``second``, interleaved (first, second, first, ...) so
    a change in the machine's load hits both alike; the collector paused during each."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(pairs):
        for index, action in enumerate((first, second)):
            if index == 0:
                before_first()
            gc.collect()
            gc.disable()
            started = time.perf_counter()
            action()
            times[index].append(time.perf_counter() - started)
            gc.enable()
    return times


def decision_rows() -> list[str]:
    rows = []
    for count, size, goal, pairs in DECISIONS:
        slots, jobs = cluster(size), goodput_jobs(count)
        held, current = steady(slots, jobs)
        arrival = [*held, replace(jobs[7], id="new", submitted=float(count), priority=10_000)]
        # (name, jobs, slots held, reported only, what is new to the policy before each
        # goodput run: a job's view is new when the job is, as the live snapshot builder
        # makes them)
        cases: list[tuple[str, list[JobView], dict[str, list[str]], bool, Action]] = [
            ("one arrival at priority 10000 (steady cluster)", arrival, current, False,
             partial(new_views, arrival[-1:])),
            ("cold start (every job new; tables cached)", jobs, {}, False,
             partial(new_views, jobs)),
            ("cold start, every table built (scheduler just started)", jobs, {}, True,
             partial(cold_tables, jobs)),
        ]  # fmt: skip
        for name, snapshot_jobs, held_slots, cold, before in cases:
            ours, theirs = paired(
                partial(decide_and_place, goodput_policy.decide, slots, snapshot_jobs, held_slots),
                partial(decide_and_place, fairshare.decide, slots, snapshot_jobs, held_slots),
                pairs,
                before,
            )
            median = statistics.median(ours) * 1000
            ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
            mark = "" if cold else (" ✓" if median <= goal else " ✗")
            rows.append(
                f"| {count:,} | {size:,} | {name} | {pairs} | {min(ours) * 1000:.1f} | "
                f"{median:.1f} | {statistics.median(theirs) * 1000:.1f} | {ratio:.2f} | "
                f"{'reported' if cold else f'≤ {goal:g}'}{mark} |"
            )
            print(rows[-1], flush=True)
    return rows


def decision_section(rows: list[str]) -> list[str]:
    return [
        "## Decision time: goodput + placement against fairshare + placement",
        "",
        "Jobs: Philly-like sizes (93% one GPU) and priorities; each one of the Pollux "
        "artifact's six applications, in goodput mode with that application's fitted "
        "throughput model (`scheduler.simulate.pollux.fit_model`), batch range and "
        "micro-batch cap, and a noise scale of its own (log-normal around the application's), "
        "ncf's jobs at a fixed batch; hosts of 8 slots. Interleaved pairs (goodput, then "
        "fairshare, on the same snapshot), Python's collector paused during each. *Steady*: "
        "every job holds the slots and batch the goodput policy gave it (their views, and what "
        "the policy kept on them, kept from one decision to the next, as the live snapshot "
        "builder keeps them), one job arrives with a new view. *Cold start*: every job new "
        "(each a new view, so each profile is worked out again, and each changes, so each "
        "gets a reason); the goodput tables (one per application, noise scale rounded to "
        "2 %, size) built by an earlier decision. *Every table built*: the same with the "
        "policy's caches emptied before each goodput run (a scheduler that just started; "
        "reported, not a goal).",
        "",
        "| jobs | slots | situation | pairs | goodput best ms | goodput median ms | "
        "fairshare median ms | goodput / fairshare (median of pairs) | goal (goodput median) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
        *rows,
    ]


# The Pollux artifact's workloads ------------------------------------------------------------

# (label, config): the goodput policy and EDT's best fixed-batch policy, with and without
# learner moves, all at EDT's resize pause.
RUNS = [
    ("goodput", ClusterConfig("goodput", resize_pause=RESIZE)),
    ("goodput + moves", ClusterConfig("goodput", resize_pause=RESIZE, moves=True)),
    ("fairshare-speedup", ClusterConfig("fairshare-speedup", resize_pause=RESIZE)),
    ("fairshare-speedup + moves",
     ClusterConfig("fairshare-speedup", resize_pause=RESIZE, moves=True)),
    # EDT decides on events (docs/architecture.md, "Scheduling contract"): at each arrival
    # and completion as well as every 60 s.
    ("goodput + moves, on events",
     ClusterConfig("goodput", resize_pause=RESIZE, moves=True, events=True)),
]  # fmt: skip
GOODPUT = ["goodput", "goodput + moves", "goodput + moves, on events"]


def hours(seconds: float, digits: int = 3) -> str:
    return f"{seconds / 3600:.{digits}f}"


def pollux_rows(loads: Sequence[float], procs: int) -> dict[str, list[str]]:
    summary, detail, apps = [], [], []
    for load in loads:
        pollux_avg, pollux_p99, pollux_jcts = artifact(load, "pollux")
        results: dict[str, Result] = {}
        seconds: dict[str, float] = {}
        for label, config in RUNS:
            started = time.perf_counter()
            results[label] = simulate_folder(POLLUX / POLLUX_LOADS[load], config, procs=procs)
            seconds[label] = time.perf_counter() - started
            done = results[label]
            print(
                f"  load {load:g} {label}: {hours(done.avg_jct)} h, p99 "
                f"{hours(done.p99_jct, 2)} h ({seconds[label]:.0f} s)",
                flush=True,
            )
        best = min(GOODPUT, key=lambda label: results[label].avg_jct)
        ours = results[best]
        ratio = ours.avg_jct / pollux_avg
        fixed = min(
            (label for label in results if label.startswith("fairshare")),
            key=lambda label: results[label].avg_jct,
        )
        summary.append(
            f"| {load:g} | {hours(pollux_avg)} | {hours(pollux_p99, 2)} | {best} | "
            f"{hours(ours.avg_jct)} | {ratio:.2f}{' ✓' if ratio <= GOAL_AVG else ' ✗'} | "
            f"{hours(ours.p99_jct, 2)}{' ✓' if ours.p99_jct <= pollux_p99 else ' ✗'} | "
            f"{fixed} {hours(results[fixed].avg_jct)} ({results[fixed].avg_jct / pollux_avg:.2f})"
            f" | {hours(results[fixed].p99_jct, 2)} |"
        )
        for label, result in results.items():
            outcomes = [o for w in result.outcomes for o in w]
            moves = sum(o.moves for o in outcomes) / len(outcomes)
            resizes = sum(o.resizes for o in outcomes) / len(outcomes)
            detail.append(
                f"| {load:g} | {label} | {hours(result.avg_jct)} | {hours(result.p99_jct, 2)} | "
                f"{result.avg_jct / pollux_avg:.2f} | {hours(result.makespan, 2)} | "
                f"{resizes:.1f} | {moves:.2f} | {seconds[label]:.0f} |"
            )
        mine, theirs = per_app(our_jcts(ours)), per_app(pollux_jcts)
        counts: dict[str, int] = {}
        for job in our_jcts(ours):
            counts[app_of(job)] = counts.get(app_of(job), 0) + 1
        for app in sorted(mine, key=lambda a: -counts[a]):
            apps.append(
                f"| {load:g} | {app} | {counts[app]} | {hours(mine[app], 2)} | "
                f"{hours(theirs[app], 2)} | {mine[app] / theirs[app]:.2f} |"
            )
    return {"summary": summary, "detail": detail, "apps": apps}


def pollux_section(parts: dict[str, list[str]], loads: Sequence[float], procs: int) -> list[str]:
    return [
        "## The Pollux artifact's workloads (OSDI'21): 64 GPUs, 16 nodes x 4",
        "",
        f"Inputs: `{POLLUX}`: the 8 workloads per load, the measured throughput per "
        "placement and local batch, the gradient statistics per epoch and batch, and "
        "Pollux's own results (`results-jobload/pollux-<load>/summary.json`). Our simulator "
        "(`python -m scheduler.simulate pollux --policy goodput [--moves]`, "
        "`scheduler/simulate/cluster.py`) steps the cluster as the artifact does (a "
        "decision every 60 s, 30 s to start or resume a job) with EDT's resize instead of "
        f"a checkpoint-restart for every other change: {RESIZE:g} s, the top of EDT's "
        "measured 0.1-0.5 s (bench/results/engine-resize.md). Under *goodput* every job "
        "but ncf's picks its batch (from the application's smallest validated batch to its "
        "largest) with its GPUs, as Pollux's do; the policy sees the application's "
        "throughput model fitted to all of its measured placements (Pollux fits its own "
        "online, from the placements a job has run on) and the noise scale the job "
        "measures at its batch in its epoch; the batch changes at no cost. *moves*: learners "
        "of a job spread over more nodes than it needs are moved onto fewer where that "
        "pays back within one interval (module docstring of `cluster.py`). *on events*: "
        "a decision also at each arrival and completion, as EDT decides (`--events`), where "
        "Pollux waits for its next 60 s step. The goodput policy weighs each job by its "
        "remaining work and progress (`scheduler/policies/goodput.py`, `URGENCY`), the "
        "remaining work known from the job's epochs and its measured rate. "
        f"Loads {', '.join(f'{load:g}' for load in loads)}, 8 workloads each, every job, "
        f"on {procs} processes.",
        "",
        f"Goals: average JCT ≤ {GOAL_AVG}x Pollux's, p99 ≤ Pollux's.",
        "",
        "| load | Pollux avg h | Pollux p99 h | EDT goodput, best of | avg h | vs Pollux | "
        "p99 h | best fixed-batch policy, avg h (vs Pollux) | its p99 h |",
        "|---:|---:|---:|---|---:|---|---|---|---:|",
        *parts["summary"],
        "",
        "Every run (resizes and moves: per job):",
        "",
        "| load | policy | avg JCT h | p99 JCT h | avg vs Pollux | makespan h | resizes | "
        "moves | sim s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *parts["detail"],
        "",
        "Per application, the better goodput run against Pollux (avg JCT h over the 8 workloads):",
        "",
        "| load | application | jobs | EDT goodput | Pollux | EDT / Pollux |",
        "|---:|---|---:|---:|---:|---:|",
        *parts["apps"],
    ]


# The Philly week --------------------------------------------------------------------------


def philly_rows(seeds: int) -> tuple[list[str], str]:
    fits = usable(load_fits(TRACE.parent / "scalability"))
    profiles = trace_profiles(load_applications(POLLUX / "traces"), fits)
    described = ", ".join(
        f"{fit.app} batch {p.batch} in {p.low}-{p.high}, noise scale {p.gns:,.0f}"
        for fit, p in zip(fits, profiles, strict=True)
    )
    trace = read_trace(TRACE)
    start = median_week(trace)
    week = window(trace, start, WEEK)
    serials = [f.serial for f in fits]
    rows = []
    for gpus in PHILLY_SLOTS:  # the week replayed whole: an overload at both sizes
        jobs = jobs_from_trace(week, gpus, serials, profiles)
        runs = {p: run(jobs, Config(gpus, p, slots_per_host=PER_HOST)) for p in PHILLY_POLICIES}
        base = runs["fairshare-speedup"].summary.avg_jct
        for policy, result in runs.items():
            m = result.summary
            rows.append(
                f"| {gpus} | whole week | {len(week):,} | "
                f"{offered_load(week, gpus, WEEK * 86400):.2f} | {policy} | "
                f"{hours(m.avg_jct, 2)} | {hours(m.median_jct, 2)} | {hours(m.p99_jct, 2)} | "
                f"{m.avg_jct / base:.2f} | {m.utilisation:.1%} | {result.seconds:.0f} |"
            )
            print(rows[-1], flush=True)
    for gpus in PHILLY_SLOTS:
        drawn = [sample_load(week, gpus, WEEK * 86400, 1.0, seed) for seed in range(seeds)]
        load = statistics.fmean(offered_load(t, gpus, WEEK * 86400) for t in drawn)
        runs = {
            policy: [
                run(jobs_from_trace(t, gpus, serials, profiles),
                    Config(gpus, policy, slots_per_host=PER_HOST))
                for t in drawn
            ]
            for policy in PHILLY_POLICIES
        }  # fmt: skip
        base = statistics.fmean(r.summary.avg_jct for r in runs["fairshare-speedup"])
        for policy, results in runs.items():
            avg = statistics.fmean(r.summary.avg_jct for r in results)
            rows.append(
                f"| {gpus} | load 1.0, {seeds} seeds | "
                f"{statistics.fmean(len(t) for t in drawn):,.0f} | {load:.3f} | "
                f"{policy} | {hours(avg, 2)} | "
                f"{hours(statistics.fmean(r.summary.median_jct for r in results), 2)} | "
                f"{hours(statistics.fmean(r.summary.p99_jct for r in results), 2)} | "
                f"{avg / base:.2f} | {statistics.fmean(r.summary.utilisation for r in results):.1%}"
                f" | {sum(r.seconds for r in results):.0f} |"
            )
            print(rows[-1], flush=True)
    notes = (
        f"The median-demand week from day {start:g}, replayed whole (an overload of either "
        f"size: the queue does not drain within the week), and per seed (0..{seeds - 1}) a "
        "workload sampled from it at load 1.0 of the cluster "
        "(`scheduler.simulate.trace.sample_load`; means over the seeds). The "
        "trace has no batch sizes, so every job is given the goodput profile of the Pollux "
        "application it is assigned (by row, as the Amdahl fits are handed out): "
        f"{described} (`scheduler.simulate.pollux.trace_profiles`: the fitted throughput "
        "model, the validated batches, the median noise scale over the epochs at that "
        "batch, held constant). A job's work is its trace duration on its GPUs at that "
        "batch; its max is its GPUs (at most one per sample). Every policy runs the same "
        "profiled jobs: the fixed-batch ones at the user's batch (fairshare-speedup sees "
        "the profile's curve at it), goodput at the batch it picks. Resize 1 s, restart "
        "30 s, hosts of 8."
    )
    return rows, notes


def philly_section(rows: list[str], notes: str) -> list[str]:
    return [
        "## The Philly week with goodput profiles",
        "",
        notes,
        "",
        "| slots | workload | jobs | offered load | policy | avg JCT h | median JCT h | "
        "p99 JCT h | avg vs fairshare-speedup | util | sim s (all seeds) |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


# The report -------------------------------------------------------------------------------

# Single runs made while the policy was developed (load 1, the 8 workloads, goodput at a
# 0.5 s resize, 60 s decisions unless said), kept here as written, not re-run by this script.
TRIED_ROWS = [
    ("goodput, additive throughput model (no overlap)", "0.746", "0.98", "13.14"),
    ("the same, fairness exponent p = 1 / 0 / -3 (instead of -1)",
     "0.764 / 0.751 / 0.746", "1.00 / 0.98 / 0.98", "12.20 / 12.86 / 13.43"),
    ("the same, weights x 2^-class of attained service (Tiresias' classes)",
     "0.766", "1.00", "15.34"),
    ("the same, weights x 0.5^-class (favouring long jobs)", "1.022", "1.34", "10.00"),
    ("the same, the policy given the true goodput (artifact data), not the fitted model",
     "0.705", "0.92", "not measured"),
    ("goodput, Pollux's overlap fitted (the model now used)", "0.739", "0.97", "12.97"),
    ("+ learner moves", "0.725", "0.95", "12.87"),
    ("+ learner moves, decisions every 20 s", "0.706", "0.92", "12.87"),
    ("+ learner moves, weights x (remaining work / 1 h)^-0.5, the remaining work from the "
     "job's progress (epochs done) and its attained service", "0.694", "0.91", "13.68"),
    # Issue 41 (2026-11-29), goodput + moves, decisions also at arrivals and completions:
    ("2026-11-29: + decisions on events", "0.706", "0.92", "12.87"),
    ("the same, weights x (remaining / 1 h)^-0.5, remaining within 1 min-10 h",
     "0.683", "0.89", "13.23"),
    ("the same, remaining within 1 min-4 h / 1 min-1 h", "0.691 / 0.702", "0.90 / 0.92",
     "13.08 / 13.00"),
    ("the same, uncapped above (1 min-1000 h)", "0.658", "0.86", "13.58"),
    ("the same, x^-0.25, 1 min-10 h", "0.675", "0.88", "13.25"),
    ("x^-0.5 (1 min-10 h) x ((attained + remaining) / remaining)^0.5", "0.671", "0.88",
     "13.30"),
    ("x^-0.25 and progress^0.5 / x^-0.01 and progress^0.5 / x^0 and progress^2",
     "0.675 / 0.685 / 0.693", "0.88 / 0.90 / 0.91", "13.05 / 12.71 / 12.46"),
    ("x^-0.01 and progress^1", "0.677", "0.89", "12.64"),
    ("x^-0.1 and progress^1 (the policy now)", "0.673", "0.88", "12.74"),
]  # fmt: skip
TRIED = "\n".join(
    [
        "## What was tried on the way (development runs, not re-run by this script)",
        "",
        "Load 1, all 8 workloads, one run each (2026-11-26, 2 cores), goodput at a 0.5 s "
        "resize and 60 s decisions unless said; Pollux: 0.764 h average, 13.02 h p99.",
        "",
        "| change | avg JCT h | vs Pollux | p99 h |",
        "|---|---:|---:|---:|",
        *(f"| {' | '.join(row)} |" for row in TRIED_ROWS),
        "",
        "Reading: the objective's exponent and service-based weights move the average little "
        "or trade it for the p99 (the long imagenet jobs are a third of the average JCT and "
        "all of the p99); what helps is each job's goodput being known better (the fitted "
        "model's error costs about 5 %), learners kept on few nodes, and deciding sooner. "
        "None of these, alone or together, reached 0.85x at loads 1-2 without a p99 above "
        "Pollux's. Deciding on events (issue 41) gained what deciding every 20 s did; a "
        "weight by remaining work alone trades the p99 for the average as before, while a "
        "weight by progress ((attained + remaining) / remaining: a job near its end, long "
        "or short, goes first) lowers both.",
        "",
    ]
)


def report(sections: dict[str, list[str]], notes: dict[str, str]) -> str:
    text = scheduler_report(sections, notes, "The goodput policy: benchmarks",
                            "bench/bench_goodput.py", RESULTS, SECTIONS)  # fmt: skip
    return "\n".join([text, TRIED])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS)
    p.add_argument("--loads", type=float, nargs="+", default=LOADS, choices=LOADS)
    p.add_argument("--seeds", type=int, default=2, help="Philly samples per cluster size")
    p.add_argument("--procs", type=int, default=2, help="processes for the Pollux workloads")
    args = p.parse_args(argv)
    if args.seeds < 1 or not 1 <= args.procs <= 2:
        p.error("--seeds must be at least 1 and --procs 1 or 2")
    notes = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "start": machine()}
    sections: dict[str, list[str]] = {}
    if "decisions" in args.only:
        sections["decisions"] = decision_section(decision_rows())
    if "pollux" in args.only:
        parts = pollux_rows(args.loads, args.procs)
        sections["pollux"] = pollux_section(parts, args.loads, args.procs)
    if "philly" in args.only:
        sections["philly"] = philly_section(*philly_rows(args.seeds))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(report(sections, notes))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
