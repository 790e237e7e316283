"""The scheduler's side of the teams' shares, for the tests of the pages that read them:
a decision made by the scheduler's own code over the job rows in the database, published
as the live scheduler publishes it (its shares entry, the allocation record's reasons)."""

from __future__ import annotations

from edtweb.training.live_adapter import job_rows, schedulable_jobs, tenancy
from scheduler.live.shares import SharesLog
from scheduler.live.snapshot import SnapshotBuilder
from scheduler.policies import Decision, decide
from scheduler.store import AllocationRecord, Store


def publish(store: Store, capacity: int, held: dict[int, int]) -> Decision:
    """Decide group ``default`` of ``capacity`` slots, the jobs holding ``held`` (job id ->
    slots); append its shares entry and write the allocation record's reasons."""
    snapshots = SnapshotBuilder().build_groups(
        job_rows(schedulable_jobs()), {"default": capacity}, held, tenancy()
    )
    decision = decide(snapshots["default"])
    SharesLog(lambda: store.r).offer({"default": decision})
    standing = {int(k): v for k, v in decision.standing().items()}
    store.save_allocations(AllocationRecord(capacity=capacity, standing=standing), ttl=300)
    return decision
