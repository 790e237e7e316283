"""The slot-time ledger's one writer (docs/architecture.md, "Tenancy"): each time a job's
timeline gets an event that starts or ends holding slots (a ``generation``, or one of
``RELEASING``), the interval the job's previous such event opened is appended to
``SlotTime``, with the job's owner, team and group and how busy its slots were. Called
where events are written (``training/services.py``), before they are, in their
transaction. Rows are never changed nor deleted: a deleted job's usage stays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import redis
from django.db.models import Max

from edtweb.tenancy.models import SlotTime
from edtweb.training.models import Job, JobEvent

log = logging.getLogger("edt.usage")

HOLDING = "generation"  # its ``workers`` hold slots from then on
RELEASING = ("restart", "suspended", "completed", "failed", "stopped")
MARKS = (HOLDING, *RELEASING)


class Mark(NamedTuple):
    """A job's latest event that set the slots it holds: when, how many, which."""

    at: datetime
    slots: int
    members: tuple[str, ...]


def mark_of(event: JobEvent) -> Mark:
    data = event.data or {}
    held = data.get("workers") if event.kind == HOLDING else 0
    members = data.get("members") if event.kind == HOLDING else ()
    slots = held if isinstance(held, int) and held > 0 else 0
    return Mark(event.at, slots, tuple(str(m) for m in members or ()))


def latest_marks(jobs: Iterable[int]) -> dict[int, Mark]:
    """Each of ``jobs``' latest mark as written (two queries)."""
    ids = set(jobs)
    marks = JobEvent.objects.filter(job_id__in=ids, kind__in=MARKS)
    newest = dict(marks.values("job_id").annotate(at=Max("at")).values_list("job_id", "at"))
    found = marks.filter(at__in=set(newest.values())).order_by("at", "pk")
    return {e.job_id: mark_of(e) for e in found if newest.get(e.job_id) == e.at}


def close(events: Sequence[JobEvent]) -> None:
    """Append the interval each mark among ``events`` (about to be written) closes."""
    marks = sorted((e for e in events if e.kind in MARKS), key=lambda e: e.at)
    if not marks:
        return
    open_ = latest_marks(e.job_id for e in marks)
    closing = []
    for event in marks:  # in time order: an earlier mark of the same batch opens the next
        mark = open_.get(event.job_id)
        if mark is not None and mark.slots > 0 and event.at > mark.at:
            closing.append((event, mark))
        open_[event.job_id] = mark_of(event)
    if not closing:
        return
    who = _who({e.job_id for e, _ in closing})
    busy = utilisation({m for _, mark in closing for m in mark.members})
    SlotTime.objects.bulk_create(
        _row(event, mark, who[event.job_id], busy) for event, mark in closing if event.job_id in who
    )


def _who(jobs: set[int]) -> dict[int, tuple[Any, ...]]:
    rows = Job.objects.filter(pk__in=jobs).values_list(
        "pk", "owner_id", "owner__username", "team_id", "team__name", "resource_group"
    )
    return {row[0]: row[1:] for row in rows}


def _row(event: JobEvent, mark: Mark, who: tuple[Any, ...],
         busy: dict[str, float]) -> SlotTime:  # fmt: skip
    owner, owner_name, team, team_name, group = who
    known = [busy[m] for m in mark.members if m in busy]
    return SlotTime(job_id=event.job_id, owner_id=owner, owner_name=owner_name or "",
                    team_id=team, team_name=team_name or "", resource_group=group,
                    start=mark.at, end=event.at, slots=mark.slots,
                    utilisation=sum(known) / len(known) if known else None)  # fmt: skip


def utilisation(slots: set[str]) -> dict[str, float]:
    """Slot -> 0..1 as its telemetry last said (its ``utilisation``, workers/telemetry.py:
    NVML's GPU utilisation, else the CPU use of the cores its learner computes on);
    nothing while Redis does not answer."""
    if not slots:
        return {}
    from edtweb.redis_access import store

    try:
        described = store().list_slots()
    except redis.RedisError as exc:
        log.warning("slot utilisation unknown: %s", exc)
        return {}
    out = {}
    for slot in described:
        if slot.slot_id in slots:
            seen = slot.telemetry.get("utilisation")
            if isinstance(seen, (int, float)):
                out[slot.slot_id] = min(1.0, max(0.0, float(seen)))
    return out
