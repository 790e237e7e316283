"""LiveScheduler.step in this process, on a Redis of its own and the test database, with no
slot worker (learners are dispatched, none runs): what one step reads and writes."""

from __future__ import annotations

import base64
import dataclasses
import gc
import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from edtweb.celery import app as celery_app
from edtweb.redis_server import RedisServer
from edtweb.training import history
from edtweb.training.live_adapter import job_rows, live_scheduler
from edtweb.training.models import Job, JobEvent, Metric
from protocol import redis_acl
from protocol.connection import connect
from protocol.jobstore import JobStore
from protocol.keys import ALIVE, CHANGED_KEY, queue_for
from protocol.learner_task import TASK, LearnerPaths, learner_args
from protocol.retry import REDIS_RETRIES
from protocol.slots import SlotInfo
from scheduler.dispatch import SEND, LearnerMessages
from scheduler.live import loop as scheduling
from scheduler.live.job import JobRunner
from scheduler.live.loop import LiveScheduler
from scheduler.live.snapshot import BY_SERVICE, BY_SPEEDUP
from scheduler.placement import Slot, place
from scheduler.policies import POLICIES, JobView, Snapshot, decide
from scheduler.store import AllocationRecord, Changed, Store, take_changed

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
    live = live_scheduler()
    with CaptureQueriesContext(connection) as queries:
        live.step(alive)  # every job gets a slot
    # One statement (an executemany is logged as "<rows> times: INSERT ...").
    inserts = [q["sql"] for q in queries if 'INSERT INTO "training_jobevent"' in q["sql"]]
    assert JobEvent.objects.filter(kind="scaled").count() == JOBS and len(inserts) == 1
    assert all(len(r.state.joining) == 1 for r in live.runners.values())

    live.step(alive)
    before = commands(client)
    live.step(alive)  # nothing changed: no job is read again, no runner ticks
    # The script taking the changed set and Redis' run_id (its SMEMBERS, DEL and INFO
    # count too), the leases' MGET, this INFO: the same few whatever the number of jobs.
    assert commands(client) - before <= 6
    assert not live.dirty

    # A learner's write marks its job changed: that job alone is read and ticked.
    job = min(live.runners)
    runner = live.runners[job]
    slot = runner.state.joining[0]
    JobStore(client, str(job)).report_exit(slot, 1, runner.state.learners.tokens[slot])
    live.step(alive)
    assert runner.exited(slot) and slot not in runner.state.joining


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
    live = live_scheduler("fairshare-las")
    started = time.monotonic()
    live.step(slots(1))
    assert set(live.runners) == {new.pk}
    assert live.allocations().attained == {old.pk: 36_000.0}

    # Its members' slot-seconds add up from step to step (its learner taken as admitted).
    runner = live.runners[new.pk]
    runner.state = replace(runner.state, members=runner.state.joining, joining=())
    live.step(slots(1))
    live.step(slots(1))
    elapsed = time.monotonic() - started
    assert 0 < live.allocations().attained[new.pk] <= elapsed


# The changed-jobs set: which jobs a step reads again ------------------------------------------


def _running(alice: Any, count: int) -> tuple[LiveScheduler, list[SlotInfo]]:
    """A scheduler that sent one joiner to each of ``count`` jobs and took the set since."""
    Job.objects.bulk_create(
        [Job(owner=alice, name=f"c{n}", model_path="m.py", data_path="d") for n in range(count)]
    )
    alive = slots(count)
    live = live_scheduler()
    live.step(alive)
    live.step(alive)
    assert not live.dirty
    return live, alive


def _exit_first_joiner(client: redis.Redis, live: LiveScheduler) -> tuple[int, str]:
    """The learner of the lowest job's joiner exits (its slot task reports it)."""
    job = min(live.runners)
    runner = live.runners[job]
    slot = runner.state.joining[0]
    JobStore(client, str(job)).report_exit(slot, 1, runner.state.learners.tokens[slot])
    return job, slot


