"""The teams' shares over time: what each team holds in each resource group against what it
is entitled to, and its queue, appended to a capped Redis stream when it changes (at most
once a second) for the Cluster page's chart (``protocol/keys.py``, ``SHARES_KEY``, says the
format). Written by the live scheduler alone, from its decisions (docs/architecture.md,
"Tenancy")."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis

from protocol.connection import REDIS_DOWN
from protocol.keys import SHARES_KEPT, SHARES_KEY
from scheduler.policies import QUEUED, Decision, Snapshot, Team
from scheduler.policies.teams import entitlements, slots_by_team

log = logging.getLogger("edt.scheduler")

EVERY = 1.0  # seconds between two entries at most once


def group_shares(decision: Decision) -> dict[str, Any]:
    """One group's entry: its capacity and the slots held in it; per team that asks for
    slots or has a guarantee here, the slots its jobs hold now, what it is entitled to
    (exact) and what its jobs ask for, each counting its sub-teams' (a team's entitlement
    covers its subtree), its weight, guarantee and limit as this group read them, and per
    user of its own, their slots held and entitlement; per team, its own waiting jobs in
    order."""
    snapshot = decision.snapshot
    entitled, users = (decision.teams, decision.users) if decision.teams else entitlements(snapshot)
    held = slots_by_team(snapshot, {job.id: job.current for job in snapshot.jobs})
    demand = slots_by_team(snapshot, {job.id: job.max_workers for job in snapshot.jobs})
    config = {team.id: team for team in snapshot.teams}
    teams = {}
    for team, asked in demand.items():
        rules = config.get(team)
        if asked or (rules is not None and rules.guarantee):
            teams[team] = {"held": held.get(team, 0), "entitled": round(entitled.get(team, 0.0), 3),
                           "demand": asked, **_rules(rules),
                           "users": _users(snapshot, team, users.get(team, {}))}  # fmt: skip
    queue: dict[str, list[str]] = {}
    for job in sorted(snapshot.jobs, key=lambda j: (j.submitted, j.id)):
        if job.state == QUEUED and not decision.targets.get(job.id):
            queue.setdefault(job.team, []).append(job.id)
    total = sum(job.current for job in snapshot.jobs)
    return {"capacity": snapshot.capacity, "held": total, "teams": teams, "queue": queue}


def _rules(team: Team | None) -> dict[str, Any]:
    """A team's weight, guarantee and limit as the snapshot holds them (the jobs of no team:
    weight 1, nothing guaranteed, no limit)."""
    if team is None:
        return {"weight": 1, "guarantee": 0, "limit": None}
    return {"weight": team.weight, "guarantee": team.guarantee, "limit": team.limit}


def _users(snapshot: Snapshot, team: str, entitled: dict[str, float]) -> dict[str, Any]:
    """Each user with jobs of ``team`` itself (not its sub-teams'): their slots held and
    their entitlement within the team."""
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.team == team:
            held[job.owner] = held.get(job.owner, 0) + job.current
    return {owner: {"held": held.get(owner, 0), "entitled": round(entitled.get(owner, 0.0), 3)}
            for owner in sorted(set(held) | set(entitled))}  # fmt: skip


class SharesLog:
    """Offered each decision's groups; appends an entry when they differ from the last
    one written, at most every :data:`EVERY` seconds (what waits is written by
    :meth:`flush`, called each step). Redis away: the entry waits for the next try."""

    def __init__(self, client: Callable[[], redis.Redis]) -> None:
        self.client = client
        self.written: dict[str, Any] | None = None
        self.pending: dict[str, Any] | None = None
        self.at = 0.0

    def offer(self, decisions: dict[str, Decision]) -> None:
        groups = {group: group_shares(d) for group, d in decisions.items() if d.snapshot.jobs}
        self.pending = None if groups == self.written else groups
        self.flush()

    def flush(self) -> None:
        if self.pending is None or time.monotonic() - self.at < EVERY:
            return
        entry = {"t": round(time.time(), 3), "groups": self.pending}
        try:
            self.client().xadd(SHARES_KEY, {"data": json.dumps(entry)}, maxlen=SHARES_KEPT,
                               approximate=True)  # fmt: skip
        except REDIS_DOWN as exc:
            log.debug("the teams' shares wait for Redis: %s", exc)
            return
        self.written, self.pending, self.at = self.pending, None, time.monotonic()
