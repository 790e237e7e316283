"""Faults on a running job, live: real slot workers, scheduler, learners, web and Redis.

For each fault the job must end COMPLETED with every step from 1 to the last in its metrics
exactly once, read back through the API; no job may stay RUNNING without a learner for more
than 60 s; at most one iteration is redone per fault; and every EDT process must be alive at
the end (``assert_recovered``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from edtweb import launcher
from edtweb.redis_server import RedisServer, free_port
from edtweb.training import services
from edtweb.training.models import Job
from protocol.connection import connect
from protocol.keys import ALIVE
from protocol.slots import SlotInfo
from scheduler.store import Store
from tests.conftest import PROJECT_DIR, Processes, wait_for
from tests.test_scheduler_live import Cluster, submit, workers_of
from workers.learner.datasets import write_cifar10
from workers.supervisor import supervise_commands

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own with an append-only file, so it can be killed and
    started again on the same port with its data, as a production Redis would."""
    server = RedisServer(tmp_path / "durable-redis", appendonly=True).start()
    yield server
    server.stop()


@pytest.fixture
def store(durable_redis: RedisServer, settings: Any) -> Iterator[Store]:
    settings.REDIS_URL = durable_redis.url
    client = connect(durable_redis.url)
    yield Store(client)
    client.close()


class Supervised:
    """Some of the stack's processes under `make run`'s own supervisor, which restarts
    whichever dies (workers/supervisor.py); its loop runs in a thread of the test."""

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


class FaultCluster(Cluster):
    """The live stack of these tests: slots and schedulers as in the scheduler's live tests,
    and, where a fault needs them, web and scheduler under the supervisor."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.hosts: dict[str, tuple[int, Any]] = {}  # host name: (slots, its edt_worker)
        self.schedulers: list[Any] = []
        self.supervised: Supervised | None = None
        self.web_port = 0

    @property
    def slots(self) -> int:
        return sum(count for count, _ in self.hosts.values())

    def start_slots(self, count: int, *extra: str) -> None:
        """The first worker host, on this test's host name (`cluster.worker`)."""
        self.hosts[self.host] = (count, None)
        super().start_slots(count, *extra)
        self.hosts[self.host] = (count, self.worker)

    def start_host(self, name: str, count: int, *extra: str) -> Any:
        """Another worker host of ``count`` slots, as `edt_worker` runs on a machine of its
        own (it shares only Redis, the database and the data dir with the others)."""
        self.hosts[name] = (count, None)
        proc = self.processes.manage(
            "edt_worker", "--cpu-slots", str(count), "--host-name", name, "--restart-delay",
            "1", *extra, env=self.env, log=self.tmp / f"worker-{name}.log",
        )  # fmt: skip
        self.hosts[name] = (count, proc)
        wait_for(lambda: len(self.warm_slots()) == self.slots, 180, f"host {name}'s slots warm")
        return proc

    def is_warm(self, slot: SlotInfo) -> bool:
        return (slot.host in self.hosts and slot.state == ALIVE
                and bool(slot.telemetry.get("warm")))  # fmt: skip

    def start_scheduler(self, name: str = "scheduler") -> Any:
        proc = super().start_scheduler(name)
        self.schedulers.append(proc)
        return proc

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
        """The learner processes on this host now: each is forked from its slot's fork
        server (the one process per slot that imported torch already)."""
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


def is_learner(proc: psutil.Process) -> bool:
    def forkserver(p: psutil.Process | None) -> bool:
        return p is not None and "multiprocessing.forkserver" in " ".join(p.cmdline())

    try:
        return proc.status() != psutil.STATUS_ZOMBIE and forkserver(proc) and forkserver(
            proc.parent())  # fmt: skip
    except psutil.Error:
        return False


