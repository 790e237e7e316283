"""Start estimates against the simulator's own future: how far off is "when will it start"?

    python bench/bench_estimates.py [--trace PATH] [--samples N]   (make bench runs it)

On the median week of the Philly trace, load-matched to 64 slots at offered loads 1 and 2
(scheduler.simulate.trace.sample_load, seed 0), fairshare runs the week. Right after the
decision that follows a job's submission, its start is projected as EDT projects it live
(scheduler/simulate/forecast.py: the simulator run forward from that moment, the same
policy code, every active job's slots, attained service and remaining work, no future
arrivals), and compared with when it actually started in the full run. Jobs that started at
once are counted apart (their estimate, "now", is exact by construction); of those that
waited, up to N (default 150) spread over the week are projected. Goal (issue 40): median
absolute error of the start estimate <= 25 % of the actual wait, or <= 2 min.
Table: bench/results/estimates.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench.bench_scheduler import SHARED, WEEK, load_workload  # noqa: E402
from scheduler.simulate import Config, SimJob, jobs_from_trace, sample_load  # noqa: E402
from scheduler.simulate import window as trace_window  # noqa: E402
from scheduler.simulate.engine import Simulator  # noqa: E402
from scheduler.simulate.forecast import Present, ranged  # noqa: E402
from scheduler.simulate.trace import median_week  # noqa: E402

TRACE = SHARED / "traces" / "pollux" / "philly.csv"
RESULTS = PROJECT / "bench" / "results" / "estimates.md"
SLOTS, LOADS, POLICY = 64, (1.0, 2.0), "fairshare"


@dataclass(frozen=True)
class Estimate:
    job: str
    submitted: float
    early: float
    likely: float
    late: float


def presents(sim: Simulator, now: float, guessed: bool) -> list[Present]:
    """Every active job as it stands at ``now``: its work left, slots and service. With
    ``guessed``, as the live projection knows it: a job that never ran has no measured pace,
    so its work is taken as the median of the jobs finished so far."""
    done = [r.job.work for r in sim.results]
    guess = statistics.median(done) if done else 3600.0
    out = []
    for state in sim.active.values():
        left = guess if guessed and not state.started else state.remaining
        if state.slots:
            ran = now - max(state.since, state.resume_at)
            left -= sim._speed(state) * max(0.0, ran)
        attained = state.attained + state.slots * (now - state.since)
        job = replace(state.job, work=max(left, 1e-6))
        out.append(Present(job, state.slots, attained))
    return out


def measure(jobs: list[SimJob], samples: int,
            guessed: bool) -> tuple[list[Estimate], dict[str, float], int]:  # fmt: skip
    """The full run with estimates taken after each sampled submission's decision; the
    actual starts; how many jobs started at once."""
    config = Config(SLOTS, POLICY)
    starts: dict[str, float] = {}
    waiting: list[tuple[float, str]] = []

    def seen(now: float, held: list[tuple[SimJob, int]]) -> None:
        for job, slots in held:
            if slots and job.id not in starts:
                starts[job.id] = now
            elif not slots and job.submitted == now:
                waiting.append((now, job.id))

    sim = Simulator(jobs, config, seen)
    sim.run()
    chosen = set(waiting[:: max(1, len(waiting) // samples)][:samples])
    estimates: list[Estimate] = []

    def estimate(now: float, held: list[tuple[SimJob, int]]) -> None:
        for job, slots in held:
            if not slots and (now, job.id) in chosen:
                got = ranged(presents(again, now, guessed), config, now, wanted=[job.id])[job.id]
                times = [p.start for p in got]
                if all(t is not None for t in times):
                    early, likely, late = (float(t) for t in times)  # type: ignore[arg-type]
                    estimates.append(Estimate(job.id, now, early, likely, late))

    again = Simulator(jobs, config, estimate)
    again.run()
    at_once = len(jobs) - len({job for _, job in waiting})
    return estimates, starts, at_once


def rows(load: float, jobs: list[SimJob], samples: int, guessed: bool) -> str:
    began = time.perf_counter()
    estimates, starts, at_once = measure(jobs, samples, guessed)
    waits = [starts[e.job] - e.submitted for e in estimates]
    errors = [abs(e.likely - w) for e, w in zip(estimates, waits, strict=True)]
    within = sum(e.early <= w <= e.late for e, w in zip(estimates, waits, strict=True))
    good = sum(err <= max(0.25 * w, 120) for err, w in zip(errors, waits, strict=True))
    med_err, med_wait = statistics.median(errors), statistics.median(waits)
    goal = med_err <= max(0.25 * med_wait, 120)
    took = time.perf_counter() - began
    print(f"load {load:g}: {len(estimates)} estimates, median error {med_err:.0f} s, "
          f"median wait {med_wait:.0f} s, {took:.0f} s", flush=True)  # fmt: skip
    work = "guessed where never run" if guessed else "exact"
    p90 = statistics.quantiles(errors, n=10)[-1] if len(errors) > 1 else errors[0]
    cells = [f"{load:g}", work, f"{len(jobs):,}", f"{at_once:,}", str(len(estimates)),
             f"{med_wait / 60:.1f}", f"{med_err / 60:.1f}", f"{p90 / 60:.1f}",
             f"{med_err / med_wait:.0%}", f"{good / len(errors):.0%}",
             f"{within / len(errors):.0%}", "✓" if goal else "✗"]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--samples", type=int, default=150)
    args = parser.parse_args()
    workload = load_workload(args.trace)
    start = median_week(workload.trace)
    week = trace_window(workload.trace, start, WEEK)
    table = []
    for load in LOADS:
        sampled = sample_load(week, SLOTS, WEEK * 86400, load, seed=0)
        jobs = jobs_from_trace(sampled, SLOTS, workload.serials)
        table += [rows(load, jobs, args.samples, guessed) for guessed in (False, True)]
    RESULTS.write_text("\n".join([
        "# Start estimates (bench/bench_estimates.py)",
        "",
        f"Philly trace, the median week (day {start:g}), load-matched to {SLOTS} slots "
        f"(seed 0), {POLICY}. Each estimate is taken right after the decision that follows "
        "a job's submission, by the simulator run forward from that moment with no future "
        "arrivals (scheduler/simulate/forecast.py, as the live projection); its range scales "
        "every job's remaining work by 0.8 and 1.25. Only jobs that waited are estimated "
        "(one that starts at once is told \"now\", exactly). Error: |estimated start - "
        "actual start|. Goal: median error <= 25 % of the median actual wait, or <= 2 min.",
        "",
        "| load | remaining work | jobs | started at once | estimated (waited) | "
        "median wait (min) | median error (min) | p90 error (min) | error / wait | "
        "within max(25 %, 2 min) | actual in range | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *table,
        "",
        "Remaining work *exact*: every active job's as the simulator holds it; the error is "
        "then only what the projection cannot know, the jobs submitted after it (under "
        "fairshare a later job is admitted after the earlier ones of its priority, and a full "
        "cluster gives each admitted job its minimum, so later arrivals rarely move a wait). "
        "*Guessed where never run*: as live, where a job that has not run yet has no "
        "measured pace: its work is taken as the median of the jobs finished so far.",
        "",
    ]))  # fmt: skip
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
