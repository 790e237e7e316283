"""The per-job controller of the elastic protocol (docs/architecture.md, "Elastic training
protocol"): one frozen state, and pure functions that take it with one observation of the
job and return the next state and the actions to carry out.

It starts joiners first and publishes the generation that includes them only once they are
READY, shrinks at once, moves a learner to another slot in one generation (the new one
joins with the state as the old one leaves, once the new one is READY), replaces a
generation after a learner fails, starts over from the latest checkpoint when every
learner is gone, and moves the job through its phases (``scheduler/phases.py``). It judges
from their leases whether the learners it sent are still there. How learners are started
and the actions carried out is the executor's business (``scheduler/live/job.py``): Celery
tasks on slot queues for the live scheduler, local processes for the drive command. At
most one published generation is waiting to be adopted at any time.

Nothing here reads a clock, Redis or a process: what the step needs is in its ``Seen``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from protocol.exits import Exit, RunResult
from protocol.jobstore import Progress
from protocol.retry import doubling
from scheduler.phases import FINAL, Facts, JobPhase, Transition, advance

# The job rows' states a transition moves the job to (``Enter``), from the one list
from scheduler.policies.model import COMPLETED, FAILED, RUNNING, SUSPENDED

# How long a silent member may lag the peers that reported a failed collective before it is
# judged the culprit: their timeouts run from each one's entry into the collective, and on a
# loaded host a healthy learner entered over a second later (1.0 s dropped one beside a
# frozen learner in test_input's kill-then-freeze run under load).
FAILURE_GRACE_SECONDS = 3.0
LEASE_GRACE = 2.0  # seconds a lapsed lease must stay missing, watched without a gap
START_GRACE = 180.0  # seconds a dispatched learner has to take its first lease
WATCH_GAP = 3.0  # seconds between two looks beyond which the watch starts over (an outage)
# Learners that exit before joining are sent again after a delay doubling from FIRST_RETRY
# up to LAST_RETRY; after START_FAILURES of them in a row with no step trained in between,
# the job fails with the last one's error (a crash loop: a Redis that refuses them, a file
# gone, the platform's own import failing), instead of sending learners for ever.
FIRST_RETRY = 1.0
LAST_RETRY = 30.0
START_FAILURES = 5


NO_PROGRESS = Progress("", 0, False, None)


# What one look at the job saw ----------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One observation of the job's shared state (``protocol/jobstore.py``) and the clocks."""

    generation: int = 0
    adopted: int = 0
    ready: frozenset[str] = frozenset()
    failures: tuple[Mapping[str, Any], ...] = ()
    errors: tuple[Mapping[str, Any], ...] = ()
    exits: Mapping[str, RunResult] = field(default_factory=dict)
    crashes: Mapping[str, str] = field(default_factory=dict)  # slot -> the last error printed
    checkpoint: int = 0
    progress: Progress = NO_PROGRESS
    now: float = 0.0  # monotonic seconds
    wall: float = 0.0  # Unix time, for the events


# The state --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Learners:
    """The learners this controller sent: the token of the last one per slot, when it was
    sent, and what watching their leases has shown (liveness is observed, not reported)."""

    tokens: Mapping[str, str] = field(default_factory=dict)
    sent_at: Mapping[str, float] = field(default_factory=dict)
    leased: frozenset[str] = frozenset()  # slots whose current learner has held its lease
    missing_since: Mapping[str, float] = field(default_factory=dict)
    gone: frozenset[str] = frozenset()  # judged gone by observation
    looked_at: float = 0.0


