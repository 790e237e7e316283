"""Each job's observed speedup curve, for the speedup-aware policy (``fairshare-speedup``).

Learners report ``samples_per_s`` and ``workers`` with every training iteration (the job's
"train" metrics); the median rate at each worker count seen lately gives the curve
(:func:`scheduler.policies.speedup.from_rates`). Read at most every ``REFRESH`` seconds per
job, from its latest ``WINDOW`` iterations only (``JobBook.train_records``, through
:func:`observed_rates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from scheduler.live.cache import Timed
from scheduler.policies.speedup import from_rates, median_rates

REFRESH = 30.0
WINDOW = 400  # the latest iterations a job's rates are read from (JobBook.train_records)

RECORDS_TTL = 5.0  # seconds a job's train records, once read, serve every reader

Rates = Callable[[int], dict[int, float]]  # job -> worker count -> median samples/s
Records = Callable[[int], list[dict[str, Any]]]  # job -> its latest train records


class RecentRecords:
    """Each job's train records (``JobBook.train_records``), read at most every ``ttl``
    seconds: the one read that its speedup curve, its goodput fit and its moves share."""

    def __init__(self, read: Records, ttl: float = RECORDS_TTL) -> None:
        self.read = read
        self.cache: Timed[int, list[dict[str, Any]]] = Timed(ttl)
        self.forget = self.cache.forget

    def __call__(self, job_id: int) -> list[dict[str, Any]]:
        return self.cache.get(job_id, lambda: self.read(job_id))


def observed_rates(records: Iterable[dict[str, Any]]) -> dict[int, float]:
    """Worker count -> median samples/s over ``records`` (a job's train records)."""
    return median_rates(
        records, lambda r: r["workers"] if isinstance(r.get("workers"), int) else None
    )


class Curves:
    """Per job, its curve up to its max, re-read from its metrics every ``REFRESH`` s."""

    def __init__(self, rates: Rates, refresh: float = REFRESH) -> None:
        self.rates = rates
        self.cache: Timed[int, tuple[float, ...]] = Timed(refresh)
        self.forget = self.cache.forget

    def curve(self, job_id: int, max_workers: int) -> tuple[float, ...]:
        return self.cache.get(job_id, lambda: from_rates(self.rates(job_id), max_workers))
