"""The per-job controller's crash-loop rules (scheduler/elastic.py), as pure steps: learners
that exit before joining are sent again after a growing delay, and after
``START_FAILURES`` of them in a row, with no step trained in between, the job fails with
the last one's error instead of sending learners for ever."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from protocol.exits import RunResult
from protocol.jobstore import Progress
from scheduler import elastic
from scheduler.elastic import Control, Enter, Seen, Start
from scheduler.phases import JobPhase
from scheduler.policies import model as states

CRASH = (
    "redis.exceptions.NoPermissionError: this user has no permissions to run the 'select' command"
)


class Slot:
    """The scheduler's side of one job on one slot, ``h.0``, driven step by step."""

    def __init__(self) -> None:
        self.now = 100.0
        self.exits: dict[str, RunResult] = {}
        self.crashes: dict[str, str] = {}
        self.progress = Progress("", 0, False, None)
        self.c = Control()
        self.starts: list[float] = []  # when each learner was sent
        self.count = 0
        self.actions: list[elastic.Action] = []

    def token(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def seen(self) -> Seen:
        return Seen(exits=dict(self.exits), crashes=dict(self.crashes), progress=self.progress,
                    now=self.now)  # fmt: skip

    def record(self, actions: list[elastic.Action]) -> None:
        self.actions += actions
        self.starts += [self.now for a in actions if isinstance(a, Start)]

    def decide(self) -> None:
        """The loop places the job on h.0 again whenever it holds no slot there."""
        if "h.0" not in elastic.joiners(self.c) and "h.0" not in self.c.members:
            self.c, actions = elastic.apply(self.c, self.seen(), 1, ["h.0"], [], self.token)
            self.record(actions)

    def tick(self) -> elastic.Transition | None:
        self.c, actions, transition = elastic.tick(self.c, self.seen(), None, self.token)
        self.record(actions)
        return transition

    def crash(self) -> None:
        """The learner just sent exits 1 before joining, printing why."""
        token = self.c.learners.tokens["h.0"]
        self.exits["h.0"] = RunResult(token, 1)
        self.crashes["h.0"] = CRASH

    def run(self, seconds: float, crashing: bool = True) -> None:
        """Every half second: decide, tick, and the learner crashes at once if one runs."""
        end = self.now + seconds
        while self.now < end and self.c.phase is not JobPhase.FAILED:
            self.decide()
            if (
                crashing
                and "h.0" in self.c.joining
                and not elastic.exited(self.c, self.seen(), "h.0")
            ):
                self.crash()
            self.tick()
            self.now += 0.5


def test_a_crash_loop_ends_failed_with_the_learners_last_error() -> None:
    s = Slot()
    s.run(120)
    assert s.c.phase is JobPhase.FAILED
    assert len(s.starts) == elastic.START_FAILURES  # at most N learner starts
    gaps = [b - a for a, b in zip(s.starts, s.starts[1:], strict=False)]
    assert [round(g) for g in gaps] == [1, 2, 4, 8]  # the delay doubles (to 30 s at most)
    failed = [a for a in s.actions if isinstance(a, Enter) and a.state == states.FAILED]
    assert len(failed) == 1
    assert "could not start: 5 in a row exited before joining" in failed[0].message
    assert CRASH in failed[0].message and "h.0" in failed[0].message


def test_the_limit_is_the_admins_and_the_delay_stops_growing() -> None:
    s = Slot()
    s.c = replace(s.c, max_start_failures=9)
    s.run(600)
    gaps = [round(b - a) for a, b in zip(s.starts, s.starts[1:], strict=False)]
    assert len(s.starts) == 9 and gaps == [1, 2, 4, 8, 16, 30, 30, 30]


def test_a_step_trained_in_between_is_no_loop() -> None:
    """Four failed starts, then the job trains a step (another learner of it did): the
    count starts over, so it fails only at the fifth failure after that step (the delay
    goes on growing: the slot still fails its learners)."""
    s = Slot()
    s.run(16)
    assert s.c.start_failures == 4 and s.c.phase is not JobPhase.FAILED
    s.progress = Progress("1-0", 1, False, None)
    s.run(100)
    assert s.c.phase is not JobPhase.FAILED and s.c.start_failures == 4
    s.run(100)
    assert s.c.phase is JobPhase.FAILED and len(s.starts) == 9


def test_a_joiner_sent_home_as_training_ends_is_no_failure() -> None:
    s = Slot()
    s.decide()
    s.exits["h.0"] = RunResult(s.c.learners.tokens["h.0"], 0)  # told to stop: clean exit
    s.progress = Progress("9-0", 9, True, None)
    s.tick()
    assert s.c.start_failures == 0 and s.c.over


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_deferred_slots_are_the_jobs_until_started_or_taken_back(order: str) -> None:
    """While a retry waits, the slot placed on it stays the job's (held as a joiner), a
    decision can take it back, and nothing starts before the delay."""
    s = Slot()
    s.decide()
    s.crash()
    s.tick()
    rows = [
        ("placed again", s.decide),  # waits its delay, and holds the slot meanwhile
        ("a moment later", lambda: setattr(s, "now", s.now + 0.2)),
    ]
    placed = False
    for name, act in rows if order == "forward" else rows[::-1]:
        act()
        s.tick()
        placed = placed or name == "placed again"
        held = ["h.0"] if placed else []  # the slot is the job's once placed, not before
        assert (elastic.joiners(s.c), list(s.c.deferred)) == (held, held), name
    assert not [a for a in s.actions[1:] if isinstance(a, Start)]  # no start before the delay
    s.c, _ = elastic.apply(s.c, s.seen(), 0, [], ["h.0"], s.token)
    assert s.c.deferred == () and elastic.joiners(s.c) == []


def test_a_step_gives_back_every_field_of_the_state_it_was_given() -> None:
    # Step's working copy is made and frozen again field by field (dataclasses.fields): a
    # field it forgot would come back as its default, one it mangled (a move's pair, a
    # set) as something else. Every field here is off its default.
    learners = elastic.Learners(
        tokens={"h.0": "t0", "h.2": "t2"}, sent_at={"h.0": 1.0, "h.2": 2.0},
        leased=frozenset({"h.0"}), missing_since={"h.2": 3.0}, gone=frozenset({"h.9"}),
        looked_at=4.0,
    )  # fmt: skip
    state = Control(
        phase=JobPhase.TRAINING, target=2, batch=64, published_batch=32, members=("h.0", "h.1"),
        joining=("h.2",), started=frozenset({"h.0", "h.1", "h.2"}), leaving=frozenset({"h.1"}),
        moving=(("h.2", "h.1"),), step=7, done=True, tail="5-0", over=True, failure_since=6.0,
        handled_failures=1, moved=True, learners=learners, waiting_on_dead=8.0,
        start_failures=2, retries=3, retry_at=9.0, deferred=("h.3",), last_crash="boom",
        max_start_failures=4,
    )  # fmt: skip
    defaults = Control()
    off = [f.name for f in fields(Control) if getattr(state, f.name) == getattr(defaults, f.name)]
    assert off == []
    again, actions = elastic.Step(state, Seen(generation=1), lambda: "t").done_with()
    assert (again, actions) == (state, [])
