"""Scheduling policies: pure functions ``decide(snapshot) -> Decision``.

Nothing here imports Django, Redis, Celery or torch: the same code runs in the live
scheduler and in the trace simulator (docs/architecture.md, "Scheduling contract").
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.policies import fairshare, fifo_gang, goodput, las, priority, quota, tiresias
from scheduler.policies.model import (
    ACTIVE,
    ACTIVE_STATES,
    COMPLETED,
    DEFAULT_PRIORITY,
    FAILED,
    JOB_STATES,
    MAX_PRIORITY,
    MIN_PRIORITY,
    QUEUED,
    RUNNING,
    STOPPED,
    SUSPENDED,
    Decision,
    JobView,
    Snapshot,
    Team,
)
from scheduler.policies.teams import entitlements, slots_by_team
from scheduler.policies.throughput import ThroughputModel

Policy = Callable[[Snapshot], Decision]

POLICIES: dict[str, Policy] = {
    fairshare.POLICY: fairshare.decide,
    priority.POLICY: priority.decide,
    fifo_gang.POLICY: fifo_gang.decide,
    fifo_gang.BACKFILL_POLICY: fifo_gang.decide_backfill,
    tiresias.POLICY: tiresias.decide,
    las.POLICY: las.decide,
    las.SPEEDUP_POLICY: las.decide_speedup,
    quota.POLICY: quota.decide,
    goodput.POLICY: goodput.decide,
}
DEFAULT_POLICY = fairshare.POLICY


def decide(snapshot: Snapshot, policy: str = DEFAULT_POLICY) -> Decision:
    """Run the named policy (one of :data:`POLICIES`) on ``snapshot``."""
    try:
        chosen = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; one of {sorted(POLICIES)}") from None
    return chosen(snapshot)


__all__ = [
    "ACTIVE",
    "ACTIVE_STATES",
    "COMPLETED",
    "DEFAULT_POLICY",
    "DEFAULT_PRIORITY",
    "FAILED",
    "JOB_STATES",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "POLICIES",
    "QUEUED",
    "RUNNING",
    "STOPPED",
    "SUSPENDED",
    "Decision",
    "JobView",
    "Policy",
    "Snapshot",
    "Team",
    "ThroughputModel",
    "decide",
    "entitlements",
    "slots_by_team",
]