@pytest.fixture
def cluster(
    durable_redis: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> Iterator[FaultCluster]:
    stack = FaultCluster(durable_redis, store, processes, tmp_path)
    yield stack
    stack.close()


class Watch(threading.Thread):
    """Samples the job twice a second while a fault plays out: the longest stretch it was
    RUNNING with no learner process alive."""

    def __init__(self, job: Job, learners: Callable[[], Collection[object]]) -> None:
        super().__init__(name="fault-watch", daemon=True)
        self.job_id, self.learners = job.pk, learners
        self.longest = 0.0
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
        finally:
            connection.close()

    def stop(self) -> float:
        self.stopping.set()
        self.join(timeout=30)
        return self.longest


@pytest.fixture
def watch(cluster: FaultCluster) -> Iterator[Callable[[Job], Watch]]:
    watches: list[Watch] = []

    def start(job: Job) -> Watch:
        watches.append(Watch(job, cluster.learners))
        return watches[-1]

    yield start
    for w in watches:
        w.stop()


Get = Callable[[str], tuple[int, Any]]


def api_client_get(job: Job) -> Get:
    client = APIClient()
    client.force_authenticate(job.owner)

    def get(url: str) -> tuple[int, Any]:
        reply = client.get(url)
        return reply.status_code, reply.json() if reply.status_code == 200 else reply.content

    return get


def http_get(port: int, token: str) -> Get:
    """GET from the web process over HTTP, with an API token, as a script does."""

    def get(url: str) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{port}{url}" if url.startswith("/") else url
        request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            return 0, str(exc)

    return get


def api_steps(job: Job, get: Get | None = None) -> list[int]:
    """The job's training steps as a user reads them through the REST API, every page."""
    get = get or api_client_get(job)
    steps: list[int] = []
    url: str | None = f"/api/v1/jobs/{job.pk}/metrics/records/?kind=train&limit=1000"
    while url:
        status, body = get(url)
        assert status == 200, body
        steps += [int(r["step"]) for r in body["results"]]
        url = body["next"]
    return steps


def redone(job: Job) -> int:
    """Iterations trained twice: steps the learners recorded more than once, at different
    times, in the job's stream (the database keeps the first; a record written twice by a
    retry has one time; a new rank 0's copy of the last step, ``replay``, is no second
    training). The iteration in flight at a fault, never recorded, is the one a fault may
    cost."""
    times = {(r["step"], r["time"]) for _, r in services.job_store(job.pk).read_metrics()
             if r.get("type") == "train" and not r.get("replay")}  # fmt: skip
    return sum(n - 1 for n in Counter(step for step, _ in times).values())


def assert_recovered(job: Job, cluster: FaultCluster, watch: Watch, steps: int,
                     faults: int = 1, get: Get | None = None,
                     redo: int | None = None) -> None:  # fmt: skip
    """The fault table's acceptance, once the job has ended: COMPLETED; never RUNNING
    without a learner for more than 60 s; every step exactly once through the API; at most
    ``redo`` iterations trained twice (one per fault unless said); every process alive."""
    wait_for(lambda: completed(job), 240, "the job to complete")
    longest = watch.stop()
    assert longest <= 60, f"the job was RUNNING without a learner for {longest:.0f} s"
    assert api_steps(job, get) == list(range(1, steps + 1)), "a step lost or repeated"
    allowed = faults if redo is None else redo
    assert redone(job) <= allowed, f"{redone(job)} iterations redone after {faults} fault(s)"
    cluster.assert_alive()


def completed(job: Job) -> bool:
    job.refresh_from_db()
    assert job.state not in (Job.State.FAILED, Job.State.STOPPED), job.error
    return job.state == Job.State.COMPLETED


TRAIN, BATCH = 512, 64  # 8 iterations an epoch
Watcher = Callable[[Job], Watch]


def running_on_two(cluster: FaultCluster, alice: Any, tmp_path: Path, name: str,
                   epochs: int) -> Job:  # fmt: skip
    """A 2-learner job on the cluster's 2 slots, 20 steps into its training."""
    data = write_cifar10(tmp_path / "data", train=TRAIN, test=64)
    job = submit(alice, name, data, epochs=epochs, max_workers=2)
    wait_for(lambda: workers_of(job) == 2, 120, "the job on 2 slots")
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= 20, 120, "20 steps")
    return job


def went_on(job: Job, generation: int) -> bool:
    """The job formed a generation without its lost learner (or ended meanwhile)."""
    return services.job_store(job.pk).generation() > generation or completed(job)


