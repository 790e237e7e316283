"""Why a job waits, in words: the slots it needs and how many are free, its place in the
queue, and the job it waits behind ("needs 6 slots; 2 free; 1st in the queue, behind job
12 at priority 8000")."""

from __future__ import annotations

from typing import Any

import redis

from edtweb.ownership import Viewer
from edtweb.redis_access import store
from edtweb.training.models import Job

WAITING = (Job.State.QUEUED, Job.State.SUSPENDED)


def queue_order() -> list[Job]:
    """The waiting jobs (queued or suspended) in the order the queue is served and shown:
    priority first, then submission time."""
    jobs = Job.objects.filter(state__in=WAITING).select_related("owner")
    return list(jobs.order_by("-priority", "created_at", "pk"))


def queue_of(visible: Any, user: Any) -> tuple[list[Job], dict[int, int], dict[int, str]]:
    """The waiting jobs among ``visible`` (those the user may see) in queue order, the
    place of each in the whole queue, and why each waits (the Cluster page, the API)."""
    order = queue_order()
    positions = {job.pk: place for place, job in enumerate(order, start=1)}
    shown = set(visible.filter(pk__in=positions).values_list("pk", flat=True))
    jobs = [job for job in order if job.pk in shown]
    return jobs, positions, reasons(jobs, user, order)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _slots() -> tuple[int, int]:
    """(alive slots, free slots) as the scheduler last published them."""
    slots = store()
    alive = {s.slot_id for s in slots.alive_slots()}
    held = set(slots.allocations().holder()) & alive
    return len(alive), len(alive) - len(held)


def _label(job: Job, viewer: Viewer) -> str:
    """The job as the viewer may know it: named when they may see it."""
    if viewer.may(job):
        return f"job {job.pk} ({job.name})"
    return "another user's job"


def _ahead(job: Job, queue: list[Job]) -> Job | None:
    """The job just ahead in the queue; for the first, the running job of the highest
    priority (the one whose slots it would need)."""
    place = queue.index(job)
    if place > 0:
        return queue[place - 1]
    running = Job.objects.filter(state=Job.State.RUNNING).exclude(pk=job.pk)
    return running.order_by("-priority", "created_at").first()


def reason(job: Job, user: Any) -> str:
    """The sentence the job page shows while ``job`` waits; empty when it does not wait."""
    return reasons([job], user).get(job.pk, "")


def reasons(jobs: list[Job], user: Any, queue: list[Job] | None = None) -> dict[int, str]:
    """Job id -> why it waits, for the waiting ones of ``jobs`` (the job page, the Cluster
    page's queue), looking at the slots and the queue (``queue_order()`` unless given)
    once for all of them."""
    jobs = [job for job in jobs if job.state in WAITING]
    if not jobs:
        return {}
    try:
        slots: tuple[int, int] | None = _slots()
    except redis.RedisError:
        slots = None
    if queue is None:
        queue = queue_order()
    viewer = Viewer(user)
    return {job.pk: _reason(job, viewer, slots, queue) for job in jobs}


def _reason(job: Job, viewer: Viewer, slots: tuple[int, int] | None, queue: list[Job]) -> str:
    need = min(job.min_workers, job.max_workers)
    parts = [f"needs {need} slot{'s' if need != 1 else ''}"]
    if slots is None:
        parts.append("free slots unknown (Redis does not answer)")
    else:
        alive, free = slots
        parts.append(f"{free} free")
        if need > alive:
            parts.append(f"only {alive} slot{'s' if alive != 1 else ''} alive in the cluster")
    if job in queue:
        where = f"{ordinal(queue.index(job) + 1)} in the queue"
        ahead = _ahead(job, queue)
        if ahead is not None:
            where += f", behind {_label(ahead, viewer)} at priority {ahead.priority}"
        parts.append(where)
    text = "; ".join(parts)
    last = job.events.filter(kind="scaled").order_by("-at").first()
    return f"{text}. Last decision: {last.message}" if last else text
