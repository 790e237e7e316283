"""The live loop's one time-bounded cache: what it reads from the database or the metrics
(a job's train records, its speedup curve, its goodput measurements, the tenancy) is read
again once it is ``ttl`` seconds old, and shared by every reader meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Timed(Generic[K, V]):
    """Values by key, each read again (``read()``) once ``ttl`` seconds old."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K, read: Callable[[], V]) -> V:
        now = time.monotonic()
        hit = self.entries.get(key)
        if hit is None or now - hit[0] >= self.ttl:
            hit = (now, read())
            self.entries[key] = hit
        return hit[1]

    def forget(self, keep: Collection[K]) -> None:
        """Drop every key but those in ``keep`` (jobs gone)."""
        for key in [k for k in self.entries if k not in keep]:
            del self.entries[key]
