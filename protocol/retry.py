"""Riding out a Redis outage: backoff between attempts, and calls that keep trying.

Every long-running process keeps going while Redis is away (docs/architecture.md, "Sources of
truth"): the scheduler and the slot workers retry their loops, learners keep training and
buffer what they would have written. This module holds the timing rules they share; it
imports no Redis itself, the callers say which errors mean "away". Each failure counted by a
:class:`Backoff` adds one to ``edt_redis_retries_total`` (registered by the processes that
expose it: the scheduler's, ``scheduler/metrics.py``). A learner's record writer counts its
own too and reports them with its first write that succeeds (``JobStore.write_records``);
the scheduler takes them into the same counter (``JobRunner._counted``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import Counter

T = TypeVar("T")
log = logging.getLogger("edt.retry")

FIRST_DELAY = 0.2  # seconds before the first retry
MAX_DELAY = 5.0  # never wait longer than this between attempts

# In no registry here: a process that exposes its metrics registers it in its own.
REDIS_RETRIES = Counter(
    "edt_redis_retries", "Attempts that failed while Redis (or the database) was away and "
    "were retried after a backoff", registry=None,
)  # fmt: skip


def doubling(first: float, cap: float, n: int) -> float:
    """The delay after ``n`` earlier failures in a row: ``first``, doubled for each, at most
    ``cap`` (the exponent stops growing long after any delay reached the cap). Every
    backoff in EDT is this one: Redis retries (:class:`Backoff`), a dead child's restart
    (workers/supervisor.py), a learner's failed start (scheduler/elastic.py)."""
    return min(cap, first * 2.0 ** min(n, 64))


class Backoff:
    """Delays that double from ``first`` up to ``cap``, back to ``first`` after a success."""

    def __init__(self, first: float = FIRST_DELAY, cap: float = MAX_DELAY) -> None:
        self.first, self.cap = first, cap
        self.failures = 0
        self.quiet_until = 0.0  # monotonic time before which no new attempt is worth it

    def failed(self) -> float:
        """Count a failure; returns how long to wait before the next attempt."""
        delay = doubling(self.first, self.cap, self.failures)
        self.failures += 1
        REDIS_RETRIES.inc()
        self.quiet_until = time.monotonic() + delay
        return delay

    def succeeded(self) -> bool:
        """Reset; True when this success ends a run of failures (an outage is over)."""
        recovered = self.failures > 0
        self.failures, self.quiet_until = 0, 0.0
        return recovered

    def quiet(self) -> bool:
        """Still inside the wait after a failure: callers that must not block skip Redis."""
        return time.monotonic() < self.quiet_until


def patiently(call: Callable[[], T], errors: tuple[type[BaseException], ...],
              patience: float, what: str = "redis") -> T:  # fmt: skip
    """``call()``, retried with backoff on ``errors`` for up to ``patience`` seconds; the
    last error is raised once patience runs out (at once when ``patience`` is 0)."""
    backoff = Backoff()
    deadline = time.monotonic() + patience
    while True:
        try:
            value = call()
        except errors as exc:
            if time.monotonic() >= deadline:
                raise
            delay = backoff.failed()
            if backoff.failures == 1:
                log.warning("%s unavailable (%s); retrying for up to %.0f s", what, exc, patience)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            continue
        if backoff.failures:
            log.info("%s reachable again after %d retries", what, backoff.failures)
        return value
