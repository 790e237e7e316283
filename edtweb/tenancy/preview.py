"""What a change to the teams would do to their shares, in the scheduler's own words
(docs/architecture.md, "Tenancy"): per resource group, each team's slots now, the slots the
scheduler's policy gives it with the teams as they are and with the change, and its
entitlement before and after.

The snapshots are the scheduler's, made as "What the scheduler reads" says and by the same
code (``live_adapter.scheduler_view``: the builder of the live loop's inputs, goodput fits
and host size included): per resource group its usable slots at the last decision
(``AllocationRecord.groups``; before any, its alive slots by the rules), its active jobs
with the slots each holds, their owners and teams, and the teams as that group reads them
(a team's guarantee and limit count in its own group alone). The policy is the
one of the scheduler's last decision (``scheduler.policies.decide``); a team's slots and
entitlement count its sub-teams' (``slots_by_team``, ``entitlements``). Nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from django.core.exceptions import ValidationError

from edtweb.tenancy.models import ResourceGroup
from scheduler.groups import DEFAULT
from scheduler.live.ports import Tenancy
from scheduler.policies import Team, decide, entitlements, slots_by_team
from scheduler.policies.model import check_teams

NO_TEAM = ""  # the jobs of no team, as the policy and the shares stream name them
CHANGEABLE = ("weight", "guarantee", "limit", "parent", "resource_group")


def proposed(teams: list[Team], changes: dict[str, dict[str, Any]]) -> list[Team]:
    """``teams`` with ``changes`` (team name -> its new ``weight``, ``guarantee``,
    ``limit`` (None: none) or ``parent`` (a team's name; ``""`` or None: at the top); its
    ``resource_group`` is :func:`_homes`'), checked as the policy checks teams; a
    ValidationError naming the team otherwise."""
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
        values = {k: v for k, v in fields.items() if k not in ("parent", "resource_group")}
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
    from edtweb.training.live_adapter import scheduler_view

    view = scheduler_view()
    now, record, rows = view.tenancy, view.record, view.rows
    names = {t.id: t.name for t in now.teams}
    after = replace(now, teams=tuple(proposed(list(now.teams), changes)),
                    homes=_homes(now, changes))  # fmt: skip
    edited = {t.id for t in now.teams if t.name in changes}
    firsts, thens = view.snapshots(), view.snapshots(after)
    out, divides = [], False
    for group in sorted(firsts, key=lambda g: (g != DEFAULT, g)):
        before, then = firsts[group], thens[group]
        if not before.jobs and not before.capacity and group != DEFAULT:
            continue
        first, second = decide(before, record.policy), decide(then, record.policy)
        divides = divides or bool(first.teams)
        current = slots_by_team(before, {v.id: v.current for v in before.jobs})
        slots_before = slots_by_team(before, first.targets)
        slots_after = slots_by_team(then, second.targets)
        entitled_before, entitled_after = entitlements(before)[0], entitlements(then)[0]
        demand = slots_by_team(then, {v.id: v.max_workers for v in then.jobs})
        teams = []
        for team in [*[t.id for t in now.teams], NO_TEAM]:
            row = {
                "team": names.get(team, ""),
                "now": current.get(team, 0),
                "before": slots_before.get(team, 0),
                "after": slots_after.get(team, 0),
                "entitled_before": round(entitled_before.get(team, 0.0), 3),
                "entitled_after": round(entitled_after.get(team, 0.0), 3),
                "demand": demand.get(team, 0),
                "changed": team in edited,
            }
            if team in edited or any(row[k] for k in ("now", "before", "after", "demand")):
                teams.append(row)
        jobs = len(before.jobs)
        out.append({"group": group, "capacity": before.capacity, "jobs": jobs, "teams": teams})
    return {
        "policy": record.policy,
        "divides_by_team": divides,
        "note": "" if divides or not rows else _not_by_team(record.policy),
        "groups": out,
    }


def _homes(now: Tenancy, changes: dict[str, dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Each team's own group, with the groups ``changes`` give (where a team's guarantee
    and limit count)."""
    ids = {t.name: t.id for t in now.teams}
    moved = {ids[name]: str(c["resource_group"]) for name, c in changes.items()
             if "resource_group" in c and name in ids}  # fmt: skip
    for group in moved.values():
        if group != DEFAULT and not ResourceGroup.objects.filter(name=group).exists():
            raise ValidationError({"teams": f"no resource group {group!r}"})
    return tuple((team, moved.get(team, group)) for team, group in now.homes)


def _not_by_team(policy: str) -> str:
    return (
        f"The scheduler's policy, {policy}, does not divide slots by team: the entitlements "
        "change, the slots it gives do not."
    )
