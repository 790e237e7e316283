from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore, Progress
from protocol.keys import ALIVE, LOST, OFFLINE
from protocol.slots import SlotInfo
from scheduler.service import SchedulerService, slot_changes
from scheduler.store import (
    Allocation,
    AllocationRecord,
    ObservedJobStore,
    Store,
    observe,
    read_leases,
    take_changed,
)
from tests.harness.waiting import bound, wait_for


def test_a_slot_is_alive_while_its_heartbeat_lasts_then_lost(
    store: Store, register_slot: Callable[..., str]
) -> None:
    slot = register_slot("st-a", 0, pid=123)
    store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 12.5}, ttl=1)
    [info] = [s for s in store.list_slots() if s.host == "st-a"]
    assert (info.slot_id, info.state, info.queue, info.pid) == ("st-a.0", ALIVE, "slot.st-a.0", 123)
    assert info.telemetry["cpu_percent"] == 12.5
    wait_for(lambda: _state(store, "st-a.0") == LOST, 3, "the heartbeat to expire")


def _state(store: Store, slot_id: str) -> str:
    return next(s.state for s in store.list_slots() if s.slot_id == slot_id)


def test_a_clean_shutdown_is_offline_not_lost(
    store: Store, register_slot: Callable[..., str]
) -> None:
    slot = register_slot("st-b", 0)
    store.heartbeat(slot, {}, ttl=30)
    store.mark_offline(slot)
    assert _state(store, slot) == OFFLINE


def test_slots_are_ordered_by_host_then_numeric_index(
    store: Store, register_slot: Callable[..., str]
) -> None:
    for index in (10, 2, 1):
        register_slot("st-c", index)
    ids = [s.slot_id for s in store.list_slots() if s.host == "st-c"]
    assert ids == ["st-c.1", "st-c.2", "st-c.10"]


def test_forgotten_slot_disappears(store: Store) -> None:
    slot = store.register_slot("st-d", 0, "cpu", pid=1)
    store.forget_slot(slot)
    assert all(s.slot_id != slot for s in store.list_slots())


def info(slot_id: str, state: str) -> SlotInfo:
    return SlotInfo(slot_id, "h", 0, "cpu", "slot." + slot_id, state)


def test_slot_changes_reads_like_a_log() -> None:
    before = {"h.0": ALIVE, "h.1": ALIVE}
    lines = slot_changes(before, [info("h.0", ALIVE), info("h.1", LOST), info("h.2", ALIVE)])
    assert lines == ["slot h.1: alive -> lost", "slot h.2 (cpu) registered: alive"]


def test_scheduler_tick_publishes_the_registry(
    store: Store, register_slot: Callable[..., str]
) -> None:
    slot = register_slot("st-e", 0)
    store.heartbeat(slot, {"kind": "cpu"}, ttl=5)
    published: list[list[dict[str, object]]] = []
    service = SchedulerService(store, published.append, interval=0.05)
    service.tick()
    assert any(s["slot_id"] == slot and s["state"] == ALIVE for s in published[-1])
    store.mark_offline(slot)
    started = time.monotonic()
    service.tick()
    assert any(s["slot_id"] == slot and s["state"] == OFFLINE for s in published[-1])
    assert time.monotonic() - started < bound(1)


@pytest.mark.django_db  # the slots' groups come from the groups' rules (edtweb/tenancy)
def test_a_page_opened_between_publishes_sees_which_job_holds_each_slot(
    store: Store, register_slot: Callable[..., str]
) -> None:
    """The Cluster page's first render reads the allocation record the scheduler last
    wrote (they used to arrive only with the next publish, so every slot looked idle)."""
    from edtweb.dashboard.slots import current_slots

    slot = register_slot("st-f", 0)
    store.heartbeat(slot, {"kind": "cpu"}, ttl=5)
    published: list[list[dict[str, object]]] = []
    record = AllocationRecord({42: Allocation((slot,), ())}, capacity=1, policy="priority")
    service = SchedulerService(store, published.append, allocations=lambda: record)
    service.tick()
    assert next(s for s in published[-1] if s["slot_id"] == slot)["job"] == 42
    assert next(s for s in current_slots() if s["slot_id"] == slot)["job"] == 42
    assert store.allocations() == record
    store.save_allocations(record, ttl=0.2)  # a scheduler that stopped writing it
    wait_for(lambda: store.allocations() == AllocationRecord(), 3, "the record to expire")
    assert next(s for s in current_slots() if s["slot_id"] == slot)["job"] is None


def test_the_allocation_record_answers_which_slots_a_job_holds() -> None:
    record = AllocationRecord(
        {1: Allocation(("h.0", "h.1"), ("h.2",)), 2: Allocation(("g.0",), ())}, 4, "fairshare"
    )
    assert AllocationRecord.from_json(record.to_json()) == record
    assert record.of(1).slots == ("h.0", "h.1", "h.2")
    assert record.of(3) == Allocation()
    assert record.holder() == {"h.0": 1, "h.1": 1, "h.2": 1, "g.0": 2}


