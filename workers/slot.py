"""Inside a slot's Celery worker: register the slot and keep its heartbeat alive.

The launcher (``edt_worker``) sets ``EDT_SLOT_HOST``, ``EDT_SLOT_INDEX`` and
``EDT_SLOT_DEVICE`` for each worker it starts. The heartbeat runs in a thread of the worker
process itself, so a killed worker stops beating and its slot is seen as lost once the TTL
runs out. If the launcher dies, the worker shuts itself down rather than linger.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings

from scheduler.store import Store, connect
from workers.telemetry import Sampler, sampler_for

log = logging.getLogger("edt.slot")


class Heartbeat(threading.Thread):
    def __init__(self, store: Store, slot_id: str, sampler: Sampler, parent_pid: int) -> None:
        super().__init__(name="edt-heartbeat", daemon=True)
        self.store = store
        self.slot_id = slot_id
        self.sampler = sampler
        self.parent_pid = parent_pid
        self.stopping = threading.Event()
        self.warm = False  # the learner fork server is up: a learner starts in well under 1 s

    def run(self) -> None:
        interval = float(settings.EDT_HEARTBEAT_SECONDS)
        ttl = int(settings.EDT_HEARTBEAT_TTL)
        while not self.stopping.is_set():
            if self.parent_pid and os.getppid() != self.parent_pid:
                log.warning("slot %s: its host process is gone; shutting down", self.slot_id)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            try:
                sample = dict(self.sampler.sample(), warm=self.warm)
                self.store.heartbeat(self.slot_id, sample, ttl)
            except Exception as exc:  # Redis down: keep trying, the TTL tells the truth
                log.warning("slot %s: heartbeat failed: %s", self.slot_id, exc)
            self.stopping.wait(interval)


_heartbeat: Heartbeat | None = None


def start_heartbeat(**_: Any) -> None:
    global _heartbeat
    host = os.environ.get("EDT_SLOT_HOST")
    if not host:
        return  # a plain Celery worker, not a slot
    index = int(os.environ["EDT_SLOT_INDEX"])
    device = os.environ.get("EDT_SLOT_DEVICE", "cpu")
    store = Store(connect(settings.REDIS_URL))
    slot_id = store.register_slot(host, index, device, os.getpid())
    parent = int(os.environ.get("EDT_SLOT_PARENT_PID", "0"))
    _heartbeat = Heartbeat(store, slot_id, sampler_for(device), parent)
    _heartbeat.start()
    threading.Thread(target=_prewarm, name="edt-prewarm", daemon=True).start()
    log.info("slot %s ready on %s (pid %d)", slot_id, device, os.getpid())


def _prewarm() -> None:
    from workers.learner import host

    try:
        host.prewarm()
    except Exception as exc:  # learners then start the slow way round, still correctly
        log.warning("could not pre-start the learner fork server: %s", exc)
        return
    if _heartbeat is not None:
        _heartbeat.warm = True


def stop_heartbeat(**_: Any) -> None:
    if _heartbeat is None:
        return
    _heartbeat.stopping.set()
    try:
        _heartbeat.store.mark_offline(_heartbeat.slot_id)
    except Exception as exc:
        log.warning("slot %s: could not mark offline: %s", _heartbeat.slot_id, exc)


worker_ready.connect(start_heartbeat)
worker_shutdown.connect(stop_heartbeat)
