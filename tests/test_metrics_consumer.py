"""The metrics consumer, apart from the decision loop: every record a learner writes reaches
the database exactly once, across consumer crashes and Redis outages; the scheduler's
runner stores none and completes a job only once its metrics are stored."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from edtweb.redis_server import RedisServer
from edtweb.training.live_adapter import runner_for
from edtweb.training.metrics_consumer import MetricsConsumer
from edtweb.training.models import Job, Metric
from protocol.connection import connect
from protocol.jobstore import LEARNER_PATIENCE, JobStore
from protocol.keys import WAKE_KEY
from scheduler.phases import JobPhase
from scheduler.store import Store
from tests.harness.cluster import Cluster, live_env
from tests.harness.jobs import submit, workers_of
from tests.harness.processes import Processes
from tests.harness.waiting import load_factor, wait_for
from workers.learner.datasets import write_cifar10

# A Redis with an append-only file (it can be killed and started again with its data).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis("durable_redis")]


def new_job(owner: Any) -> Job:
    return Job.objects.create(owner=owner, name="metrics", model_path="m.py", data_path="d",
                              state=Job.State.RUNNING)  # fmt: skip


def record(step: int, kind: str = "train") -> dict[str, Any]:
    return {"type": kind, "step": step, "epoch": 0, "time": time.time(), "loss": 1.0 / step}


class Learner(threading.Thread):
    """Writes ``count`` train records as a learner does (``JobStore.emit``: buffered while
    Redis is away, flushed after), ``per_batch`` at a time, then the ``done`` record."""

    def __init__(self, redis_url: str, job: Job, count: int, per_batch: int = 20) -> None:
        super().__init__(daemon=True)
        self.jobs = JobStore(connect(redis_url, timeout=1.0), str(job.pk))
        self.count, self.per_batch = count, per_batch

    def run(self) -> None:
        for step in range(1, self.count + 1):
            self.jobs.emit(record(step))
            if step % self.per_batch == 0:
                time.sleep(0.05)
        self.jobs.emit({"type": "done", "step": self.count, "time": time.time()})
        self.jobs.flush(patience=LEARNER_PATIENCE)


def stored_steps(job: Job) -> list[int]:
    return sorted(Metric.objects.filter(job=job, kind="train").values_list("step", flat=True))


def metrics_count(job: Job) -> int:
    return int(Job.objects.values_list("metrics_count", flat=True).get(pk=job.pk))


def start_consumer(processes: Processes, redis: RedisServer, tmp: Path, name: str) -> Any:
    return processes.manage("edt_metrics", env=live_env(redis), log=tmp / f"{name}.log")


def test_every_record_is_stored_once_across_kill_9_and_restarts_of_the_consumer(
    durable_redis: RedisServer, store: Store, processes: Processes, alice: Any, tmp_path: Path
) -> None:
    job = new_job(alice)
    total = 3000
    learner = Learner(durable_redis.url, job, total)
    consumer = start_consumer(processes, durable_redis, tmp_path, "consumer-0")
    learner.start()
    for round_, threshold in enumerate((300, 1200, 2100), start=1):
        wait_for(lambda t=threshold: metrics_count(job) >= t, 120, f"{threshold} records stored")
        consumer.kill()  # SIGKILL, wherever it is: between commit and cursor, mid-read...
        consumer.wait()
        consumer = start_consumer(processes, durable_redis, tmp_path, f"consumer-{round_}")
    learner.join(timeout=120)
    wait_for(lambda: JobStore(store.r, str(job.pk)).progress().finished == total, 120,
             "the done record stored")  # fmt: skip
    assert stored_steps(job) == list(range(1, total + 1)), "a record lost or stored twice"
    assert metrics_count(job) == total
    assert consumer.poll() is None, "the consumer died"


def test_a_redis_outage_loses_and_duplicates_no_record(
    durable_redis: RedisServer, store: Store, processes: Processes, alice: Any, tmp_path: Path
) -> None:
    job = new_job(alice)
    total = 2000
    learner = Learner(durable_redis.url, job, total)
    consumer = start_consumer(processes, durable_redis, tmp_path, "consumer")
    learner.start()
    wait_for(lambda: metrics_count(job) >= 400, 120, "400 records stored")
    durable_redis.kill()  # kill -9: the learner buffers, the consumer backs off
    time.sleep(4)  # the fault itself: Redis away for a while
    durable_redis.start()
    durable_redis.stop()  # and a clean restart at once
    durable_redis.start()
    learner.join(timeout=120)
    wait_for(lambda: metrics_count(job) >= total, 120, "every record stored")
    wait_for(lambda: JobStore(store.r, str(job.pk)).progress().finished == total, 60,
             "the done record stored")  # fmt: skip
    assert stored_steps(job) == list(range(1, total + 1)), "a record lost or stored twice"
    assert metrics_count(job) == total
    assert consumer.poll() is None, "the consumer died"


def test_records_read_again_after_a_crash_before_the_cursor_moved_are_stored_once(
    store: Store, alice: Any
) -> None:
    job = new_job(alice)
    jobs = JobStore(store.r, str(job.pk))
    for step in range(1, 51):
        jobs.emit(record(step))
    first = MetricsConsumer(store)
    assert first.round(block=0) == 50
    store.r.delete(WAKE_KEY)
    store.r.set(jobs.key("cursor"), "0-0")  # as if killed after the commit, before the cursor
    store.release_lease(first.holder, "edt:metrics:lease")
    for step in range(51, 61):
        jobs.emit(record(step))
    jobs.emit(record(60))  # a learner's retry after its connection broke: the same record
    second = MetricsConsumer(store)
    second.holder += ":second"
    assert second.round(block=0) == 61
    assert stored_steps(job) == list(range(1, 61))
    assert metrics_count(job) == 60
    assert jobs.progress().finished is None and not store.r.lrange(WAKE_KEY, 0, -1)


def test_only_one_consumer_is_active_the_other_stands_by(store: Store, alice: Any) -> None:
    job = new_job(alice)
    JobStore(store.r, str(job.pk)).emit(record(1))
    active, standby = MetricsConsumer(store), MetricsConsumer(store)
    standby.holder += ":standby"
    assert active.round(block=0) == 1
    JobStore(store.r, str(job.pk)).emit(record(2))
    assert standby.round(block=0) == 0 and not standby.active
    assert active.round(block=0) == 1
    assert stored_steps(job) == [1, 2]


def redis_calls(store: Store, command: str) -> int:
    stats: dict[str, Any] = store.r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


class Rounds(MetricsConsumer):
    """The consumer, noting when each of its rounds begins."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.began: list[float] = []

    def round(self, block: float = 1.0) -> int:
        self.began.append(time.monotonic())
        return super().round(block)


