"""Each goodput-mode job's measured inputs, for the goodput policy (docs/architecture.md,
"Goodput mode"): its latest noise scale, the batch of its newest step and its throughput
model, fitted to its iteration times per (workers, batch).

Read from one place, the job's train records (``JobBook.train_records``: the metric rows the
metrics consumer stored, as the speedup curves are), at most every ``REFRESH`` seconds per
job; the reading and the fit are pure (``scheduler/policies/throughput_fit.py``). A job with
no model yet gets None: the policy's fallback (linear in slots, at its base batch).
"""

from __future__ import annotations

from typing import NamedTuple

from scheduler.live.cache import Timed
from scheduler.live.speedups import Records
from scheduler.policies.throughput import ThroughputModel
from scheduler.policies.throughput_fit import Measured, fit, measured

REFRESH = 5.0  # seconds between two readings of a job's records


class GoodputInput(NamedTuple):
    """A goodput-mode job's measured inputs (``JobView.gns``, ``throughput``, where the
    scheduler asked none yet, ``batch``, and ``timed_batch``: the largest batch of the
    timings the model was fitted on, 0 without a model)."""

    gns: float = 0.0
    throughput: ThroughputModel | None = None
    batch: int = 0
    timed_batch: int = 0


class GoodputFits:
    """Per job, its measurements and their fit, read again every ``refresh`` seconds."""

    def __init__(self, records: Records, refresh: float = REFRESH) -> None:
        self.records = records
        self.measurements: Timed[int, Measured] = Timed(refresh)  # job -> its measurements
        # job -> the last fit's inputs (measurements, micro-batch cap, host size) and answer:
        # fitted again only when one of them changed
        self.fits: dict[int, tuple[tuple[Measured, int, int], GoodputInput]] = {}

    def of(self, job_id: int, max_micro: int, per_host: int) -> GoodputInput:
        m = self.measurements.get(job_id, lambda: measured(self.records(job_id)))
        inputs = (m, max_micro, per_host)
        hit = self.fits.get(job_id)
        if hit is None or hit[0] != inputs:
            model = fit(m.timings, max_micro, per_host)
            timed = max((t.batch for t in m.timings), default=0) if model is not None else 0
            hit = (inputs, GoodputInput(m.gns, model, m.batch, timed))
            self.fits[job_id] = hit
        return hit[1]

    def forget(self, keep: set[int]) -> None:
        self.measurements.forget(keep)
        self.fits = {job_id: hit for job_id, hit in self.fits.items() if job_id in keep}
