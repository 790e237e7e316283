"""What the pages, the API and the driver do to sweeps: create (judged once), stop, resume,
clone, and each change of a sweep's state, a conditional UPDATE as jobs' are
(``edtweb/training/services.py``)."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Iterable
from typing import Any

import redis
from django.utils import timezone

from edtweb import usercaps
from edtweb.limits import LIMITS
from edtweb.redis_access import store
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.space import SpaceRefused, judged
from edtweb.training import services as jobs
from edtweb.training.models import Job
from edtweb.training.validation import DEFAULTS, Refused, train_samples, validated
from protocol.keys import SWEEPS_WAKE_KEY

log = logging.getLogger("edt.sweeps")

# A batch range is the scheduler's to move (goodput mode); a trial's batch is its own.
GOODPUT_FIELDS = ("batch_min", "batch_max")
SEARCH = ("space", "objective", "direction", "algorithm", "max_trials", "max_parallel",
          "max_time", "reduction_factor", "min_resource")  # fmt: skip


def wake_driver(reason: str) -> None:
    """Wake the sweep driver now; while Redis is away its own tick comes within a second."""
    try:
        store().wake(reason, SWEEPS_WAKE_KEY)
    except redis.RedisError as exc:
        log.warning("could not wake the sweep driver: %s", exc)


def create_sweep(owner: Any, model: Any, dataset: Any, values: dict[str, Any],
                 name: str = "", seed: int | None = None, wmla: dict[str, Any] | None = None,
                 trial_steps: int | None = None) -> Sweep:  # fmt: skip
    """A QUEUED sweep of ``model`` on ``dataset`` (the owner's and ready: the caller
    resolved them; the model checked, or a WMLA hypersearch's still being checked), with
    ``values``: the search (:data:`SEARCH`) and every trial's job values (a submission's
    fields). Every rule is judged here, once: :class:`SpaceRefused` names each field
    broken. ``wmla``: a WMLA hypersearch's (``Sweep.wmla``). A sweep over a WMLA-style
    script hands each trial its values in config.json (docs/architecture.md, "Sweeps").
    ``trial_steps``: a trial's length in the steps its objective is reported at, where the
    job's values do not say it (a WMLA script's own epochs)."""
    if seed is None:  # none given: a seed of its own, so that a sweep run again draws anew
        seed = secrets.randbelow(int(LIMITS["seed"].high) + 1)
    usercaps.refuse_past("EDT_USER_MAX_SWEEPS", active_sweeps(owner), "sweeps queued or running",
                         "stop one or wait for one to end")  # fmt: skip
    samples = train_samples(dataset)
    errors: dict[str, list[str]] = {}
    wmla = dict(wmla or {})
    if getattr(model, "style", "") == "wmla" and not wmla:
        wmla = {"script": True}
    try:
        plan = judged({**{k: values.get(k) for k in SEARCH}, "seed": seed}, samples,
                      script=bool(wmla))  # fmt: skip
    except SpaceRefused as refused:
        errors.update(refused.errors)
    else:
        errors.update(_parallel_errors(plan.max_parallel))
    try:
        submission = validated({k: values.get(k) for k in DEFAULTS}, samples)
    except Refused as refused:
        errors.update({k: [v] for k, v in refused.errors.items()})
    else:
        if submission.goodput:  # the batch is the trial's (a hyperparameter), never the scheduler's
            errors["batch_max"] = ["a sweep's trials train at a fixed batch: no batch range"]
    if errors:
        raise SpaceRefused(errors)
    steps = submission.epochs * (samples // submission.batch_size) if samples else 0
    if trial_steps is not None:
        steps = trial_steps
    return Sweep.objects.create(
        owner=owner, name=name or f"sweep of {model.name} on {dataset.name}",
        model_definition=model, dataset=dataset, model_path=str(model.entry_path),
        data_path=str(dataset.data_dir), space=plan.space_dict(), objective=plan.objective,
        direction=plan.direction, algorithm=plan.algorithm, max_trials=plan.max_trials,
        max_parallel=plan.max_parallel, max_time=plan.max_time,
        reduction_factor=plan.reduction_factor, min_resource=plan.min_resource,
        trial_steps=steps, seed=plan.seed, study_name=f"edt-sweep-{uuid.uuid4().hex}", wmla=wmla,
        **{k: v for k, v in submission.values().items() if k not in GOODPUT_FIELDS},
    )  # fmt: skip


def active_sweeps(owner: Any) -> int:
    return Sweep.objects.filter(owner=owner, state__in=Sweep.ACTIVE).count()


def trials_in_flight(owner: Any) -> int:
    """The owner's trial jobs not yet ended, over all their sweeps."""
    return Job.objects.filter(owner=owner, sweep__isnull=False, state__in=Job.ACTIVE).count()


