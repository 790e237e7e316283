"""Each goodput-mode job's measured inputs, for the goodput policy (docs/architecture.md,
"Goodput mode"): its latest noise scale, the batch of its newest step and its throughput
model, fitted to its iteration times per (workers, batch).

Read from one place, the job's train records (``JobBook.train_records``: the metric rows the
metrics consumer stored, as the speedup curves are), at most every ``REFRESH`` seconds per
job; the reading and the fit are pure (``scheduler/policies/throughput_fit.py``). A job with
no model yet gets None: the policy's fallback (linear in slots, at its base batch).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from scheduler.live.speedups import Records
from scheduler.policies.throughput import ThroughputModel
from scheduler.policies.throughput_fit import Measured, fit, measured

REFRESH = 5.0  # seconds between two readings of a job's records


class Goodput(NamedTuple):
    """A goodput-mode job's measured inputs (``JobView.gns``, ``throughput`` and, where the
    scheduler asked none yet, ``batch``)."""

    gns: float = 0.0
    throughput: ThroughputModel | None = None
    batch: int = 0


class Goodputs:
    """Per job, its measurements and their fit, read again every ``refresh`` seconds."""

    def __init__(self, records: Records, refresh: float = REFRESH) -> None:
        self.records = records
        self.refresh = refresh
        # job -> (when read, its measurements, the fit's inputs, the answer)
        self.cache: dict[int, tuple[float, Measured, tuple[int, int], Goodput]] = {}

    def of(self, job_id: int, max_micro: int, per_host: int) -> Goodput:
        now = time.monotonic()
        hit = self.cache.get(job_id)
        if hit is None or now - hit[0] >= self.refresh:
            seen = measured(self.records(job_id))
            same = hit is not None and hit[1] == seen and hit[2] == (max_micro, per_host)
            answer = hit[3] if same and hit is not None else self._answer(seen, max_micro, per_host)
            hit = (now, seen, (max_micro, per_host), answer)
            self.cache[job_id] = hit
        elif hit[2] != (max_micro, per_host):
            hit = (hit[0], hit[1], (max_micro, per_host), self._answer(hit[1], max_micro, per_host))
            self.cache[job_id] = hit
        return hit[3]

    @staticmethod
    def _answer(seen: Measured, max_micro: int, per_host: int) -> Goodput:
        return Goodput(seen.gns, fit(seen.timings, max_micro, per_host), seen.batch)

    def forget(self, keep: set[int]) -> None:
        for job_id in [j for j in self.cache if j not in keep]:
            del self.cache[job_id]
