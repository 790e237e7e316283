"""A worker host's Prometheus metrics, on a small HTTP port of its own
(``edt_worker --metrics-port``): its slots by state, read from the slot registry at each
scrape, and how often each of its workers was started again after dying.

``slot_counts`` is shared with the web's ``/metrics`` (``edtweb/monitoring.py``), which
counts every host's slots.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from protocol.connection import REDIS_DOWN
from protocol.keys import ALIVE, LOST, OFFLINE
from protocol.slots import SlotInfo, SlotRegistry
from workers.supervisor import Child

log = logging.getLogger("edt.worker")

STATES = (ALIVE, LOST, OFFLINE)


def slot_counts(slots: Iterable[SlotInfo]) -> dict[str, int]:
    """State -> how many of ``slots`` are in it, every state present (0 when none)."""
    seen = Counter(slot.state for slot in slots)
    return {state: seen.get(state, 0) for state in STATES}


class HostCollector:
    """``edt_host_slots{host,state}`` and ``edt_host_worker_restarts_total{host,worker}``,
    read when Prometheus scrapes. Redis away: the slots are left out of that scrape."""

    def __init__(self, host: str, registry: Callable[[], SlotRegistry],
                 children: Sequence[Child]) -> None:  # fmt: skip
        self.host = host
        self.registry = registry
        self.children = children

    def describe(self) -> list[Metric]:
        return []  # registering reads nothing (Redis may be away as the host starts)

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            "edt_host_worker_restarts", "Slot and control workers started again after dying",
            labels=["host", "worker"],
        )  # fmt: skip
        for child in self.children:
            restarts.add_metric([self.host, child.name], child.restarts)
        yield restarts
        try:
            slots = [s for s in self.registry().list_slots() if s.host == self.host]
        except REDIS_DOWN as exc:
            log.warning("metrics: the slots could not be read (%s)", exc)
            return
        gauge = GaugeMetricFamily("edt_host_slots", "This host's slots by state",
                                  labels=["host", "state"])  # fmt: skip
        for state, count in slot_counts(slots).items():
            gauge.add_metric([self.host, state], count)
        yield gauge


def serve(port: int, collector: HostCollector) -> None:
    """Serve the process's metrics (``collector``'s, and Python's process and GC ones) on
    ``port`` of every interface, from a daemon thread."""
    REGISTRY.register(collector)
    start_http_server(port)
    log.info("metrics on port %d at /metrics", port)
