"""The policy's input, built in one place for the live scheduler and the priority preview
(docs/architecture.md, "Scheduling contract"): the active jobs with the slots each holds
now (members and joiners), over the usable slots, with each job's speedup curve and the
slot-seconds it has trained, and a goodput-mode job's batch range, micro-batch cap, base
batch, noise scale, throughput model and batch now (docs/architecture.md, "Goodput mode").
A preview built here with the allocation record's holdings, capacity and attained service
sees what the scheduler sees.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from protocol.slots import SlotInfo
from scheduler.live.cache import Timed
from scheduler.live.goodputs import GoodputFits, GoodputInput
from scheduler.live.speedups import (
    RECORDS_TTL,
    Curves,
    RecentRecords,
    Records,
    observed_rates,
)
from scheduler.policies import JobView, Snapshot, Team, goodput, idle, las, tiresias

# The policies that order jobs by attained service (they read JobView.attained), and those
# that read each job's speedup curve (JobView.speedup); goodput reads both (its fair shares
# are fairshare-las', a fixed-batch job's rate its curve).
BY_SERVICE = {las.POLICY, las.SPEEDUP_POLICY, tiresias.POLICY, goodput.POLICY}
BY_SPEEDUP = {las.SPEEDUP_POLICY, goodput.POLICY}

Speedups = dict[int, tuple[float, ...]]  # job -> its speedup curve
GoodputInputs = dict[int, GoodputInput]  # goodput-mode job -> its measured inputs
# row, held, speedup, served, priority, goodput inputs (goodput mode), remaining work
ViewInputs = tuple[Any, int, tuple[float, ...], float, int, GoodputInput | None, float]


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
    @property
    def batch_size(self) -> int: ...
    @property
    def batch_min(self) -> int: ...
    @property
    def batch_max(self) -> int: ...
    @property
    def max_micro_batch(self) -> int: ...


@dataclass(frozen=True)
class Inputs:
    """What a policy reads of the jobs beside their rows, for one decision: each job's
    speedup curve and attained service (for the policies that read them), each goodput-mode
    job's measured inputs, and the slots of one host (0: unknown)."""

    speedups: Speedups = field(default_factory=dict)
    attained: dict[int, float] = field(default_factory=dict)
    goodputs: GoodputInputs = field(default_factory=dict)
    per_host: int = 0
    remaining: dict[int, float] = field(default_factory=dict)  # job -> slot-seconds left
    # Idle jobs their team's or group's rule holds at their minimum, each with the reason
    # (docs/architecture.md, "Idle jobs"): their views ask for their minimum alone.
    idle: dict[int, str] = field(default_factory=dict)

    def moving(self) -> bool:
        """Whether they move with time (so an unchanged rest is no reason to skip)."""
        return bool(self.speedups or self.attained or self.goodputs or self.remaining)


def work_left(records: list[dict[str, Any]], batch: int) -> float:
    """The slot-seconds of work a job has left, from its latest train records: its steps
    left (``total_steps`` less the newest ``step``) at the median slot-seconds a step took
    over them (its global batch, ``batch`` or a goodput-mode record's own, over the
    samples/s, times the learners) (JobView.remaining); 0 where they do not say (unknown:
    the policies put such a job first, to be measured)."""
    if not records:
        return 0.0
    newest = max(records, key=lambda r: r.get("step") or 0)
    total, step = newest.get("total_steps"), newest.get("step")
    if not isinstance(total, int) or not isinstance(step, int) or total <= step:
        return 0.0
    costs = []  # slot-seconds per step
    for r in records:
        rate, workers, at = r.get("samples_per_s"), r.get("workers"), r.get("batch") or batch
        if isinstance(rate, (int, float)) and rate > 0 and isinstance(workers, int):
            costs.append(float(at) / float(rate) * workers)
    return (total - step) * statistics.median(costs) if costs else 0.0


def per_host(alive: Iterable[SlotInfo]) -> int:
    """The slots of one host: the largest host of the alive slots (0: they do not say)."""
    return max((s.host_slots for s in alive), default=0)


class Measures:
    """The one builder of :class:`Inputs`, for the live loop and for every preview
    (docs/architecture.md, "Scheduling contract"): from the jobs' train records, read once
    for all that derive from them (speedup curves, goodput fits; the loop's moves too), and
    the attained service and host size given; each part only where ``policy`` reads it."""

    def __init__(self, policy: str, records: Records) -> None:
        self.policy = policy
        self.records = records if isinstance(records, RecentRecords) else RecentRecords(records)
        self.curves = (Curves(lambda pk: observed_rates(self.records(pk)))
                       if policy in BY_SPEEDUP else None)  # fmt: skip
        self.fits = GoodputFits(self.records) if policy == goodput.POLICY else None
        self.remaining: Timed[int, float] = Timed(RECORDS_TTL)  # job -> work_left

    def forget(self, keep: set[int]) -> None:
        """Drop what is kept of jobs no longer active."""
        self.records.forget(keep)
        self.remaining.forget(keep)
        for cache in (self.curves, self.fits):
            if cache is not None:
                cache.forget(keep)

    def _work_left(self, job: Schedulable) -> float:
        return work_left(self.records(job.pk), job.batch_size)

    def inputs(self, jobs: Iterable[Schedulable], attained: Mapping[int, float],
               slots_per_host: int, asked: Mapping[int, int] | None = None) -> Inputs:  # fmt: skip
        """The inputs for ``jobs``; ``asked``: the batch each goodput-mode job's controller
        last asked (else its newest record's)."""
        jobs = list(jobs)
        curves, fits = self.curves, self.fits
        speedups = {j.pk: curves.curve(j.pk, j.max_workers) for j in jobs} if curves else {}
        served = {pk: attained[pk] for pk in (j.pk for j in jobs) if pk in attained}
        goodputs = {}
        if fits is not None:
            for job in jobs:
                if job.batch_max:
                    got = fits.of(job.pk, job.max_micro_batch, slots_per_host)
                    goodputs[job.pk] = got._replace(batch=(asked or {}).get(job.pk) or got.batch)
        remaining = {j.pk: self.remaining.get(j.pk, partial(self._work_left, j)) for j in jobs}
        return Inputs(speedups, served if self.policy in BY_SERVICE else {}, goodputs,
                      slots_per_host, {pk: w for pk, w in remaining.items() if w > 0})  # fmt: skip


