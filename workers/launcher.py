"""The worker host: one Celery worker per slot, each pinned to its GPU (or a CPU slot), and
the host's control worker.

``python manage.py edt_worker`` runs :func:`main`. Each slot's worker consumes only its own
queue (``slot.<host>.<index>``) with the solo pool, so one slot runs one learner at a time.
The control worker consumes the queue ``control`` (model checks and dataset preparations,
``workers/control.py``) with a small prefork pool: a pool process that dies loses no task.
A worker that dies is restarted after a delay (``workers/supervisor.py``); its slot shows as
lost until then (the heartbeat TTL), so the scheduler moves work elsewhere.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from protocol.keys import queue_for, slot_id_for
from protocol.slots import SlotRegistry
from workers import deployment, sandbox
from workers.control import CONTROL_QUEUE
from workers.learner import zygote
from workers.learner.allocator import huge_pages
from workers.learner.host import passed_env
from workers.metrics import HostCollector, serve
from workers.supervisor import Child, RestartPolicy, Supervisor
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
    model: str = ""  # the GPU's model name as NVML reports it; "" for a CPU slot

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
        return [SlotSpec(host, i, gpu.uuid, gpu.name) for i, gpu in enumerate(discovery.gpus)]
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
        EDT_SLOT_MODEL=spec.model,
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
    if spec.device != "cpu":  # its fork server starts with its one GPU visible (zygote.py)
        env.pop(zygote.ZYGOTE_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), base.get("PYTHONPATH")]))
    return env


def start_zygote(path: Path) -> subprocess.Popen[bytes]:
    """The host's learner zygote (workers/learner/zygote.py), to listen on ``path`` once it
    imported the learner: the slots fork their fork servers from it (each waits for it at
    its first). Its environment is a CPU slot's (one torch thread, no GPU, huge pages) cut
    to what a learner is passed: every process forked from it holds that environment's
    first copy in its memory, so none of the platform's (Redis' password) is there. It
    stops when this host process dies."""
    env = passed_env(slot_env(SlotSpec("", 0, "cpu"), dict(os.environ), os.getpid()))
    return subprocess.Popen([sys.executable, "-m", "workers.learner.zygote", str(path)],
                            env=env, cwd=PROJECT_DIR,
                            preexec_fn=sandbox.dies_with_parent())  # fmt: skip


def worker_command(spec: SlotSpec, loglevel: str = "INFO") -> list[str]:
    return [
        sys.executable, "-m", "celery", "--quiet", "-A", "edtweb", "worker",
        "-P", "solo", "-c", "1",
        "-Q", spec.queue,
        "-n", f"slot{spec.index}@{spec.host}",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-l", loglevel,
    ]  # fmt: skip


def start_worker(spec: SlotSpec | ControlSpec, slots: int) -> subprocess.Popen[bytes]:
    """Start a worker, its environment taken afresh (a restart sees changes), with the
    host's slot count (``EDT_HOST_SLOTS``: learners' and checks' memory is the host's
    divided among its slots, sandbox.memory_limit). It shuts down (SIGTERM: warm) when
    this host process dies, whatever killed it."""
    # Django's system checks ran as this host started (``manage.py edt_worker``); Celery's
    # Django fix-up would run them again in each worker (most of a second of CPU each)
    env = spec.environment(dict(os.environ, EDT_HOST_SLOTS=str(slots), CELERY_SKIP_CHECKS="1"),
                           os.getpid())  # fmt: skip
    return subprocess.Popen(spec.command(), env=env, cwd=PROJECT_DIR,
                            preexec_fn=sandbox.dies_with_parent())  # fmt: skip


class WorkerHost:
    """This machine's slot workers and its control worker under the shared supervisor,
    each started again a fixed delay after it died."""

    def __init__(self, specs: Sequence[SlotSpec], restart_delay: float = 10.0) -> None:
        workers: list[SlotSpec | ControlSpec] = [
            *specs,
            *([ControlSpec(specs[0].host)] if specs else []),
        ]
        children = [
            Child(f"{s.label}: worker", partial(start_worker, s, len(specs))) for s in workers
        ]
        # CPU slots fork their learners' fork servers from one zygote, started first (a
        # folder only this user may enter holds its socket); the slots find it in their
        # environment
        self.folder: Path | None = None
        if specs and all(s.device == "cpu" for s in specs):
            self.folder = Path(tempfile.mkdtemp(prefix="edt-zygote-"))
            path = self.folder / "zygote.sock"
            os.environ[zygote.ZYGOTE_ENV] = str(path)
            children.insert(0, Child("learner zygote", partial(start_zygote, path)))
        self.supervisor = Supervisor(children, RestartPolicy.fixed(restart_delay), log)

    def run(self) -> int:
        """Run every worker until SIGTERM or SIGINT; then SIGTERM them (a warm shutdown
        marks the slot offline), SIGKILL stragglers, then whatever they started (learner
        fork servers, learners): nothing outlives us."""
        try:
            return self.supervisor.run(poll_interval=0.5, grace=10.0)
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)


def announce_user_code(host: str, redis_url: str) -> None:
    """Say at start who user code runs as and whether this host refuses it for a Redis
    without a password (``workers/deployment.py``): what is fine at INFO, what is not at
    WARNING, with what to do."""
    findings = [deployment.user_finding()]
    if redis_url:
        findings.append(deployment.redis_finding(redis_url))
    for finding in findings:
        log.log(logging.INFO if finding.ok else logging.WARNING, "host %s: %s", host, finding.text)


def main(host: str, cpu_slots: int | None, restart_delay: float, discovery: Discovery,
         redis_url: str = "", metrics_port: int = 0,
         registry: SlotRegistry | None = None) -> int:  # fmt: skip
    """Run this host's workers until stopped; with ``metrics_port``, serve their metrics
    there (``workers/metrics.py``; the slots read from ``registry``)."""
    specs = plan_slots(host, discovery, cpu_slots)
    if discovery.gpus and cpu_slots is None:
        names = ", ".join(f"{g.name} ({g.uuid})" for g in discovery.gpus)
        log.info("host %s: %d GPU slot(s): %s", host, len(specs), names)
    else:
        why = f" ({discovery.reason})" if discovery.reason else ""
        log.info("host %s: CPU mode with %d slot(s)%s", host, len(specs), why)
    announce_user_code(host, redis_url)
    workers = WorkerHost(specs, restart_delay)
    if metrics_port and registry is not None:
        serve(metrics_port, HostCollector(host, lambda: registry, workers.supervisor.children))
    workers.run()
    log.info("host %s: all workers stopped", host)
    return 0
