"""The scheduler process's loop.

One active scheduler at a time holds a lease in Redis; the others stand by and take over
within a few seconds when the lease expires. The active one wakes at once on events (submit,
priority change, stop, learner READY, failure, exit) and otherwise ticks as a safety net:
each time it watches the slots, publishes the cluster's state to the pages, and lets the
planner decide and apply allocations.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from scheduler.store import SlotInfo, Store

log = logging.getLogger("edt.scheduler")

Publisher = Callable[[list[dict[str, Any]]], None]
Planner = Callable[[list[SlotInfo]], bool]  # returns True while jobs are in motion
Assignments = Callable[[], dict[str, Any]]  # slot id -> the job running there

BUSY_WAIT = 0.05  # seconds between steps while jobs are resizing or training
PUBLISH_EVERY = 1.0
ASSIGNMENTS_TTL = 5 * PUBLISH_EVERY  # a page's first render trusts them this long


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
                 assignments: Assignments | None = None) -> None:  # fmt: skip
        self.store = store
        self.publish = publish
        self.interval = interval
        self.plan = plan
        self.lease_ms = lease_ms
        self.assignments = assignments
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.states: dict[str, str] = {}
        self.published_at = 0.0
        self.active = False
        self.stopping = threading.Event()

    def tick(self) -> list[SlotInfo]:
        slots = self.store.list_slots()
        changes = slot_changes(self.states, slots)
        for line in changes:
            log.info(line)
        self.states = {s.slot_id: s.state for s in slots}
        if changes or time.monotonic() - self.published_at >= PUBLISH_EVERY:
            jobs = self.assignments() if self.assignments else {}
            self.store.save_assignments(jobs, ttl=ASSIGNMENTS_TTL)
            self.publish([dict(s.as_dict(), job=jobs.get(s.slot_id)) for s in slots])
            self.published_at = time.monotonic()
        return slots

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
        return BUSY_WAIT if busy else self.interval

    def run(self) -> None:
        log.info("scheduler %s started", self.holder)
        while not self.stopping.is_set():
            try:
                wait = self.step()
            except Exception:  # Redis or the database away: say so and keep going
                log.exception("scheduler step failed")
                wait = self.interval
            if self.active:
                self.store.wait_wake(wait)
            else:
                self.stopping.wait(wait)
        self.store.release_lease(self.holder)
        log.info("scheduler stopped")
