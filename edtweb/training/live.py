"""The one module that pushes to the pages: a job's updates to its pages (group
``job.<id>``), allocations and the slots to the Cluster page (group ``cluster``), and to a
user's every socket (group ``user.<id>``) that what they may see has changed. Group names
are constants or come from ids, never from user text. Sequence numbers let a
page notice a gap and reload its history: a channel layer drops messages past its capacity
without a word.

Inside :func:`batched` (the scheduler's step), pushes are collected and sent once at the
end, in one call: every allocation change in one ``cluster`` message, every job's events
and state changes in one message to group ``jobs`` (each job page's consumer keeps its own
job's), and each job's metrics to its own group.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger("edt.live")

CLUSTER = "cluster"
JOBS = "jobs"  # every job page's consumer: a step's events and state changes, all jobs

_pending: contextvars.ContextVar[list[tuple[str, dict[str, Any]]] | None] = contextvars.ContextVar(
    "edt_live_pending", default=None
)


def group_of(job_id: int) -> str:
    return f"job.{job_id}"  # the same as Job.group_name


def _send(group: str, message: dict[str, Any]) -> None:
    pending = _pending.get()
    if pending is not None:
        pending.append((group, message))
        return
    _send_all([(group, message)])


def _send_all(messages: list[tuple[str, dict[str, Any]]]) -> None:
    layer = get_channel_layer()
    if layer is None or not messages:
        return

    async def send() -> None:
        for group, message in messages:
            await layer.group_send(group, message)

    try:
        asyncio.run_coroutine_threadsafe(send(), _pushing_loop()).result(timeout=PUSH_TIMEOUT)
    except Exception as exc:  # pages catch up from history; never fail the caller for them
        log.warning("live updates (%d) not sent: %s", len(messages), exc)


PUSH_TIMEOUT = 5.0  # seconds a caller waits for its pushes (Redis away: they are dropped)
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)
_loop_lock = threading.Lock()


def _pushing_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for pushes, in a daemon thread of its own. The channel
    layer keeps its Redis connections per loop: a new loop per push (``async_to_sync``)
    opened a connection each time, about 3 ms of every scheduler step. A forked child
    makes its own."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="edt-live", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Collect the pushes made inside the block; send them at its end, merged (see above).
    Nested blocks belong to the outermost."""
    if _pending.get() is not None:
        yield
        return
    pending: list[tuple[str, dict[str, Any]]] = []
    token = _pending.set(pending)
    try:
        yield
    finally:
        _pending.reset(token)
        _send_all(merged(pending))


def merged(pending: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """One ``cluster.allocations`` message for every ``cluster.allocation``, one
    ``jobs.updates`` message for every job's event and state change (in their order), and
    the rest (metrics) as they were."""
    allocations = [m for g, m in pending if g == CLUSTER and m["type"] == "cluster.allocation"]
    updates = [
        {"job": int(g.partition(".")[2]), "message": m}
        for g, m in pending
        if g.startswith("job.") and m["type"] in ("job.event", "job.state")
    ]
    rest = [
        (g, m)
        for g, m in pending
        if not (g == CLUSTER and m["type"] == "cluster.allocation")
        and not (g.startswith("job.") and m["type"] in ("job.event", "job.state"))
    ]
    out = list(rest)
    if updates:
        out.append((JOBS, {"type": "jobs.updates", "updates": updates}))
    if allocations:
        changes = [{k: v for k, v in m.items() if k != "type"} for m in allocations]
        out.append((CLUSTER, {"type": "cluster.allocations", "changes": changes}))
    return out


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
            CLUSTER,
            {
                "type": "cluster.allocation",
                "job": job_id,
                "workers": event.data.get("workers"),
                "at": time.time(),
            },
        )
    elif event.kind == "scaled":
        _send(
            CLUSTER,
            {
                "type": "cluster.allocation",
                "job": job_id,
                "decision": event.message,
                "at": time.time(),
            },
        )


def publish_state(job_id: int, state: str) -> None:
    _send(group_of(job_id), {"type": "job.state", "state": state})
    _send(CLUSTER, {"type": "cluster.allocation", "job": job_id, "state": state, "at": time.time()})


def user_group(user_id: int) -> str:
    """The Channels group of every socket a user has open."""
    return f"user.{user_id}"


def publish_access_changed(user_ids: set[int]) -> None:
    """Tell each user's open sockets to check again what the user may see (a team left,
    an account deactivated, a session ended): each closes where it may no longer."""
    for user_id in sorted(user_ids):
        _send(user_group(user_id), {"type": "access.changed"})


def publish_slots(slots: list[dict[str, Any]]) -> None:
    """The slots with their jobs, as the scheduler last recorded them (its publisher)."""
    _send(CLUSTER, {"type": "cluster.slots", "slots": slots})
