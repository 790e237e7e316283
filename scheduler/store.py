"""The scheduler's view of live state in Redis. The only module that speaks Redis for it.

Keys (all under the ``edt:`` prefix):

- ``edt:slots``: set of every slot id ever registered (``<host>.<index>``).
- ``edt:slot:<id>``: hash describing the slot: host, index, device, queue, pid, state.
- ``edt:slot:<id>:hb``: the heartbeat, a JSON telemetry sample with a TTL. A slot is alive
  while this key exists; it is *lost* when the key expired without a clean shutdown, and
  *offline* when its worker shut down cleanly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import redis

from scheduler.retry import Backoff, patiently

log = logging.getLogger("edt.store")
P = ParamSpec("P")
R = TypeVar("R")

# Errors that mean "Redis is away for now" (refused, reset, timed out, still loading its
# append-only file after a restart), as opposed to a bug in a command.
REDIS_DOWN: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)

PREFIX = "edt:"
SLOTS_KEY = PREFIX + "slots"

ALIVE = "alive"
LOST = "lost"
OFFLINE = "offline"


def slot_id_for(host: str, index: int) -> str:
    return f"{host}.{index}"


def queue_for(slot_id: str) -> str:
    """The Celery queue a slot's worker consumes: ``slot.<host>.<index>``."""
    return f"slot.{slot_id}"


LEASE_KEY = PREFIX + "scheduler:lease"
METRICS_LEASE_KEY = PREFIX + "metrics:lease"  # held by the one active metrics consumer
WAKE_KEY = PREFIX + "scheduler:wake"
ALLOCATIONS_KEY = PREFIX + "scheduler:allocations"  # the allocation record (see below)
# The ids of the jobs whose learners, slot tasks or metrics consumer wrote something the
# scheduler reads, since it last took the set (:func:`take_changed`).
CHANGED_KEY = PREFIX + "scheduler:changed"

# Extend the lease only if we still hold it (atomic compare-and-expire).
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""


def _slot_key(slot_id: str) -> str:
    return f"{PREFIX}slot:{slot_id}"


def _hb_key(slot_id: str) -> str:
    return f"{PREFIX}slot:{slot_id}:hb"


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

    @property
    def alive(self) -> bool:
        return self.state == ALIVE

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Allocation:
    """The slots one job holds: the members of its generation, in rank order, then the
    joiners started for it and not admitted yet."""

    members: tuple[str, ...] = ()
    joiners: tuple[str, ...] = ()

    @property
    def slots(self) -> tuple[str, ...]:
        return (*self.members, *self.joiners)


@dataclass(frozen=True)
class AllocationRecord:
    """Which slots each job holds, with the usable capacity and the policy of the decision
    that placed them. Written by the active scheduler alone; read by everything else
    (pages, API, WebSockets, CLI, the priority preview) through :meth:`Store.allocations`."""

    jobs: dict[int, Allocation] = field(default_factory=dict)
    capacity: int = 0  # slots the scheduler could give: alive, not held by a leaver
    policy: str = "fairshare"
    # Slot-seconds of training each active job has had (members only), for the policies
    # that order by attained service; a new scheduler goes on from it. It grows with every
    # step, so it is not part of what makes two records differ (nor of a re-publication).
    attained: dict[int, float] = field(default_factory=dict, compare=False)

    def holder(self) -> dict[str, int]:
        """Slot id -> the job holding it."""
        return {slot: job for job, held in self.jobs.items() for slot in held.slots}

    def of(self, job_id: int) -> Allocation:
        return self.jobs.get(job_id, Allocation())

    def to_json(self) -> str:
        jobs = {str(k): {"members": a.members, "joiners": a.joiners} for k, a in self.jobs.items()}
        attained = {str(k): round(v, 1) for k, v in self.attained.items()}
        return json.dumps(
            {"jobs": jobs, "capacity": self.capacity, "policy": self.policy, "attained": attained}
        )

    @classmethod
    def from_json(cls, raw: str) -> AllocationRecord:
        data = json.loads(raw)
        jobs = {int(k): Allocation(tuple(v["members"]), tuple(v["joiners"]))
                for k, v in data["jobs"].items()}  # fmt: skip
        attained = {int(k): float(v) for k, v in data.get("attained", {}).items()}
        return cls(jobs, int(data["capacity"]), str(data["policy"]), attained)


