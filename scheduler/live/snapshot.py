"""The policy's input, built in one place for the live scheduler and the priority preview
(docs/architecture.md, "Scheduling contract"): the active jobs with the slots each holds
now (members and joiners), over the usable slots, with each job's speedup curve and the
slot-seconds it has trained. A preview built here with the allocation record's holdings,
capacity and attained service sees what the scheduler sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from scheduler.policies import JobView, Snapshot, Team, las, tiresias

# The policies that order jobs by attained service (they read JobView.attained), and the
# one that reads each job's speedup curve (JobView.speedup).
BY_SERVICE = {las.POLICY, las.SPEEDUP_POLICY, tiresias.POLICY}
BY_SPEEDUP = {las.SPEEDUP_POLICY}

Speedups = dict[int, tuple[float, ...]]  # job -> its speedup curve
ViewInputs = tuple[Any, int, tuple[float, ...], float, int]  # row, held, speedup, served, prio


class Schedulable(Protocol):
    """A job as the snapshot reads it (a job row, or the web's model instance)."""

    @property
    def pk(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def min_workers(self) -> int: ...
    @property
    def created_at(self) -> Any: ...
    @property
    def owner(self) -> str: ...
    @property
    def team(self) -> str: ...
    @property
    def group(self) -> str: ...


class Teams(Protocol):
    """The teams as each group's snapshot reads them (``scheduler.live.ports.Tenancy``)."""

    def teams_in(self, group: str) -> tuple[Team, ...]: ...


def job_view(job: Schedulable, current: int, priority: int, speedup: tuple[float, ...],
             attained: float) -> JobView:  # fmt: skip
    """One job as the policy sees it."""
    return JobView(
        id=str(job.pk),
        max_workers=job.max_workers,
        submitted=job.created_at.timestamp(),
        priority=priority,
        min_workers=min(job.min_workers, job.max_workers),
        current=current,
        state=job.state,
        name=job.name,
        speedup=speedup,
        attained=attained,
        owner=job.owner,
        team=job.team,
    )


class SnapshotBuilder:
    """Builds snapshots, keeping each job's view from the last build while what it is made
    of is the same: at 10k jobs building every view costs tens of milliseconds, checking
    them a few. A builder used once (the preview) simply builds every view."""

    def __init__(self) -> None:
        self.views: dict[int, tuple[ViewInputs, JobView]] = {}  # job -> made of, view

    def build(self, jobs: Iterable[Schedulable], capacity: int, held: dict[int, int],
              speedups: Speedups | None = None, attained: dict[int, float] | None = None,
              priorities: dict[int, int] | None = None,
              teams: tuple[Team, ...] = ()) -> Snapshot:  # fmt: skip
        """``held``: the slots each job holds now; ``priorities``: some jobs' priority
        overridden (the preview's what-if)."""
        return Snapshot(capacity, self.views_of(jobs, held, speedups, attained, priorities), teams)

    def build_groups(self, jobs: Iterable[Schedulable], capacities: Mapping[str, int],
                     held: dict[int, int], tenancy: Teams, speedups: Speedups | None = None,
                     attained: dict[int, float] | None = None,
                     priorities: dict[int, int] | None = None) -> dict[str, Snapshot]:  # fmt: skip
        """One snapshot per resource group (docs/architecture.md, "Tenancy"): its usable
        slots (``capacities``), the jobs that run in it, the teams as it reads them. A group
        with jobs and no slot has a snapshot of capacity 0 (its jobs wait)."""
        jobs = list(jobs)
        views = self.views_of(jobs, held, speedups, attained, priorities)
        grouped: dict[str, list[JobView]] = {group: [] for group in capacities}
        for job, view in zip(jobs, views, strict=True):
            grouped.setdefault(job.group, []).append(view)
        return {group: Snapshot(capacities.get(group, 0), members, tenancy.teams_in(group))
                for group, members in grouped.items()}  # fmt: skip

    def views_of(self, jobs: Iterable[Schedulable], held: dict[int, int],
                 speedups: Speedups | None = None, attained: dict[int, float] | None = None,
                 priorities: dict[int, int] | None = None) -> list[JobView]:  # fmt: skip
        """Each job's view, the last build's where what it is made of is the same."""
        speedups, attained, priorities = speedups or {}, attained or {}, priorities or {}
        views, kept = [], {}
        for job in jobs:
            pk = job.pk
            current, speedup = held.get(pk, 0), speedups.get(pk, ())
            served, priority = attained.get(pk, 0.0), priorities.get(pk, job.priority)
            made_of: ViewInputs = (job, current, speedup, served, priority)
            last = self.views.get(pk)
            if last is not None and last[0] == made_of:
                view = last[1]
            else:
                view = job_view(job, current, priority, speedup, served)
            kept[pk] = (made_of, view)
            views.append(view)
        self.views = kept
        return views
