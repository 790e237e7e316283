"""The live loop and the per-job controller without Django: an in-memory job book, a real
Redis of the test's own, and learners played by the test through the protocol's own calls
(READY, lease, adopt, exit, failure report), as the elastic protocol has them
(docs/architecture.md, "Elastic training protocol"). Each row is a test of its own that
starts from nothing, run once with the book's rows in order and once reversed."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from edtweb.redis_server import RedisServer
from protocol.connection import REDIS_DOWN, connect
from protocol.exits import Exit
from protocol.jobstore import JobStore
from protocol.keys import ALIVE, SHARES_KEY, queue_for
from protocol.learner_task import LearnerPaths
from protocol.slots import SlotInfo
from scheduler.groups import parse_rule
from scheduler.live import ports as P
from scheduler.live.loop import LiveScheduler
from scheduler.live.ports import JobRow, Ports, Tenancy
from scheduler.policies import Team, goodput
from scheduler.policies.goodput import BATCH_CHANGE_GAIN, rounded_gns
from scheduler.policies.throughput import ThroughputModel, best_batch
from scheduler.policies.throughput import goodput as goodput_of
from tests.harness.waiting import wait_for

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
MESSAGES = Celery("edt-table")  # builds learner task messages; nothing is sent through it


@dataclass
class InMemoryBook:
    """``scheduler.live.ports.JobBook`` over a dict: what the database would hold."""

    AWAY: tuple[type[Exception], ...] = ()
    rows: dict[int, JobRow] = field(default_factory=dict)
    events: list[tuple[int, str, str]] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)  # each event's data, in order
    teams: Tenancy = field(default_factory=Tenancy)
    records: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # train records
    reverse: bool = False  # the rows in reversed order: no decision may depend on it

    def submit(self, pk: int, max_workers: int, priority: int = 50, owner: str = "",
               team: str = "", group: str = "default", batch: int = 0,
               batch_range: tuple[int, int] = (0, 0)) -> None:  # fmt: skip
        at = EPOCH + timedelta(seconds=pk)
        self.rows[pk] = JobRow(pk, f"job{pk}", P.QUEUED, priority, max_workers, 1, 0.0, at,
                               owner, team, group, batch, *batch_range)  # fmt: skip

    def tenancy(self) -> Tenancy:
        return self.teams

    def schedulable(self, created: dict[int, datetime]) -> list[JobRow]:
        rows = [r for r in self.rows.values() if r.state in P.ACTIVE]
        return rows[::-1] if self.reverse else rows

    def train_records(self, job_id: int) -> list[dict[str, Any]]:
        return list(self.records.get(job_id, []))

    def _move(self, pk: int, to: str, allowed: tuple[str, ...]) -> bool:
        row = self.rows[pk]
        if row.state not in allowed:
            return False
        self.rows[pk] = row._replace(state=to)
        return True

    def start(self, job_id: int) -> bool:
        return self._move(job_id, P.RUNNING, (P.QUEUED, P.SUSPENDED))

    def fail(self, job_id: int, message: str) -> bool:
        self.events.append((job_id, "failed", message))
        self.details.append({})
        return self._move(job_id, P.FAILED, P.ACTIVE)

    def complete(self, job_id: int) -> bool:
        return self._move(job_id, P.COMPLETED, (P.RUNNING,))

    def suspend(self, job_id: int, checkpoint_step: int) -> bool:
        return self._move(job_id, P.SUSPENDED, (P.RUNNING,))

    def record_event(self, job_id: int, kind: str, message: str, **data: Any) -> None:
        self.events.append((job_id, kind, message))
        self.details.append(data)

    def batched(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def paths(self, job_ids: list[int]) -> dict[int, LearnerPaths]:
        return {pk: LearnerPaths(Path("d"), Path("m.py"), Path(f"j/{pk}"), Path(f"j/{pk}/s"))
                for pk in job_ids}  # fmt: skip


class World:
    """One row's cluster: the book, the loop, the slots, and the learners' side."""

    def __init__(self, server: RedisServer, slots: int) -> None:
        self.client = connect(server.url)
        self.client.flushdb()
        self.url = server.url
        self.book = InMemoryBook()
        self.away = False
        self.ports = Ports(self.book, self._redis, MESSAGES, server.url, "table-secret")
        self.live = LiveScheduler(self.ports)
        ids = [("tb", i) for i in range(slots)]
        self.slots = [SlotInfo(f"{h}.{i}", h, i, "cpu", queue_for(f"{h}.{i}"), ALIVE)
                      for h, i in ids]  # fmt: skip

    def _redis(self) -> redis.Redis:
        if self.away:  # nothing answers there: every command is refused
            return redis.Redis(port=1, socket_connect_timeout=0.2)
        return self.client

    def store(self, pk: int) -> JobStore:
        return JobStore(self.client, str(pk))

    def step(self) -> None:
        self.live.step(self.slots)

    def learners_play(self, exits: Callable[[int, str], int | None] = lambda pk, s: None) -> None:
        """Every learner does what the protocol asks of it now: a joiner takes its lease
        and says READY, the members adopt the latest generation, a learner placed
        elsewhere leaves. Only a learner whose task was sent (its token in the job's
        dispatch hash, written with the message) runs at all. ``exits`` may end a joiner
        with a status instead."""
        for pk, runner in self.live.runners.items():
            jobs, c, tokens = self.store(pk), runner.state, runner.state.learners.tokens
            for slot in [*c.joining, *c.members]:
                if runner.exited(slot) or jobs.dispatch_token(slot) != tokens[slot]:
                    continue  # ended, or its task message was never sent: it never ran
                code = exits(pk, slot) if slot in c.joining else None
                if code is not None:
                    jobs.report_exit(slot, code, tokens[slot])
                    continue
                jobs.renew_lease(slot, tokens[slot])
                if slot in c.joining and slot not in jobs.ready_slots():
                    jobs.announce_ready(slot)
            if jobs.generation() > jobs.adopted():
                jobs.adopt(jobs.generation())
            for slot in c.started - set(c.members) - set(c.joining):
                if not runner.exited(slot):  # left the generation: it exits
                    jobs.report_exit(slot, Exit.FINISHED, tokens[slot])

    def settle(self, rounds: int = 12, **play: Any) -> None:
        for _ in range(rounds):
            self.step()
            self.learners_play(**play)
        self.step()

    def settle_until(self, done: Callable[[], bool], what: str, **play: Any) -> None:
        """Steps and plays until ``done`` (a retry's delay runs on the real clock)."""

        def played() -> bool:
            self.step()
            self.learners_play(**play)
            return done()

        wait_for(played, 30, what, step=0.05)

    def members(self) -> dict[int, int]:
        return {pk: len(r.members()) for pk, r in self.live.runners.items()}


# The rows ------------------------------------------------------------------------------------


def one_job_alone_takes_every_slot(w: World) -> None:
    w.book.submit(1, max_workers=8)
    w.settle()
    assert w.members() == {1: 8} and w.book.rows[1].state == P.RUNNING


def the_seeds_two_jobs_share_the_slots_half_and_half(w: World) -> None:
    w.book.submit(1, max_workers=8)
    w.settle()
    w.book.submit(2, max_workers=8)
    w.settle()
    assert w.members() == {1: 4, 2: 4}
    assert any(e[1] == "scaled" and e[0] == 2 for e in w.book.events)


def a_dead_joiners_slot_is_sent_a_learner_again(w: World) -> None:
    w.book.submit(1, max_workers=2)
    w.step()
    runner = w.live.runners[1]
    first, token = runner.state.joining[0], runner.state.learners.tokens[runner.state.joining[0]]
    died = {first}
    crash = {"exits": lambda pk, slot: Exit.CRASHED if slot in died and not died.clear() else None}
    w.settle(**crash)
    assert runner.state.start_failures == 1 and runner.state.retry_at > 0  # it waits 1 s
    w.settle_until(lambda: w.members() == {1: 2}, "two members again", **crash)
    assert runner.state.learners.tokens[first] != token  # a new learner, not the dead one


def a_lost_member_is_replaced_from_the_survivors(w: World) -> None:
    w.book.submit(1, max_workers=2)
    w.settle()
    runner, jobs = w.live.runners[1], w.store(1)
    lost, survivor = runner.state.members
    gen = jobs.generation()
    jobs.report_exit(lost, Exit.CRASHED, runner.state.learners.tokens[lost])
    jobs.report_failure(survivor, gen, 5, "a peer of the collective is gone")
    w.step()
    assert jobs.generation() == gen + 1 and jobs.members(gen + 1) == [survivor]
    w.settle()
    assert w.members() == {1: 2}  # grown back on a new learner
    assert [e for e in w.book.events if e[1] == "failure"]


def a_lost_slots_learner_is_replaced_elsewhere(w: World) -> None:
    """A slot's worker dies with its host: no exit is reported, its learner's lease lapses
    and its slot is no longer alive; the survivor's collective fails and it says so. The
    job goes on with the survivor, then grows back on another slot."""
    w.book.submit(1, max_workers=2)
    w.slots = w.slots[:3]
    w.settle()
    runner, jobs = w.live.runners[1], w.store(1)
    survivor, lost = runner.state.members
    w.slots = [s for s in w.slots if s.slot_id != lost]
    jobs.report_failure(survivor, jobs.generation(), 7, "a peer of the collective is gone")

    def survivor_alone() -> bool:
        jobs.renew_lease(survivor, runner.state.learners.tokens[survivor])
        w.step()
        return lost not in runner.state.members

    wait_for(survivor_alone, 30, f"{lost}'s lease to lapse", step=0.05)
    assert runner.state.members == (survivor,)
    assert jobs.members(jobs.generation()) == [survivor]
    w.settle()
    assert w.members() == {1: 2} and lost not in runner.state.members


def a_failure_of_a_stale_generation_changes_nothing(w: World) -> None:
    w.book.submit(1, max_workers=2)
    w.settle()
    jobs, runner = w.store(1), w.live.runners[1]
    gen = jobs.generation()
    jobs.report_failure(runner.state.members[0], gen - 1, 3, "from before the last resize")
    w.settle(rounds=2)
    assert jobs.generation() == gen and w.members() == {1: 2}


def the_user_codes_error_fails_the_job(w: World) -> None:
    w.book.submit(1, max_workers=2)
    w.settle()
    jobs, runner = w.store(1), w.live.runners.get(1)
    assert runner is not None
    slot = runner.state.members[0]
    jobs.report_error(slot, "ValueError: bad shape", 'File "model.py", line 3')
    jobs.report_exit(slot, Exit.USER_CODE_FAILED, runner.state.learners.tokens[slot])
    w.settle(rounds=2)
    assert w.book.rows[1].state == P.FAILED and 1 not in w.live.runners
    assert (1, "failed", 'ValueError: bad shape (File "model.py", line 3)') in w.book.events


def redis_away_fails_the_step_and_the_next_goes_on(w: World) -> None:
    w.book.submit(1, max_workers=2)
    w.settle()
    before = w.store(1).generation()
    w.away = True
    with pytest.raises(REDIS_DOWN):
        w.step()
    w.away = False
    w.settle(rounds=2)
    assert w.members() == {1: 2} and w.store(1).generation() == before


def each_group_s_jobs_train_on_its_own_slots(w: World) -> None:
    """Resource groups: slots 0-2 are "big" by a rule on their host's name; a
    job of "big" never lands elsewhere, nor a job of "default" on a big slot."""
    w.slots[:3] = [replace(slot, host="big") for slot in w.slots[:3]]
    w.book.teams = Tenancy(rules=(parse_rule("big", "host=big"),))
    w.book.submit(1, max_workers=8, group="big")
    w.book.submit(2, max_workers=8)
    w.settle()
    assert w.members() == {1: 3, 2: 5}
    big = {s.slot_id for s in w.slots[:3]}
    assert set(w.live.runners[1].members()) == big
    assert big.isdisjoint(w.live.runners[2].members())
    assert w.live.allocations().groups == {"big": 3, "default": 5}


def a_guarantee_is_taken_back_from_a_borrower_in_place(w: World) -> None:
    """Team "v" (guarantee 6) is idle: "n" borrows all 8 slots. When v's job comes, n
    shrinks at once, in place (its remaining learner is one it had): v gets its 6 and half
    of the 2 left by weight, n the other; the team shares stream says so."""
    teams = (Team("v", guarantee=6, name="vision"), Team("n", name="nlp"))
    w.book.teams = Tenancy(teams=teams)
    w.book.submit(1, max_workers=8, owner="bob", team="n")
    w.settle()
    assert w.members() == {1: 8}
    before = set(w.live.runners[1].members())
    w.book.submit(2, max_workers=8, owner="alice", team="v")
    w.settle()
    assert w.members() == {1: 1, 2: 7}
    assert set(w.live.runners[1].members()) < before
    reason = [e[2] for e in w.book.events if e[0] == 2 and e[1] == "scaled"][-1]
    assert "guarantee 6" in reason, reason
    # The borrower's shrink records its team's slots then beside its new entitlement: a
    # reclaim, as the Usage page counts them (edtweb/tenancy/waits.py).
    (shrunk,) = [d for e, d in zip(w.book.events, w.book.details, strict=True)
                 if e[:2] == (1, "scaled") and d["target"] < d["current"]]  # fmt: skip
    assert (shrunk["team_held"], shrunk["team_entitlement"]) == (8, 1.0), shrunk
    w.live.shares.at = 0.0  # the stream's one entry a second: not waited out here
    w.step()
    last = w.client.xrevrange(SHARES_KEY, count=1)[0][1]
    entry = json.loads(last["data"])["groups"]["default"]
    assert entry["capacity"] == 8 and entry["teams"]["v"]["entitled"] == 7.0, entry
    assert entry["teams"]["n"]["held"] + entry["teams"]["v"]["held"] == 8


def a_user_with_three_jobs_gets_one_share_not_three(w: World) -> None:
    w.book.submit(1, max_workers=8, owner="alice")
    w.book.submit(2, max_workers=8, owner="alice")
    w.book.submit(3, max_workers=8, owner="alice")
    w.book.submit(4, max_workers=8, owner="bob")
    w.settle()
    members = w.members()
    assert members[4] == 4 and members[1] + members[2] + members[3] == 4, members


# Goodput mode (docs/architecture.md, "Goodput mode"): the batches the policy picks reach
# the generations. The job's train records are made from a known throughput model, which
# four timings determine exactly (scheduler/policies/throughput_fit.py).
TRUE_MODEL = ThroughputModel(0.01, 0.0005, 0.05, 0.01)


def goodput_records(gns: float, timings: list[tuple[int, int]], batch: int) -> list[dict[str, Any]]:
    """Train records as a goodput-mode job's rank 0 writes them: three iterations at each
    (workers, batch) of ``timings``, timed by TRUE_MODEL, the newest at ``batch``."""
    records, step = [], 0
    for workers, at in [*timings, (2, batch)]:
        for _ in range(3):
            step += 1
            seconds = TRUE_MODEL.iteration(workers, at)
            records.append({"step": step, "workers": workers, "batch": at, "gns": gns,
                            "samples_per_s": at / seconds, "base_batch": 64})  # fmt: skip
    return records


def a_goodput_jobs_batch_goes_with_its_generations(w: World) -> None:
    """A goodput-mode job (base batch 64, range 64..4096) beside a fixed-batch one, each of
    max 2 on 8 slots. Not measured yet: its base batch, named by its first generation.
    Measured (a large noise scale): the policy's batch on the same 2 slots is published
    with a new generation of the same members, no further than goodput.EXPLORE times the
    largest batch timed (the fit's best lies beyond it); the fixed-batch job's generations
    stay as they were and name no batch. Timed there, a best batch beyond it that is less
    than BATCH_CHANGE_GAIN better starts no generation."""
    w.live = LiveScheduler(w.ports, goodput.POLICY)
    assert w.live.measures.fits is not None
    w.live.measures.fits.measurements.ttl = w.live.records.cache.ttl = 0.0  # read at every step
    w.book.submit(1, max_workers=2, batch=64, batch_range=(64, 4096))
    w.book.submit(2, max_workers=2, batch=64)
    w.settle()
    assert w.members() == {1: 2, 2: 2}
    goodput_job, fixed = w.store(1), w.store(2)
    gen, fixed_gen = goodput_job.generation(), fixed.generation()
    assert goodput_job.generation_batch(gen) == 64  # the fallback: its base batch
    members = goodput_job.members(gen)
    timings = [(1, 64), (2, 64), (4, 64), (2, 256)]
    w.book.records[1] = goodput_records(2000.0, timings, 64)
    chosen = goodput.EXPLORE * 256
    unbounded, _ = best_batch(TRUE_MODEL, 2, 64, 4096, rounded_gns(2000.0), 64)
    assert unbounded > chosen and best_batch(TRUE_MODEL, 2, 64, chosen, rounded_gns(2000.0),
                                             64)[0] == chosen  # fmt: skip
    w.settle()
    assert w.members() == {1: 2, 2: 2}
    assert goodput_job.generation() == gen + 1 and goodput_job.members(gen + 1) == members
    assert goodput_job.generation_batch(gen + 1) == chosen
    assert ("global batch " + str(chosen)) in " ".join(e[2] for e in w.book.events if e[0] == 1)
    # Timed at it, with a little more noise: the best batch within the new bound, not 5 %
    # better than the present one.
    gns = rounded_gns(2200.0)
    nearby, _ = best_batch(TRUE_MODEL, 2, 64, goodput.EXPLORE * chosen, gns, 64)
    ratio = goodput_of(TRUE_MODEL, 2, nearby, gns, 64) / goodput_of(TRUE_MODEL, 2, chosen, gns, 64)
    assert nearby != chosen and 1 < ratio < BATCH_CHANGE_GAIN, (nearby, chosen, ratio)
    w.book.records[1] = goodput_records(2200.0, timings, chosen)
    w.settle()
    assert w.live.measures.fits.of(1, 0, 0).timed_batch == chosen  # the bound moved on
    assert goodput_job.generation() == gen + 1
    assert fixed.generation() == fixed_gen and fixed.generation_batch(fixed_gen) == 0
    assert w.live.runners[2].state.batch == 0


ROWS = [
    a_goodput_jobs_batch_goes_with_its_generations,
    one_job_alone_takes_every_slot,
    each_group_s_jobs_train_on_its_own_slots,
    a_guarantee_is_taken_back_from_a_borrower_in_place,
    a_user_with_three_jobs_gets_one_share_not_three,
    the_seeds_two_jobs_share_the_slots_half_and_half,
    a_dead_joiners_slot_is_sent_a_learner_again,
    a_lost_member_is_replaced_from_the_survivors,
    a_lost_slots_learner_is_replaced_elsewhere,
    a_failure_of_a_stale_generation_changes_nothing,
    the_user_codes_error_fails_the_job,
    redis_away_fails_the_step_and_the_next_goes_on,
]


@pytest.fixture(scope="module")
def table_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the table's rows: each row empties it first."""
    folder, password = tmp_path_factory.mktemp("table-redis"), "test-" + secrets.token_hex(8)
    server = RedisServer(folder, appendonly=False, password=password, dies_with_parent=True)
    yield server.start()
    server.stop()


@pytest.fixture
def world(table_redis: RedisServer) -> Iterator[World]:
    w = World(table_redis, 8)
    yield w
    w.client.close()


@pytest.mark.parametrize("order", ["forward", "reversed"])
@pytest.mark.parametrize("row", ROWS, ids=[row.__name__ for row in ROWS])
def test_the_live_loop_table(world: World, row: Callable[[World], None], order: str) -> None:
    world.book.reverse = order == "reversed"
    row(world)
