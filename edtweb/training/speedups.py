"""Each job's observed speedup curve, for the speedup-aware policy (``fairshare-speedup``).

Learners report ``samples_per_s`` and ``workers`` with every training iteration (the job's
"train" metrics); the median rate at each worker count seen lately gives the curve
(:func:`scheduler.policies.speedup.from_rates`). Read at most every ``REFRESH`` seconds per
job, from its latest ``WINDOW`` iterations only.
"""

from __future__ import annotations

import statistics
import time

from edtweb.training.models import Metric
from scheduler.policies.speedup import from_rates

REFRESH = 30.0
WINDOW = 400


def observed_rates(job_id: int, window: int = WINDOW) -> dict[int, float]:
    """Worker count -> median samples/s over the job's latest ``window`` iterations."""
    rows = (
        Metric.objects.filter(job_id=job_id, kind="train")
        .order_by("-step")
        .values_list("values", flat=True)[:window]
    )
    seen: dict[int, list[float]] = {}
    for values in rows:
        workers, rate = values.get("workers"), values.get("samples_per_s")
        if isinstance(workers, int) and isinstance(rate, (int, float)) and rate > 0:
            seen.setdefault(workers, []).append(float(rate))
    return {workers: statistics.median(rates) for workers, rates in seen.items()}


class Curves:
    """Per job, its curve up to its max, re-read from its metrics every ``REFRESH`` s."""

    def __init__(self, refresh: float = REFRESH) -> None:
        self.refresh = refresh
        self.cache: dict[int, tuple[float, tuple[float, ...]]] = {}

    def curve(self, job_id: int, max_workers: int) -> tuple[float, ...]:
        now = time.monotonic()
        hit = self.cache.get(job_id)
        if hit is None or now - hit[0] >= self.refresh:
            hit = (now, from_rates(observed_rates(job_id), max_workers))
            self.cache[job_id] = hit
        return hit[1]

    def forget(self, keep: set[int]) -> None:
        for job_id in [j for j in self.cache if j not in keep]:
            del self.cache[job_id]