@dataclass(frozen=True)
class Control:
    """Everything the controller knows of one job. Two equal states on an unchanged
    observation make the same step: a loop may leave a job quiet until one changes."""

    phase: JobPhase = JobPhase.WAITING
    target: int = 0  # slots the last decision gives it
    # Goodput mode: the global batch the last decision asked for (0: none asked, the
    # learners keep theirs), and the one the latest generation published carried
    batch: int = 0
    published_batch: int = 0
    members: tuple[str, ...] = ()  # the current generation, in rank order
    joining: tuple[str, ...] = ()  # learners started and not admitted yet
    started: frozenset[str] = frozenset()  # slots where a learner of this job was started
    # Members placed elsewhere: their slots are another job's from that decision on, though
    # they train here until the shrink's generation (which waits for the job to settle).
    leaving: frozenset[str] = frozenset()
    # Moves under way: (joiner, member) pairs, the member leaving in the generation that
    # admits the joiner (docs/architecture.md, "Learner moves"); until then it trains on.
    moving: tuple[tuple[str, str], ...] = ()
    step: int = 0  # the learners' step, as their latest record says
    done: bool = False  # training finished and its records are stored
    tail: str = ""  # the stream id of the learners' latest record seen
    over: bool = False  # the learners said training is over: no learner joins any more
    failure_since: float | None = None  # a failure is being handled, since
    handled_failures: int = 0  # failure reports already acted on
    moved: bool = False  # the last tick took a transition
    learners: Learners = Learners()
    # How long a member may stay silent after a peer died: blocked in a collective on the
    # dead peer (its host cut off: nothing resets the connection), it reports the failure
    # only when the collective times out.
    waiting_on_dead: float = FAILURE_GRACE_SECONDS
    # Learners that exited before joining, in a row with no step in between; the start of
    # the next one waits until ``retry_at``, on the slots ``deferred`` (still the job's).
    start_failures: int = 0
    retries: int = 0  # failed starts since a learner last joined: the retry delay's exponent
    retry_at: float = 0.0
    deferred: tuple[str, ...] = ()
    last_crash: str = ""  # why the last of them failed
    max_start_failures: int = START_FAILURES


# The actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Send a learner to ``slot`` carrying ``token`` (a READY left there no longer counts)."""

    slot: str
    token: str


@dataclass(frozen=True)
class Kill:
    slot: str
    signal: int = signal.SIGKILL


@dataclass(frozen=True)
class Publish:
    """Publish the next generation, ``generation``, of ``members`` (in rank order), with
    the global batch it trains at (goodput mode; 0: the learners keep theirs)."""

    members: tuple[str, ...]
    generation: int
    batch: int = 0


@dataclass(frozen=True)
class RequestStop:
    """Learners checkpoint and leave; those still waiting to join go home."""


@dataclass(frozen=True)
class Event:
    """A line of the job's timeline: ``kind`` with its data (step and time included)."""

    kind: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class Note:
    """A line of the job's timeline in words alone."""

    kind: str
    message: str


@dataclass(frozen=True)
class Enter:
    """Move the job's record to ``state`` (RUNNING, COMPLETED, SUSPENDED or FAILED)."""

    state: str
    message: str = ""  # FAILED: why
    checkpoint: int = 0  # SUSPENDED: the step it resumes from


Action = Start | Kill | Publish | RequestStop | Event | Note | Enter
Tokens = Callable[[], str]


# Reading the state ------------------------------------------------------------------------------


def exited(c: Control, seen: Seen, slot: str) -> bool:
    """The learner last sent to ``slot`` has ended, or is judged gone."""
    tokens = c.learners.tokens
    if slot not in tokens or slot in c.learners.gone:
        return True
    result = seen.exits.get(slot)
    return result is not None and result.token == tokens[slot]


def exit_code(c: Control, seen: Seen, slot: str) -> int | None:
    """The reported exit status of the learner last sent to ``slot``, if it reported."""
    result = seen.exits.get(slot)
    if slot in c.learners.tokens and result is not None and result.token == c.learners.tokens[slot]:
        return result.code
    return None


def pending(c: Control, seen: Seen) -> list[str]:
    """Slots where the learner last sent has not ended (as far as is known)."""
    return [s for s in c.learners.tokens if not exited(c, seen, s)]


def occupied(c: Control, seen: Seen) -> set[str]:
    """Slots where a learner of this job still runs (leavers included)."""
    return {s for s in c.started if not exited(c, seen, s)}


def holds(c: Control) -> bool:
    """A job being suspended holds no slot: its slots go to others once its learners are out."""
    return c.phase not in (JobPhase.SUSPENDING, *FINAL)


def members(c: Control) -> list[str]:
    """Its current generation, less those placed elsewhere that have yet to leave."""
    return [s for s in c.members if s not in c.leaving] if holds(c) else []


def joiners(c: Control) -> list[str]:
    """Learners started and not admitted yet, and the slots waiting for a retry's delay."""
    return [*c.joining, *c.deferred] if holds(c) else []


