"""One job's shared state in Redis, as its learners, its slot tasks and the coordinator
read and write it (the key layout: protocol/keys.py), and the learner's lease."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis

from protocol.connection import REDIS_DOWN
from protocol.exits import RunResult
from protocol.keys import CHANGED_KEY, PREFIX, WAKE_KEY, job_key
from protocol.retry import Backoff, patiently

log = logging.getLogger("edt.store")
P = ParamSpec("P")
R = TypeVar("R")

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


_REVOKE = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
"""


def send_starts(client: redis.Redis, starts: list[Start]) -> None:
    """Write the learners' tokens and push their messages, in one script."""
    if starts:
        client.eval(_SEND_STARTS, 0, PREFIX + "job:", *(v for start in starts for v in start))


MAX_DETAIL = 2000  # characters of a failed learner's last error kept
LEARNER_PATIENCE = 600.0  # seconds a learner or slot task keeps retrying while Redis is away
LEASE_TTL_MS = 4000  # a learner that stopped renewing for this long is gone
LEASE_RENEW = 1.0  # seconds between renewals


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
        return job_key(self.job_id, suffix)

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

    def publish_generation(self, members: list[str], batch: int = 0, gen: int = 0) -> int:
        """Publish generation ``gen``, as the job's controller numbered it
        (scheduler/elastic.py; 0, for a driver without one: the one after the latest); its
        member list (and, in goodput mode, the global ``batch`` it trains at) is written
        before its number."""
        gen = gen or self.generation() + 1
        if batch > 0:
            self.r.set(self.key(f"gen:{gen}:batch"), int(batch))
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

    @patient
    def generation_batch(self, gen: int) -> int:
        """The global batch generation ``gen`` trains at (goodput mode); 0 where its
        publisher named none: the learners keep the one they have."""
        value = self.r.get(self.key(f"gen:{gen}:batch"))
        return int(str(value)) if value is not None else 0

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
    def revoke_dispatch(self, slot_id: str, token: str) -> None:
        """The slot's dispatch, if it is still ``token``'s, taken back: a task of that token
        still queued (the slot's worker died with it; its restart takes it) starts nothing.
        A later dispatch to the slot is left alone."""
        self.r.eval(_REVOKE, 1, self.key("dispatch"), slot_id, token)

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
    def report_exit(self, slot_id: str, code: int, token: str = "", detail: str = "") -> None:
        """The learner started on ``slot_id`` with ``token`` ended with exit status ``code``;
        ``detail``: the last error it printed, when it failed before it could say so itself."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.key("exits"), slot_id, f"{token}:{code}")
        if detail:
            pipe.hset(self.key("crashes"), slot_id, detail[:MAX_DETAIL])
        pipe.delete(self.key(f"lease:{slot_id}"))
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.rpush(WAKE_KEY, f"exit {self.job_id} {slot_id}")
        pipe.execute()

    def exits(self) -> dict[str, RunResult]:
        """How the last learner of this job that ended on each slot ended, by slot."""
        raw: dict[Any, Any] = self.r.hgetall(self.key("exits"))
        return run_results({str(k): str(v) for k, v in raw.items()})

    def crashes(self) -> dict[str, str]:
        """The last error printed by the last learner that failed on each slot, by slot."""
        raw: dict[Any, Any] = self.r.hgetall(self.key("crashes"))
        return {str(k): str(v) for k, v in raw.items()}

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
        keys = ["stop", "ready", "failures", "kill", "dispatch", "exits", "crashes", "finished"]
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

    @patient
    def note_unused_parameters(self) -> None:
        """A learner's step found a parameter without a gradient: from the next generation
        on, every learner of the job all-reduces with the engine's own buckets
        (workers/learner/reducer.py)."""
        self.r.set(self.key("unused"), 1)

    @patient
    def unused_parameters(self) -> bool:
        return bool(self.r.exists(self.key("unused")))

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

    def write_records(
        self, items: list[str], checkpoint: int | None = None, retries: int = 0
    ) -> None:
        """Append ``items`` (JSON records) to the metrics stream, in order, and then say the
        checkpoint of step ``checkpoint`` is on disk, and add ``retries`` (the writer's
        attempts that failed while Redis was away) to the job's count of them, which the
        scheduler takes (:meth:`take_redis_retries`): one round trip, no retry."""
        pipe = self.r.pipeline(transaction=False)
        for item in items:
            pipe.xadd(self.key("metrics"), {"json": item}, maxlen=1_000_000)
        if checkpoint is not None:
            pipe.set(self.key("checkpoint"), checkpoint)
        if retries:
            pipe.incrby(self.key("redis_retries"), retries)
        pipe.sadd(CHANGED_KEY, self.job_id)
        pipe.execute()

    def take_redis_retries(self) -> int:
        """The learners' Redis retries reported since the last take, taken (each counted
        once, whichever scheduler takes it: ``edt_redis_retries``)."""
        return int(str(self.r.getdel(self.key("redis_retries")) or 0))

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
        return progress_from(tail, finished)

    def _went_away(self, what: str, exc: Exception) -> None:
        if not self.away.failures:
            log.warning("job %s: redis away during %s (%s); going on", self.job_id, what, exc)
        self.away.failed()

    def _came_back(self) -> None:
        if self.away.succeeded():
            log.info("job %s: redis is back", self.job_id)
            if self.outbox or self.unsaved_checkpoint is not None:
                self.flush()


def progress_from(tail: Any, finished: Any) -> Progress:
    """:meth:`JobStore.progress` from the stream's last entry (``[]`` when empty; its fields
    a dict or Redis' flat list) and the ``finished`` key's value."""
    stored = None if finished is None else int(str(finished))
    if not tail:
        return Progress("", 0, False, stored)
    eid, fields = tail[0]
    raw = fields["json"] if isinstance(fields, dict) else pairs(fields)["json"]
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


def pairs(flat: list[Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}


def run_results(raw: dict[str, str]) -> dict[str, RunResult]:
    """The ``exits`` hash (slot -> ``token:code``) as results."""
    parts = {slot: value.rpartition(":") for slot, value in raw.items()}
    return {slot: RunResult(token, int(code)) for slot, (token, _, code) in parts.items()}
