"""A job's live view, read in one place: the jobs list, the job page's ``/state``, the REST
API, WMLA's execs, the CLI (through the API) and the job page's WebSocket all show a
:class:`JobStatus` built here, so during a resize or a suspension they never disagree.

Its sources: the job's row (state, iterations, team and resource group), the allocation
record the scheduler alone writes (workers; and each job's place in its group's queue and
the reason for its slots, ``standing.py``), the job's latest training records (the pace,
for the ETA) and the slot registry (telemetry of the slots it trains on).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import redis
from django.db.models.fields.json import KT

from edtweb.redis_access import store
from edtweb.training import projection, standing
from edtweb.training.models import Job, Metric
from scheduler.store import AllocationRecord

log = logging.getLogger("edt.jobs")

PACE_RECORDS = 2000  # the ETA is at the pace of the job's last 2000 iterations at its size
PACE_MIN = 10  # fewer at its size (it just changed): the pace over all of them


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """What a job's pages, API and CLI show of it now."""

    id: int
    state: str
    priority: int
    team: str  # the team it was submitted into; "" for none
    resource_group: str  # the group whose slots it runs on
    workers: int  # members of its current generation (joiners do not train yet)
    max_workers: int
    steps_done: int
    total_steps: int
    progress: float  # 0..1, iterations done (1 once completed)
    eta: float | None  # seconds left, to 0.1 s; None unless a worker trains it and it has a pace
    eta_text: str  # the ETA as the pages write it: "44 s", "3 min"; "" without one
    waiting: str  # why it waits, the scheduler's words; "" unless queued or suspended
    position: int  # its place in its group's queue at the last decision; 0: none
    reason: str  # the scheduler's reason: why it waits, or the rule that set its slots
    # Seconds from now, earliest and latest, that it should start and end (projection.py);
    # None: not projected (ended, or a future where it never starts)
    start_estimate: tuple[float, float] | None
    end_estimate: tuple[float, float] | None
    estimate_text: str  # "starts in 3-5 min; ends in 20-30 min"; "" without one
    telemetry: tuple[dict[str, Any], ...]  # its slots' latest telemetry
    error: str
    # Since when the scheduler has flagged it idle (unix time; None: it is not), and the
    # flag in words (docs/architecture.md, "Idle jobs"); "" unless idle
    idle_since: float | None = None
    idle: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The status as JSON (``/state``, the WebSocket's ``status`` message)."""
        return {**dataclasses.asdict(self), "telemetry": [dict(t) for t in self.telemetry]}


def status_of(job: Job, user: Any) -> JobStatus:
    """``job``'s status as ``user`` sees it."""
    return statuses([job], user)[job.pk]


def statuses(jobs: Sequence[Job], user: Any) -> dict[int, JobStatus]:
    """Job id -> status for each of ``jobs``, reading the allocation record, the slots and
    the queue once for all of them (the jobs list, the API's pages)."""
    known = standing.record()
    record = known or AllocationRecord()
    members = {
        job.pk: record.of(job.pk).members if job.state == Job.State.RUNNING else () for job in jobs
    }
    held = {slot for slots in members.values() for slot in slots}
    telemetry = slot_telemetry(held) if held else {}
    reasons = standing.reasons(list(jobs), known)
    projected = projection.estimates() if any(j.state in Job.ACTIVE for j in jobs) else {}
    teams = team_names({job.team_id for job in jobs if job.team_id is not None})
    idled = {job.pk: standing.idle(job, known) for job in jobs}
    return {
        job.pk: JobStatus(
            id=job.pk,
            state=job.state,
            priority=job.priority,
            team=teams.get(job.team_id, "") if job.team_id is not None else "",
            resource_group=job.resource_group,
            workers=len(members[job.pk]),
            max_workers=job.max_workers,
            steps_done=job.steps_done,
            total_steps=job.total_steps,
            progress=progress(job),
            # No ETA while no worker trains it: its past pace says nothing of its end.
            eta=(eta := eta_seconds(job) if members[job.pk] else None),
            eta_text=eta_text(eta),
            waiting=reasons.get(job.pk, "") if job.state in standing.WAITING else "",
            position=standing.position(job, known),
            reason=reasons.get(job.pk, ""),
            **estimate_fields(job, projected.get(job.pk)),
            telemetry=tuple(telemetry[s] for s in members[job.pk] if s in telemetry),
            error=job.error,
            idle_since=idled[job.pk][0],
            idle=idled[job.pk][1],
        )
        for job in jobs
    }


def estimate_fields(job: Job, found: projection.Estimate | None) -> dict[str, Any]:
    """A job's start and end estimate, in seconds from now, and in words."""
    if found is None or job.state not in Job.ACTIVE:
        return {"start_estimate": None, "end_estimate": None, "estimate_text": ""}
    start = found.start if job.state in standing.WAITING else None
    words = [projection.text(start, "starts"), projection.text(found.end, "ends")]
    return {"start_estimate": start, "end_estimate": found.end,
            "estimate_text": "; ".join(w for w in words if w)}  # fmt: skip


def team_names(ids: set[int]) -> dict[int, str]:
    """Team id -> name, read once for a list's jobs."""
    from edtweb.tenancy.models import Team

    return dict(Team.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}


def progress(job: Job) -> float:
    if job.state == Job.State.COMPLETED:
        return 1.0
    return min(1.0, job.steps_done / job.total_steps) if job.total_steps else 0.0


def eta_seconds(job: Job) -> float | None:
    """Seconds left at the job's recent pace (None unless it runs and has a pace): the one
    ETA every page, the API and the CLI show."""
    if job.state != Job.State.RUNNING or not job.total_steps:
        return None
    recent = list(Metric.objects.filter(job=job, kind="train").order_by("-step")
                  .annotate(workers=KT("values__workers"))
                  .values_list("step", "time", "workers")[:PACE_RECORDS])  # fmt: skip
    return eta_from(recent, job.total_steps)


def eta_from(recent: Sequence[tuple[int, float, Any]], total_steps: int) -> float | None:
    """Seconds left from ``recent`` train records ``(step, time, workers)``, newest first:
    the pace over the iterations since the job last changed size (up to PACE_RECORDS of
    them), wall time over iterations, so an evaluation's pause is spread over the epoch
    rather than swinging the ETA by minutes as a short window passes over it; at least
    PACE_MIN of them, else over all ``recent``. Pure."""
    if len(recent) < 2:
        return None
    size = str(recent[0][2])
    same = 1
    while same < len(recent) and str(recent[same][2]) == size:
        same += 1
    window = recent[:same] if same >= PACE_MIN else recent
    (last_step, last_time), (first_step, first_time) = window[0][:2], window[-1][:2]
    pace = (last_time - first_time) / max(last_step - first_step, 1)
    return round(max(0.0, (total_steps - last_step) * pace), 1)


def eta_text(seconds: float | None) -> str:
    """Time left as the pages write it: "44 s", over 90 s in minutes ("3 min")."""
    if seconds is None:
        return ""
    return f"{round(seconds / 60)} min" if seconds > 90 else f"{round(seconds)} s"


def slot_telemetry(slot_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Slot id -> its state and latest telemetry (utilisation, memory), for ``slot_ids``;
    none while Redis is away."""
    try:
        slots = store().list_slots()
    except redis.RedisError as exc:
        log.warning("could not read the slots' telemetry: %s", exc)
        return {}
    return {s.slot_id: {"slot": s.slot_id, "state": s.state, **s.telemetry} for s in slots
            if s.slot_id in slot_ids}  # fmt: skip
