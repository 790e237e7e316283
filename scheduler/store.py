"""The scheduler's side of live state in Redis: the allocation record, its lease and
wake-ups, the metrics streams it moves, and each job's state as one observation reads it.

What learners and slot workers share with it (key names, a job's store, the slot
registry, leases, exit codes) is in ``protocol/``; this module builds on that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis

from protocol.exits import RunResult
from protocol.jobstore import JobStore, Progress, Start, pairs, progress_from, run_results
from protocol.keys import (
    ALLOCATIONS_KEY,
    CHANGED_KEY,
    LEASE_KEY,
    PREFIX,
    SCHEDULER_METRICS_KEY,
    SHARES_KEY,
    WAKE_KEY,
    job_key,
)
from protocol.slots import SlotRegistry

# Extend the lease only if we still hold it (atomic compare-and-expire).
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""


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
    # Usable slots per resource group (docs/architecture.md, "Tenancy"); empty: every slot
    # in one group, the default.
    groups: dict[str, int] = field(default_factory=dict)
    # Per active job at the last decision: its place among its group's waiting jobs in the
    # policy's order (1 first; 0 for a job given slots) and the policy's reason, why it
    # waits or the rule that set its count (docs/architecture.md, "Scheduling contract").
    standing: dict[int, tuple[int, str]] = field(default_factory=dict)
    # The idle jobs (docs/architecture.md, "Idle jobs"): job -> (when its slots last went
    # under the rule's utilisation, unix time; whose rule holds it at its minimum, "group
    # gpu" or "team vision", "" for none).
    idle: dict[int, tuple[float, str]] = field(default_factory=dict)

    def why(self, job_id: int) -> tuple[int, str] | None:
        """``job_id``'s (place, reason) at the last decision; None when it had none."""
        return self.standing.get(job_id)

    def capacity_of(self, group: str) -> int:
        """The usable slots of ``group`` at the last decision."""
        return self.groups.get(group, 0) if self.groups else self.capacity

    def holder(self) -> dict[str, int]:
        """Slot id -> the job holding it."""
        return {slot: job for job, held in self.jobs.items() for slot in held.slots}

    def of(self, job_id: int) -> Allocation:
        return self.jobs.get(job_id, Allocation())

    def to_json(self) -> str:
        jobs = {str(k): {"members": a.members, "joiners": a.joiners} for k, a in self.jobs.items()}
        attained = {str(k): round(v, 1) for k, v in self.attained.items()}
        standing = {str(k): list(v) for k, v in self.standing.items()}
        idle = {str(k): list(v) for k, v in self.idle.items()}
        return json.dumps({"jobs": jobs, "capacity": self.capacity, "policy": self.policy,
                           "attained": attained, "groups": self.groups,
                           "standing": standing, "idle": idle})  # fmt: skip

    @classmethod
    def from_json(cls, raw: str) -> AllocationRecord:
        data = json.loads(raw)
        jobs = {int(k): Allocation(tuple(v["members"]), tuple(v["joiners"]))
                for k, v in data["jobs"].items()}  # fmt: skip
        attained = {int(k): float(v) for k, v in data.get("attained", {}).items()}
        groups = {str(k): int(v) for k, v in data.get("groups", {}).items()}
        standing = {int(k): (int(v[0]), str(v[1])) for k, v in data.get("standing", {}).items()}
        idle = {int(k): (float(v[0]), str(v[1])) for k, v in data.get("idle", {}).items()}
        return cls(jobs, int(data["capacity"]), str(data["policy"]), attained, groups, standing,
                   idle)  # fmt: skip


