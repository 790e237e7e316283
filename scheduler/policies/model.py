"""What a policy sees (a snapshot) and what it answers (a decision). Plain data, no I/O.

A policy is a pure function ``decide(snapshot) -> Decision``: the service builds the snapshot
from the database and the live slots, the simulator from its own clock; neither lets a policy
touch live state (docs/architecture.md, "Scheduling contract").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

QUEUED = "QUEUED"
RUNNING = "RUNNING"
SUSPENDED = "SUSPENDED"
# Jobs in any other state (COMPLETED, FAILED, STOPPED) are not scheduled and are left out.
ACTIVE_STATES = frozenset({QUEUED, RUNNING, SUSPENDED})

MIN_PRIORITY = 1
MAX_PRIORITY = 10000
DEFAULT_PRIORITY = 5000


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as a policy sees it.

    ``submitted`` is a time in seconds on any clock (only the order matters), ``current`` the
    slots the job holds now, ``attained`` the slot-seconds of service it has had so far (read
    by the least-attained-service orders). ``speedup`` is the job's speedup curve where one
    is known: ``speedup[n - 1]`` is how many times faster than on one slot it runs on n slots
    (see :mod:`scheduler.policies.speedup`); empty means unknown, taken as linear.
    """

    id: str
    max_workers: int
    submitted: float = 0.0
    priority: int = DEFAULT_PRIORITY
    min_workers: int = 1
    current: int = 0
    state: str = QUEUED
    attained: float = 0.0
    name: str = ""  # what reasons call the job (its id when empty)
    speedup: tuple[float, ...] = ()

    @property
    def label(self) -> str:
        return self.name or self.id

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(f"job {self.id}: need 1 <= min_workers <= max_workers")
        if not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"job {self.id}: priority must be {MIN_PRIORITY}..{MAX_PRIORITY}")
        if self.current < 0:
            raise ValueError(f"job {self.id}: current allocation is negative")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster at one instant: ``capacity`` usable slots and the jobs."""

    capacity: int
    jobs: Sequence[JobView]

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError("capacity is negative")


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer.

    ``targets`` holds every active job's slot count (0 = waits, or is suspended if it held
    slots); ``reasons`` a readable line for each job whose count changes; ``shares`` the exact
    (fractional) share a policy computed, where it computes one. ``snapshot`` is the input.
    """

    policy: str
    snapshot: Snapshot
    targets: dict[str, int]
    reasons: dict[str, str]
    shares: dict[str, float] = field(default_factory=dict)

    def changes(self) -> dict[str, tuple[int, int]]:
        """Job id -> (slots now, slots decided), for the jobs whose count changes."""
        current = {job.id: job.current for job in self.snapshot.jobs}
        return {job_id: (current[job_id], self.targets[job_id]) for job_id in self.reasons}

    def summary(self) -> dict[str, object]:
        """What every job of this decision shares: the policy, the capacity, and the totals
        its shares came from (computed once per decision)."""
        jobs = active(self.snapshot.jobs)
        return {
            "policy": self.policy,
            "capacity": self.snapshot.capacity,
            "jobs": len(jobs),
            "total_weight": sum(job.priority for job in jobs),
            "total_min": sum(job.min_workers for job in jobs),
        }

    def job_inputs(self, job: JobView, summary: dict[str, object]) -> dict[str, object]:
        """One job's inputs to this decision, with the decision's ``summary``: what its
        "scaled" event records (its own weight and demand, never other owners' jobs)."""
        data = {
            **summary,
            "weight": job.priority,
            "demand": [job.min_workers, job.max_workers],
            "current": job.current,
            "target": self.targets.get(job.id, 0),
        }
        if job.id in self.shares:
            data["share"] = round(self.shares[job.id], 3)
        return data

    def inputs(self) -> dict[str, object]:
        """The decision's inputs as plain JSON-able data, for the job events that record it."""
        jobs = active(self.snapshot.jobs)
        return {
            "policy": self.policy,
            "capacity": self.snapshot.capacity,
            "weights": {job.id: job.priority for job in jobs},
            "demands": {job.id: [job.min_workers, job.max_workers] for job in jobs},
            "current": {job.id: job.current for job in jobs},
            "shares": {job_id: round(share, 3) for job_id, share in self.shares.items()},
        }


def active(jobs: Iterable[JobView]) -> list[JobView]:
    return [job for job in jobs if job.state in ACTIVE_STATES]


def by_submission(jobs: Iterable[JobView]) -> list[JobView]:
    """Active jobs by submission, then id: a total order, so nothing a policy computes
    depends on the order the jobs came in. (C-level keys: this runs on every decision.)"""
    return sorted(active(jobs), key=attrgetter("submitted", "id"))


def by_priority(jobs: Iterable[JobView]) -> list[JobView]:
    """Active jobs by priority (highest first), then submission, then id."""
    # A stable sort keeps the submission order among equal priorities, reverse=True included.
    return sorted(by_submission(jobs), key=attrgetter("priority"), reverse=True)


_ID = attrgetter("id")

# Explains one job's new slot count: (job, target) -> a readable line.
ReasonFn = Callable[["JobView", int], str]


def make_decision(
    policy: str,
    snapshot: Snapshot,
    jobs: Sequence[JobView],
    targets: dict[str, int],
    explain: ReasonFn,
    shares: dict[str, float] | None = None,
) -> Decision:
    """Bundle ``targets`` (one per job of ``jobs``, the active jobs) with a reason from
    ``explain`` for every job whose count changes."""
    if len(targets) != len(jobs):
        raise ValueError("two jobs share an id")
    reasons = {
        job.id: f"{job.current}→{targets[job.id]}: {explain(job, targets[job.id])}"
        for job in jobs
        if targets[job.id] != job.current
    }
    return Decision(policy, snapshot, targets, reasons, shares or {})


def zeros(jobs: Iterable[JobView]) -> dict[str, int]:
    """Every job at 0 slots: where a policy starts before it hands slots out."""
    return dict.fromkeys(map(_ID, jobs), 0)
