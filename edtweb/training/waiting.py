"""Why a job waits, in words: the slots it needs and how many are free, its place in the
queue, and the job it waits behind ("needs 6 slots; 2 free; 1st in the queue, behind job
12 at priority 8000")."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings

from edtweb.training.models import Job
from scheduler.store import Store, connect

WAITING = (Job.State.QUEUED, Job.State.SUSPENDED)


def queue_order() -> list[Job]:
    """The waiting jobs (queued or suspended) in the order the queue is served and shown:
    priority first, then submission time."""
    return list(Job.objects.filter(state__in=WAITING).order_by("-priority", "created_at", "pk"))


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _slots() -> tuple[int, int]:
    """(alive slots, free slots) as the scheduler last published them."""
    store = Store(connect(settings.REDIS_URL, timeout=2.0))
    try:
        alive = {s.slot_id for s in store.alive_slots()}
        held = set(store.allocations().holder()) & alive
        return len(alive), len(alive) - len(held)
    finally:
        store.r.close()


def _label(job: Job, user: Any) -> str:
    if user.is_staff or job.owner_id == user.pk:
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
    if job.state not in WAITING:
        return ""
    need = min(job.min_workers, job.max_workers)
    parts = [f"needs {need} slot{'s' if need != 1 else ''}"]
    try:
        alive, free = _slots()
    except redis.RedisError:
        parts.append("free slots unknown (Redis does not answer)")
    else:
        parts.append(f"{free} free")
        if need > alive:
            parts.append(f"only {alive} slot{'s' if alive != 1 else ''} alive in the cluster")
    queue = queue_order()
    if job in queue:
        where = f"{ordinal(queue.index(job) + 1)} in the queue"
        ahead = _ahead(job, queue)
        if ahead is not None:
            where += f", behind {_label(ahead, user)} at priority {ahead.priority}"
        parts.append(where)
    text = "; ".join(parts)
    last = job.events.filter(kind="scaled").order_by("-at").first()
    return f"{text}. Last decision: {last.message}" if last else text
