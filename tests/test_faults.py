"""Faults on a running job, live: real slot workers, scheduler, learners and Redis.

For each fault the job must end COMPLETED with every step from 1 to the last in its metrics
exactly once, read back through the API, and every EDT process must still be alive.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from edtweb.redis_server import RedisServer
from edtweb.training.models import Job
from scheduler.store import Store, connect
from tests.conftest import Processes, wait_for
from tests.test_scheduler_live import Cluster, submit, workers_of
from workers.learner.datasets import write_cifar10

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


@pytest.fixture
def cluster(
    durable_redis: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> Cluster:
    return Cluster(durable_redis, store, processes, tmp_path)


def api_steps(job: Job) -> list[int]:
    """The job's training steps as a user reads them through the REST API, every page."""
    client = APIClient()
    client.force_authenticate(job.owner)
    steps: list[int] = []
    url: str | None = f"/api/v1/jobs/{job.pk}/metrics/records/?kind=train&limit=1000"
    while url:
        reply = client.get(url)
        assert reply.status_code == 200, reply.content
        body = reply.json()
        steps += [int(r["step"]) for r in body["results"]]
        url = body["next"]
    return steps


def completed(job: Job) -> bool:
    job.refresh_from_db()
    assert job.state not in (Job.State.FAILED, Job.State.STOPPED), job.error
    return job.state == Job.State.COMPLETED


def test_redis_killed_for_ten_seconds_then_restarted_cleanly_the_job_completes(
    cluster: Cluster, durable_redis: RedisServer, alice: Any, tmp_path: Path
) -> None:
    cluster.start_slots(2)
    scheduler = cluster.start_scheduler()
    data = write_cifar10(tmp_path / "data", train=512, test=64)
    job = submit(alice, "through outages", data, epochs=40, max_workers=2)
    wait_for(lambda: workers_of(job) == 2, 120, "the job on 2 slots")
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= 20, 120, "20 steps")

    durable_redis.kill()  # kill -9: what it acknowledged is in its append-only file
    killed_at = time.time()
    time.sleep(10)  # the fault itself: Redis away for 10 s
    durable_redis.start()
    back_at = time.time()
    done = Job.objects.get(pk=job.pk).steps_done
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= done + 20, 60, "20 more steps")
    durable_redis.stop()  # a clean restart: SIGTERM, then at once up again
    durable_redis.start()

    wait_for(lambda: completed(job), 240, "the job to complete")
    steps = api_steps(job)
    assert steps == list(range(1, 40 * 512 // 64 + 1)), "a step lost or repeated"
    during = job.metrics.filter(kind="train", time__gt=killed_at + 1, time__lt=back_at - 1)
    assert during.exists(), "the learners stopped training while Redis was away"
    assert not job.events.filter(kind__in=["failure", "restart"]).exists()
    assert scheduler.poll() is None, "the scheduler died"
    assert cluster.worker.poll() is None, "the worker host died"
    wait_for(lambda: len(cluster.warm_slots()) == 2, 30, "both slots alive again")


def test_a_killed_worker_host_suspends_the_job_which_completes_when_the_host_returns(
    cluster: Cluster, alice: Any, tmp_path: Path
) -> None:
    cluster.start_slots(2)
    scheduler = cluster.start_scheduler()
    data = write_cifar10(tmp_path / "data", train=512, test=64)
    job = submit(alice, "host lost", data, epochs=30, max_workers=2)
    wait_for(lambda: workers_of(job) == 2, 120, "the job on 2 slots")
    wait_for(lambda: Job.objects.get(pk=job.pk).steps_done >= 20, 120, "20 steps")

    os.killpg(cluster.worker.pid, signal.SIGKILL)  # the host and its slot workers
    cluster.worker.wait()
    # Nobody reports the learners' end: their leases lapse and the job gives its slots up.
    wait_for(lambda: Job.objects.get(pk=job.pk).state == Job.State.SUSPENDED, 60,
             "the job to be suspended")  # fmt: skip

    cluster.start_slots(2)  # the host comes back
    wait_for(lambda: completed(job), 240, "the job to complete")
    assert api_steps(job) == list(range(1, 30 * 512 // 64 + 1)), "a step lost or repeated"
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds.index("suspended") < kinds.index("resuming")
    scaled = list(job.events.filter(kind="scaled").values_list("message", flat=True))
    assert len(scaled) == len(set(scaled)) or all(a != b for a, b in itertools.pairwise(scaled)), (
        f"an allocation change recorded twice in a row: {scaled}"
    )
    assert scheduler.poll() is None, "the scheduler died"
