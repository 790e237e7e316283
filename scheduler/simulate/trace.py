"""Trace jobs: the Philly trace as prepared by the Pollux artifact, or any CSV like it.

Columns used: ``timestamp`` (submission, ``YYYY-MM-DD HH:MM:SS``), ``duration`` (seconds,
as run on ``num_gpus``) and ``num_gpus``; ``cluster`` (the job's virtual cluster) where there
is one. Rows need not be sorted.

:func:`window` cuts the trace by submission day; :func:`sample_load` draws from such a window
a workload whose offered load matches a cluster of a given size (see there).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job: ``submitted`` in seconds from the start of the window, ``duration`` in
    seconds on ``num_gpus`` slots; ``row`` its row in the trace (0-based, header excluded);
    ``vc`` its virtual cluster ("" where the trace has none)."""

    row: int
    submitted: float
    duration: float
    num_gpus: int
    vc: str = ""


def read_trace(path: Path) -> list[TraceJob]:
    """Every row, submission times in seconds since the trace's first submission."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # Naive times read as UTC: a local clock's daylight-saving jump must not move jobs.
    stamps = [_seconds(row["timestamp"]) for row in rows]
    start = min(stamps, default=0.0)
    jobs = [
        TraceJob(
            index,
            stamp - start,
            float(row["duration"]),
            int(row["num_gpus"]),
            row.get("cluster") or "",
        )
        for index, (row, stamp) in enumerate(zip(rows, stamps, strict=True))
    ]
    return sorted(jobs, key=lambda job: (job.submitted, job.row))


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


def window(
    jobs: Sequence[TraceJob],
    start_day: float = 0.0,
    days: float | None = None,
    limit: int | None = None,
) -> list[TraceJob]:
    """Jobs submitted in ``[start_day, start_day + days)`` (days from the trace's first
    submission), the first ``limit`` of them, with times shifted to start at the window."""
    begin = start_day * DAY
    end = float("inf") if days is None else begin + days * DAY
    chosen = [job for job in jobs if begin <= job.submitted < end][:limit]
    return [TraceJob(j.row, j.submitted - begin, j.duration, j.num_gpus, j.vc) for j in chosen]


def median_week(jobs: Sequence[TraceJob], days: float = 7.0) -> float:
    """The start day of the full ``days``-long window (counted from day 0) whose GPU-time is
    the median of all full windows'."""
    last = max(job.submitted for job in jobs) / DAY
    starts = [days * k for k in range(int(last // days))]
    if not starts:
        return 0.0
    demand = {start: sum(map(gpu_time, window(jobs, start, days))) for start in starts}
    return sorted(starts, key=lambda start: demand[start])[len(starts) // 2]


def gpu_time(job: TraceJob) -> float:
    """Slot-seconds the job asks for: its ``duration`` on its ``num_gpus``."""
    return job.duration * job.num_gpus


def offered_load(jobs: Sequence[TraceJob], slots: int, seconds: float) -> float:
    """rho = Σ gpu_time / (slots · seconds): the work submitted over a window of ``seconds``
    as a fraction of what ``slots`` slots can do in that time (1.0: exactly enough)."""
    return sum(gpu_time(job) for job in jobs) / (slots * seconds)


def sample_load(
    jobs: Sequence[TraceJob],
    slots: int,
    seconds: float,
    load: float = 1.0,
    seed: int = 0,
    tolerance: float = 0.01,
) -> list[TraceJob]:
    """A load-matched workload: jobs drawn from ``jobs`` (a window of ``seconds``) so that
    their :func:`offered_load` on ``slots`` slots is ``load`` (rho, default 1.0).

    Why. A window of a trace is sized for the cluster it came from: a busy week of Philly asks
    for the GPU-time of 250-700 GPUs kept busy all week, so replayed on 64 slots it is 4-11
    times more work than the cluster can do, the queue never drains and every policy mostly
    measures queueing.
    Scheduler studies instead sample, from the trace, workloads of a load matched to the
    simulated cluster. This follows the Pollux artifact (Qiao et al., OSDI'21;
    petuum/adaptdl, branch osdi21-artifact, ``simulator/workload.py``): draw jobs uniformly
    without replacement and keep each one's submission time, duration and GPU count, so the
    arrival pattern (daily cycle, bursts) and the size mix are the trace's own; Pollux fixes
    the number of jobs (160 in 8 hours for 64 GPUs at "1.0x load"), here the number is
    whatever reaches the target GPU-time, which makes the load explicit and comparable across
    cluster sizes. Unlike Pollux, no job is filtered out by duration or size.

    How, deterministically for a given ``seed``:

    1. shuffle the jobs with ``random.Random(seed)`` (a uniform random order);
    2. walk that order with a budget of ``load · slots · seconds`` slot-seconds, taking every
       job whose gpu_time still fits in what is left of the budget (a job bigger than what is
       left is passed over, not taken: on a heavy-tailed trace one job can be a sixth of a
       week of 64 slots, and stopping at or just past the budget would miss the target by
       that much);
    3. stop once at most ``tolerance`` of the budget is left (or the jobs run out);
    4. return the taken jobs in submission order (as in ``jobs``), times unchanged.

    The sampled load is then within ``tolerance`` below ``load`` whenever the window holds
    enough small jobs, which a trace window does by far. The only departure from a uniform
    sample is step 2 near the end of the walk: a job is passed over only once the budget
    left is smaller than it, so the largest jobs are slightly under-represented. If the
    window's own load is below ``load``, every job is returned (check with
    :func:`offered_load`).
    """
    if slots < 1 or seconds <= 0 or load <= 0:
        raise ValueError("slots, seconds and load must be positive")
    budget = load * slots * seconds
    order = list(range(len(jobs)))
    random.Random(seed).shuffle(order)
    taken: list[int] = []
    left = budget
    for index in order:
        if left <= tolerance * budget:
            break
        need = gpu_time(jobs[index])
        if need <= left:
            taken.append(index)
            left -= need
    return [jobs[index] for index in sorted(taken)]