def test_an_idle_consumer_waits_rather_than_spins(store: Store) -> None:
    """With no job to watch, a round takes the lease and waits out its block (1 s): two
    rounds after the first take 2 s or more, however busy the machine (a loop that spun
    would be done in milliseconds)."""
    consumer = Rounds(store)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        began = lambda: len(consumer.began)  # noqa: E731
        wait_for(lambda: began() >= 3, 30, lambda: f"3 rounds, {began()} began")
    finally:
        consumer.stopping.set()
        thread.join(timeout=10)
    took = consumer.began[2] - consumer.began[0]
    assert took >= 1.9, f"two idle rounds in {took:.2f} s: the lease taken in a hot loop"


def test_the_runner_stores_no_metric_and_completes_once_the_consumer_stored_them(
    store: Store, alice: Any
) -> None:
    job = new_job(alice)
    jobs = JobStore(store.r, str(job.pk))
    for step in range(1, 6):
        jobs.emit(record(step))
    jobs.emit({"type": "done", "step": 5, "time": time.time()})
    runner = runner_for(job, resume=False)
    runner.apply(1, (), ())  # no learner runs: the facts come from the stream alone
    for _ in range(3):
        assert runner.tick(set()) is None
    assert not Metric.objects.filter(job=job).exists(), "the decision loop stored metrics"
    assert runner.state.step == 5 and not runner.state.done
    assert not runner.soon(), "an idle job must not keep the decision loop busy"

    MetricsConsumer(store).round(block=0)
    assert f"finished {job.pk}" in store.r.lrange(WAKE_KEY, 0, -1)  # the scheduler is woken
    assert runner.tick(set()) == Job.State.COMPLETED
    assert runner.phase is JobPhase.COMPLETED
    assert stored_steps(job) == [1, 2, 3, 4, 5]
    assert jobs.stop_requested()  # learners still waiting to join go home


