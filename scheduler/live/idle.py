"""The idle rule in the live loop (docs/architecture.md, "Idle jobs"): each step looks at
the running jobs' members and their slots' figures through the pure rule
(``scheduler/policies/idle.py``), says on a job's timeline when it becomes idle and when it
is busy again, and answers which idle jobs their team's or group's rule holds at their
minimum. What it flags goes into the allocation record (``AllocationRecord.idle``), the one
place pages, the API and ``/metrics`` read it from; a scheduler taking over goes on from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from protocol.slots import SlotInfo
from scheduler.live.ports import RUNNING, JobBook, JobRow, Tenancy
from scheduler.policies import idle as rule_of
from scheduler.policies.idle import IdleRule, Spell


class IdleWatch:
    """The spells of the running jobs, and the idle ones (job -> (since, whose rule holds
    it at its minimum, "" for none)) as last flagged."""

    def __init__(self, rule: IdleRule, book: JobBook) -> None:
        self.rule = rule
        self.book = book
        self.spells: dict[str, Spell] = {}
        self.flagged: dict[int, tuple[float, str]] = {}
        self.resumed: dict[int, tuple[float, str]] | None = None  # from the last record
        self.looked = False  # a first look was made (resumed from the record, if any)

    def resume(self, flagged: Mapping[int, tuple[float, str]]) -> None:
        """Go on from a record's idle jobs (a scheduler taking over): their spells began
        when it says, and their slots count as settled."""
        self.resumed = dict(flagged)

    def look(self, alive: Sequence[SlotInfo], members: Mapping[int, Sequence[str]],
             jobs: Mapping[int, JobRow], tenancy: Tenancy,
             now: float) -> dict[int, str]:  # fmt: skip
        """One look at the running jobs (``members``: each job's generation); returns the
        idle jobs to hold at their minimum, each with the reason to say."""
        self.looked = True
        if not self.rule.on:
            self.flagged = {}
            return {}
        running = {str(pk): held for pk, held in members.items()
                   if held and pk in jobs and jobs[pk].state == RUNNING}  # fmt: skip
        self._resume(running, now)
        figures = {s.slot_id: float(s.telemetry["utilisation"]) for s in alive
                   if isinstance(s.telemetry.get("utilisation"), (int, float))}  # fmt: skip
        self.spells = rule_of.watch(self.spells, running, figures, now, self.rule)
        flagged = {}
        for key, since in rule_of.idle(self.spells, now, self.rule).items():
            job = jobs[int(key)]
            by = rule_of.shrunk_by(job.team, job.group, tenancy.teams, tenancy.shrink_teams,
                                   tenancy.shrink_groups)  # fmt: skip
            flagged[int(key)] = (since, by)
        self._announce(flagged, jobs)
        self.flagged = flagged
        return {pk: rule_of.reason(self.rule, jobs[pk].min_workers, by)
                for pk, (_, by) in flagged.items() if by}  # fmt: skip

    def _resume(self, running: Mapping[str, Sequence[str]], now: float) -> None:
        if self.resumed is None:
            return
        for pk, (since, by) in self.resumed.items():
            held = running.get(str(pk))
            if held and str(pk) not in self.spells:
                self.spells[str(pk)] = Spell(frozenset(held), now - self.rule.settle, since)
                self.flagged[pk] = (since, by)  # said already: no second "idle" event
        self.resumed = None

    def _announce(self, flagged: Mapping[int, tuple[float, str]],
                  jobs: Mapping[int, JobRow]) -> None:  # fmt: skip
        """An "idle" event for each job flagged now and not before, a "busy" one for each
        no longer flagged that a slot's figure showed busy."""
        for pk, (since, by) in flagged.items():
            if pk not in self.flagged:
                held = (f"held at its minimum of {jobs[pk].min_workers} by {by}'s rule" if by
                        else "no rule of its team or group shrinks it")  # fmt: skip
                self.book.record_event(pk, "idle", f"idle: {self.rule.text()}; {held}",
                                       since=round(since, 3), shrunk_by=by)  # fmt: skip
        for pk in self.flagged.keys() - flagged.keys():
            if str(pk) in self.spells:  # judged busy (not gone, nor between generations)
                self.book.record_event(pk, "busy", f"busy again: a slot at or over "
                                       f"{self.rule.below * 100:g} % utilisation")  # fmt: skip

    def record(self) -> dict[int, tuple[float, str]]:
        """The idle jobs for the allocation record."""
        return dict(self.flagged)
