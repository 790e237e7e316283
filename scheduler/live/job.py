"""One job's controller, carried out: the executor of ``scheduler/elastic.py``'s steps.

The live scheduler owns a ``JobRunner`` per job that holds slots; the drive command and the
engine benchmark drive one each. It observes the job (its store in Redis, and how its
learners ended), hands the observation with the controller's one frozen state to the
controller's pure steps, keeps the state they return, and carries out their actions:
learner starts and kills through its launcher (Celery tasks on slot queues, or local
processes), generations and the stop flag in the job's store, timeline events and state
changes through the job book (``ports.JobBook``). It reads no metric records: the metrics
consumer stores them and says when training finished. A new active scheduler rebuilds
runners from Redis.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Protocol

from protocol.exits import RunResult
from protocol.jobstore import JobStore
from protocol.learner_task import LearnerPaths
from protocol.retry import REDIS_RETRIES
from scheduler import elastic
from scheduler.dispatch import CeleryLauncher, Dispatches
from scheduler.elastic import (
    FAILURE_GRACE_SECONDS,
    Action,
    Enter,
    Event,
    Kill,
    Note,
    Publish,
    RequestStop,
    Seen,
    Start,
)
from scheduler.live.ports import Ports
from scheduler.metrics import LEARNER_EXITS, LEARNER_STARTS, exit_status
from scheduler.phases import JobPhase
from scheduler.policies import model as states

log = logging.getLogger("edt.scheduler")

MESSAGES = {
    "generation": "now {workers} worker(s): {why}",
    "failure": "learner(s) {lost} lost; going on with {survivors}",
    "restart": "every learner was lost: resuming from step {from_step}, "
    "{iterations_lost} iteration(s) lost",
}


class Launcher(Protocol):
    """Starts and kills a job's learners, and says how those that ended ended."""

    def start(self, slot: str, token: str) -> None: ...
    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None: ...
    def exits(self) -> Mapping[str, RunResult]: ...
    def dispatched(self) -> Mapping[str, str]: ...


class Timeline(Protocol):
    """What a runner writes of its job: its timeline and its state changes (``JobBook``)."""

    def record_event(self, job_id: int, kind: str, message: str, **data: Any) -> None: ...
    def start(self, job_id: int) -> bool: ...
    def fail(self, job_id: int, message: str) -> bool: ...
    def complete(self, job_id: int) -> bool: ...
    def suspend(self, job_id: int, checkpoint_step: int) -> bool: ...


class Controlled(Protocol):
    """A job as its runner reads it (a job row, or the web's model instance)."""

    @property
    def pk(self) -> int: ...
    @property
    def collective_timeout(self) -> float: ...


def new_token() -> str:
    return os.urandom(16).hex()


