"""The one lease-and-backoff loop: one process of several does the work, the others stand by.

The scheduler (``scheduler/service.py``) and the metrics consumer
(``edtweb/training/metrics_consumer.py``) run as this loop. Each round takes or renews a
Redis lease (``lease_ms``; a round must take well under it); the holder does one round of its
work, the others stand by and try again after a rest. A holder that dies stops renewing and
a standby takes over once the lease lapses; one that stops releases the lease, so a standby
takes over at its next try. A round that raises (Redis or the database away) only slows
the loop down: the next try comes after a backoff (``protocol/retry.py``) of up to
``BACKOFF_CAP`` seconds, and the loop ends only when ``stopping`` is set.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from abc import ABC, abstractmethod

from protocol.retry import Backoff
from scheduler.store import Store

BACKOFF_CAP = 2.0  # seconds: the longest wait between tries while Redis is away


class LeaseLoop(ABC):
    """Subclasses say what one round does (:meth:`work`, which calls :meth:`hold_lease`
    first) and how to rest between rounds (:meth:`rest`)."""

    def __init__(self, store: Store, name: str, key: str, lease_ms: int,
                 log: logging.Logger) -> None:  # fmt: skip
        self.store = store
        self.name = name  # in the log's lines: "scheduler", "metrics consumer"
        self.key = key
        self.lease_ms = lease_ms
        self.log = log
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.active = False
        self.stopping = threading.Event()
        self.backoff = Backoff(cap=BACKOFF_CAP)

    # What subclasses say -------------------------------------------------------------------

    @abstractmethod
    def work(self) -> float:
        """One round, active or standing by; returns how long to rest before the next."""

    def rest(self, seconds: float) -> None:
        """Wait before the next round; a stop ends the wait."""
        self.stopping.wait(seconds)

    def changed(self) -> None:  # noqa: B027 (a hook: doing nothing is its default)
        """Called when this process became active or stopped being it."""

    # The lease -----------------------------------------------------------------------------

    def hold_lease(self) -> bool:
        """Take or keep the lease; say so when this process becomes active or stands by."""
        active = self.store.acquire_lease(self.holder, self.lease_ms, self.key)
        if active != self.active:
            self.log.info("%s %s is %s", self.name, self.holder,
                          "active" if active else "standing by")  # fmt: skip
            self.active = active
            self.changed()
        return active

    def release(self) -> None:
        try:
            self.store.release_lease(self.holder, self.key)
        except Exception as exc:  # Redis away: the lease expires by itself
            self.log.warning("could not release the %s lease: %s", self.name, exc)

    # The loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Round after round until stopped, then release the lease."""
        self.log.info("%s %s started", self.name, self.holder)
        while not self.stopping.is_set():
            try:
                self.turn()
            except Exception as exc:
                self.failed(exc)
        self.release()
        self.log.info("%s stopped", self.name)

    def turn(self) -> None:
        wait = self.work()
        if self.backoff.succeeded():
            self.log.info("%s %s: Redis and the database answer again", self.name, self.holder)
        self.rest(wait)

    def failed(self, exc: Exception) -> None:
        """Wait out a failed round: a backoff that doubles while the failures go on."""
        delay = self.backoff.failed()
        if self.backoff.failures == 1:
            self.log.exception("%s round failed; retrying with backoff", self.name)
        else:
            self.log.warning("%s round failed again (%s); next try in %.1f s", self.name, exc,
                             delay)  # fmt: skip
        self.stopping.wait(delay)
