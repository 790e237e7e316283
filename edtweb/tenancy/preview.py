"""What a change to the teams would do to their shares, in the scheduler's own words
(docs/architecture.md, "Tenancy"): per resource group, each team's slots now, the slots the
scheduler's policy gives it with the teams as they are and with the change, and its
entitlement before and after.

The snapshot is the scheduler's (``scheduler/live/snapshot.py``, as the priority preview
builds it: ``edtweb/training/history.py``), made per resource group as "What the scheduler
will read" says: the group's alive slots (by the groups' rules), its active jobs with their
owners and teams, and the teams (``services.policy_teams``). The policy is the one of the
scheduler's last decision, run as it is (``scheduler.policies.decide``); a team's slots and
entitlement count its sub-teams' (``slots_by_team``, ``entitlements``). Nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from django.core.exceptions import ValidationError

from edtweb.tenancy.models import ResourceGroup
from edtweb.tenancy.services import policy_teams, rules
from scheduler.groups import DEFAULT, partition
from scheduler.live.snapshot import SnapshotBuilder
from scheduler.policies import Snapshot, Team, decide, entitlements, slots_by_team
from scheduler.policies.model import check_teams

NO_TEAM = ""  # the jobs of no team, as the policy and the shares stream name them
CHANGEABLE = ("weight", "guarantee", "limit", "parent")


def current_teams() -> list[Team]:
    """The teams as the policy reads them now."""
    return [Team(**t) for t in policy_teams()]


def proposed(teams: list[Team], changes: dict[str, dict[str, Any]]) -> list[Team]:
    """``teams`` with ``changes`` (team name -> its new ``weight``, ``guarantee``,
    ``limit`` (None: none) or ``parent`` (a team's name; ``""`` or None: at the top)),
    checked as the policy checks teams; a ValidationError naming the team otherwise."""
    by_name = {t.name: t for t in teams}
    ids = {t.name: t.id for t in teams}
    names = {t.id: t.name for t in teams}
    changed = {}
    for name, fields in changes.items():
        team = by_name.get(name)
        if team is None:
            known = ", ".join(sorted(by_name)) or "none"
            raise ValidationError({"teams": f"no team {name!r} (the teams: {known})"})
        unknown = sorted(set(fields) - set(CHANGEABLE))
        if unknown:
            allowed, given = ", ".join(CHANGEABLE), ", ".join(unknown)
            raise ValidationError({f"teams.{name}": f"a preview changes {allowed}, not {given}"})
        values = {k: v for k, v in fields.items() if k != "parent"}
        if "parent" in fields:
            parent = fields["parent"] or ""
            if parent and parent not in ids:
                raise ValidationError({f"teams.{name}": f"no team {parent!r} to be its parent"})
            values["parent"] = ids.get(parent, "")
        guarantee = values.get("guarantee", team.guarantee)
        limit = values.get("limit", team.limit)
        if limit is not None and guarantee > limit:
            raise ValidationError({f"teams.{name}": f"a guarantee of {guarantee} is over the "
                                   f"limit {limit}"})  # fmt: skip
        try:
            changed[team.id] = replace(team, **values)
        except (TypeError, ValueError) as exc:
            raise ValidationError({f"teams.{name}": _named(str(exc), names)}) from None
    after = [changed.get(t.id, t) for t in teams]
    try:
        check_teams(tuple(after))
    except ValueError as exc:
        raise ValidationError({"teams": _named(str(exc), names)}) from None
    return after


def _named(message: str, names: dict[str, str]) -> str:
    """A policy's message about team ids, with the teams' names."""
    return re.sub(r"team '?(\d+)'?", lambda m: f"team {names.get(m.group(1), m.group(1))}", message)


def preview(changes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per resource group, each team's slots now, before and after ``changes`` (see
    :func:`proposed`), with its entitlement before and after and what its jobs ask for."""
    from edtweb.redis_access import store
    from edtweb.training.history import policy_inputs
    from edtweb.training.live_adapter import schedulable_jobs

    before_teams = current_teams()
    after_teams = proposed(before_teams, changes)
    names = {t.id: t.name for t in before_teams}
    edited = {t.id for t in before_teams if t.name in changes}
    registry = store()
    record = registry.allocations()
    slots = partition(registry.alive_slots(), rules())
    active = list(schedulable_jobs().order_by("created_at"))
    held, speedups, attained = policy_inputs(record, active)
    groups = [g.name for g in ResourceGroup.objects.all()]
    groups += sorted({j.resource_group for j in active} - set(groups))
    out, divides = [], False
    for group in groups:
        jobs = [j for j in active if j.resource_group == group]
        capacity = len(slots.get(group, []))
        if not jobs and not capacity and group != DEFAULT:
            continue
        built = SnapshotBuilder().build(jobs, capacity, held, speedups, attained)
        views = [replace(view, owner=str(job.owner_id), team=str(job.team_id or ""))
                 for view, job in zip(built.jobs, jobs, strict=True)]  # fmt: skip
        before = Snapshot(capacity, views, tuple(before_teams))
        after = Snapshot(capacity, views, tuple(after_teams))
        first, then = decide(before, record.policy), decide(after, record.policy)
        divides = divides or bool(first.teams)
        now = slots_by_team(before, {v.id: v.current for v in views})
        slots_before = slots_by_team(before, first.targets)
        slots_after = slots_by_team(after, then.targets)
        entitled_before, entitled_after = entitlements(before)[0], entitlements(after)[0]
        demand = slots_by_team(after, {v.id: v.max_workers for v in views})
        rows = []
        for team in [*[t.id for t in before_teams], NO_TEAM]:
            row = {
                "team": names.get(team, ""),
                "now": now.get(team, 0),
                "before": slots_before.get(team, 0),
                "after": slots_after.get(team, 0),
                "entitled_before": round(entitled_before.get(team, 0.0), 3),
                "entitled_after": round(entitled_after.get(team, 0.0), 3),
                "demand": demand.get(team, 0),
                "changed": team in edited,
            }
            if team in edited or any(row[k] for k in ("now", "before", "after", "demand")):
                rows.append(row)
        out.append({"group": group, "capacity": capacity, "jobs": len(jobs), "teams": rows})
    return {
        "policy": record.policy,
        "divides_by_team": divides,
        "note": "" if divides or not active else _not_by_team(record.policy),
        "groups": out,
    }


def _not_by_team(policy: str) -> str:
    return (
        f"The scheduler's policy, {policy}, does not divide slots by team: the entitlements "
        "change, the slots it gives do not."
    )
