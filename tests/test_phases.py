"""The job phase machine and the observed liveness of learners, without Redis or Django:
a table of facts and transitions (run in order and reversed), an in-memory job store and a
Celery app that only records what it was asked to send."""

from __future__ import annotations

import itertools
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from protocol.exits import RunResult
from protocol.learner_task import LearnerPaths
from scheduler import elastic
from scheduler.dispatch import CeleryLauncher
from scheduler.elastic import Control, Seen, Start
from scheduler.phases import FINAL, Facts, JobPhase, advance

W, T, R = JobPhase.WAITING, JobPhase.TRAINING, JobPhase.RECOVERING
SG, CG = JobPhase.SUSPENDING, JobPhase.COMPLETING
SD, CD, FD = JobPhase.SUSPENDED, JobPhase.COMPLETED, JobPhase.FAILED


def facts(target: int = 2, members: int = 2, learners: int = 2, **kw: Any) -> Facts:
    return Facts(target=target, members=members, learners=learners, **kw)


# (phase, facts, expected next phase or None, transition name)
TABLE: list[tuple[JobPhase, Facts, JobPhase | None, str]] = [
    (W, facts(members=0, learners=2), None, ""),  # joiners on their way
    (W, facts(members=2), T, "generation formed"),
    (T, facts(), None, ""),  # training as allocated: nothing to say
    (T, facts(target=3), None, ""),  # growing is membership, not a phase
    (T, facts(lost=True), R, "lost learners"),
    (R, facts(lost=True, members=2, learners=1), None, ""),  # waiting out the grace
    (R, facts(members=1, learners=1), T, "survivors go on"),
    (R, facts(members=0, learners=0, started=True), W, "restart from checkpoint"),
    (R, facts(target=0, members=0, learners=0, started=True), W, "restart from checkpoint"),
    (T, facts(members=0, learners=0), W, "no generation"),
    (T, facts(target=0), SG, "allocation fell to zero"),
    (SG, facts(target=0, learners=1), None, ""),
    (SG, facts(target=0, learners=0), SD, "checkpointed and out"),
    (SG, facts(target=0, learners=1, error=True), FD, "user code failed"),
    (W, facts(target=0, members=0, learners=0, started=True), SD, "no learner and no slot left"),
    (W, facts(target=0, members=0, learners=0), None, ""),  # queued, never ran: stays queued
    (W, facts(target=0, members=0, learners=1, started=True), None, ""),  # a joiner still exits
    (T, facts(done=True), CG, "training finished"),
    (T, facts(done=True, learners=0), CD, "learners exited"),
    (CG, facts(done=True, learners=1), None, ""),
    (CG, facts(done=True, learners=0), CD, "learners exited"),
    (T, facts(error=True), FD, "user code failed"),
    (W, facts(members=0, error=True), FD, "user code failed"),
    (T, facts(error=True, done=True), FD, "user code failed"),
    (T, facts(lost=True, done=True), CG, "training finished"),
    (W, facts(members=0, learners=0, gave_up=True), FD, "learners could not start"),
    (T, facts(target=3, gave_up=True), FD, "learners could not start"),  # its joiners' loop
    (T, facts(gave_up=True, error=True), FD, "user code failed"),  # the user's error first
    (W, facts(target=0), SG, "allocation fell to zero"),  # formed as its slots were taken
    (W, facts(members=0, learners=1, done=True), CG, "training finished"),  # a joiner exits
    (W, facts(members=0, learners=0, done=True), CD, "learners exited"),
    (T, facts(target=0, members=0, learners=0, started=True), SD, "no learner and no slot left"),
    (R, facts(target=0, lost=True, members=1), SG, "allocation fell to zero"),
    (R, facts(lost=True, done=True, members=1, learners=1), CG, "training finished"),
    (R, facts(members=0, learners=0, done=True), CD, "learners exited"),
    (R, facts(lost=True, error=True), FD, "user code failed"),
    (R, facts(lost=True, members=0, learners=0, gave_up=True), FD, "learners could not start"),
    (SG, facts(target=0, learners=1, done=True), CG, "training finished"),  # done as it left
    (SG, facts(target=0, learners=0, done=True), CD, "learners exited"),
    (SG, facts(target=0, learners=1, gave_up=True), FD, "learners could not start"),
    (CG, facts(done=True, learners=1, error=True), FD, "user code failed"),
    (CG, facts(done=True, learners=1, gave_up=True), FD, "learners could not start"),
    *[(phase, facts(error=True, lost=True), None, "") for phase in sorted(FINAL)],
]


def run_table(rows: list[tuple[JobPhase, Facts, JobPhase | None, str]]) -> None:
    for phase, observed, expected, name in rows:
        transition = advance(phase, observed)
        if expected is None:
            assert transition is None, (phase, observed, transition)
        else:
            assert transition is not None, (phase, observed)
            assert (transition.previous, transition.next, transition.name) == (
                phase, expected, name)  # fmt: skip


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_every_transition_follows_from_its_facts_in_any_order(order: str) -> None:
    run_table(TABLE if order == "forward" else TABLE[::-1])


