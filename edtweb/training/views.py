from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from edtweb.datasets.models import Dataset
from edtweb.ownership import get_owned, owned
from edtweb.registry.models import ModelDefinition
from edtweb.training import history, services
from edtweb.training.forms import TrainForm
from edtweb.training.models import Job


@login_required
def train(request: HttpRequest) -> HttpResponse:
    sources = {
        "owner_models": owned(request, ModelDefinition),
        "owner_datasets": owned(request, Dataset),
    }
    form = TrainForm(request.POST or None, initial=request.GET.dict(), **sources)
    if request.method == "POST" and form.is_valid():
        job = services.submit_from_form(request.user, form.cleaned_data)
        return redirect("job", job.pk)
    return render(request, "training/train.html", {"form": form, "nav": "train"})


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = list(owned(request, Job).select_related("dataset", "model_definition")[:200])
    for job in jobs:
        job.live = history.state(job) if job.state == Job.State.RUNNING else {}
    return render(request, "training/jobs.html", {"jobs": jobs, "nav": "jobs"})


@login_required
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_owned(request, Job, pk)
    context = {
        "job": job,
        "nav": "jobs",
        "logs": history.log_names(job),
        "checkpoints": history.checkpoints(job),
    }
    return render(request, "training/job.html", context)


@login_required
@require_GET
def job_metrics(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    return JsonResponse(history.metrics(job, int(request.GET.get("points", 2000))))


@login_required
@require_GET
def job_state(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    # The job page's poll also follows its files; the jobs list (history.state) need not.
    files = {"logs": history.log_names(job), "checkpoints": history.checkpoints(job)}
    return JsonResponse({**history.state(job), **files})


@login_required
@require_GET
def job_log(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    slot, offset = request.GET.get("slot", ""), int(request.GET.get("offset", 0))
    return JsonResponse(history.log_tail(job, slot, offset))


@login_required
@require_POST
def job_priority(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    try:
        services.set_priority(job, int(request.POST.get("priority", "")))
    except (ValueError, ValidationError):
        return JsonResponse(
            {"error": "priority must be a whole number from 1 to 10000"}, status=400
        )
    return JsonResponse({"priority": job.priority})


@login_required
@require_GET
def job_priority_preview(request: HttpRequest, pk: int) -> JsonResponse:
    job = get_owned(request, Job, pk)
    try:
        priority = int(request.GET.get("priority", ""))
    except ValueError:
        return JsonResponse({"error": "priority must be a whole number"}, status=400)
    return JsonResponse(history.preview(job, priority, request.user))


@login_required
@require_POST
def job_stop(request: HttpRequest, pk: int) -> HttpResponse:
    services.stop_job(get_owned(request, Job, pk).pk)
    return redirect("job", pk)


@login_required
@require_POST
def job_delete(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_owned(request, Job, pk)
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
    path = history.downloadable(job, name)
    if path is None:
        raise Http404("no such file")
    return FileResponse(path.open("rb"), as_attachment=True, filename=f"job{job.pk}-{path.name}")
