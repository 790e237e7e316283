"""Idle jobs (docs/architecture.md, "Idle jobs"): a job whose slots all stayed under an
admin-set utilisation for an admin-set time is idle; where its team's or its resource
group's rule says so, it is held at its minimum (never stopped) until it is busy again.

Pure, as the policies are: the live loop (``scheduler/live/idle.py``) gives each look the
job's members and the slots' figures (``utilisation``, 0..1, each slot's own over its last
heartbeat's window: workers/telemetry.py) and carries out what comes back.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.policies.model import Decision, JobView, Snapshot, Team


@dataclass(frozen=True, slots=True)
class IdleRule:
    """``below``: the utilisation (0..1) every slot of a job must stay under; ``seconds``:
    for how long before the job is idle (0: no job is ever idle); ``settle``: the seconds
    after a job's slots changed whose figures judge nothing (the change's own work, a
    group formed and a state sent, would end a spell; a slot's figure from before its
    learner started would begin one)."""

    below: float = 0.10
    seconds: float = 600.0
    settle: float = 10.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.below <= 1.0:
            raise ValueError("an idle rule's utilisation is a fraction, 0 to 1")
        if not (math.isfinite(self.seconds) and self.seconds >= 0 and self.settle >= 0):
            raise ValueError("an idle rule's times are finite numbers of seconds, at least 0")

    @property
    def on(self) -> bool:
        return self.seconds > 0

    def text(self) -> str:
        """The rule in words: "under 10 % utilisation for 5 min"."""
        return f"under {self.below * 100:g} % utilisation for {duration(self.seconds)}"


IDLE_RULE = IdleRule()  # the defaults: under 10 % for 10 min


def duration(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(frozen=True, slots=True)
class Spell:
    """What the rule keeps of a job between two looks: its members at the last look, when
    they last changed, and since when every one of them has been under the rule's
    utilisation (None: it is busy, or not judged yet)."""

    members: frozenset[str]
    changed: float
    since: float | None = None

    def idle(self, now: float, rule: IdleRule) -> bool:
        return rule.on and self.since is not None and now - self.since >= rule.seconds


def watch(spells: Mapping[str, Spell], members: Mapping[str, Iterable[str]],
          utilisation: Mapping[str, float], now: float,
          rule: IdleRule) -> dict[str, Spell]:  # fmt: skip
    """Each job's spell after one look at its members' figures (``utilisation``: slot ->
    0..1; a slot without one is unknown). In order:

    1. A job without members has no spell (it waits, or is between generations).
    2. A job whose members changed starts settling now; one that gained a slot is judged
       afresh (its spell, if any, ends): the new slot's past is not the job's. One that
       only lost slots keeps its spell: the slots it keeps were under all along.
    3. While it settles, its spell stays as it was.
    4. A member unknown, or at or above the rule's utilisation, ends its spell: it is busy.
    5. Otherwise its spell goes on, or begins now.
    """
    out: dict[str, Spell] = {}
    for job, held in members.items():
        slots = frozenset(held)
        if not slots:  # 1
            continue
        last = spells.get(job)
        if last is None:
            spell = Spell(slots, now)
        elif slots != last.members:  # 2
            spell = Spell(slots, now, last.since if slots <= last.members else None)
        else:
            spell = last
        if now - spell.changed < rule.settle:  # 3
            out[job] = spell
            continue
        figures = [utilisation.get(slot) for slot in slots]
        if any(f is None or f >= rule.below for f in figures):  # 4
            out[job] = replace(spell, since=None)
        else:  # 5
            out[job] = spell if spell.since is not None else replace(spell, since=now)
    return out


def idle(spells: Mapping[str, Spell], now: float, rule: IdleRule) -> dict[str, float]:
    """The idle jobs, each with the time its spell began."""
    return {job: s.since for job, s in spells.items() if s.idle(now, rule) and s.since is not None}


def shrunk_by(team: str, group: str, teams: Sequence[Team], team_rules: Collection[str],
              group_rules: Collection[str]) -> str:  # fmt: skip
    """Whose rule holds an idle job of ``team`` (an id; "" for none) in ``group`` at its
    minimum: "group gpu", "team vision" (its own team, or a team above it: a rule covers
    a team's sub-teams), or "" where no rule does."""
    if group in group_rules:
        return f"group {group}"
    known = {t.id: t for t in teams}
    seen: set[str] = set()
    at = known.get(team)
    while at is not None and at.id not in seen:
        if at.id in team_rules:
            return f"team {at.label}"
        seen.add(at.id)
        at = known.get(at.parent)
    return ""


def at_minimum(snapshot: Snapshot, jobs: Collection[str]) -> Snapshot:
    """``snapshot`` with each of ``jobs`` asking for its minimum alone: the policy then
    gives it that (or nothing, as any job whose minimum does not fit), and its other slots
    to the rest."""
    if not jobs or not any(view.id in jobs for view in snapshot.jobs):
        return snapshot
    views = [held(view) if view.id in jobs else view for view in snapshot.jobs]
    return replace(snapshot, jobs=views)


def held(view: JobView) -> JobView:
    return replace(view, max_workers=view.min_workers)


def reason(rule: IdleRule, minimum: int, by: str) -> str:
    """Why an idle job holds its minimum: "idle: under 10 % utilisation for 5 min; shrunk
    to its minimum of 1 by group gpu's rule"."""
    return f"idle: {rule.text()}; shrunk to its minimum of {minimum} by {by}'s rule"


def explained(decision: Decision, why: Mapping[str, str]) -> Decision:
    """``decision`` with each of ``why``'s jobs (held at their minimum for being idle)
    given ``why``'s words: as the reason for a shrink (to fewer slots, not none), and as its
    standing while it holds slots (a job that waits, or is suspended, says the policy's own
    reason, as one that grows)."""
    if not why:
        return decision
    changes = decision.changes()
    reasons = {k: why[k] if k in why and 0 < changes[k][1] < changes[k][0] else r
               for k, r in decision.reasons.items()}  # fmt: skip
    explain = decision.explain

    def standing(view: JobView, target: int) -> str:
        if target and view.id in why:
            return why[view.id]
        return explain(view, target) if explain else ""

    return replace(decision, reasons=reasons, explain=standing)