def test_redis_killed_for_ten_seconds_then_restarted_cleanly_the_job_completes(
    cluster: FaultCluster, durable_redis: RedisServer, alice: Any, tmp_path: Path,
    watch: Watcher,
) -> None:  # fmt: skip
    cluster.start_slots(2)
    cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "through outages", epochs=40)
    watching = watch(job)

    durable_redis.kill()  # kill -9: what it acknowledged is in its append-only file
    killed_at = time.time()
    time.sleep(10)  # the fault itself: Redis away for 10 s
    durable_redis.start()
    back_at = time.time()
    done = Job.objects.get(pk=job.pk).steps_done
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= done + 20, 60, "20 more steps")
    durable_redis.stop()  # a clean restart: SIGTERM, then at once up again
    durable_redis.start()

    assert_recovered(job, cluster, watching, 40 * TRAIN // BATCH, faults=2)
    during = job.metrics.filter(kind="train", time__gt=killed_at + 1, time__lt=back_at - 1)
    assert during.exists(), "the learners stopped training while Redis was away"
    assert not job.events.filter(kind__in=["failure", "restart"]).exists()


def test_a_killed_worker_host_is_left_by_its_job_which_grows_back_when_it_returns(
    cluster: FaultCluster, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    """Two worker hosts of one slot each, the job on both: one host's whole process group
    is killed (its slot worker and learner with it); nobody reports the learner's end, so
    its lease lapses, the survivor goes on alone, and the job grows back when it returns."""
    cluster.start_slots(1)
    other = cluster.start_host(f"{cluster.host}b", 1)
    cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "host lost", epochs=24)
    watching = watch(job)
    jobs = services.job_store(job.pk)
    generation = jobs.generation()

    os.killpg(other.pid, signal.SIGKILL)  # the host: its slot worker and learner
    other.wait()
    wait_for(lambda: went_on(job, generation), 90, "the survivor to go on alone")
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING
    cluster.start_host(f"{cluster.host}b", 1)  # the machine is back
    wait_for(lambda: workers_of(job) == 2 or completed(job), 120, "the job back on 2 slots")
    assert_recovered(job, cluster, watching, 24 * TRAIN // BATCH)
    assert not job.events.filter(kind="restart").exists(), "the survivor did not go on"
    scaled = list(job.events.filter(kind="scaled").values_list("message", flat=True))
    assert all(a != b for a, b in itertools.pairwise(scaled)), (
        f"an allocation change recorded twice in a row: {scaled}"
    )


def test_a_job_whose_every_learner_died_with_their_host_resumes_from_its_checkpoint(
    cluster: FaultCluster, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    """The one host is killed: no learner survives, so the job is suspended, and resumes by
    itself from its latest checkpoint (every epoch) when the host returns. It redoes at
    most the iterations since that checkpoint."""
    cluster.start_slots(2)
    cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "all lost", epochs=20)
    watching = watch(job)

    os.killpg(cluster.worker.pid, signal.SIGKILL)  # the host and its slot workers
    cluster.worker.wait()
    # Nobody reports the learners' end: their leases lapse and the job gives its slots up.
    wait_for(lambda: Job.objects.get(pk=job.pk).state == Job.State.SUSPENDED, 60,
             "the job to be suspended")  # fmt: skip

    cluster.start_slots(2)  # the host comes back
    assert_recovered(job, cluster, watching, 20 * TRAIN // BATCH, redo=TRAIN // BATCH)
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds.index("suspended") < kinds.index("resuming")


def test_a_killed_learner_is_replaced_and_the_job_completes(
    cluster: FaultCluster, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    cluster.start_slots(2)
    cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "learner killed", epochs=20)
    watching = watch(job)
    learners = wait_for(lambda: len(cluster.learners()) == 2 and cluster.learners(), 30,
                        "2 learner processes")  # fmt: skip
    generation = services.job_store(job.pk).generation()

    os.kill(learners[-1].pid, signal.SIGKILL)  # one learner of the running job
    wait_for(lambda: went_on(job, generation), 60, "the survivor to go on")
    assert_recovered(job, cluster, watching, 20 * TRAIN // BATCH)
    assert job.events.filter(kind="failure").exists()
    assert not job.events.filter(kind="restart").exists(), "the survivor did not go on"


def test_a_killed_slot_worker_is_restarted_and_the_job_completes(
    cluster: FaultCluster, store: Store, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    cluster.start_slots(2, "--restart-delay", "2")
    cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "slot worker killed", epochs=20)
    watching = watch(job)
    jobs = services.job_store(job.pk)
    generation = jobs.generation()
    victim = next(s for s in store.list_slots() if s.slot_id == jobs.members(generation)[-1])
    assert any(is_learner(p) for p in descendants(victim.pid)), "no learner on that slot"

    os.kill(victim.pid, signal.SIGKILL)  # the Celery worker hosting a learner
    restarted = lambda: any(s.slot_id == victim.slot_id and s.pid != victim.pid  # noqa: E731
                            for s in cluster.warm_slots())  # fmt: skip
    wait_for(restarted, 90, "the slot's worker restarted")
    assert_recovered(job, cluster, watching, 20 * TRAIN // BATCH)
    assert job.events.filter(kind="failure").exists()
    assert not job.events.filter(kind="restart").exists(), "the survivor did not go on"


def test_a_killed_scheduler_is_restarted_and_schedules_again(
    cluster: FaultCluster, store: Store, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    cluster.start_slots(2)
    stack = cluster.supervise("scheduler")  # as under `make run`
    job = running_on_two(cluster, alice, tmp_path, "scheduler killed", epochs=20)
    watching = watch(job)
    killed = stack.pid("scheduler")
    assert killed is not None and (store.lease_holder() or "").endswith(f":{killed}")

    os.kill(killed, signal.SIGKILL)  # the active scheduler, mid-job
    wait_for(lambda: "scheduler exited (killed by SIGKILL)" in stack.log.read_text(), 30,
             "the supervisor to see the scheduler die")  # fmt: skip
    wait_for(lambda: (store.lease_holder() or "").endswith(f":{stack.pid('scheduler')}"), 60,
             "the restarted scheduler to take over")  # fmt: skip
    # It decides again: a second job gets a slot of the first, which grows back after.
    data = write_cifar10(tmp_path / "data2", train=TRAIN, test=64)
    other = submit(alice, "after the restart", data, epochs=1, max_workers=1)
    wait_for(lambda: workers_of(other) == 1, 60, "the second job to get a slot")
    assert_recovered(job, cluster, watching, 20 * TRAIN // BATCH)
    wait_for(lambda: completed(other), 60, "the second job to complete")
    assert api_steps(other) == list(range(1, TRAIN // BATCH + 1))


def test_the_web_killed_comes_back_and_the_job_goes_on_meanwhile(
    cluster: FaultCluster, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    cluster.start_slots(2)
    cluster.start_scheduler()
    stack = cluster.supervise("web")
    get = http_get(cluster.web_port, Token.objects.create(user=alice).key)
    wait_for(lambda: get("/api/v1/auth/me/")[0] == 200, 120, "the API to answer")
    job = running_on_two(cluster, alice, tmp_path, "web killed", epochs=16)
    watching = watch(job)
    killed = stack.pid("web")
    assert killed is not None

    os.kill(killed, signal.SIGKILL)  # the Daphne serving pages and API
    killed_at = time.time()
    wait_for(lambda: get(f"/api/v1/jobs/{job.pk}/")[0] == 200, 120, "the API to answer again")
    back_at = time.time()
    assert stack.pid("web") not in (None, killed), "not the supervisor's new web"
    during = job.metrics.filter(kind="train", time__gt=killed_at, time__lt=back_at)
    assert during.exists(), "training stopped while the web was down"
    assert_recovered(job, cluster, watching, 16 * TRAIN // BATCH, get=get)


def test_a_job_that_ends_while_no_scheduler_runs_completes_and_frees_its_slots(
    cluster: FaultCluster, alice: Any, tmp_path: Path, watch: Watcher
) -> None:
    cluster.start_slots(2)
    scheduler = cluster.start_scheduler()
    job = running_on_two(cluster, alice, tmp_path, "ends unseen", epochs=6)
    watching = watch(job)

    os.kill(scheduler.pid, signal.SIGKILL)  # the job's last steps run with no scheduler
    scheduler.wait()
    cluster.schedulers.remove(scheduler)
    jobs = services.job_store(job.pk)
    wait_for(lambda: any(r["type"] == "done" for _, r in jobs.read_metrics())
             and not cluster.learners(), 120, "the learners to finish")  # fmt: skip
    cluster.start_scheduler("restarted")  # as the supervisor does
    assert_recovered(job, cluster, watching, 6 * TRAIN // BATCH)
    started = sum(log.read_text().count(": started (") for log in (job.workdir / "logs").iterdir())
    assert started == 2, f"{started - 2} learner(s) sent to a job whose training was done"
    data = write_cifar10(tmp_path / "data2", train=TRAIN, test=64)
    other = submit(alice, "next", data, epochs=1, max_workers=2)
    wait_for(lambda: completed(other), 90, "the next job to complete on the freed slots")
