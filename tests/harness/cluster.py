"""A live cluster of a test's own, with fault injection: worker hosts (``edt_worker``, real
slot workers and learners), scheduler processes and the metrics consumer, and where a
fault needs them web and scheduler under `make run`'s own supervisor; all share the test's
Redis and database. A test kills what it wants (a learner, a slot worker, a host's whole
process group, a scheduler, the web, Redis itself) and checks with ``assert_alive`` that
every process is back. A control worker alone (``control_worker``) takes model checks and
dataset preparations."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from edtweb import launcher
from edtweb.redis_server import RedisServer, free_port
from edtweb.training.models import Job
from protocol.keys import ALIVE
from protocol.slots import SlotInfo
from scheduler.store import Store
from tests.harness.processes import PROJECT_DIR, Processes, subprocess_env
from tests.harness.waiting import load_factor, wait_for
from workers.control import CONTROL_QUEUE
from workers.launcher import ControlSpec
from workers.supervisor import supervise_commands

# The cluster's Django commands skip Django's system checks (most of a second of CPU each),
# which each EDT's launcher runs as it starts (tests/test_launcher.py).
SKIP_CHECKS = "--skip-checks"


def live_env(redis_server: RedisServer) -> dict[str, str]:
    """A live process's environment: this test's Redis, data dir and database."""
    return subprocess_env(Path(settings.EDT_DATA_DIR), REDIS_URL=redis_server.url,
                          DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}")  # fmt: skip


class Supervised:
    """Some of the stack's processes under `make run`'s own supervisor, which restarts
    whichever dies (workers/supervisor.py); its loop runs in a thread of the caller."""

    def __init__(self, commands: dict[str, str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.supervisor = supervise_commands(commands, env, str(PROJECT_DIR), out=log.open("w"))
        self.thread = threading.Thread(target=self.supervisor.watch, name="supervisor",
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def pid(self, name: str) -> int | None:
        """The pid of child ``name`` while it runs (None between a death and its restart)."""
        child = next(c for c in self.supervisor.children if c.name == name)
        proc = child.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def stop(self) -> None:
        self.supervisor.stopping.set()
        self.thread.join(timeout=10)
        self.supervisor.stop(grace=10)


class Cluster:
    """CPU slots on worker hosts and scheduler processes, all real, sharing the test's
    Redis and database; and, where a fault needs them, web and scheduler under the
    supervisor. ``env`` is the processes' environment (default: :func:`live_env`)."""

    def __init__(self, redis: RedisServer, store: Store, processes: Processes, tmp: Path,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.redis, self.store, self.processes, self.tmp = redis, store, processes, tmp
        self.env = live_env(redis) if env is None else env
        self.host = f"h{time.monotonic_ns() % 10_000_000}"
        self.hosts: dict[str, tuple[int, Any]] = {}  # host name: (slots, its edt_worker)
        self.metrics: subprocess.Popen[str] | None = None
        self.schedulers: list[Any] = []
        self.supervised: Supervised | None = None
        self.web_port = 0

    @property
    def slots(self) -> int:
        return sum(count for count, _ in self.hosts.values())

    def start_slots(self, count: int, *extra: str) -> None:
        """The first worker host, on this test's host name (`cluster.worker`)."""
        self.hosts[self.host] = (count, None)
        self.worker = self.processes.manage(
            "edt_worker", SKIP_CHECKS, "--cpu-slots", str(count), "--host-name", self.host, *extra,
            env=self.env, log=self.tmp / "worker.log",
        )  # fmt: skip
        self.hosts[self.host] = (count, self.worker)
        wait_for(lambda: len(self.warm_slots()) == count, 180, f"{count} warm slots")

    def start_host(self, name: str, count: int, *extra: str, restart_delay: float = 1) -> Any:
        """Another worker host of ``count`` slots, as `edt_worker` runs on a machine of its
        own (it shares only Redis, the database and the data dir with the others)."""
        self.hosts[name] = (count, None)
        proc = self.processes.manage(
            "edt_worker", SKIP_CHECKS, "--cpu-slots", str(count), "--host-name", name,
            "--restart-delay",
            f"{restart_delay:g}", *extra, env=self.env, log=self.tmp / f"worker-{name}.log",
        )  # fmt: skip
        self.hosts[name] = (count, proc)
        wait_for(lambda: len(self.warm_slots()) == self.slots, 180, f"host {name}'s slots warm")
        return proc

    def warm_slots(self) -> list[SlotInfo]:
        return [s for s in self.store.list_slots() if self.is_warm(s)]

    def is_warm(self, slot: SlotInfo) -> bool:
        return (slot.host in self.hosts and slot.state == ALIVE
                and bool(slot.telemetry.get("warm")))  # fmt: skip

    def start_scheduler(self, name: str = "scheduler") -> subprocess.Popen[str]:
        """A scheduler process; with the first, the metrics consumer that serves them all
        (jobs complete once their metrics are stored), as `make run` starts them."""
        if self.metrics is None:
            self.metrics = self.start_metrics()
        proc = self.processes.manage("edt_scheduler", SKIP_CHECKS, env=self.env,
                                     log=self.tmp / f"{name}.log")  # fmt: skip
        self.schedulers.append(proc)
        return proc

    def start_metrics(self, name: str = "metrics") -> subprocess.Popen[str]:
        return self.processes.manage("edt_metrics", SKIP_CHECKS, env=self.env,
                                     log=self.tmp / f"{name}.log")  # fmt: skip

    def supervise(self, *names: str) -> Supervised:
        """Start ``names`` ("web", "scheduler") with `make run`'s own command lines, and
        the metrics consumer unless one runs already (jobs complete once it stored their
        metrics)."""
        if self.metrics is None:
            names = (*names, "metrics")
        self.web_port = free_port()
        opts = launcher.Options(port=self.web_port, live_port=free_port())
        commands = {k: v for k, v in launcher.processes(opts).items() if k in names}
        self.supervised = Supervised(commands, self.env, self.tmp / "supervisor.log")
        return self.supervised

    def learners(self) -> list[psutil.Process]:
        """The learner processes on this cluster's hosts now: each is forked from its
        slot's fork server (the one process per slot that imported torch already)."""
        return [p for _, host in self.hosts.values() if host is not None
                for p in descendants(host.pid) if is_learner(p)]  # fmt: skip

    def close(self) -> None:
        if self.supervised is not None:
            self.supervised.stop()

    def assert_alive(self) -> None:
        """Every EDT process of the stack runs: the worker host and each of its slots (a
        heartbeat from a live worker), the schedulers, and what the supervisor watches."""
        for name, (_, host) in self.hosts.items():
            assert host.poll() is None, f"worker host {name} died"
        wait_for(lambda: len(self.warm_slots()) == self.slots, 60, "every slot alive")
        for slot in self.warm_slots():
            assert psutil.pid_exists(slot.pid), f"slot {slot.slot_id}'s worker is gone"
        for proc in self.schedulers:
            assert proc.poll() is None, "a scheduler died"
        crashed = [line for log in self.tmp.glob("worker*.log")
                   for line in log.read_text().splitlines()
                   if "raised unexpected" in line]  # fmt: skip
        assert not crashed, f"a slot's task crashed: {crashed}"
        if self.supervised is not None:
            for child in self.supervised.supervisor.children:
                wait_for(lambda c=child.name: self.supervised and self.supervised.pid(c),
                         30, f"{child.name} running")  # fmt: skip


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _line(p: psutil.Process | None) -> str:
    return " ".join(p.cmdline()) if p is not None else ""


def is_zygote(proc: psutil.Process) -> bool:
    """A worker host's learner zygote (workers/learner/zygote.py), not a process it forked."""
    zygote = "workers.learner.zygote"
    return zygote in _line(proc) and zygote not in _line(proc.parent())


def is_fork_server(proc: psutil.Process | None) -> bool:
    """A learner fork server: started the stock way (multiprocessing's command line), or
    forked from its host's zygote (which it has the command line of), or a process forked
    from either."""
    if proc is None:
        return False
    line = _line(proc)
    if "multiprocessing.forkserver" in line:
        return True
    return "workers.learner.zygote" in line and not is_zygote(proc)


def is_learner(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and is_fork_server(proc) and \
            is_fork_server(proc.parent())  # fmt: skip
    except psutil.Error:
        return False


def learners_on(slot: str) -> list[psutil.Process]:
    """The learners on ``slot`` now, on this machine (its fork server is its host
    zygote's child, not its worker's)."""
    return slot_learners([p for p in psutil.process_iter() if is_learner(p)], slot)


def slot_learners(learners: list[psutil.Process], slot: str) -> list[psutil.Process]:
    """Those of ``learners`` on ``slot``: each holds its log, ``logs/<slot>.log``, open."""
    found = []
    for proc in learners:
        with contextlib.suppress(psutil.Error):
            if any(f.path.endswith(f"/logs/{slot}.log") for f in proc.open_files()):
                found.append(proc)
    return found


@pytest.fixture
def cluster(
    store_redis: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> Iterator[Cluster]:
    """A cluster on the Redis the module names (``pytest.mark.redis``); nothing started."""
    stack = Cluster(store_redis, store, processes, tmp_path)
    yield stack
    stack.close()


@pytest.fixture
def control_worker(
    redis_server: RedisServer, processes: Processes, transactional_db: None, tmp_path: Path
) -> subprocess.Popen[str]:
    """A control worker as a worker host starts it (model checks, dataset preparations),
    sharing this test's database and data directory; answering once this returns."""
    spec = ControlSpec("test-host")
    env = spec.environment(live_env(redis_server), os.getpid())
    proc = processes.start(spec.command(), env=env, log=tmp_path / "control.log")
    celery = Celery(broker=redis_server.url, backend=redis_server.url)
    ping = celery.send_task("edt.ping", queue=CONTROL_QUEUE)
    assert ping.get(timeout=60 * load_factor())["pid"], "the control worker answers"
    return proc


class Watch(threading.Thread):
    """Samples the job twice a second while a fault plays out: the longest stretch it was
    RUNNING with no learner process alive. A sampling that raised, or a thread that does not
    end, fails ``stop``: a watch that stopped looking must not read as "never without a
    learner"."""

    def __init__(self, job: Job, learners: Callable[[], Collection[object]]) -> None:
        super().__init__(name="fault-watch", daemon=True)
        self.job_id, self.learners = job.pk, learners
        self.longest = 0.0
        self.samples = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        since: float | None = None
        try:
            while not self.stopping.wait(0.5):
                running = Job.objects.filter(pk=self.job_id, state=Job.State.RUNNING).exists()
                if running and not self.learners():
                    since = since or time.monotonic()
                    self.longest = max(self.longest, time.monotonic() - since)
                else:
                    since = None
                self.samples += 1
        except BaseException as exc:  # kept for stop(), which fails the test with it
            self.error = exc
        finally:
            connection.close()

    def stop(self) -> float:
        """The longest stretch RUNNING without a learner, in seconds."""
        self.stopping.set()
        self.join(timeout=30 * load_factor())
        if self.error is not None:
            raise AssertionError(f"the watch on job {self.job_id} failed") from self.error
        assert not self.is_alive(), f"the watch on job {self.job_id} did not stop"
        assert self.samples, f"the watch on job {self.job_id} never sampled"
        return self.longest


Watcher = Callable[[Job], Watch]


@pytest.fixture
def watch(cluster: Cluster) -> Iterator[Watcher]:
    """Starts a :class:`Watch` on a job over the cluster's learners; all stop at the end."""
    watches: list[Watch] = []

    def start(job: Job) -> Watch:
        watches.append(Watch(job, cluster.learners))
        return watches[-1]

    yield start
    for w in watches:
        w.stopping.set()  # stopped without a check: the test's own stop() checked it
        w.join(timeout=30)