def first_error(seen: Seen) -> str | None:
    """The user's code failed: its message and traceback line, for the job's record."""
    if seen.errors:
        first = seen.errors[0]
        return f"{first['message']} ({first['trace']})" if first["trace"] else first["message"]
    failed = [s for s, result in seen.exits.items() if result.user_code_failed]
    return f"the learner on {failed[0]} failed; see its log" if failed else None


def movable(c: Control, seen: Seen) -> bool:
    """Its learners could be moved now: it trains on two or more, at its allocation, with
    no change under way (no joiner, leaver, move or failure, its generation adopted)."""
    return (c.phase is JobPhase.TRAINING and len(c.members) >= 2 and c.target == len(c.members)
            and not (c.joining or c.deferred or c.leaving or c.moving or c.over)
            and c.failure_since is None and seen.adopted == seen.generation)  # fmt: skip


def restless(c: Control) -> bool:
    """Its next tick depends on time alone: a failure's grace runs, or a retry's delay."""
    return c.failure_since is not None or bool(c.deferred)


def soon(c: Control) -> bool:
    """A step soon would move the job on: it just changed phase (the next transition may be
    due at once), or a failure waits out its grace period."""
    return c.moved or c.failure_since is not None


# The steps ---------------------------------------------------------------------------------------


def taking_over(seen: Seen, dispatched: Mapping[str, str], generation_members: list[str],
                resume: bool) -> Control:  # fmt: skip
    """A controller for a job another controller may have been running: the learners
    already sent (``dispatched``: slot -> token) are this one's from now on. With
    ``resume``, learners never notice: its generation's live members stay members, its
    other live learners joiners."""
    sent = Learners(tokens=dict(dispatched), sent_at=dict.fromkeys(dispatched, seen.now))
    c = Control(learners=sent)
    if not resume:
        return c
    live = [s for s in dispatched if not exited(c, seen, s)]
    kept = [s for s in generation_members if s in live] if seen.generation else []
    return replace(
        c, started=frozenset(live), members=tuple(kept),
        joining=tuple(s for s in live if s not in kept), target=len(kept),
        phase=JobPhase.TRAINING if kept else JobPhase.WAITING,
    )  # fmt: skip


def look(c: Control, seen: Seen, leases: Mapping[str, str],
         alive: Collection[str]) -> tuple[Control, list[str]]:  # fmt: skip
    """Look at the leases of the learners still pending once (``leases``: slot -> the token
    holding it); returns the slots newly judged gone. A look after a long gap (Redis or
    the scheduler away) starts the watch over: a lease that could not be renewed meanwhile
    proves nothing."""
    w, now = c.learners, seen.now
    watched = now - w.looked_at <= WATCH_GAP
    leased, missing, gone = set(w.leased), dict(w.missing_since), set(w.gone)
    newly = []
    for slot in pending(c, seen):
        if leases.get(slot) == w.tokens[slot]:
            leased.add(slot)
            missing.pop(slot, None)
            continue
        if not watched:
            missing[slot] = now
        since = missing.setdefault(slot, now)
        if slot in leased or slot not in alive:
            lapsed = now - since >= LEASE_GRACE
        else:
            lapsed = now - w.sent_at[slot] >= START_GRACE
        if lapsed:
            gone.add(slot)
            newly.append(slot)
    watch = replace(w, leased=frozenset(leased), missing_since=missing, gone=frozenset(gone),
                    looked_at=now)  # fmt: skip
    return replace(c, learners=watch), newly


