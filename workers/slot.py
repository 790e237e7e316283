"""Inside a slot's Celery worker: register the slot and keep its heartbeat alive.

The launcher (``edt_worker``) sets ``EDT_SLOT_HOST``, ``EDT_SLOT_INDEX``,
``EDT_SLOT_DEVICE`` and ``EDT_SLOT_MODEL`` (the GPU's model name, from NVML) for each worker
it starts, and ``EDT_HOST_SLOTS``; the slot's description carries the model and the host's
slot count, which resource groups' rules read (scheduler/groups.py). The heartbeat runs
in a thread of the worker process itself, so a killed worker stops beating and its slot is
seen as lost once the TTL runs out. If the launcher dies, the worker shuts itself down
rather than linger. The same thread looks every ``REDIS_CHECK_SECONDS`` whether Redis lets
anyone in without a password, and if so says in the slot's description that the slot
refuses user code (``workers/deployment.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings

from protocol.connection import connect
from protocol.keys import slot_id_for
from protocol.slots import SlotRegistry
from workers.deployment import redis_refusal
from workers.telemetry import Sampler, sampler_for

log = logging.getLogger("edt.slot")

REDIS_CHECK_SECONDS = 30.0  # how often a slot looks again whether Redis asks for a password


class Heartbeat(threading.Thread):
    """Registers the slot, then beats; while Redis is away it keeps trying (the heartbeat's
    TTL tells the scheduler the truth meanwhile) and registers again if Redis came back
    without the slot's description."""

    def __init__(self, store: SlotRegistry, spec: tuple[str, int, str], sampler: Sampler,
                 parent_pid: int, redis_url: str = "", model: str = "",
                 host_slots: int = 0) -> None:  # fmt: skip
        super().__init__(name="edt-heartbeat", daemon=True)
        self.store = store
        self.host, self.index, self.device = spec
        self.model, self.host_slots = model, host_slots
        self.slot_id = slot_id_for(self.host, self.index)
        self.sampler = sampler
        self.parent_pid = parent_pid
        self.stopping = threading.Event()
        self.registered = False
        self.warm = False  # the learner fork server is up: a learner starts in well under 1 s
        self.redis_url = redis_url  # the Redis to check for a password ("": none checked)
        self.refusing = ""  # why this slot refuses user code now ("": it runs it)
        self.shown: str | None = None  # the reason the slot's description holds
        self.checked_at = -REDIS_CHECK_SECONDS

    def run(self) -> None:
        interval = float(settings.EDT_HEARTBEAT_SECONDS)
        ttl = int(settings.EDT_HEARTBEAT_TTL)
        failing = False
        while not self.stopping.is_set():
            if self.parent_pid and os.getppid() != self.parent_pid:
                log.warning("slot %s: its host process is gone; shutting down", self.slot_id)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            try:
                if time.monotonic() - self.checked_at >= REDIS_CHECK_SECONDS:
                    self.check_redis()
                self.beat(ttl)
                if failing:
                    log.info("slot %s: heartbeat written again", self.slot_id)
                failing = False
            except Exception as exc:  # Redis down: keep trying, the TTL tells the truth
                if not failing:
                    log.warning("slot %s: heartbeat failed: %s", self.slot_id, exc)
                failing = True
            self.stopping.wait(interval)

    def check_redis(self) -> None:
        """Look whether Redis lets anyone in (a cheap PING without credentials), and say
        so in the log when the answer changes; the next beat tells the registry."""
        self.checked_at = time.monotonic()
        refusing = redis_refusal(self.redis_url) if self.redis_url else ""
        if refusing and refusing != self.refusing:
            log.error("slot %s: %s", self.slot_id, refusing)
        elif self.refusing and not refusing:
            log.info("slot %s: Redis asks for a password now; running user code", self.slot_id)
        self.refusing = refusing

    def beat(self, ttl: int) -> None:
        if not self.registered:
            self.store.register_slot(self.host, self.index, self.device, os.getpid(),
                                     self.refusing, self.model, self.host_slots)  # fmt: skip
            self.registered = True
            self.shown = self.refusing
            log.info("slot %s registered on %s (pid %d)", self.slot_id, self.device, os.getpid())
        if self.shown != self.refusing:
            self.store.set_refusing(self.slot_id, self.refusing)
            self.shown = self.refusing
        sample = dict(self.sampler.sample(), warm=self.warm)
        if not self.store.heartbeat(self.slot_id, sample, ttl):
            self.registered = False  # Redis lost it: describe the slot again next beat


_heartbeat: Heartbeat | None = None


def start_heartbeat(**_: Any) -> None:
    global _heartbeat
    host = os.environ.get("EDT_SLOT_HOST")
    if not host:
        return  # a plain Celery worker, not a slot
    index = int(os.environ["EDT_SLOT_INDEX"])
    device = os.environ.get("EDT_SLOT_DEVICE", "cpu")
    store = SlotRegistry(connect(settings.REDIS_URL))
    parent = int(os.environ.get("EDT_SLOT_PARENT_PID", "0"))
    spec = (host, index, device)
    sampler = sampler_for(device)
    model = gpu_model(device, os.environ.get("EDT_SLOT_MODEL", ""), sampler)
    host_slots = int(os.environ.get("EDT_HOST_SLOTS") or 0)
    _heartbeat = Heartbeat(store, spec, sampler, parent, settings.REDIS_URL, model, host_slots)
    _heartbeat.start()
    threading.Thread(target=_prewarm, name="edt-prewarm", daemon=True).start()


def gpu_model(device: str, given: str, sampler: Sampler) -> str:
    """The slot's GPU model: as the launcher found it, else as NVML names the slot's GPU
    (its sampler asked); "" for a CPU slot."""
    if device == "cpu":
        return ""
    return given or str(getattr(sampler, "name", ""))


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
