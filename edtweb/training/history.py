"""What the job pages read over HTTP: metrics (downsampled), logs, files, previews (the
job's live state is ``training.status``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

from django.db.models import F

from edtweb.ownership import visible_job_ids
from edtweb.training.models import Job, Metric
from scheduler.policies import decide


def metrics(job: Job, points: int = 2000) -> dict[str, Any]:
    """Train records thinned in the database to about ``points`` (the last one always
    kept), every test record, and the sequence number live updates continue from."""
    seq = job.metrics_count
    train = Metric.objects.filter(job=job, kind="train")
    total = train.count()
    stride = max(1, -(-total // max(points, 1)))
    fields = ("step", "epoch", "time", "values")
    if stride > 1:
        train = train.annotate(phase=F("step") % stride).filter(phase=0)
    rows = list(train.order_by("step").values_list(*fields))
    last = Metric.objects.filter(job=job, kind="train").order_by("-step").values_list(*fields)[:1]
    if last and (not rows or rows[-1][0] != last[0][0]):
        rows.append(last[0])
    tests = Metric.objects.filter(job=job, kind="test").values_list(*fields)
    return {
        "seq": seq,
        "total": total,
        "train": [_record("train", *r) for r in rows],
        "test": [_record("test", *r) for r in tests],
        "events": events(job),
    }


def _record(
    kind: str, step: int, epoch: int, time: float, values: dict[str, Any]
) -> dict[str, Any]:
    return {"type": kind, "step": step, "epoch": epoch, "time": time, **values}


def events(job: Job) -> list[dict[str, Any]]:
    return [
        {
            "at": e.at.timestamp(),
            "kind": e.kind,
            "message": e.message,
            "workers": e.data.get("workers"),
            "step": e.data.get("step"),
        }
        for e in job.events.all()
    ]


def log_names(job: Job) -> list[str]:
    logs = job.workdir / "logs"
    return sorted(p.stem for p in logs.glob("*.log")) if logs.is_dir() else []


def lead_log(job: Job, names: list[str]) -> str:
    """The log the job page opens on: rank 0's, the slot first in the job's latest
    generation (the member that holds the state and writes the metrics), else the first."""
    latest = job.events.filter(kind="generation").order_by("-at", "-pk").first()
    members = (latest.data or {}).get("members") if latest is not None else None
    first = str(members[0]) if isinstance(members, list) and members else ""
    return first if first in names else (names[0] if names else "")


def log_tail(job: Job, slot: str, offset: int, limit: int = 65536) -> dict[str, Any]:
    """The learner's log from byte ``offset`` (a negative offset: the last bytes)."""
    if slot not in log_names(job):
        return {"slot": slot, "offset": 0, "text": "", "error": "no such learner log"}
    with open_job_file(job, f"logs/{slot}.log") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        f.seek(start)
        data = f.read(limit)
    return {"slot": slot, "offset": start + len(data), "text": data.decode(errors="replace")}


def checkpoints(job: Job) -> list[str]:
    directory = job.workdir / "checkpoints"
    return sorted(p.name for p in directory.glob("step-*.pt")) if directory.is_dir() else []


def open_job_file(job: Job, relative: str) -> BinaryIO:
    """A file of the job's directory, which its (untrusted) learners own: no symbolic link
    is followed and only a regular file opens (workers/sandbox.py, ``open_beneath``)."""
    from workers.sandbox import open_beneath

    return os.fdopen(open_beneath(job.workdir, relative), "rb")


def open_download(job: Job, name: str) -> BinaryIO | None:
    """The final model or a checkpoint, opened; None when the job has no such file."""
    path = downloadable(job, name)
    if path is None:
        return None
    try:
        return open_job_file(job, str(path.relative_to(job.workdir)))
    except OSError:
        return None


def downloadable(job: Job, name: str) -> Path | None:
    if name == "model.pt":
        path = job.workdir / "model.pt"
    elif name in checkpoints(job):
        path = job.workdir / "checkpoints" / name
    else:
        return None
    return path if path.is_file() else None


def preview(job: Job, priority: int, user: Any) -> dict[str, Any]:
    """What the scheduler would decide if ``job`` had ``priority``: "B 5, A 3". The
    scheduler's own inputs (``live_adapter.scheduler_view``: its policy, usable slots,
    holdings, attained service, speedup curves and goodput fits), one priority changed."""
    from edtweb.training.live_adapter import scheduler_view

    view = scheduler_view()
    record = view.record
    snapshots = view.snapshots(priorities={job.pk: priority})
    snapshot = snapshots.get(job.resource_group)
    if snapshot is None or not any(v.id == str(job.pk) for v in snapshot.jobs):
        return {"targets": {}, "text": "the job is not running"}
    rows = [row for row in view.rows if row.group == job.resource_group]
    capacity = snapshot.capacity
    decision = decide(snapshot, record.policy)
    visible = visible_job_ids(user, [row.pk for row in rows])
    names = {str(j.pk): (j.name if j.pk in visible else "others") for j in rows}
    targets = {names[k]: v for k, v in decision.targets.items()}
    text = ", ".join(
        f"{names[k]} {v}" for k, v in sorted(decision.targets.items(), key=lambda kv: -kv[1])
    )
    return {"targets": targets, "text": text, "capacity": capacity}
