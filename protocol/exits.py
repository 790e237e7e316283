"""A learner's exit status and what it means to the coordinator: the one list of them.

A learner process (``python -m workers.learner``, or the WMLA launcher's) ends with one of
these; its slot task reports it with the learner's token (:meth:`JobStore.report_exit`),
and the coordinator reads it back as a :class:`RunResult`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Exit(IntEnum):
    FINISHED = 0  # training finished, or the learner left the job as told (a shrink, a stop)
    CRASHED = 1  # the process failed outside the user's code (Python's own status)
    USER_CODE_FAILED = 2  # the user's code raised: reported to the job, which fails
    # Left the job: a state broadcast into it failed (a peer died mid-resize) and no
    # checkpoint exists to go back to. To the coordinator, a lost learner.
    TORN = 3
    # Reported by a slot task, for a learner it did not start: its token was no longer
    # current (EX_TEMPFAIL), or the slot refuses user code (EX_CONFIG: a Redis that lets
    # anyone in, workers/deployment.py).
    STALE = 75
    REFUSED = 78


class RunResult(NamedTuple):
    """How the learner last sent to a slot ended: the token it was started with and its
    exit status (from the job's ``exits`` hash)."""

    token: str
    code: int

    @property
    def clean(self) -> bool:
        """It finished or left as told: a peer still training would have reported the
        failure of a collective, so a clean exit is no failure of the job's."""
        return self.code == Exit.FINISHED

    @property
    def user_code_failed(self) -> bool:
        return self.code == Exit.USER_CODE_FAILED