def _parallel_errors(max_parallel: int) -> dict[str, list[str]]:
    """A sweep may not ask for more trials at once than its owner may have in flight."""
    most = usercaps.cap("EDT_USER_MAX_TRIALS")
    if not most or max_parallel <= most:
        return {}
    return {"max_parallel": [f"at most {most}: the trials one user may have in flight at "
                             f"once (EDT_USER_MAX_TRIALS={most}); ask an admin to raise "
                             f"it"]}  # fmt: skip


def created(sweep: Sweep) -> Sweep:
    wake_driver(f"sweep {sweep.pk} created")
    return sweep


def transition(sweep_id: int, to: str, allowed: Iterable[str], **fields: Any) -> bool:
    """Move the sweep to ``to`` only from one of ``allowed``; True if this call did."""
    changed = Sweep.objects.filter(pk=sweep_id, state__in=list(allowed)).update(state=to, **fields)
    return bool(changed == 1)


def elapsed(sweep: Sweep) -> float:
    """Seconds the sweep has run, over all its runs."""
    if sweep.state == Sweep.State.RUNNING and sweep.started_at is not None:
        return sweep.spent + (timezone.now() - sweep.started_at).total_seconds()
    return sweep.spent


def end_sweep(sweep: Sweep, to: str, error: str = "") -> bool:
    """The driver ends a running sweep: COMPLETED, or FAILED with ``error`` (its active
    trials are stopped)."""
    ended = transition(sweep.pk, to, [Sweep.State.RUNNING], ended_at=timezone.now(),
                       spent=elapsed(sweep), error=error)  # fmt: skip
    if ended and to == Sweep.State.FAILED:
        for pk in active_trials(sweep.pk):
            jobs.stop_job(pk, f"stopped: its sweep {sweep.pk} failed")
    return ended


def active_trials(sweep_id: int) -> list[int]:
    return list(Job.objects.filter(sweep_id=sweep_id, state__in=Job.ACTIVE)
                .values_list("pk", flat=True))  # fmt: skip


def stop_sweep(sweep: Sweep) -> bool:
    """Stop a queued or running sweep and its running trials (they checkpoint and stop);
    resuming it resumes them. The sweep's state changes first, so the driver never takes
    a trial stopped here for one its owner stopped alone."""
    sweep.refresh_from_db()  # its time run so far is counted from its row as it is now
    if not transition(sweep.pk, Sweep.State.STOPPED, Sweep.ACTIVE, ended_at=timezone.now(),
                      spent=elapsed(sweep)):  # fmt: skip
        return False
    for pk in active_trials(sweep.pk):
        jobs.stop_job(pk, f"stopped with its sweep {sweep.pk}")
    wake_driver(f"sweep {sweep.pk} stopped")
    return True


def resume_sweep(sweep: Sweep) -> bool:
    """A stopped sweep goes on: the trials it stopped continue from their checkpoints, then
    it asks for more while its budget and time last. The trials resume first, so the
    driver never finds the sweep running with a trial still stopped."""
    sweep.refresh_from_db()
    if sweep.state != Sweep.State.STOPPED:
        return False
    stopped = Job.objects.filter(sweep=sweep, trial_state="RUNNING", state=Job.State.STOPPED)
    for pk in stopped.values_list("pk", flat=True):
        jobs.resume_job(pk)
    if not transition(sweep.pk, Sweep.State.RUNNING, [Sweep.State.STOPPED],
                      started_at=timezone.now(), ended_at=None, error=""):  # fmt: skip
        return False
    wake_driver(f"sweep {sweep.pk} resumed")
    return True


def clone_sweep(sweep: Sweep, owner: Any, name: str = "") -> Sweep:
    """A new QUEUED sweep asking what ``sweep`` asked (judged again: its model must still
    be valid, its dataset ready), with a study of its own."""
    if sweep.model_definition is None or sweep.dataset is None:
        gone = "model" if sweep.model_definition is None else "dataset"
        raise SpaceRefused({gone: [f"sweep {sweep.pk}'s {gone} was deleted"]})
    values = {k: getattr(sweep, k) for k in (*SEARCH, *Sweep.TRAINING)}
    clone = create_sweep(owner, sweep.model_definition, sweep.dataset, values,
                         name=name or f"{sweep.name} (clone)", seed=sweep.seed,
                         wmla=sweep.wmla, trial_steps=sweep.trial_steps)  # fmt: skip
    return created(clone)
