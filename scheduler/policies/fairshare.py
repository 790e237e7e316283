"""fairshare (the default): hierarchical fair share; among one user's jobs, weighted max-min by
priority between each job's min and max.

A group's slots go to teams, then to each team's users, then to each user's jobs
(:mod:`scheduler.policies.teams` divides down to users). With no teams and one user (or
jobs that name none) the whole group is that user's: exactly the flat fair share below.

Among one user's jobs: each unsatisfied job's share is ``capacity * weight / Σweights``
(weight = priority), capped at its max; what a capped job leaves is refilled to the others.
That is the same as finding the *water level* λ at which ``Σ clamp(λ·weight, min, max) =
capacity``. The arithmetic is exact (integers and a rational λ), so ties are real ties and
are broken the same way every time.
"""

from __future__ import annotations

from operator import attrgetter

from scheduler.policies import reasons, teams
from scheduler.policies.model import (
    Decision,
    JobView,
    Snapshot,
    active,
    by_work,
    make_decision,
    zeros,
)

POLICY = "fairshare"
_MIN = attrgetter("min_workers")

# λ as a fraction (numerator, denominator); None means "no limit": every job is at its max.
Level = tuple[int, int] | None


def decide(snapshot: Snapshot) -> Decision:
    """Hierarchical fair share of ``snapshot.capacity`` slots: by team, user, then job."""
    if not snapshot.teams:
        jobs = active(snapshot.jobs)
        if len({job.owner for job in jobs}) <= 1:  # one user: the whole group is theirs
            decision = flat(snapshot)
            if not jobs:
                return decision
            owner, entitled = jobs[0].owner, float(min(snapshot.capacity, _demand(jobs)))
            decision.teams[teams.NO_TEAM] = entitled
            decision.users[teams.NO_TEAM] = {owner: entitled}
            return decision
    return hierarchical(snapshot)


def _demand(jobs: list[JobView]) -> int:
    return sum(job.max_workers for job in jobs)


def hierarchical(snapshot: Snapshot) -> Decision:
    """Whole slots per user by :class:`teams.Hierarchy`, each user's slots to their
    admitted jobs as :func:`flat` shares the group's."""
    tree = teams.Hierarchy(snapshot)
    tree.admit()
    tree.divide()
    targets = zeros(tree.jobs)
    shares: dict[str, float] = {}
    for user in tree.users.values():
        if not user.amount:
            continue
        admitted = user.admitted
        if user.amount == user.cap:  # every admitted job at its max
            for job in admitted:
                targets[job.id], shares[job.id] = job.max_workers, float(job.max_workers)
            continue
        level = water_level(admitted, user.amount)
        parts = {job.id: split(job, level) for job in admitted}
        targets.update(round_shares(admitted, parts, user.amount))
        den = level[1] if level else 1
        shares.update(
            {job_id: whole + remainder / den for job_id, (whole, remainder) in parts.items()}
        )
    by_team, by_user = tree.entitlements()
    explain = reasons.TeamsExplainer(tree, shares)
    return make_decision(POLICY, snapshot, tree.jobs, targets, explain, shares, by_team, by_user)


def flat(snapshot: Snapshot) -> Decision:
    """Weighted max-min shares of ``snapshot.capacity`` slots among all its jobs, as if one
    user's (teams and owners ignored); see the module docstring."""
    # 1. Canonical order (priority desc, remaining work asc where known, submission asc, id):
    #    the answer never depends on the order the jobs came in.
    jobs = by_work(snapshot.jobs)
    # 2. Minimums first, in that order; a job whose minimum does not fit waits (0).
    admitted = admit(jobs, snapshot.capacity)
    # 3. The water level λ that shares the capacity among the admitted jobs.
    level = water_level(admitted, snapshot.capacity)
    # 4. Whole slots: each job's floor, then the slots left over one each by largest
    #    remainder, ties to the earlier submission.
    parts = {job.id: split(job, level) for job in admitted}
    targets = zeros(jobs)
    targets.update(round_shares(admitted, parts, snapshot.capacity))
    # 5. Every job whose count changes gets a reason.
    den = level[1] if level else 1
    shares = {job_id: whole + remainder / den for job_id, (whole, remainder) in parts.items()}
    explain = reasons.FairshareExplainer(snapshot.capacity, jobs, admitted, shares)
    return make_decision(POLICY, snapshot, jobs, targets, explain, shares)


def admit(jobs: list[JobView], capacity: int) -> list[JobView]:
    """The jobs that get at least their minimum, taken in ``jobs`` order while minimums fit.

    A job whose minimum does not fit in what is left is passed over, so a smaller job behind
    it may still start (no slot idles for a minimum that cannot be met).
    """
    if sum(map(_MIN, jobs)) <= capacity:
        return jobs
    admitted, left = [], capacity
    for job in jobs:
        if job.min_workers <= left:
            admitted.append(job)
            left -= job.min_workers
            if not left:
                break
    return admitted


def water_level(jobs: list[JobView], capacity: int) -> Level:
    """λ with ``Σ clamp(λ·priority, min, max) = capacity`` (None when every max fits).

    The sum is piecewise linear in λ, bending where a job leaves its minimum (λ = min/w) or
    reaches its maximum (λ = max/w). Walk those points in order, keeping the sum as
    ``pinned + slope·λ``, until it reaches the capacity; then solve on that piece.
    Requires ``Σ min <= capacity`` (see :func:`admit`).
    """
    if sum(job.max_workers for job in jobs) <= capacity:
        return None
    points = [(j.min_workers / j.priority, j.min_workers, j.priority, 1) for j in jobs]
    points += [(j.max_workers / j.priority, j.max_workers, j.priority, -1) for j in jobs]
    points.sort()
    pinned, slope = sum(job.min_workers for job in jobs), 0
    for _, value, weight, leaves_min in points:
        # The sum at λ = value/weight, compared exactly: pinned + slope·value/weight >= capacity
        if pinned * weight + slope * value >= capacity * weight:
            return (capacity - pinned, slope) if slope else (value, weight)
        pinned -= value * leaves_min
        slope += weight * leaves_min
    raise AssertionError("unreachable: the sum of maximums exceeds the capacity")


def split(job: JobView, level: Level) -> tuple[int, int]:
    """(whole slots, remainder) of the job's exact share; the remainder is over λ's
    denominator, so remainders of different jobs compare exactly."""
    if level is None:
        return job.max_workers, 0
    num, den = level
    raw = num * job.priority
    if raw <= job.min_workers * den:
        return job.min_workers, 0
    if raw >= job.max_workers * den:
        return job.max_workers, 0
    return divmod(raw, den)


def round_shares(
    jobs: list[JobView], parts: dict[str, tuple[int, int]], capacity: int
) -> dict[str, int]:
    """Largest-remainder rounding of the jobs' :func:`split` ``parts``: floors, then +1 to
    the largest remainders (ties to the earlier submission) until ``min(capacity, Σ max)``
    slots are given."""
    targets = {job_id: whole for job_id, (whole, _) in parts.items()}
    total = min(capacity, sum(job.max_workers for job in jobs))
    left = total - sum(targets.values())
    if left:
        ranked = sorted(
            (job for job in jobs if parts[job.id][1] > 0),
            key=lambda job: (-parts[job.id][1], job.submitted, job.id),
        )
        for job in ranked[:left]:
            targets[job.id] += 1
    return targets
