"""What a policy sees (a snapshot) and what it answers (a decision). Plain data, no I/O.

A policy is a pure function ``decide(snapshot) -> Decision``: the service builds the snapshot
from the database and the live slots, the simulator from its own clock; neither lets a policy
touch live state (docs/architecture.md, "Scheduling contract").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from scheduler.policies.throughput import ThroughputModel

# A job's resting states as its row spells them: the one list (the web's Job.State and the
# live loop's ports are made from it). Jobs in the last three are not scheduled.
QUEUED, RUNNING, SUSPENDED = "QUEUED", "RUNNING", "SUSPENDED"
COMPLETED, FAILED, STOPPED = "COMPLETED", "FAILED", "STOPPED"
JOB_STATES = (QUEUED, RUNNING, SUSPENDED, COMPLETED, FAILED, STOPPED)
ACTIVE = (QUEUED, RUNNING, SUSPENDED)
ACTIVE_STATES = frozenset(ACTIVE)

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

    Goodput mode (off unless ``batch_range`` is set): the job may train at any global batch
    in ``batch_range`` (min, max), and the goodput policy picks its batch with its slots
    (:mod:`scheduler.policies.goodput`). ``max_micro_batch`` caps the samples one learner
    computes at once (0: no cap; more accumulate), ``gns`` is its smoothed gradient noise
    scale in samples (0: unknown), ``base_batch`` the batch its learning rate was given for
    (0: the range's min), ``throughput`` its fitted time per iteration (None: not measured
    yet, taken as linear in slots), ``batch`` the global batch it runs at now (0: unknown),
    ``timed_batch`` the largest global batch that model was fitted on (0: no bound, as for
    a model known beforehand): the policy moves it at most ``goodput.EXPLORE`` times past
    that, since a fit extrapolates badly to batches it has not timed.
    Fixed-batch jobs leave them all at their defaults.

    ``remaining`` is the work the job has left, in slot-seconds (its remaining iterations
    at its measured rate, times the slots it was measured on), where it is known (0:
    unknown). Fair share admits the jobs of one user whose priorities tie by it, the least
    first (:func:`by_work`).
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
    owner: str = ""  # the user who submitted it; "" is a user too (the one with no name)
    team: str = ""  # the id of its team in the snapshot's ``teams``; "" for none
    batch_range: tuple[int, int] | None = None  # goodput mode: (min, max) global batch
    max_micro_batch: int = 0
    gns: float = 0.0
    base_batch: int = 0
    throughput: ThroughputModel | None = None
    batch: int = 0
    timed_batch: int = 0
    remaining: float = 0.0
    # What a policy worked out from this view, kept with it: a view never changes, so the
    # same view gives the same answer for as long as it lives (the live snapshot builder
    # keeps a job's view while nothing about it changes). Not a field of the job: neither
    # compared, nor hashed, nor copied by ``replace`` (a new view starts empty). Today the
    # goodput policy's profile (``goodput._profiles``).
    derived: dict[object, object] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False
    )

    @property
    def label(self) -> str:
        return self.name or self.id

    @property
    def goodput_mode(self) -> bool:
        return self.batch_range is not None

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(f"job {self.id}: need 1 <= min_workers <= max_workers")
        if not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"job {self.id}: priority must be {MIN_PRIORITY}..{MAX_PRIORITY}")
        if self.current < 0:
            raise ValueError(f"job {self.id}: current allocation is negative")
        if self.batch_range is not None:
            low, high = self.batch_range
            if not 1 <= low <= high:
                raise ValueError(f"job {self.id}: batch_range needs 1 <= min <= max")
            if high < self.min_workers:
                raise ValueError(
                    f"job {self.id}: batch_range max {high} gives its {self.min_workers} "
                    "minimum learners less than a sample each"
                )
        if min(self.max_micro_batch, self.base_batch, self.batch, self.timed_batch) < 0:
            raise ValueError(
                f"job {self.id}: max_micro_batch, base_batch, batch and timed_batch must be >= 0"
            )
        if not (math.isfinite(self.gns) and self.gns >= 0):
            raise ValueError(f"job {self.id}: gns must be a finite number >= 0")
        if not (math.isfinite(self.remaining) and self.remaining >= 0):
            raise ValueError(f"job {self.id}: remaining must be a finite number >= 0")


@dataclass(frozen=True, slots=True)
class Team:
    """A team: a node of the hierarchy that fair share divides a group's slots over
    (docs/architecture.md, "Scheduling contract").

    ``parent`` is the id of the team it belongs to ("" for none: directly under the group).
    ``weight`` (at least 1) is its part, beside its sibling teams, of the slots left after
    guarantees. ``guarantee`` is the slots of this snapshot's group it may always claim, up
    to what its jobs ask for (it covers its sub-teams' guarantees: where theirs add up to
    more, that sum is its guarantee); a guarantee it does not use is lent to the others.
    ``limit`` is the most slots its jobs may hold together (None: no limit).
    """

    id: str
    parent: str = ""
    weight: int = 1
    guarantee: int = 0
    limit: int | None = None
    name: str = ""  # what reasons call the team (its id when empty)

    @property
    def label(self) -> str:
        return self.name or self.id

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a team needs an id")
        if self.parent == self.id:
            raise ValueError(f"team {self.id}: a team cannot be its own parent")
        if self.weight < 1:
            raise ValueError(f"team {self.id}: weight must be at least 1")
        if self.guarantee < 0:
            raise ValueError(f"team {self.id}: guarantee is negative")
        if self.limit is not None:
            if self.limit < 0:
                raise ValueError(f"team {self.id}: limit is negative")
            if self.guarantee > self.limit:
                raise ValueError(
                    f"team {self.id}: guarantee {self.guarantee} is above its limit {self.limit}"
                )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster at one instant: ``capacity`` usable slots, the jobs, and the teams the
    jobs belong to (none: every job sits directly under the group). ``slots_per_host``: the
    slots of one host, where the goodput policy's throughput models tell one host from
    several (0: unknown, a job of two or more learners is taken to span hosts)."""

    capacity: int
    jobs: Sequence[JobView]
    teams: tuple[Team, ...] = ()
    slots_per_host: int = 0

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError("capacity is negative")
        if self.slots_per_host < 0:
            raise ValueError("slots_per_host is negative")
        if not isinstance(self.teams, tuple):
            object.__setattr__(self, "teams", tuple(self.teams))
        known = check_teams(self.teams)
        unknown = {job.team for job in self.jobs}.difference(known)
        unknown.discard("")
        if unknown:
            raise ValueError(f"jobs name teams the snapshot does not hold: {sorted(unknown)}")


