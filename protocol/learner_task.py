"""The learner task's message: what the scheduler tells a slot to start (``edt.run_learner``
on the slot's queue), carrying the job's paths as the platform recorded them, so that the
slot task reads no database and takes nothing from the job's own files (docs/architecture.md,
"Sources of truth"). The scheduler's Redis is the only writer of the slots' queues: learners
cannot reach them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

TASK = "edt.run_learner"


class LearnerPaths(NamedTuple):
    """A job's dataset, model code, job directory and spec file."""

    data: Path
    model: Path
    workdir: Path
    spec: Path

    def as_message(self) -> dict[str, str]:
        return {name: str(value) for name, value in self._asdict().items()}

    @classmethod
    def of(cls, message: dict[str, Any]) -> LearnerPaths:
        return cls(*(Path(str(message[name])) for name in cls._fields))


def learner_args(job_id: int, slot: str, token: str, paths: LearnerPaths) -> list[Any]:
    """The task's arguments, as ``workers/tasks.py`` takes them."""
    return [job_id, slot, token, paths.as_message()]
