"""The scheduler process's own Prometheus metrics: its steps and decisions with their
latency, the learners it starts and the exits it sees, and its Redis retries.

They live in a registry of their own (``SCHEDULER``), not the process's default one. The
active scheduler writes them as Prometheus text to Redis (``SCHEDULER_METRICS_KEY``) each
time it writes the allocation record, with the same TTL, and the web's ``/metrics``
serves them (``edtweb/monitoring.py``): one place to scrape, whichever scheduler is
active, no port per scheduler. A standby writes nothing; after a takeover the counters
start again from zero, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from protocol.exits import Exit
from protocol.retry import REDIS_RETRIES

SCHEDULER = CollectorRegistry(auto_describe=True)
SCHEDULER.register(REDIS_RETRIES)

STEP_SECONDS = Histogram(
    "edt_scheduler_step_seconds",
    "Duration of one live scheduler step (observe, decide, place, apply, tick the jobs)",
    registry=SCHEDULER,
)
DECISION_SECONDS = Histogram(
    "edt_scheduler_decision_seconds",
    "Duration of one decision: the policy's decide, placement and carrying it out "
    "(steps whose inputs did not change decide nothing and are not counted)",
    registry=SCHEDULER,
)
LEARNER_STARTS = Counter(
    "edt_learner_starts", "Learners the scheduler sent to a slot", registry=SCHEDULER
)
LEARNER_EXITS = Counter(
    "edt_learner_exits",
    "Learner exits the scheduler saw, by status (finished is no failure)",
    ["status"],
    registry=SCHEDULER,
)

STATUSES = {int(code): code.name.lower() for code in Exit}


def exit_status(code: int) -> str:
    """The ``status`` label of an exit code: an ``Exit``'s name, ``signal`` for a learner
    killed by one (a negative code), ``other`` otherwise."""
    if code < 0:
        return "signal"
    return STATUSES.get(code, "other")


def exposition() -> str:
    """The scheduler's metrics in Prometheus' text format."""
    return generate_latest(SCHEDULER).decode()
