"""When each active job should start and end: the scheduler's own inputs (the snapshots of
``live_adapter.scheduler_view``, one per resource group) run forward in the simulator with
its policy and no future arrivals (``scheduler/simulate/forecast.py``), each job's remaining
work from its measured pace (``status.eta_from``). A range, never one minute. Read by the
job's status (pages, API, CLI); kept ``TTL`` seconds, as a decision changes it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import redis

from edtweb.training.models import Job, Metric
from scheduler.policies import Snapshot
from scheduler.simulate import Config, SimJob
from scheduler.simulate.forecast import Present, ranged
from scheduler.store import AllocationRecord

TTL = 5.0  # seconds a projection serves every reader
MOST_JOBS = 500  # more active jobs than this: none is projected (the page stays fast)
GUESS = 3600.0  # slot-seconds of work taken for a job that never ran, with nothing to go by
_cache: dict[str, tuple[float, dict[int, Estimate]]] = {}


@dataclass(frozen=True)
class Estimate:
    """Seconds from ``at`` (unix time): the earliest and latest start and end; None where
    the simulated future has none (its minimum never fits)."""

    at: float
    start: tuple[float, float] | None
    end: tuple[float, float] | None


def estimates() -> dict[int, Estimate]:
    """Every active job's estimate (none while Redis does not answer): computed again when
    the scheduler's record or the active jobs changed, else at most every ``TTL`` s."""
    from edtweb.redis_access import store

    try:
        key = _key(store().allocations())
        hit = _cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < TTL:
            return hit[1]
        answer = _estimates()
    except redis.RedisError:
        return {}
    _cache.clear()  # one entry: the latest
    _cache[key] = (time.monotonic(), answer)
    return answer


def _key(record: AllocationRecord) -> str:
    """What a projection is made from, but for the attained service that grows each step:
    the decision (holdings, places, policy, groups) and the active jobs."""
    jobs = Job.objects.filter(state__in=Job.ACTIVE).order_by("pk").values_list("pk", "state")
    held = sorted((k, a.slots) for k, a in record.jobs.items())
    made_of = (held, sorted(record.standing.items()), record.policy,
               sorted(record.groups.items()), list(jobs))  # fmt: skip
    return repr(made_of)


def _estimates() -> dict[int, Estimate]:
    from edtweb.training.live_adapter import scheduler_view

    view = scheduler_view()
    if not view.rows or len(view.rows) > MOST_JOBS:
        return {}
    work = remaining_work({row.pk: view.held.get(row.pk, 0) for row in view.rows})
    out: dict[int, Estimate] = {}
    now = time.time()
    for snapshot in view.snapshots().values():
        out.update(_group(snapshot, work, view.record.policy, now))
    return out


def _group(snapshot: Snapshot, work: dict[int, float], policy: str,
           now: float) -> dict[int, Estimate]:  # fmt: skip
    if not snapshot.jobs:
        return {}
    present = [
        Present(SimJob(v.id, v.submitted, v.max_workers, work[int(v.id)]), v.current,
                v.attained, v)
        for v in snapshot.jobs
    ]  # fmt: skip
    config = Config(snapshot.capacity, policy, teams=snapshot.teams,
                    slots_per_host=snapshot.slots_per_host or 8)  # fmt: skip
    try:
        runs = ranged(present, config, now)
    except ValueError:  # a policy refusing the snapshot: say nothing rather than guess
        return {}
    out = {}
    for key, (early, _, late) in runs.items():
        out[int(key)] = Estimate(now, _pair(early.start, late.start), _pair(early.end, late.end))
    return out


def _pair(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (round(low, 1), round(high, 1))


def remaining_work(held: dict[int, int]) -> dict[int, float]:
    """Slot-seconds of work each job has left: a running job's at its measured pace on
    the slots it holds (taken as linear); a job that never ran, the median of the others'
    whole work (else ``GUESS``)."""
    from edtweb.training.status import PACE_RECORDS, eta_from

    rows = Job.objects.filter(pk__in=held).values_list("pk", "steps_done", "total_steps")
    known: dict[int, float] = {}
    totals: list[float] = []
    for pk, done, total in rows:
        recent = list(Metric.objects.filter(job_id=pk, kind="train").order_by("-step")
                      .values_list("step", "time", "values__workers")[:PACE_RECORDS])  # fmt: skip
        left = eta_from(recent, total) if total else None
        if left is None:
            continue
        size = held.get(pk) or _workers(recent) or 1
        known[pk] = max(left * size, 1.0)
        if total and done < total:
            totals.append(known[pk] * total / max(total - done, 1))
    guess = statistics.median(totals) if totals else GUESS
    return {pk: known.get(pk, guess) for pk in held}


def _workers(recent: list[Any]) -> int:
    size = recent[0][2] if recent else None
    return size if isinstance(size, int) else 0


def text(seconds: tuple[float, float] | None, what: str) -> str:
    """ "starts in 3-5 min", "ends in 1.2-1.6 h", "starts now"; "" without an estimate."""
    if seconds is None:
        return ""
    low, high = seconds
    if high < 30:
        return f"{what} now" if what == "starts" else f"{what} within a minute"
    if high < 5400:
        low_min, high_min = round(low / 60), max(1, round(high / 60))
        return (
            f"{what} in {low_min}-{high_min} min"
            if low_min != high_min
            else f"{what} in about {high_min} min"
        )
    return f"{what} in {low / 3600:.1f}-{high / 3600:.1f} h"
