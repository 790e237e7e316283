"""Waiting on a condition, never a guessed sleep: deadlines are bounds on a hang, scaled by
the machine's load."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def load_factor() -> float:
    """How many times longer than on a quiet machine a wait may take here: the run queue per
    core, from 1 (quiet) up to 6. A deadline is a bound on a hang, not a timing claim (timing
    is measured in bench/), so a busy host gets proportionally more time."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(6.0, max(1.0, per_core))


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str], step: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s, scaled
    by :func:`load_factor` when the machine is busy. ``what`` names the condition, or says
    what was seen instead when called at the deadline."""
    limit = timeout * load_factor()
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {said}")
        time.sleep(step)
