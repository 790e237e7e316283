"""The sweep pages: the sweeps list, New sweep (the form; Clone starts it from a sweep),
a sweep's page (its trials, best trial, objective over time, parallel coordinates, loss
curves overlaid; Stop and Resume), polled for its state and curves, and the compare page
for any jobs picked on the jobs list (curves overlaid, configurations side by side with
what differs marked, final metrics, CSV). Every object is its owner's: another user's is
a 404, as one that does not exist (edtweb/ownership.py). A sweep's state is read through
``edtweb/sweeps/state.py`` alone."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from edtweb import params, usercaps
from edtweb.datasets.models import Dataset
from edtweb.ownership import get_owned, owned
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import services
from edtweb.sweeps.compare import MAX_JOBS, compare, csv_rows, curves
from edtweb.sweeps.forms import TYPE_CHOICES, Row, SweepForm, rows_from, rows_of, space_of
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.space import PRUNING, SpaceRefused
from edtweb.sweeps.state import SweepView, TrialView, view, views
from edtweb.training.models import Job
from edtweb.training.status import statuses
from edtweb.training.views import human_duration

MAX_CURVES = 40  # trials' curves on a sweep's page at most (a chart of more says nothing)
FORM_FIELDS = ("objective", "direction", "algorithm", "max_trials", "max_parallel", "epochs",
               "batch_size", "lr", "max_workers")  # fmt: skip


@login_required
def sweep_list(request: HttpRequest) -> HttpResponse:
    sweeps = list(
        owned(request, Sweep).select_related("owner", "model_definition", "dataset")[:200]
    )
    shown = views(sweeps)
    for sweep in sweeps:
        sweep.view = shown[sweep.pk]
    return render(request, "sweeps/list.html", {"sweeps": sweeps, "nav": "sweeps"})


@login_required
def sweep_new(request: HttpRequest) -> HttpResponse:
    """New sweep; ``?from=<id>``: a clone of that sweep, every field filled in."""
    models, datasets = owned(request, ModelDefinition), owned(request, Dataset)
    source = None
    if request.GET.get("from"):
        try:
            source = get_owned(request, Sweep, int(request.GET["from"]))
        except ValueError:
            raise Http404("no such sweep") from None
    initial = _initial(source) if source else {}
    form = SweepForm(request.POST or None, initial=initial, models=models, datasets=datasets)
    rows = (
        rows_of(request.POST)
        if request.method == "POST"
        else (rows_from(source.space) if source else [Row("lr", "loguniform", "0.001", "0.1")])
    )
    space_errors: list[str] = []
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            sweep = services.create_sweep(
                request.user, data["model"], data["dataset"],
                {**form.values(), "space": space_of(rows)}, name=data.get("name") or "",
                seed=data.get("seed"),
            )  # fmt: skip
        except usercaps.OverCap as over:
            form.add_error(None, str(over))
        except SpaceRefused as refused:
            for field, why in refused.errors.items():
                if field == "space":
                    space_errors += why
                elif field == "max_time":
                    form.add_error("max_minutes", why)
                elif field in form.fields:
                    form.add_error(field, why)
                else:
                    form.add_error(None, f"{field}: {' '.join(why)}")
        else:
            services.created(sweep)
            messages.success(request, f"Sweep {sweep.pk} created: its first trials start "
                                      f"as soon as the driver asks for them.")  # fmt: skip
            return redirect("sweep", sweep.pk)
    context = {"form": form, "rows": rows or [Row()], "types": TYPE_CHOICES,
               "space_errors": space_errors, "source": source, "nav": "sweeps"}  # fmt: skip
    return render(request, "sweeps/new.html", context)


def _initial(sweep: Sweep) -> dict[str, Any]:
    found: dict[str, Any] = {k: getattr(sweep, k) for k in FORM_FIELDS}
    found.update(
        name=f"{sweep.name} (clone)",
        model=sweep.model_definition_id,
        dataset=sweep.dataset_id,
        max_minutes=sweep.max_time / 60,
        seed=sweep.seed,
    )
    return found


@login_required
def sweep_detail(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = get_owned(request, Sweep, pk)
    shown = view(sweep)
    context = {
        "sweep": sweep, "view": shown, "state": state_of(request, sweep, shown),
        "params": list(sweep.space), "pruning": PRUNING.get(sweep.algorithm, ""),
        "can_own": request.user.is_staff or sweep.owner_id == request.user.pk,
        "nav": "sweeps",
    }  # fmt: skip
    return render(request, "sweeps/detail.html", context)


def state_of(request: HttpRequest, sweep: Sweep, shown: SweepView) -> dict[str, Any]:
    """The sweep's view with what the page shows beside each trial: its workers now and
    how long it has run; and whether the best trial's model can be downloaded."""
    jobs = {j.pk: j for j in Job.objects.filter(sweep=sweep)}
    live = statuses(list(jobs.values()), request.user)
    trials = [_trial(t, jobs.get(t.job), live.get(t.job)) for t in shown.trials]
    best = None
    if shown.best is not None:
        best = _trial(shown.best, jobs.get(shown.best.job), live.get(shown.best.job))
        best["download"] = (reverse("job-download", args=[shown.best.job, "model.pt"])
                            if best["state"] == Job.State.COMPLETED else "")  # fmt: skip
    fields = shown.as_dict()
    fields.update(
        trials=trials,
        best=best,
        elapsed_text=human_duration(int(shown.elapsed)),
        objective=sweep.objective,
        direction=sweep.direction,
        space=sweep.space,
    )
    return fields


