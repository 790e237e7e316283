from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import redis
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import FloatField, Max
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import dateformat, timezone
from django.views.decorators.http import require_GET, require_POST

from edtweb import params, usercaps
from edtweb.datasets.models import Dataset
from edtweb.ownership import OWN, STEER, Viewer, get_owned, login_required_json, owned
from edtweb.registry.models import ModelDefinition
from edtweb.tenancy import services as tenancy
from edtweb.training import history, services
from edtweb.training.forms import TrainForm
from edtweb.training.models import Job, Metric
from edtweb.training.status import status_of, statuses
from edtweb.training.validation import BOUNDS, DEFAULTS

CLONED = ("epochs", "batch_size", "max_workers", "min_workers", "priority", "checkpoint_every",
          "batch_min", "batch_max")  # fmt: skip


@login_required
def train(request: HttpRequest) -> HttpResponse:
    sources = {
        "owner_models": owned(request, ModelDefinition),
        "owner_datasets": owned(request, Dataset),
        "teams": tenancy.teams_of(request.user),
        "default_team": tenancy.default_team(request.user),
    }
    initial = {"max_workers": default_workers(sources["default_team"]), **request.GET.dict()}
    form = TrainForm(request.POST or None, initial=initial, **sources)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.submit_from_form(request.user, form.cleaned_data)
        except usercaps.OverCap as over:
            form.add_error(None, str(over))
            return render(request, "training/train.html", {"form": form, "nav": "train"},
                          status=over.status)  # fmt: skip
        return redirect("job", job.pk)
    return render(request, "training/train.html", {"form": form, "nav": "train"})


def default_workers(team: Any) -> int:
    """The Train form's max workers: the slots of the team's group (``default`` without a
    team) at the scheduler's last decision, else alive now, capped by the team's limit, so
    the default job grows to what its group has."""
    from edtweb.redis_access import store
    from edtweb.training.live_adapter import tenancy as read_tenancy
    from scheduler.groups import partition

    group = team.resource_group_id if team is not None else "default"
    try:
        record = store().allocations()
        slots = record.capacity_of(group)
        if not record.groups and not record.capacity:  # no decision yet: by the rules
            slots = len(partition(store().alive_slots(), read_tenancy().rules).get(group, []))
    except redis.RedisError:
        slots = 0
    if team is not None and team.limit is not None:
        slots = min(slots, team.limit)
    top = int(BOUNDS["max_workers"].high or slots)
    return max(1, min(top, slots)) if slots > 0 else int(DEFAULTS["max_workers"])


JOB_COLUMNS = [
    ("name", "Job"),
    ("", "Model"),
    ("", "Dataset"),
    ("", "Owner"),
    ("", "State"),
    ("", "Workers"),
    ("", "Progress"),
    ("best", "Best accuracy"),
    ("duration", "Duration"),
    ("priority", "Priority"),
    ("submitted", "Submitted"),
]


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = list(owned(request, Job).select_related("dataset", "model_definition", "owner")[:200])
    best = best_accuracy([job.pk for job in jobs])
    live = statuses(jobs, request.user)
    now = timezone.now()
    viewer = Viewer(request.user)
    for job in jobs:
        job.status = live[job.pk]
        job.can_steer = viewer.may(job, STEER)
        job.best = best.get(job.pk)
        ran = ((job.finished_at or now) - job.started_at) if job.started_at else None
        job.seconds = int(ran.total_seconds()) if ran else 0
        job.duration = human_duration(job.seconds) if ran else ""
    context = {"jobs": jobs, "nav": "jobs", "columns": JOB_COLUMNS}
    return render(request, "training/jobs.html", context)


def best_accuracy(job_ids: list[int]) -> dict[int, float]:
    """Each job's best test accuracy so far (jobs without a test record are left out)."""
    accuracy = Cast(KT("values__test_accuracy"), FloatField())
    rows = (
        Metric.objects.filter(job_id__in=job_ids, kind="test")
        .values("job_id")
        .annotate(best=Max(accuracy))
        .values_list("job_id", "best")
    )
    return {job_id: value for job_id, value in rows if value is not None}


@login_required
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_owned(request, Job, pk)
    status = status_of(job, request.user)
    viewer = Viewer(request.user)
    context = {
        "job": job,
        "status": status,
        "can_steer": viewer.may(job, STEER),  # priority, stop: a member only reads
        "can_own": viewer.may(job, OWN),  # resume, delete
        "nav": "jobs",
        "logs": (logs := history.log_names(job)),
        "lead_log": history.lead_log(job, logs),
        "checkpoints": history.checkpoints(job),
        "waiting": status.waiting,
        "duration": duration(job),
        "clone_url": clone_url(job),
    }
    return render(request, "training/job.html", context)


def duration(job: Job) -> str:
    """How long the job has run (until it ended, or until now): "1 h 4 min", "12 s"."""
    if job.started_at is None:
        return ""
    seconds = int(((job.finished_at or timezone.now()) - job.started_at).total_seconds())
    return human_duration(seconds)


