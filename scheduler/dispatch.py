"""Starting learners on slots through Celery (the live counterpart of the drive's launcher).

Celery only delivers "start a learner of job J on slot S with token T"; it is never the
record of a job. A task that arrives with an old token exits at once. Killing goes through
Redis to the slot's task, which signals the learner's process group.

Whether a learner is still there is observed, not waited for (docs/architecture.md, "Sources of
truth"): its slot task reports its exit when it can, and the learner renews a lease while it
lives. A learner whose lease lapsed, or that never took one while its slot died or a long
start-up grace passed, is gone, whatever killed it: a dead host writes no exit report.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
from typing import Any

from protocol.exits import RunResult
from protocol.jobstore import JobStore, Start, send_starts
from protocol.keys import queue_for
from protocol.learner_task import TASK, LearnerPaths, learner_args

# The task stores no result (workers/tasks.py): nothing subscribes to one.
SEND: dict[str, Any] = {"ignore_result": True}


_FIELD = re.compile(r'"@@edt:(\w+)@@"')  # a placeholder in the message template


class LearnerMessages:
    """``edt.run_learner`` messages as Celery's Redis transport stores them in a slot's
    queue (exchange "", priority 0: a list named after the queue, LPUSHed). The envelope is
    Celery's own (``app.amqp.create_task_message``, kombu's properties and base64 body),
    made once; each learner's message fills in its task id, arguments and delivery tag:
    microseconds each, where ``send_task`` takes half a millisecond. The test suite checks
    it against a message Celery sends itself, and real workers run it."""

    def __init__(self, celery_app: Any) -> None:
        sample = celery_app.amqp.create_task_message(
            "@@edt:id@@", TASK, [], {}, reply_to=celery_app.thread_oid, ignore_result=True
        )
        self.embed = sample.body[2]
        envelope = {
            "body": "@@edt:body@@",
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {**sample.headers, "root_id": "@@edt:id@@", "argsrepr": "@@edt:argsrepr@@"},
            "properties": {
                **sample.properties,
                "correlation_id": "@@edt:id@@",
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": "@@edt:queue@@"},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": "@@edt:tag@@",
            },
        }
        pieces = _FIELD.split(json.dumps(envelope))
        self.texts, self.fields = pieces[0::2], pieces[1::2]

    def message(self, args: list[Any], queue: str) -> str:
        body = base64.b64encode(json.dumps([args, {}, self.embed]).encode()).decode()
        values = {  # as JSON strings; a uuid and base64 need no escaping
            "id": f'"{uuid4_text()}"',
            "argsrepr": json.dumps(repr(args)),
            "body": f'"{body}"',
            "queue": json.dumps(queue),
            "tag": f'"{uuid4_text()}"',
        }
        out = [self.texts[0]]
        for field, text in zip(self.fields, self.texts[1:], strict=True):
            out += [values[field], text]
        return "".join(out)


_VERSION_VARIANT_MASK = 0xF000 << 64 | 0xC000 << 48
_VERSION_4_VARIANT_RFC = 0x4000 << 64 | 0x8000 << 48


def uuid4_text() -> str:
    """``str(uuid.uuid4())`` without building a ``UUID`` (a cold start at 10k jobs makes
    20k of these): 122 random bits, the version and variant bits set as RFC 4122 says."""
    n = int.from_bytes(os.urandom(16)) & ~_VERSION_VARIANT_MASK | _VERSION_4_VARIANT_RFC
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Dispatches:
    """The learners one scheduler step starts, sent together at its end: every learner's
    token and task message in one Redis script (the scheduler's Redis is Celery's broker)."""

    def __init__(self, client: Any, celery_app: Any) -> None:
        self.client = client
        self.messages = LearnerMessages(celery_app)
        self.starts: list[Start] = []

    def add(self, jobs: JobStore, job_pk: int, slot: str, token: str,
            paths: LearnerPaths) -> None:  # fmt: skip
        queue = queue_for(slot)
        message = self.messages.message(learner_args(job_pk, slot, token, paths), queue)
        jobs.set_dispatch(slot, token, self.starts, queue, message)

    def send(self) -> None:
        starts, self.starts = self.starts, []
        send_starts(self.client, starts)


class CeleryLauncher:
    """Starts and kills one job's learners through Celery and Redis: what the job's
    controller decided (``scheduler/elastic.py``, which also judges from their leases
    whether they are still there). With ``batch``, starts go out together at the end of the
    caller's step; otherwise each is sent at once. ``paths``: the job's, as the platform
    recorded them, carried by every learner task."""

    def __init__(self, jobs: JobStore, celery_app: Any, job_pk: int, paths: LearnerPaths,
                 batch: Dispatches | None = None) -> None:  # fmt: skip
        self.jobs = jobs
        self.app = celery_app
        self.job_pk = job_pk
        self.paths = paths
        self.batch = batch

    def start(self, slot: str, token: str) -> None:
        if self.batch is not None:
            self.batch.add(self.jobs, self.job_pk, slot, token, self.paths)
            return
        self.jobs.set_dispatch(slot, token)
        args = learner_args(self.job_pk, slot, token, self.paths)
        self.app.send_task(TASK, args=args, queue=queue_for(slot), **SEND)

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        self.jobs.request_kill(slot, sig)

    def exits(self) -> dict[str, RunResult]:
        """How the learners ended, as their slot tasks reported it."""
        return self.jobs.exits()

    def dispatched(self) -> dict[str, str]:
        """Slot -> token of the learner tasks already sent (a new controller takes them over)."""
        return self.jobs.dispatches()
