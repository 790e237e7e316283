"""The live snapshot's remaining work (JobView.remaining): what the policies order equal
priorities by, read from each job's train records as the simulator gives it from the
trace (scheduler/live/snapshot.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.live.ports import SUSPENDED, JobRow
from scheduler.live.snapshot import Measures, SnapshotBuilder, work_left
from scheduler.policies import decide, fairshare

BATCH = 64


def records(total: int, done: int, rate: float, workers: int = 2) -> list[dict[str, Any]]:
    """Train records of steps ``done - 4 .. done`` (newest first, as the live adapter reads
    them), at ``rate`` samples/s on ``workers`` learners."""
    return [{"step": s, "total_steps": total, "samples_per_s": rate, "workers": workers}
            for s in range(done, done - 5, -1)]  # fmt: skip


def test_the_work_left_is_the_steps_left_at_the_slot_seconds_a_step_took() -> None:
    # 100 steps left; a step: 64 samples at 128 samples/s on 2 learners = 1 slot-second
    assert work_left(records(200, 100, 128.0), BATCH) == pytest.approx(100.0)
    # a goodput-mode record's own batch counts: 256 samples a step, 4 slot-seconds
    goodput = [{**r, "batch": 256} for r in records(200, 100, 128.0)]
    assert work_left(goodput, BATCH) == pytest.approx(400.0)
    assert work_left([], BATCH) == 0.0  # never ran: unknown
    assert work_left(records(100, 100, 128.0), BATCH) == 0.0  # finished: nothing known left
    assert work_left([{"step": 3, "total_steps": 9}], BATCH) == 0.0  # no rate yet


def row(pk: int, submitted: int) -> JobRow:
    return JobRow(pk, f"job-{pk}", SUSPENDED, 5000, 1, 1, 30.0,
                  datetime.fromtimestamp(1_700_000_000 + submitted, UTC), owner="alice",
                  batch_size=BATCH)  # fmt: skip


def test_of_two_suspended_jobs_one_slot_goes_to_the_one_with_less_work_left() -> None:
    # Same owner, same priority, the older job has ten times the work left: fair share
    # admits the younger first (shortest remaining work: the queue empties soonest).
    measured = {1: records(10_000, 100, 128.0), 2: records(1_100, 100, 128.0)}
    measures = Measures(fairshare.POLICY, lambda pk: measured[pk])
    jobs = [row(1, 0), row(2, 60)]
    inputs = measures.inputs(jobs, {}, 0)
    assert inputs.remaining == pytest.approx({1: 9_900.0, 2: 1_000.0})
    groups = SnapshotBuilder().build_groups(jobs, {"default": 1}, {}, _NoTeams(), inputs)
    snapshot = groups["default"]
    assert {v.id: v.remaining for v in snapshot.jobs} == pytest.approx({"1": 9_900.0, "2": 1_000.0})
    assert decide(snapshot, fairshare.POLICY).targets == {"1": 0, "2": 1}


class _NoTeams:
    def teams_in(self, group: str) -> tuple[()]:
        return ()
