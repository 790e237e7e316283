"""The live scheduler's decisions: policy and placement over the jobs in the database and
the slots alive now, applied through one ``JobRunner`` per job (DESIGN.md, "Scheduling
contract"). Called by the scheduler service on every wake-up and tick, while it is active.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from edtweb.training import services
from edtweb.training.models import Job
from edtweb.training.runner import JobRunner
from edtweb.training.speedups import Curves
from scheduler import redis_acl
from scheduler.placement import Slot, place
from scheduler.policies import Decision, JobView, Snapshot, decide
from scheduler.policies.las import SPEEDUP_POLICY
from scheduler.store import Allocation, AllocationRecord, SlotInfo

log = logging.getLogger("edt.scheduler")


class LiveScheduler:
    def __init__(self, policy: str = "fairshare") -> None:
        self.policy = policy
        self.runners: dict[int, JobRunner] = {}
        self.curves = Curves() if policy == SPEEDUP_POLICY else None  # samples/s per size
        self.capacity = 0  # usable slots at the last decision
        self.announced: dict[str, str] = {}  # job -> the last allocation change recorded
        self.redis_run: str | None = None  # the Redis server whose ACL users we granted

    def step(self, alive: list[SlotInfo]) -> bool:
        """One decision and one protocol step for every job; True while jobs are in motion."""
        alive = [s for s in alive if s.alive]
        jobs = {job.pk: job for job in schedulable_jobs()}
        self._sync_runners(jobs)
        self._regrant()
        if self.curves:
            self.curves.forget(set(jobs))
        usable = self._usable(alive)
        self.capacity = len(usable)
        held = {pk: len(r.holding()) for pk, r in self.runners.items()}
        curves = self.curves
        speedups = {pk: curves.curve(pk, j.max_workers) for pk, j in jobs.items()} if curves else {}
        decision = decide(snapshot(jobs.values(), self.capacity, held, speedups=speedups),
                          self.policy)  # fmt: skip
        self._apply(jobs, usable, decision)
        return self._advance({s.slot_id for s in alive})

    def allocations(self) -> AllocationRecord:
        """The allocation record: the slots each job holds, the usable capacity and the
        policy of the last decision (written to Redis by the scheduler service alone)."""
        jobs = {pk: Allocation(tuple(r.members()), tuple(r.joiners()))
                for pk, r in self.runners.items() if r.holding()}  # fmt: skip
        return AllocationRecord(jobs, self.capacity, self.policy)

    def _sync_runners(self, jobs: dict[int, Job]) -> None:
        for pk in [pk for pk in self.runners if pk not in jobs]:  # stopped or failed elsewhere
            self.runners[pk].coord.kill_all()
            self._drop(pk)
        for pk, job in jobs.items():
            if pk not in self.runners and job.state == Job.State.RUNNING:
                self.runners[pk] = JobRunner(job)  # taking over from another scheduler

    def _regrant(self) -> None:
        """A restarted Redis has forgotten its ACL users (``ACL SETUSER`` is not in the
        append-only file): grant every running job's again at once, before its learners'
        leases lapse. Redis' ``run_id`` tells a restart; one ``INFO`` per step."""
        if not self.runners:
            return
        client = next(iter(self.runners.values())).jobs.r
        run_id = str(client.info("server").get("run_id", ""))
        if run_id == self.redis_run:
            return
        for pk in self.runners:
            redis_acl.grant(client, settings.REDIS_URL, str(pk), settings.SECRET_KEY)
        if self.redis_run is not None:
            log.info("Redis restarted: granted the ACL users of %d jobs again", len(self.runners))
        self.redis_run = run_id

    def _usable(self, alive: list[SlotInfo]) -> list[Slot]:
        """Alive slots, less those where a leaving learner has not exited yet."""
        held = {s for r in self.runners.values() for s in r.holding()}
        busy = {s for r in self.runners.values() for s in r.occupied()} - held
        return [Slot(s.slot_id, s.host, s.index) for s in alive if s.slot_id not in busy]

    def _apply(self, jobs: dict[int, Job], usable: list[Slot], decision: Decision) -> None:
        current = {str(pk): r.holding() for pk, r in self.runners.items()}
        placement = place(usable, current, decision.targets)
        if decision.reasons:  # the decision's totals once; each event only its job's slice
            summary = decision.summary()
            views = {view.id: view for view in decision.snapshot.jobs}
            for key, reason in decision.reasons.items():
                if self.announced.get(key) == reason:
                    continue  # the same change, still being carried out: said once
                self.announced[key] = reason
                data = decision.job_inputs(views[key], summary)
                services.record_event(int(key), "scaled", reason, **data)
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

    def _advance(self, alive: set[str]) -> bool:
        for pk, runner in list(self.runners.items()):
            if runner.tick(alive) is not None:
                self._drop(pk)
        return bool(self.runners)

    def _drop(self, pk: int) -> None:
        """The job holds no slot any more: its learners' Redis user goes too."""
        runner = self.runners.pop(pk)
        self.announced.pop(str(pk), None)
        redis_acl.revoke(runner.jobs.r, str(pk))


def snapshot(jobs: Iterable[Job], capacity: int, held: dict[int, int],
             priorities: dict[int, int] | None = None,
             speedups: dict[int, tuple[float, ...]] | None = None) -> Snapshot:  # fmt: skip
    """The policy's input: the active ``jobs`` with the slots each holds now (``held``,
    members and joiners), over ``capacity`` usable slots. The scheduler and the priority
    preview (with ``priorities`` overriding some jobs') both build it here."""
    priorities, speedups = priorities or {}, speedups or {}
    views = [
        JobView(
            id=str(job.pk),
            max_workers=job.max_workers,
            submitted=job.created_at.timestamp(),
            priority=priorities.get(job.pk, job.priority),
            min_workers=min(job.min_workers, job.max_workers),
            current=held.get(job.pk, 0),
            state=job.state,
            name=job.name,
            speedup=speedups.get(job.pk, ()),
        )
        for job in jobs
    ]
    return Snapshot(capacity, views)


def schedulable_jobs() -> Any:
    """The jobs a decision is about: active ones, less queued WMLA execs whose model is
    still being checked (edtweb/registry/services.py)."""
    return Job.objects.filter(state__in=Job.ACTIVE).exclude(
        state=Job.State.QUEUED, model_definition__status="CHECKING"
    )