def apply(c: Control, seen: Seen, target: int, joined: Collection[str], left: Collection[str],
          token: Tokens, batch: int = 0) -> tuple[Control, list[Action]]:  # fmt: skip
    """A decision for the job: ``target`` slots, with learners to start on ``joined`` and to
    take off ``left``; in goodput mode, ``batch``: the global batch to train at (0: the
    last one asked). Members on ``left`` that joiners on ``joined`` replace, the count
    holding, are moved (:meth:`Step.move`): each trains on until its joiner is READY,
    then one generation admits the joiners and drops them; a joiner that dies first calls
    its move off. A batch that changes is published with the next generation, or, the
    membership staying, with one of the same members (:meth:`Step.resize`)."""
    if c.phase is JobPhase.SUSPENDING:
        # Its learners are checkpointing to leave: a joiner would see the stop flag and exit
        # at once, again and again. It resumes, with a controller of its own, once out.
        return c, []
    step = Step(c, seen, token)
    for slot in left:  # a move's joiner called off: the move is off, its member stays
        if slot in step.moving:
            step.leaving.discard(step.moving.pop(slot))
    for slot in left:
        if slot in step.deferred:  # not started yet: nothing to call off
            step.deferred.remove(slot)
        elif slot in step.joining:  # not admitted yet: call it off
            step.joining.remove(slot)
            step.kill(slot)
        elif slot in step.members:
            step.leaving.add(slot)
    step.leaving.difference_update(joined)  # placed here again before it left: it stays
    new = [s for s in joined if s not in step.members and s not in step.deferred]
    if new and not step.over:  # training finished: no learner joins any more
        if seen.now < step.retry_at:  # learners failed to start: the next waits its delay
            step.deferred += new
        else:
            step.start_joiners(new)
    step.pair_moves([s for s in left if s in step.leaving], new, target)
    step.target = target
    if batch > 0:
        step.batch = batch
    return step.done_with()


def tick(c: Control, seen: Seen, alive: Collection[str] | None,
         token: Tokens) -> tuple[Control, list[Action], Transition | None]:  # fmt: skip
    """Move the job's membership toward its allocation, and take the phase transition the
    facts call for. ``alive``: the slots alive now (None: not known, as for the drive)."""
    step = Step(c, seen, token)
    step.progress()
    step.drop_dead_joiners()
    step.retry_deferred()
    lost = step.watch_failures() if step.phase is not JobPhase.SUSPENDING else False
    if step.phase in (JobPhase.WAITING, JobPhase.TRAINING) and not lost:
        step.resize(alive)
    transition = advance(step.phase, step.facts(lost))
    step.moved = transition is not None
    if transition is not None:
        step.phase = transition.next
        step.enter(transition)
    state, actions = step.done_with()
    return state, actions, transition


def kill_all(c: Control, seen: Seen) -> list[Action]:
    """Every learner of the job still running is killed."""
    return [Kill(s) for s in c.started if not exited(c, seen, s)]


def _thawed(name: str, value: Any) -> Any:
    """A working copy of frozen field ``name``'s value."""
    if isinstance(value, frozenset):
        return set(value)
    if name == "moving":
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _frozen(name: str, value: Any) -> Any:
    """A working copy's value frozen again for Control's field ``name``."""
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, list):
        return tuple(value)
    if name == "moving":
        return tuple(value.items())
    return value


