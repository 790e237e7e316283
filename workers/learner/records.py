"""A learner's metric records, written to Redis off the training thread.

Rank 0 used to write each step's record before its next step: a Redis round trip inside
every iteration (0.5 ms of a 10 ms step on the small CNN, more when the CPU is busy), which
the other ranks then waited for at the next all-reduce. ``RecordWriter.put`` queues the
record and returns; a thread of its own writes what is queued in one pipeline, in order,
at most every ``WRITE_SECONDS``, and keeps it (retrying) while Redis is away, so training
never waits on Redis.

What a record in the queue is worth if rank 0 dies: the step rides on the all-reduce with
the highest train step Redis took from rank 0 (``written``), so every member knows which
of its own copies of the records (every member builds each step's record) may be missing,
and a new rank 0 writes those again (bookkeeping.py).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from protocol.connection import REDIS_DOWN
from protocol.jobstore import JobStore
from protocol.retry import Backoff

log = logging.getLogger("edt.learner")

# while Redis does not answer: 0.05 s, doubling to 1 s (a Backoff: counted as Redis retries)
RETRY_FIRST, RETRY_CAP = 0.05, 1.0
# At most one write this often: steps of a few ms go out a few at a time, in one pipeline,
# not a Redis round trip (and its CPU, on the learner's host and Redis') per step.
WRITE_SECONDS = 0.1


class RecordWriter(threading.Thread):
    def __init__(self, jobs: JobStore) -> None:
        super().__init__(name="edt-records", daemon=True)
        self.jobs = jobs
        self.cond = threading.Condition()
        self.queue: list[tuple[int, dict[str, Any]]] = []  # (train step or 0, record)
        self.checkpoint: int | None = None  # a checkpoint's step to record after the queue
        self.written = 0  # the highest train step Redis has taken from this learner
        self.closing = False
        self.idle = False  # the thread waits for records (only then does a record wake it)
        # attempts that failed while Redis was away: reported with the write that succeeds
        # (JobStore.write_records), for the scheduler's edt_redis_retries; ``retried``: all
        self.unreported = 0
        self.retried = 0

    def put(self, record: dict[str, Any]) -> None:
        """Queue ``record`` for the stream; returns at once. The record must not change
        afterwards: the writer thread turns it into JSON. It wakes the thread only when
        that waits for records: while training, the thread sleeps ``WRITE_SECONDS`` between
        writes and finds the records of the steps meanwhile. (Woken by every record, it
        took the GIL and a core two or three times a step, and the training thread of
        each rank on the host was preempted about twice as often as DDP's.)"""
        step = int(record["step"]) if record.get("type") == "train" else 0
        with self.cond:
            self.queue.append((step, record))
            if self.idle:
                self.cond.notify()

    def record_checkpoint(self, step: int) -> None:
        """Say, after the records queued so far, that the checkpoint of ``step`` is on disk."""
        with self.cond:
            self.checkpoint = step
            self.cond.notify()

    def run(self) -> None:
        backoff = Backoff(RETRY_FIRST, RETRY_CAP)
        while True:
            with self.cond:
                while not (self.queue or self.checkpoint is not None or self.closing):
                    self.idle = True
                    self.cond.wait()
                    self.idle = False
                if self.closing:
                    return
                batch, self.queue = self.queue, []
                checkpoint, self.checkpoint = self.checkpoint, None
            try:
                self.jobs.write_records([json.dumps(r) for _, r in batch], checkpoint,
                                        self.unreported)  # fmt: skip
            except REDIS_DOWN as exc:
                with self.cond:  # kept, in order, ahead of what came meanwhile
                    self.queue[:0] = batch
                    if self.checkpoint is None:
                        self.checkpoint = checkpoint
                    if not backoff.failures:
                        log.warning("job %s: redis away while writing metrics (%s); "
                                    "keeping them", self.jobs.job_id, exc)  # fmt: skip
                    delay = backoff.failed()
                    self.unreported += 1
                    self.retried += 1
                    if not self.closing:
                        self.cond.wait(delay)
                continue
            self.unreported = 0
            if backoff.succeeded():
                log.info("job %s: redis is back; metrics written again", self.jobs.job_id)
            self.written = max([self.written, *(step for step, _ in batch)])
            with self.cond:  # let the next records gather (close() cuts this short)
                self.cond.wait_for(lambda: self.closing, WRITE_SECONDS)

    def close(self) -> None:
        """Stop the thread; what it had not written goes back to the job store's outbox,
        for its patient ``flush`` at the learner's exit."""
        with self.cond:
            self.closing = True
            self.cond.notify()
        if self.is_alive():
            self.join()
        with self.cond:
            self.jobs.outbox[:0] = [json.dumps(r) for _, r in self.queue]
            self.queue = []
            if self.checkpoint is not None:
                self.jobs.unsaved_checkpoint = self.checkpoint
                self.checkpoint = None
