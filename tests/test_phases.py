"""The job phase machine and the observed liveness of learners, without Redis or Django:
a table of facts and transitions (run in order and reversed), an in-memory job store and a
Celery app that only records what it was asked to send."""

from __future__ import annotations

import time
from typing import Any

import pytest

from scheduler import dispatch
from scheduler.dispatch import CeleryLauncher
from scheduler.phases import FINAL, Facts, JobPhase, advance

W, T, R = JobPhase.WAITING, JobPhase.TRAINING, JobPhase.RECOVERING
SG, CG = JobPhase.SUSPENDING, JobPhase.COMPLETING
SD, CD, FD = JobPhase.SUSPENDED, JobPhase.COMPLETED, JobPhase.FAILED


def facts(want: int = 2, members: int = 2, learners: int = 2, **kw: Any) -> Facts:
    return Facts(want=want, members=members, learners=learners, **kw)


# (phase, facts, expected next phase or None, transition name)
TABLE: list[tuple[JobPhase, Facts, JobPhase | None, str]] = [
    (W, facts(members=0, learners=2), None, ""),  # joiners on their way
    (W, facts(members=2), T, "generation formed"),
    (T, facts(), None, ""),  # training as allocated: nothing to say
    (T, facts(want=3), None, ""),  # growing is membership, not a phase
    (T, facts(lost=True), R, "lost learners"),
    (R, facts(lost=True, members=2, learners=1), None, ""),  # waiting out the grace
    (R, facts(members=1, learners=1), T, "survivors go on"),
    (R, facts(members=0, learners=0, started=True), W, "restart from checkpoint"),
    (R, facts(want=0, members=0, learners=0, started=True), W, "restart from checkpoint"),
    (T, facts(members=0, learners=0), W, "no generation"),
    (T, facts(want=0), SG, "allocation fell to zero"),
    (SG, facts(want=0, learners=1), None, ""),
    (SG, facts(want=0, learners=0), SD, "checkpointed and out"),
    (SG, facts(want=0, learners=1, error=True), FD, "user code failed"),
    (W, facts(want=0, members=0, learners=0, started=True), SD, "no learner and no slot left"),
    (W, facts(want=0, members=0, learners=0), None, ""),  # queued, never ran: stays queued
    (W, facts(want=0, members=0, learners=1, started=True), None, ""),  # a joiner still exits
    (T, facts(done=True), CG, "training finished"),
    (T, facts(done=True, learners=0), CD, "learners exited"),
    (CG, facts(done=True, learners=1), None, ""),
    (CG, facts(done=True, learners=0), CD, "learners exited"),
    (T, facts(error=True), FD, "user code failed"),
    (W, facts(members=0, error=True), FD, "user code failed"),
    (T, facts(error=True, done=True), FD, "user code failed"),
    (T, facts(lost=True, done=True), CG, "training finished"),
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


def test_the_table_covers_every_transition_and_every_phase() -> None:
    pairs = {(p, n) for p, _, n, _ in TABLE if n is not None}
    assert pairs == {
        (W, T), (T, R), (R, T), (R, W), (T, W), (T, SG), (SG, SD), (SG, FD), (W, SD),
        (T, CG), (T, CD), (CG, CD), (T, FD), (W, FD),
    }  # fmt: skip
    assert {p for p, *_ in TABLE} == set(JobPhase)


def test_a_transition_reads_as_a_log_line() -> None:
    transition = advance(T, facts(lost=True))
    assert str(transition) == "training -> recovering (lost learners)"


# Observed liveness ---------------------------------------------------------------------------


class MemoryJobs:
    """The part of JobStore the launcher uses, in memory."""

    def __init__(self) -> None:
        self.dispatch: dict[str, str] = {}
        self.lease: dict[str, str] = {}
        self.exit: dict[str, tuple[str, int]] = {}
        self.kills: list[tuple[str, int]] = []

    def dispatches(self) -> dict[str, str]:
        return dict(self.dispatch)

    def set_dispatch(self, slot: str, token: str) -> None:
        self.dispatch[slot] = token

    def leases(self, slots: list[str]) -> dict[str, str]:
        return {s: self.lease[s] for s in slots if s in self.lease}

    def exits(self) -> dict[str, tuple[str, int]]:
        return dict(self.exit)

    def request_kill(self, slot: str, sig: int) -> None:
        self.kills.append((slot, sig))


class RecordingCelery:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str]] = []

    def send_task(self, name: str, args: list[Any], queue: str, **options: Any) -> None:
        self.sent.append((name, args, queue))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(dispatch.time, "monotonic", fake)
    return fake


