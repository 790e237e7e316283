from __future__ import annotations

import time

from scheduler.service import SchedulerService, slot_changes
from scheduler.store import ALIVE, LOST, OFFLINE, SlotInfo, Store
from tests.conftest import wait_for


def test_a_slot_is_alive_while_its_heartbeat_lasts_then_lost(store: Store) -> None:
    slot = store.register_slot("st-a", 0, "cpu", pid=123)
    store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 12.5}, ttl=1)
    [info] = [s for s in store.list_slots() if s.host == "st-a"]
    assert (info.slot_id, info.state, info.queue, info.pid) == ("st-a.0", ALIVE, "slot.st-a.0", 123)
    assert info.telemetry["cpu_percent"] == 12.5
    wait_for(lambda: _state(store, "st-a.0") == LOST, 3, "the heartbeat to expire")


def _state(store: Store, slot_id: str) -> str:
    return next(s.state for s in store.list_slots() if s.slot_id == slot_id)


def test_a_clean_shutdown_is_offline_not_lost(store: Store) -> None:
    slot = store.register_slot("st-b", 0, "cpu", pid=1)
    store.heartbeat(slot, {}, ttl=30)
    store.mark_offline(slot)
    assert _state(store, slot) == OFFLINE


def test_slots_are_ordered_by_host_then_numeric_index(store: Store) -> None:
    for index in (10, 2, 1):
        store.register_slot("st-c", index, "cpu", pid=1)
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


def test_scheduler_tick_publishes_the_registry(store: Store) -> None:
    slot = store.register_slot("st-e", 0, "cpu", pid=1)
    store.heartbeat(slot, {"kind": "cpu"}, ttl=5)
    published: list[list[dict[str, object]]] = []
    service = SchedulerService(store, published.append, interval=0.05)
    service.tick()
    assert any(s["slot_id"] == slot and s["state"] == ALIVE for s in published[-1])
    store.mark_offline(slot)
    started = time.monotonic()
    service.tick()
    assert any(s["slot_id"] == slot and s["state"] == OFFLINE for s in published[-1])
    assert time.monotonic() - started < 1


def test_a_page_opened_between_publishes_sees_which_job_holds_each_slot(
    store: Store,
) -> None:
    """The Cluster page's first render reads the assignments the scheduler last published
    (they used to arrive only with the next publish, so every slot looked idle at first)."""
    from edtweb.dashboard import live

    slot = store.register_slot("st-f", 0, "cpu", pid=1)
    store.heartbeat(slot, {"kind": "cpu"}, ttl=5)
    published: list[list[dict[str, object]]] = []
    service = SchedulerService(store, published.append, assignments=lambda: {slot: 42})
    service.tick()
    assert next(s for s in published[-1] if s["slot_id"] == slot)["job"] == 42
    assert next(s for s in live.current_slots() if s["slot_id"] == slot)["job"] == 42
    store.save_assignments({slot: 42}, ttl=0.2)  # a scheduler that stopped publishing
    wait_for(lambda: store.assignments() == {}, 3, "the assignments to expire")
    assert next(s for s in live.current_slots() if s["slot_id"] == slot)["job"] is None
