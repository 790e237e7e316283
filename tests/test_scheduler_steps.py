"""LiveScheduler.step in this process, on a Redis of its own and the test database, with no
slot worker (learners are dispatched, none runs): what one step reads and writes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from edtweb.redis_server import RedisServer
from edtweb.training.models import Job, JobEvent
from edtweb.training.scheduling import LiveScheduler
from scheduler.store import (
    ALIVE,
    AllocationRecord,
    JobStore,
    SlotInfo,
    Store,
    connect,
    queue_for,
)

pytestmark = pytest.mark.django_db(transaction=True)
JOBS, SLOTS = 60, 64


@pytest.fixture
def client(private_redis: RedisServer, redis_server: RedisServer, settings: Any) -> Iterator[
    redis.Redis
]:  # fmt: skip
    """The scheduler's Redis, of this test alone (pages and Celery use the run's)."""
    settings.REDIS_URL = private_redis.url
    client = connect(private_redis.url)
    yield client
    client.close()


def slots(count: int) -> list[SlotInfo]:
    ids = [(f"st{i // 8}", i % 8) for i in range(count)]
    return [SlotInfo(f"{h}.{i}", h, i, "cpu", queue_for(f"{h}.{i}"), ALIVE) for h, i in ids]


def commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def test_a_step_reads_every_job_at_once_and_writes_its_events_together(
    client: redis.Redis, alice: Any
) -> None:
    Job.objects.bulk_create(
        [Job(owner=alice, name=f"j{n}", model_path="m.py", data_path="d") for n in range(JOBS)]
    )
    alive = slots(SLOTS)
    live = LiveScheduler()
    with CaptureQueriesContext(connection) as queries:
        live.step(alive)  # every job gets a slot
    inserts = [q["sql"] for q in queries if q["sql"].startswith('INSERT INTO "training_jobevent"')]
    assert JobEvent.objects.filter(kind="scaled").count() == JOBS and len(inserts) == 1
    assert all(len(r.coord.joining) == 1 for r in live.runners.values())

    live.step(alive)
    before = commands(client)
    live.step(alive)  # nothing changed: no job is read again, no runner ticks
    assert commands(client) - before <= 4  # INFO, MGET (and this INFO)
    assert not live.dirty

    # A learner's write moves its job's counter: that job alone is read and ticked.
    job = min(live.runners)
    runner = live.runners[job]
    slot = runner.coord.joining[0]
    JobStore(client, str(job)).report_exit(slot, 1, runner.launcher.tokens[slot])
    live.step(alive)
    assert runner.launcher.exited(slot) and slot not in runner.coord.joining


def test_live_las_admits_the_job_with_less_attained_service_and_counts_its_own(
    client: redis.Redis, alice: Any
) -> None:
    """fairshare-las on one slot: the older job has trained ten slot-hours (the last
    scheduler's record says so), so the newer one of the same priority goes first."""
    old, new = (Job.objects.create(owner=alice, name=n, model_path="m.py", data_path="d")
                for n in ("old", "new"))  # fmt: skip
    Store(client).save_allocations(
        AllocationRecord({}, 1, "fairshare-las", attained={old.pk: 36_000.0}), ttl=30
    )
    live = LiveScheduler("fairshare-las")
    started = time.monotonic()
    live.step(slots(1))
    assert set(live.runners) == {new.pk}
    assert live.allocations().attained == {old.pk: 36_000.0}

    # Its members' slot-seconds add up from step to step (its learner taken as admitted).
    runner = live.runners[new.pk]
    runner.coord.members, runner.coord.joining = list(runner.coord.joining), []
    live.step(slots(1))
    live.step(slots(1))
    elapsed = time.monotonic() - started
    assert 0 < live.allocations().attained[new.pk] <= elapsed