def test_a_write_during_a_step_is_read_at_the_next(
    client: redis.Redis, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learner writes after the step took the set: that step does not see it, the next
    one does."""
    live, alive = _running(alice, 4)
    taken: list[tuple[int, str]] = []

    def take_then_write(c: redis.Redis) -> Changed:
        changed = take_changed(c)
        taken.append(_exit_first_joiner(client, live))
        return changed

    monkeypatch.setattr(scheduling, "take_changed", take_then_write)
    live.step(alive)
    [(job, slot)] = taken
    assert slot in live.runners[job].state.joining  # not read in this step
    monkeypatch.undo()
    live.step(alive)
    assert slot not in live.runners[job].state.joining


def test_a_step_that_fails_after_taking_the_set_loses_no_change(
    client: redis.Redis, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, alive = _running(alice, 4)
    job, slot = _exit_first_joiner(client, live)

    def away(c: redis.Redis, stores: list[Any]) -> None:
        raise redis.ConnectionError("Redis went away mid-step")

    monkeypatch.setattr(scheduling, "observe", away)
    with pytest.raises(redis.ConnectionError):
        live.step(alive)
    assert not client.smembers(CHANGED_KEY)  # the mark was taken
    monkeypatch.undo()
    live.step(alive)
    assert slot not in live.runners[job].state.joining


def test_after_a_redis_restart_every_job_is_read_again_once(
    client: redis.Redis, private_redis: RedisServer, alice: Any
) -> None:
    """A restarted Redis lost the set (and maybe a mark): the first step after it reads every
    job, the next ones only the marked."""
    live, alive = _running(alice, 4)
    private_redis.kill()
    private_redis.start()
    joiners = {pk: runner.state.joining[0] for pk, runner in live.runners.items()}
    for pk, slot in joiners.items():  # READY with no mark: only a full read finds it
        client.sadd(f"edt:job:{pk}:ready", slot)
    live.step(alive)
    assert {pk: r.state.members for pk, r in live.runners.items()} == {
        pk: (slot,) for pk, slot in joiners.items()
    }  # each admitted its READY joiner
    before = commands(client)
    live.step(alive)
    assert commands(client) - before <= 6  # nothing read again


def test_a_new_scheduler_reads_every_job_even_if_the_last_took_the_marks(
    client: redis.Redis, alice: Any
) -> None:
    live, alive = _running(alice, 4)
    job, slot = _exit_first_joiner(client, live)
    tokens = {pk: dict(r.state.learners.tokens) for pk, r in live.runners.items()}
    Job.objects.filter(pk__in=live.runners).update(state=Job.State.RUNNING)
    take_changed(client)  # the last scheduler took the set, then died
    successor = live_scheduler()
    successor.step(alive)
    # It saw the exit: a new learner replaces the one that ended, the others stay.
    now = {pk: r.state.learners.tokens for pk, r in successor.runners.items()}
    assert now[job][slot] != tokens[job][slot]
    assert {pk: t for pk, t in now.items() if pk != job} == {
        pk: t for pk, t in tokens.items() if pk != job
    }


def test_job_rows_read_the_submission_time_of_new_jobs_alone(alice: Any) -> None:
    first = Job.objects.create(owner=alice, name="first", model_path="m.py", data_path="d")
    created: dict[int, Any] = {}
    assert {r.pk: r.created_at for r in job_rows(Job.objects.all(), created)} == {
        first.pk: first.created_at
    }
    second = Job.objects.create(owner=alice, name="second", model_path="m.py", data_path="d")
    with CaptureQueriesContext(connection) as queries:
        rows = job_rows(Job.objects.all(), created)
    assert {r.pk: r.created_at for r in rows} == {
        first.pk: first.created_at,
        second.pk: second.created_at,
    }
    [_, times] = [q["sql"] for q in queries]
    assert '"created_at"' in times and " IN (" in times  # the new job's alone
    with CaptureQueriesContext(connection) as queries:
        job_rows(Job.objects.all(), created)
    assert len(queries) == 1  # nothing new: the rows alone


def test_the_garbage_collector_waits_for_the_end_of_a_step(
    client: redis.Redis, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    Job.objects.create(owner=alice, name="gc", model_path="m.py", data_path="d")
    during: list[bool] = []
    decide = scheduling.decide

    def deciding(*args: Any) -> Any:
        during.append(gc.isenabled())
        return decide(*args)

    monkeypatch.setattr(scheduling, "decide", deciding)
    assert gc.isenabled()
    live_scheduler().step(slots(1))
    assert during == [False] and gc.isenabled()
    gc.disable()  # a process that runs without it keeps it off
    try:
        with scheduling.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


DRAWN = [("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"),
         ("properties", "delivery_tag")]  # fmt: skip


def test_a_learner_message_is_the_one_celery_would_send(redis_server: RedisServer) -> None:
    """Celery's own message and ours for the same task, read back from the broker's queue
    list: equal but for what each message draws afresh (its id and delivery tag)."""
    broker = connect(redis_server.url)
    queue = queue_for(f"msg-{os.getpid()}.0")
    broker.delete(queue)
    paths = LearnerPaths(Path("/d/data"), Path("/d/m/model.py"), Path("/d/jobs/12"),
                         Path("/d/jobs/12/spec.json"))  # fmt: skip
    args = learner_args(12, "h.3", "token-1", paths)
    with celery_app.producer_or_acquire() as producer:
        celery_app.send_task(TASK, args=args, queue=queue, producer=producer, declare=[], **SEND)
    [theirs] = [json.loads(m) for m in broker.lrange(queue, 0, -1)]
    ours = json.loads(LearnerMessages(celery_app).message(args, queue))
    broker.delete(queue)
    for message in (theirs, ours):
        task_id = message["headers"]["id"]
        assert message["headers"]["root_id"] == message["properties"]["correlation_id"] == task_id
        for part, key in DRAWN:  # drawn afresh as version 4 uuids, as Celery draws them
            drawn = uuid.UUID(message[part][key])
            assert (str(drawn), drawn.version) == (message[part][key], 4)
            assert drawn.variant == uuid.RFC_4122
        for part, key in DRAWN:
            message[part][key] = "drawn afresh"
    assert ours == theirs
    assert json.loads(base64.b64decode(ours["body"]))[0] == args


def test_a_priority_change_reaches_the_next_decision(client: redis.Redis, alice: Any) -> None:
    """The seeds' split, decided from views kept between steps: B's new priority is seen."""
    a, b = (Job.objects.create(owner=alice, name=n, model_path="m.py", data_path="d",
                               max_workers=8) for n in "AB")  # fmt: skip
    live = live_scheduler()
    live.step(slots(8))
    live.step(slots(8))  # the same again: the views of the jobs holding 4 slots each kept
    assert (live.runners[a.pk].target, live.runners[b.pk].target) == (4, 4)
    Job.objects.filter(pk=b.pk).update(priority=10_000)
    live.step(slots(8))
    assert (live.runners[a.pk].target, live.runners[b.pk].target) == (3, 5)


@pytest.mark.parametrize("seed", range(20))
def test_placing_the_moving_jobs_alone_places_as_placing_every_job(seed: int) -> None:
    """Random holdings (some slots lost) and a fairshare decision over them: the live
    scheduler's placement of the jobs that move gives every job the slots it would get from
    a placement over every job."""
    rng = random.Random(seed)
    alive = [Slot(s.slot_id, s.host, s.index) for s in slots(48)]
    ids = [s.id for s in alive] + ["gone.0", "gone.1"]
    rng.shuffle(ids)
    holding: dict[int, list[str]] = {}
    for pk in range(1, 13):
        holding[pk] = [ids.pop() for _ in range(rng.randint(0, 4))]
    usable = [s for s in alive if rng.random() > 0.1 or any(s.id in h for h in holding.values())]
    views = [JobView(str(pk), rng.randint(1, 8), float(pk), rng.choice([5000, 10_000]),
                     current=len(held)) for pk, held in holding.items()]  # fmt: skip
    decision = decide(Snapshot(len(usable), views))
    full = place(usable, {str(pk): s for pk, s in holding.items()}, decision.targets)
    part = live_scheduler()._place(usable, holding, decision)
    for what in ("joined", "left", "lost"):
        assert getattr(part, what) == getattr(full, what), what


def test_events_written_together_read_back_as_recorded(alice: Any) -> None:
    job = Job.objects.create(owner=alice, name="ev", model_path="m.py", data_path="d")
    recorded = [
        JobEvent(job_id=job.pk, at=timezone.now(), kind="scaled", message="0→1: «why»",
                 data={"workers": 1, "shares": {"1": [1, 2.5]}, "note": None}),
        JobEvent(job_id=job.pk, at=timezone.now(), kind="generation", message="now 1", data={}),
    ]  # fmt: skip
    JobEvent.insert_many(recorded)
    back = [(e.job_id, e.at, e.kind, e.message, e.data) for e in JobEvent.objects.filter(job=job)]
    assert back == [(e.job_id, e.at, e.kind, e.message, e.data) for e in recorded]


def test_a_slot_given_away_while_its_jobs_shrink_waits_is_not_held_twice(
    client: redis.Redis, alice: Any
) -> None:
    """A's two learners form a generation not yet adopted when B arrives: A's shrink waits
    for it (shrink_to), but the decision gave A's second slot to B at once. The step after
    found the slot held by both and failed, and so did every later one: no runner ticked
    again, so A never shrank nor completed and B never started (a live run hung so)."""
    a = Job.objects.create(owner=alice, name="A", model_path="m.py", data_path="d",
                           max_workers=2)  # fmt: skip
    alive = slots(2)
    live = live_scheduler()
    live.step(alive)
    runner = live.runners[a.pk]
    both = list(runner.state.joining)
    formed(runner, both)  # not adopted: the job is not settled
    b = Job.objects.create(owner=alice, name="B", model_path="m.py", data_path="d",
                           max_workers=2)  # fmt: skip
    live.step(alive)  # A 2→1, B 0→1 on the slot A lets go
    live.step(alive)
    holding = {pk: r.holding() for pk, r in live.runners.items()}
    assert holding == {a.pk: both[:1], b.pk: both[1:]}
    assert (
        list(runner.state.members) == both
    )  # still training on both until the shrink's generation
    assert live.allocations().jobs[a.pk].members == tuple(both[:1])  # what pages show
    runner.jobs.adopt(runner.jobs.generation())  # settled: the shrink goes ahead
    Job.objects.filter(pk=a.pk).update(priority=5001)  # a change, so that the next step ticks
    live.step(alive)
    assert list(runner.state.members) == both[:1] and runner.state.leaving == set()


def test_a_decision_that_cannot_be_applied_still_lets_every_job_move_on(
    client: redis.Redis, alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """However the runners' slots came not to add up (one such bug is fixed above), the
    decision over them fails; the step still ticks every runner, so jobs go on and end,
    and says why once. Before, every step raised before any runner ticked: no job moved."""
    a, b = (Job.objects.create(owner=alice, name=name, model_path="m.py", data_path="d",
                               max_workers=1) for name in "AB")  # fmt: skip
    alive = slots(2)
    live = live_scheduler()
    live.step(alive)
    runner = live.runners[a.pk]
    (slot_a,) = runner.state.joining
    formed(runner, [slot_a])  # A's learner formed its generation...
    other = live.runners[b.pk]  # ...and B's runner claims its slot too
    other.state = replace(other.state, joining=(*other.state.joining, slot_a))
    runner.jobs.adopt(runner.jobs.generation())  # (which marks A changed: it is ticked)
    caplog.set_level("INFO", logger="edt.scheduler")
    for _ in range(3):
        live.step(alive)  # no exception: the decision is not applied, the runners tick
    failures = [r for r in caplog.records if "could not be applied" in r.getMessage()]
    assert len(failures) == 1 and "held twice" in caplog.text
    a.refresh_from_db()
    assert a.state == Job.State.RUNNING  # A's tick took it into training
    Store(client).save_progress(str(a.pk), "0-0", 10)  # A's learners finished, all stored
    live.step(alive)
    a.refresh_from_db()
    assert a.state == Job.State.COMPLETED


# One snapshot builder: the scheduler's and the priority preview's ----------------------------


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_preview_decides_from_the_same_snapshot_as_the_scheduler(
    client: redis.Redis, alice: Any, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """Every policy: the what-if of a job's own priority is built from exactly what the
    scheduler's last decision was (holdings with joiners, capacity, attained service,
    speedup curves), so it decides the same."""
    jobs = [
        Job.objects.create(owner=alice, name=f"p{n}", model_path="m.py", data_path="d",
                           max_workers=m, priority=p)
        for n, (m, p) in enumerate([(4, 50), (2, 80), (3, 50)])
    ]  # fmt: skip
    for job, rate in zip(jobs, (100.0, 150.0, 60.0), strict=True):  # speedup curves
        Metric.objects.bulk_create(
            [Metric(job=job, kind="train", step=s, epoch=0, time=s,
                    values={"workers": 1 + s % 2, "samples_per_s": rate * (1 + 0.6 * (s % 2))})
             for s in range(10)]
        )  # fmt: skip
    Store(client).save_allocations(
        AllocationRecord({}, 5, policy, attained={jobs[0].pk: 900.0, jobs[1].pk: 30.0}), ttl=30
    )
    seen: list[Snapshot] = []

    def deciding(snapshot: Snapshot, name: str) -> Any:
        seen.append(snapshot)
        return decide(snapshot, name)

    monkeypatch.setattr(scheduling, "decide", deciding)
    monkeypatch.setattr(history, "decide", deciding)
    live = live_scheduler(policy)
    live.step(slots(5))
    live.step(slots(5))  # the joiners started by the first are held now, as recorded
    Store(client).save_allocations(live.allocations(), ttl=30)
    scheduler_saw = seen[-1]
    history.preview(jobs[1], jobs[1].priority, alice)
    preview_saw = seen[-1]

    def comparable(snapshot: Snapshot) -> tuple[int, list[JobView]]:
        views = [dataclasses.replace(v, attained=round(v.attained, 1)) for v in snapshot.jobs]
        return snapshot.capacity, sorted(views, key=lambda v: v.id)

    assert preview_saw is not scheduler_saw
    assert comparable(preview_saw) == comparable(scheduler_saw)
    assert decide(preview_saw, policy).targets == decide(scheduler_saw, policy).targets
    if policy in BY_SERVICE:
        assert {v.id: v.attained for v in scheduler_saw.jobs}[str(jobs[0].pk)] >= 900.0
    if policy in BY_SPEEDUP:
        assert all(v.speedup for v in scheduler_saw.jobs)


def test_the_redis_retries_a_learner_reports_are_counted_once_by_the_scheduler(
    client: redis.Redis, alice: Any
) -> None:
    """A learner's record writer reports its failed attempts with the write that succeeds
    once Redis is back (tests/test_records.py); the scheduler adds them to its own
    ``edt_redis_retries``, and a second step counts them no more."""
    job = Job.objects.create(owner=alice, name="r", model_path="m.py", data_path="d")
    alive = slots(2)
    live = live_scheduler()
    live.step(alive)
    before = REDIS_RETRIES._value.get()
    JobStore(client, str(job.pk)).write_records([], retries=3)  # marks the job changed
    live.step(alive)
    assert REDIS_RETRIES._value.get() == before + 3
    JobStore(client, str(job.pk)).write_records([])
    live.step(alive)
    assert REDIS_RETRIES._value.get() == before + 3


def formed(runner: JobRunner, members: list[str]) -> None:
    """The runner's joiners formed a generation of ``members`` (published, not adopted)."""
    runner.jobs.publish_generation(members)
    runner.state = replace(runner.state, members=tuple(members), joining=())