class Teams(Protocol):
    """The teams as each group's snapshot reads them (``scheduler.live.ports.Tenancy``)."""

    def teams_in(self, group: str) -> tuple[Team, ...]: ...


def job_view(job: Schedulable, current: int, priority: int, speedup: tuple[float, ...],
             attained: float, goodput: GoodputInput | None = None,
             remaining: float = 0.0) -> JobView:  # fmt: skip
    """One job as the policy sees it; a goodput-mode one (``batch_max`` set) with its
    measured ``goodput`` inputs (none: its noise scale unknown, no model, at its base
    batch)."""
    view = JobView(
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
        remaining=remaining,
    )
    low, high = job.batch_min, job.batch_max
    if not high or not 1 <= low <= high or high < view.min_workers:
        return view  # a fixed batch (or a range no submit rule lets through)
    got = goodput or GoodputInput()
    return replace(view, batch_range=(low, high), max_micro_batch=job.max_micro_batch,
                   base_batch=job.batch_size, gns=got.gns, throughput=got.throughput,
                   batch=got.batch or job.batch_size, timed_batch=got.timed_batch)  # fmt: skip


class SnapshotBuilder:
    """Builds snapshots, keeping each job's view from the last build while what it is made
    of is the same: at 10k jobs building every view costs tens of milliseconds, checking
    them a few. A builder used once (the preview) simply builds every view."""

    def __init__(self) -> None:
        self.views: dict[int, tuple[ViewInputs, JobView]] = {}  # job -> made of, view

    def build_groups(self, jobs: Iterable[Schedulable], capacities: Mapping[str, int],
                     held: dict[int, int], tenancy: Teams, inputs: Inputs | None = None,
                     priorities: dict[int, int] | None = None) -> dict[str, Snapshot]:  # fmt: skip
        """One snapshot per resource group (docs/architecture.md, "Tenancy"): its usable
        slots (``capacities``), the jobs that run in it, the teams as it reads them. A group
        with jobs and no slot has a snapshot of capacity 0 (its jobs wait). ``inputs``: what
        :meth:`Measures.inputs` read of the jobs (and the idle jobs held at their minimum);
        ``priorities``: some jobs' priority
        overridden (the priority preview's what-if)."""
        jobs = list(jobs)
        given = inputs or Inputs()
        per_host = given.per_host
        views = self.views_of(jobs, held, given.speedups, given.attained, priorities,
                              given.goodputs, given.remaining)  # fmt: skip
        grouped: dict[str, list[JobView]] = {group: [] for group in capacities}
        for job, view in zip(jobs, views, strict=True):
            grouped.setdefault(job.group, []).append(view)
        held_idle = {str(pk) for pk in given.idle}
        return {group: idle.at_minimum(Snapshot(capacities.get(group, 0), members,
                                                tenancy.teams_in(group), per_host), held_idle)
                for group, members in grouped.items()}  # fmt: skip

    def views_of(self, jobs: Iterable[Schedulable], held: dict[int, int],
                 speedups: Speedups | None = None, attained: dict[int, float] | None = None,
                 priorities: dict[int, int] | None = None,
                 goodputs: GoodputInputs | None = None,
                 remaining: dict[int, float] | None = None) -> list[JobView]:  # fmt: skip
        """Each job's view, the last build's where what it is made of is the same."""
        speedups, attained, priorities = speedups or {}, attained or {}, priorities or {}
        goodputs, remaining = goodputs or {}, remaining or {}
        views, kept = [], {}
        for job in jobs:
            pk = job.pk
            current, speedup = held.get(pk, 0), speedups.get(pk, ())
            served, priority = attained.get(pk, 0.0), priorities.get(pk, job.priority)
            goodput, left = goodputs.get(pk), remaining.get(pk, 0.0)
            made_of: ViewInputs = (job, current, speedup, served, priority, goodput, left)
            last = self.views.get(pk)
            if last is not None and last[0] == made_of:
                view = last[1]
            else:
                view = job_view(job, current, priority, speedup, served, goodput, left)
            kept[pk] = (made_of, view)
            views.append(view)
        self.views = kept
        return views
