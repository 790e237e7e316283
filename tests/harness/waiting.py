"""Waiting on a condition, never a guessed sleep: deadlines are bounds on a hang, scaled by
the machine's load; and each test's own deadline, scaled alike, which no wait outlasts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

# When the running test's own time is up (time.monotonic()), set by ``scale_test_timeout``.
_test_deadline: float | None = None


def load_factor() -> float:
    """How many times longer than on a quiet machine a wait may take here: the run queue per
    core, from 1 (quiet) up to 6. A deadline is a bound on a hang, not a timing claim (timing
    is measured in bench/), so a busy host gets proportionally more time."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(6.0, max(1.0, per_core))


def bound(seconds: float, below: float = float("inf")) -> float:
    """A duration a test asserts, ``seconds`` on a quiet machine, scaled as waits are; kept
    under ``below`` where the claim is being faster than that (a slower path it rules out)."""
    return min(seconds * load_factor(), below)


def scale_test_timeout(timeout: float) -> float:
    """The running test's timeout, ``timeout`` s on a quiet machine (pytest-timeout's, from
    the ini file or the test's ``pytest.mark.timeout``), scaled by the load at its start;
    every ``wait_for`` of the test ends before it, so that a hang fails with the wait's
    message, not with pytest-timeout's stack dump."""
    global _test_deadline
    scaled = timeout * load_factor()
    _test_deadline = time.monotonic() + scaled
    return scaled


def _left() -> float:
    """Seconds a wait may still take in the running test: its deadline less a reserve for
    the test's teardown (stopping its processes), 20 s on a quiet machine."""
    if _test_deadline is None:
        return float("inf")
    return _test_deadline - time.monotonic() - 20 * load_factor()


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str], step: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s, scaled
    by :func:`load_factor` when the machine is busy, or sooner when the test's own deadline
    comes first. ``what`` names the condition, or says what was seen instead when called at
    the deadline."""
    scaled = timeout * load_factor()
    limit = max(0.0, min(scaled, _left()))
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            cut = "" if limit >= scaled else " (the test's own deadline came first)"
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {said}{cut}")
        time.sleep(step)
