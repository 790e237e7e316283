"""The web's side of the live scheduler's ports (scheduler/live/ports.py): job rows from
the database, their transitions and timelines through ``services``, Redis and the Celery
app of this process (docs/architecture.md, "Layering")."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import OperationalError

from edtweb.celery import app as celery_app
from edtweb.redis_access import redis_client
from edtweb.training import services
from edtweb.training.models import Job, Metric
from edtweb.training.standing import idle_rule
from protocol.learner_task import LearnerPaths
from scheduler.groups import DEFAULT as DEFAULT_GROUP
from scheduler.live import speedups
from scheduler.live.cache import Timed
from scheduler.live.job import Controlled, JobRunner
from scheduler.live.loop import LiveScheduler
from scheduler.live.ports import JobRow, Ports, Tenancy
from scheduler.live.snapshot import Inputs, Measures, SnapshotBuilder, per_host
from scheduler.live.speedups import WINDOW
from scheduler.policies import Snapshot, Team
from scheduler.store import AllocationRecord

NEW_BY_ID = 500  # at most this many new jobs' times are read by id; more: every job's


# A row's columns as the database names them: JobRow's fields, its owner's name, its team.
HEAD = ("pk", "name", "state", "priority", "max_workers", "min_workers", "collective_timeout")
TAIL = ("owner__username", "team_id", "resource_group", "batch_size", "batch_min", "batch_max",
        "max_micro_batch")  # fmt: skip


def _row(head: tuple[Any, ...], created_at: datetime, tail: tuple[Any, ...]) -> JobRow:
    pk, name, state, priority, max_workers, min_workers, timeout = head
    owner, team, group, batch_size, batch_min, batch_max, max_micro = tail
    return JobRow(pk, name, state, priority, max_workers, min_workers, timeout, created_at,
                  owner or "", str(team or ""), group or DEFAULT_GROUP, batch_size, batch_min,
                  batch_max, max_micro)  # fmt: skip


def job_rows(jobs: Any, created: dict[int, datetime] | None = None) -> list[JobRow]:
    """The rows of the queryset ``jobs``. With ``created`` (a cache kept between calls:
    a job's submission time never changes), only the times of the jobs not in it yet are
    read, and parsed; those of jobs no longer in ``jobs`` are dropped now and then."""
    width = len(HEAD)
    if created is None:
        rows = jobs.values_list(*HEAD, "created_at", *TAIL)
        return [_row(row[:width], row[width], row[width + 1 :]) for row in rows]
    rows = list(jobs.values_list(*HEAD, *TAIL))
    new = [row[0] for row in rows if row[0] not in created]
    if len(new) > NEW_BY_ID or len(created) > 2 * len(rows) + NEW_BY_ID:
        created.clear()  # every active job's, afresh
        created.update(jobs.values_list("pk", "created_at"))
    elif new:
        created.update(jobs.filter(pk__in=new).values_list("pk", "created_at"))
    return [_row(row[:width], created[row[0]], row[width:]) for row in rows if row[0] in created]


def tenancy() -> Tenancy:
    """The groups' rules and the teams, as the scheduler reads them (edtweb/tenancy)."""
    from edtweb.tenancy import services as tenancy_services
    from edtweb.tenancy.models import Team as TeamRow

    teams = tuple(Team(**fields) for fields in tenancy_services.policy_teams())
    homes = tuple((str(pk), str(group)) for pk, group in
                  TeamRow.objects.values_list("pk", "resource_group"))  # fmt: skip
    shrink_teams, shrink_groups = tenancy_services.idle_shrinkers()
    return Tenancy(tuple(tenancy_services.rules()), teams, homes, shrink_teams, shrink_groups)


def schedulable_jobs() -> Any:
    """The jobs a decision is about: active ones, less queued WMLA execs whose model is
    still being checked (edtweb/registry/services.py)."""
    return Job.objects.filter(state__in=Job.ACTIVE).exclude(
        state=Job.State.QUEUED, model_definition__status="CHECKING"
    )


def observed_rates(job_id: int) -> dict[int, float]:
    """Worker count -> median samples/s over the job's latest iterations (the pages'
    previews; the scheduler derives the same from ``JobBook.train_records``)."""
    return speedups.observed_rates(train_records(job_id))


def train_records(job_id: int, window: int = WINDOW) -> list[dict[str, Any]]:
    """The job's latest ``window`` train records, each with its ``step`` (goodput mode's
    noise scale and iteration times: scheduler/policies/throughput_fit.py)."""
    rows = (
        Metric.objects.filter(job_id=job_id, kind="train")
        .order_by("-step")
        .values_list("step", "values")[:window]
    )
    return [{**values, "step": step} for step, values in rows]


@dataclass(frozen=True)
class SchedulerView:
    """What the scheduler's next decision would read, as the previews rebuild it: the job
    rows, the usable slots per group and the slots each job holds at its last decision (the
    allocation record), and the policy's other inputs from the one builder the live loop
    uses (``Measures``: speedup curves, goodput fits, attained service, host size)."""

    record: AllocationRecord
    rows: list[JobRow]
    tenancy: Tenancy
    capacities: dict[str, int]
    held: dict[int, int]
    inputs: Inputs

    def snapshots(self, tenancy: Tenancy | None = None,
                  priorities: dict[int, int] | None = None) -> dict[str, Snapshot]:  # fmt: skip
        """One snapshot per group, as the scheduler would build it, with ``tenancy`` and
        ``priorities`` as a what-if changes them."""
        return SnapshotBuilder().build_groups(self.rows, self.capacities, self.held,
                                              tenancy or self.tenancy, self.inputs,
                                              priorities)  # fmt: skip


def scheduler_view() -> SchedulerView:
    """The scheduler's inputs now, for the priority and Teams previews (one builder)."""
    from edtweb.redis_access import store
    from edtweb.tenancy.models import ResourceGroup
    from scheduler.groups import partition

    registry = store()
    record, alive = registry.allocations(), registry.alive_slots()
    now = tenancy()
    rows = job_rows(schedulable_jobs().order_by("created_at"))
    capacities = dict.fromkeys(ResourceGroup.objects.values_list("name", flat=True), 0)
    if record.groups:  # the usable slots per group at the scheduler's last decision
        capacities.update(record.groups)
    else:  # none yet: the alive slots, by the rules
        capacities.update({g: len(s) for g, s in partition(alive, now.rules).items()})
    held = {pk: len(a.slots) for pk, a in record.jobs.items()}
    inputs = Measures(record.policy, train_records).inputs(rows, record.attained, per_host(alive))
    held_idle = {pk: by for pk, (_, by) in record.idle.items() if by}  # at their minimum
    return SchedulerView(record, rows, now, capacities, held, replace(inputs, idle=held_idle))


class DjangoJobBook:
    """``scheduler.live.ports.JobBook`` over the database."""

    AWAY: tuple[type[Exception], ...] = (OperationalError,)
    TENANCY_EVERY = 1.0  # seconds an admin's change of teams or groups may wait

    def __init__(self) -> None:
        self.tenancy_read: Timed[str, Tenancy] = Timed(self.TENANCY_EVERY)

    def schedulable(self, created: dict[int, datetime]) -> list[JobRow]:
        return job_rows(schedulable_jobs(), created)

    def start(self, job_id: int) -> bool:
        return services.start_job(job_id)

    def fail(self, job_id: int, message: str) -> bool:
        return services.fail_job(job_id, message)

    def complete(self, job_id: int) -> bool:
        return services.complete_job(job_id)

    def suspend(self, job_id: int, checkpoint_step: int) -> bool:
        return services.suspend_job(job_id, checkpoint_step)

    def record_event(self, job_id: int, kind: str, message: str, **data: Any) -> None:
        services.record_event(job_id, kind, message, **data)

    def batched(self) -> AbstractContextManager[None]:
        return services.batched()

    def train_records(self, job_id: int) -> list[dict[str, Any]]:
        return train_records(job_id)

    def tenancy(self) -> Tenancy:
        """Read at most once a second (three queries; a step may run many times a second)."""
        return self.tenancy_read.get("tenancy", tenancy)

    def paths(self, job_ids: list[int]) -> dict[int, LearnerPaths]:
        """The record's paths (never the job's own files: its learners own its directory
        and could rewrite its spec to name another's), in one query."""
        rows = Job.objects.filter(pk__in=job_ids).values_list("pk", "data_path", "model_path")
        jobs = Path(settings.EDT_DATA_DIR) / "jobs"
        return {pk: LearnerPaths(Path(data), Path(model), jobs / str(pk),
                                 jobs / str(pk) / "spec.json")
                for pk, data, model in rows}  # fmt: skip


def live_ports() -> Ports:
    """This process's ports: the database, its Redis client, its Celery app."""
    return Ports(
        book=DjangoJobBook(),
        redis=redis_client,
        celery=celery_app,
        redis_url=settings.REDIS_URL,
        secret=settings.SECRET_KEY,
        start_failures=settings.EDT_START_FAILURES,
        move_every=settings.EDT_MOVE_INTERVAL,
        idle_rule=idle_rule(),
    )


def live_scheduler(policy: str = "fairshare") -> LiveScheduler:
    return LiveScheduler(live_ports(), policy)


def runner_for(job: Controlled, resume: bool = True) -> JobRunner:
    """One job's runner outside the live loop (tests drive a job's protocol by hand)."""
    return JobRunner.celery(job, live_ports(), resume)