class Step:
    """One step's working copy of the state, and the actions it takes in order. It lives
    for one call of :func:`apply` or :func:`tick`, which return frozen values."""

    # The working copy: a field of Control, or of its Learners, under its own name; tuples
    # and frozensets thawed into lists and sets, mappings copied (``moving``: joiner -> the
    # member it replaces); frozen again, field by field, by :meth:`done_with`.
    phase: JobPhase
    target: int
    batch: int
    published_batch: int
    members: list[str]
    joining: list[str]
    started: set[str]
    leaving: set[str]
    moving: dict[str, str]
    step: int
    done: bool
    tail: str
    over: bool
    failure_since: float | None
    handled_failures: int
    moved: bool
    waiting_on_dead: float
    start_failures: int
    retries: int
    retry_at: float
    deferred: list[str]
    last_crash: str
    max_start_failures: int
    tokens: dict[str, str]
    sent_at: dict[str, float]
    leased: set[str]
    missing_since: dict[str, float]
    gone: set[str]
    looked_at: float

    def __init__(self, c: Control, seen: Seen, token: Tokens) -> None:
        self.seen, self.token = seen, token
        for f in fields(Control):
            if f.name != "learners":
                setattr(self, f.name, _thawed(f.name, getattr(c, f.name)))
        for f in fields(Learners):
            setattr(self, f.name, _thawed(f.name, getattr(c.learners, f.name)))
        self.generation = seen.generation  # moved on by this step's publication
        self.ready = set(seen.ready)  # less the slots this step sends a learner to
        self.actions: list[Action] = []

    def done_with(self) -> tuple[Control, list[Action]]:
        self.moving = dict(self.settle_moves())
        learners = Learners(**{f.name: _frozen(f.name, getattr(self, f.name))
                               for f in fields(Learners)})  # fmt: skip
        state = Control(learners=learners, **{
            f.name: _frozen(f.name, getattr(self, f.name))
            for f in fields(Control) if f.name != "learners"
        })  # fmt: skip
        return state, self.actions

    # Learners ----------------------------------------------------------------------------------

    def exited(self, slot: str) -> bool:
        if slot not in self.tokens or slot in self.gone:
            return True
        result = self.seen.exits.get(slot)
        return result is not None and result.token == self.tokens[slot]

    def finished(self, slot: str) -> bool:
        """The member's learner reported a clean exit: it finished or was told to stop (a
        peer still training would see the collective fail and report it)."""
        result = self.seen.exits.get(slot)
        return (result is not None and result.token == self.tokens.get(slot)
                and result.code == Exit.FINISHED)  # fmt: skip

    def kill(self, slot: str) -> None:
        if not self.exited(slot):
            self.actions.append(Kill(slot))

    def start_joiners(self, slots: list[str]) -> None:
        for slot in slots:
            token = self.token()
            self.tokens[slot], self.sent_at[slot] = token, self.seen.now
            self.leased.discard(slot)
            self.gone.discard(slot)
            self.missing_since.pop(slot, None)
            self.ready.discard(slot)
            self.started.add(slot)
            self.actions.append(Start(slot, token))
        self.joining += slots

    def drop_dead_joiners(self) -> None:
        """Forget joiners that died before joining: their slots are the scheduler's again.
        One that failed (not sent home: training over, or called off) counts toward a crash
        loop, and the next start waits a delay that doubles with each."""
        dead = [s for s in self.joining if self.exited(s)]
        self.joining = [s for s in self.joining if s not in dead]
        self.started -= set(dead)
        failed = [s for s in dead if not self.finished(s) and not self.over]
        for slot in failed:
            self.start_failures += 1
            self.retries += 1
            self.last_crash = self.crash_of(slot)
        if failed:
            delay = doubling(FIRST_RETRY, LAST_RETRY, self.retries - 1)
            self.retry_at = self.seen.now + delay

    def crash_of(self, slot: str) -> str:
        """Why the learner on ``slot`` failed, in the words it printed last, if any."""
        detail = self.seen.crashes.get(slot, "")
        code = self.seen.exits.get(slot)
        if detail:
            return f"{detail} (the learner on {slot}; see its log)"
        if code is not None and code.token == self.tokens.get(slot):
            return f"the learner on {slot} exited with status {code.code}; see its log"
        return f"the learner on {slot} was lost before it joined"

    def retry_deferred(self) -> None:
        """Slots that waited out a retry's delay get their learners now."""
        if not self.deferred or self.seen.now < self.retry_at:
            return
        slots, self.deferred = self.deferred, []
        if not self.over and self.phase in (JobPhase.WAITING, JobPhase.TRAINING):
            self.start_joiners(slots)

    # Generations --------------------------------------------------------------------------------

    def event(self, kind: str, **data: Any) -> None:
        self.actions.append(Event(kind, {"step": self.step, "time": self.seen.wall, **data}))

    def settled(self) -> bool:
        """No failure being handled and the latest generation adopted (or none runs, so none
        can be waited for): safe to change."""
        if self.failure_since is not None:
            return False
        return not self.members or self.seen.adopted == self.generation

    def publish(self, members: list[str], why: str) -> None:
        self.members = members
        self.generation += 1
        self.actions.append(Publish(tuple(members), self.generation, self.batch))
        batch = {"batch": self.batch} if self.batch else {}
        self.event("generation", gen=self.generation, workers=len(members), members=members,
                   why=why, **batch)  # fmt: skip
        self.published_batch = self.batch

    def grow_to(self, target: int) -> None:
        """Admit READY joiners until ``target`` members, once there are enough of them."""
        missing = target - len(self.members)
        joiners = [s for s in self.joining if s in self.ready and s not in self.moving][:missing]
        if missing <= 0 or len(joiners) < missing or not self.settled():
            return
        self.joining = [s for s in self.joining if s not in joiners]
        self.retries = 0  # learners join again: the next failure waits the first delay
        self.publish(self.members + joiners, f"grow to {target}")

    def pair_moves(self, left: list[str], joined: list[str], target: int) -> None:
        """Members ``left`` that the joiners ``joined`` (started or deferred) replace, as
        many as keep the count at ``target``, become moves."""
        olds = [s for s in left if s in self.members and s not in self.moving.values()]
        news = [s for s in joined if s in self.joining or s in self.deferred]
        staying = len(self.members) - len(self.leaving) + len(self.moving)
        for new, old in list(zip(news, olds, strict=False))[: max(0, target - staying)]:
            self.moving[new] = old

    def move(self) -> None:
        """Once every move's joiner is READY and the job settled: one generation of the
        members that stay and the joiners, without the members they replace (who finish
        the iteration and leave; rank 0 of the new generation gives the joiners the
        state)."""
        moves = list(self.moving.items())
        if not self.settled() or any(new not in self.ready for new, _ in moves):
            return
        olds = {old for _, old in moves}
        news = [new for new, _ in moves]
        self.joining = [s for s in self.joining if s not in news]
        self.moving = {}
        self.retries = 0
        why = "move " + ", ".join(f"{old} -> {new}" for new, old in moves)
        staying = [s for s in self.members if s not in olds]
        if staying:
            self.publish(staying + news, why)
        else:  # no member would be left to give the state: the new ones join first
            self.moving = dict(moves)
            self.publish(self.members + news, f"{why} (joining first)")

    def settle_moves(self) -> tuple[tuple[str, str], ...]:
        """The moves still under way. One whose member left the generation (it died, or a
        shrink took it) leaves its joiner a plain joiner; one whose joiner joined (beside
        it, where no member stayed to give the state) leaves its member a plain leaver,
        gone with the next generation; one whose joiner is gone (it died before joining,
        or was called off) is off, and its member stays."""
        for new, old in list(self.moving.items()):
            if old not in self.members or new in self.members:  # it left, or its joiner is in
                del self.moving[new]
            elif new not in self.joining and new not in self.deferred:
                del self.moving[new]
                self.leaving.discard(old)
        return tuple(self.moving.items())

    def shrink_to(self, keep: int, alive: Collection[str]) -> None:
        """Keep the ``keep`` longest-standing members whose slots are ``alive``; the others
        leave after this step. A member on a lost slot (its host dead or cut off) is never
        kept in place of one that still trains."""
        if not 0 < keep < len(self.members) or not self.settled():
            return
        staying = [s for s in self.members if s in alive][:keep]
        if staying:
            self.publish(staying, f"shrink to {keep}")

    def resize(self, alive: Collection[str] | None) -> None:
        before = self.generation
        plain = self.leaving.difference(self.moving.values())  # not waiting for a joiner
        if plain or 0 < self.target < len(self.members):  # those placed elsewhere go first
            keep = min(self.target, len(self.members) - len(plain))
            self.shrink_to(keep, set(self.members if alive is None else alive) - plain)
        elif self.moving:
            self.move()
        elif self.target > len(self.members):
            self.grow_to(self.target)
        self.leaving.intersection_update(self.members)
        # Goodput mode: a new batch with the same members, where no resize carries it (one
        # that waits for joiners will)
        if (self.generation == before and self.batch and self.batch != self.published_batch
                and self.members and not self.leaving and self.target <= len(self.members)
                and not self.over and self.settled()):  # fmt: skip
            self.publish(list(self.members), f"global batch {self.batch}")

    # Failures -----------------------------------------------------------------------------------

    def watch_failures(self) -> bool:
        """Replace the generation once every member reported failure, died, or was silent:
        for ``FAILURE_GRACE_SECONDS`` when peers reported a failure (the silent one is the
        suspect), for the collective timeout when a member died or a silent one still
        renews its lease (they are waiting in the collective, alive: each one's timeout
        runs from its own entry, and a frozen process renews nothing). True while a
        failure is being handled (members lost, their replacement not yet published)."""
        reports = self.seen.failures
        new = reports[self.handled_failures :]
        failed = {r["slot"] for r in new if r["gen"] == self.generation}
        dead = {s for s in self.members if self.exited(s) and not self.finished(s)}
        if not failed and not dead:
            return False
        # A member that reported the failure of an earlier generation never reached this
        # one (its collective there failed on the same lost peer, after this one was
        # published): it is alive, and a survivor.
        failed |= {
            r["slot"] for r in new if r["gen"] < self.generation and r["slot"] in self.members
        }
        now = self.seen.now
        self.failure_since = self.failure_since or now
        silent = set(self.members) - failed - dead
        renewing = {s for s in silent if s in self.leased and s not in self.missing_since}
        grace = self.waiting_on_dead if dead or renewing else FAILURE_GRACE_SECONDS
        if silent and now - self.failure_since < grace:
            return True
        self.handled_failures = len(reports)
        self.failure_since = None
        self.replace(survivors=[s for s in self.members if s in failed and s not in dead])
        return False

    def replace(self, survivors: list[str]) -> None:
        lost = [s for s in self.members if s not in survivors]
        for slot in lost:
            self.kill(slot)  # frozen or dead: make sure it is gone
            self.started.discard(slot)  # its slot is the scheduler's to give again
        self.event("failure", lost=lost, survivors=survivors)
        if survivors:
            self.publish(survivors, f"{len(lost)} learner(s) lost")
        else:
            self.restart_from_checkpoint()

    def restart_from_checkpoint(self) -> None:
        """Every learner is gone: new learners will load the latest checkpoint."""
        resumed = self.seen.checkpoint
        self.event("restart", from_step=resumed, iterations_lost=self.step - resumed)
        self.members = []
        self.step = resumed
        for slot in self.joining:  # they loaded an older state: new ones load the latest
            self.kill(slot)
            self.started.discard(slot)
        self.joining = []

    # Progress and phases ------------------------------------------------------------------------

    def progress(self) -> None:
        """The learners' step (that of their latest record) and whether training is over.
        Once the learners wrote ``done`` no learner joins any more; the job completes only
        when its records are stored (the metrics consumer's ``finished``)."""
        seen = self.seen.progress
        if seen.tail != self.tail:  # after a restart, the step resumed until new records come
            if seen.step > self.step:  # trained on: failures to start are no loop
                self.start_failures = 0
            self.tail, self.step = seen.tail, seen.step
        if (seen.ended or seen.finished is not None) and not self.over:
            self.over = True
            self.actions.append(RequestStop())  # learners still waiting to join go home
        if seen.finished is not None:
            self.step, self.done = seen.finished, True

    def facts(self, lost: bool) -> Facts:
        learners = sum(1 for s in self.started if not self.exited(s))
        return Facts(
            target=self.target, members=len(self.members), learners=learners, lost=lost,
            done=self.done, error=first_error(self.seen) is not None,
            started=self.step > 0 or self.generation > 0,
            gave_up=self.start_failures >= self.max_start_failures,
        )  # fmt: skip

    def kill_all(self) -> None:
        for slot in self.started:
            self.kill(slot)
        self.deferred = []

    def gave_up(self) -> str:
        if self.start_failures < self.max_start_failures:
            return "failed"
        return (f"the job's learners could not start: {self.start_failures} in a row exited "
                f"before joining, the last with: {self.last_crash}")  # fmt: skip

    def enter(self, transition: Transition) -> None:
        """A transition's effects."""
        to = transition.next
        if to is JobPhase.FAILED:
            self.actions.append(Enter(FAILED, message=first_error(self.seen) or self.gave_up()))
            self.kill_all()
        elif to is JobPhase.TRAINING and transition.previous is JobPhase.WAITING:
            self.actions.append(Enter(RUNNING))
        elif to in (JobPhase.COMPLETING, JobPhase.COMPLETED):
            self.actions.append(Enter(COMPLETED))
        elif to is JobPhase.SUSPENDING:
            self.actions.append(RequestStop())  # learners checkpoint, then exit
            self.actions.append(Note("suspending", "checkpointing before suspension"))
        elif to is JobPhase.SUSPENDED:
            self.kill_all()  # joiners that never joined
            self.actions.append(Enter(SUSPENDED, checkpoint=self.seen.checkpoint))


RESTING = {JobPhase.FAILED: FAILED, JobPhase.COMPLETED: COMPLETED, JobPhase.SUSPENDED: SUSPENDED}


def resting(transition: Transition | None) -> str | None:
    """The job's resting state when the transition ends the controller's work."""
    return None if transition is None else RESTING.get(transition.next)
