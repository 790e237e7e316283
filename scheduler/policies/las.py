"""fairshare-las and fairshare-speedup: fair share with least-attained-service admission,
and with speedup-aware shares.

**fairshare-las.** Exactly fairshare's weighted max-min shares among the admitted jobs, but
when the minimums do not all fit, jobs are admitted by priority (highest first), then by
least attained service (docs/architecture.md, "Scheduling contract"), then submission. Attained
service (slot-seconds) is compared in coarse classes (below 1 slot-hour, then each class
2x the last), as Tiresias discretises it, so two jobs with nearly equal service do not take
turns evicting each other on every decision. A short job therefore never waits behind a
long one of the same priority for longer than the long one's class lasts; a higher
priority still always goes first.

**fairshare-speedup.** The same admission; then each admitted job's fair share is taken up
to its *useful* size only (while each added slot adds at least 0.3 of a slot's throughput on
its speedup curve, :mod:`scheduler.policies.speedup`), and the slots this leaves go one
envelope step at a time, up to each job's max (work conserving), to the job of least
attained-service class, then to the one whose next step adds the most throughput per slot
(short jobs finish first; among equals, slots go where they add the most). With no curve
(unknown speedup, taken as linear) or curves that stay useful past the shares, this is
exactly fairshare: the seeds' numbers hold, and two saturated jobs of equal priority get
equal shares.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from operator import attrgetter

from scheduler.policies import fairshare, reasons, speedup
from scheduler.policies.model import (
    Decision,
    JobView,
    Snapshot,
    by_submission,
    make_decision,
    zeros,
)

POLICY = "fairshare-las"
SPEEDUP_POLICY = "fairshare-speedup"

# Attained-service classes: class 0 below BASE slot-seconds, class k below BASE·FACTOR^k.
BASE = 3600.0
FACTOR = 2.0
_LOG_FACTOR = math.log(FACTOR)


def service_class(attained: float) -> int:
    """The job's attained-service class (0 = least)."""
    if attained < BASE:
        return 0
    return 1 + int(math.log(attained / BASE) / _LOG_FACTOR)


def next_boundary(attained: float) -> float:
    """The attained service at which a job with ``attained`` moves to the next class."""
    return BASE * FACTOR ** service_class(attained)


def by_service(jobs: list[JobView]) -> list[JobView]:
    """Active jobs by priority (highest first), attained-service class, submission, id."""
    ordered = by_submission(jobs)  # stable sorts: submission, then id, break the ties
    ordered.sort(key=lambda job: service_class(job.attained))
    ordered.sort(key=attrgetter("priority"), reverse=True)
    return ordered


def decide(snapshot: Snapshot) -> Decision:
    """fairshare's shares among the jobs admitted by least attained service."""
    jobs = by_service(list(snapshot.jobs))
    admitted = fairshare.admit(jobs, snapshot.capacity)
    level = fairshare.water_level(admitted, snapshot.capacity)
    parts = {job.id: fairshare.split(job, level) for job in admitted}
    targets = zeros(jobs)
    targets.update(fairshare.round_shares(admitted, parts, snapshot.capacity))
    den = level[1] if level else 1
    shares = {job_id: whole + remainder / den for job_id, (whole, remainder) in parts.items()}
    explain = reasons.FairshareExplainer(
        snapshot.capacity, jobs, admitted, shares, ahead=reasons.LAS_AHEAD
    )
    return make_decision(POLICY, snapshot, jobs, targets, explain, shares)


def decide_speedup(snapshot: Snapshot) -> Decision:
    """Fair shares up to each job's useful size; the rest where it adds the most."""
    jobs = by_service(list(snapshot.jobs))
    admitted = fairshare.admit(jobs, snapshot.capacity)
    # 1. Fair shares with each job capped at its useful size.
    capped = [_capped(job) for job in admitted]
    level = fairshare.water_level(capped, snapshot.capacity)
    parts = {job.id: fairshare.split(job, level) for job in capped}
    targets = zeros(jobs)
    targets.update(fairshare.round_shares(capped, parts, snapshot.capacity))
    den = level[1] if level else 1
    shares = {job_id: whole + remainder / den for job_id, (whole, remainder) in parts.items()}
    # 2. What is left, one envelope step at a time, to the largest gain per slot.
    extra = _spread(admitted, targets, snapshot.capacity - sum(targets.values()))
    explain = reasons.SpeedupExplainer(
        reasons.FairshareExplainer(
            snapshot.capacity, jobs, admitted, shares, ahead=reasons.LAS_AHEAD
        ),
        extra,
    )
    return make_decision(SPEEDUP_POLICY, snapshot, jobs, targets, explain, shares)


def _capped(job: JobView) -> JobView:
    """The job as fair share sees it: its max lowered to its useful size."""
    if not job.speedup:
        return job
    top = speedup.useful(job.speedup, job.min_workers, job.max_workers)
    if top == job.max_workers:
        return job
    return replace(job, max_workers=top)


def _spread(jobs: list[JobView], targets: dict[str, int], spare: int) -> dict[str, int]:
    """Hand ``spare`` slots out (in place in ``targets``); returns each job's extra slots.

    A heap of (attained-service class, -gain per slot of the job's next envelope step,
    slots it has, its order): equal gains go to the job with fewer slots, then the earlier
    in admission order.
    """
    extra: dict[str, int] = {}
    heap = []
    for order, job in enumerate(jobs):
        n = targets[job.id]
        if n < job.max_workers:
            _, gain = speedup.steps(job.speedup, job.max_workers)[n]
            heap.append((service_class(job.attained), -gain, n, order))
    heapq.heapify(heap)
    while spare > 0 and heap:
        rank, _, n, order = heapq.heappop(heap)
        job = jobs[order]
        nxt, _ = speedup.steps(job.speedup, job.max_workers)[n]
        give = min(nxt - n, spare)
        targets[job.id] = n + give
        extra[job.id] = extra.get(job.id, 0) + give
        spare -= give
        if n + give < job.max_workers:
            _, gain = speedup.steps(job.speedup, job.max_workers)[n + give]
            heapq.heappush(heap, (rank, -gain, n + give, order))
    return extra