def connect(url: str, timeout: float = 5.0) -> redis.Redis:
    """A client for ``url`` returning str values; it fails fast when Redis is down."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        health_check_interval=30,
    )


class Store:
    """Slot registry and (later) generations, over one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client

    # Slot registry ---------------------------------------------------------------------

    def register_slot(self, host: str, index: int, device: str, pid: int) -> str:
        """Record a slot's description; its worker calls this when it starts."""
        slot_id = slot_id_for(host, index)
        mapping: dict[Any, Any] = {
            "host": host,
            "index": str(index),
            "device": device,
            "queue": queue_for(slot_id),
            "pid": str(pid),
            "state": ALIVE,
            "since": f"{time.time():.3f}",
        }
        pipe = self.r.pipeline()
        pipe.sadd(SLOTS_KEY, slot_id)
        pipe.hset(_slot_key(slot_id), mapping=mapping)
        pipe.execute()
        return slot_id

    def heartbeat(self, slot_id: str, telemetry: dict[str, Any], ttl: int) -> bool:
        """Refresh the slot's liveness for ``ttl`` seconds, carrying a telemetry sample.
        False when the slot's description is missing (Redis came back empty): register
        it again."""
        sample = dict(telemetry, at=round(time.time(), 3))
        pipe = self.r.pipeline(transaction=False)
        pipe.set(_hb_key(slot_id), json.dumps(sample), ex=ttl)
        pipe.sismember(SLOTS_KEY, slot_id)
        _, known = pipe.execute()
        return bool(known)

    def mark_offline(self, slot_id: str) -> None:
        """A clean shutdown: the slot is gone on purpose, not lost."""
        pipe = self.r.pipeline()
        pipe.delete(_hb_key(slot_id))
        pipe.hset(_slot_key(slot_id), "state", OFFLINE)
        pipe.execute()

    def forget_slot(self, slot_id: str) -> None:
        pipe = self.r.pipeline()
        pipe.srem(SLOTS_KEY, slot_id)
        pipe.delete(_slot_key(slot_id), _hb_key(slot_id))
        pipe.execute()

    def list_slots(self) -> list[SlotInfo]:
        """Every registered slot, ordered by host then index, with its state now."""
        ids = sorted(str(member) for member in self.r.smembers(SLOTS_KEY))
        pipe = self.r.pipeline()
        for slot_id in ids:
            pipe.hgetall(_slot_key(slot_id))
            pipe.get(_hb_key(slot_id))
        replies = pipe.execute()
        slots = [
            _slot_from(slot_id, desc, hb)
            for slot_id, desc, hb in zip(ids, replies[::2], replies[1::2], strict=True)
            if desc
        ]
        return sorted(slots, key=lambda s: (s.host, s.index))

    def alive_slots(self) -> list[SlotInfo]:
        return [s for s in self.list_slots() if s.alive]

    # The scheduler's lease and wake-ups ------------------------------------------------------

    def save_allocations(self, record: AllocationRecord, ttl: float) -> None:
        """Write the allocation record (the active scheduler alone does). It expires with
        the scheduler, so nobody reads an allocation that nobody keeps up to date."""
        self.r.set(ALLOCATIONS_KEY, record.to_json(), px=max(1, int(ttl * 1000)))

    def allocations(self) -> AllocationRecord:
        """The allocation record as the active scheduler last wrote it (empty if none)."""
        raw = self.r.get(ALLOCATIONS_KEY)
        return AllocationRecord.from_json(str(raw)) if raw else AllocationRecord()

    def acquire_lease(self, holder: str, ttl_ms: int, key: str = LEASE_KEY) -> bool:
        """Become the active scheduler (or the lease ``key``'s process) if nobody holds the
        lease, or keep it if we do."""
        if self.r.set(key, holder, nx=True, px=ttl_ms):
            return True
        return bool(self.r.eval(_RENEW, 1, key, holder, ttl_ms))

    def lease_holder(self, key: str = LEASE_KEY) -> str | None:
        value = self.r.get(key)
        return None if value is None else str(value)

    def release_lease(self, holder: str, key: str = LEASE_KEY) -> None:
        if self.lease_holder(key) == holder:
            self.r.delete(key)

    def wake(self, reason: str) -> None:
        """Wake the scheduler now (a submit, a priority change, a learner READY...)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(WAKE_KEY, reason)
        pipe.ltrim(WAKE_KEY, -1000, -1)
        pipe.execute()

    def wait_wake(self, timeout: float) -> list[str]:
        """Block up to ``timeout`` seconds for wake-ups; returns and clears all pending."""
        first: Any = self.r.blpop([WAKE_KEY], timeout=timeout)
        if first is None:
            return []
        pipe = self.r.pipeline()
        pipe.lrange(WAKE_KEY, 0, -1)
        pipe.delete(WAKE_KEY)
        rest, _ = pipe.execute()
        return [str(first[1]), *(str(r) for r in rest)]

    # Metrics streams (the metrics consumer) ---------------------------------------------------

    def read_streams(self, cursors: dict[str, str], block: float,
                     count: int = 1000) -> dict[str, list[tuple[str, dict[str, Any]]]]:  # fmt: skip
        """Job id -> its metric records after its cursor (stream id), oldest first with
        their ids, at most ``count`` per job; waits up to ``block`` seconds (0: not at all)
        for the first record when none is there."""
        if not cursors:
            return {}
        streams = {_job_key(job, "metrics"): after for job, after in cursors.items()}
        wait = max(1, int(block * 1000)) if block > 0 else None
        replies: Any = self.r.xread(streams, count=count, block=wait)  # type: ignore[arg-type]
        return {
            str(key).split(":")[2]: [(str(eid), json.loads(str(f["json"]))) for eid, f in entries]
            for key, entries in (replies or [])
        }

    def save_progress(self, job_id: str, cursor: str, finished: int | None) -> None:
        """The metrics consumer stored the job's records up to stream id ``cursor``; with
        ``finished``, the learners' ``done`` record (at that step) was among them: the
        scheduler is woken to complete the job."""
        pipe = self.r.pipeline(transaction=False)
        pipe.set(_job_key(job_id, "cursor"), cursor)
        if finished is not None:
            pipe.set(_job_key(job_id, "finished"), finished)
            pipe.sadd(CHANGED_KEY, job_id)  # the scheduler observes it again
            pipe.rpush(WAKE_KEY, f"finished {job_id}")
        pipe.execute()


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
    )


# Elastic jobs ---------------------------------------------------------------------------
#
# edt:job:<id>:gen            the latest generation number (learners' rank 0 reads it)
# edt:job:<id>:gen:<n>        JSON list of the slots of generation n, in rank order
# edt:job:<id>:adopted        the latest generation whose process group formed
# edt:job:<id>:ready          set of slots whose learner is READY to join
# edt:job:<id>:failures       list of JSON failure reports from learners
# edt:job:<id>:errors         list of JSON reports of errors in the user's code
# edt:job:<id>:stop           present when the job must checkpoint and stop
# edt:job:<id>:checkpoint     the step of the latest checkpoint
# edt:job:<id>:dispatch       hash slot -> token of the learner task sent to it
# edt:job:<id>:kill           hash slot -> signal the slot's task must send to its learner
# edt:job:<id>:exits          hash slot -> exit code of its learner
# edt:job:<id>:lease:<slot>   the token of the learner alive on the slot, with a short TTL
# edt:job:<id>:metrics        stream of per-iteration and per-epoch records
# edt:job:<id>:cursor         the last record of that stream stored in the database
# edt:job:<id>:finished       the step of the learners' ``done`` record, once it is stored
#
# Every learner and slot task write above (and the metrics consumer's finished) adds the
# job's id to edt:scheduler:changed, in the same round trip and after the write: the
# scheduler takes that set at each step and reads again only those jobs (ObservedJobStore).

# A learner to start: its job id, slot and token, then the Celery queue list to push its
# task's message to, and that message ("" and "": no message).
Start = tuple[str, str, str, str, str]

# For each learner (five ARGV after the key prefix, as in ``Start``): its token written, a
# READY or kill request an earlier learner left on its slot cleared, then its message pushed
# as Celery's Redis transport does (LPUSH; the worker pops the other end). Atomic: no
# message is in a queue before its token.
_SEND_STARTS = """
for i = 2, #ARGV, 5 do
  local k = ARGV[1] .. ARGV[i] .. ':'
  redis.call('HSET', k .. 'dispatch', ARGV[i + 1], ARGV[i + 2])
  redis.call('SREM', k .. 'ready', ARGV[i + 1])
  redis.call('HDEL', k .. 'kill', ARGV[i + 1])
  if ARGV[i + 3] ~= '' then redis.call('LPUSH', ARGV[i + 3], ARGV[i + 4]) end
