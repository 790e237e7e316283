"""What the pages, the API, the scheduler and the slot tasks do to jobs.

State changes are conditional UPDATEs that must touch exactly one row: two processes never
both move a job (healthchecks' habit).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from edtweb.training import live
from edtweb.training.models import Job, JobEvent, Metric
from scheduler.store import JobStore, Store, connect

log = logging.getLogger("edt.jobs")


def job_store(job_id: int) -> JobStore:
    return JobStore(connect(settings.REDIS_URL), str(job_id))


def spec_path(job_id: int) -> Path:
    return Path(settings.EDT_DATA_DIR) / "jobs" / str(job_id) / "spec.json"


def submit_job(owner: Any, **fields: Any) -> Job:
    """Validate and queue a job; its spec is written for its learners."""
    job = Job(owner=owner, **fields)
    job.full_clean()
    if job.min_workers > job.max_workers:
        from django.core.exceptions import ValidationError

        raise ValidationError({"min_workers": "min workers cannot exceed max workers"})
    with transaction.atomic():
        job.save()
        _quietly(job_store(job.pk).forget, "clear stale live state")
        record_event(job.pk, "submitted", f"submitted with max {job.max_workers} worker(s)")
    shutil.rmtree(job.workdir, ignore_errors=True)  # a reused id starts with no old files
    job.workdir.mkdir(parents=True)
    job.spec().save(job.spec_path)
    wake_scheduler(f"submit {job.pk}")
    return job


def submit_from_form(owner: Any, data: dict[str, Any]) -> Job:
    """A job from the Train form: the model's entry file and the dataset's directory."""
    model, dataset = data["model"], data["dataset"]
    train = dataset.summary.get("splits", {}).get("train", {}).get("count", 0)
    fields = {
        k: data[k]
        for k in (
            "epochs",
            "batch_size",
            "max_workers",
            "min_workers",
            "priority",
            "checkpoint_every",
            "lr",
            "max_micro_batch",
        )
    }
    name = data.get("name") or f"{model.name} on {dataset.name}"
    return submit_job(
        owner,
        name=name,
        model_definition=model,
        dataset=dataset,
        model_path=str(model.entry_path),
        data_path=str(dataset.data_dir),
        total_steps=data["epochs"] * (train // data["batch_size"]),
        **fields,
    )


def record_event(job_id: int, kind: str, message: str, **data: Any) -> JobEvent:
    event = JobEvent.objects.create(job_id=job_id, kind=kind, message=message, data=data)
    live.publish_event(job_id, event)
    return event


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


def wake_scheduler(reason: str) -> None:
    _quietly(lambda: Store(connect(settings.REDIS_URL)).wake(reason), "wake the scheduler")


def _quietly(action: Any, what: str) -> None:
    """Redis away: the record in the database stands; the scheduler's periodic tick and a
    fresh start rebuild the rest (DESIGN.md, "Sources of truth")."""
    try:
        action()
    except redis.RedisError as exc:
        log.warning("could not %s: %s", what, exc)


def set_priority(job: Job, priority: int) -> None:
    """Change a job's priority; the scheduler applies it at once, nothing restarts."""
    old = job.priority
    job.priority = priority
    job.full_clean()
    Job.objects.filter(pk=job.pk).update(priority=priority)
    record_event(job.pk, "priority", f"priority {old} -> {priority}", old=old, new=priority)
    wake_scheduler(f"priority {job.pk}")


def stop_job(job_id: int) -> bool:
    """Stop a job: its learners checkpoint and exit; it ends STOPPED."""
    if not transition(job_id, Job.State.STOPPED, Job.ACTIVE, finished_at=timezone.now()):
        return False
    record_event(job_id, "stopped", "stopped by its owner")
    job_store(job_id).request_stop()
    wake_scheduler(f"stop {job_id}")
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
    kept = [r for r in records if r.get("type") in ("train", "test")]
    if not kept:
        return int(Job.objects.values_list("metrics_count", flat=True).get(pk=job_id))
    Metric.objects.bulk_create([Metric.from_record(job_id, r) for r in kept])
    steps = [r["step"] for r in kept if r["type"] == "train"]
    changes: dict[str, Any] = {"metrics_count": F("metrics_count") + len(kept)}
    if steps:
        changes["steps_done"] = max(steps)
    Job.objects.filter(pk=job_id).update(**changes)
    seq = int(Job.objects.values_list("metrics_count", flat=True).get(pk=job_id))
    if publish:
        live.publish_metrics(job_id, seq - len(kept), seq, kept)
    return seq


def learner_exited(job_id: int, slot: str, code: int) -> None:
    """A slot's learner ended: exit status 2 means the user's code failed."""
    if code != 2:
        return
    errors = job_store(job_id).errors()
    if errors:
        first = errors[0]
        message = f"{first['message']} ({first['trace']})" if first["trace"] else first["message"]
    else:
        message = f"the learner on {slot} failed; see its log"
    fail_job(job_id, message)
