"""The live scheduler's decisions: policy and placement over the active jobs and the slots
alive now, applied through one ``JobRunner`` per job (docs/architecture.md, "Scheduling
contract"). Called by the scheduler service on every wake-up and tick, while it is active.
The jobs' records are reached through ``Ports`` (``ports.py``) alone.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from protocol import redis_acl
from protocol.connection import REDIS_DOWN
from protocol.slots import SlotInfo
from scheduler.dispatch import Dispatches
from scheduler.groups import Rule, group_of
from scheduler.live.idle import IdleWatch
from scheduler.live.job import JobRunner
from scheduler.live.moving import Mover
from scheduler.live.ports import RUNNING, SUSPENDED, JobRow, Ports, Tenancy
from scheduler.live.shares import SharesLog
from scheduler.live.snapshot import BY_SERVICE, Inputs, Measures, SnapshotBuilder, per_host
from scheduler.metrics import DECISION_SECONDS, STEP_SECONDS
from scheduler.placement import Placement, Slot, place
from scheduler.policies import Decision, JobView, decide, goodput, idle, slots_by_team
from scheduler.store import (
    Allocation,
    AllocationRecord,
    ObservedJobStore,
    Store,
    observe,
    read_leases,
    take_changed,
)

log = logging.getLogger("edt.scheduler")

# Seconds between two looks at the learners' leases: a lapse is judged after LEASE_GRACE
# (2 s) without one, so looking more often than this tells nothing sooner worth its cost.
LEASE_LOOK_EVERY = 0.25
WAIT_EVENTS = 100  # "waiting" events one decision writes at most


def standing(decisions: dict[str, Decision]) -> dict[int, tuple[int, str]]:
    """Every job's place among its group's waiting jobs (0: given slots) and the reason in
    its policy's words (docs/architecture.md, "Scheduling contract")."""
    return {int(k): v for d in decisions.values() for k, v in d.standing().items()}