def human_duration(seconds: int) -> str:
    seconds = max(0, seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if hours:
        return f"{hours} h {minutes} min" if hours < 48 else f"{seconds // 86400} days"
    return f"{minutes} min {seconds % 60} s"


def clone_url(job: Job) -> str:
    """The Train page filled in with this job's settings."""
    fields: dict[str, object] = {k: getattr(job, k) for k in CLONED}
    fields.update(name=f"{job.name} (copy)", lr=job.lr, max_micro_batch=job.max_micro_batch)
    if job.model_definition_id:
        fields["model"] = job.model_definition_id
    if job.dataset_id:
        fields["dataset"] = job.dataset_id
    return reverse("train") + "?" + urlencode(fields)


@login_required_json
@require_GET
def job_metrics(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    try:
        points = params.whole(request.GET, "points", 2000, 1, 100_000)
    except params.BadParameter as exc:
        return exc.response()
    return JsonResponse(history.metrics(job, points))


@login_required_json
@require_GET
def job_state(request: HttpRequest, pk: int) -> JsonResponse:
    """The job's status (``training.status``: what the jobs list and the job page show),
    with what the job page's poll also follows: its files and times."""
    job = get_owned(request, Job, pk)
    logs = history.log_names(job)
    files = {"logs": logs, "lead_log": history.lead_log(job, logs),
             "checkpoints": history.checkpoints(job)}  # fmt: skip
    times = {
        "started": when(job.started_at),
        "ended": when(job.finished_at),
        "duration": duration(job),
    }
    return JsonResponse({**status_of(job, request.user).as_dict(), **files, **times})


def when(at: datetime | None) -> str:
    """A moment as the job page writes it (its Configuration card)."""
    return dateformat.format(timezone.localtime(at), "Y-m-d H:i:s") if at else ""


@login_required
@require_GET
def job_metrics_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """Every metric record of the job (the charts show a thinned history), as CSV."""
    job = get_owned(request, Job, pk)
    rows = Metric.objects.filter(job=job).order_by("kind", "step", "pk")
    keys = sorted({k for values in rows.values_list("values", flat=True)[:1000] for k in values})
    response = StreamingHttpResponse(_csv_lines(rows, keys), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="job{job.pk}-metrics.csv"'
    return response


class _Line:
    def write(self, value: str) -> str:
        return value


def _csv_lines(rows: object, keys: list[str]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(["kind", "step", "epoch", "time", *keys])
    for m in rows.iterator(chunk_size=2000):  # type: ignore[attr-defined]
        yield writer.writerow([m.kind, m.step, m.epoch, m.time, *(m.values.get(k) for k in keys)])


@login_required
@require_POST
def job_resume(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_owned(request, Job, pk, OWN)
    if not services.resume_job(job.pk):
        messages.error(request, f"Job {job.pk} is {job.get_state_display().lower()}: only a "
                       "stopped or failed job resumes.")  # fmt: skip
    return redirect("job", pk)


@login_required_json
@require_GET
def job_log(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    try:
        offset = params.whole(request.GET, "offset", 0)
    except params.BadParameter as exc:
        return exc.response()
    return JsonResponse(history.log_tail(job, request.GET.get("slot", ""), offset))


@login_required_json
@require_POST
def job_priority(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk, STEER)
    try:
        services.set_priority(job, int(request.POST.get("priority", "")))
    except (ValueError, ValidationError):
        span = BOUNDS["priority"].span
        return JsonResponse({"error": f"priority must be a whole number from {span}"}, status=400)
    return JsonResponse({"priority": job.priority})


@login_required_json
@require_GET
def job_priority_preview(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    bound = BOUNDS["priority"]
    try:
        priority = params.whole(request.GET, "priority", None, int(bound.low),
                                int(bound.high or bound.low))  # fmt: skip
    except params.BadParameter as exc:
        return exc.response()
    return JsonResponse(history.preview(job, priority, request.user))


@login_required
@require_POST
def job_stop(request: HttpRequest, pk: int) -> HttpResponse:
    services.stop_job(get_owned(request, Job, pk, STEER).pk)
    return redirect("job", pk)


@login_required
@require_POST
def job_delete(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_owned(request, Job, pk, OWN)
    if not services.delete_job(job.pk):
        messages.error(
            request, f"Job {job.pk} is {job.get_state_display().lower()}: stop it first."
        )
        return redirect("job", pk)
    messages.success(request, f"Job {job.pk} ({job.name}) and its files were deleted.")
    return redirect("jobs")


@login_required
@require_GET
def job_download(request: HttpRequest, pk: int, name: str) -> FileResponse:
    job = get_owned(request, Job, pk)
    opened = history.open_download(job, name)
    if opened is None:
        raise Http404("no such file")
    return FileResponse(opened, as_attachment=True, filename=f"job{job.pk}-{name}")
