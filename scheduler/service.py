"""The scheduler process's loop.

One active scheduler at a time holds a lease in Redis; the others stand by and take over
within a few seconds when the lease expires (``scheduler/lease_loop.py``). The active one
wakes at once on events (submit, priority change, stop, learner READY, generation adopted,
failure, exit, training finished) and otherwise ticks slowly (``interval``) as a safety net,
for what no event announces (a lapsed lease or heartbeat): each time it watches the slots,
publishes the cluster's state to the pages, and lets the planner decide and apply
allocations. It moves no metrics: that is the metrics consumer's work
(``edtweb/training/metrics_consumer.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from protocol.keys import ALIVE, LEASE_KEY, LOST
from protocol.slots import SlotInfo
from scheduler.lease_loop import LeaseLoop
from scheduler.metrics import exposition
from scheduler.store import AllocationRecord, Store

log = logging.getLogger("edt.scheduler")

Publisher = Callable[[list[dict[str, Any]]], None]
Planner = Callable[[list[SlotInfo]], bool]  # returns True when a job wants a step soon
Allocations = Callable[[], AllocationRecord]  # which slots each job holds now

BUSY_WAIT = 0.05  # seconds before the next step when the planner wants one soon
PUBLISH_EVERY = 1.0
ALLOCATIONS_TTL = 15 * PUBLISH_EVERY  # readers trust the record this long


def slot_changes(before: dict[str, str], slots: list[SlotInfo]) -> list[str]:
    """Readable lines for each slot whose state differs from ``before`` (id -> state)."""
    lines = []
    for slot in slots:
        old = before.get(slot.slot_id)
        if old is None:
            lines.append(f"slot {slot.slot_id} ({slot.device}) registered: {slot.state}")
        elif old != slot.state:
            lines.append(f"slot {slot.slot_id}: {old} -> {slot.state}")
    return lines


class SchedulerService(LeaseLoop):
    def __init__(self, store: Store, publish: Publisher, interval: float = 1.0,
                 plan: Planner | None = None, lease_ms: int = 5000,
                 allocations: Allocations | None = None, settle: float = 6.0) -> None:  # fmt: skip
        super().__init__(store, "scheduler", LEASE_KEY, lease_ms, log)
        self.publish = publish
        self.interval = interval
        self.plan = plan
        self.allocations = allocations
        self.states: dict[str, str] = {}
        self.published_at = 0.0
        self.record = AllocationRecord()
        # After an outage, heartbeats need up to one TTL (``settle``) to be written again:
        # until then a slot that was alive is not judged lost on missing evidence.
        self.settle = settle
        self.trust_after = 0.0

    def tick(self) -> list[SlotInfo]:
        slots = self.observed(self.store.list_slots())
        changes = slot_changes(self.states, slots)
        for line in changes:
            log.info(line)
        self.states = {s.slot_id: s.state for s in slots}
        self.publish_record(slots, due=bool(changes))
        return slots

    def publish_record(self, slots: list[SlotInfo], due: bool = False) -> None:
        """Write the allocation record and show the slots with their jobs to the pages,
        when the record changed, when ``due``, and at least every PUBLISH_EVERY seconds
        (the record's TTL is renewed then); the scheduler's own metrics go with it, for
        the web's ``/metrics``."""
        record = self.allocations() if self.allocations else AllocationRecord()
        stale = time.monotonic() - self.published_at >= PUBLISH_EVERY
        if not (due or stale or record != self.record):
            return
        self.store.save_allocations(record, ttl=ALLOCATIONS_TTL)
        self.store.save_scheduler_metrics(exposition(), ttl=ALLOCATIONS_TTL)
        self.record = record
        holder = record.holder()
        shown = [dict(s.as_dict(), job=holder.get(s.slot_id),
                      job_idle=holder.get(s.slot_id) in record.idle) for s in slots]  # fmt: skip
        self.publish(shown)
        self.published_at = time.monotonic()

    def observed(self, slots: list[SlotInfo]) -> list[SlotInfo]:
        """The slots as seen now, except that right after an outage a slot alive before it
        stays alive until its worker had time to beat again."""
        if time.monotonic() >= self.trust_after:
            return slots
        return [
            replace(s, state=ALIVE) if s.state == LOST and self.states.get(s.slot_id) == ALIVE
            else s
            for s in slots
        ]  # fmt: skip

    def step(self) -> float:
        """One round; returns how long to wait for a wake-up before the next."""
        if not self.hold_lease():
            return self.interval
        slots = self.tick()
        busy = self.plan(slots) if self.plan is not None else False
        self.publish_record(slots)  # at once when the plan moved a job
        return BUSY_WAIT if busy else self.interval

    work = step  # one round of the lease loop

    def rest(self, seconds: float) -> None:
        """The active scheduler wakes at once on an event; a standby only waits."""
        if self.active:
            self.store.wait_wake(seconds)
        else:
            self.stopping.wait(seconds)

    def failed(self, exc: Exception) -> None:
        super().failed(exc)
        self.trust_after = self.backoff.quiet_until + self.settle
