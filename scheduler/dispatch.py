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
import time
from typing import Any

from protocol.jobstore import JobStore, Start, send_starts
from protocol.keys import queue_for

LEASE_GRACE = 2.0  # seconds a lapsed lease must stay missing, watched without a gap
START_GRACE = 180.0  # seconds a dispatched learner has to take its first lease
# The task stores no result (workers/tasks.py): nothing subscribes to one.
SEND: dict[str, Any] = {"ignore_result": True}
WATCH_GAP = 3.0  # seconds between two looks beyond which the watch starts over (an outage)


TASK = "edt.run_learner"
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

    def add(self, jobs: JobStore, job_pk: int, slot: str, token: str) -> None:
        queue = queue_for(slot)
        message = self.messages.message([job_pk, slot, token], queue)
        jobs.set_dispatch(slot, token, self.starts, queue, message)

    def send(self) -> None:
        starts, self.starts = self.starts, []
        send_starts(self.client, starts)


class CeleryLauncher:
    def __init__(self, jobs: JobStore, celery_app: Any, job_pk: int,
                 batch: Dispatches | None = None) -> None:  # fmt: skip
        self.jobs = jobs
        self.app = celery_app
        self.job_pk = job_pk
        self.batch = batch  # where starts go, when the caller sends them together
        self.tokens = jobs.dispatches()  # a new scheduler takes over what was sent
        now = time.monotonic()
        self.sent_at = dict.fromkeys(self.tokens, now)
        self.leased: set[str] = set()  # slots whose current learner has held its lease
        self.missing_since: dict[str, float] = {}
        self.gone: set[str] = set()  # judged gone by observation
        self.looked_at = 0.0

    def start(self, slot: str) -> None:
        token = os.urandom(16).hex()
        self.tokens[slot] = token
        self.sent_at[slot] = time.monotonic()
        self.leased.discard(slot)
        self.gone.discard(slot)
        self.missing_since.pop(slot, None)
        if self.batch is not None:
            self.batch.add(self.jobs, self.job_pk, slot, token)
            return
        self.jobs.set_dispatch(slot, token)
        self.app.send_task(TASK, args=[self.job_pk, slot, token], queue=queue_for(slot), **SEND)

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        if not self.exited(slot):
            self.jobs.request_kill(slot, sig)

    def exited(self, slot: str) -> bool:
        """The learner this launcher last sent to ``slot`` has ended, or is judged gone."""
        if slot not in self.tokens or slot in self.gone:
            return True
        token, _code = self.jobs.exits().get(slot, ("", 0))
        return token == self.tokens[slot]

    def exit_code(self, slot: str) -> int | None:
        """The reported exit status of the learner last sent to ``slot``, if it reported."""
        token, code = self.jobs.exits().get(slot, ("", 0))
        return code if slot in self.tokens and token == self.tokens[slot] else None

    def pending(self) -> list[str]:
        """Slots where the learner last sent has not ended (as far as is known)."""
        return [s for s in self.tokens if not self.exited(s)]

    def observe(self, alive_slots: set[str]) -> list[str]:
        """Look at the leases of this job's learners once; returns the slots newly judged
        gone. A look after a long gap (Redis or the scheduler away) starts the watch over:
        a lease that could not be renewed meanwhile proves nothing."""
        now = time.monotonic()
        watched = now - self.looked_at <= WATCH_GAP
        self.looked_at = now
        pending = self.pending()
        leases = self.jobs.leases(pending)
        newly = []
        for slot in pending:
            if leases.get(slot) == self.tokens[slot]:
                self.leased.add(slot)
                self.missing_since.pop(slot, None)
                continue
            if not watched:
                self.missing_since[slot] = now
            since = self.missing_since.setdefault(slot, now)
            if self._lapsed(slot, now - since, now, alive_slots):
                self.gone.add(slot)
                newly.append(slot)
        return newly

    def _lapsed(self, slot: str, missing: float, now: float, alive: set[str]) -> bool:
        if slot in self.leased or slot not in alive:
            return missing >= LEASE_GRACE
        return now - self.sent_at[slot] >= START_GRACE
