"""What the pages, the API, the scheduler and the slot tasks do to jobs.

State changes are conditional UPDATEs that must touch exactly one row: two processes never
both move a job (healthchecks' habit).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from edtweb import usercaps
from edtweb.redis_access import redis_client, store
from edtweb.tenancy import ledger
from edtweb.training import live
from edtweb.training.models import Job, JobEvent, Metric
from edtweb.training.validation import DEFAULTS, Refused, Submission, train_samples, validated
from protocol.jobstore import JobStore
from scheduler.store import AllocationRecord
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.jobs")


def job_store(job_id: int) -> JobStore:
    return JobStore(redis_client(), str(job_id))


def allocations() -> AllocationRecord:
    """Which slots each job holds, as the active scheduler last recorded them: the one
    answer for pages, API, WebSockets, chart, CLI and the priority preview. Empty while
    Redis is away."""
    try:
        return store().allocations()
    except redis.RedisError as exc:
        log.warning("could not read the allocation record: %s", exc)
        return AllocationRecord()


def spec_path(job_id: int) -> Path:
    return Path(settings.EDT_DATA_DIR) / "jobs" / str(job_id) / "spec.json"


def submit_job(
    owner: Any,
    submission: Submission | None = None,
    spec_extra: dict[str, Any] | None = None,
    **fields: Any,
) -> Job:
    """Queue a job and write its learners' spec (with ``spec_extra``: a WMLA script's argv
    and the values it decides).

    ``submission``: what a submit path judged already (the Train form, the API, WMLA);
    without it, the submission's values among ``fields`` are judged here, once (trusted
    callers: tests, benchmarks). The other ``fields`` are the row's own (name, paths,
    model and dataset): the row is checked for them only."""
    if submission is None:
        asked = {name: fields.pop(name) for name in DEFAULTS if name in fields}
        try:
            submission = validated(asked, train_samples(fields.get("dataset")))
        except Refused as refused:
            raise ValidationError(refused.errors) from None
    if both := sorted(set(fields) & set(DEFAULTS)):
        raise TypeError(f"values beside a judged submission: {both}")
    train = train_samples(fields.get("dataset"))
    fields.setdefault("total_steps", submission.epochs * (train // submission.batch_size))
    job = Job(owner=owner, **fields, **submission.values())
    job.full_clean(exclude=list(DEFAULTS))  # the submission's values were judged
    with transaction.atomic():
        job.save()
        _quietly(job_store(job.pk).forget, "clear stale live state")
        record_event(job.pk, "submitted", f"submitted with max {job.max_workers} worker(s)")
    shutil.rmtree(job.workdir, ignore_errors=True)  # a reused id starts with no old files
    job.workdir.mkdir(parents=True)
    spec = JobSpec.of(
        submission, job_id=job.store_id, model=job.model_path, data=job.data_path,
        workdir=str(job.workdir), seed=job.seed, collective_timeout=job.collective_timeout,
        **(spec_extra or {}),
    )  # fmt: skip
    spec.save(job.spec_path)
    wake_scheduler(f"submit {job.pk}")
    return job


def submit_from_form(
    owner: Any, data: dict[str, Any], spec_extra: dict[str, Any] | None = None
) -> Job:
    """A job from a submit path's cleaned data: ``model`` and ``dataset`` (the model's entry
    file and the dataset's directory), an optional ``name``, and the ``submission`` the path
    judged (without it, the values in ``data`` are judged by :func:`submit_job`), and the
    ``team`` and ``resource_group`` it checked (``edtweb/tenancy/services.py``; none and
    ``default`` unless given). Refused (:class:`usercaps.OverCap`) while the owner has as
    many jobs waiting as ``EDT_USER_MAX_QUEUED_JOBS`` allows."""
    waiting = Job.objects.filter(owner=owner, state=Job.State.QUEUED, sweep__isnull=True)
    usercaps.refuse_past("EDT_USER_MAX_QUEUED_JOBS", waiting.count(), "jobs waiting in the queue",
                         "wait for one to start, or stop one")  # fmt: skip
    model, dataset = data["model"], data["dataset"]
    submission = data.get("submission")
    asked = {} if submission else {k: v for k, v in data.items() if k in DEFAULTS}
    return submit_job(
        owner, submission, spec_extra, name=data.get("name") or f"{model.name} on {dataset.name}",
        model_definition=model, dataset=dataset, model_path=str(model.entry_path),
        data_path=str(dataset.data_dir), team=data.get("team"),
        resource_group=data.get("resource_group") or "default", **asked,
    )  # fmt: skip


_batch: contextvars.ContextVar[list[JobEvent] | None] = contextvars.ContextVar(
    "edt_event_batch", default=None
)


def record_event(job_id: int, kind: str, message: str, **data: Any) -> JobEvent:
    """Add a line to the job's timeline and push it to its pages; inside :func:`batched`,
    written with the block's other events at its end (with the time it was recorded)."""
    event = JobEvent(job_id=job_id, kind=kind, message=message, data=data, at=timezone.now())
    batch = _batch.get()
    if batch is None:
        with transaction.atomic():
            ledger.close([event])  # the slot-time it ends, if any (tenancy/ledger.py)
            event.save()
    else:
        batch.append(event)
    live.publish_event(job_id, event)
    return event


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """The events recorded inside the block are written in one statement and one
    transaction at its end, then every page push of the block is sent, merged
    (:func:`edtweb.training.live.batched`): the scheduler's step. Nested blocks belong to
    the outermost."""
    if _batch.get() is not None:
        yield
        return
    events: list[JobEvent] = []
    token = _batch.set(events)
    with live.batched():
        try:
            yield
        finally:
            _batch.reset(token)
            if events:
                write_events(events)


