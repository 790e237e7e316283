"""priority: strict order; the highest priority is filled to its max first."""

from __future__ import annotations

from scheduler.policies.model import Decision, Snapshot, by_priority, make_decision, zeros
from scheduler.policies.reasons import OrderExplainer

POLICY = "priority"


def decide(snapshot: Snapshot) -> Decision:
    """Fill jobs to their max in priority order (ties: earlier submission first)."""
    # 1. Canonical order: priority desc, submission asc, id.
    jobs = by_priority(snapshot.jobs)
    # 2. Each job in turn takes up to its max of what is left, if its minimum fits; a job
    #    whose minimum does not fit waits, and a smaller one behind it may still start.
    targets, left = zeros(jobs), snapshot.capacity
    for job in jobs:
        if not left:
            break
        if job.min_workers <= left:
            targets[job.id] = min(job.max_workers, left)
            left -= targets[job.id]
    explain = OrderExplainer(snapshot.capacity, jobs, "priority", gang=False)
    return make_decision(POLICY, snapshot, jobs, targets, explain)
