"""The sweep driver: one process of the platform (``manage.py edt_sweeps``), active under a
Redis lease (``scheduler/lease_loop.py``), that runs every sweep's Optuna study through its
ask-and-tell interface (docs/architecture.md, "Sweeps").

Each round (every ``ROUND`` seconds, and at once when a trial's metrics were stored or a
sweep was created, stopped or resumed), for each queued or running sweep:

1. a queued sweep starts: RUNNING, its study created;
2. a trial asked whose job was never made (the driver died in between) gets its job; a
   trial that Optuna has told but whose job does not say so yet (the same) is settled;
3. for each running trial, the objective's latest value recorded since the last round (its
   job's metric rows, train or test) is reported to Optuna as the value at that step; where
   the sweep prunes (ASHA, Hyperband) and the pruner says so, the trial's job is stopped at
   once with the reason ("pruned by ASHA at step 40 ...") and the trial told PRUNED (a job
   that ended meanwhile is told as it ended); a trial that
   has been evaluated without ever recording the objective fails, and the sweep with it:
   every trial would;
4. each trial whose job ended is told: COMPLETE with the objective's last value, or FAIL
   (its job failed, or was stopped by its owner);
5. new trials are asked while fewer than ``max_parallel`` run, the budget of trials lasts
   and the time does, the owner's trials in flight stay within ``EDT_USER_MAX_TRIALS``
   and the sweep still runs (it is read again before each trial is sampled and before its
   job is made), each a QUEUED job of the sweep's owner;
6. with no trial running and no more to ask, the sweep ends COMPLETED (FAILED if no trial
   completed).

The prunes and the new trials of a round wake the scheduler once, after all of them
(``services.one_decision``): its next decision hands the slots of the stopped trials to the
others, new ones included. Optuna's state is in its own storage (``edtweb/sweeps/study.py``);
what the API shows is on the jobs (``trial_state``, ``objective``), written here alone, and
read through ``edtweb/sweeps/state.py``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import optuna
import redis
from django.db import InterfaceError, OperationalError
from django.db.models import Max
from django.utils import timezone
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError as StorageAway

from edtweb import usercaps
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import results, services, study
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.results import RESULT_FILE
from edtweb.sweeps.space import PRUNING
from edtweb.sweeps.state import view
from edtweb.tenancy.models import Team
from edtweb.training import services as jobs
from edtweb.training.models import Job, Metric
from edtweb.training.validation import train_samples, validated
from protocol.keys import SWEEPS_LEASE_KEY, SWEEPS_WAKE_KEY
from scheduler.lease_loop import LeaseLoop
from scheduler.store import Store
from workers.learner.submission import PLATFORM_HPARAMS

log = logging.getLogger("edt.sweeps")
Frozen = optuna.trial.FrozenTrial
RUNNING = (TrialState.RUNNING,)
PRUNED_BY = "pruned by"

ROUND = 0.5  # seconds between rounds, at most
STANDBY = 1.0  # seconds between a standby's tries for the lease
GIVE_UP = 3  # rounds in a row a sweep may fail (not the database, Redis or storage) before it FAILS
AWAY = (OperationalError, InterfaceError, redis.RedisError, StorageAway)  # wait, retry
# Keys of a record that are its bookkeeping, not metrics one could optimise
BOOKKEEPING = {"iteration", "workers", "gen", "total_steps", "replay", "epoch", "time"}


def still_running(sweep: Sweep) -> bool:
    """The sweep's row says RUNNING now (its owner may have stopped it since the round
    began)."""
    return Sweep.objects.filter(pk=sweep.pk, state=Sweep.State.RUNNING).exists()


def never_recorded(job: Job, sweep: Sweep) -> str:
    """Why the trial fails when its records (a WMLA hypersearch's: its val_dict_list.json)
    never held the objective, with the metrics they did hold."""
    objective = sweep.objective
    if sweep.hypersearch:
        found = results.read(job, objective)
        where = f"the objective '{objective}' was never written to $RESULT_DIR/{RESULT_FILE}"
        if not found.found:
            return f"{where}: the trial wrote no such file (a list of {{\"steps\": n, " \
                   f"\"{objective}\": value}})"  # fmt: skip
        return f"{where}; it holds: {', '.join(found.keys) or 'nothing'}"
    first = [Metric.objects.filter(job=job, kind=kind).order_by("step")
             .values_list("values", flat=True).first() for kind in ("train", "test")]  # fmt: skip
    names = sorted({k for values in first if values for k in values} - BOOKKEEPING)
    return f"the objective '{objective}' was never recorded; recorded: {', '.join(names)}"


class SweepDriver(LeaseLoop):
    def __init__(self, store: Store, interval: float = ROUND, lease_ms: int = 5000) -> None:
        super().__init__(store, "sweep driver", SWEEPS_LEASE_KEY, lease_ms, log)
        self.interval = interval
        self.studies: dict[int, optuna.Study] = {}
        self.handles: dict[int, optuna.trial.Trial] = {}  # trial id -> its handle
        self.failures: dict[int, int] = {}

    # The loop (scheduler/lease_loop.py) ------------------------------------------------------

    def work(self) -> float:
        if not self.hold_lease():
            return STANDBY
        self.round()
        return self.interval

    def rest(self, seconds: float) -> None:
        """The active driver wakes at once when a trial's metrics come (or a sweep
        changes); a standby only waits."""
        if self.active:
            self.store.wait_wake(seconds, SWEEPS_WAKE_KEY)
        else:
            self.stopping.wait(seconds)

    def changed(self) -> None:
        self.studies.clear()  # another driver may have moved them meanwhile
        self.handles.clear()

    def round(self) -> int:
        """Advance every queued or running sweep; returns how many there were."""
        sweeps = list(Sweep.objects.filter(state__in=Sweep.ACTIVE).select_related(
            "owner", "model_definition", "dataset"))  # fmt: skip
        for sweep in sweeps:
            try:
                self.advance(sweep)
                self.failures.pop(sweep.pk, None)
            except AWAY:
                raise  # the lease loop backs off and tries again
            except Exception as exc:
                self.failed_sweep(sweep, exc)
        for pk in set(self.studies) - {s.pk for s in sweeps}:
            del self.studies[pk]
        return len(sweeps)

    def failed_sweep(self, sweep: Sweep, exc: Exception) -> None:
        """A sweep whose round raised: logged; after ``GIVE_UP`` rounds in a row, FAILED
        with the error (a bug, or an Optuna refusal, must not spin for ever)."""
        count = self.failures[sweep.pk] = self.failures.get(sweep.pk, 0) + 1
        log.exception("sweep %s: round failed (%d in a row)", sweep.pk, count)
        self.studies.pop(sweep.pk, None)
        if count >= GIVE_UP:
            sweep.refresh_from_db()
            message = f"the sweep driver failed: {type(exc).__name__}: {exc}"
            if services.end_sweep(sweep, Sweep.State.FAILED, message):
                log.error("sweep %s FAILED: %s", sweep.pk, message)
            self.failures.pop(sweep.pk, None)

    def study(self, sweep: Sweep) -> optuna.Study:
        if sweep.pk not in self.studies:
            self.studies[sweep.pk] = study.load(sweep)
        return self.studies[sweep.pk]

    # One sweep -----------------------------------------------------------------------------

    def advance(self, sweep: Sweep) -> None:
        """Steps 1 to 6 of the module's docstring for one sweep."""
        if sweep.state == Sweep.State.QUEUED:
            if self.model_unchecked(sweep):
                return
            if not services.transition(sweep.pk, Sweep.State.RUNNING, [Sweep.State.QUEUED],
                                       started_at=timezone.now()):  # fmt: skip
                return
            sweep.refresh_from_db()
            log.info("sweep %s started: %s", sweep.pk, sweep.name)
        the_study = self.study(sweep)
        # Only the running trials are read each round (a sweep may have thousands ended);
        # all of them only when a job must catch up with a trial told already (a restart).
        trials = {t.number: t for t in the_study.get_trials(deepcopy=False, states=RUNNING)}
        mine = {j.trial_number: j for j in Job.objects.filter(sweep=sweep, trial_state="RUNNING")}
        if set(mine) - set(trials):
            trials = {t.number: t for t in the_study.get_trials(deepcopy=False)}
        unmade = {n for n, t in trials.items() if t.state == TrialState.RUNNING} - set(mine)
        if unmade:  # asked, and the driver died before making their jobs (or had made them)
            unmade -= set(Job.objects.filter(sweep=sweep, trial_number__in=unmade)
                          .values_list("trial_number", flat=True))  # fmt: skip
        last = Job.objects.filter(sweep=sweep).aggregate(n=Max("trial_number"))["n"]
        asked = max([-1 if last is None else last, *trials]) + 1
        stopped: list[tuple[int, str]] = []
        if unmade and not still_running(sweep):
            return  # stopped since the round began: the jobs are made when it resumes
        with jobs.one_decision():
            try:
                for number in sorted(unmade):
                    mine[number] = self.submit(sweep, number, trials[number].params)
                for number, job in sorted(mine.items()):
                    its = trials.get(number)
                    if not self.follow(sweep, the_study, job, its, stopped):
                        return  # the sweep ended (failed) or was stopped meanwhile
                    if job.trial_state != "RUNNING" and its is not None:
                        self.handles.pop(its._trial_id, None)
                running = sum(j.trial_state == "RUNNING" for j in mine.values())
                new = self.ask(sweep, the_study, asked, running)
                running, asked = running + new, asked + new
            finally:  # the jobs of trials settled above are stopped, whatever came after
                for pk, reason in stopped:
                    jobs.stop_job(pk, reason)
        if running == 0 and (asked >= sweep.max_trials or self.out_of_time(sweep)):
            self.finish(sweep)

    def model_unchecked(self, sweep: Sweep) -> bool:
        """A queued sweep whose model is still being checked (a WMLA hypersearch answers at
        once, as an exec does) waits; one whose check failed fails with the check's error.
        True when the sweep must not start this round."""
        model = sweep.model_definition
        if model is None or model.status == ModelDefinition.Status.VALID:
            return False
        if model.status == ModelDefinition.Status.INVALID:
            where = f" ({model.error_line})" if model.error_line else ""
            message = f"the model check failed: {model.error}{where}"
            if services.transition(sweep.pk, Sweep.State.FAILED, [Sweep.State.QUEUED],
                                   ended_at=timezone.now(), error=message):  # fmt: skip
                log.warning("sweep %s FAILED: %s", sweep.pk, message)
        return True

    def follow(self, sweep: Sweep, the_study: optuna.Study, job: Job, trial: Frozen | None,
               stopped: list[tuple[int, str]]) -> bool:  # fmt: skip
        """Steps 2 to 4 for one running trial; jobs to stop at the round's end (a trial told
        already, or lost) are added to ``stopped``.
        False when the sweep must not go on this round."""
        if trial is None:  # its study lost this trial (a storage replaced): it cannot go on
            note = "its trial is missing from the sweep's Optuna storage"
            self.settle(job, "FAIL", note=note)
            if job.state in Job.ACTIVE:
                stopped.append((job.pk, f"stopped: {note}"))
            return True
        if trial.state != TrialState.RUNNING:
            self.mirror(sweep, job, trial, stopped)
            return True
        reported = self.report(sweep, the_study, job, trial)
        if job.state in Job.ACTIVE:
            if (
                reported
                and self.prunable(sweep, job)
                and self.handle(the_study, trial).should_prune()
            ):
                self.prune(sweep, the_study, job)
            elif (
                job.objective_step is None
                and not sweep.hypersearch  # its file may come at its end only
                and self.objective_absent(job, sweep.objective)
            ):
                return self.objective_missing(sweep, the_study, job)
            return True
        if job.state == Job.State.COMPLETED:
            value = job.objective
            if sweep.hypersearch:  # every value the pruners' rungs may use, then the best
                self.report(sweep, the_study, job, trial, every=True)
                value = results.read(job, sweep.objective).best(sweep.direction)
            if value is None:
                return self.objective_missing(sweep, the_study, job)
            the_study.tell(job.trial_number, value, state=TrialState.COMPLETE)
            self.settle(job, "COMPLETE", objective=value)
            log.info("sweep %s: trial %s completed: %s %g", sweep.pk, job.trial_number,
                     sweep.objective, value)  # fmt: skip
        elif job.state == Job.State.FAILED:
            the_study.tell(job.trial_number, state=TrialState.FAIL)
            self.settle(job, "FAIL", note=job.error or "its job failed")
        elif job.trial_note.startswith(PRUNED_BY):  # stopped by a prune, not told yet
            the_study.tell(job.trial_number, state=TrialState.PRUNED)
            self.settle(job, "PRUNED", objective=job.objective, note=job.trial_note)
        else:  # STOPPED, not by the driver: its owner's doing, or the sweep's stop
            if not Sweep.objects.filter(pk=sweep.pk, state=Sweep.State.RUNNING).exists():
                return False  # the sweep was stopped: its trials resume with it
            the_study.tell(job.trial_number, state=TrialState.FAIL)
            self.settle(job, "FAIL", note="its job was stopped by its owner")
        return True

    def report(self, sweep: Sweep, the_study: optuna.Study, job: Job, trial: Frozen,
               every: bool = False) -> bool:  # fmt: skip
        """Report the objective's latest value recorded since the last report; True if
        there was one. A WMLA hypersearch's trial: the next value its val_dict_list.json
        holds (one a round, so that the pruner is asked at each; ``every``: all of them)."""
        after = -1 if job.objective_step is None else job.objective_step
        if sweep.hypersearch:
            points = self.result_points(sweep, job, after)
            points = points if every else points[:1]
        else:
            found = (Metric.objects.filter(job_id=job.pk, step__gt=after,
                                           values__has_key=sweep.objective)
                     .order_by("-step", "-pk").values_list("step", "values").first())  # fmt: skip
            points = [] if found is None else [(int(found[0]), found[1][sweep.objective])]
        for step, raw in points:
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
                raise ValueError(f"the objective '{sweep.objective}' is {raw!r} at step {step} "
                                 f"of job {job.pk}, not a number")  # fmt: skip
            self.handle(the_study, trial).report(float(raw), int(step))
            Job.objects.filter(pk=job.pk).update(objective=float(raw), objective_step=step)
            job.objective, job.objective_step = float(raw), int(step)
        return bool(points)

    def result_points(self, sweep: Sweep, job: Job, after: int) -> list[tuple[int, float]]:
        """The (step, value) pairs of the trial's val_dict_list.json past ``after``, by
        step (a step written twice: its last value)."""
        found = results.read(job, sweep.objective)
        if found.error:
            raise ValueError(f"job {job.pk}: {found.error}")
        by_step = dict(found.points)
        return sorted((step, value) for step, value in by_step.items() if step > after)

    def handle(self, the_study: optuna.Study, trial: Frozen) -> optuna.trial.Trial:
        """The running trial's handle (to report and ask the pruner), kept between rounds."""
        key = trial._trial_id
        if key not in self.handles:
            self.handles[key] = optuna.trial.Trial(the_study, key)
        return self.handles[key]

    def prunable(self, sweep: Sweep, job: Job) -> bool:
        """Whether the pruner is asked about the trial's latest value: where the sweep
        prunes, before the trial's last step (a trial that has trained every step has
        nothing left to save: it completes)."""
        step = job.objective_step
        total = sweep.trial_steps if sweep.hypersearch else job.total_steps  # in its steps
        last = bool(total) and step is not None and step >= total
        return sweep.algorithm in PRUNING and not last

    def prune(self, sweep: Sweep, the_study: optuna.Study, job: Job) -> None:
        """Stop the trial's job, then tell Optuna. The job is stopped first: one that ended
        meanwhile (its last steps trained while the pruner was asked) is told as it ended,
        in the next round. The reason is written on the job before the stop, so that a
        driver that dies between the stop and the tell tells PRUNED when it comes back."""
        note = (f"{PRUNED_BY} {PRUNING[sweep.algorithm]} at step {job.objective_step} "
                f"({sweep.objective} {job.objective:.4g})")  # fmt: skip
        Job.objects.filter(pk=job.pk, trial_state="RUNNING").update(trial_note=note)
        if not jobs.stop_job(job.pk, note):
            Job.objects.filter(pk=job.pk, trial_state="RUNNING").update(trial_note="")
            return
        the_study.tell(job.trial_number, state=TrialState.PRUNED)
        self.settle(job, "PRUNED", objective=job.objective, note=note)
        log.info("sweep %s: trial %s %s", sweep.pk, job.trial_number, note)

    def objective_absent(self, job: Job, objective: str) -> bool:
        """The trial has been evaluated at least once (so every metric it records has come
        in) and none of its records holds the objective. Asked in that order: the records
        that came with or before the evaluation are in once it is (a batch is stored in one
        transaction), however late they came after this round's report."""
        if not Metric.objects.filter(job=job, kind="test").exists():
            return False
        return not Metric.objects.filter(job=job, values__has_key=objective).exists()

    def objective_missing(self, sweep: Sweep, the_study: optuna.Study, job: Job) -> bool:
        """The trial never records the objective: it fails, and so does the sweep (its
        every trial would)."""
        message = never_recorded(job, sweep)
        the_study.tell(job.trial_number, state=TrialState.FAIL)
        self.settle(job, "FAIL", note=message)
        jobs.fail_job(job.pk, message)
        services.end_sweep(sweep, Sweep.State.FAILED, message)
        log.warning("sweep %s FAILED: %s", sweep.pk, message)
        return False

    def mirror(self, sweep: Sweep, job: Job, trial: Frozen,
               stopped: list[tuple[int, str]]) -> None:  # fmt: skip
        """The job of a trial Optuna has told already (the driver died between the two)
        says so too."""
        state = trial.state.name
        if trial.state == TrialState.PRUNED:
            note = (
                f"pruned by {PRUNING.get(sweep.algorithm, 'its pruner')} at step {trial.last_step}"
            )
            value = (
                trial.intermediate_values.get(trial.last_step)
                if trial.last_step is not None
                else None
            )
        else:
            note = "" if trial.state == TrialState.COMPLETE else (job.error or "failed")
            value = trial.value
        self.settle(job, state, objective=value, note=note)
        if job.state in Job.ACTIVE and trial.state != TrialState.COMPLETE:
            stopped.append((job.pk, note))

    def settle(self, job: Job, state: str, objective: float | None = None, note: str = "") -> None:
        """Write the trial's outcome on its job, once."""
        fields: dict[str, Any] = {"trial_state": state, "trial_note": note}
        if objective is not None:
            fields["objective"] = objective
        Job.objects.filter(pk=job.pk, trial_state="RUNNING").update(**fields)
        job.trial_state = state

    def out_of_time(self, sweep: Sweep) -> bool:
        return bool(sweep.max_time) and services.elapsed(sweep) >= sweep.max_time

    def ask(self, sweep: Sweep, the_study: optuna.Study, asked: int, running: int) -> int:
        """Step 5: returns how many trials it started. Within the owner's trials in flight
        (``EDT_USER_MAX_TRIALS``), and only while the sweep runs: its owner may stop it
        while a trial is sampled. A trial asked of a sweep stopped meanwhile gets its job
        when the sweep resumes (step 2); a job made as the stop came is stopped with it."""
        if self.out_of_time(sweep):
            return 0
        room = usercaps.room("EDT_USER_MAX_TRIALS", services.trials_in_flight(sweep.owner))
        wanted = min(sweep.max_parallel - running, sweep.max_trials - asked, room)
        if wanted <= 0:
            return 0
        shapes = study.distributions(sweep)
        for started in range(wanted):
            if not still_running(sweep):
                return started
            trial = the_study.ask(shapes)
            if not still_running(sweep):
                return started
            job = self.submit(sweep, trial.number, trial.params)
            if not still_running(sweep):
                jobs.stop_job(job.pk, f"stopped with its sweep {sweep.pk}")
                return started + 1
        return wanted

    def submit(self, sweep: Sweep, number: int, params: dict[str, Any]) -> Job:
        """The trial's job: the sweep's values, its lr and batch_size if searched, its
        hyperparameters for the model."""
        values = {**sweep.training_values(),
                  **{k: v for k, v in params.items() if k in PLATFORM_HPARAMS}}  # fmt: skip
        submission = validated(values, train_samples(sweep.dataset))
        hparams = dict(params)
        extra: dict[str, Any] = {"hparams": hparams}
        if sweep.wmla:  # a WMLA-style script: its config.json, its argv, the values it decides
            extra = {"hparams": {**sweep.wmla.get("config", {}), **hparams},
                     "argv": list(sweep.wmla.get("argv", [])),
                     "script_decides": list(sweep.wmla.get("script_decides", []))}  # fmt: skip
        placed: dict[str, Any] = {}
        if sweep.hypersearch:  # the team its sigName named (edtweb/api/wmla_hpo.py)
            team = sweep.wmla.get("team")
            placed = {"team": Team.objects.filter(pk=team).first() if team else None,
                      "resource_group": sweep.wmla.get("resource_group") or "default"}  # fmt: skip
        job = jobs.submit_job(
            sweep.owner, submission, extra, name=f"{sweep.name} #{number}", **placed,
            model_definition=sweep.model_definition, dataset=sweep.dataset,
            model_path=sweep.model_path, data_path=sweep.data_path, seed=sweep.seed,
            sweep=sweep, trial_number=number, hparams=hparams, trial_state="RUNNING",
        )  # fmt: skip
        if sweep.hypersearch:  # what the execs API shows of it (edtweb/api/wmla.py)
            request = sweep.wmla["request"]
            jobs.record_event(job.pk, "wmla", f"experiment {number} of hypersearch {sweep.name}",
                              args=request.get("args", ""), framework=sweep.wmla.get(
                                  "framework", ""), ignored=[])  # fmt: skip
        log.info("sweep %s: trial %s is job %s: %s", sweep.pk, number, job.pk, hparams)
        return job

    def finish(self, sweep: Sweep) -> None:
        """Step 6: COMPLETED with its best trial, or FAILED when none completed."""
        shown = view(sweep)
        if shown.best is not None:
            if services.end_sweep(sweep, Sweep.State.COMPLETED):
                log.info("sweep %s COMPLETED: best trial %s (job %s), %s %g", sweep.pk,
                         shown.best.number, shown.best.job, sweep.objective,
                         shown.best.objective)  # fmt: skip
            return
        last = next((t.note for t in reversed(shown.trials) if t.note), "")
        message = (f"no trial completed ({shown.pruned} pruned, {shown.failed} failed)"
                   + (f"; the last: {last}" if last else ""))  # fmt: skip
        if services.end_sweep(sweep, Sweep.State.FAILED, message):
            log.warning("sweep %s FAILED: %s", sweep.pk, message)