class LiveScheduler:
    """Each step reads again, in one script, the jobs that Redis' changed-jobs set names
    (their learners wrote since), and every 0.25 s the learners' leases in one ``MGET``;
    it decides, places, and ticks only the runners whose inputs changed. A step's
    events are written in one transaction and its page pushes sent once, merged, at its
    end (``JobBook.batched``); its learner starts go out together (``Dispatches``)."""

    def __init__(self, ports: Ports, policy: str = "fairshare") -> None:
        self.ports = ports
        self.book = ports.book
        self.policy = policy
        self.runners: dict[int, JobRunner] = {}
        # what the policy reads beside the rows (curves, goodput fits), from each job's
        # train records, read once for them and for moves (snapshot.py: the previews' too)
        self.measures = Measures(policy, self.book.train_records)
        self.records = self.measures.records
        self.capacity = 0  # usable slots at the last decision
        self.announced: dict[str, str] = {}  # job -> the last allocation change recorded
        self.redis_run: str | None = None  # the Redis server whose ACL users we granted
        self.dirty: set[int] = set()  # runners to tick: their inputs changed since
        self.stale: set[int] = set()  # jobs to read again from Redis at the next step
        self.dispatches: Dispatches | None = None
        # Slot-seconds of training per job (policies by attained service): None until read
        # from the last allocation record, so a new scheduler goes on where the last stood.
        self.attained: dict[int, float] | None = None
        self.stepped_at = 0.0
        self.leases_at = 0.0  # when the learners' leases were last looked at
        self.created: dict[int, datetime] = {}  # job -> its submission time (JobBook.schedulable)
        self.decided: tuple[object, ...] | None = None  # the inputs of the last decision
        self.snapshots = SnapshotBuilder()
        self.slots: dict[str, Slot] = {}  # slot id -> the placement's Slot, made once
        self.unapplied: tuple[str, float] | None = None  # why the last decision was not, since
        self.rules: tuple[Rule, ...] = ()  # the resource groups' rules the slots were sorted by
        self.slot_groups: dict[str, str] = {}  # slot id -> its group by those rules
        self.shares = SharesLog(ports.redis)
        self.group_capacity: dict[str, int] = {}  # usable slots per group at the last step
        self.mover = Mover(self.book, self.records, ports.move_every)  # learner moves (moving.py)
        # job -> (place among its group's waiting jobs, 0 if given slots; the policy's reason)
        self.standing: dict[int, tuple[int, str]] = {}
        self.decisions: dict[str, Decision] = {}  # the last decision, per resource group
        self.idle = IdleWatch(ports.idle_rule, self.book)  # idle jobs (policies/idle.py)

    def step(self, alive: list[SlotInfo]) -> bool:
        """One decision and one protocol step for every job; True when a job wants another
        step soon (it changed phase, or a failure waits out its grace): otherwise the next
        comes with an event (READY, adopted, exit, failure, finished, submit...) or the
        slow tick."""
        with STEP_SECONDS.time(), collector_paused(), self.book.batched():
            return self._step([s for s in alive if s.alive])

    def _step(self, alive: list[SlotInfo]) -> bool:
        client = self.ports.redis()
        if self.dispatches is None:
            self.dispatches = Dispatches(client, self.ports.celery)
        jobs = {job.pk: job for job in self.book.schedulable(self.created)}
        self._sync_runners(jobs)
        self._regrant(client, self._take(client))
        look = time.monotonic() - self.leases_at >= LEASE_LOOK_EVERY
        self._observe(client, look)
        self.measures.forget(set(jobs))
        holding = {pk: r.holding() for pk, r in self.runners.items()}
        tenancy = self.book.tenancy()
        usable = self._usable(alive, holding)
        self.capacity = len(usable)
        groups = self._groups(alive, usable, holding, jobs, tenancy)
        self.group_capacity = {group: len(slots) for group, slots in groups.items()}
        held = {pk: len(slots) for pk, slots in holding.items()}
        attained = self._attained(client, jobs) if self.policy in BY_SERVICE else {}
        asked = {pk: r.state.batch for pk, r in self.runners.items() if r.state.batch}
        measured = self.measures.inputs(jobs.values(), attained, per_host(alive), asked)
        measured = replace(measured, idle=self._idle(client, alive, jobs, tenancy))
        # The same jobs, slots, holdings, tenancy and idle jobs held as the last decision,
        # carried out: the same decision again, with nothing to apply (not for inputs that
        # move with time).
        same = None if measured.moving() else (list(jobs.values()), groups, held, tenancy,
                                               measured.idle)  # fmt: skip
        if same is None or same != self.decided:
            with DECISION_SECONDS.time():
                applied = self._decide(jobs, groups, held, holding, tenancy, measured)
            if applied:
                self.decided, self.unapplied = same, None
        self.shares.flush()  # an entry that waited out the last one's second
        self.dirty.update(self.mover.step(self.runners, jobs, groups))
        soon = self._advance({s.slot_id for s in alive}, look)
        self.dispatches.send()  # what the ticks started (a retry whose delay is over)
        return soon

    def _decide(self, jobs: dict[int, JobRow], groups: dict[str, list[Slot]],
                held: dict[int, int], holding: dict[int, list[str]], tenancy: Tenancy,
                inputs: Inputs) -> bool:  # fmt: skip
        """Decide by the policy in each resource group and carry the decisions out; False
        when they could not be (said by :meth:`_not_applied`, and tried again at the next
        step)."""
        self.decided = None
        capacities = {group: len(slots) for group, slots in groups.items()}
        snapshots = self.snapshots.build_groups(jobs.values(), capacities, held, tenancy, inputs)
        decisions = {group: idle.explained(decide(snapshot, self.policy),
                                           {str(pk): why for pk, why in inputs.idle.items()})
                     for group, snapshot in snapshots.items()}  # fmt: skip
        self.decisions, self.standing = decisions, standing(decisions)
        if len(self.announced) > 2 * len(jobs) + WAIT_EVENTS:  # jobs that ended waiting
            self.announced = {k: v for k, v in self.announced.items() if int(k) in jobs}
        assert self.dispatches is not None
        try:
            self._apply(jobs, groups, decisions, holding, inputs.per_host)
        except (*REDIS_DOWN, *self.book.AWAY):
            raise  # away: the step fails and is retried with backoff (service.py)
        except Exception as exc:  # said, and the jobs go on
            self._not_applied(exc)
            return False
        finally:
            self.dispatches.send()
        self.shares.offer(decisions)
        return True

    def _not_applied(self, exc: Exception) -> None:
        """A decision that could not be carried out (the slots the runners hold do not
        add up, say) is tried again at the next step; meanwhile every runner still ticks,
        so that jobs go on training, settle and end, which is also how such a state
        clears. Not ticking them would stop every job for one job's inconsistency. Said
        once with its traceback, then once a minute while it lasts."""
        now, message = time.monotonic(), f"{type(exc).__name__}: {exc}"
        if self.unapplied is None or self.unapplied[0] != message:
            log.exception("the decision could not be applied (tried again each step; "
                          "every job's learners go on meanwhile)")  # fmt: skip
            self.unapplied = (message, now)
        elif now - self.unapplied[1] >= 60:
            log.error("the decision still cannot be applied: %s", message)
            self.unapplied = (message, now)

    def allocations(self) -> AllocationRecord:
        """The allocation record: the slots each job holds, the usable capacity and the
        policy of the last decision (written to Redis by the scheduler service alone)."""
        jobs = {pk: Allocation(tuple(r.members()), tuple(r.joiners()))
                for pk, r in self.runners.items() if r.holding()}  # fmt: skip
        return AllocationRecord(jobs, self.capacity, self.policy, dict(self.attained or {}),
                                dict(self.group_capacity), self.standing,
                                self.idle.record())  # fmt: skip

    def _idle(self, client: Any, alive: list[SlotInfo], jobs: dict[int, JobRow],
              tenancy: Tenancy) -> dict[int, str]:  # fmt: skip
        """The idle jobs to hold at their minimum, each with its reason, after a look at
        the running jobs' slots (docs/architecture.md, "Idle jobs"); a new scheduler goes
        on from the last record's idle jobs."""
        if self.idle.resumed is None and not self.idle.looked:
            self.idle.resume(Store(client).allocations().idle)
        members = {pk: r.members() for pk, r in self.runners.items()}
        return self.idle.look(alive, members, jobs, tenancy, time.time())

    def _attained(self, client: Any, jobs: dict[int, JobRow]) -> dict[int, float]:
        """Each active job's attained service: what the last record said, plus its members
        times the time since the last step."""
        now = time.monotonic()
        if self.attained is None:
            self.attained = dict(Store(client).allocations().attained)
        else:
            elapsed = now - self.stepped_at
            for pk, runner in self.runners.items():
                members = len(runner.members())
                if members:
                    self.attained[pk] = self.attained.get(pk, 0.0) + members * elapsed
        self.stepped_at = now
        self.attained = {pk: v for pk, v in self.attained.items() if pk in jobs}
        return self.attained

    def _runners(self, jobs: list[JobRow], resume: bool) -> dict[int, JobRunner]:
        """New runners for ``jobs``, their stores observed together first."""
        client = self.ports.redis()
        stores = {job.pk: ObservedJobStore(client, str(job.pk)) for job in jobs}
        observe(client, list(stores.values()))
        paths = self.book.paths([job.pk for job in jobs])
        return {job.pk: JobRunner.celery(job, self.ports, resume, stores[job.pk],
                                         self.dispatches, paths[job.pk])
                for job in jobs}  # fmt: skip

    def _sync_runners(self, jobs: dict[int, JobRow]) -> None:
        for pk in [pk for pk in self.runners if pk not in jobs]:  # stopped or failed elsewhere
            self.runners[pk].kill_all()
            self._drop(pk)
        taken = [j for pk, j in jobs.items() if pk not in self.runners and j.state == RUNNING]
        if taken:  # taking over from another scheduler
            self.runners.update(self._runners(taken, resume=True))
            self.dirty.update(j.pk for j in taken)

    def _take(self, client: Any) -> str:
        """Take the jobs marked changed since the last step, to be read again (at this step
        or, if it fails on the way, the next); returns Redis' ``run_id``. If Redis' answer
        is lost (the marks taken, maybe), every job is read again."""
        try:
            changed = take_changed(client)
        except REDIS_DOWN:
            self.stale.update(self.runners)
            raise
        # Ids only a learner could have written wrongly are not the scheduler's concern.
        self.stale.update(int(pk) for pk in changed.ids if pk.isdigit())
        return changed.redis_run

    def _regrant(self, client: Any, run_id: str) -> None:
        """A restarted Redis has forgotten its ACL users (``ACL SETUSER`` is not in the
        append-only file): grant every running job's again at once, before its learners'
        leases lapse. Redis' ``run_id`` (read with the changed jobs) tells a restart. Every
        job is observed afresh then. On the first step, the jobs taken over from another
        scheduler are granted (this one's own are granted by the slots that start them), and
        the users of jobs that hold no slot any more are deleted (those an older EDT named
        without the database too): a scheduler stopped before it could (Ctrl-C of ``make
        run``) leaves no credential behind."""
        if run_id == self.redis_run:
            return
        ids = [str(pk) for pk in self.runners]
        redis_acl.grant_all(client, self.ports.redis_url, ids, self.ports.secret)
        if self.redis_run is None:
            stale = {u: j for u, j in redis_acl.owned_users(client).items() if j not in ids}
            redis_acl.delete_users(client, sorted(stale))
            if stale:
                log.info("deleted the Redis users of %d job(s) that hold no slot",
                         len(set(stale.values())))  # fmt: skip
        if self.redis_run is not None:
            log.info("Redis restarted: granted the ACL users of %d jobs again", len(self.runners))
            self.stale.update(self.runners)
        self.redis_run = run_id

    def _observe(self, client: Any, look: bool) -> None:
        """Read again, in one script, the jobs taken as changed (and any a failed step or a
        Redis restart left to read), their runners to be ticked; when it is time to
        ``look``, every pending learner's lease in one ``MGET``."""
        stale = [pk for pk in self.stale if pk in self.runners]
        observe(client, [runner_store(self.runners[pk]) for pk in stale])
        self.stale.clear()
        self.dirty.update(stale)
        if look:
            runners = list(self.runners.values())
            pending = [runner.pending_slots() for runner in runners]
            read_leases(client, [runner_store(runner) for runner in runners], pending)

    def _usable(self, alive: list[SlotInfo], holding: dict[int, list[str]]) -> list[Slot]:
        """Alive slots, less those where a leaving learner has not exited yet."""
        held = {s for slots in holding.values() for s in slots}
        busy: set[str] = set()
        for pk, runner in self.runners.items():
            busy.update(runner.busy(holding[pk]))  # leavers, or learners held by none
        busy -= held
        return [self._slot(s) for s in alive if s.slot_id not in busy]

    def _slot(self, info: SlotInfo) -> Slot:
        slot = self.slots.get(info.slot_id)
        if slot is None:  # an id names one host and index for ever
            slot = self.slots[info.slot_id] = Slot(info.slot_id, info.host, info.index)
        return slot

    def _apply(self, jobs: dict[int, JobRow], groups: dict[str, list[Slot]],
               decisions: dict[str, Decision], holding: dict[int, list[str]],
               per_host: int = 0) -> None:  # fmt: skip
        """Carry the decisions out: each job's slots placed, its runner given its target,
        the slots it gains and loses and, in goodput mode, its batch: with a change of
        slots always, alone only where it pays (``goodput.batch_change_pays``: a new
        generation of the same members costs a pause)."""
        targets: dict[str, int] = {}
        batches: dict[str, int] = {}
        views: dict[str, JobView] = {}
        joined: dict[str, tuple[str, ...]] = {}
        left: dict[str, tuple[str, ...]] = {}
        for group, decision in decisions.items():
            mine = {pk: holding[pk] for pk in holding if str(pk) in decision.targets}
            placement = self._place(groups.get(group, []), mine, decision)
            joined.update(placement.joined)
            left.update(placement.left)
            targets.update(decision.targets)
            if decision.batches:
                batches.update(decision.batches)
                views.update((v.id, v) for v in decision.snapshot.jobs if v.id in decision.batches)
            self._announce(decision, group)
        starting = [j for pk, j in jobs.items() if pk not in self.runners and targets.get(str(pk))]
        if starting:
            self._start(starting)
        for pk, runner in self.runners.items():
            key = str(pk)
            target = targets.get(key, 0)
            came, went = joined.get(key, ()), left.get(key, ())
            batch = batches.get(key, 0)
            moved = target != runner.target or came or went
            if moved or (batch and goodput.batch_change_pays(views[key], target, batch, per_host)):
                runner.apply(target, came, went, batch)
                self.dirty.add(pk)

    def _announce(self, decision: Decision, group: str) -> None:
        """A "scaled" event for each job whose count the decision changes (once per change:
        the same one, still being carried out, is not said again); a "waiting" event with
        its place and reason for a job the first time this scheduler leaves it waiting (at
        most WAIT_EVENTS a decision: a new scheduler facing thousands of queued jobs writes
        a few, and the allocation record holds every one's)."""
        views = {view.id: view for view in decision.snapshot.jobs}
        self._announce_waiting(decision, views, group)
        if not decision.reasons:
            return
        summary = decision.summary()  # the decision's totals once; each event its job's slice
        held: dict[str, int] | None = None
        for key, reason in decision.reasons.items():
            if self.announced.get(key) == reason:
                continue
            self.announced[key] = reason
            if held is None and decision.teams:  # each team's slots before it, once
                held = slots_by_team(decision.snapshot, {v.id: v.current for v in views.values()})
            data = decision.job_inputs(views[key], summary, held)
            self.book.record_event(int(key), "scaled", reason, **data)
            log.info("job %s: %s", key, reason)

    def _announce_waiting(self, decision: Decision, views: dict[str, JobView], group: str) -> None:
        said = 0
        for key, target in decision.targets.items():
            if target or views[key].current or key in self.announced or said >= WAIT_EVENTS:
                continue
            place, reason = self.standing.get(int(key), (0, ""))
            self.announced[key] = reason
            self.book.record_event(int(key), "waiting", reason,
                                   position=place, group=group)  # fmt: skip
            said += 1

    def _groups(self, alive: list[SlotInfo], usable: list[Slot], holding: dict[int, list[str]],
                jobs: dict[int, JobRow], tenancy: Tenancy) -> dict[str, list[Slot]]:  # fmt: skip
        """The usable slots by resource group (their first matching rule's,
        scheduler/groups.py). A slot held by a job of another group (the rules changed
        under it) is in neither: its job moves off it, and it joins its group once free."""
        if tenancy.rules != self.rules:
            self.rules, self.slot_groups = tenancy.rules, {}
        for info in alive:
            if info.slot_id not in self.slot_groups:
                self.slot_groups[info.slot_id] = group_of(info, self.rules)
        holder = {slot: pk for pk, slots in holding.items() for slot in slots}
        groups: dict[str, list[Slot]] = {}
        for slot in usable:
            group = self.slot_groups[slot.id]
            pk = holder.get(slot.id)
            if pk is not None and pk in jobs and jobs[pk].group != group:
                continue
            groups.setdefault(group, []).append(slot)
        return groups

    def _place(self, usable: list[Slot], holding: dict[int, list[str]],
               decision: Decision) -> Placement:  # fmt: skip
        """Sticky placement (:func:`place`) of the jobs whose slots move: those whose count
        changes and those holding a slot that is not usable any more. Every other job keeps
        exactly its slots, so they are simply not free: the same placement as over every
        job, without passes over thousands of settled ones. Slots held twice: the full
        placement, which says so."""
        held = set().union(*holding.values())
        if len(held) != sum(map(len, holding.values())):
            return place(usable, {str(pk): s for pk, s in holding.items()}, decision.targets)
        moving = set(decision.reasons)
        gone = held.difference(slot.id for slot in usable)
        if gone:
            moving.update(str(pk) for pk, slots in holding.items() if not gone.isdisjoint(slots))
        current = {key: holding[int(key)] for key in moving if int(key) in holding}
        settled = held.difference(*current.values())
        free = [slot for slot in usable if slot.id not in settled]
        return place(free, current, {key: decision.targets.get(key, 0) for key in moving})

    def _start(self, jobs: list[JobRow]) -> None:
        """Runners for jobs that get slots and had none."""
        runners = self._runners(jobs, resume=False)
        for job in jobs:
            if job.state == SUSPENDED:
                runners[job.pk].jobs.reset_run()  # the new learners load the latest checkpoint
                self.book.record_event(job.pk, "resuming", "a slot is free: resuming")
        self.runners.update(runners)
        self.dirty.update(runners)

    def _advance(self, alive: set[str], look: bool) -> bool:
        """Judge the leases just read (when it was time to ``look``); tick the runners whose
        inputs changed (a tick that changed nothing and waits on no clock leaves its runner
        quiet until they do). True when a step soon would move a job on: one ended (its
        slots are free for the others), changed phase, or waits out a failure's grace."""
        if look:
            self.leases_at = time.monotonic()
            for pk, runner in self.runners.items():
                if runner.look(alive):
                    self.dirty.add(pk)
        self.dirty &= self.runners.keys()
        soon = False
        for pk in sorted(self.dirty):
            runner = self.runners[pk]
            before = runner.state
            if runner.tick(alive, look=False) is not None:
                self._drop(pk)
                soon = True
                continue
            soon = soon or runner.soon()
            if runner.state == before and not runner.restless():
                self.dirty.discard(pk)
        return soon

    def _drop(self, pk: int) -> None:
        """The job holds no slot any more: its learners' Redis user goes too."""
        runner = self.runners.pop(pk)
        self.announced.pop(str(pk), None)
        self.dirty.discard(pk)
        redis_acl.revoke(runner.jobs.r, str(pk))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector waits for the end of the block (a whole step, its
    event writes and pushes included). A step's many short-lived objects (rows, views,
    slots: tens of thousands at 10k jobs) are freed by reference counting within it;
    collected during it, they would be promoted to the old generation and trigger full
    collections, each a scan of every runner (about 0.2 s at 10k jobs). After it, the
    collector finds only what outlives the step (after a cold start, every new runner)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def runner_store(runner: JobRunner) -> ObservedJobStore:
    assert isinstance(runner.jobs, ObservedJobStore)
    return runner.jobs
