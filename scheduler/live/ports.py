"""What the live scheduler needs of the rest of the platform, and nothing more
(docs/architecture.md, "Layering"): the job rows and their transitions (``JobBook``), and
how to reach Redis and the slots' queues (``Ports``). The web's implementation is
``edtweb/training/live_adapter.py``; the table tests use an in-memory one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import redis

from protocol.learner_task import LearnerPaths
from scheduler.elastic import START_FAILURES
from scheduler.groups import DEFAULT as DEFAULT_GROUP
from scheduler.groups import Rule
from scheduler.moves import MOVE_EVERY
from scheduler.policies import ACTIVE as ACTIVE  # a job's states, as its row spells them
from scheduler.policies import COMPLETED as COMPLETED
from scheduler.policies import FAILED as FAILED
from scheduler.policies import QUEUED as QUEUED
from scheduler.policies import RUNNING as RUNNING
from scheduler.policies import STOPPED as STOPPED
from scheduler.policies import SUSPENDED as SUSPENDED
from scheduler.policies import Team
from scheduler.policies.idle import IDLE_RULE, IdleRule


class JobRow(NamedTuple):
    """The fields of a job the scheduler reads on every step, as one row: thousands of jobs
    per step are read without building a model instance for each. ``owner``: its user's
    name; ``team``: its team's id as the tenancy names it (``""``: none); ``group``: the
    resource group it runs in (docs/architecture.md, "Tenancy"). ``batch_size`` (its base
    batch), ``batch_min``, ``batch_max`` (both 0: a fixed batch) and ``max_micro_batch``:
    its batches (docs/architecture.md, "Goodput mode")."""

    pk: int
    name: str
    state: str
    priority: int
    max_workers: int
    min_workers: int
    collective_timeout: float
    created_at: datetime
    owner: str = ""
    team: str = ""
    group: str = DEFAULT_GROUP
    batch_size: int = 0
    batch_min: int = 0
    batch_max: int = 0
    max_micro_batch: int = 0


@dataclass(frozen=True)
class Tenancy:
    """Who shares the slots, as a decision reads it: the resource groups' rules in the
    order they are tried, the teams (``scheduler.policies.Team`` as it holds in the team's
    own group: its guarantee and limit count there, nowhere else), and each team's group;
    the teams (ids) and groups (names) whose rule holds their idle jobs at their minimum
    (docs/architecture.md, "Idle jobs")."""

    rules: tuple[Rule, ...] = ()
    teams: tuple[Team, ...] = ()
    homes: tuple[tuple[str, str], ...] = ()  # (team id, its group)
    shrink_teams: frozenset[str] = frozenset()
    shrink_groups: frozenset[str] = frozenset()

    def teams_in(self, group: str) -> tuple[Team, ...]:
        """The teams as a snapshot of ``group`` reads them: every team (a job may run
        outside its team's own group), with its guarantee and limit only in its own."""
        homes = dict(self.homes)
        return tuple(t if homes.get(t.id, DEFAULT_GROUP) == group
                     else replace(t, guarantee=0, limit=None) for t in self.teams)  # fmt: skip


class JobBook(Protocol):
    """The jobs' records: which are to be scheduled, their state changes and timelines."""

    # Errors that mean "the database is away for now": the step fails and is retried.
    AWAY: tuple[type[Exception], ...]

    def schedulable(self, created: dict[int, datetime]) -> list[JobRow]:
        """The active jobs a decision is about (``created``: a cache of submission times
        kept between calls, a job's never changes)."""
        ...

    def start(self, job_id: int) -> bool: ...
    def fail(self, job_id: int, message: str) -> bool: ...
    def complete(self, job_id: int) -> bool: ...
    def suspend(self, job_id: int, checkpoint_step: int) -> bool: ...

    def record_event(self, job_id: int, kind: str, message: str, **data: Any) -> None:
        """A line of the job's timeline, pushed to its pages."""
        ...

    def batched(self) -> AbstractContextManager[None]:
        """The events and page pushes of the block, written and sent together at its end."""
        ...

    def train_records(self, job_id: int) -> list[dict[str, Any]]:
        """The job's latest train records (at most ``scheduler.live.speedups.WINDOW``), each
        with its ``step``: the one read of them, from which its rate per worker count
        (``speedups.observed_rates``), per placement (``moves.placement_rates``), noise scale
        and iteration times (``scheduler/policies/throughput_fit.py``) are derived."""
        ...

    def paths(self, job_ids: list[int]) -> dict[int, LearnerPaths]:
        """The jobs' paths as the platform recorded them, for their learner tasks."""
        ...

    def tenancy(self) -> Tenancy:
        """The groups' rules and the teams now (read each step: an admin's change counts at
        the next decision)."""
        ...


@dataclass(frozen=True)
class Ports:
    """``redis``: this process's client (called each step: a test that switches Redis gets
    its own); ``celery``: the Celery app whose task messages start learners (used as an
    object: scheduler/dispatch.py builds the messages from it); ``redis_url`` and ``secret``:
    what the learners' per-job ACL users are derived from (protocol/redis_acl.py);
    ``start_failures``: how many learners in a row may exit before joining a job before it
    fails (``EDT_START_FAILURES``); ``move_every``: the fewest seconds between two learner
    moves of a job, and the horizon a move must pay back within (``EDT_MOVE_INTERVAL``);
    ``idle_rule``: when a job is idle."""

    book: JobBook
    redis: Callable[[], redis.Redis]
    celery: Any
    redis_url: str
    secret: str
    # Learners failing before they join, in a row, after which a job fails (a crash loop).
    start_failures: int = START_FAILURES
    # Learner moves: at most one per job per this many seconds, each paying back within it.
    move_every: float = MOVE_EVERY
    # When a job is idle (EDT_IDLE_UTILISATION, EDT_IDLE_SECONDS): docs/architecture.md,
    # "Idle jobs".
    idle_rule: IdleRule = IDLE_RULE