def _trial(trial: TrialView, job: Job | None, status: Any) -> dict[str, Any]:
    found = trial.as_dict()
    started = job.started_at if job else None
    ran = ((trial.finished_at or _now()) - started).total_seconds() if started else 0
    found.update(
        workers=status.workers if status else 0,
        max_workers=job.max_workers if job else 0,
        seconds=round(ran, 1), duration=human_duration(int(ran)) if started else "",
        url=reverse("job", args=[trial.job]),
        created_at=trial.created_at.timestamp(),
        finished_at=trial.finished_at.timestamp() if trial.finished_at else None,
    )  # fmt: skip
    return found


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


@login_required
@require_GET
def sweep_state(request: HttpRequest, pk: int) -> JsonResponse:
    sweep = get_owned(request, Sweep, pk)
    return JsonResponse(state_of(request, sweep, view(sweep)))


@login_required
@require_GET
def sweep_curves(request: HttpRequest, pk: int) -> JsonResponse:
    """The trials' loss curves and evaluations, to overlay: every trial's, or of a sweep of
    more than ``MAX_CURVES`` trials the best one's and the latest others'."""
    sweep = get_owned(request, Sweep, pk)
    trials = list(Job.objects.filter(sweep=sweep).order_by("trial_number", "pk"))
    if len(trials) > MAX_CURVES:
        best = view(sweep).best
        keep = {t.pk for t in trials[-(MAX_CURVES - 1) :]} | ({best.job} if best else set())
        trials = [t for t in trials if t.pk in keep]
    return JsonResponse({"curves": curves(trials)})


@login_required
@require_POST
def sweep_stop(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = _own(request, pk)
    if not services.stop_sweep(sweep):
        messages.error(request, f"Sweep {pk} has already ended.")
    return redirect("sweep", pk)


@login_required
@require_POST
def sweep_resume(request: HttpRequest, pk: int) -> HttpResponse:
    sweep = _own(request, pk)
    if not services.resume_sweep(sweep):
        messages.error(request, f"Sweep {pk} is {sweep.state.lower()}: only a stopped sweep "
                                f"resumes.")  # fmt: skip
    return redirect("sweep", pk)


def _own(request: HttpRequest, pk: int) -> Sweep:
    sweep: Sweep = get_owned(request, Sweep, pk)
    return sweep


# Compare ---------------------------------------------------------------------------------


def _picked(request: HttpRequest) -> list[Job]:
    """The jobs of ``?ids=1,2,3`` (up to MAX_JOBS), each one the user may see: any other
    is a 404, as one that does not exist."""
    try:
        ids = params.id_list("ids", request.GET.get("ids", ""), MAX_JOBS)
    except params.BadParameter as exc:
        raise Http404(f"pick 1 to {MAX_JOBS} jobs on the jobs list ({exc})") from None
    found = {j.pk: j for j in owned(request, Job).filter(pk__in=params.storable(ids))
             .select_related("model_definition", "dataset")}  # fmt: skip
    missing = [pk for pk in ids if pk not in found]
    if missing:
        raise Http404(f"no job {missing[0]}")
    return [found[pk] for pk in ids]


@login_required
@require_GET
def compare_page(request: HttpRequest) -> HttpResponse:
    jobs = _picked(request)
    compared = compare(jobs)
    rows = [{"key": key, "differs": key in compared["differs"],
             "values": [j["config"].get(key) for j in compared["jobs"]]}
            for key in compared["config_keys"]]  # fmt: skip
    finals = [{"key": key, "values": [j["final"].get(key) for j in compared["jobs"]]}
              for key in compared["final_keys"]]  # fmt: skip
    ids = ",".join(str(j.pk) for j in jobs)
    context = {"compared": compared, "rows": rows, "finals": finals, "ids": ids, "nav": "jobs"}
    return render(request, "sweeps/compare.html", context)


@login_required
@require_GET
def compare_curves(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"curves": curves(_picked(request))})


@login_required
@require_GET
def compare_csv(request: HttpRequest) -> HttpResponse:
    jobs = _picked(request)
    out = io.StringIO()
    csv.writer(out).writerows(csv_rows(compare(jobs)))
    response = HttpResponse(out.getvalue(), content_type="text/csv")
    names = "-".join(str(j.pk) for j in jobs)
    response["Content-Disposition"] = f'attachment; filename="compare-{names}.csv"'
    return response
