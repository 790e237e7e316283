"""The scheduler process's loop.

One active scheduler at a time holds a lease in Redis; the others stand by and take over
within a few seconds when the lease expires. The active one wakes at once on events (submit,
priority change, stop, learner READY, generation adopted, failure, exit, training finished)
and otherwise ticks slowly (``interval``) as a safety net, for what no event announces (a
lapsed lease or heartbeat): each time it watches the slots, publishes the cluster's state to
the pages, and lets the planner decide and apply allocations. It moves no metrics: that is
the metrics consumer's work (``edtweb/training/metrics_consumer.py``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from protocol.keys import ALIVE, LOST
from protocol.retry import Backoff
from protocol.slots import SlotInfo
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


class SchedulerService:
    def __init__(self, store: Store, publish: Publisher, interval: float = 1.0,
                 plan: Planner | None = None, lease_ms: int = 5000,
                 allocations: Allocations | None = None, settle: float = 6.0) -> None:  # fmt: skip
        self.store = store
        self.publish = publish
        self.interval = interval
        self.plan = plan
        self.lease_ms = lease_ms
        self.allocations = allocations
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.states: dict[str, str] = {}
        self.published_at = 0.0
        self.record = AllocationRecord()
        self.active = False
        self.stopping = threading.Event()
        self.backoff = Backoff(cap=2.0)
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
        (the record's TTL is renewed then)."""
        record = self.allocations() if self.allocations else AllocationRecord()
        stale = time.monotonic() - self.published_at >= PUBLISH_EVERY
        if not (due or stale or record != self.record):
            return
        self.store.save_allocations(record, ttl=ALLOCATIONS_TTL)
        self.record = record
        holder = record.holder()
        self.publish([dict(s.as_dict(), job=holder.get(s.slot_id)) for s in slots])
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

    def hold_lease(self) -> bool:
        """Take or keep the lease; say so when this process becomes active or stands by."""
        active = self.store.acquire_lease(self.holder, self.lease_ms)
        if active != self.active:
            log.info("scheduler %s is %s", self.holder, "active" if active else "standing by")
        self.active = active
        return active

    def step(self) -> float:
        """One round; returns how long to wait for a wake-up before the next."""
        if not self.hold_lease():
            return self.interval
        slots = self.tick()
        busy = self.plan(slots) if self.plan is not None else False
        self.publish_record(slots)  # at once when the plan moved a job
        return BUSY_WAIT if busy else self.interval

    def run(self) -> None:
        """Step and wait until stopped; Redis or the database away only slows the loop
        down (backoff up to a few seconds), it never ends it."""
        log.info("scheduler %s started", self.holder)
        while not self.stopping.is_set():
            try:
                self.round()
            except Exception as exc:
                self.failed(exc)
        try:
            self.store.release_lease(self.holder)
        except Exception as exc:  # Redis away: the lease expires by itself
            log.warning("could not release the scheduler lease: %s", exc)
        log.info("scheduler stopped")

    def round(self) -> None:
        wait = self.step()
        if self.backoff.succeeded():
            log.info("scheduler %s: Redis and the database answer again", self.holder)
        if self.active:
            self.store.wait_wake(wait)
        else:
            self.stopping.wait(wait)

    def failed(self, exc: Exception) -> None:
        delay = self.backoff.failed()
        self.trust_after = time.monotonic() + delay + self.settle
        if self.backoff.failures == 1:
            log.exception("scheduler step failed; retrying with backoff")
        else:
            log.warning("scheduler step failed again (%s); next try in %.1f s", exc, delay)
        self.stopping.wait(delay)
