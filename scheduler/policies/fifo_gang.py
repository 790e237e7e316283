"""fifo-gang: the rigid baseline. Static, all-or-nothing, first come first served.

A job runs on exactly ``min(max_workers, capacity)`` slots (its gang) or not at all, and a
running gang is never resized. This is what "open source rigid allocation" means in the seeds;
it exists for the benchmarks to compare against.

fifo-backfill is the same with backfill: a waiting gang that does not fit no longer blocks
the smaller ones behind it (they start in the free slots, in submission order), which is
what rigid schedulers in production do (Slurm's backfill; without run-time estimates, so any
later gang that fits may start).
"""

from __future__ import annotations

from scheduler.policies.model import Decision, Snapshot, by_submission, make_decision, zeros
from scheduler.policies.reasons import OrderExplainer

POLICY = "fifo-gang"
BACKFILL_POLICY = "fifo-backfill"


def decide(snapshot: Snapshot) -> Decision:
    """Keep running gangs; start waiting jobs in submission order while their gang fits."""
    return _decide(snapshot, backfill=False)


def decide_backfill(snapshot: Snapshot) -> Decision:
    """As :func:`decide`, but a gang that does not fit lets later ones that fit start."""
    return _decide(snapshot, backfill=True)


def _decide(snapshot: Snapshot, backfill: bool) -> Decision:
    # 1. Submission order (priority is ignored: that is the baseline's point).
    jobs = by_submission(snapshot.jobs)
    # 2. Running gangs keep their slots while they fit (a gang whose slots were lost, so that
    #    the rest no longer fit, goes back to the queue).
    targets, left = zeros(jobs), snapshot.capacity
    for job in (job for job in jobs if job.current):
        if job.current <= left:
            targets[job.id] = job.current
            left -= job.current
    # 3. Waiting jobs start in order while their gang fits; the first one that does not fit
    #    blocks everyone behind it (strict FIFO), or with backfill is passed over.
    for job in jobs:
        gang = min(job.max_workers, snapshot.capacity)
        if targets[job.id]:
            continue
        if not 0 < gang <= left:
            if backfill and left:
                continue
            break
        targets[job.id] = gang
        left -= gang
    explain = OrderExplainer(snapshot.capacity, jobs, "submission", gang=True)
    return make_decision(BACKFILL_POLICY if backfill else POLICY, snapshot, jobs, targets, explain)