class JobRunner:
    """``jobs``: the job's store (the live scheduler's reads from its step's observation;
    otherwise one that reads Redis at each call); ``launcher``: how its learners start."""

    def __init__(self, job_id: int, jobs: JobStore, launcher: Launcher, book: Timeline,
                 collective_timeout: float = 0.0, resume: bool = True) -> None:  # fmt: skip
        self.job_id = job_id
        self.jobs = jobs
        self.launcher = launcher
        self.book = book
        seen = self.seen()
        # Exits reported before this runner existed were counted by the one before it.
        self.counted = {result.token for result in seen.exits.values()}
        gen_members = jobs.members(seen.generation) if resume and seen.generation else []
        state = elastic.taking_over(seen, launcher.dispatched(), gen_members, resume)
        self.state = replace(state, waiting_on_dead=collective_timeout + FAILURE_GRACE_SECONDS)
        if resume:
            # What the learners wrote while no scheduler ran, before any decision: a job
            # that finished meanwhile must not be sent new learners.
            self._tick_progress()

    @classmethod
    def celery(cls, job: Controlled, ports: Ports, resume: bool = True,
               jobs: JobStore | None = None, batch: Dispatches | None = None,
               paths: LearnerPaths | None = None) -> JobRunner:  # fmt: skip
        """The live scheduler's runner: learners are Celery tasks on the slots' queues,
        carrying the job's ``paths`` (read from the book when not given)."""
        store = jobs if jobs is not None else JobStore(ports.redis(), str(job.pk))
        paths = paths if paths is not None else ports.book.paths([job.pk])[job.pk]
        launcher = CeleryLauncher(store, ports.celery, job.pk, paths, batch)
        runner = cls(job.pk, store, launcher, ports.book, job.collective_timeout, resume)
        runner.state = replace(runner.state, max_start_failures=ports.start_failures)
        return runner

    # The observation ---------------------------------------------------------------------------

    def seen(self) -> Seen:
        j = self.jobs
        return Seen(
            generation=j.generation(), adopted=j.adopted(), ready=frozenset(j.ready_slots()),
            failures=tuple(j.failures()), errors=tuple(j.errors()),
            exits=dict(self.launcher.exits()), crashes=j.crashes(),
            checkpoint=j.checkpoint_step(),
            progress=j.progress(), now=time.monotonic(), wall=time.time(),
        )  # fmt: skip

    def _counted(self, seen: Seen) -> Seen:
        """``seen``, its learners' exits not seen before counted (``edt_learner_exits``),
        and the Redis retries they reported since (``edt_redis_retries``, with the
        scheduler's own)."""
        for result in seen.exits.values():
            if result.token not in self.counted:
                self.counted.add(result.token)
                LEARNER_EXITS.labels(exit_status(result.code)).inc()
        retried = self.jobs.take_redis_retries()
        if retried:
            REDIS_RETRIES.inc(retried)
        return seen

    def ended(self) -> Seen:
        """The part of an observation that says which learners ended (cheap: the loop asks
        it of every job at each look)."""
        return Seen(exits=self.launcher.exits(), now=time.monotonic())

    # What the scheduler sees and asks -----------------------------------------------------------

    @property
    def phase(self) -> JobPhase:
        return self.state.phase

    @property
    def target(self) -> int:
        return self.state.target

    def holding(self) -> list[str]:
        """The job's slots, oldest learner first: members, then joiners. A job being
        suspended holds none: its slots go to others as soon as its learners are out."""
        return [*elastic.members(self.state), *elastic.joiners(self.state)]

    def members(self) -> list[str]:
        return elastic.members(self.state)

    def joiners(self) -> list[str]:
        return elastic.joiners(self.state)

    def exited(self, slot: str) -> bool:
        return elastic.exited(self.state, self.ended(), slot)

    def pending_slots(self) -> list[str]:
        """Slots where the learner last sent has not ended (as far as is known)."""
        return elastic.pending(self.state, self.ended())

    def busy(self, held: Collection[str]) -> set[str]:
        """Slots where a learner of this job still runs that it does not hold (leavers)."""
        started = self.state.started
        if len(started) <= len(held):
            return set()
        seen = self.ended()
        return {s for s in started.difference(held) if not elastic.exited(self.state, seen, s)}

    def movable(self) -> bool:
        """Its learners could be moved now (no change under way: ``elastic.movable``)."""
        j = self.jobs
        return elastic.movable(self.state, Seen(generation=j.generation(), adopted=j.adopted()))

    def soon(self) -> bool:
        """A step soon would move the job on (it just changed phase, or a failure's grace
        runs): ``elastic.soon``. (Not ``pending``: that is the slots whose learner has not
        ended, ``pending_slots``.)"""
        return elastic.soon(self.state)

    def restless(self) -> bool:
        """Its next tick depends on time alone: a failure's grace runs."""
        return elastic.restless(self.state)

    # Steps ----------------------------------------------------------------------------------

    def look(self, alive: Collection[str]) -> list[str]:
        """Look at the leases of its pending learners once; the slots newly judged gone.
        Their dispatches are taken back: a learner judged gone never started, or stopped
        renewing, and a task for it still queued on a lost slot would otherwise start it
        when the slot's worker comes back, holding the slot from the next learner sent
        there (test_scheduler_live's lost slot, once)."""
        seen = self.ended()
        leases = self.jobs.leases(elastic.pending(self.state, seen))
        state, gone = elastic.look(self.state, seen, leases, alive)
        for slot in gone:  # before the state is kept: Redis away, the next look does it again
            self.jobs.revoke_dispatch(slot, state.learners.tokens[slot])
            log.info("job %s: the learner on %s is gone (its lease lapsed)", self.job_id, slot)
        self.state = state
        return gone

    def apply(self, target: int, joined: Collection[str], left: Collection[str],
              batch: int = 0) -> None:  # fmt: skip
        """A decision: ``target`` slots, learners to start on ``joined`` and to take off
        ``left``; ``batch``: a goodput-mode job's global batch (0: the last one asked)."""
        self.state, actions = elastic.apply(self.state, self._counted(self.seen()), target, joined,
                                            left, new_token, batch)  # fmt: skip
        self._do(actions)

    def tick(self, alive: Collection[str] | None = None, look: bool = True) -> str | None:
        """Observe the job, move its membership toward its allocation, and take the phase
        transition the facts call for; returns the job's new resting state when it has one.
        ``alive``: the slots alive now; with ``look``, its learners' leases are looked at
        first (the live scheduler looks at every job's at once, before its ticks)."""
        if alive is not None and look:
            self.look(alive)
        seen = self._counted(self.seen())
        self.state, actions, transition = elastic.tick(self.state, seen, alive, new_token)
        if transition is not None:
            log.info("job %s: %s", self.job_id, transition)
        self._do(actions)
        return elastic.resting(transition)

    def _tick_progress(self) -> None:
        """Only the learners' progress (a runner taking over reads it before any decision)."""
        step = elastic.Step(self.state, self.seen(), new_token)
        step.progress()
        self.state, actions = step.done_with()
        self._do(actions)

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        """Signal the learner on ``slot``, if it still runs (fault injection)."""
        if not self.exited(slot):
            self.launcher.kill(slot, sig)

    def kill_all(self) -> None:
        self._do(elastic.kill_all(self.state, self.ended()))

    def first_error(self) -> str | None:
        return elastic.first_error(self.seen())

    # The actions -------------------------------------------------------------------------------

    def _do(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Start(slot, token):
                    self.launcher.start(slot, token)
                    LEARNER_STARTS.inc()
                case Kill(slot, sig):
                    self.launcher.kill(slot, sig)
                case Publish(members, gen, batch):
                    self.jobs.publish_generation(list(members), batch, gen)
                case RequestStop():
                    self.jobs.request_stop()
                case Event(kind, data):
                    message = MESSAGES.get(kind, kind).format(**data)
                    self.book.record_event(self.job_id, kind, message, **data)
                case Note(kind, message):
                    self.book.record_event(self.job_id, kind, message)
                case Enter(state, message, checkpoint):
                    self._enter(state, message, checkpoint)

    def _enter(self, state: str, message: str, checkpoint: int) -> None:
        if state == states.RUNNING:
            self.book.start(self.job_id)
        elif state == states.COMPLETED:
            self.book.complete(self.job_id)
        elif state == states.FAILED:
            self.book.fail(self.job_id, message)
        elif state == states.SUSPENDED:
            self.book.suspend(self.job_id, checkpoint)