def every_transition() -> set[tuple[JobPhase, JobPhase, str]]:
    """What ``advance`` can answer, found by trying it on every phase and every kind of
    facts: each count none or some (it reads counts as zero or not), each flag off or on."""
    kinds = [(0, 1) if f.type == "int" else (False, True) for f in fields(Facts)]
    found = set()
    for phase, values in itertools.product(JobPhase, itertools.product(*kinds)):
        transition = advance(phase, Facts(*values))
        if transition is not None:
            found.add((transition.previous, transition.next, transition.name))
    return found


def test_the_table_covers_every_transition_and_every_phase() -> None:
    table = {(p, n, name) for p, _, n, name in TABLE if n is not None}
    assert table == every_transition()
    assert {p for p, *_ in TABLE} == set(JobPhase)


def test_a_transition_reads_as_a_log_line() -> None:
    transition = advance(T, facts(lost=True))
    assert str(transition) == "training -> recovering (lost learners)"


# Observed liveness: the controller's lease watch (scheduler/elastic.py) -----------------------


class MemoryJobs:
    """The part of JobStore the Celery launcher uses, in memory."""

    def __init__(self) -> None:
        self.dispatch: dict[str, str] = {}
        self.kills: list[tuple[str, int]] = []

    def set_dispatch(self, slot: str, token: str) -> None:
        self.dispatch[slot] = token

    def request_kill(self, slot: str, sig: int) -> None:
        self.kills.append((slot, sig))


class RecordingCelery:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str]] = []

    def send_task(self, name: str, args: list[Any], queue: str, **options: Any) -> None:
        self.sent.append((name, args, queue))


class Watch:
    """One learner sent to ``h.0`` at time 1000, its controller's state, and its lease and
    exit as the test sets them; ``watch`` looks every half second, as a busy scheduler does."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lease: dict[str, str] = {}
        self.exits: dict[str, RunResult] = {}
        self.c = Control()
        self.c, actions = elastic.apply(self.c, self.seen(), 1, ["h.0"], [], self.token)
        assert actions == [Start("h.0", "t1")]

    def token(self) -> str:
        return "t1" if "h.0" not in self.c.learners.tokens else "t2"

    def seen(self) -> Seen:
        return Seen(exits=dict(self.exits), now=self.now)

    def look(self, alive: set[str]) -> list[str]:
        self.c, gone = elastic.look(self.c, self.seen(), self.lease, alive)
        return gone

    def watch(self, seconds: float, alive: set[str]) -> list[str]:
        gone: list[str] = []
        end = self.now + seconds
        while self.now < end:
            self.now += 0.5
            gone += self.look(alive)
        return gone

    def exited(self) -> bool:
        return elastic.exited(self.c, self.seen(), "h.0")


def test_the_celery_launcher_sends_the_learner_task_with_its_token() -> None:
    jobs, app = MemoryJobs(), RecordingCelery()
    paths = LearnerPaths(Path("/d"), Path("/m/model.py"), Path("/j/7"), Path("/j/7/spec.json"))
    launcher = CeleryLauncher(jobs, app, 7, paths)  # type: ignore[arg-type]
    launcher.start("h.0", "t1")
    message = {"data": "/d", "model": "/m/model.py", "workdir": "/j/7", "spec": "/j/7/spec.json"}
    assert app.sent == [("edt.run_learner", [7, "h.0", "t1", message], "slot.h.0")]
    assert jobs.dispatch == {"h.0": "t1"}
    launcher.kill("h.0")
    assert jobs.kills == [("h.0", 9)]


def test_a_learner_whose_lease_lapses_is_gone_without_an_exit_report() -> None:
    w = Watch()
    w.lease["h.0"] = "t1"
    assert w.watch(5, {"h.0"}) == [] and not w.exited()
    del w.lease["h.0"]  # kill -9 of its whole host: nobody reports anything
    assert w.watch(elastic.LEASE_GRACE + 1, {"h.0"}) == ["h.0"]
    assert w.exited()
    assert elastic.kill_all(w.c, w.seen()) == []  # nothing left to signal


def test_a_gap_in_watching_restarts_the_clock() -> None:
    w = Watch()
    w.lease["h.0"] = "t1"
    w.watch(2, {"h.0"})
    del w.lease["h.0"]  # Redis restarted: leases are renewed a moment later
    w.now += 10  # the scheduler could not look meanwhile
    assert w.look({"h.0"}) == []
    w.lease["h.0"] = "t1"
    assert w.watch(5, {"h.0"}) == []
    assert not w.exited()


def test_a_learner_that_never_started_is_gone_when_its_slot_is_lost() -> None:
    w = Watch()
    assert w.watch(30, {"h.0"}) == []  # starting slowly on a busy host
    assert w.watch(elastic.LEASE_GRACE + 1, set()) == ["h.0"]


def test_a_learner_that_never_takes_its_lease_is_gone_after_the_start_grace() -> None:
    w = Watch()
    assert w.watch(elastic.START_GRACE + 1, {"h.0"}) == ["h.0"]


def test_a_reported_exit_counts_at_once_and_a_new_dispatch_starts_over() -> None:
    w = Watch()
    w.exits["h.0"] = RunResult("t1", 0)
    assert w.exited()
    w.c, actions = elastic.apply(w.c, w.seen(), 1, ["h.0"], [], w.token)
    assert actions == [Start("h.0", "t2")]
    assert not w.exited()
    assert w.look({"h.0"}) == []