def write_events(events: list[JobEvent]) -> None:
    """Write ``events`` in one statement, in one transaction with the slot-time they close
    (tenancy/ledger.py): the one way events reach the database besides one at a time."""
    with transaction.atomic():
        ledger.close(events)
        JobEvent.insert_many(events)


def transition(job_id: int, to: str, allowed: Iterable[str], **fields: Any) -> bool:
    """Move the job to state ``to`` only from one of ``allowed``; True if this call did."""
    changed = Job.objects.filter(pk=job_id, state__in=list(allowed)).update(state=to, **fields)
    if changed == 1:
        live.publish_state(job_id, to)
    return changed == 1


def start_job(job_id: int) -> bool:
    return transition(
        job_id,
        Job.State.RUNNING,
        [Job.State.QUEUED, Job.State.SUSPENDED],
        started_at=timezone.now(),
    )


def fail_job(job_id: int, message: str) -> bool:
    """End the job FAILED with the user's error, and tell its learners to stop."""
    if not transition(
        job_id, Job.State.FAILED, Job.ACTIVE, error=message, finished_at=timezone.now()
    ):
        return False
    record_event(job_id, "failed", message)
    job_store(job_id).request_stop()
    log.warning("job %s failed: %s", job_id, message)
    return True


def complete_job(job_id: int) -> bool:
    if not transition(job_id, Job.State.COMPLETED, [Job.State.RUNNING], finished_at=timezone.now()):
        return False
    record_event(job_id, "completed", "training finished; the final model is ready to download")
    return True


def suspend_job(job_id: int, checkpoint_step: int) -> bool:
    if not transition(job_id, Job.State.SUSPENDED, [Job.State.RUNNING]):
        return False
    record_event(
        job_id, "suspended", f"suspended at step {checkpoint_step}; resumes when a slot frees"
    )
    return True


_wakes: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("edt_wakes", default=None)


def wake_scheduler(reason: str) -> None:
    """Wake the scheduler now; inside :func:`one_decision`, at the block's end."""
    pending = _wakes.get()
    if pending is not None:
        pending.append(reason)
        return
    _quietly(lambda: store().wake(reason), "wake the scheduler")


@contextlib.contextmanager
def one_decision() -> Iterator[None]:
    """The scheduler is woken once, when the block ends, for every change made in it: a
    sweep's driver stops the trials it prunes and submits the trials that replace them,
    and the scheduler's next decision sees them all (no slot handed to a trial that grows,
    only to be taken back a moment later for the new one)."""
    if _wakes.get() is not None:
        yield
        return
    pending: list[str] = []
    token = _wakes.set(pending)
    try:
        yield
    finally:
        _wakes.reset(token)
        if pending:
            wake_scheduler(", ".join(pending))


def _quietly(action: Any, what: str) -> None:
    """Redis away: the record in the database stands; the scheduler's periodic tick and a
    fresh start rebuild the rest (docs/architecture.md, "Sources of truth")."""
    try:
        action()
    except redis.RedisError as exc:
        log.warning("could not %s: %s", what, exc)


