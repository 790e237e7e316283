"""The slot registry as the pages and the API show it: each slot with the job holding it
(from the allocation record), and what a given user may see of it. Pushing the slots to
the Cluster page is the push module's (``edtweb/training/live.py``)."""

from __future__ import annotations

from typing import Any

from edtweb.redis_access import store
from scheduler.groups import group_of


def current_slots() -> list[dict[str, Any]]:
    """The slot registry now, as the pages show it: each slot with the job holding it,
    whether the scheduler flagged that job idle (docs/architecture.md, "Idle jobs") and
    its resource group (scheduler/groups.py, by the groups' rules)."""
    from edtweb.tenancy.services import rules

    registry = store()
    record = registry.allocations()
    jobs = record.holder()
    ordered = rules()
    return [
        dict(
            slot.as_dict(),
            job=jobs.get(slot.slot_id),
            group=group_of(slot, ordered),
            job_idle=jobs.get(slot.slot_id) in record.idle,
        )
        for slot in registry.list_slots()
    ]


def visible_slots(slots: list[dict[str, Any]], user: Any) -> list[dict[str, Any]]:
    """``slots`` as ``user`` may see them: every slot says whether it is ``busy``; its
    ``job`` id only when the user may see the job (their own, their teams'; staff see all),
    as the API does."""
    from edtweb.ownership import visible_job_ids

    mine = visible_job_ids(user, {s["job"] for s in slots if s.get("job") is not None})
    return [
        dict(s, busy=s.get("job") is not None, job=s.get("job") if s.get("job") in mine else None)
        for s in slots
    ]
