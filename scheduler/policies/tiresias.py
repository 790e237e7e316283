"""tiresias: a Tiresias-style baseline for the simulator (Gu et al., NSDI'19).

Discretised two-queue least-attained-service with gang scheduling and no resizing, as in the
Pollux artifact's Tiresias: a job's attained service is the slot-seconds it has run; below the
threshold it is in queue 1, otherwise in queue 2; queue 1 goes first, each queue in
submission order. A job runs as a whole gang or not at all; a running job that no longer
makes the cut is preempted (checkpoint-restart).
"""

from __future__ import annotations

from scheduler.policies.model import Decision, Snapshot, by_submission, make_decision, zeros
from scheduler.policies.reasons import TiresiasExplainer

POLICY = "tiresias"
# The Pollux artifact's threshold: 16 GPU-hours of attained service.
DEFAULT_THRESHOLD = 16 * 3600.0


def decide(snapshot: Snapshot, threshold: float = DEFAULT_THRESHOLD) -> Decision:
    """Gangs by (queue, submission), skipping those that do not fit; see the module."""
    # 1. Order: queue 1 (attained < threshold) before queue 2; then submission, then id.
    by_arrival = by_submission(snapshot.jobs)
    jobs = [job for job in by_arrival if job.attained < threshold]
    jobs += [job for job in by_arrival if job.attained >= threshold]
    # 2. Each job in turn runs as a gang of min(max, capacity) if that fits in what is left;
    #    otherwise it waits (or is preempted) and later, smaller gangs may still fit.
    targets, left = zeros(jobs), snapshot.capacity
    for job in jobs:
        if not left:
            break
        gang = min(job.max_workers, snapshot.capacity)
        if gang <= left:
            targets[job.id] = gang
            left -= gang
    return make_decision(POLICY, snapshot, jobs, targets, TiresiasExplainer(threshold))
