"""Learner moves in the per-job controller (scheduler/elastic.py), as pure steps: a member
placed elsewhere while the count holds trains on until its replacement is READY, then one
generation admits the new learner and drops the old one (docs/architecture.md, "Learner
moves"). Each row is a script of observations and decisions and what must follow."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from protocol.exits import RunResult
from scheduler import elastic
from scheduler.elastic import Control, Kill, Learners, Publish, Seen, Start
from scheduler.phases import JobPhase

A, B, C, D = "h1.0", "h2.0", "h1.1", "h1.2"  # a job on A (rank 0) and B; C, D free on h1


def start() -> Control:
    return Control(
        phase=JobPhase.TRAINING, target=2, members=(A, B), started=frozenset({A, B}),
        learners=Learners(tokens={A: "t-a", B: "t-b"}, sent_at={A: 0.0, B: 0.0},
                          leased=frozenset({A, B})),
    )  # fmt: skip


@dataclass
class Job:
    """One job of two members, A and B, generation 1 adopted; the scheduler's side of it,
    stepped by hand."""

    c: Control = field(default_factory=lambda: start())
    generation: int = 1
    adopted: int = 1
    ready: set[str] = field(default_factory=set)
    exits: dict[str, RunResult] = field(default_factory=dict)
    failures: list[dict[str, object]] = field(default_factory=list)
    now: float = 10.0
    count: int = 0
    actions: list[elastic.Action] = field(default_factory=list)

    def token(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def seen(self) -> Seen:
        return Seen(generation=self.generation, adopted=self.adopted,
                    ready=frozenset(self.ready), failures=tuple(self.failures),
                    exits=dict(self.exits), now=self.now)  # fmt: skip

    def carry_out(self, actions: list[elastic.Action]) -> list[elastic.Action]:
        self.actions += actions
        for action in actions:
            if isinstance(action, Publish):
                self.generation = action.generation
            if isinstance(action, Start):
                self.ready.discard(action.slot)
        return actions

    def apply(self, target: int, joined: list[str], left: list[str]) -> list[elastic.Action]:
        self.c, actions = elastic.apply(self.c, self.seen(), target, joined, left, self.token)
        return self.carry_out(actions)

    def tick(self) -> list[elastic.Action]:
        self.c, actions, _ = elastic.tick(self.c, self.seen(), None, self.token)
        self.now += 0.5
        return self.carry_out(actions)

    def exit(self, slot: str, code: int) -> None:
        self.exits[slot] = RunResult(self.c.learners.tokens[slot], code)

    def holding(self) -> list[str]:
        return [*elastic.members(self.c), *elastic.joiners(self.c)]

    def publishes(self) -> list[tuple[str, ...]]:
        return [a.members for a in self.actions if isinstance(a, Publish)]


def test_a_move_is_one_generation_once_the_new_learner_is_ready() -> None:
    job = Job()
    assert job.apply(2, [C], [B]) == [Start(C, "t1")]
    assert job.holding() == [A, C]  # the decision's view: B's slot is free once B is out
    for _ in range(3):  # C loads and rehearses: B trains on meanwhile
        assert job.tick() == []
    assert job.c.members == (A, B) and job.generation == 1
    job.ready.add(C)
    actions = job.tick()
    assert [a for a in actions if isinstance(a, Publish)] == [Publish((A, C), 2)]
    assert not any(isinstance(a, Kill) for a in actions)  # B leaves on its own, after its step
    assert job.c.members == (A, C) and job.c.moving == () and job.c.leaving == frozenset()
    event = next(a for a in actions if isinstance(a, elastic.Event))
    assert event.data["why"] == f"move {B} -> {C}" and event.data["workers"] == 2
    assert elastic.occupied(job.c, job.seen()) == {A, B, C}  # B is still finishing
    job.adopted = 2
    job.exit(B, 0)  # B saw a generation without it and left
    job.tick()
    assert elastic.occupied(job.c, job.seen()) == {A, C}
    assert job.publishes() == [(A, C)] and job.c.phase is JobPhase.TRAINING


def test_a_move_waits_for_the_generation_before_to_be_adopted() -> None:
    job = Job(generation=2, adopted=1)  # generation 2 (A, B) published, not formed yet
    job.apply(2, [C], [B])
    job.ready.add(C)
    assert job.tick() == []
    job.adopted = 2
    assert Publish((A, C), 3) in job.tick()


def test_a_joiner_that_dies_before_joining_calls_the_move_off() -> None:
    job = Job()
    job.apply(2, [C], [B])
    job.exit(C, 1)  # the new learner crashed while starting
    actions = job.tick()
    assert not any(isinstance(a, (Publish, Kill)) for a in actions)
    assert job.c.members == (A, B) and job.c.leaving == frozenset() and job.c.moving == ()
    assert job.holding() == [A, B]  # B stays: nothing was lost, the count holds
    assert job.c.phase is JobPhase.TRAINING and job.generation == 1
    job.ready.add(C)  # a READY left behind by the dead learner counts for nothing
    assert not any(isinstance(a, Publish) for a in job.tick())


def test_the_scheduler_calling_the_move_off_keeps_the_old_member() -> None:
    job = Job()
    job.apply(2, [C], [B])
    actions = job.apply(2, [], [C])
    assert actions == [Kill(C)]
    assert job.c.members == (A, B) and job.c.leaving == frozenset() and job.c.moving == ()
    assert job.holding() == [A, B]


def test_the_old_member_dying_during_the_move_loses_nothing() -> None:
    job = Job()
    job.apply(2, [C], [B])
    job.exit(B, -9)  # B's host died while C was starting
    job.failures.append({"slot": A, "gen": 1, "step": 7})  # A's all-reduce raised
    actions = job.tick()
    assert Publish((A,), 2) in actions  # the survivor redoes the iteration, as after any loss
    assert any(isinstance(a, elastic.Event) and a.kind == "failure" for a in actions)
    assert job.c.moving == () and job.c.joining == (C,)  # C now simply grows the job back
    job.adopted = 2
    job.ready.add(C)
    assert Publish((A, C), 3) in job.tick()
    assert job.c.members == (A, C) and job.publishes() == [(A,), (A, C)]


def test_the_joiner_dying_after_the_move_is_an_ordinary_failure() -> None:
    job = Job()
    job.apply(2, [C], [B])
    job.ready.add(C)
    job.tick()
    job.adopted = 2
    job.exit(B, 0)
    job.exit(C, -9)
    job.failures.append({"slot": A, "gen": 2, "step": 9})
    assert Publish((A,), 3) in job.tick()


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_two_learners_move_in_one_generation_whatever_the_order(order: str) -> None:
    job = Job()
    job.c = Control(
        phase=JobPhase.TRAINING, target=3, members=(A, B, "h3.0"),
        started=frozenset({A, B, "h3.0"}),
        learners=Learners(tokens={A: "a", B: "b", "h3.0": "c"}, sent_at={A: 0, B: 0, "h3.0": 0}),
    )  # fmt: skip
    joined, left = [C, D], [B, "h3.0"]
    if order == "reversed":
        joined, left = joined[::-1], left[::-1]
    job.apply(3, joined, left)
    job.ready.add(C)
    assert job.tick() == []  # all at once: D is not READY yet
    job.ready.add(D)
    (published,) = [a for a in job.tick() if isinstance(a, Publish)]
    assert published.members[0] == A and set(published.members) == {A, C, D}
    assert job.c.members == published.members and job.c.moving == ()


def test_a_shrink_is_no_move_and_goes_at_once() -> None:
    job = Job()
    job.apply(1, [], [B])
    assert Publish((A,), 2) in job.tick()


def test_more_leavers_than_the_count_keeps_shrink_the_rest_at_once() -> None:
    job = Job()
    job.apply(1, [C], [A, B])  # one of them moves to C, the other goes at once
    assert job.c.moving == ((C, A),)
    assert Publish((A,), 2) in job.tick()  # B out now; A trains on until C is READY
    job.adopted = 2
    job.ready.add(C)
    # A alone holds the state: C joins beside it first, then A leaves
    assert Publish((A, C), 3) in job.tick()
    job.adopted = 3
    assert Publish((C,), 4) in job.tick()
    assert job.c.moving == () and job.c.leaving == frozenset() and job.holding() == [C]


def test_a_move_of_every_member_never_drops_the_state() -> None:
    job = Job()
    job.apply(2, [C, D], [A, B])
    job.ready.update({C, D})
    assert Publish((A, B, C, D), 2) in job.tick()  # joiners get the state from A first
    assert job.holding() == [C, D]
    job.adopted = 2
    assert Publish((C, D), 3) in job.tick()
    assert job.publishes() == [(A, B, C, D), (C, D)]
