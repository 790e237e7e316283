"""Jobs side by side: each one's configuration (the job's values and a trial's
hyperparameters) and its final metrics, with the configuration keys whose values differ
(the API's ``jobs/compare/``, ``edt compare``; the compare page reads the same)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import F

from edtweb.training.models import Job, Metric

MAX_JOBS = 20
FIELDS = ("model", "dataset", "epochs", "batch_size", "lr", "max_workers", "min_workers",
          "precision", "max_micro_batch", "seed")  # fmt: skip
FINAL_TRAIN = ("loss", "accuracy")
FINAL_TEST = ("test_loss", "test_accuracy")


def configuration(job: Job) -> dict[str, Any]:
    """The job's values, then its hyperparameters (a trial's)."""
    found: dict[str, Any] = {}
    for name in FIELDS:
        if name == "model":
            found[name] = job.model_definition.name if job.model_definition else job.model_path
        elif name == "dataset":
            found[name] = job.dataset.name if job.dataset else job.data_path
        else:
            found[name] = getattr(job, name)
    return {**found, **job.hparams}


def final_metrics(job: Job) -> dict[str, Any]:
    """The last training record's loss and accuracy, the last evaluation's, the steps, the
    trial's objective and how long it trained."""
    found: dict[str, Any] = {}
    for kind, names in (("train", FINAL_TRAIN), ("test", FINAL_TEST)):
        last = (Metric.objects.filter(job=job, kind=kind).order_by("-step", "-pk")
                .values_list("values", flat=True).first()) or {}  # fmt: skip
        found.update({n: last.get(n) for n in names})
    found["steps"] = job.steps_done
    found["objective"] = job.objective
    ran = job.finished_at and job.started_at and (job.finished_at - job.started_at)
    found["seconds"] = round(ran.total_seconds(), 1) if ran else None
    return found


def compare(jobs: Sequence[Job]) -> dict[str, Any]:
    rows = []
    for job in jobs:
        rows.append({
            "id": job.pk, "name": job.name, "state": job.state, "sweep": job.sweep_id,
            "trial": job.trial_number, "trial_state": job.trial_state,
            "config": configuration(job), "final": final_metrics(job),
        })  # fmt: skip
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row["config"] if k not in keys]
    differs = [k for k in keys if len({repr(r["config"].get(k)) for r in rows}) > 1]
    finals = [*FINAL_TRAIN, *FINAL_TEST, "steps", "objective", "seconds"]
    return {"jobs": rows, "config_keys": keys, "final_keys": finals, "differs": differs}


CURVE_POINTS = 400  # training points per job on a chart of overlaid curves


def curves(jobs: Sequence[Job], points: int = CURVE_POINTS) -> list[dict[str, Any]]:
    """Each job's training loss (thinned in the database to about ``points``, the last one
    kept) and every evaluation, as ``[step, time, value]`` rows: the curves the sweep and
    compare pages overlay, by step or by time."""
    found = []
    for job in jobs:
        train = Metric.objects.filter(job=job, kind="train")
        total = train.count()
        stride = max(1, -(-total // max(points, 1)))
        if stride > 1:
            train = train.annotate(phase=F("step") % stride).filter(phase=0)
        rows = list(train.order_by("step").values_list("step", "time", "values"))
        last = (Metric.objects.filter(job=job, kind="train").order_by("-step")
                .values_list("step", "time", "values").first())  # fmt: skip
        if last is not None and (not rows or rows[-1][0] != last[0]):
            rows.append(last)
        tests = Metric.objects.filter(job=job, kind="test").order_by("step")
        found.append({
            "job": job.pk, "name": job.name, "trial": job.trial_number, "state": job.state,
            "trial_state": job.trial_state,
            "loss": [[s, t, v.get("loss")] for s, t, v in rows],
            "test_loss": [[s, t, v.get("test_loss")] for s, t, v in
                          tests.values_list("step", "time", "values")],
            "test_accuracy": [[s, t, v.get("test_accuracy")] for s, t, v in
                              tests.values_list("step", "time", "values")],
        })  # fmt: skip
    return found


def csv_rows(compared: dict[str, Any]) -> list[list[Any]]:
    """The comparison as a table: a header, then one row per job (its configuration, then
    its final metrics)."""
    config, final = compared["config_keys"], compared["final_keys"]
    rows: list[list[Any]] = [["id", "name", "state", "sweep", "trial", "trial_state",
                              *config, *(f"final {k}" for k in final)]]  # fmt: skip
    for job in compared["jobs"]:
        rows.append([job["id"], job["name"], job["state"], job["sweep"], job["trial"],
                     job["trial_state"], *(job["config"].get(k) for k in config),
                     *(job["final"].get(k) for k in final)])  # fmt: skip
    return rows