class Store(SlotRegistry):
    """The slot registry, with what the scheduler, the metrics consumer and the pages read
    and write beside it: the allocation record, the leases of the active scheduler and
    metrics consumer, the scheduler's wake-ups and the metrics streams."""

    # The scheduler's lease and wake-ups ------------------------------------------------------

    def save_allocations(self, record: AllocationRecord, ttl: float) -> None:
        """Write the allocation record (the active scheduler alone does). It expires with
        the scheduler, so nobody reads an allocation that nobody keeps up to date."""
        self.r.set(ALLOCATIONS_KEY, record.to_json(), px=max(1, int(ttl * 1000)))

    def allocations(self) -> AllocationRecord:
        """The allocation record as the active scheduler last wrote it (empty if none)."""
        raw = self.r.get(ALLOCATIONS_KEY)
        return AllocationRecord.from_json(str(raw)) if raw else AllocationRecord()

    def save_scheduler_metrics(self, text: str, ttl: float) -> None:
        """The active scheduler's own metrics (``scheduler/metrics.py``), as Prometheus
        text; they expire with the scheduler, as the allocation record does."""
        self.r.set(SCHEDULER_METRICS_KEY, text, px=max(1, int(ttl * 1000)))

    def scheduler_metrics(self) -> str:
        """The active scheduler's metrics as it last wrote them ('' if none)."""
        return str(self.r.get(SCHEDULER_METRICS_KEY) or "")

    def shares(self, after: str | None = None, since: float | None = None,
               count: int = 5000) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
        """The teams' shares stream (``protocol.keys.SHARES_KEY``, its format there) with
        each entry's id, oldest first: the entries after stream id ``after``, else those
        whose id (Redis' clock when it was added) is from unix time ``since`` on (else
        all), at most the newest ``count``. An entry that
        is not a JSON object is skipped."""
        low = f"({after}" if after else (f"{max(0, int(since * 1000))}" if since else "-")
        replies: Any = self.r.xrevrange(SHARES_KEY, "+", low, count=count)
        out = []
        for eid, fields in reversed(replies or []):
            try:
                data = json.loads(str(fields.get("data", "")))
            except ValueError:
                continue
            if isinstance(data, dict):
                out.append((str(eid), data))
        return out

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

    def wake(self, reason: str, key: str = WAKE_KEY) -> None:
        """Wake the scheduler now (a submit, a priority change, a learner READY...); with
        ``key``, another loop that waits on its own list (the sweep driver's)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.rpush(key, reason)
        pipe.ltrim(key, -1000, -1)
        pipe.execute()

    def wait_wake(self, timeout: float, key: str = WAKE_KEY) -> list[str]:
        """Block up to ``timeout`` seconds for wake-ups; returns and clears all pending."""
        first: Any = self.r.blpop([key], timeout=timeout)
        if first is None:
            return []
        pipe = self.r.pipeline()
        pipe.lrange(key, 0, -1)
        pipe.delete(key)
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
        streams = {job_key(job, "metrics"): after for job, after in cursors.items()}
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
        pipe.set(job_key(job_id, "cursor"), cursor)
        if finished is not None:
            pipe.set(job_key(job_id, "finished"), finished)
            pipe.sadd(CHANGED_KEY, job_id)  # the scheduler observes it again
            pipe.rpush(WAKE_KEY, f"finished {job_id}")
        pipe.execute()


# The scheduler's view of every job, read once per step ----------------------------------------


@dataclass
class JobState:
    """What the coordinator reads of one job, as one observation read it."""

    generation: int = 0
    adopted: int = 0
    ready: set[str] = field(default_factory=set)
    failures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    exits: dict[str, RunResult] = field(default_factory=dict)
    crashes: dict[str, str] = field(default_factory=dict)
    checkpoint: int = 0
    dispatch: dict[str, str] = field(default_factory=dict)
    tail: list[Any] = field(default_factory=list)  # the metrics stream's last entry, if any
    finished: str | None = None  # the step of the learners' done record, once stored
    leases: dict[str, str] = field(default_factory=dict)  # slot -> token, pending slots only
    retries: int = 0  # the Redis retries its learners reported, taken by this observation


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

    def exits(self) -> dict[str, RunResult]:
        return self.seen.exits

    def crashes(self) -> dict[str, str]:
        return self.seen.crashes

    def checkpoint_step(self) -> int:
        return self.seen.checkpoint

    def dispatches(self) -> dict[str, str]:
        return dict(self.seen.dispatch)

    def leases(self, slots: list[str]) -> dict[str, str]:
        return {s: self.seen.leases[s] for s in slots if s in self.seen.leases}

    def progress(self) -> Progress:
        return progress_from(self.seen.tail, self.seen.finished)

    def take_redis_retries(self) -> int:
        """The retries the observation took from Redis (once: then 0)."""
        taken, self.seen.retries = self.seen.retries, 0
        return taken

    # Writes: to Redis and to the observation --------------------------------------------

    def publish_generation(self, members: list[str], batch: int = 0, gen: int = 0) -> int:
        gen = super().publish_generation(members, batch, gen)
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
        s.crashes = {}

    def _take(self, reply: Any) -> None:
        """One job's part of the :data:`_OBSERVE` script's answer (0: nothing in Redis)."""
        if not reply:
            reply = [None, None, [], [], [], [], None, [], None, [], [], None]
        gen, adopted, ready, failures, errors, exits, checkpoint, dispatch = reply[:8]
        finished, tail, crashes, retries = reply[8], reply[9], reply[10], reply[11]
        self.seen = JobState(
            generation=int(gen) if gen is not None else 0,
            adopted=int(adopted) if adopted is not None else 0,
            ready={str(r) for r in ready},
            failures=[json.loads(str(item)) for item in failures],
            errors=[json.loads(str(item)) for item in errors],
            exits=run_results(pairs(exits)),
            crashes=pairs(crashes),
            checkpoint=int(checkpoint) if checkpoint is not None else 0,
            dispatch=pairs(dispatch),
            tail=list(tail),
            finished=None if finished is None else str(finished),
            leases=self.seen.leases,
            retries=int(retries) if retries is not None else 0,
        )


# Every key the coordinator reads of each job, atomically: ARGV is the key prefix, then the
# jobs' ids. Of the metrics stream only its last entry: the metrics consumer reads the
# records, the scheduler needs the learners' step and whether they are done. The learners'
# reported Redis retries are taken (GETDEL: counted once, edt_redis_retries). A job with
# none of these keys (never ran) answers 0 after one EXISTS. Keys are built here from the
# ids: one standalone Redis, never a cluster.
_OBSERVE = """
local names = {'gen', 'adopted', 'ready', 'failures', 'errors', 'exits', 'checkpoint',
               'dispatch', 'finished', 'metrics', 'crashes', 'redis_retries'}
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
      redis.call('GET', keys[9]), redis.call('XREVRANGE', keys[10], '+', '-', 'COUNT', 1),
      redis.call('HGETALL', keys[11]), redis.call('GETDEL', keys[12])}
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
