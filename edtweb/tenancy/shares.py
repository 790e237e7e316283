"""The teams' shares over time and their queues, as the Cluster page shows them
(docs/architecture.md, "Tenancy").

The scheduler writes each resource group's capacity and each team's slots held, its
entitlement and its demand to a stream (``protocol.keys.SHARES_KEY``: its format there),
with each team's waiting jobs in order; this reads it back (``Store.shares``) as a user may
see it. Staff see every team; anyone else sees the teams they are in, and each group's
capacity and slots held in all. A queue names only the jobs the user may see
(``edtweb/ownership.py``); the others are "another user's job".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from edtweb import params
from edtweb.ownership import Viewer, team_ids
from edtweb.tenancy.models import Team
from edtweb.training.models import Job

NO_TEAM = ""
NO_TEAM_NAME = "no team"
CURSOR = re.compile(r"^\d+-\d+$")  # a stream entry's id
LAST_ID_PART = 2**63 - 1  # each part of a stream entry's id is below 2^64 (Redis' own)
LATEST = 1e11  # seconds: a unix time past this (the year 5138) is a mistake
MOST = 5000  # entries in one answer: over an hour at the scheduler's once a second
SKEW = 300.0  # seconds the scheduler's clock may be off Redis' (the ``since`` of an answer)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _whole(value: Any) -> float | int:
    number = _number(value)
    return int(number) if number.is_integer() else round(number, 3)


class Scope:
    """The teams one user may see (None: all, for staff), and every team's name."""

    def __init__(self, user: Any) -> None:
        self.names = {str(pk): name for pk, name in Team.objects.values_list("pk", "name")}
        self.mine: set[str] | None = None if user.is_staff else {str(pk) for pk in team_ids(user)}

    def sees(self, team: str) -> bool:
        return self.mine is None or team in self.mine

    def name(self, team: str) -> str:
        return NO_TEAM_NAME if team == NO_TEAM else self.names.get(team, f"team {team}")


def entry(data: dict[str, Any], scope: Scope) -> dict[str, Any]:
    """One stream entry as ``scope`` may see it: per group its capacity, the slots held in
    all (``held``), and each team's ``held``, ``entitled`` and ``demand``."""
    groups: dict[str, Any] = {}
    raw_groups = data.get("groups")
    for group, body in (raw_groups if isinstance(raw_groups, dict) else {}).items():
        if not isinstance(body, dict):
            continue
        raw = body.get("teams")
        teams = {str(k): v for k, v in (raw if isinstance(raw, dict) else {}).items()
                 if isinstance(v, dict)}  # fmt: skip
        # The group's own total where the writer gives it (a team's held counts its
        # sub-teams'), else the teams' sum (entries of before nested teams were summed).
        held = body.get("held", sum(_number(v.get("held")) for v in teams.values()))
        groups[str(group)] = {
            "capacity": _whole(body.get("capacity")),
            "held": _whole(held),
            "teams": {
                team: {key: _whole(v.get(key)) for key in ("held", "entitled", "demand")}
                for team, v in teams.items()
                if scope.sees(team) and _number(v.get("demand"))  # an idle guarantee: no line
            },
        }
    return {"t": _number(data.get("t")), "groups": groups}


def since(text: str) -> tuple[str | None, float | None]:
    """A request's ``since``: (the cursor of an earlier answer, None) or (None, a unix time
    in seconds), (None, None) when empty; :class:`BadParameter` for anything else."""
    text = text.strip()
    if not text:
        return None, None
    why = ("a unix time in seconds, or the cursor of an earlier answer (1767000000000-0), "
           f"not {params.shown(text)}")  # fmt: skip
    if CURSOR.match(text):
        if any(int(part) > LAST_ID_PART for part in text.split("-")):
            raise params.BadParameter("since", why)
        return text, None
    try:
        moment = params.finite("since", text)
    except params.BadParameter:
        raise params.BadParameter("since", why) from None
    if not 0 <= moment <= LATEST:
        raise params.BadParameter("since", why)
    return None, moment


def history(user: Any, after: str | None = None, since: float | None = None) -> dict[str, Any]:
    """The entries after stream id ``after`` (else from unix time ``since``; else all, up
    to the newest :data:`MOST`), as ``user`` may see them; ``cursor`` is what to send as
    ``after`` next time. ``teams``: the names of the teams in them; ``queue``: each team's
    waiting jobs now (:func:`queues`)."""
    from edtweb.redis_access import store

    scope = Scope(user)
    registry = store()
    # An entry's id is Redis' clock, its ``t`` the scheduler's: ids from a little earlier,
    # then the entries by their own time.
    found = registry.shares(after, None if since is None else since - SKEW, MOST)
    entries = []
    for eid, data in found:
        shown = entry(data, scope)
        if not shown["t"]:  # the entry's time, else its id's (milliseconds)
            shown["t"] = int(eid.split("-")[0]) / 1000
        if since is None or shown["t"] >= since:
            entries.append(shown)
    keys = {team for e in entries for g in e["groups"].values() for team in g["teams"]}
    newest = found[-1:] or registry.shares(count=10)[-1:]  # the queue as last written
    latest = newest[0][1] if newest else None
    return {
        "cursor": found[-1][0] if found else (after or ""),
        "now": time.time(),
        "teams": {team: scope.name(team) for team in sorted(keys)},
        "entries": entries,
        "queue": queues(user, latest, scope),
    }


def queues(user: Any, latest: dict[str, Any] | None = None,
           scope: Scope | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each group's and team's waiting jobs, in the order the scheduler last wrote
    (``latest``'s ``queue``), then any waiting job it did not list (submitted since) in
    queue order (priority, then submission). Staff see every team's; anyone else their
    teams' and their own jobs'. Each job: its id and name when the user may see it."""
    from edtweb.training.standing import queue_order

    scope = scope or Scope(user)
    viewer = Viewer(user)
    waiting = queue_order()
    by_pk = {job.pk: job for job in waiting}
    ordered: dict[tuple[str, str], list[Job]] = {}
    listed: set[int] = set()
    groups = (latest or {}).get("groups")
    for group, body in (groups if isinstance(groups, dict) else {}).items():
        queue = body.get("queue") if isinstance(body, dict) else None
        for team, ids in (queue if isinstance(queue, dict) else {}).items():
            for pk in ids if isinstance(ids, list) else []:
                job = by_pk.get(int(pk)) if str(pk).isdigit() else None  # ids as text
                if job is not None and job.pk not in listed:
                    ordered.setdefault((str(group), str(team)), []).append(job)
                    listed.add(job.pk)
    for job in waiting:
        if job.pk not in listed:
            ordered.setdefault((job.resource_group, str(job.team_id or "")), []).append(job)
    out = []
    for (group, team), jobs in sorted(ordered.items(), key=_by_group_and_name(scope)):
        if not scope.sees(team) and not any(job.owner_id == user.pk for job in jobs):
            continue
        out.append({
            "group": group,
            "team": scope.name(team),
            "jobs": [_waiting(job, viewer) for job in jobs],
        })  # fmt: skip
    return out


def _by_group_and_name(scope: Scope) -> Callable[[tuple[tuple[str, str], Any]], tuple[str, str]]:
    return lambda item: (item[0][0], scope.name(item[0][1]))


def _waiting(job: Job, viewer: Viewer) -> dict[str, Any]:
    if viewer.may(job):
        return {"id": job.pk, "name": job.name, "state": job.state, "priority": job.priority}
    return {"id": None, "name": "another user's job", "state": job.state, "priority": None}
