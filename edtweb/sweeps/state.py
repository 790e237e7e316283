"""A sweep as everyone reads it, computed in one place: its state, its progress (trials ended
of its budget), its best trial and every trial, from the sweep's row and its trials' jobs
(their ``trial_state`` and ``objective`` as the driver wrote them). The API, the CLI (through
the API) and the pages read a :class:`SweepView` built here, never Optuna's storage."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from edtweb.sweeps.models import Sweep
from edtweb.sweeps.services import elapsed
from edtweb.training.models import Job

TRIAL_STATES = ("RUNNING", "COMPLETE", "PRUNED", "FAIL")  # Optuna's words for a trial
TRIAL_FIELDS = ("pk", "sweep_id", "trial_number", "name", "state", "trial_state", "hparams",
                "objective", "objective_step", "steps_done", "total_steps", "trial_note",
                "created_at", "finished_at", "error")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TrialView:
    """One trial: its job, its hyperparameters, how it stands."""

    job: int
    number: int
    name: str
    state: str  # its job's: QUEUED, RUNNING, ..., STOPPED
    trial_state: str  # RUNNING, COMPLETE, PRUNED or FAIL
    hparams: dict[str, Any]
    objective: float | None  # the last value reported; final once it ended
    objective_step: int | None  # the step of that value
    steps_done: int
    total_steps: int
    note: str  # why it was pruned or failed (a failed job's error)
    created_at: datetime
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SweepView:
    """What a sweep's pages, the API and the CLI show of it now."""

    id: int
    state: str
    done: int  # trials ended: completed, pruned or failed
    total: int  # its budget of trials
    running: int  # trials asked and not ended
    completed: int
    pruned: int
    failed: int
    progress: float  # 0..1: done / total (1 once COMPLETED)
    best: TrialView | None  # the completed trial of the best objective
    elapsed: float  # seconds run, over all its runs
    time_left: float | None  # seconds, under its max_time; None without one
    error: str
    trials: tuple[TrialView, ...]  # by number

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def trial_of(row: dict[str, Any]) -> TrialView:
    note = row["trial_note"] or (row["error"] if row["trial_state"] == "FAIL" else "")
    return TrialView(
        job=row["pk"], number=row["trial_number"], name=row["name"], state=row["state"],
        trial_state=row["trial_state"], hparams=row["hparams"], objective=row["objective"],
        objective_step=row["objective_step"], steps_done=row["steps_done"],
        total_steps=row["total_steps"], note=note, created_at=row["created_at"],
        finished_at=row["finished_at"],
    )  # fmt: skip


def best_of(trials: Sequence[TrialView], direction: str) -> TrialView | None:
    """The completed trial of the best objective (the earlier one on a tie)."""
    done = [t for t in trials if t.trial_state == "COMPLETE" and t.objective is not None]
    if not done:
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    return min(done, key=lambda t: (sign * float(t.objective or 0.0), t.number))


def view(sweep: Sweep) -> SweepView:
    return views([sweep])[sweep.pk]


def views(sweeps: Sequence[Sweep]) -> dict[int, SweepView]:
    """Sweep id -> its view, reading every trial of ``sweeps`` in one query."""
    rows = Job.objects.filter(sweep__in=[s.pk for s in sweeps]).order_by("trial_number", "pk")
    trials: dict[int, list[TrialView]] = {s.pk: [] for s in sweeps}
    for row in rows.values(*TRIAL_FIELDS):
        trials[row["sweep_id"]].append(trial_of(row))
    return {sweep.pk: _view(sweep, trials[sweep.pk]) for sweep in sweeps}


def _view(sweep: Sweep, trials: list[TrialView]) -> SweepView:
    count = {state: sum(t.trial_state == state for t in trials) for state in TRIAL_STATES}
    done = count["COMPLETE"] + count["PRUNED"] + count["FAIL"]
    spent = elapsed(sweep)
    left = max(0.0, sweep.max_time - spent) if sweep.max_time else None
    finished = sweep.state == Sweep.State.COMPLETED
    return SweepView(
        id=sweep.pk, state=sweep.state, done=done, total=sweep.max_trials,
        running=count["RUNNING"], completed=count["COMPLETE"], pruned=count["PRUNED"],
        failed=count["FAIL"],
        progress=1.0 if finished else min(1.0, done / max(sweep.max_trials, 1)),
        best=best_of(trials, sweep.direction), elapsed=round(spent, 1),
        time_left=None if left is None else round(left, 1), error=sweep.error,
        trials=tuple(trials),
    )  # fmt: skip
