"""Why each team has the share it has, as the scheduler last published it: per team and
resource group its weight, guarantee and limit, its fair share, the slots it holds and
asks for, what it borrows or lends, each of its users' part, and its waiting jobs with the
scheduler's reasons (docs/architecture.md, "Tenancy").

Every number comes from the newest entry of the teams' shares stream
(``protocol.keys.SHARES_KEY``, written by ``scheduler/live/shares.py`` from its decision)
and every reason from the allocation record (``edtweb/training/standing.py``): nothing
here decides anything again. The Shares page, the API (``cluster/shares/teams/``,
``teams/<name>/share/``) and the CLI (``edt share``, ``edt why``) read :func:`teams_now`.
Staff see every team; anyone else the teams they are in, and only their jobs.
"""

from __future__ import annotations

from typing import Any

import redis
from django.db.models import Q

from edtweb.ownership import team_ids, visible_jobs
from edtweb.tenancy.models import Team
from edtweb.tenancy.shares import NO_TEAM, NO_TEAM_NAME
from edtweb.training.standing import queue_of

UNREADABLE = "the scheduler's shares cannot be read (Redis does not answer)"
UNPUBLISHED = "the scheduler has not published the teams' shares yet"


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _slots(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def latest() -> tuple[dict[str, Any] | None, str]:
    """The newest entry of the shares stream, or (None, why there is none)."""
    from edtweb.redis_access import store

    try:
        found = store().shares(count=1)
    except redis.RedisError:
        return None, UNREADABLE
    return (found[-1][1], "") if found else (None, UNPUBLISHED)


def team_line(body: dict[str, Any], user: Any) -> dict[str, Any]:
    """One team's line of a group's entry, with what follows from it: ``borrowed``, the
    slots it holds beyond its guarantee (other teams' jobs may take them back when they
    ask), and ``lent``, the part of its guarantee its jobs neither hold nor ask for (the
    others may use it until they do)."""
    held, demand, guarantee = (_number(body.get(k)) for k in ("held", "demand", "guarantee"))
    limit = body.get("limit")
    raw = body.get("users")
    users = [{"user": str(name), "held": _slots(_number(u.get("held"))),
              "entitled": _slots(_number(u.get("entitled"))),
              "you": str(name) == user.get_username()}
             for name, u in (raw if isinstance(raw, dict) else {}).items()
             if isinstance(u, dict)]  # fmt: skip
    return {
        "weight": _slots(_number(body.get("weight")) or 1),
        "guarantee": _slots(guarantee),
        "limit": _slots(_number(limit)) if isinstance(limit, (int, float)) else None,
        "entitled": _slots(_number(body.get("entitled"))),
        "held": _slots(held),
        "demand": _slots(demand),
        "borrowed": _slots(max(0.0, held - guarantee)),
        "lent": _slots(max(0.0, guarantee - max(held, demand))),
        "users": users,
    }


def _groups(entry: dict[str, Any] | None, team: str, user: Any) -> list[dict[str, Any]]:
    """``team``'s line in each group of ``entry`` where it is (groups by name)."""
    raw = (entry or {}).get("groups")
    out = []
    for group, body in sorted((raw if isinstance(raw, dict) else {}).items()):
        teams = body.get("teams") if isinstance(body, dict) else None
        line = teams.get(team) if isinstance(teams, dict) else None
        if isinstance(line, dict):
            out.append({"group": str(group), "capacity": _slots(_number(body.get("capacity"))),
                        "group_held": _slots(_number(body.get("held"))),
                        **team_line(line, user)})  # fmt: skip
    return out


def _waiting(user: Any, teams: list[Team | None]) -> dict[int | None, list[dict[str, Any]]]:
    """The waiting jobs of ``teams`` (None: the jobs of no team) that ``user`` may see, per
    team id, in the scheduler's order, each with its place in its group's queue and its
    reason (one read of the allocation record, one query)."""
    ids = [t.pk for t in teams if t is not None]
    wanted = Q(team__in=ids) | Q(team__isnull=True) if None in teams else Q(team__in=ids)
    waiting, places, reasons = queue_of(visible_jobs(user).filter(wanted))
    out: dict[int | None, list[dict[str, Any]]] = {}
    for job in waiting:
        out.setdefault(job.team_id, []).append({
            "id": job.pk, "name": job.name, "owner": job.owner.get_username(),
            "state": job.state, "group": job.resource_group, "priority": job.priority,
            "min_workers": job.min_workers, "max_workers": job.max_workers,
            "position": places[job.pk], "reason": reasons.get(job.pk, ""),
        })  # fmt: skip
    return out


def seen_teams(user: Any) -> list[Team]:
    """The teams ``user`` may see the shares of: their own (staff: all), by name."""
    teams = Team.objects.order_by("name")
    return list(teams if user.is_staff else teams.filter(pk__in=team_ids(user)))


def teams_now(user: Any, only: Team | None = None) -> dict[str, Any]:
    """Each team ``user`` may see (``only``: that one, whose access the caller checked),
    as the scheduler's newest shares entry has it: ``t`` (its unix time, None without
    one), ``note`` (why there are no numbers, else empty) and per team its name, whether
    ``user`` is in it, its lines per group (:func:`team_line`) and its waiting jobs. Staff
    also get the jobs of no team where they hold or ask for slots."""
    entry, note = latest()
    teams: list[Team | None] = [only] if only is not None else list(seen_teams(user))
    mine = team_ids(user)
    if only is None and user.is_staff and _groups(entry, NO_TEAM, user):
        teams.append(None)
    waiting = _waiting(user, teams)
    out = []
    for team in teams:
        key = NO_TEAM if team is None else str(team.pk)
        out.append({
            "team": "" if team is None else team.name,
            "name": NO_TEAM_NAME if team is None else team.name,
            "member": team is not None and team.pk in mine,
            "groups": _groups(entry, key, user),
            "waiting": waiting.get(None if team is None else team.pk, []),
        })  # fmt: skip
    return {"t": _number(entry.get("t")) or None if entry else None, "note": note, "teams": out}
