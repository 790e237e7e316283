"""What a simulation is judged by."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.simulate.engine import JobResult


@dataclass(frozen=True, slots=True)
class Summary:
    """Times in seconds. ``utilisation``: slot-seconds held / (slots * makespan).
    ``jain``: Jain's index over each job's isolated time / JCT (1 = every job slowed down
    alike by sharing). ``reallocations``: slot-count changes after a job first started,
    per job."""

    jobs: int
    avg_jct: float
    median_jct: float
    p99_jct: float
    makespan: float
    utilisation: float
    jain: float
    reallocations: float


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in (0, 1]) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: (Σx)² / (n·Σx²), from 1/n (one gets all) to 1 (all equal)."""
    squares = sum(x * x for x in values)
    return sum(values) ** 2 / (len(values) * squares) if squares else 1.0


def summarise(results: Sequence[JobResult], gpus: int) -> Summary:
    if not results:
        raise ValueError("no jobs were simulated")
    jcts = [result.jct for result in results]
    makespan = max(r.finished for r in results) - min(r.job.submitted for r in results)
    held = sum(result.attained for result in results)
    return Summary(
        jobs=len(results),
        avg_jct=statistics.fmean(jcts),
        median_jct=statistics.median(jcts),
        p99_jct=percentile(jcts, 0.99),
        makespan=makespan,
        utilisation=held / (gpus * makespan) if makespan > 0 else 0.0,
        jain=jain([r.job.isolated / r.jct if r.jct > 0 else 1.0 for r in results]),
        reallocations=sum(r.reallocations for r in results) / len(results),
    )