end
return 0
"""


def send_starts(client: redis.Redis, starts: list[Start]) -> None:
    """Write the learners' tokens and push their messages, in one script."""
    if starts:
        client.eval(_SEND_STARTS, 0, PREFIX + "job:", *(v for start in starts for v in start))


LEARNER_PATIENCE = 600.0  # seconds a learner or slot task keeps retrying while Redis is away
LEASE_TTL_MS = 4000  # a learner that stopped renewing for this long is gone
LEASE_RENEW = 1.0  # seconds between renewals


def _job_key(job_id: str, suffix: str) -> str:
    return f"{PREFIX}job:{job_id}:{suffix}"


def patient(method: Callable[Concatenate[JobStore, P], R]) -> Callable[Concatenate[JobStore, P], R]:
    """Retry the call while Redis is away, for as long as the store's ``patience``."""

    def call(self: JobStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return patiently(lambda: method(self, *args, **kwargs), REDIS_DOWN, self.patience,
                         f"redis ({method.__name__})")  # fmt: skip

    functools.update_wrapper(call, method)
    return call


@dataclass(frozen=True)
class Progress:
    """A job's progress as its metrics stream shows it (:meth:`JobStore.progress`)."""

    tail: str  # the stream id of the learners' latest record ("" before any)
    step: int  # that record's step
    ended: bool  # that record is the learners' "done": training is over
    finished: int | None  # the done record's step, once the metrics consumer stored it


class JobStore:
    """The elastic protocol's shared state for one job.

    ``patience`` is how long a call keeps retrying while Redis is away: 0 for the scheduler
    (its loop backs off and tries the whole step again), ``LEARNER_PATIENCE`` for learners
    and slot tasks, which wait for Redis rather than give up on a job. What a learner must
    not wait for (its per-step poll, its metrics, its checkpoint step) never blocks: the
    last answer stands and records are buffered until Redis is back.
    """

    def __init__(self, client: redis.Redis, job_id: str, patience: float = 0.0) -> None:
        self.r = client
        self.job_id = job_id
        self.patience = patience
        self.away = Backoff()
        self.outbox: list[str] = []  # metric records not yet written, oldest first
        self.unsaved_checkpoint: int | None = None
        self.last_poll = (0, False)

    def key(self, suffix: str) -> str:
        return _job_key(self.job_id, suffix)

    def _changed(self, write: Callable[[Any], object]) -> None:
        """``write`` (on a pipeline), then mark the job changed, in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        write(pipe)
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.execute()

    @property
    def redis_away(self) -> bool:
        """The last call that needed Redis failed (the fail-soft reads return old answers)."""
        return self.away.failures > 0

    # Generations ---------------------------------------------------------------------

    def publish_generation(self, members: list[str]) -> int:
        """Publish the next generation; its member list is written before its number."""
        gen = self.generation() + 1
        self.r.set(self.key(f"gen:{gen}"), json.dumps(members))
        self.r.set(self.key("gen"), gen)
        self.r.publish(self.key("control"), "gen")  # rank 0's watch reads it again
        return gen

    @patient
    def generation(self) -> int:
        value = self.r.get(self.key("gen"))
        return int(str(value)) if value is not None else 0

    @patient
    def members(self, gen: int) -> list[str]:
        value = self.r.get(self.key(f"gen:{gen}"))
        return list(json.loads(str(value))) if value is not None else []

    def poll(self) -> tuple[int, bool]:
        """The latest generation and the stop flag, in one round trip (rank 0, per step).
        While Redis is away the last answer stands: training goes on in this generation."""
        if self.away.quiet():
            return self.last_poll
        try:
            pipe = self.r.pipeline(transaction=False)
            pipe.get(self.key("gen"))
            pipe.exists(self.key("stop"))
            gen, stop = pipe.execute()
        except REDIS_DOWN as exc:
            self._went_away("poll", exc)
            return self.last_poll
        self.last_poll = (int(str(gen)) if gen is not None else 0), bool(stop)
        self._came_back()
        return self.last_poll

    @patient
    def adopt(self, gen: int) -> None:
        """The generation's process group formed; the scheduler may change it again."""
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.key("adopted"), gen)
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.rpush(WAKE_KEY, f"adopted {self.job_id} {gen}")
        pipe.execute()

    def adopted(self) -> int:
        value = self.r.get(self.key("adopted"))
        return int(str(value)) if value is not None else 0

    # Learners --------------------------------------------------------------------------

    @patient
    def announce_ready(self, slot_id: str) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.sadd(self.key("ready"), slot_id)
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.rpush(WAKE_KEY, f"ready {self.job_id} {slot_id}")
        pipe.execute()

    def ready_slots(self) -> set[str]:
        return {str(s) for s in self.r.smembers(self.key("ready"))}

    def clear_ready(self, slot_id: str) -> None:
        self._changed(lambda pipe: pipe.srem(self.key("ready"), slot_id))

    @patient
    def report_failure(self, slot_id: str, gen: int, step: int, error: str) -> None:
        report = {"slot": slot_id, "gen": gen, "step": step, "error": error, "at": time.time()}
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(self.key("failures"), json.dumps(report))
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.rpush(WAKE_KEY, f"failure {self.job_id} {slot_id}")
        pipe.execute()

    def failures(self) -> list[dict[str, Any]]:
        return [json.loads(str(item)) for item in self.r.lrange(self.key("failures"), 0, -1)]

    @patient
    def report_error(self, slot_id: str, message: str, trace: str) -> None:
        report = {"slot": slot_id, "message": message, "trace": trace, "at": time.time()}
        self._changed(lambda pipe: pipe.rpush(self.key("errors"), json.dumps(report)))

    def errors(self) -> list[dict[str, Any]]:
        return [json.loads(str(item)) for item in self.r.lrange(self.key("errors"), 0, -1)]

    # Learner leases (liveness observed, not reported) ---------------------------------------

    def renew_lease(self, slot_id: str, token: str) -> None:
        self.r.set(self.key(f"lease:{slot_id}"), token, px=LEASE_TTL_MS)

    def drop_lease(self, slot_id: str) -> None:
        self.r.delete(self.key(f"lease:{slot_id}"))

    def leases(self, slots: list[str]) -> dict[str, str]:
        """Slot -> token of the learner holding a live lease there, for ``slots``."""
        if not slots:
            return {}
        values = self.r.mget([self.key(f"lease:{s}") for s in slots])
        return {s: str(v) for s, v in zip(slots, values, strict=True) if v is not None}

    # Dispatch to slots (Celery) -------------------------------------------------------------

    def set_dispatch(self, slot_id: str, token: str, batch: list[Start] | None = None,
                     queue: str = "", message: str = "") -> None:  # fmt: skip
        """The token a learner task for this slot must carry; older tasks exit at once.
        A READY left by an earlier learner on the slot no longer counts. With ``queue`` and
        ``message``, the task's message is pushed to the queue's list after the token. With
        ``batch``, all that is added there (the caller sends the batch: :func:`send_starts`)."""
        start = (self.job_id, slot_id, token, queue, message)
        if batch is None:
            send_starts(self.r, [start])
        else:
            batch.append(start)

    @patient
    def dispatch_token(self, slot_id: str) -> str | None:
        value = self.r.hget(self.key("dispatch"), slot_id)
        return None if value is None else str(value)

    def request_kill(self, slot_id: str, sig: int) -> None:
        # int(): redis-py writes other ints by repr(), and signal.SIGKILL's is "<Signals...>"
        self.r.hset(self.key("kill"), slot_id, int(sig))

    def kill_requested(self, slot_id: str) -> int | None:
        """The signal the scheduler asked for, if any; None while Redis is away (the slot
        task asks again a moment later)."""
        if self.away.quiet():
            return None
        try:
            value = self.r.hget(self.key("kill"), slot_id)
        except REDIS_DOWN as exc:
            self._went_away("kill check", exc)
            return None
        self._came_back()
        return None if value is None else int(str(value))

    @patient
    def clear_kill(self, slot_id: str) -> None:
        self.r.hdel(self.key("kill"), slot_id)

    @patient
    def report_exit(self, slot_id: str, code: int, token: str = "") -> None:
        """The learner started on ``slot_id`` with ``token`` ended with exit status ``code``."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.key("exits"), slot_id, f"{token}:{code}")
        pipe.delete(self.key(f"lease:{slot_id}"))
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.rpush(WAKE_KEY, f"exit {self.job_id} {slot_id}")
        pipe.execute()

    def exits(self) -> dict[str, tuple[str, int]]:
        """(token, exit status) of the last learner of this job that ended, by slot."""
        raw: dict[Any, Any] = self.r.hgetall(self.key("exits"))
        pairs = {str(k): str(v).rpartition(":") for k, v in raw.items()}
        return {slot: (token, int(code)) for slot, (token, _, code) in pairs.items()}

    def dispatches(self) -> dict[str, str]:
        raw: dict[Any, Any] = self.r.hgetall(self.key("dispatch"))
        return {str(k): str(v) for k, v in raw.items()}

    def cursor(self) -> str:
        """The last metrics record stored in the database (a new metrics consumer resumes
        after it; see :meth:`Store.save_progress`)."""
        value = self.r.get(self.key("cursor"))
        return "0-0" if value is None else str(value)

    def forget(self) -> None:
        """Drop every key of this job id: a new job starts clean even if an old one with the
        same id left state behind (a database restored or reset, Redis not)."""
        keys = list(self.r.scan_iter(match=f"{PREFIX}job:{self.job_id}:*", count=500))
        if keys:
            self.r.delete(*keys)

    def reset_run(self) -> None:
        """Before a suspended job resumes: forget the last run's learners, keep its
        generation counter and checkpoint."""
        keys = ["stop", "ready", "failures", "kill", "dispatch", "exits", "finished"]
        self.r.delete(*[self.key(k) for k in keys])

    def record_checkpoint(self, step: int) -> None:
        """Say the checkpoint of ``step`` is on disk; written with the next metrics flush
        when Redis is away."""
        self.unsaved_checkpoint = step
        self.flush()

    def checkpoint_step(self) -> int:
        """The step of the job's latest checkpoint (0: none yet)."""
        value = self.r.get(self.key("checkpoint"))
        return int(str(value)) if value is not None else 0

    def request_stop(self) -> None:
        self.r.set(self.key("stop"), 1)
        self.r.publish(self.key("control"), "stop")

    @patient
    def stop_requested(self) -> bool:
        return bool(self.r.exists(self.key("stop")))

    # Metrics ---------------------------------------------------------------------------

    def emit(self, record: dict[str, Any]) -> None:
        """Queue a record and write what is queued; it never raises nor blocks while Redis
        is away. A record may reach the stream twice when a connection broke after Redis
        took it: readers keep the first of each (type, step)."""
        self.outbox.append(json.dumps(record))
        self.flush()

    def flush(self, patience: float = 0.0) -> bool:
        """Write the queued records (and checkpoint step) in order; False, keeping them,
        while Redis is away (``patience`` seconds of retries, e.g. before exiting)."""
        if not self.outbox and self.unsaved_checkpoint is None:
            return True
        if self.away.quiet() and not patience:
            return False
        try:
            patiently(self._write_outbox, REDIS_DOWN, patience, "redis (metrics)")
        except REDIS_DOWN as exc:
            self._went_away(f"metrics ({len(self.outbox)} buffered)", exc)
            return False
        self._came_back()
        return True

    def _write_outbox(self) -> None:
        self.write_records(self.outbox, self.unsaved_checkpoint)
        self.outbox.clear()
        self.unsaved_checkpoint = None

    def write_records(self, items: list[str], checkpoint: int | None = None) -> None:
        """Append ``items`` (JSON records) to the metrics stream, in order, and then say the
        checkpoint of step ``checkpoint`` is on disk: one round trip, no retry."""
        pipe = self.r.pipeline(transaction=False)
        for item in items:
            pipe.xadd(self.key("metrics"), {"json": item}, maxlen=1_000_000)
        if checkpoint is not None:
            pipe.set(self.key("checkpoint"), checkpoint)
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.execute()

    def read_metrics(self, after: str = "0-0") -> list[tuple[str, dict[str, Any]]]:
        """Records after stream id ``after``, oldest first, with their ids."""
        entries: Any = self.r.xrange(self.key("metrics"), min=f"({after}", max="+")
        return [(str(eid), json.loads(str(fields["json"]))) for eid, fields in entries]

    def progress(self) -> Progress:
        """What the scheduler needs of the metrics, without reading them all: the learners'
        latest record, and whether the metrics consumer stored their ``done`` one."""
        pipe = self.r.pipeline(transaction=False)
        pipe.xrevrange(self.key("metrics"), max="+", min="-", count=1)
        pipe.get(self.key("finished"))
        tail, finished = pipe.execute()
        return _progress(tail, finished)

    def _went_away(self, what: str, exc: Exception) -> None:
        if not self.away.failures:
            log.warning("job %s: redis away during %s (%s); going on", self.job_id, what, exc)
        self.away.failed()

    def _came_back(self) -> None:
        if self.away.succeeded():
            log.info("job %s: redis is back", self.job_id)
            if self.outbox or self.unsaved_checkpoint is not None:
                self.flush()