def test_a_kill_request_reaches_the_slot_task_as_the_signal_asked_for(store: Store) -> None:
    jobs = JobStore(store.r, "kill")
    jobs.request_kill("h.0", signal.SIGKILL)  # as the scheduler sends it: an enum member
    jobs.request_kill("h.1", 15)
    assert (jobs.kill_requested("h.0"), jobs.kill_requested("h.1")) == (9, 15)
    jobs.clear_kill("h.0")
    assert jobs.kill_requested("h.0") is None


def test_a_learner_keeps_its_metrics_while_redis_is_away_and_writes_them_once_back(
    tmp_path: Path,
) -> None:
    private_redis = RedisServer(tmp_path / "redis", appendonly=True, dies_with_parent=True).start()
    jobs = JobStore(connect(private_redis.url, timeout=0.5), "away")
    jobs.emit({"type": "train", "step": 1})
    private_redis.kill()
    for step in (2, 3):
        jobs.emit({"type": "train", "step": step})  # neither raises nor blocks
    jobs.record_checkpoint(3)
    assert jobs.poll() == (0, False)  # the last answer stands
    assert [json.loads(r)["step"] for r in jobs.outbox] == [2, 3]
    private_redis.start()
    assert jobs.flush(patience=10)
    assert [r["step"] for _, r in jobs.read_metrics()] == [1, 2, 3]
    assert jobs.checkpoint_step() == 3 and jobs.outbox == []
    private_redis.stop()


def _marked(store: Store, job_id: str) -> bool:
    """Take the changed-jobs set as a scheduler step does: is ``job_id`` in it?"""
    return job_id in take_changed(store.r).ids


def test_the_scheduler_reads_a_job_again_only_when_its_learners_wrote(store: Store) -> None:
    learner = JobStore(store.r, "obs-1")
    learner.forget()
    seen = ObservedJobStore(store.r, "obs-1")
    observe(store.r, [seen])  # nothing in Redis yet: the job's empty state
    empty = (seen.generation(), seen.ready_slots(), seen.exits(), seen.progress())
    assert empty == (0, set(), {}, Progress("", 0, False, None))
    take_changed(store.r)
    assert not _marked(store, "obs-1")

    learner.announce_ready("h.0")
    learner.emit({"type": "train", "step": 1, "time": 1.0})
    assert _marked(store, "obs-1")
    assert not _marked(store, "obs-1")  # taking the set clears it
    assert seen.ready_slots() == set()  # read in the next observation, not before
    observe(store.r, [seen])
    assert seen.ready_slots() == {"h.0"}
    first = seen.progress().tail
    assert first and seen.progress() == Progress(first, 1, False, None)

    # What the scheduler writes itself it knows at once, and it marks nothing.
    assert seen.publish_generation(["h.0"]) == 1 and seen.generation() == 1
    seen.set_dispatch("h.1", "t1")
    seen.clear_ready("h.0")
    assert seen.dispatches() == {"h.1": "t1"} and seen.ready_slots() == set()
    assert JobStore(store.r, "obs-1").dispatches() == {"h.1": "t1"}

    # Each write a learner or slot task makes marks it; of the metrics the observation reads
    # the last record alone (the metrics consumer reads them all).
    learner.adopt(1)
    learner.emit({"type": "train", "step": 2, "time": 2.0})
    learner.report_exit("h.1", 0, "t1")
    assert _marked(store, "obs-1")
    observe(store.r, [seen])
    assert seen.adopted() == 1 and seen.exits() == {"h.1": ("t1", 0)}
    assert seen.progress().step == 2 and seen.progress().tail != first
    for write in (lambda: learner.report_error("h.0", "boom", ""),
                  lambda: learner.report_failure("h.0", 1, 2, "lost"),
                  lambda: learner.record_checkpoint(2)):  # fmt: skip
        write()
        assert _marked(store, "obs-1")
        observe(store.r, [seen])
    assert seen.errors()[0]["message"] == "boom" and seen.failures()[0]["error"] == "lost"
    assert seen.checkpoint_step() == 2
    learner.emit({"type": "done", "step": 2, "time": 3.0})
    assert _marked(store, "obs-1")
    observe(store.r, [seen])
    assert seen.progress().ended and seen.progress().finished is None
    store.save_progress("obs-1", seen.progress().tail, 2)  # the consumer stored it
    assert _marked(store, "obs-1")
    observe(store.r, [seen])
    assert seen.progress() == Progress(seen.progress().tail, 2, True, 2)

    # Leases are read for the slots asked for, in one MGET.
    learner.renew_lease("h.0", "t0")
    read_leases(store.r, [seen], [["h.0", "h.2"]])
    assert seen.leases(["h.0", "h.2"]) == {"h.0": "t0"}
    read_leases(store.r, [seen], [[]])
    assert seen.leases(["h.0"]) == {}