def test_a_steadily_training_job_wakes_the_decision_loop_only_on_the_slow_tick(
    cluster: Cluster, store: Store, alice: Any, tmp_path: Path
) -> None:
    cluster.start_slots(1)
    cluster.start_scheduler()
    data = write_cifar10(tmp_path / "data", train=2048, test=64)
    job = submit(alice, "steady", data, epochs=20, max_workers=1)
    wait_for(lambda: workers_of(job) == 1, 120, "the job on its slot")
    wait_for(lambda: metrics_count(job) >= 10, 120, "10 records stored")
    steps, waits = metrics_count(job), redis_calls(store, "blpop")
    started = time.monotonic()
    # The span watched: 20 more records, training and nothing else happening.
    wait_for(lambda: metrics_count(job) >= steps + 20, 120, "20 more records stored")
    took, waits = time.monotonic() - started, redis_calls(store, "blpop") - waits
    # One wait per step: about one step a second, the slow tick (it was 20 a second while a
    # job ran, one a record); a busy machine makes fewer, never more.
    assert waits <= 2 * took + 2, f"{waits} decision steps in {took:.1f} s"
    print(f"{waits} decision steps in {took:.1f} s of training")


def test_records_reach_the_job_page_socket_and_a_step_sent_again_is_not_pushed(
    redis_server: RedisServer, processes: Processes, alice: Any, tmp_path: Path
) -> None:
    """A learner's records go through a real ``edt_metrics`` to a job page's WebSocket with
    their sequence numbers; records of steps already stored (a retry, a redone iteration)
    are neither stored nor pushed again, and what follows them still arrives."""
    import asyncio

    from channels.testing import WebsocketCommunicator
    from django.test import Client

    from edtweb.asgi import application

    job = new_job(alice)
    client = Client()
    client.force_login(alice)
    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
               (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]  # fmt: skip
    jobs = JobStore(connect(redis_server.url), str(job.pk))
    start_consumer(processes, redis_server, tmp_path, "consumer")

    async def pushed(page: WebsocketCommunicator, count: int) -> list[dict[str, Any]]:
        """The metrics messages until ``count`` records came (the consumer may batch)."""
        messages: list[dict[str, Any]] = []
        while sum(len(m["records"]) for m in messages) < count:
            message = await page.receive_json_from(timeout=30 * load_factor())
            if message["type"] == "metrics":
                messages.append(message)
        return messages

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        page = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=headers)
        assert (await page.connect(timeout=5))[0]
        for step in range(1, 6):
            jobs.emit(record(step))
        first = await pushed(page, 5)
        for step in range(3, 9):  # 3 to 5 again, then 6 to 8
            jobs.emit(record(step))
        second = await pushed(page, 3)
        quiet = await page.receive_nothing(timeout=1.0)
        await page.disconnect()
        return first, second, quiet

    first, second, quiet = asyncio.run(scenario())
    steps = lambda messages: [r["step"] for m in messages for r in m["records"]]  # noqa: E731
    assert steps(first) == [1, 2, 3, 4, 5]
    assert (first[0]["from"], first[-1]["to"]) == (0, 5)
    assert steps(second) == [6, 7, 8], "a step stored already was pushed again"
    assert (second[0]["from"], second[-1]["to"]) == (5, 8)
    assert quiet, "more came than the new records"
    assert stored_steps(job) == [1, 2, 3, 4, 5, 6, 7, 8]