def _progress(tail: Any, finished: Any) -> Progress:
    """:meth:`JobStore.progress` from the stream's last entry (``[]`` when empty; its fields
    a dict or Redis' flat list) and the ``finished`` key's value."""
    stored = None if finished is None else int(str(finished))
    if not tail:
        return Progress("", 0, False, stored)
    eid, fields = tail[0]
    raw = fields["json"] if isinstance(fields, dict) else _pairs(fields)["json"]
    record = json.loads(str(raw))
    return Progress(str(eid), int(record.get("step", 0)), record.get("type") == "done", stored)


class LeaseKeeper(threading.Thread):
    """Renews a learner's lease from inside the learner process: when the process dies, by
    whatever cause, the lease lapses within ``LEASE_TTL_MS`` and the scheduler sees it."""

    def __init__(self, jobs: JobStore, slot_id: str, token: str) -> None:
        super().__init__(name="edt-lease", daemon=True)
        self.jobs, self.slot_id, self.token = jobs, slot_id, token
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            # Redis away: the scheduler does not judge leases it could not see renewed.
            with contextlib.suppress(*REDIS_DOWN):
                self.jobs.renew_lease(self.slot_id, self.token)
            self.stopping.wait(LEASE_RENEW)

    def stop(self) -> None:
        self.stopping.set()