def launcher_with(slot: str) -> tuple[CeleryLauncher, MemoryJobs]:
    jobs = MemoryJobs()
    launcher = CeleryLauncher(jobs, RecordingCelery(), 7)  # type: ignore[arg-type]
    launcher.start(slot)
    return launcher, jobs


def watch(launcher: CeleryLauncher, clock: Clock, seconds: float, alive: set[str]) -> list[str]:
    """Look every half second for ``seconds``, as a busy scheduler does."""
    gone: list[str] = []
    end = clock.now + seconds
    while clock.now < end:
        clock.now += 0.5
        gone += launcher.observe(alive)
    return gone


def test_a_learner_whose_lease_lapses_is_gone_without_an_exit_report(clock: Clock) -> None:
    launcher, jobs = launcher_with("h.0")
    assert launcher.app.sent == [("edt.run_learner", [7, "h.0", jobs.dispatch["h.0"]], "slot.h.0")]
    jobs.lease["h.0"] = jobs.dispatch["h.0"]
    assert watch(launcher, clock, 5, {"h.0"}) == [] and not launcher.exited("h.0")
    del jobs.lease["h.0"]  # kill -9 of its whole host: nobody reports anything
    assert watch(launcher, clock, dispatch.LEASE_GRACE + 1, {"h.0"}) == ["h.0"]
    assert launcher.exited("h.0")
    launcher.kill("h.0")
    assert jobs.kills == []  # nothing left to signal


def test_a_gap_in_watching_restarts_the_clock(clock: Clock) -> None:
    launcher, jobs = launcher_with("h.0")
    jobs.lease["h.0"] = jobs.dispatch["h.0"]
    watch(launcher, clock, 2, {"h.0"})
    del jobs.lease["h.0"]  # Redis restarted: leases are renewed a moment later
    clock.now += 10  # the scheduler could not look meanwhile
    assert launcher.observe({"h.0"}) == []
    jobs.lease["h.0"] = jobs.dispatch["h.0"]
    assert watch(launcher, clock, 5, {"h.0"}) == []
    assert not launcher.exited("h.0")


def test_a_learner_that_never_started_is_gone_when_its_slot_is_lost(clock: Clock) -> None:
    launcher, _jobs = launcher_with("h.0")
    assert watch(launcher, clock, 30, {"h.0"}) == []  # starting slowly on a busy host
    assert watch(launcher, clock, dispatch.LEASE_GRACE + 1, set()) == ["h.0"]


def test_a_learner_that_never_takes_its_lease_is_gone_after_the_start_grace(
    clock: Clock,
) -> None:
    launcher, _jobs = launcher_with("h.0")
    assert watch(launcher, clock, dispatch.START_GRACE + 1, {"h.0"}) == ["h.0"]


def test_a_reported_exit_counts_at_once_and_a_new_dispatch_starts_over(clock: Clock) -> None:
    launcher, jobs = launcher_with("h.0")
    jobs.exit["h.0"] = (jobs.dispatch["h.0"], 0)
    assert launcher.exited("h.0")
    launcher.start("h.0")
    assert not launcher.exited("h.0")
    assert launcher.observe({"h.0"}) == []
    assert time.monotonic() == clock.now
