"""One job's elastic protocol, driven from the database's side.

The live scheduler owns a ``JobRunner`` per job that holds slots: it sends learners to the
slots placement chose, admits them when READY, shrinks, handles failures, suspends, and
records every change and metric. A new active scheduler rebuilds runners from Redis.
"""

from __future__ import annotations

import time
from typing import Any

from edtweb.celery import app as celery_app
from edtweb.training import live, services
from edtweb.training.models import Job
from scheduler.dispatch import CeleryLauncher
from scheduler.elastic import Coordinator

LIVE_INTERVAL = 0.1  # seconds between a job's live metric updates

MESSAGES = {
    "generation": "now {workers} worker(s): {why}",
    "failure": "learner(s) {lost} lost; going on with {survivors}",
    "restart": "every learner was lost: resuming from step {from_step}, "
    "{iterations_lost} iteration(s) lost",
}


class JobRunner:
    def __init__(self, job: Job, resume: bool = True) -> None:
        self.job_id = job.pk
        self.jobs = services.job_store(job.pk)
        self.launcher = CeleryLauncher(self.jobs, celery_app, job.pk)
        self.coord = Coordinator(self.jobs, self.launcher, self._event)
        self.want = 0
        self.suspending = False
        self.unsent: list[dict[str, Any]] = []
        self.sent_seq: int | None = None
        self.sent_at = 0.0
        self.coord.cursor = self.jobs.cursor()  # metrics already persisted stay so
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

    def _event(self, kind: str, data: dict[str, Any]) -> None:
        message = MESSAGES.get(kind, kind).format(**data)
        services.record_event(self.job_id, kind, message, **data)

    # What the scheduler sees and asks ---------------------------------------------------------

    def holding(self) -> list[str]:
        """The job's slots, oldest learner first: members, then joiners. A job being
        suspended holds none: its slots go to others as soon as its learners are out."""
        if self.suspending:
            return []
        return [*self.coord.members, *self.coord.joining]

    def occupied(self) -> set[str]:
        """Slots where a learner of this job still runs (leavers included)."""
        return {s for s in self.coord.started if not self.launcher.exited(s)}

    def apply(self, want: int, joined: tuple[str, ...], left: tuple[str, ...]) -> None:
        c = self.coord
        for slot in left:
            if slot in c.joining:  # not admitted yet: call it off
                c.joining.remove(slot)
                self.launcher.kill(slot)
        if joined:
            c.start_joiners(list(joined))
        self.want = want
        if want == 0 and c.members and not self.suspending:
            self.suspending = True
            self.jobs.request_stop()  # learners checkpoint, then exit
            services.record_event(self.job_id, "suspending", "checkpointing before suspension")

    # The protocol ------------------------------------------------------------------------------

    def tick(self) -> str | None:
        """Advance the protocol; returns the job's new resting state when it has one."""
        c = self.coord
        self._persist(c.read_metrics())
        error = c.first_error()
        if error:
            services.fail_job(self.job_id, error)
            c.kill_all()
            return Job.State.FAILED
        if self.suspending:
            return self._suspended() if c.all_exited() else None
        if c.done:
            return self._completed()
        c.watch_failures()
        if self.want > len(c.members):
            if c.grow_to(self.want) and len(c.members) == self.want:
                services.start_job(self.job_id)
        elif self.want < len(c.members):
            c.shrink_to(self.want)
        return None

    def _persist(self, records: list[dict[str, Any]]) -> None:
        """Store new records at once; push them to the pages at most a few times a second
        (pages redraw no faster, and 50 open pages must not slow the job down)."""
        kept = [r for r in records if r.get("type") in ("train", "test")]
        if kept:
            seq = services.persist_metrics(self.job_id, kept, publish=False)
            self.jobs.set_cursor(self.coord.cursor)
            self.unsent += kept
            self.sent_seq = self.sent_seq if self.sent_seq is not None else seq - len(kept)
        due = time.monotonic() - self.sent_at >= LIVE_INTERVAL
        if self.unsent and (due or self.coord.done):
            assert self.sent_seq is not None
            last = self.sent_seq + len(self.unsent)
            live.publish_metrics(self.job_id, self.sent_seq, last, self.unsent)
            self.unsent, self.sent_seq, self.sent_at = [], last, time.monotonic()

    def _completed(self) -> str | None:
        services.complete_job(self.job_id)
        return Job.State.COMPLETED if self.coord.all_exited() else None

    def _suspended(self) -> str:
        services.suspend_job(self.job_id, self.jobs.checkpoint_step())
        return Job.State.SUSPENDED
