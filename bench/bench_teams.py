"""Teams: decision time of hierarchical fair share against today's flat fair share, and the
Philly week with its virtual clusters as teams against the kill-preemption quota baseline,
a static partition and per-job fair share.

    python bench/bench_teams.py [--trace PATH] [--loads 1.0 2.0] [--seeds 3] [--pairs 9]
                                                                    (make bench runs it)

Writes bench/results/teams.md. Goals (issue 27): a decision over 100 teams, 1,000 users,
10,000 jobs and 10,000 slots well under 100 ms (median); on the Philly week, hierarchical
fair share's average JCT <= 0.7x the kill-preemption baseline's, its share deficit <= 0.1x
the baseline's, its utilisation within 2% of per-job fair share's, Jain's index of
allocation / entitlement over teams with demand >= 0.95 while the cluster is saturated.
Issue 41: average JCT <= the baseline's at every load and seed, and no slot-hour free
while a job that fits it waits (those a limit holds out named by the limit); the
slot-hours a team holds beyond its jobs' minimums while another team's job waits are
measured beside them.
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
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from scheduler.placement import Slot, place  # noqa: E402
from scheduler.policies import RUNNING, Decision, JobView, Snapshot, Team, fairshare  # noqa: E402
from scheduler.simulate import (  # noqa: E402
    Config,
    jobs_from_trace,
    median_week,
    offered_load,
    read_trace,
    sample_load,
    window,
)
from scheduler.simulate.speedup import load_fits, usable  # noqa: E402
from scheduler.simulate.teams import (  # noqa: E402
    BASELINE,
    CHECKPOINT_EVERY,
    WEIGHTS,
    Outcome,
    goals,
    idle,
    simulate_teams,
    tables,
    vc_teams,
)
from scheduler.simulate.trace import DAY  # noqa: E402

SHARED = next(
    (p / "shared" for p in (PROJECT.parent, PROJECT.parent.parent) if (p / "shared").exists()),
    PROJECT.parent / "shared",
)
TRACE = SHARED / "traces" / "pollux" / "philly.csv"
RESULTS = PROJECT / "bench" / "results" / "teams.md"
SLOTS_PER_HOST = 8
GPUS = 64
DAYS = 7.0
LOADS = [1.0, 2.0]
SEEDS = 3
PAIRS = 9
GOAL_MS = 100.0

# Decision time ----------------------------------------------------------------------------

DEPARTMENTS, TEAMS_PER, USERS, JOBS, SLOTS = 10, 9, 1_000, 10_000, 10_000


def org(slots: int) -> tuple[Team, ...]:
    """10 departments of 9 teams each (100 teams): each team guaranteed 1/200 of the slots
    (half the cluster guaranteed), weights 1-4, the departments limited to a fifth."""
    rng = random.Random(2)
    teams = [Team(f"d{d}", limit=slots // 5) for d in range(DEPARTMENTS)]
    teams += [
        Team(f"d{d}t{t}", f"d{d}", rng.randint(1, 4), slots // 200)
        for d in range(DEPARTMENTS)
        for t in range(TEAMS_PER)
    ]
    return tuple(teams)


def team_jobs(count: int, users: int, teams: Sequence[Team], seed: int = 1) -> list[JobView]:
    """Philly-like sizes (93% one slot), priorities over 1-10000, each user in one team."""
    rng = random.Random(seed)
    sizes = [1] * 93 + [2, 2, 4, 4, 8, 8, 16]
    leaves = [team.id for team in teams if team.parent]
    jobs = []
    for i in range(count):
        user = rng.randrange(users)
        jobs.append(
            JobView(
                f"j{i}",
                rng.choice(sizes),
                float(i),
                rng.randint(1, 10_000),
                owner=f"u{user}",
                team=leaves[user % len(leaves)],
            )
        )
    return jobs


def cluster(slots: int) -> list[Slot]:
    return [
        Slot(f"h{i // SLOTS_PER_HOST}.{i % SLOTS_PER_HOST}", f"h{i // SLOTS_PER_HOST}",
             i % SLOTS_PER_HOST)
        for i in range(slots)
    ]  # fmt: skip


Decide = Callable[[Snapshot], Decision]


def held(decide: Decide, snapshot: Snapshot, slots: list[Slot]) -> tuple[Snapshot, dict]:
    """The snapshot after every job took its decided slots, and who holds which slots."""
    decision = decide(snapshot)
    members = place(slots, {}, decision.targets).members
    jobs = [
        replace(j, current=decision.targets[j.id], state=RUNNING) if decision.targets[j.id] else j
        for j in snapshot.jobs
    ]
    current = {job: list(m) for job, m in members.items() if m}
    return Snapshot(snapshot.capacity, jobs, snapshot.teams), current


Action = Callable[[], object]


def step(decide: Decide, snapshot: Snapshot, slots: list[Slot], current: dict) -> Action:
    def action() -> None:
        decision = decide(snapshot)
        place(slots, current, decision.targets)

    return action


def pairs(flat: Action, ours: Action, count: int) -> list[tuple[float, float]]:
    """(flat ms, hierarchical ms), interleaved, the order alternating from pair to pair."""
    out = []
    for index in range(count):
        timed = {}
        for name, action in (("flat", flat), ("ours", ours))[:: 1 if index % 2 else -1]:
            started = time.perf_counter()
            action()
            timed[name] = (time.perf_counter() - started) * 1000
        out.append((timed["flat"], timed["ours"]))
    return out


def decision_rows(count: int) -> list[str]:
    rows = []
    teams = org(SLOTS)
    jobs = team_jobs(JOBS, USERS, teams)
    slots = cluster(SLOTS)
    # fairshare.flat reads no teams or owners: the same snapshot is today's input.
    with_teams = plain = Snapshot(SLOTS, jobs, teams)
    ours_held, ours_current = held(fairshare.decide, with_teams, slots)
    flat_held, flat_current = held(fairshare.flat, plain, slots)
    arrival = JobView("new", 8, float(JOBS), 10_000, owner="u1", team=jobs[0].team)

    def arrive(snapshot: Snapshot) -> Snapshot:
        return Snapshot(snapshot.capacity, [*snapshot.jobs, arrival], snapshot.teams)

    groups = 4
    parts = [
        Snapshot(SLOTS // groups, jobs[g::groups], org(SLOTS // groups)) for g in range(groups)
    ]
    cases = {
        "one arrival at priority 10000, steady cluster (decide + place)": (
            step(fairshare.flat, arrive(flat_held), slots, flat_current),
            step(fairshare.decide, arrive(ours_held), slots, ours_current),
        ),
        "one arrival, the policy alone": (
            lambda: fairshare.flat(arrive(flat_held)),
            lambda: fairshare.decide(arrive(ours_held)),
        ),
        "cold start, every job new (decide + place)": (
            step(fairshare.flat, plain, slots, {}),
            step(fairshare.decide, with_teams, slots, {}),
        ),
        f"in {groups} groups of {SLOTS // groups:,} slots, cold, the policy alone (sum)": (
            lambda: [fairshare.flat(p) for p in parts],
            lambda: [fairshare.decide(p) for p in parts],
        ),
    }
    for name, (flat, ours) in cases.items():
        measured = pairs(flat, ours, count)
        flat_ms = statistics.median(f for f, _ in measured)
        ours_ms = statistics.median(o for _, o in measured)
        ratios = [o / f for f, o in measured]
        mark = "✓" if ours_ms <= GOAL_MS else "✗"
        rows.append(
            f"| {name} | {count} | {flat_ms:.1f} | {ours_ms:.1f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"≤ {GOAL_MS:g} {mark} |"
        )
        print(rows[-1], flush=True)
    return rows


# The Philly week with VCs as teams --------------------------------------------------------


def philly(trace_path: Path, loads: Sequence[float], seeds: int, weights: str) -> list[str]:
    fits = usable(load_fits(trace_path.parent / "scalability"))
    serials = [fit.serial for fit in fits]
    model = ", ".join(f"{fit.app} s={fit.serial:.3f}" for fit in fits)
    everything = read_trace(trace_path)
    start = median_week(everything, DAYS)
    week = window(everything, start, DAYS)
    base = Config(GPUS, resize_pause=1.0, restart_pause=30.0, checkpoint_every=CHECKPOINT_EVERY)
    cells: list[tuple[float, list[dict[str, Outcome]], list[int], list[float], str]] = []
    for load in loads:
        runs, counts, rhos, detail = [], [], [], ""
        for seed in range(seeds):
            sample = sample_load(week, GPUS, DAYS * DAY, load, seed)
            teams = vc_teams(sample, GPUS, weights)
            outcomes = simulate_teams(jobs_from_trace(sample, GPUS, serials), teams, base)
            runs.append(outcomes)
            counts.append(len(sample))
            rhos.append(offered_load(sample, GPUS, DAYS * DAY))
            line = " ".join(
                f"{v} {o.summary.avg_jct / 3600:.2f} h ({o.seconds:.0f} s)"
                for v, o in outcomes.items()
            )
            print(f"  load {load:g} seed {seed}: {len(sample)} jobs; {line}", flush=True)
            if seed == 0:
                guarantees = ", ".join(f"{t.id} {t.guarantee}" for t in teams)
                detail = "\n".join(
                    [
                        f"### Per team, load {load:g}, seed 0 ({len(sample):,} jobs; "
                        f"guarantees {guarantees})",
                        "",
                        *tables(outcomes, teams),
                    ]
                )
        cells.append((load, runs, counts, rhos, detail))
    mean = statistics.fmean
    overall = [
        "| load | jobs | sampled load | variant | avg JCT h | p99 JCT h | util | share deficit "
        "slot-h | Jain (saturated) | saturated h | runs stopped | work lost slot-h | idle "
        "while waiting slot-h | beyond min while another team waits slot-h | sim s |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    seed_rows = [
        "| load | seed | jobs | variant | avg JCT h | vs quota-preempt | share deficit slot-h | "
        "Jain (saturated) | idle while waiting slot-h |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    goal_rows = [
        "| load | goal (hierarchical) | mean | min-max over seeds | goal | met (mean) |",
        "|---:|---|---:|---|---|---|",
    ]
    details = []
    for load, runs, counts, rhos, detail in cells:
        for variant in runs[0]:
            o = [r[variant] for r in runs]
            overall.append(
                f"| {load:g} | {mean(counts):,.0f} | {mean(rhos):.3f} | {variant} | "
                f"{mean(x.summary.avg_jct for x in o) / 3600:.2f} | "
                f"{mean(x.summary.p99_jct for x in o) / 3600:.2f} | "
                f"{mean(x.summary.utilisation for x in o):.1%} | "
                f"{mean(x.deficit_hours for x in o):,.1f} | {mean(x.jain for x in o):.3f} | "
                f"{mean(x.saturated_hours for x in o):,.1f} | "
                f"{mean(x.preemptions for x in o):,.1f} | {mean(x.lost_hours for x in o):,.1f} | "
                f"{mean(x.idle_hours for x in o):,.1f} | {mean(x.beyond_hours for x in o):,.1f} | "
                f"{sum(x.seconds for x in o):.1f} |"
            )
        for seed, (run_, count) in enumerate(zip(runs, counts, strict=True)):
            kill = run_[BASELINE].summary.avg_jct
            for variant in ("hierarchical", BASELINE):
                x = run_[variant]
                seed_rows.append(
                    f"| {load:g} | {seed} | {count:,} | {variant} | "
                    f"{x.summary.avg_jct / 3600:.2f} | {x.summary.avg_jct / kill:.3f} | "
                    f"{x.deficit_hours:,.1f} | {x.jain:.3f} | {idle(x)} |"
                )
        per_seed = [goals(r) for r in runs]
        for index, (what, _, goal, _) in enumerate(per_seed[0]):
            values = [g[index][1] for g in per_seed]
            average = mean(values)
            bound = float(goal.split()[-1])
            met = average <= bound if goal.startswith("≤") else average >= bound
            goal_rows.append(
                f"| {load:g} | {what} | {average:.3f} | {min(values):.3f}-{max(values):.3f} | "
                f"{goal} | {'✓' if met else '✗'} |"
            )
        details += ["", detail]
    return [
        f"## The Philly week with its virtual clusters as teams ({GPUS} slots)",
        "",
        f"Trace `{trace_path}`, the full week of median GPU demand (from day {start:g}, "
        f"{len(week):,} jobs). Replayed whole, that week is "
        f"{offered_load(week, GPUS, DAYS * DAY):.1f}x "
        f"what {GPUS} slots can do (the queue never drains and the run takes tens of minutes "
        "a variant), so the week is **subsampled**: load-matched workloads drawn from it "
        "(`scheduler.simulate.trace.sample_load`: jobs drawn uniformly, each keeping its "
        "submission time, size, duration and VC) at the offered load given per seed. Means over "
        f"seeds 0-{seeds - 1}.",
        "",
        "Teams: one per VC in the sample, guarantee in proportion to the VC's GPU-time in it "
        f"(1 slot each, the other {GPUS} - VCs by largest remainder: the guarantees add up to "
        f"the cluster), weights {'1' if weights == 'one' else '= guarantee'} (`--weights "
        f"{weights}`), no limits, one user per team "
        "(`scheduler.simulate.teams.vc_teams`). Jobs: max_workers = num_gpus, min 1, "
        f"priority 5000; speed: Amdahl fitted from the Pollux scalability data ({model}); "
        "a resize pauses a job 1 s, a restart 30 s. Variants: *hierarchical* (fairshare "
        "with the teams; a job that loses all its slots is suspended after a checkpoint, "
        "nothing lost), *quota-preempt* (Kueue-style quotas: nominal quota = guarantee, "
        "borrowing, rigid gangs, a team under its quota kill-preempts borrowing gangs, "
        f"which restart from their last checkpoint, one every {CHECKPOINT_EVERY / 60:g} "
        "minutes of running: the work since is lost), *static* (fairshare with every "
        "team's limit at its guarantee), *fairshare-flat* (today's per-job fair share, "
        "teams ignored).",
        "",
        "Share deficit: slot-hours a team with demand held fewer than the whole slots of "
        "its entitlement, ⌊min(demand, entitlement)⌋, its entitlement being hierarchical "
        "fair share of the cluster for what its active jobs ask (guarantee up to demand, "
        "the rest by weight), whatever the variant. Jain: Jain's index of slots held / "
        "entitlement over the teams with demand, averaged over the time the active jobs "
        "ask for at least every slot (*saturated h*). Utilisation: slot-time held / "
        "(slots x makespan). *Runs stopped*: times a running job lost all its slots "
        "(suspended after a checkpoint, or killed under quota-preempt). *Idle while "
        "waiting*: slot-hours free while a waiting job fits them (its minimum, 1, in the "
        "free slots, under its team's limit); those only a limit kept from a waiting job "
        "follow in brackets, by the limiting team. *Beyond min while another team waits*: "
        "slot-hours a team held beyond its running jobs' minimums while a job of another "
        "team waited. Fair share (hierarchical and flat) admits a user's jobs of equal "
        "priority by remaining work, the least first: the simulator gives each job its "
        "remaining work; quota-preempt keeps its (priority, submission) order.",
        "",
        *overall,
        "",
        f"Goals, per seed against {BASELINE} (and utilisation against fairshare-flat), "
        "judged on the mean:",
        "",
        *goal_rows,
        "",
        "Per seed, hierarchical against quota-preempt:",
        "",
        *seed_rows,
        *details,
    ]


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--loads", type=float, nargs="+", default=LOADS)
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--weights", choices=WEIGHTS, default="one", help="the VCs' weights")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.seeds < 1 or args.pairs < 1 or min(args.loads) <= 0:
        parser.error("--seeds and --pairs must be at least 1, --loads positive")
    started, at_start = time.perf_counter(), machine()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Teams: hierarchical fair share",
        "",
        f"Run {date} with `python bench/bench_teams.py`; machine at start: {at_start}.",
        "",
        f"## Decision time: {DEPARTMENTS * (TEAMS_PER + 1)} teams, {USERS:,} users, "
        f"{JOBS:,} jobs, {SLOTS:,} slots",
        "",
        f"{DEPARTMENTS} departments (each limited to a fifth of the slots) of {TEAMS_PER} "
        "teams (each guaranteed 1/200 of the slots, weights 1-4); each user in one team; "
        "job sizes like Philly's (93% one slot, the rest 2-16), priorities uniform over "
        "1-10000. *Flat*: today's fairshare over the same jobs (teams and owners ignored; "
        "`fairshare.flat`), from its own steady state; *hierarchical*: `fairshare.decide` "
        f"with the teams. {args.pairs} interleaved pairs, the order alternating; wall ms. "
        "Placement: `scheduler.placement.place` on hosts of 8 slots.",
        "",
        "| situation | pairs | flat median ms | hierarchical median ms | "
        "hierarchical / flat, median (min-max) | goal (hierarchical median) |",
        "|---|---:|---:|---:|---|---|",
        *decision_rows(args.pairs),
        "",
    ]
    if args.trace.exists():
        lines += philly(args.trace, args.loads, args.seeds, args.weights)
    else:
        print(f"no trace at {args.trace}: the Philly part skipped", file=sys.stderr)
        lines.append(f"No trace at `{args.trace}`: the Philly part was skipped.")
    lines += [
        "",
        f"Finished in {time.perf_counter() - started:.0f} s; machine at the end: {machine()}.",
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
