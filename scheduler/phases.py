"""A job's phase while the scheduler applies decisions to it, as an explicit state machine.

Each scheduler tick observes facts about the job (its learners' leases and exits, the
metrics stream, the allocation it should have) and :func:`advance` answers whether the
job moves to another phase, naming the transition. The caller carries the transition out
and logs it; events are recorded on transitions only, so a fact that stays true (a slot
still lost, a shrink still pending) never repeats an event. Pure: no Redis, no Django.

Phases (the database's job state in brackets):

- ``WAITING`` [QUEUED, SUSPENDED or RUNNING]: no generation runs; joiners are on their way.
- ``TRAINING`` [RUNNING]: a generation trains; grows and shrinks happen inside this phase.
- ``RECOVERING`` [RUNNING]: learners were lost; the survivors form the next generation, or,
  with none left, the job restarts from its checkpoint (back to ``WAITING``).
- ``SUSPENDING`` [RUNNING]: its allocation fell to zero; learners checkpoint and exit.
- ``COMPLETING`` [COMPLETED]: training finished; learners are exiting.
- ``SUSPENDED``, ``COMPLETED``, ``FAILED``: the runner's work is over.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobPhase(enum.StrEnum):
    WAITING = "waiting"
    TRAINING = "training"
    RECOVERING = "recovering"
    SUSPENDING = "suspending"
    COMPLETING = "completing"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"


FINAL = frozenset({JobPhase.SUSPENDED, JobPhase.COMPLETED, JobPhase.FAILED})


@dataclass(frozen=True)
class Facts:
    """What the scheduler observed about one job in this tick."""

    target: int  # slots the decision gives it
    members: int  # learners in its current generation (0: none runs)
    learners: int  # its learners still alive anywhere: members, joiners, leavers
    lost: bool = False  # a member's lease lapsed, it exited, or it reported a failure
    done: bool = False  # rank 0 said training is finished
    error: bool = False  # the user's code failed
    started: bool = False  # the job has trained before (a checkpoint or a generation)
    gave_up: bool = False  # its learners kept failing before they could join: a crash loop


@dataclass(frozen=True)
class Transition:
    previous: JobPhase
    next: JobPhase
    name: str  # what happened, for the log: "lost learners", "suspend"...

    def __str__(self) -> str:
        return f"{self.previous} -> {self.next} ({self.name})"


def advance(phase: JobPhase, facts: Facts) -> Transition | None:
    """The transition the facts call for, or None to stay. Rules in order of precedence."""
    if phase in FINAL:
        return None
    # 1. A failure of the user's code ends the job, whatever else is going on.
    if facts.error:
        return Transition(phase, JobPhase.FAILED, "user code failed")
    if facts.gave_up:
        return Transition(phase, JobPhase.FAILED, "learners could not start")
    # 2. Finished: wait until every learner is out, then the job is complete.
    if phase is JobPhase.COMPLETING or facts.done:
        if facts.learners == 0:
            return Transition(phase, JobPhase.COMPLETED, "learners exited")
        return None if phase is JobPhase.COMPLETING else Transition(
            phase, JobPhase.COMPLETING, "training finished")  # fmt: skip
    # 3. Suspending: its learners checkpoint and leave; then its slots are free.
    if phase is JobPhase.SUSPENDING:
        if facts.learners == 0:
            return Transition(phase, JobPhase.SUSPENDED, "checkpointed and out")
        return None
    # 4. Learners lost: recover before anything else changes.
    if facts.lost and phase is JobPhase.TRAINING:
        return Transition(phase, JobPhase.RECOVERING, "lost learners")
    if phase is JobPhase.RECOVERING and not facts.lost:
        if facts.members:
            return Transition(phase, JobPhase.TRAINING, "survivors go on")
        return Transition(phase, JobPhase.WAITING, "restart from checkpoint")
    # 5. No slots for it any more.
    if facts.target == 0:
        if facts.members:
            return Transition(phase, JobPhase.SUSPENDING, "allocation fell to zero")
        if facts.learners == 0 and facts.started and phase is not JobPhase.RECOVERING:
            return Transition(phase, JobPhase.SUSPENDED, "no learner and no slot left")
        return None
    # 6. A generation formed: training (again).
    if phase is JobPhase.WAITING and facts.members:
        return Transition(phase, JobPhase.TRAINING, "generation formed")
    if phase is JobPhase.TRAINING and not facts.members:
        return Transition(phase, JobPhase.WAITING, "no generation")
    return None
