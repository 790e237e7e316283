"""One job's elastic protocol, driven from the database's side.

The live scheduler owns a ``JobRunner`` per job that holds slots: it sends learners to the
slots placement chose, admits them when READY, shrinks, handles failures, suspends, and
records every change through the job book (``ports.JobBook``). It reads no metric records:
the metrics consumer stores them and says when training finished. A new active scheduler
rebuilds runners from Redis.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from protocol.jobstore import JobStore
from scheduler.dispatch import CeleryLauncher, Dispatches
from scheduler.elastic import Coordinator
from scheduler.live.ports import COMPLETED, FAILED, SUSPENDED, Ports
from scheduler.phases import FINAL, Facts, JobPhase, Transition, advance

log = logging.getLogger("edt.scheduler")

MESSAGES = {
    "generation": "now {workers} worker(s): {why}",
    "failure": "learner(s) {lost} lost; going on with {survivors}",
    "restart": "every learner was lost: resuming from step {from_step}, "
    "{iterations_lost} iteration(s) lost",
}


class Controlled(Protocol):
    """A job as its runner reads it (a job row, or the web's model instance)."""

    @property
    def pk(self) -> int: ...
    @property
    def collective_timeout(self) -> float: ...


class JobRunner:
    """``jobs``: the job's store (the live scheduler's reads from its step's observation;
    by default one that reads Redis at each call); ``batch``: where learner starts go when
    the caller sends a step's starts together (by default each is sent at once)."""

    def __init__(self, job: Controlled, ports: Ports, resume: bool = True,
                 jobs: JobStore | None = None,
                 batch: Dispatches | None = None) -> None:  # fmt: skip
        self.job_id = job.pk
        self.book = ports.book
        self.jobs = jobs if jobs is not None else JobStore(ports.redis(), str(job.pk))
        self.launcher = CeleryLauncher(self.jobs, ports.celery, job.pk, batch)
        self.coord = Coordinator(self.jobs, self.launcher, self._event, job.collective_timeout)
        self.want = 0
        self.phase = JobPhase.WAITING
        self.tail = ""  # the stream id of the learners' latest record seen
        self.over = False  # the learners said training is over: no learner joins any more
        self.moved = False  # the last tick took a transition
        # Members the scheduler has placed elsewhere: their slots are another job's from
        # that decision on, though they train here until the shrink's generation (which
        # waits for the job to settle) lets them go.
        self.leaving: set[str] = set()
        if resume:
            self._resume()

    def _resume(self) -> None:
        """Take over a job another scheduler was running (learners never noticed)."""
        c, gen = self.coord, self.jobs.generation()
        live = [s for s in self.launcher.tokens if not self.launcher.exited(s)]
        c.started = set(live)
        c.members = [s for s in self.jobs.members(gen) if s in live] if gen else []
        c.joining = [s for s in live if s not in c.members]
        self.want = len(c.members)
        self.phase = JobPhase.TRAINING if c.members else JobPhase.WAITING
        # What the learners wrote while no scheduler ran, before any decision: a job that
        # finished meanwhile must not be sent new learners.
        self._progress()

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        message = MESSAGES.get(kind, kind).format(**data)
        self.book.record_event(self.job_id, kind, message, **data)

    # What the scheduler sees and asks ---------------------------------------------------------

    def holding(self) -> list[str]:
        """The job's slots, oldest learner first: members, then joiners. A job being
        suspended holds none: its slots go to others as soon as its learners are out."""
        return [*self.members(), *self.joiners()]

    def _holds(self) -> bool:
        return self.phase not in (JobPhase.SUSPENDING, *FINAL)

    def members(self) -> list[str]:
        """Its current generation, less those placed elsewhere that have yet to leave."""
        if not self._holds():
            return []
        return [s for s in self.coord.members if s not in self.leaving]

    def joiners(self) -> list[str]:
        return list(self.coord.joining) if self._holds() else []

    def occupied(self) -> set[str]:
        """Slots where a learner of this job still runs (leavers included)."""
        return {s for s in self.coord.started if not self.launcher.exited(s)}

    def apply(self, want: int, joined: tuple[str, ...], left: tuple[str, ...]) -> None:
        c = self.coord
        if self.phase is JobPhase.SUSPENDING:
            # Its learners are checkpointing to leave: a joiner would see the stop flag and
            # exit at once, again and again. It resumes, with a runner of its own, once out.
            return
        for slot in left:
            if slot in c.joining:  # not admitted yet: call it off
                c.joining.remove(slot)
                self.launcher.kill(slot)
            elif slot in c.members:
                self.leaving.add(slot)
        self.leaving.difference_update(joined)  # placed here again before it left: it stays
        joined = tuple(s for s in joined if s not in c.members)
        if joined and not self.over:  # training finished: no learner joins any more
            c.start_joiners(list(joined))
        self.want = want

    def signature(self) -> tuple[object, ...]:
        """What a tick reads of this runner's own state and may change: a tick that left it
        as it was, on an unchanged observation, would do nothing the next time either."""
        c = self.coord
        return (self.phase, self.want, tuple(c.members), tuple(c.joining), len(c.started),
                c.step, c.done, self.tail, self.over, c.handled_failures,
                len(self.launcher.gone))  # fmt: skip

    def restless(self) -> bool:
        """Its next tick depends on time alone: a failure's grace runs."""
        return self.coord.failure_since is not None

    # The protocol ------------------------------------------------------------------------------

    def tick(self, alive: set[str] | None = None, look: bool = True) -> str | None:
        """Observe the job, move its membership toward its allocation, and take the phase
        transition the facts call for; returns the job's new resting state when it has one.
        ``alive``: the slots alive now; with ``look``, its learners' leases are looked at
        first (the live scheduler looks at every job's at once, before its ticks)."""
        c = self.coord
        if alive is not None and look:
            for slot in self.launcher.observe(alive):
                log.info("job %s: the learner on %s is gone (its lease lapsed)", self.job_id, slot)
        self._progress()
        c.drop_dead_joiners()
        lost = c.watch_failures() if self.phase is not JobPhase.SUSPENDING else False
        if self.phase in (JobPhase.WAITING, JobPhase.TRAINING) and not lost:
            self._resize(alive)
        transition = advance(self.phase, self._facts(lost))
        self.moved = transition is not None
        if transition is None:
            return None
        log.info("job %s: %s", self.job_id, transition)
        self.phase = transition.next
        return self._enter(transition)

    def _facts(self, lost: bool) -> Facts:
        c = self.coord
        return Facts(
            want=self.want, members=len(c.members), learners=len(self.occupied()), lost=lost,
            done=c.done, error=c.first_error() is not None,
            started=c.step > 0 or self.jobs.generation() > 0,
        )  # fmt: skip

    def _resize(self, alive: set[str] | None) -> None:
        c = self.coord
        if self.leaving or 0 < self.want < len(c.members):  # those placed elsewhere go first
            keep = min(self.want, len(c.members) - len(self.leaving))
            c.shrink_to(keep, alive=set(c.members if alive is None else alive) - self.leaving)
        elif self.want > len(c.members):
            c.grow_to(self.want)
        self.leaving.intersection_update(c.members)

    def _enter(self, transition: Transition) -> str | None:
        """Carry out a transition's effects; the job's resting state when it ends here."""
        to = transition.next
        if to is JobPhase.FAILED:
            self.book.fail(self.job_id, self.coord.first_error() or "failed")
            self.coord.kill_all()
            return FAILED
        if to is JobPhase.TRAINING and transition.previous is JobPhase.WAITING:
            self.book.start(self.job_id)
        elif to is JobPhase.COMPLETING:
            self.book.complete(self.job_id)
        elif to is JobPhase.COMPLETED:
            self.book.complete(self.job_id)
            return COMPLETED
        elif to is JobPhase.SUSPENDING:
            self.jobs.request_stop()  # learners checkpoint, then exit
            self.book.record_event(self.job_id, "suspending", "checkpointing before suspension")
        elif to is JobPhase.SUSPENDED:
            self.coord.kill_all()  # joiners that never joined
            self.book.suspend(self.job_id, self.jobs.checkpoint_step())
            return SUSPENDED
        return None

    def _progress(self) -> None:
        """The learners' step (that of their latest record) and whether training is over.
        Once the learners wrote ``done`` no learner joins any more; the job completes only
        when the metrics consumer also stored every record up to it."""
        c, seen = self.coord, self.jobs.progress()
        if seen.tail != self.tail:  # after a restart, the step resumed until new records come
            self.tail, c.step = seen.tail, seen.step
        if (seen.ended or seen.finished is not None) and not self.over:
            self.over = True
            self.jobs.request_stop()  # learners still waiting to join go home
        if seen.finished is not None:
            c.step, c.done = seen.finished, True

    def pending(self) -> bool:
        """A step soon would move the job on: it just changed phase (the next transition
        may be due at once), or a failure waits out its grace period."""
        return self.moved or self.coord.failure_since is not None
