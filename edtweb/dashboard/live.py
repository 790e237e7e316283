"""Pushing live state to the pages through the Channels layer.

Group names are constants or come from model properties, never from user text.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from scheduler.store import Store, connect

log = logging.getLogger("edt.live")

CLUSTER_GROUP = "cluster"


def current_slots() -> list[dict[str, Any]]:
    """The slot registry now, as the pages show it."""
    store = Store(connect(settings.REDIS_URL))
    try:
        jobs = store.assignments()
        return [dict(slot.as_dict(), job=jobs.get(slot.slot_id)) for slot in store.list_slots()]
    finally:
        store.r.close()


def publish_slots(slots: list[dict[str, Any]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(CLUSTER_GROUP, {"type": "cluster.slots", "slots": slots})
