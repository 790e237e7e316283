"""A trace-driven simulator that runs the live policy code (``python -m scheduler.simulate``).

A trace job asks ``max_workers = num_gpus`` (at most the cluster's size); its work is its
``duration`` at that size; on n slots it runs at the speed of :mod:`.speedup`'s model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.simulate.engine import (
    Config,
    GoodputProfile,
    JobResult,
    Observer,
    SimJob,
    Simulator,
    simulate,
)
from scheduler.simulate.metrics import Summary, summarise
from scheduler.simulate.speedup import speedup
from scheduler.simulate.trace import (
    TraceJob,
    median_week,
    offered_load,
    read_trace,
    sample_load,
    window,
)


def jobs_from_trace(
    trace: Sequence[TraceJob],
    gpus: int,
    serials: Sequence[float],
    profiles: Sequence[GoodputProfile] = (),
    per_host: int = 8,
) -> list[SimJob]:
    """Simulator jobs; job ``row`` gets the serial fraction ``serials[row % len(serials)]``,
    or with ``profiles`` the goodput profile ``profiles[row % len(profiles)]`` (its work: its
    duration at its user's batch on its GPUs, at most one per sample of that batch)."""
    jobs = []
    for job in trace:
        if profiles:
            profile = profiles[job.row % len(profiles)]
            size = min(job.num_gpus, profile.high, profile.batch)
            work = job.duration * profile.rate(size, profile.batch, per_host)
            jobs.append(SimJob(str(job.row), job.submitted, min(size, gpus), work, profile=profile))
            continue
        serial = serials[job.row % len(serials)]
        work = job.duration * speedup(serial, job.num_gpus)
        jobs.append(
            SimJob(str(job.row), job.submitted, min(job.num_gpus, gpus), work, serial, job.vc)
        )
    return jobs


@dataclass(frozen=True, slots=True)
class Run:
    summary: Summary
    results: list[JobResult]
    seconds: float  # wall-clock time the simulation took
    decisions: int


def run(jobs: Sequence[SimJob], config: Config, observer: Observer | None = None) -> Run:
    """Simulate ``jobs`` and summarise, timing the simulation itself."""
    started = time.perf_counter()
    simulator = Simulator(jobs, config, observer)
    results = simulator.run()
    seconds = time.perf_counter() - started
    return Run(summarise(results, config.gpus), results, seconds, simulator.decisions)


__all__ = [
    "Config",
    "GoodputProfile",
    "JobResult",
    "Observer",
    "Run",
    "SimJob",
    "Summary",
    "TraceJob",
    "jobs_from_trace",
    "median_week",
    "offered_load",
    "read_trace",
    "run",
    "sample_load",
    "simulate",
    "window",
]
