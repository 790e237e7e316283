"""The live scheduler's decisions: policy and placement over the jobs in the database and
the slots alive now, applied through one ``JobRunner`` per job (DESIGN.md, "Scheduling
contract"). Called by the scheduler service on every wake-up and tick, while it is active.
"""

from __future__ import annotations

import logging

from edtweb.training import services
from edtweb.training.models import Job
from edtweb.training.runner import JobRunner
from scheduler.placement import Slot, place
from scheduler.policies import Decision, JobView, Snapshot, decide
from scheduler.store import SlotInfo

log = logging.getLogger("edt.scheduler")


class LiveScheduler:
    def __init__(self, policy: str = "fairshare") -> None:
        self.policy = policy
        self.runners: dict[int, JobRunner] = {}

    def step(self, alive: list[SlotInfo]) -> bool:
        """One decision and one protocol step for every job; True while jobs are in motion."""
        alive = [s for s in alive if s.alive]
        jobs = {job.pk: job for job in Job.objects.filter(state__in=Job.ACTIVE)}
        self._sync_runners(jobs)
        usable = self._usable(alive)
        decision = decide(
            Snapshot(len(usable), [self._view(j) for j in jobs.values()]), self.policy
        )
        self._apply(jobs, usable, decision)
        return self._advance()

    def assignments(self) -> dict[str, int]:
        """Slot id -> the job whose learner holds it (for the Cluster page)."""
        return {slot: pk for pk, r in self.runners.items() for slot in r.holding()}

    def _sync_runners(self, jobs: dict[int, Job]) -> None:
        for pk in [pk for pk in self.runners if pk not in jobs]:  # stopped or failed elsewhere
            self.runners.pop(pk).coord.kill_all()
        for pk, job in jobs.items():
            if pk not in self.runners and job.state == Job.State.RUNNING:
                self.runners[pk] = JobRunner(job)  # taking over from another scheduler

    def _usable(self, alive: list[SlotInfo]) -> list[Slot]:
        """Alive slots, less those where a leaving learner has not exited yet."""
        held = {s for r in self.runners.values() for s in r.holding()}
        busy = {s for r in self.runners.values() for s in r.occupied()} - held
        return [Slot(s.slot_id, s.host, s.index) for s in alive if s.slot_id not in busy]

    def _view(self, job: Job) -> JobView:
        runner = self.runners.get(job.pk)
        current = len(runner.holding()) if runner else 0
        return JobView(
            id=str(job.pk),
            max_workers=job.max_workers,
            submitted=job.created_at.timestamp(),
            priority=job.priority,
            min_workers=min(job.min_workers, job.max_workers),
            current=current,
            state=job.state,
            name=job.name,
        )

    def _apply(self, jobs: dict[int, Job], usable: list[Slot], decision: Decision) -> None:
        current = {str(pk): r.holding() for pk, r in self.runners.items()}
        placement = place(usable, current, decision.targets)
        for key, reason in decision.reasons.items():
            services.record_event(int(key), "scaled", reason, **decision.inputs())
            log.info("job %s: %s", key, reason)
        for pk, job in jobs.items():
            key, target = str(pk), decision.targets.get(str(pk), 0)
            runner = self.runners.get(pk)
            if runner is None and target > 0:
                runner = self.runners[pk] = self._new_runner(job)
            if runner is not None:
                runner.apply(target, placement.joined.get(key, ()), placement.left.get(key, ()))

    def _new_runner(self, job: Job) -> JobRunner:
        runner = JobRunner(job, resume=False)
        if job.state == Job.State.SUSPENDED:
            runner.jobs.reset_run()  # the new learners load the latest checkpoint
            services.record_event(job.pk, "resuming", "a slot is free: resuming")
        return runner

    def _advance(self) -> bool:
        for pk, runner in list(self.runners.items()):
            if runner.tick() is not None:
                del self.runners[pk]
        return bool(self.runners)