@functools.lru_cache(maxsize=64)
def check_teams(teams: tuple[Team, ...]) -> frozenset[str]:
    """The ids of ``teams`` once they are found to form a forest: ids unique, every parent
    one of them, no cycle, and no team whose sub-teams' guarantees exceed its limit.
    Raises ValueError saying which team is wrong."""
    ids = [team.id for team in teams]
    known = frozenset(ids)
    if len(known) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"team ids are not unique: {twice}")
    parent = {team.id: team.parent for team in teams}
    for team in teams:
        if team.parent and team.parent not in known:
            raise ValueError(f"team {team.id}: parent {team.parent!r} is not a team here")
    for team in teams:
        seen, at = {team.id}, team.parent
        while at:
            if at in seen:
                raise ValueError(f"teams form a cycle through {team.id!r}")
            seen.add(at)
            at = parent[at]
    covered = guarantees(teams)
    below: dict[str, int] = dict.fromkeys(ids, 0)
    for team in teams:
        if team.parent:
            below[team.parent] += covered[team.id]
    for team in teams:
        if team.limit is not None and below[team.id] > team.limit:
            raise ValueError(
                f"team {team.id}: its sub-teams' guarantees ({below[team.id]}) are above its "
                f"limit {team.limit}"
            )
    return known


def guarantees(teams: Sequence[Team]) -> dict[str, int]:
    """Each team's guarantee covering its sub-teams': the larger of its own and the sum of
    its sub-teams' (so computed from the leaves up). ``teams`` must form a forest."""
    children: dict[str, list[Team]] = {}
    for team in teams:
        children.setdefault(team.parent, []).append(team)
    covered: dict[str, int] = {}

    def visit(team: Team) -> int:
        below = sum(visit(child) for child in children.get(team.id, ()))
        covered[team.id] = max(team.guarantee, below)
        return covered[team.id]

    for top in children.get("", ()):
        visit(top)
    return covered


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer.

    ``targets`` holds every active job's slot count (0 = waits, or is suspended if it held
    slots); ``reasons`` a readable line for each job whose count changes; ``shares`` the exact
    (fractional) share a policy computed, where it computes one. ``snapshot`` is the input.

    Where a policy divides by team and user (fairshare), ``teams`` holds each team's
    entitlement (the exact slots hierarchical fair share gives its subtree for what its jobs
    ask, before minimums and whole slots; "" is the jobs of no team) and ``users`` each
    user's, by team then owner: what a page charts a team's or a user's slots against.

    ``batches`` holds the global batch the goodput policy chose for each goodput-mode job it
    gives slots (absent for fixed-batch jobs and for jobs at 0).

    ``order`` is the active jobs' ids in the order the policy walked them, and ``explain``
    its explainer: :meth:`standing` reads them to say, for any job and not only those whose
    count changes, its place among the waiting and the rule that set its count.
    """

    policy: str
    snapshot: Snapshot
    targets: dict[str, int]
    reasons: dict[str, str]
    shares: dict[str, float] = field(default_factory=dict)
    teams: dict[str, float] = field(default_factory=dict)
    users: dict[str, dict[str, float]] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    explain: ReasonFn | None = field(default=None, compare=False, repr=False)

    def standing(self) -> dict[str, tuple[int, str]]:
        """Job id -> (its place among this group's waiting jobs in the policy's order, 1
        first, 0 for a job given slots; the reason in the policy's own words: why it
        waits, or the rule that set its count). Computed on demand: one explainer call
        per job."""
        views = {job.id: job for job in self.snapshot.jobs}
        out: dict[str, tuple[int, str]] = {}
        place = 0
        for job_id in self.order or tuple(self.targets):
            target = self.targets.get(job_id, 0)
            if not target:
                place += 1
            reason = self.explain(views[job_id], target) if self.explain else ""
            out[job_id] = (0 if target else place, reason)
        return out

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

    def job_inputs(self, job: JobView, summary: dict[str, object],
                   team_held: Mapping[str, int] | None = None) -> dict[str, object]:  # fmt: skip
        """One job's inputs to this decision, with the decision's ``summary``: what its
        "scaled" event records (its own weight and demand, never other owners' jobs). With
        ``team_held`` (slots per team before the decision, each counting its sub-teams':
        ``teams.slots_by_team``), its team's slots then beside its entitlement: a job that
        shrinks while its team held more than that gives slots back to another team (a
        reclaim, as the Usage page counts them)."""
        data = {
            **summary,
            "weight": job.priority,
            "demand": [job.min_workers, job.max_workers],
            "current": job.current,
            "target": self.targets.get(job.id, 0),
        }
        if job.id in self.shares:
            data["share"] = round(self.shares[job.id], 3)
        if job.id in self.batches:
            data["batch"], data["batch_now"] = self.batches[job.id], job.batch
        if job.team or job.owner:
            data["team"], data["owner"] = job.team, job.owner
            if job.team in self.teams:
                data["team_entitlement"] = round(self.teams[job.team], 3)
                if team_held is not None:
                    data["team_held"] = team_held.get(job.team, 0)
            user = self.users.get(job.team, {}).get(job.owner)
            if user is not None:
                data["user_entitlement"] = round(user, 3)
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
            **(
                {"teams": {team: round(value, 3) for team, value in self.teams.items()}}
                if self.snapshot.teams
                else {}
            ),
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


def by_work(jobs: Iterable[JobView]) -> list[JobView]:
    """Active jobs by priority (highest first), then remaining work (the least first; an
    unknown one, 0, first: a job not yet measured gets measured), then submission, then id.
    With no remaining work known this is :func:`by_priority`. Shortest remaining work
    first is what empties a queue soonest (the least average wait for the same work)."""
    ordered = by_submission(jobs)  # stable sorts (C-level keys): the later keys break ties
    ordered.sort(key=attrgetter("remaining"))
    ordered.sort(key=attrgetter("priority"), reverse=True)
    return ordered


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
    teams: dict[str, float] | None = None,
    users: dict[str, dict[str, float]] | None = None,
    batches: dict[str, int] | None = None,
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
    return Decision(
        policy, snapshot, targets, reasons, shares or {}, teams or {}, users or {}, batches or {},
        tuple(job.id for job in jobs), explain,
    )  # fmt: skip


def zeros(jobs: Iterable[JobView]) -> dict[str, int]:
    """Every job at 0 slots: where a policy starts before it hands slots out."""
    return dict.fromkeys(map(_ID, jobs), 0)