# The scheduler's view of every job, read once per step ----------------------------------------


@dataclass
class JobState:
    """What the coordinator reads of one job, as one observation read it."""

    generation: int = 0
    adopted: int = 0
    ready: set[str] = field(default_factory=set)
    failures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    exits: dict[str, tuple[str, int]] = field(default_factory=dict)
    checkpoint: int = 0
    dispatch: dict[str, str] = field(default_factory=dict)
    tail: list[Any] = field(default_factory=list)  # the metrics stream's last entry, if any
    finished: str | None = None  # the step of the learners' done record, once stored
    leases: dict[str, str] = field(default_factory=dict)  # slot -> token, pending slots only


class ObservedJobStore(JobStore):
    """The scheduler's ``JobStore``: its reads answer from the job's state as the step's
    observation read it (:func:`observe`, one script for every job :func:`take_changed`
    names, and :func:`read_leases`, one ``MGET`` for the learners' leases), its writes go
    to Redis and into that state. Learners and slot tasks mark the job changed with each
    write the coordinator reads; what the scheduler writes itself it knows.

    ``members`` and the writes keep reading and writing Redis at once.
    """

    def __init__(self, client: redis.Redis, job_id: str) -> None:
        super().__init__(client, job_id)
        self.seen = JobState()

    # Reads: from the observation --------------------------------------------------------

    def generation(self) -> int:
        return self.seen.generation

    def adopted(self) -> int:
        return self.seen.adopted

    def ready_slots(self) -> set[str]:
        return set(self.seen.ready)

    def failures(self) -> list[dict[str, Any]]:
        return self.seen.failures

    def errors(self) -> list[dict[str, Any]]:
        return self.seen.errors

    def exits(self) -> dict[str, tuple[str, int]]:
        return self.seen.exits

    def checkpoint_step(self) -> int:
        return self.seen.checkpoint

    def dispatches(self) -> dict[str, str]:
        return dict(self.seen.dispatch)

    def leases(self, slots: list[str]) -> dict[str, str]:
        return {s: self.seen.leases[s] for s in slots if s in self.seen.leases}

    def progress(self) -> Progress:
        return _progress(self.seen.tail, self.seen.finished)

    # Writes: to Redis and to the observation --------------------------------------------

    def publish_generation(self, members: list[str]) -> int:
        gen = super().publish_generation(members)
        self.seen.generation = gen
        return gen

    def set_dispatch(self, slot_id: str, token: str, batch: list[Start] | None = None,
                     queue: str = "", message: str = "") -> None:  # fmt: skip
        super().set_dispatch(slot_id, token, batch, queue, message)
        self.seen.dispatch[slot_id] = token
        self.seen.ready.discard(slot_id)

    def clear_ready(self, slot_id: str) -> None:
        super().clear_ready(slot_id)
        self.seen.ready.discard(slot_id)

    def reset_run(self) -> None:
        super().reset_run()
        s = self.seen
        s.ready, s.failures, s.exits, s.dispatch, s.finished = set(), [], {}, {}, None

    def _take(self, reply: Any) -> None:
        """One job's part of the :data:`_OBSERVE` script's answer (0: nothing in Redis)."""
        if not reply:
            reply = [None, None, [], [], [], [], None, [], None, []]
        gen, adopted, ready, failures, errors, exits, checkpoint, dispatch = reply[:8]
        finished, tail = reply[8], reply[9]
        pairs = {str(k): str(v).rpartition(":") for k, v in _pairs(exits).items()}
        self.seen = JobState(
            generation=int(gen) if gen is not None else 0,
            adopted=int(adopted) if adopted is not None else 0,
            ready={str(r) for r in ready},
            failures=[json.loads(str(item)) for item in failures],
            errors=[json.loads(str(item)) for item in errors],
            exits={slot: (token, int(code)) for slot, (token, _, code) in pairs.items()},
            checkpoint=int(checkpoint) if checkpoint is not None else 0,
            dispatch=_pairs(dispatch),
            tail=list(tail),
            finished=None if finished is None else str(finished),
            leases=self.seen.leases,
        )


