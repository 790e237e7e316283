"""Jobs side by side: each one's configuration (the job's values and a trial's
hyperparameters) and its final metrics, with the configuration keys whose values differ
(the API's ``jobs/compare/``, ``edt compare``; the compare page reads the same)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
