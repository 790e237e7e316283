"""Pushing live state to the pages through the Channels layer.

Group names are constants or come from model properties, never from user text.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from protocol.connection import connect
from scheduler.store import Store

log = logging.getLogger("edt.live")

CLUSTER_GROUP = "cluster"


def current_slots() -> list[dict[str, Any]]:
    """The slot registry now, as the pages show it."""
    store = Store(connect(settings.REDIS_URL))
    try:
        jobs = store.allocations().holder()
        return [dict(slot.as_dict(), job=jobs.get(slot.slot_id)) for slot in store.list_slots()]
    finally:
        store.r.close()


def visible_slots(slots: list[dict[str, Any]], user: Any) -> list[dict[str, Any]]:
    """``slots`` as ``user`` may see them: every slot says whether it is ``busy``; its
    ``job`` id only when the job is the user's (staff see all), as the API does."""
    from edtweb.training.models import Job

    held = {s["job"] for s in slots if s.get("job") is not None}
    jobs = Job.objects.filter(pk__in=held)
    mine = set(jobs.values_list("pk", flat=True) if user.is_staff else
               jobs.filter(owner=user).values_list("pk", flat=True))  # fmt: skip
    return [
        dict(s, busy=s.get("job") is not None, job=s.get("job") if s.get("job") in mine else None)
        for s in slots
    ]


def publish_slots(slots: list[dict[str, Any]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(CLUSTER_GROUP, {"type": "cluster.slots", "slots": slots})