def _pairs(flat: list[Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}


# Every key the coordinator reads of each job, atomically: ARGV is the key prefix, then the
# jobs' ids. Of the metrics stream only its last entry: the metrics consumer reads the
# records, the scheduler needs the learners' step and whether they are done. A job with
# none of these keys (never ran) answers 0 after one EXISTS. Keys are built here from the
# ids: one standalone Redis, never a cluster.
_OBSERVE = """
local names = {'gen', 'adopted', 'ready', 'failures', 'errors', 'exits', 'checkpoint',
               'dispatch', 'finished', 'metrics'}
local out = {}
for i = 2, #ARGV do
  local k = ARGV[1] .. ARGV[i] .. ':'
  local keys = {}
  for j, name in ipairs(names) do keys[j] = k .. name end
  if redis.call('EXISTS', unpack(keys)) == 0 then
    out[#out + 1] = 0
  else
    out[#out + 1] = {
      redis.call('GET', keys[1]), redis.call('GET', keys[2]), redis.call('SMEMBERS', keys[3]),
      redis.call('LRANGE', keys[4], 0, -1), redis.call('LRANGE', keys[5], 0, -1),
      redis.call('HGETALL', keys[6]), redis.call('GET', keys[7]), redis.call('HGETALL', keys[8]),
      redis.call('GET', keys[9]), redis.call('XREVRANGE', keys[10], '+', '-', 'COUNT', 1)}
  end
end
return out
"""


def observe(client: redis.Redis, stores: list[ObservedJobStore]) -> None:
    """Read every job of ``stores`` in one script: one round trip, one consistent view."""
    if not stores:
        return
    args: list[str] = [PREFIX + "job:"]
    for store in stores:
        args.append(store.job_id)
    replies: Any = client.eval(_OBSERVE, 0, *args)
    for store, reply in zip(stores, replies, strict=True):
        store._take(reply)


# The changed-jobs set, taken and cleared, and the Redis server's ``run_id`` (a restarted
# Redis has a new one and has forgotten the jobs' ACL users): one round trip per step.
_TAKE = """
local ids = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
return {run, ids}
"""


class Changed(NamedTuple):
    ids: set[str]  # the jobs marked changed since the last take
    redis_run: str  # the Redis server's run_id


def take_changed(client: redis.Redis) -> Changed:
    """The ids of the jobs marked changed since the last call, and the mark cleared, in one
    script (atomic): a write that lands after it marks its job again for the next call."""
    reply: Any = client.eval(_TAKE, 1, CHANGED_KEY)
    return Changed({str(i) for i in reply[1]}, str(reply[0]))


def read_leases(
    client: redis.Redis, stores: list[ObservedJobStore], pending: list[list[str]]
) -> None:
    """One ``MGET`` of the leases of each store's ``pending`` slots (one list per store),
    stored into each store's observation: afterwards it knows the leases of those slots
    alone."""
    keys = [store.key(f"lease:{slot}") for store, slots in zip(stores, pending, strict=True)
            for slot in slots]  # fmt: skip
    values = client.mget(keys) if keys else []
    at = 0
    for store, slots in zip(stores, pending, strict=True):
        found = values[at : at + len(slots)]
        at += len(slots)
        store.seen.leases = {s: str(v) for s, v in zip(slots, found, strict=True) if v}
