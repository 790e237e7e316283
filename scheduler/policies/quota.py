"""quota-preempt: a baseline for the simulator: quotas with borrowing and preemption, rigid
gangs, as Kueue runs them (ClusterQueues in one cohort; BestEffortFIFO queues; classic
preemption with ``reclaimWithinCohort: Any``).

Each team is a queue whose *nominal quota* is its guarantee (covering its sub-teams'); the
jobs of no team are a queue of nominal 0. A job runs as a whole gang of
``min(max_workers, capacity)`` slots or not at all and is never resized. A running gang
keeps its slots unless preempted. In one decision:

1. Jobs that fit in their team's nominal quota (its usage plus the gang within the quota)
   are admitted first, in (priority, submission, id) order: at once where the gang fits in
   the free slots, otherwise by preempting gangs of other teams that borrow (use more than
   their quota), whatever their priority (``reclaimWithinCohort: Any``): lowest priority
   first, then the least attained service (the most recently started: the least work to
   lose), then the latest submission, and only if enough of them free the gang's slots (a
   team that stops borrowing is no longer preempted from).
2. Then jobs that borrow: in the same order, wherever the gang fits in the free slots and
   under the team's limit (Kueue's borrowing limit).

A job that does not fit is passed over and later ones may start (BestEffortFIFO). In the
simulator, with ``Config.kill``, a preempted gang loses its work since its last checkpoint.
"""

from __future__ import annotations

from operator import attrgetter

from scheduler.policies.model import (
    Decision,
    JobView,
    Snapshot,
    by_priority,
    guarantees,
    make_decision,
    zeros,
)

POLICY = "quota-preempt"


def decide(snapshot: Snapshot) -> Decision:
    """Gangs admitted within quotas (preempting borrowers), then borrowing; see the module."""
    jobs = by_priority(snapshot.jobs)
    nominal = guarantees(snapshot.teams)
    limit = {team.id: team.limit for team in snapshot.teams}
    targets = zeros(jobs)
    used: dict[str, int] = {}
    free = snapshot.capacity
    running = [job for job in jobs if job.current]
    # Slots lost under running gangs: the latest submissions go back to the queue.
    running.sort(key=attrgetter("submitted", "id"))
    for job in running:
        if job.current <= free:
            targets[job.id] = job.current
            used[job.team] = used.get(job.team, 0) + job.current
            free -= job.current
    held = [job for job in running if targets[job.id]]
    waiting = [job for job in jobs if not job.current]
    gang = {job.id: min(job.max_workers, snapshot.capacity) for job in waiting}
    borrowing = []
    for job in waiting:  # 1. within the team's quota, preempting borrowers if need be
        size = gang[job.id]
        if not size:
            continue
        if used.get(job.team, 0) + size > nominal.get(job.team, 0):
            borrowing.append(job)
            continue
        if size > free:
            victims = _victims(held, targets, used, nominal, job, size - free)
            if victims is None:
                continue
            for victim in victims:
                free += targets[victim.id]
                used[victim.team] -= targets[victim.id]
                targets[victim.id] = 0
            held = [j for j in held if targets[j.id]]
        targets[job.id] = size
        used[job.team] = used.get(job.team, 0) + size
        free -= size
    for job in borrowing:  # 2. borrowing what is free, under the team's limit
        size = gang[job.id]
        top = limit.get(job.team)
        if size <= free and (top is None or used.get(job.team, 0) + size <= top):
            targets[job.id] = size
            used[job.team] = used.get(job.team, 0) + size
            free -= size
    explain = _Explainer(snapshot.capacity, nominal, used)
    return make_decision(POLICY, snapshot, jobs, targets, explain)


def _victims(
    held: list[JobView],
    targets: dict[str, int],
    used: dict[str, int],
    nominal: dict[str, int],
    job: JobView,
    short: int,
) -> list[JobView] | None:
    """Gangs of borrowing teams whose slots make up ``short``, or None if they cannot."""
    candidates = sorted(
        (j for j in held if j.team != job.team),
        key=lambda j: (j.priority, j.attained, -j.submitted, j.id),
    )
    usage = dict(used)
    chosen, freed = [], 0
    for victim in candidates:
        if usage.get(victim.team, 0) <= nominal.get(victim.team, 0):
            continue  # not borrowing (any more): Kueue reclaims only what is borrowed
        chosen.append(victim)
        freed += targets[victim.id]
        usage[victim.team] -= targets[victim.id]
        if freed >= short:
            return chosen
    return None


class _Explainer:
    def __init__(self, capacity: int, nominal: dict[str, int], used: dict[str, int]) -> None:
        self.capacity = capacity
        self.nominal = nominal
        self.used = used

    def __call__(self, job: JobView, target: int) -> str:
        team = job.team or "no team"
        quota = f"team {team} uses {self.used.get(job.team, 0)} of its quota "
        quota += f"{self.nominal.get(job.team, 0)}"
        if target:
            return f"admitted as a gang of {target}; {quota}"
        if job.current:
            return f"preempted: its team borrows and another team reclaims its quota; {quota}"
        return f"waits: its gang does not fit in the free slots; {quota}"
