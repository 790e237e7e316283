"""Starting learners on slots through Celery (the live counterpart of the drive's launcher).

Celery only delivers "start a learner of job J on slot S with token T"; it is never the
record of a job. A task that arrives with an old token exits at once. Killing goes through
Redis to the slot's task, which signals the learner's process group.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

from scheduler.store import JobStore, queue_for


class CeleryLauncher:
    def __init__(self, jobs: JobStore, celery_app: Any, job_pk: int) -> None:
        self.jobs = jobs
        self.app = celery_app
        self.job_pk = job_pk
        self.tokens = jobs.dispatches()  # a new scheduler takes over what was sent

    def start(self, slot: str) -> None:
        token = uuid.uuid4().hex
        self.tokens[slot] = token
        self.jobs.set_dispatch(slot, token)
        self.app.send_task(
            "edt.run_learner", args=[self.job_pk, slot, token], queue=queue_for(slot)
        )

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        if not self.exited(slot):
            self.jobs.request_kill(slot, sig)

    def exited(self, slot: str) -> bool:
        """The learner this launcher last sent to ``slot`` has ended."""
        token, _code = self.jobs.exits().get(slot, ("", 0))
        return slot not in self.tokens or token == self.tokens[slot]