def set_priority(job: Job, priority: int) -> bool:
    """Change an active job's priority; the scheduler applies it at once, nothing restarts.
    False (and nothing changed) when the job has ended."""
    old = job.priority
    job.priority = priority
    job.full_clean()
    if not Job.objects.filter(pk=job.pk, state__in=Job.ACTIVE).update(priority=priority):
        return False
    record_event(job.pk, "priority", f"priority {old} -> {priority}", old=old, new=priority)
    wake_scheduler(f"priority {job.pk}")
    return True


def stop_job(job_id: int, reason: str = "stopped by its owner") -> bool:
    """Stop a job: its learners checkpoint and exit; it ends STOPPED. ``reason`` goes on
    its timeline (a sweep's driver stops the trials it prunes)."""
    if not transition(job_id, Job.State.STOPPED, Job.ACTIVE, finished_at=timezone.now()):
        return False
    record_event(job_id, "stopped", reason)
    job_store(job_id).request_stop()
    wake_scheduler(f"stop {job_id}")
    return True


def resume_job(job_id: int) -> bool:
    """A stopped or failed job continues from its latest checkpoint: it waits as a
    suspended job does, and the scheduler starts its learners when slots are free."""
    ended = [Job.State.STOPPED, Job.State.FAILED]
    if not transition(job_id, Job.State.SUSPENDED, ended, finished_at=None, error=""):
        return False
    record_event(job_id, "resumed", "resumed by its owner: continues from its latest checkpoint")
    wake_scheduler(f"resume {job_id}")
    return True


def delete_job(job_id: int) -> bool:
    """Delete a job that has ended, with its events, metrics, logs, checkpoints and model.

    False when the job is still queued, running or suspended (stop it first) or is already
    gone: the delete is one conditional statement, so a job that starts meanwhile stays.
    """
    workdir = Job(pk=job_id).workdir
    deleted, _ = Job.objects.filter(pk=job_id).exclude(state__in=Job.ACTIVE).delete()
    if not deleted:
        return False
    _quietly(job_store(job_id).forget, "clear the deleted job's live state")
    shutil.rmtree(workdir, ignore_errors=True)
    log.info("job %s deleted", job_id)
    return True


def persist_metrics(job_id: int, records: list[dict[str, Any]], publish: bool = True) -> int:
    """Store a batch of the job's metric records and (unless told not to) push them to its
    live pages; returns the job's sequence number after them (the count stored so far)."""
    seq, kept = store_metrics(job_id, records)
    if publish and kept:
        live.publish_metrics(job_id, seq - len(kept), seq, kept)
    return seq


@transaction.atomic
def store_metrics(job_id: int, records: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """Store the train and test records among ``records``; returns the job's sequence number
    after them and the records stored.

    Idempotent by (type, step): a record already stored is dropped, so a record written
    twice (a learner's retry after Redis came back, the metrics consumer re-reading the
    stream after a restart, an iteration redone after a failure) is kept once, the first
    time. One transaction: the records and the job's count go in together or not at all."""
    kept = _new_records(job_id, [r for r in records if r.get("type") in ("train", "test")])
    if kept:
        Metric.objects.bulk_create([Metric.from_record(job_id, r) for r in kept])
        changes: dict[str, Any] = {"metrics_count": F("metrics_count") + len(kept)}
        steps = [r["step"] for r in kept if r["type"] == "train"]
        if steps:  # never back: a new rank 0's copy of a step whose record was lost is older
            changes["steps_done"] = Greatest(F("steps_done"), max(steps))
        totals = [r["total_steps"] for r in kept if r.get("total_steps")]
        if totals:  # counted by the learner on the datasets the model's code returned
            changes["total_steps"] = totals[-1]
        Job.objects.filter(pk=job_id).update(**changes)
    seq = int(Job.objects.values_list("metrics_count", flat=True).get(pk=job_id))
    return seq, kept


def _new_records(job_id: int, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` less those whose (type, step) is stored already or came earlier."""
    if not records:
        return []
    steps = {r["step"] for r in records}
    seen = set(Metric.objects.filter(job_id=job_id, step__in=steps).values_list("kind", "step"))
    fresh = []
    for record in records:
        key = (record["type"], record["step"])
        if key not in seen:
            seen.add(key)
            fresh.append(record)
    return fresh
