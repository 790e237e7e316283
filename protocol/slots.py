"""The slot registry: each slot's worker registers its slot and keeps its heartbeat; the
scheduler, pages and API read every slot's state from it."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from protocol.keys import ALIVE, LOST, OFFLINE, SLOTS_KEY, hb_key, queue_for, slot_id_for, slot_key


@dataclass(frozen=True)
class SlotInfo:
    """One slot as the scheduler sees it: what it is, and whether it is alive now."""

    slot_id: str
    host: str
    index: int
    device: str  # "cpu", or the GPU's UUID
    queue: str
    state: str  # ALIVE, LOST or OFFLINE
    pid: int = 0
    telemetry: dict[str, Any] = field(default_factory=dict)
    # Why its worker refuses user code ("" when it runs it): a Redis that lets anyone in
    # (workers/deployment.py). The slot stays alive: a learner sent there reports the
    # reason as its exit, and the job fails with it after a few.
    refusing: str = ""
    # What resource-group rules read (scheduler/groups.py): the GPU's model as NVML names
    # it ("" for a CPU slot), and how many slots its host has (0: not said).
    model: str = ""
    host_slots: int = 0

    @property
    def alive(self) -> bool:
        return self.state == ALIVE

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SlotRegistry:
    """The slots' descriptions and heartbeats, over one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    def register_slot(
        self,
        host: str,
        index: int,
        device: str,
        pid: int,
        refusing: str = "",
        model: str = "",
        host_slots: int = 0,
    ) -> str:
        """Record a slot's description; its worker calls this when it starts. ``model``:
        the GPU's model name as NVML reports it ("" for a CPU slot); ``host_slots``: the
        slots on its host (resource groups' rules read both)."""
        slot_id = slot_id_for(host, index)
        mapping: dict[Any, Any] = {
            "host": host,
            "index": str(index),
            "device": device,
            "queue": queue_for(slot_id),
            "pid": str(pid),
            "state": ALIVE,
            "since": f"{time.time():.3f}",
            "refusing": refusing,
            "model": model,
            "host_slots": str(host_slots),
        }
        pipe = self.r.pipeline()
        pipe.sadd(SLOTS_KEY, slot_id)
        pipe.hset(slot_key(slot_id), mapping=mapping)
        pipe.execute()
        return slot_id

    def heartbeat(self, slot_id: str, telemetry: dict[str, Any], ttl: int) -> bool:
        """Refresh the slot's liveness for ``ttl`` seconds, carrying a telemetry sample.
        False when the slot's description is missing (Redis came back empty): register
        it again."""
        sample = dict(telemetry, at=round(time.time(), 3))
        pipe = self.r.pipeline(transaction=False)
        pipe.set(hb_key(slot_id), json.dumps(sample), ex=ttl)
        pipe.sismember(SLOTS_KEY, slot_id)
        _, known = pipe.execute()
        return bool(known)

    def set_refusing(self, slot_id: str, refusing: str) -> None:
        """Why the slot's worker refuses user code now ("": it no longer does)."""
        self.r.hset(slot_key(slot_id), "refusing", refusing)

    def mark_offline(self, slot_id: str) -> None:
        """A clean shutdown: the slot is gone on purpose, not lost."""
        pipe = self.r.pipeline()
        pipe.delete(hb_key(slot_id))
        pipe.hset(slot_key(slot_id), "state", OFFLINE)
        pipe.execute()

    def forget_slot(self, slot_id: str) -> None:
        pipe = self.r.pipeline()
        pipe.srem(SLOTS_KEY, slot_id)
        pipe.delete(slot_key(slot_id), hb_key(slot_id))
        pipe.execute()

    def list_slots(self) -> list[SlotInfo]:
        """Every registered slot, ordered by host then index, with its state now."""
        ids = sorted(str(member) for member in self.r.smembers(SLOTS_KEY))
        pipe = self.r.pipeline()
        for slot_id in ids:
            pipe.hgetall(slot_key(slot_id))
            pipe.get(hb_key(slot_id))
        replies = pipe.execute()
        slots = [
            _slot_from(slot_id, desc, hb)
            for slot_id, desc, hb in zip(ids, replies[::2], replies[1::2], strict=True)
            if desc
        ]
        return sorted(slots, key=lambda s: (s.host, s.index))

    def alive_slots(self) -> list[SlotInfo]:
        return [s for s in self.list_slots() if s.alive]


def _slot_from(slot_id: str, desc: dict[str, str], hb: str | None) -> SlotInfo:
    if hb is not None:
        state = ALIVE
    elif desc.get("state") == OFFLINE:
        state = OFFLINE
    else:
        state = LOST
    return SlotInfo(
        slot_id=slot_id,
        host=desc.get("host", ""),
        index=int(desc.get("index", "0")),
        device=desc.get("device", "cpu"),
        queue=desc.get("queue", queue_for(slot_id)),
        state=state,
        pid=int(desc.get("pid", "0")),
        telemetry=json.loads(hb) if hb is not None else {},
        refusing=desc.get("refusing", ""),
        model=desc.get("model", ""),
        host_slots=int(desc.get("host_slots") or 0),
    )
