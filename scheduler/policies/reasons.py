"""Readable reasons for a job's new slot count, one explainer per policy.

Explainers are called only for the jobs whose count changes, so a decision over thousands of
waiting jobs formats a handful of lines, not thousands.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.policies.model import JobView
from scheduler.policies.teams import MEMBERS, TEAM, USER, Hierarchy, Node

# Who goes first when the minimums do not all fit, as the wait reasons say it.
PRIORITY_AHEAD = "jobs of higher priority or earlier submission go first"
LAS_AHEAD = "jobs of higher priority, then less attained service, go first"


def _waits(job: JobView) -> str:
    return "suspended" if job.current else "waits"


class FairshareExplainer:
    def __init__(
        self,
        capacity: int,
        jobs: Sequence[JobView],
        admitted: Sequence[JobView],
        shares: dict[str, float],
        ahead: str = PRIORITY_AHEAD,
    ) -> None:
        self.capacity = capacity
        self.ahead = ahead
        self.jobs = jobs
        self.admitted = admitted
        self.shares = shares
        self.common = ""  # the peers phrase of every job outside the top two, built once
        self.minimums = -1

    def __call__(self, job: JobView, target: int) -> str:
        if job.id not in self.shares:
            return self._wait(job)
        share = self.shares[job.id]
        bound = " (its max)" if target == job.max_workers else ""
        if target == job.min_workers and share == job.min_workers:
            bound = " (its min)"
        return f"{self._peers(job)}; exact share {share:.2f}{bound}"

    def _peers(self, job: JobView) -> str:
        top = self.admitted[:2]
        if len(self.admitted) > 2 and job is not top[0] and job is not top[1]:
            self.common = self.common or self._phrase(top, len(self.admitted) - 1)
            return f"{self.common} at priority {job.priority}"
        others = [p for p in self.admitted[:3] if p.id != job.id][:2]
        return self._phrase(others, len(self.admitted) - 1, job)

    def _phrase(self, others: Sequence[JobView], count: int, job: JobView | None = None) -> str:
        """ "shares N slots with …" naming up to two of the ``count`` other jobs; with one
        peer, comparing priorities with ``job``."""
        if count == 0:
            return f"alone on {self.capacity} slots"
        if count == 1 and job is not None:
            peer = others[0]
            return (
                f"shares {self.capacity} slots with {peer.label} "
                f"at priority {peer.priority} vs {job.priority}"
            )
        named = ", ".join(f"{p.label} at {p.priority}" for p in others)
        more = ", …" if count > len(others) else ""
        suffix = f" at priority {job.priority}" if job else ""
        return f"shares {self.capacity} slots with {count} other jobs ({named}{more}){suffix}"

    def _wait(self, job: JobView) -> str:
        if self.minimums < 0:
            self.minimums = sum(j.min_workers for j in self.jobs)
        return (
            f"{_waits(job)}: minimums total {self.minimums} > {self.capacity} slots; "
            f"{self.ahead} (priority {job.priority}, min {job.min_workers})"
        )


class TeamsExplainer:
    """Hierarchical fair share's reason: the levels that decided, from the team down.

    "team vision at its guarantee 6 of 8 slots; alice gets 3 of team vision's 6 slots, equal
    among 2 users; shares 3 slots with B at priority 5000 vs 5000; exact share 1.50". A level
    that decided nothing (no teams; one user) is left out; a waiting job's line says which
    bound kept it out (a team's limit, or its user's entitlement)."""

    def __init__(self, tree: Hierarchy, shares: dict[str, float]) -> None:
        self.tree = tree
        self.shares = shares
        self.named = len(tree.teams) > 1  # the snapshot has teams: say which level decided
        # Per user, built when first asked: the team's and user's part, its jobs' explainer.
        self.lines: dict[tuple[str, str], tuple[str, FairshareExplainer, Node]] = {}
        self.team_lines: dict[int, str] = {}

    def __call__(self, job: JobView, target: int) -> str:
        key = (job.team, job.owner)
        known = self.lines.get(key)
        if known is None:  # the team's and the user's part, once per user
            user = self.tree.users[key]
            fair = FairshareExplainer(user.amount, user.jobs, user.admitted, self.shares)
            above = "; ".join(line for line in (self._team(user), self._user(user)) if line)
            known = self.lines[key] = (f"{above}; " if above else "", fair, user)
        if job.id not in self.shares:
            return self._wait(job, known[2])
        return known[0] + known[1](job, target)

    def _where(self, node: Node) -> str:
        """What a node's slots are part of: the group's, or its parent team's."""
        parent = node.parent
        while parent is not None and parent.kind == MEMBERS:
            parent = parent.parent
        if parent is None or parent is self.tree.root:
            return f"{self.tree.root.amount} slots"
        return f"team {parent.label}'s {parent.amount} slots"

    def _team(self, user: Node) -> str:
        if not self.named:
            return ""
        line = self.team_lines.get(id(user.parent))
        if line is None:
            line = self.team_lines[id(user.parent)] = self._team_line(user)
        return line

    def _team_line(self, user: Node) -> str:
        team = user.parent
        while team is not None and team.kind != TEAM:
            team = team.parent
        if team is None or team is self.tree.root:
            return f"no team: {user.parent.amount if user.parent else 0} of {self._where(user)}"
        for node in team.path:  # a limit that binds, here or above
            if node.limit is not None and node.amount == node.limit < node.wanted:
                return f"team {node.label} at its limit {node.limit}"
        claim = team.claim(team.cap)
        where = self._where(team)
        if team.amount >= team.cap:
            return f"team {team.label} gets all {team.amount} slots its jobs ask for"
        if claim and team.amount <= claim:
            return f"team {team.label} at its guarantee {team.amount} of {where}"
        siblings = [c for c in (team.parent.children if team.parent else []) if c.cap]
        if len(siblings) == 1:
            return f"team {team.label} alone on {where}"
        peers = sum(c.weight for c in siblings)
        by_weight = f"by weight {team.weight} of {peers}"
        if claim:
            return (
                f"team {team.label}: {team.amount} of {where}, its guarantee {claim} and "
                f"{team.amount - claim} more {by_weight}"
            )
        return f"team {team.label}: {team.amount} of {where} {by_weight}"

    def _user(self, user: Node) -> str:
        parent = user.parent
        users = [c for c in parent.children if c.kind == USER and c.cap] if parent else []
        if len(users) < 2:
            return ""
        where = self._where(user)
        if user.amount >= user.cap:
            return f"{user.label} gets all {user.amount} slots their jobs ask for, of {where}"
        return f"{user.label} gets {user.amount} of {where}, equal among {len(users)} users"

    def _wait(self, job: JobView, user: Node) -> str:
        for node in user.path:
            if node.limit is not None and node.need + job.min_workers > node.limit:
                return f"{_waits(job)}: team {node.label} at its limit {node.limit}"
        return (
            f"{_waits(job)}: its min {job.min_workers} does not fit in {user.label}'s "
            f"{user.quota} entitled slots beside the {user.need_sum} their admitted jobs' "
            f"minimums take, nor in slots the others leave"
        )


