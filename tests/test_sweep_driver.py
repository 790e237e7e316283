"""The sweep driver's decisions (edtweb/sweeps/driver.py) round by round, with a real Optuna
study in its own SQLite storage, the real database and Redis, and trials' metrics stored as
the metrics consumer stores them (no learners: each trial's training is played by storing
its records and moving its job as the scheduler would)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from django.utils import timezone

from edtweb.sweeps import services as sweeps
from edtweb.sweeps import study
from edtweb.sweeps.driver import SweepDriver
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.state import view
from edtweb.training import services
from edtweb.training.models import Job
from protocol.keys import WAKE_KEY
from scheduler.store import Store
from tests.harness.sweeps import own_storage, sweep_inputs
from workers.learner.spec import JobSpec

pytestmark = pytest.mark.django_db
LR = {"type": "loguniform", "low": 1e-3, "high": 0.3}
WIDTH = {"type": "int", "low": 8, "high": 64, "step": 8}


@pytest.fixture
def storage(tmp_path: Path, settings: Any) -> Iterator[None]:
    with own_storage(tmp_path, settings):
        yield


@pytest.fixture
def owned(alice: Any, store: Store, storage: None) -> dict[str, Any]:
    return {**sweep_inputs(alice), "store": store}


def new_sweep(owned: dict[str, Any], **values: Any) -> Sweep:
    asked = {"space": {"lr": LR, "width": WIDTH}, "objective": "loss", "algorithm": "random",
             "max_trials": 4, "max_parallel": 2, "epochs": 2, "batch_size": 64,
             **values}  # fmt: skip
    return sweeps.create_sweep(owned["owner"], owned["model"], owned["dataset"], asked,
                               name="s", seed=values.get("seed", 0))  # fmt: skip


def trials(sweep: Sweep) -> list[Job]:
    return list(Job.objects.filter(sweep=sweep).order_by("trial_number"))


def train(job: Job, *losses: tuple[int, float], test: dict[str, float] | None = None) -> None:
    """The trial trains: RUNNING, and its records stored (train: loss and accuracy at each
    step given; then one evaluation, if given)."""
    services.start_job(job.pk)
    now = time.time()
    records: list[dict[str, Any]] = [
        {"type": "train", "step": step, "epoch": 0, "time": now, "loss": loss, "accuracy": 0.5}
        for step, loss in losses
    ]
    if test is not None:
        records.append({"type": "test", "step": losses[-1][0], "epoch": 0, "time": now, **test})
    services.store_metrics(job.pk, records)


def complete(job: Job, *losses: tuple[int, float]) -> None:
    train(job, *losses)
    assert services.complete_job(job.pk)


def state(job: Job) -> tuple[str, str]:
    job.refresh_from_db()
    return job.state, job.trial_state


def test_trials_are_jobs_of_the_owner_with_their_hyperparameters(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, lr=0.05)
    driver = SweepDriver(owned["store"])
    assert driver.round() == 1
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.RUNNING and sweep.started_at is not None
    first, second = trials(sweep)
    assert [first.trial_number, second.trial_number] == [0, 1]
    for job in (first, second):
        assert job.owner == owned["owner"] and job.state == Job.State.QUEUED
        assert job.trial_state == "RUNNING" and set(job.hparams) == {"lr", "width"}
        assert 1e-3 <= job.hparams["lr"] <= 0.3 and job.hparams["width"] % 8 == 0
        assert job.lr == job.hparams["lr"]  # a searched lr is the job's own
        assert (job.epochs, job.batch_size, job.max_workers) == (2, 64, 1)
        assert JobSpec.load(job.spec_path).hparams == job.hparams  # what the learners get
    assert first.hparams != second.hparams
    driver.round()
    assert len(trials(sweep)) == 2, "no more than max_parallel at once"


@pytest.mark.parametrize(("direction", "best"), [("minimize", 1), ("maximize", 2)])
def test_the_sweep_completes_with_its_best_trial(
    owned: dict[str, Any], direction: str, best: int
) -> None:
    sweep = new_sweep(owned, max_trials=3, max_parallel=3, direction=direction)
    driver = SweepDriver(owned["store"])
    driver.round()
    finals = [0.5, 0.2, 0.9]
    for job, final in zip(trials(sweep), finals, strict=True):
        complete(job, (1, 0.05), (2, final))  # the final value is the last, not the least
    assert view(sweep).running == 3
    driver.round()
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.COMPLETED and sweep.ended_at is not None
    shown = view(sweep)
    assert (shown.done, shown.total, shown.completed, shown.progress) == (3, 3, 3, 1.0)
    assert shown.best is not None and shown.best.number == best
    assert (
        shown.best.objective == finals[best] and shown.best.hparams == trials(sweep)[best].hparams
    )
    told = study.load(sweep).get_trials()
    assert [t.state.name for t in told] == ["COMPLETE"] * 3
    assert [t.value for t in told] == finals


def test_asha_prunes_a_trial_behind_and_its_slot_goes_to_a_new_one_in_one_decision(
    owned: dict[str, Any],
) -> None:
    sweep = new_sweep(owned, algorithm="asha", max_trials=5, max_parallel=3, min_resource=2,
                      reduction_factor=2)  # fmt: skip
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second, third = trials(sweep)
    train(first, (1, 1.5), (2, 1.0))  # at the first rung (step 2): the best so far
    train(second, (1, 2.5), (2, 2.0))  # at the first rung: behind, in the bottom half
    train(third, (1, 0.1))  # before the first rung: nothing to judge
    owned["store"].r.delete(WAKE_KEY)
    driver.round()
    assert state(first) == (Job.State.RUNNING, "RUNNING")
    assert state(second) == (Job.State.STOPPED, "PRUNED")
    assert state(third) == (Job.State.RUNNING, "RUNNING")
    assert second.trial_note == "pruned by ASHA at step 2 (loss 2)" and second.objective == 2.0
    events = [e.message for e in second.events.filter(kind="stopped")]
    assert events == ["pruned by ASHA at step 2 (loss 2)"]
    # In the same round a new trial takes its place, and the scheduler is woken once for
    # both: its next decision hands the pruned trial's slots on.
    fourth = trials(sweep)[3]
    assert (fourth.trial_number, fourth.state) == (3, Job.State.QUEUED)
    wakes = owned["store"].r.lrange(WAKE_KEY, 0, -1)
    assert len(wakes) == 1, wakes
    assert f"stop {second.pk}" in wakes[0] and f"submit {fourth.pk}" in wakes[0]
    told = {t.number: t for t in study.load(sweep).get_trials()}
    assert told[1].state.name == "PRUNED" and told[1].intermediate_values == {2: 2.0}
    assert told[0].intermediate_values == {2: 1.0} and told[2].intermediate_values == {1: 0.1}
    shown = view(sweep)
    assert (shown.done, shown.pruned, shown.running) == (1, 1, 3)


def test_a_trial_at_its_last_step_completes_whatever_its_rank(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, algorithm="asha", min_resource=2, reduction_factor=2)
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second = trials(sweep)
    assert second.total_steps == 8  # 2 epochs of 256 samples at batch 64
    train(first, (2, 1.0))
    train(second, (8, 5.0))  # far behind, but at its last step: nothing left to save
    driver.round()
    assert state(second) == (Job.State.RUNNING, "RUNNING")
    assert services.complete_job(second.pk)
    driver.round()
    assert state(second) == (Job.State.COMPLETED, "COMPLETE") and second.objective == 5.0


def test_a_prune_that_comes_after_the_trials_end_leaves_it_complete(
    owned: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = new_sweep(owned, algorithm="asha", min_resource=2, reduction_factor=2)
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second = trials(sweep)
    train(first, (2, 1.0))
    train(second, (2, 5.0))  # behind at the first rung: the pruner says prune...
    driver.round()
    assert state(second) == (Job.State.STOPPED, "PRUNED")
    # ...but here the job has ended by the time it is stopped (its last steps trained
    # while the pruner was asked): it is told as it ended.
    sweep = new_sweep(owned, algorithm="asha", min_resource=2, reduction_factor=2)
    driver.round()
    first, second = trials(sweep)
    train(first, (2, 1.0))
    train(second, (2, 5.0))
    real_stop = services.stop_job

    def ended_first(pk: int, reason: str = "") -> bool:
        services.complete_job(pk)
        return real_stop(pk, reason)

    monkeypatch.setattr(services, "stop_job", ended_first)
    driver.round()
    assert state(second) == (Job.State.COMPLETED, "RUNNING") and second.trial_note == ""
    driver.round()
    assert state(second) == (Job.State.COMPLETED, "COMPLETE") and second.objective == 5.0


def test_a_driver_that_died_between_a_prunes_stop_and_its_tell_tells_pruned(
    owned: dict[str, Any],
) -> None:
    sweep = new_sweep(owned, algorithm="asha")
    driver = SweepDriver(owned["store"])
    driver.round()
    first, _ = trials(sweep)
    train(first, (2, 1.0))
    note = "pruned by ASHA at step 2 (loss 1)"
    Job.objects.filter(pk=first.pk).update(trial_note=note, objective=1.0, objective_step=2)
    services.stop_job(first.pk, note)
    driver.round()
    assert state(first) == (Job.State.STOPPED, "PRUNED") and first.trial_note == note
    assert study.load(sweep).get_trials()[0].state.name == "PRUNED"


def test_a_trial_that_never_records_the_objective_fails_the_sweep(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, objective="val_acc")
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second = trials(sweep)
    train(first, (1, 2.0))
    train(second, (1, 2.0))
    driver.round()
    assert state(first)[0] == Job.State.RUNNING, "not evaluated yet: val_acc may still come"
    train(first, (2, 1.5), test={"test_loss": 1.4, "test_accuracy": 0.3})
    driver.round()
    message = "the objective 'val_acc' was never recorded; recorded: accuracy, loss, " \
              "test_accuracy, test_loss"  # fmt: skip
    assert state(first) == (Job.State.FAILED, "FAIL")
    assert first.error == message and first.trial_note == message
    sweep.refresh_from_db()
    assert (sweep.state, sweep.error) == (Sweep.State.FAILED, message)
    assert state(second)[0] == Job.State.STOPPED, "its other trials stop with it"
    driver.round()
    assert len(trials(sweep)) == 2


def test_an_evaluation_stored_just_after_the_report_is_no_missing_objective(
    owned: dict[str, Any],
) -> None:
    class Late(SweepDriver):
        """Reads a trial's records a moment before its evaluation is stored (the metrics
        consumer stores as the driver reads)."""

        late = True

        def report(self, sweep: Sweep, the_study: Any, job: Job, trial: Any) -> bool:
            if job.trial_number == 0 and self.late:
                self.late = False
                train(job, (1, 2.0), test={"test_loss": 1.9, "test_accuracy": 0.2})
                return False
            return super().report(sweep, the_study, job, trial)

    sweep = new_sweep(owned, objective="test_loss")
    driver = Late(owned["store"])
    driver.round()  # the trials are asked
    driver.round()  # the first trial's records come in as it reads them
    first = trials(sweep)[0]
    assert state(first) == (Job.State.RUNNING, "RUNNING"), first.trial_note
    driver.round()
    first.refresh_from_db()
    assert (first.objective, first.objective_step) == (1.9, 1)


def test_a_failed_trial_fails_alone_and_the_sweep_goes_on(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, max_trials=3)
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second = trials(sweep)
    services.fail_job(first.pk, "ValueError: width must be positive, not 0 (model.py, line 9)")
    driver.round()
    assert state(first) == (Job.State.FAILED, "FAIL")
    assert view(sweep).trials[0].note.startswith("ValueError: width must be positive")
    assert [j.trial_number for j in trials(sweep)] == [0, 1, 2]
    complete(second, (1, 0.3))
    complete(trials(sweep)[2], (1, 0.4))
    driver.round()
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.COMPLETED
    assert (view(sweep).failed, view(sweep).completed) == (1, 2)


def test_a_restarted_driver_loses_nothing(owned: dict[str, Any], settings: Any) -> None:
    sweep = new_sweep(owned, algorithm="asha", max_trials=6, max_parallel=2, min_resource=4)
    first_driver = SweepDriver(owned["store"])
    first_driver.round()
    zero, one = trials(sweep)
    train(zero, (2, 1.0))
    first_driver.round()
    # The driver dies between asking Optuna for a trial and making its job; and between
    # telling Optuna a trial was pruned and stopping its job.
    asked = study.load(sweep)
    orphan = asked.ask(study.distributions(sweep))
    asked.tell(one.trial_number, state=optuna.trial.TrialState.PRUNED)
    study.storage.cache_clear()  # a new process: a new storage, a new driver
    second_driver = SweepDriver(owned["store"])
    train(zero, (4, 0.8))
    second_driver.round()
    jobs = trials(sweep)
    assert [j.trial_number for j in jobs] == [0, 1, 2], "the orphan's job, and no trial more"
    assert jobs[2].hparams == orphan.params and jobs[2].state == Job.State.QUEUED
    assert state(one) == (Job.State.STOPPED, "PRUNED")
    told = {t.number: t for t in study.load(sweep).get_trials()}
    assert told[0].intermediate_values == {2: 1.0, 4: 0.8}
    # a sampler reseeded from the trials asked: its draws are new ones
    complete(zero, (5, 0.7))
    second_driver.round()
    hparams = [j.hparams for j in trials(sweep)]
    assert len(hparams) == 4 and all(h not in hparams[:i] for i, h in enumerate(hparams))


def test_stop_resume_and_a_trial_its_owner_stops(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, max_trials=3)
    driver = SweepDriver(owned["store"])
    driver.round()
    first, second = trials(sweep)
    train(first, (1, 1.0))
    train(second, (1, 1.0))
    assert sweeps.stop_sweep(sweep)
    assert not sweeps.stop_sweep(sweep)
    assert state(first) == state(second) == (Job.State.STOPPED, "RUNNING")
    assert driver.round() == 0
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.STOPPED and sweep.spent > 0
    assert sweeps.resume_sweep(sweep)
    assert state(first) == state(second) == (Job.State.SUSPENDED, "RUNNING")
    driver.round()
    assert [state(j)[1] for j in trials(sweep)] == ["RUNNING", "RUNNING"]
    services.stop_job(first.pk)  # its owner stops one trial alone
    driver.round()
    assert state(first) == (Job.State.STOPPED, "FAIL")
    assert first.trial_note == "its job was stopped by its owner"
    assert len(trials(sweep)) == 3, "another trial takes its place"


class StoppedWhileSampling(SweepDriver):
    """A driver whose sweep is stopped as its first trial's job is made: the owner's stop
    arrives while the driver samples (a large space takes seconds). ``whole``: stopped as
    the owner stops it, its trials too; else its state alone changes, as when the stop
    listed its trials a moment before this job was made."""

    def __init__(self, store: Store, whole: bool) -> None:
        super().__init__(store)
        self.whole = whole

    def submit(self, sweep: Sweep, number: int, params: dict[str, Any]) -> Job:
        job = super().submit(sweep, number, params)
        if self.whole:
            assert sweeps.stop_sweep(Sweep.objects.get(pk=sweep.pk))
        else:
            assert sweeps.transition(sweep.pk, Sweep.State.STOPPED, Sweep.ACTIVE)
        return job


@pytest.mark.parametrize("whole", [True, False])
def test_a_sweep_stopped_while_sampling_gets_no_trial_after_the_stop(
    owned: dict[str, Any], whole: bool
) -> None:
    sweep = new_sweep(owned, max_parallel=4, max_trials=8)
    StoppedWhileSampling(owned["store"], whole).round()
    made = trials(sweep)
    assert len(made) == 1, "no trial is made after the stop"
    assert len(study.load(sweep).get_trials(deepcopy=False)) == 1, "nor sampled"
    assert state(made[0]) == (Job.State.STOPPED, "RUNNING"), "the one made stops with it"
    sweep.refresh_from_db()
    assert sweeps.resume_sweep(sweep)
    assert state(made[0]) == (Job.State.SUSPENDED, "RUNNING")
    SweepDriver(owned["store"]).round()
    assert len(trials(sweep)) == 4, "resumed, it asks for the rest"


def test_a_grid_tries_every_point_once(owned: dict[str, Any]) -> None:
    space = {"width": {"type": "int", "low": 8, "high": 16, "step": 8},
             "lr": {"type": "choice", "choices": [0.01, 0.1]}}  # fmt: skip
    sweep = new_sweep(owned, space=space, algorithm="grid", max_trials=None, max_parallel=8)
    assert sweep.max_trials == 4
    driver = SweepDriver(owned["store"])
    driver.round()
    points = sorted((j.hparams["width"], j.hparams["lr"]) for j in trials(sweep))
    assert points == [(8, 0.01), (8, 0.1), (16, 0.01), (16, 0.1)]
    for job in trials(sweep):
        complete(job, (1, job.hparams["lr"]))
    driver.round()
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.COMPLETED and view(sweep).best.hparams["lr"] == 0.01  # type: ignore[union-attr]


def test_no_trial_starts_once_the_time_is_up(owned: dict[str, Any]) -> None:
    sweep = new_sweep(owned, max_time=60)
    driver = SweepDriver(owned["store"])
    driver.round()
    Sweep.objects.filter(pk=sweep.pk).update(started_at=timezone.now() - timezone.timedelta(
        seconds=61))  # fmt: skip
    for job in trials(sweep):
        complete(job, (1, 0.5))
    driver.round()
    sweep.refresh_from_db()
    assert len(trials(sweep)) == 2 and sweep.state == Sweep.State.COMPLETED
    assert view(sweep).time_left == 0.0


def test_each_algorithm_has_its_sampler_and_pruner(owned: dict[str, Any]) -> None:
    expected = {"random": ("RandomSampler", "NopPruner"),
                "grid": ("AskedGridSampler", "NopPruner"),
                "tpe": ("TPESampler", "NopPruner"),
                "asha": ("RandomSampler", "SuccessiveHalvingPruner"),
                "hyperband": ("RandomSampler", "HyperbandPruner")}  # fmt: skip
    grid = {"width": WIDTH}
    for algorithm, (sampler, pruner) in expected.items():
        sweep = new_sweep(owned, algorithm=algorithm, space=grid)
        loaded = study.load(sweep)
        assert (type(loaded.sampler).__name__, type(loaded.pruner).__name__) == (sampler, pruner)
    # 256 samples, batch 64: 4 steps an epoch, 2 epochs. ASHA's first rung: one epoch when
    # a trial trains at least reduction_factor epochs, else a ninth of it.
    assert study.min_resource(new_sweep(owned, epochs=3)) == 4
    assert study.min_resource(new_sweep(owned, epochs=2)) == 1
    assert study.min_resource(new_sweep(owned, min_resource=7)) == 7
