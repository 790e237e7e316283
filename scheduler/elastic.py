"""The coordinator's side of the elastic protocol for one job (docs/architecture.md,
"Elastic training protocol").

It starts joiners first and publishes the generation that includes them only once they are
READY, shrinks at once, replaces a generation after a learner fails, and starts over from
the latest checkpoint when every learner is gone. How learners are started is the
``Launcher``'s business: local processes (the drive command) or Celery tasks on slot queues.
At most one published generation is waiting to be adopted at any time.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from protocol.exits import Exit
from protocol.jobstore import JobStore

FAILURE_GRACE_SECONDS = 1.0

EventSink = Callable[[str, dict[str, Any]], None]


class Launcher(Protocol):
    def start(self, slot: str) -> None: ...
    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None: ...
    def exited(self, slot: str) -> bool: ...


class Coordinator:
    def __init__(self, jobs: JobStore, launcher: Launcher, on_event: EventSink,
                 collective_timeout: float = 0.0) -> None:  # fmt: skip
        self.jobs = jobs
        self.launcher = launcher
        self.on_event = on_event
        # How long a member may stay silent after a peer died: blocked in a collective on
        # the dead peer (its host cut off: nothing resets the connection), it reports the
        # failure only when the collective times out.
        self.waiting_on_dead = collective_timeout + FAILURE_GRACE_SECONDS
        self.members: list[str] = []
        self.joining: list[str] = []
        self.started: set[str] = set()
        self.step = 0
        self.done = False
        self.cursor = "0-0"
        self.failure_since: float | None = None
        self.handled_failures = 0

    def event(self, kind: str, **data: Any) -> None:
        self.on_event(kind, {"step": self.step, "time": time.time(), **data})

    # Membership ----------------------------------------------------------------------------

    def start_joiners(self, slots: list[str]) -> None:
        for slot in slots:
            self.launcher.start(slot)
            self.started.add(slot)
        self.joining += slots

    def settled(self) -> bool:
        """No failure being handled and the latest generation adopted (or none runs, so
        none can be waited for): safe to change."""
        if self.failure_since is not None:
            return False
        return not self.members or self.jobs.adopted() == self.jobs.generation()

    def publish(self, members: list[str], why: str) -> None:
        self.members = members
        gen = self.jobs.publish_generation(members)
        self.event("generation", gen=gen, workers=len(members), members=members, why=why)

    def grow_to(self, want: int, why: str = "") -> bool:
        """Admit READY joiners until ``want`` members; True once a generation is published."""
        missing = want - len(self.members)
        ready = self.jobs.ready_slots()
        joiners = [s for s in self.joining if s in ready][:missing]
        if missing <= 0 or len(joiners) < missing or not self.settled():
            return False
        self.joining = [s for s in self.joining if s not in joiners]
        self.publish(self.members + joiners, why or f"grow to {want}")
        return True

    def shrink_to(self, want: int, why: str = "", alive: Collection[str] | None = None) -> None:
        """Keep the ``want`` longest-standing members whose slots are ``alive`` (all when
        not given); the others leave after this step. A member on a lost slot (its host
        dead or cut off) is never kept in place of one that still trains."""
        if not 0 < want < len(self.members) or not self.settled():
            return
        staying = [s for s in self.members if alive is None or s in alive][:want]
        if staying:
            self.publish(staying, why or f"shrink to {want}")

    def dead_joiners(self) -> list[str]:
        return [s for s in self.joining if self.launcher.exited(s)]

    def drop_dead_joiners(self) -> list[str]:
        """Forget joiners that died before joining: their slots are the scheduler's again."""
        dead = self.dead_joiners()
        self.joining = [s for s in self.joining if s not in dead]
        self.started -= set(dead)
        return dead

    # Failures ------------------------------------------------------------------------------

    def watch_failures(self) -> bool:
        """Replace the generation once every member reported failure, died, or was silent:
        for ``FAILURE_GRACE_SECONDS`` when peers reported a failure (the silent one is the
        suspect), for the collective timeout when a member died (the silent ones are
        waiting on it and still alive). True while a failure is being handled (members
        lost, their replacement not yet published)."""
        reports = self.jobs.failures()
        gen = self.jobs.generation()
        failed = {r["slot"] for r in reports[self.handled_failures :] if r["gen"] == gen}
        dead = {s for s in self.members if self.launcher.exited(s) and not self._finished(s)}
        if not failed and not dead:
            return False
        now = time.monotonic()
        self.failure_since = self.failure_since or now
        silent = set(self.members) - failed - dead
        grace = self.waiting_on_dead if dead else FAILURE_GRACE_SECONDS
        if silent and now - self.failure_since < grace:
            return True
        self.handled_failures = len(reports)
        self.failure_since = None
        self._replace(survivors=[s for s in self.members if s in failed and s not in dead])
        return False

    def _finished(self, slot: str) -> bool:
        """The member's learner reported a clean exit: it finished or was told to stop (a
        peer still training would see the collective fail and report it)."""
        exit_code = getattr(self.launcher, "exit_code", None)
        return exit_code is not None and exit_code(slot) == Exit.FINISHED

    def _replace(self, survivors: list[str]) -> None:
        lost = [s for s in self.members if s not in survivors]
        for slot in lost:
            self.launcher.kill(slot)  # frozen or dead: make sure it is gone
            self.started.discard(slot)  # its slot is the scheduler's to give again
        self.event("failure", lost=lost, survivors=survivors)
        if survivors:
            self.publish(survivors, f"{len(lost)} learner(s) lost")
        else:
            self.restart_from_checkpoint()

    def restart_from_checkpoint(self) -> None:
        """Every learner is gone: new learners will load the latest checkpoint."""
        resumed = self.jobs.checkpoint_step()
        self.event("restart", from_step=resumed, iterations_lost=self.step - resumed)
        self.members = []
        self.step = resumed
        for slot in self.joining:  # they loaded an older state: new ones load the latest
            self.launcher.kill(slot)
            self.started.discard(slot)
        self.joining = []

    # Progress ------------------------------------------------------------------------------

    def read_metrics(self) -> list[dict[str, Any]]:
        """New metric records since the last call; tracks the step and completion."""
        records = []
        for eid, record in self.jobs.read_metrics(self.cursor):
            self.cursor = eid
            records.append(record)
            if record["type"] == "train":
                self.step = record["step"]
            elif record["type"] == "done":
                self.done = True
                self.jobs.request_stop()  # learners still waiting to join go home
        return records

    def first_error(self) -> str | None:
        """The user's code failed: its message and traceback line, for the job's record."""
        errors = self.jobs.errors()
        if errors:
            first = errors[0]
            return f"{first['message']} ({first['trace']})" if first["trace"] else first["message"]
        failed = [s for s, result in self.jobs.exits().items() if result.user_code_failed]
        return f"the learner on {failed[0]} failed; see its log" if failed else None

    def all_exited(self) -> bool:
        return all(self.launcher.exited(s) for s in self.started)

    def kill_all(self) -> None:
        for slot in self.started:
            self.launcher.kill(slot)
