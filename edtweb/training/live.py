"""Pushing a job's updates to its pages (group ``job.<id>``) and allocations to the Cluster
page (group ``cluster``). Sequence numbers let a page notice a gap and reload its history:
a channel layer drops messages past its capacity without a word."""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger("edt.live")


def group_of(job_id: int) -> str:
    return f"job.{job_id}"  # the same as Job.group_name


def _send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception as exc:  # pages catch up from history; never fail the caller for them
        log.warning("live update to %s not sent: %s", group, exc)


def publish_metrics(job_id: int, first: int, last: int, records: list[dict[str, Any]]) -> None:
    _send(group_of(job_id), {"type": "job.metrics", "from": first, "to": last, "records": records})


def publish_event(job_id: int, event: Any) -> None:
    payload = {
        "at": event.at.timestamp(),
        "kind": event.kind,
        "message": event.message,
        "workers": event.data.get("workers"),
        "step": event.data.get("step"),
    }
    _send(group_of(job_id), {"type": "job.event", "event": payload})
    if event.kind == "generation":
        _send(
            "cluster",
            {
                "type": "cluster.allocation",
                "job": job_id,
                "workers": event.data.get("workers"),
                "at": time.time(),
            },
        )
    elif event.kind == "scaled":
        _send(
            "cluster",
            {
                "type": "cluster.allocation",
                "job": job_id,
                "decision": event.message,
                "at": time.time(),
            },
        )


def publish_state(job_id: int, state: str) -> None:
    _send(group_of(job_id), {"type": "job.state", "state": state})
    _send(
        "cluster", {"type": "cluster.allocation", "job": job_id, "state": state, "at": time.time()}
    )
