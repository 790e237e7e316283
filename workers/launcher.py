"""The worker host: one Celery worker per slot, each pinned to its GPU (or a CPU slot), and
the host's control worker.

``python manage.py edt_worker`` runs :func:`main`. Each slot's worker consumes only its own
queue (``slot.<host>.<index>``) with the solo pool, so one slot runs one learner at a time.
The control worker consumes the queue ``control`` (model checks and dataset preparations,
``workers/control.py``) with a small prefork pool: a pool process that dies loses no task.
A worker that dies is restarted after a delay; its slot shows as lost until then (the
heartbeat TTL), so the scheduler moves work elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from scheduler.store import queue_for, slot_id_for
from workers import sandbox
from workers.control import CONTROL_QUEUE
from workers.learner.allocator import huge_pages
from workers.telemetry import Discovery

log = logging.getLogger("edt.worker")

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_CPU_SLOTS = 4
CONTROL_PROCESSES = 2  # model checks and dataset preparations a host runs at once


@dataclass(frozen=True)
class SlotSpec:
    host: str
    index: int
    device: str  # "cpu" or a GPU UUID

    @property
    def slot_id(self) -> str:
        return slot_id_for(self.host, self.index)

    @property
    def queue(self) -> str:
        return queue_for(self.slot_id)

    @property
    def label(self) -> str:
        return f"slot {self.slot_id}"

    def command(self) -> list[str]:
        return worker_command(self)

    def environment(self, base: dict[str, str], parent_pid: int) -> dict[str, str]:
        return slot_env(self, base, parent_pid)


@dataclass(frozen=True)
class ControlSpec:
    """The host's control worker: checks and preparations, never a learner (no slot)."""

    host: str

    @property
    def label(self) -> str:
        return f"control worker of {self.host}"

    def command(self, loglevel: str = "INFO") -> list[str]:
        return [
            sys.executable, "-m", "celery", "--quiet", "-A", "edtweb", "worker",
            "-P", "prefork", "-c", str(CONTROL_PROCESSES),
            "-Q", CONTROL_QUEUE,
            "-n", f"control@{self.host}",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-l", loglevel,
        ]  # fmt: skip

    def environment(self, base: dict[str, str], parent_pid: int) -> dict[str, str]:
        env = {k: v for k, v in base.items() if not k.startswith("EDT_SLOT_")}  # not a slot
        env["PYTHONUNBUFFERED"] = "1"
        paths = [str(PROJECT_DIR), base.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        return env


def plan_slots(host: str, discovery: Discovery, cpu_slots: int | None) -> list[SlotSpec]:
    """One slot per GPU; ``cpu_slots`` CPU slots when asked for or when there is no GPU."""
    if cpu_slots is None and discovery.gpus:
        return [SlotSpec(host, i, gpu.uuid) for i, gpu in enumerate(discovery.gpus)]
    count = DEFAULT_CPU_SLOTS if cpu_slots is None else cpu_slots
    if count < 1:
        raise ValueError(f"--cpu-slots must be at least 1, not {count}")
    return [SlotSpec(host, i, "cpu") for i in range(count)]


def slot_env(spec: SlotSpec, base: dict[str, str], parent_pid: int) -> dict[str, str]:
    """The environment of a slot's worker: its identity and its one device."""
    env = dict(base)
    env.update(
        EDT_SLOT_HOST=spec.host,
        EDT_SLOT_INDEX=str(spec.index),
        EDT_SLOT_DEVICE=spec.device,
        EDT_SLOT_PARENT_PID=str(parent_pid),
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        PYTHONUNBUFFERED="1",
    )
    if spec.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU slot sees no GPU
        env["OMP_NUM_THREADS"] = "1"  # one torch thread per learner
        env["EDT_TORCH_THREADS"] = "1"
    else:
        env["CUDA_VISIBLE_DEVICES"] = spec.device
    huge_pages(env)  # for its learners' fork server, started with this environment
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), base.get("PYTHONPATH")]))
    return env


def worker_command(spec: SlotSpec, loglevel: str = "INFO") -> list[str]:
    return [
        sys.executable, "-m", "celery", "--quiet", "-A", "edtweb", "worker",
        "-P", "solo", "-c", "1",
        "-Q", spec.queue,
        "-n", f"slot{spec.index}@{spec.host}",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-l", loglevel,
    ]  # fmt: skip


@dataclass
class SlotProcess:
    spec: SlotSpec | ControlSpec
    proc: subprocess.Popen[bytes] | None = None
    restart_at: float | None = None
    restarts: int = 0
    history: list[int] = field(default_factory=list)


class WorkerHost:
    """Starts, watches and stops the slot workers and the control worker of this machine."""

    def __init__(self, specs: Sequence[SlotSpec], restart_delay: float = 10.0) -> None:
        self.slots = [SlotProcess(spec) for spec in specs]
        if specs:
            self.slots.append(SlotProcess(ControlSpec(specs[0].host)))
        self.restart_delay = restart_delay
        self.stopping = False

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def _spawn(self, slot: SlotProcess) -> None:
        env = slot.spec.environment(dict(os.environ), os.getpid())
        # A worker whose host process died shuts down (SIGTERM: warm), whatever killed it.
        slot.proc = subprocess.Popen(slot.spec.command(), env=env, cwd=PROJECT_DIR,
                                     preexec_fn=sandbox.dies_with_parent())  # fmt: skip
        slot.restart_at = None
        log.info("%s: worker started (pid %d)", slot.spec.label, slot.proc.pid)

    def poll(self, now: float) -> None:
        """Notice dead workers and restart them once their delay has passed."""
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None:
                code = slot.proc.returncode
                slot.history.append(code)
                slot.proc = None
                slot.restart_at = now + self.restart_delay
                log.warning(
                    "%s: worker exited (%s); restarting in %.0f s",
                    slot.spec.label, describe_exit(code), self.restart_delay,
                )  # fmt: skip
            elif slot.proc is None and slot.restart_at is not None and now >= slot.restart_at:
                slot.restarts += 1
                self._spawn(slot)

    def run(self, poll_interval: float = 0.5) -> None:
        while not self.stopping:
            self.poll(time.monotonic())
            time.sleep(poll_interval)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every worker (a warm shutdown marks the slot offline), SIGKILL stragglers,
        then whatever they started (learner fork servers, learners): nothing outlives us."""
        self.stopping = True
        descendants = psutil.Process().children(recursive=True)
        running = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d ignored SIGTERM; killing it", proc.pid)
                proc.kill()
                proc.wait()
        for leftover in descendants:
            with contextlib.suppress(psutil.Error):
                leftover.kill()


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def main(host: str, cpu_slots: int | None, restart_delay: float, discovery: Discovery) -> int:
    specs = plan_slots(host, discovery, cpu_slots)
    if discovery.gpus and cpu_slots is None:
        names = ", ".join(f"{g.name} ({g.uuid})" for g in discovery.gpus)
        log.info("host %s: %d GPU slot(s): %s", host, len(specs), names)
    else:
        why = f" ({discovery.reason})" if discovery.reason else ""
        log.info("host %s: CPU mode with %d slot(s)%s", host, len(specs), why)
    if os.geteuid() == 0:
        log.warning("running as root: in production run edt_worker as an unprivileged user")
    worker_host = WorkerHost(specs, restart_delay)

    def _stop(signum: int, _frame: object) -> None:
        worker_host.stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker_host.start()
    try:
        worker_host.run()
    finally:
        worker_host.stop()
    log.info("host %s: all workers stopped", host)
    return 0
