"""Why a job waits, or why it has the slots it has, as the scheduler said it: read from the
allocation record, where each decision publishes every active job's place among its
group's waiting jobs and the reason in the policy's own words (docs/architecture.md,
"Scheduling contract"). Nothing here models admission: the pages, the API, the CLI and
WMLA show what the scheduler decided, or say that it has not decided yet.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from django.conf import settings

from edtweb.training.models import Job
from scheduler.policies.idle import IdleRule, duration
from scheduler.store import AllocationRecord

WAITING = (Job.State.QUEUED, Job.State.SUSPENDED)
UNDECIDED = "waits for the scheduler's next decision"
NO_SCHEDULER = "the scheduler's decisions cannot be read (Redis does not answer)"


def record() -> AllocationRecord | None:
    """The allocation record, None while Redis does not answer."""
    from edtweb.redis_access import store

    try:
        return store().allocations()
    except redis.RedisError:
        return None


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def position(job: Job, known: AllocationRecord | None) -> int:
    """``job``'s place among its group's waiting jobs at the scheduler's last decision (1
    first); 0 when it was given slots or was not decided yet."""
    found = known.why(job.pk) if known is not None else None
    return found[0] if found and job.state in WAITING else 0


def reason(job: Job, known: AllocationRecord | None) -> str:
    """The scheduler's reason for ``job``: why it waits (with its place), or the rule that
    set its slots; empty for a job that is not active."""
    if job.state not in Job.ACTIVE:
        return ""
    if known is None:
        return NO_SCHEDULER
    found = known.why(job.pk)
    if found is None:
        return UNDECIDED if job.state in WAITING else ""
    place, why = found
    if job.state in WAITING and place:
        return f"{ordinal(place)} in group {job.resource_group}'s queue; {why}"
    return why


def reasons(jobs: list[Job], known: AllocationRecord | None) -> dict[int, str]:
    """Job id -> the scheduler's reason, for the active ones of ``jobs`` (``known``: the
    record, None while it cannot be read)."""
    return {job.pk: reason(job, known) for job in jobs if job.state in Job.ACTIVE}


def queue_of(visible: Any) -> tuple[list[Job], dict[int, int], dict[int, str]]:
    """The waiting jobs among ``visible`` (those the user may see), by group and then in
    the order the scheduler serves them (jobs it has not decided yet last), with each one's
    place in its group's queue (0: not decided yet) and the scheduler's reason."""
    known = record()
    jobs = list(visible.filter(state__in=WAITING).select_related("owner"))
    places = {job.pk: position(job, known) for job in jobs}
    jobs.sort(key=lambda j: (j.resource_group, places[j.pk] or 1 << 30, -j.priority,
                             j.created_at, j.pk))  # fmt: skip
    return jobs, places, reasons(jobs, known)


def queue_order() -> list[Job]:
    """Every waiting job, by group, in the scheduler's order (the Cluster page's queues)."""
    return queue_of(Job.objects.all())[0]


def idle_rule() -> IdleRule:
    """When a job is idle (``EDT_IDLE_UTILISATION`` percent, ``EDT_IDLE_SECONDS``), its
    slots' figures judged from three heartbeats after a change of its slots on
    (docs/architecture.md, "Idle jobs")."""
    return IdleRule(below=settings.EDT_IDLE_UTILISATION / 100,
                    seconds=float(settings.EDT_IDLE_SECONDS),
                    settle=3.0 * settings.EDT_HEARTBEAT_SECONDS)  # fmt: skip


def idle(job: Job, known: AllocationRecord | None) -> tuple[float | None, str]:
    """Since when ``job`` has been idle as the scheduler flagged it (unix time; None: it is
    not), and the flag in words: "idle for 12 min (under 10 % utilisation for 10 min);
    held at its minimum by group gpu's rule"."""
    found = known.idle.get(job.pk) if known is not None and job.state == Job.State.RUNNING else None
    if found is None:
        return None, ""
    since, by = found
    held = (f"held at its minimum by {by}'s rule" if by
            else "no rule of its team or group shrinks it")  # fmt: skip
    lasted = duration(round(max(0.0, time.time() - since)))
    return since, f"idle for {lasted} ({idle_rule().text()}); {held}"