class SpeedupExplainer:
    """fairshare's reason, plus the spare slots a job got for its speedup."""

    def __init__(self, fair: FairshareExplainer, extra: dict[str, int]) -> None:
        self.fair = fair
        self.extra = extra

    def __call__(self, job: JobView, target: int) -> str:
        line = self.fair(job, target)
        more = self.extra.get(job.id, 0)
        if more and target:
            line += f"; +{more} spare slot(s), where they add the most throughput"
        elif target and job.speedup and target < job.max_workers and not more:
            line += "; more slots add little to its measured speedup"
        return line


class OrderExplainer:
    """For policies that walk jobs in a fixed order and fill them: priority, fifo-gang."""

    def __init__(self, capacity: int, jobs: Sequence[JobView], order: str, gang: bool) -> None:
        self.capacity = capacity
        self.jobs = jobs
        self.position: dict[str, int] = {}  # built on the first call: most decisions change none
        self.order = order
        self.gang = gang

    def __call__(self, job: JobView, target: int) -> str:
        if not self.position:
            self.position = {job.id: index + 1 for index, job in enumerate(self.jobs)}
        place = f"#{self.position[job.id]} by {self.order}"
        if target == 0:
            return f"{_waits(job)}: {place}; the {self.capacity} slots are taken by jobs ahead"
        if self.gang:
            return f"starts as a gang of {target} ({place})"
        full = "its max " if target == job.max_workers else ""
        return f"{place}, filled first: gets {full}{target} of {self.capacity} slots"


class TiresiasExplainer:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, job: JobView, target: int) -> str:
        queue = 1 if job.attained < self.threshold else 2
        sign = "<" if queue == 1 else "≥"
        where = f"queue {queue}: attained {job.attained:.0f} {sign} {self.threshold:.0f} slot-s"
        if target == 0:
            return f"{_waits(job)}: {where}; jobs with less attained service go first"
        return f"runs as a gang of {target} ({where})"