def test_a_new_scheduler_deletes_the_redis_users_of_jobs_that_hold_no_slot(
    client: redis.Redis, alice: Any, settings: Any
) -> None:
    """A scheduler stopped before it could revoke them (Ctrl-C of make run with two jobs
    running) left ``edt-job-<id>`` users; the next one deletes those of jobs it does not
    run, and keeps (grants) those it takes over."""
    running = Job.objects.create(owner=alice, name="r", model_path="m.py", data_path="d",
                                 state=Job.State.RUNNING)  # fmt: skip
    for job_id in ("998", "999", str(running.pk)):
        redis_acl.grant(client, settings.REDIS_URL, job_id, settings.SECRET_KEY)
    assert {"998", "999"} <= set(redis_acl.job_users(client))
    live_scheduler().step(slots(1))
    assert set(redis_acl.job_users(client)) == {str(running.pk)}


def test_a_scheduler_in_database_3_deletes_its_old_named_users_and_no_one_elses(
    private_redis: RedisServer, redis_server: RedisServer, alice: Any, settings: Any
) -> None:
    """Users an older EDT in database 3 made as ``edt-job-<id>`` (before the database was in
    the name): the first step deletes those of jobs that hold no slot, keeps the running
    job's (its learners still use it), and leaves the users of EDTs in other databases."""
    settings.REDIS_URL = private_redis.url.rsplit("/", 1)[0] + "/3"
    client = connect(settings.REDIS_URL)
    running = Job.objects.create(owner=alice, name="r", model_path="m.py", data_path="d",
                                 state=Job.State.RUNNING)  # fmt: skip
    old = {"998": 3, str(running.pk): 3, "997": 5, "996": 0}  # job -> the database it selects
    for job_id, db in old.items():
        select = [f"+select|{db}"] if db else []
        client.execute_command("ACL", "SETUSER", f"edt-job-{job_id}", "reset", "on", ">pw",
                               f"~edt:job:{job_id}:*", "-@all", "+get", *select)  # fmt: skip
    try:
        live_scheduler().step(slots(1))
        users = set(client.execute_command("ACL", "USERS"))
        assert {f"edt-job-{j}" for j in old} & users == {
            f"edt-job-{running.pk}", "edt-job-997", "edt-job-996"}  # fmt: skip
        assert f"edt-db3-job-{running.pk}" in users  # granted under its new name
    finally:
        others = [u for u in client.execute_command("ACL", "USERS") if u.startswith("edt-")]
        redis_acl.delete_users(client, others)
        client.close()
