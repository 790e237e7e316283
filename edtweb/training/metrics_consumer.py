"""The metrics consumer: moves learner metrics from Redis into the database and to the pages.

Learners append their records to their job's stream (``edt:job:<id>:metrics``). This
process, apart from the scheduler's decision loop, reads every watched job's stream after
that job's cursor, waiting on the streams themselves (``XREAD BLOCK``) rather than polling.
For each job it then:

1. stores the records in one transaction, idempotent by (type, step)
   (``services.store_metrics``);
2. moves the job's cursor in Redis past them, so a new consumer resumes there;
3. when the learners' ``done`` record was among them, marks the job finished and wakes the
   scheduler, which completes the job: COMPLETED means every metric is in the database;
4. pushes the records stored to the job's pages;
5. wakes the sweep driver when the job is a sweep's trial (its pruner reads them).

A record read twice (the consumer killed between steps 1 and 2, Redis back from an outage
with an older cursor) is dropped by step 1: no record is lost or stored twice. Rounds that
found records are at least ``LIVE_INTERVAL`` apart, so records arriving meanwhile are stored
and sent together (pages redraw no faster, and 50 open pages must not cost a transaction
each). One consumer is active at a time (a Redis lease); others stand by. Redis or the
database away only slows the loop down (backoff), it never ends it: both are the lease loop's
(``scheduler/lease_loop.py``).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from edtweb.training import live, services
from edtweb.training.models import Job
from protocol.jobstore import JobStore
from protocol.keys import METRICS_LEASE_KEY, SWEEPS_WAKE_KEY
from scheduler.lease_loop import LeaseLoop
from scheduler.store import Store

log = logging.getLogger("edt.metrics")

LIVE_INTERVAL = 0.1  # seconds between rounds that stored records (and live updates)
WATCH_EVERY = 1.0  # seconds between looks at which jobs to watch
RECENTLY_ENDED = timedelta(minutes=10)  # an ended job's last records may still come in
BATCH = 1000  # records per job and round


def watched_jobs() -> set[int]:
    """Jobs whose learners may write records: active ones, and those that ended lately
    (their last records may still be unread, e.g. after a consumer restart)."""
    recent = timezone.now() - RECENTLY_ENDED
    ended = Q(finished_at__gte=recent) & ~Q(state__in=Job.ACTIVE)
    return set(Job.objects.filter(Q(state__in=Job.ACTIVE) | ended).values_list("pk", flat=True))


class MetricsConsumer(LeaseLoop):
    def __init__(self, store: Store, lease_ms: int = 5000) -> None:
        super().__init__(store, "metrics consumer", METRICS_LEASE_KEY, lease_ms, log)
        self.cursors: dict[int, str] = {}  # job -> the last stream id stored
        self.watched_at = float("-inf")
        self.trials: set[int] = set()  # the watched jobs that are a sweep's trials

    # The loop (scheduler/lease_loop.py) ----------------------------------------------------

    def work(self) -> float:
        """One round; rounds that stored records are ``LIVE_INTERVAL`` apart, standby
        tries a second apart (an idle active round already waited on the streams)."""
        started = time.monotonic()
        stored = self.round()
        if self.active and not stored:
            return 0.0
        wait = LIVE_INTERVAL if self.active else 1.0
        return max(0.0, wait - (time.monotonic() - started))

    def changed(self) -> None:
        self.cursors = {}  # another consumer may have moved them meanwhile
        self.watched_at = float("-inf")

    def round(self, block: float = 1.0) -> int:
        """Wait up to ``block`` seconds for records and store what came; returns how many
        records were read (stored or dropped as already there)."""
        if not self.hold_lease():
            return 0
        self.watch()
        if not self.cursors:  # no job to watch: nothing to block on either
            self.stopping.wait(block)
            return 0
        batches = self.store.read_streams({str(j): c for j, c in self.cursors.items()}, block,
                                          BATCH)  # fmt: skip
        read = sum(self.take(int(job), entries) for job, entries in batches.items())
        trials = [job for job in batches if int(job) in self.trials]
        if trials:  # a sweep's trials: its driver reports them at once
            self.store.wake(f"metrics of {', '.join(trials)}", SWEEPS_WAKE_KEY)
        return read

    def watch(self) -> None:
        """Follow new jobs from their cursor in Redis; forget those no longer watched."""
        if time.monotonic() - self.watched_at < WATCH_EVERY:
            return
        jobs = watched_jobs()
        self.cursors = {pk: self.cursors.get(pk) or JobStore(self.store.r, str(pk)).cursor()
                        for pk in jobs}  # fmt: skip
        self.trials = set(Job.objects.filter(pk__in=jobs, sweep__isnull=False)
                          .values_list("pk", flat=True))  # fmt: skip
        self.watched_at = time.monotonic()

    # One job's records ---------------------------------------------------------------------

    def take(self, job_id: int, entries: list[tuple[str, dict[str, Any]]]) -> int:
        """Steps 1 to 4 of the module's docstring for one job's new records."""
        records = [record for _, record in entries]
        try:
            seq, kept = services.store_metrics(job_id, records)
        except Job.DoesNotExist:  # deleted meanwhile: its stream goes with it
            self.cursors.pop(job_id, None)
            return len(entries)
        done = [r for r in records if r.get("type") == "done"]
        cursor = entries[-1][0]
        self.store.save_progress(str(job_id), cursor, done[-1]["step"] if done else None)
        self.cursors[job_id] = cursor
        if done:
            log.info("job %s: training finished at step %s; its metrics are stored",
                     job_id, done[-1]["step"])  # fmt: skip
        if kept:
            live.publish_metrics(job_id, seq - len(kept), seq, kept)
        return len(entries)
