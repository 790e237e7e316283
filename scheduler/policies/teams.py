"""Hierarchical fair share: a group's slots divided over teams, then users, then jobs.

The hierarchy (docs/architecture.md, "Scheduling contract"): the group (one snapshot) holds
the top-level teams; a team holds its sub-teams and its users; a user holds their jobs.
Jobs of no team sit directly under the group, as if in one implicit team "" of weight 1
with no guarantee and no limit. A team's own users, where the team also has sub-teams,
together weigh as one sub-team of weight 1 beside them. Users of one team are equals
(weight 1 each); a user's jobs share by priority exactly as flat fair share does
(:mod:`scheduler.policies.fairshare`).

At every node, the node's slots ``A`` go to its children thus: each child team first gets
its *claim*, ``min(guarantee, demand)`` (a child's demand: the max_workers of the active
jobs below it, capped by the limits on the way); then the rest by weight, weighted
max-min, no child above its demand. In one formula: child ``i`` gets
``clamp(claim_i + λ·weight_i, floor_i, demand_i)`` with ``λ >= 0`` the one level at which
the children's slots add up to ``A`` (``floor_i`` is 0 for entitlements; see below for
whole slots). An idle guarantee (demand below it) is therefore lent by construction, and
taken back the moment its owner asks again: the answer is a pure function of demand.

Guarantees. A team's guarantee covers its sub-teams' (where theirs add up to more, the sum
is its guarantee). Where the group's capacity is below the top-level guarantees (slots were
lost), they are scaled down in proportion, whole slots by largest remainder, ties by id;
likewise sub-teams' within their parent's.

Entitlements (:func:`entitlements`): the exact (rational) slots each team and user gets by
the rule above for what its jobs ask, ignoring minimums and whole slots; what pages chart
allocations against.

Allocation (:class:`Hierarchy`), in whole slots:

0. **Quotas.** Every node's entitlement in whole slots: the division of step 2 over every
   active job, with no floors. A node's *need* is then the larger of the minimums of its
   admitted jobs (for a team: its children's needs added up) and its quota as far as its
   admitted jobs can use it: a job's minimum never takes slots another user or team is
   entitled to and can use, so submitting more jobs never gets a user more slots.
1. **Admission.** When every job can be admitted with the needs within the capacity and
   every limit, every job is. Otherwise each user admits their jobs in their fair-share
   order (priority, then remaining work where known, the least first, then submission)
   while their minimums fit in the user's quota, passing over a job whose minimum does not
   fit so a smaller one behind it may start;
   then, in the same order over all users, any other job whose admission keeps the needs
   within the capacity and the limits (it takes slots nobody else needs): work conserving
   without pushing anyone below their quota. So a job whose minimum is larger than its
   user's entitlement runs only where the others leave room; among one user's jobs a
   minimum is a floor, as in flat fair share.
2. **Division.** Top down, each node's whole slots go to its children by the rule above
   over the admitted jobs (a child's demand: its admitted jobs' maxima under the limits;
   its floor: its need), then whole slots by largest remainder (ties: the child whose
   first job comes first in fair-share order, then the id). A user's slots go to their
   admitted jobs by flat fair share.

Everything is integer arithmetic and exact (λ is a fraction), and every order is a total
one (ids break the last ties): the answer never depends on the order of the input.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from scheduler.policies.model import (
    JobView,
    Snapshot,
    Team,
    by_work,
    guarantees,
)

TEAM, MEMBERS, USER = 0, 1, 2
NO_TEAM = ""  # the implicit team of the jobs that name none

# A rational (numerator, denominator): exact slots.
Exact = tuple[int, int]
_MIN = attrgetter("min_workers")
_MAX = attrgetter("max_workers")


_LAST = 1 << 62  # after every job's position


@dataclass(eq=False, slots=True)
class Node:
    """One node of the hierarchy. TEAM: a team (the group itself is the TEAM ""); MEMBERS:
    a team's own users, where it also has sub-teams; USER: one owner's jobs in one team."""

    kind: int
    key: str  # the team's id (TEAM, MEMBERS) or the owner (USER)
    weight: int = 1
    guarantee: int = 0  # TEAM: its guarantee (covering its sub-teams'), scaled to fit
    limit: int | None = None
    label: str = ""
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    jobs: list[JobView] = field(default_factory=list)  # USER: active jobs, by priority
    first: int = _LAST  # the position of its first job in fair-share order: ties go to it
    demand: int = 0  # Σ max_workers below, under the limits
    wanted: int = 0  # the same before its own limit
    entitled: Exact = (0, 1)
    quota: int = 0  # its entitlement in whole slots (admission reads it under contention)
    # Admission and division (over the admitted jobs only):
    admitted: list[JobView] = field(default_factory=list)
    need_sum: int = 0  # Σ children's need (USER: Σ admitted minimums)
    protect: int = 0  # the part of its quota its admitted jobs can use: see settle
    need: int = 0  # the slots it must get (its floor): see settle
    cap_sum: int = 0  # Σ children's cap (USER: Σ admitted maxima)
    cap: int = 0  # its admitted demand, under its limit
    amount: int = 0  # whole slots it gets

    def claim(self, demand: int) -> int:
        return min(self.guarantee, demand)

    def settle(self) -> None:
        """cap, protect and need from need_sum and cap_sum: a node needs its admitted
        minimums and its quota as far as its admitted jobs can use it."""
        self.cap = self.cap_sum if self.limit is None else min(self.limit, self.cap_sum)
        self.protect = min(self.quota, self.cap)
        self.need = max(self.protect, self.need_sum)

    @property
    def path(self) -> Iterable[Node]:
        """The node, then its ancestors up to the group."""
        node: Node | None = self
        while node is not None:
            yield node
            node = node.parent


@functools.lru_cache(maxsize=64)
def _structure(teams: tuple[Team, ...]) -> tuple[dict[str, int], dict[str, list[Team]]]:
    """Each team's guarantee covering its sub-teams', and each team's sub-teams by id
    ("" : the top-level ones). Computed once per set of teams."""
    children: dict[str, list[Team]] = {}
    for team in sorted(teams, key=attrgetter("id")):
        children.setdefault(team.parent, []).append(team)
    return guarantees(teams), children


def scale(wanted: Mapping[str, int], budget: int) -> dict[str, int]:
    """``wanted`` as it is if it fits in ``budget``; else in proportion, whole by largest
    remainder, ties by key."""
    total = sum(wanted.values())
    if total <= budget:
        return dict(wanted)
    parts = {key: divmod(value * budget, total) for key, value in wanted.items()}
    scaled = {key: whole for key, (whole, _) in parts.items()}
    left = budget - sum(scaled.values())
    for key in sorted(parts, key=lambda k: (-parts[k][1], k))[:left]:
        scaled[key] += 1
    return scaled


def divide(amount: Exact, items: Sequence[tuple[int, int, int, int]]) -> tuple[list[int], int]:
    """Exact division of ``amount`` over children ``(claim, floor, demand, weight)``: child
    i gets ``clamp(claim_i + λ·weight_i, floor_i, demand_i)``, λ >= 0 such that they add
    up to ``amount``. Returns each child's slots over one common denominator.

    Requires ``Σ max(claim, floor) <= amount <= Σ demand`` and ``claim <= demand``. Shifted
    by the claims, it is the water level of flat fair share: walk the points where a child
    leaves its floor or reaches its demand, the sum being ``pinned + slope·λ`` between
    them, until it reaches the amount.
    """
    num, den = amount
    base = sum(claim for claim, _, _, _ in items)
    rest = num - base * den  # what goes by weight, over den
    lows = [max(0, floor - claim) for claim, floor, _, _ in items]
    highs = [demand - claim for claim, _, demand, _ in items]
    if sum(highs) * den <= rest:
        return [demand for _, _, demand, _ in items], 1
    points = []
    for index, (_, _, _, weight) in enumerate(items):
        points.append((lows[index] / weight, lows[index], weight, 1))
        points.append((highs[index] / weight, highs[index], weight, -1))
    points.sort()
    pinned, slope = sum(lows), 0
    level: Exact | None = None
    for _, value, weight, leaves in points:
        if (pinned * weight + slope * value) * den >= rest * weight:
            level = (rest - pinned * den, slope * den) if slope else (value, weight)
            break
        pinned -= value * leaves
        slope += weight * leaves
    if level is None:
        raise AssertionError("unreachable: the amount is above the children's demand")
    ln, ld = level
    parts = [
        claim * ld + min(max(ln * weight, low * ld), high * ld)
        for (claim, _, _, weight), low, high in zip(items, lows, highs, strict=True)
    ]
    return parts, ld


def whole(amount: int, children: Sequence[Node], parts: Sequence[int], den: int) -> list[int]:
    """Each child's whole slots of ``parts / den``, then one more to the largest remainders
    (ties: the child whose first job comes first in fair-share order, then kind and key)
    until ``amount``."""
    left = amount
    slots, remainders = [], []
    for index, (child, part) in enumerate(zip(children, parts, strict=True)):
        floor, remainder = divmod(part, den)
        slots.append(floor)
        left -= floor
        if remainder:
            remainders.append((-remainder, child.first, child.kind, child.key, index))
    if left:
        remainders.sort()
        for entry in remainders[:left]:
            slots[entry[4]] += 1
    return slots


class Hierarchy:
    """The hierarchy of one snapshot: its tree, entitlements, admission and whole slots per
    user (see the module). ``users`` are the USER nodes, ``teams`` the TEAM nodes by id
    ("" the group), ``jobs`` the active jobs in fair-share order."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.capacity = snapshot.capacity
        self.jobs = by_work(snapshot.jobs)
        covered, sub_teams = _structure(snapshot.teams)
        self.root = Node(TEAM, NO_TEAM)
        self.teams: dict[str, Node] = {NO_TEAM: self.root}
        self._build_teams(self.root, sub_teams, covered, snapshot.capacity)
        self.users: dict[tuple[str, str], Node] = {}
        for index, job in enumerate(self.jobs):
            key = (job.team, job.owner)
            user = self.users.get(key)
            if user is None:
                user = self.users[key] = Node(
                    USER, job.owner, label=job.owner or "(no owner)", first=index
                )
            user.jobs.append(job)
        self._attach_users()
        self._demands(self.root)
        top = min(self.capacity, self.root.demand)
        self.root.entitled = (top, 1)
        self._entitle(self.root)

    # The tree ---------------------------------------------------------------------------

    def _build_teams(self, node: Node, sub_teams: dict[str, list[Team]],
                     covered: dict[str, int], budget: int) -> None:  # fmt: skip
        """The team nodes below ``node``, their guarantees scaled to fit in ``budget``."""
        below = sub_teams.get(node.key, [])  # the group's key "" holds the top-level teams
        granted = scale({team.id: covered[team.id] for team in below}, budget)
        for team in below:
            child = Node(
                TEAM, team.id, team.weight, granted[team.id], team.limit, team.label, parent=node
            )
            node.children.append(child)
            self.teams[team.id] = child
            self._build_teams(child, sub_teams, covered, granted[team.id])

    def _attach_users(self) -> None:
        """Each user under its team: directly if the team has no sub-teams, else in the
        team's MEMBERS node (one child of weight 1 beside its sub-teams)."""
        members: dict[str, Node] = {}
        for (team_id, _), user in sorted(self.users.items()):
            team = self.teams[team_id]
            if any(child.kind == TEAM for child in team.children):
                group = members.get(team_id)
                if group is None:
                    group = members[team_id] = Node(
                        MEMBERS, team_id, label=f"{team.label or 'no team'}'s own users"
                    )
                    group.parent = team
                    team.children.append(group)
                user.parent = group
                group.children.append(user)
            else:
                user.parent = team
                team.children.append(user)

    def _demands(self, node: Node) -> None:
        """demand and first, from the leaves up."""
        if node.kind == USER:
            node.demand = node.wanted = sum(map(_MAX, node.jobs))
            return
        total = 0
        for child in node.children:
            self._demands(child)
            total += child.demand
            node.first = min(node.first, child.first)
        node.wanted = total
        node.demand = total if node.limit is None else min(node.limit, total)

    def _entitle(self, node: Node) -> None:
        """Each child's exact entitlement from the node's, top down."""
        children = [child for child in node.children if child.demand]
        for child in node.children:
            child.entitled = (0, 1)
        if not children or not node.entitled[0]:
            return
        items = [(child.claim(child.demand), 0, child.demand, child.weight) for child in children]
        parts, den = divide(node.entitled, items)
        for child, part in zip(children, parts, strict=True):
            child.entitled = (part, den)
            if child.kind != USER:
                self._entitle(child)

    # Admission ----------------------------------------------------------------------------

    def admit(self) -> None:
        """Every user's ``admitted`` jobs, and every node's need and cap (see the module)."""
        self.root.quota = min(self.capacity, self.root.demand)
        self._quotas(self.root)
        for user in self.users.values():
            user.admitted = user.jobs
            user.need_sum = sum(map(_MIN, user.jobs))
            user.cap_sum = user.demand
        if self._settle(self.root) and self.root.need <= self.capacity:
            return
        waiting: list[JobView] = []
        for user in self.users.values():  # 1. within each user's entitlement, in whole slots
            if user.need_sum <= user.quota:
                continue  # all of theirs fit (need_sum, cap_sum: every job, from above)
            admitted, used = [], 0
            for job in user.jobs:
                if used + job.min_workers <= user.quota:
                    admitted.append(job)
                    used += job.min_workers
                else:
                    waiting.append(job)
            user.admitted = admitted
            user.need_sum = used
            user.cap_sum = sum(map(_MAX, admitted))
        self._settle(self.root)
        # 2. Beyond entitlements, into room nobody else needs, in fair-share order over all
        #    users (a job may fit even when the group's needs are at its capacity: in room
        #    its own team is entitled to and a teammate cannot use).
        grown: set[Node] = set()
        for job in by_work(waiting):
            user = self.users[(job.team, job.owner)]
            if self._grow(user, job):
                grown.add(user)
        for user in grown:
            order = {id(job): index for index, job in enumerate(user.jobs)}
            user.admitted.sort(key=lambda job: order[id(job)])

    def _quotas(self, node: Node) -> None:
        """Entitlements in whole slots (``quota``), top down: the division below over every
        active job, with no floors."""
        children = [child for child in node.children if child.demand]
        for child in node.children:
            child.quota = 0
        if not children or not node.quota:
            return
        items = [(c.claim(c.demand), 0, c.demand, c.weight) for c in children]
        parts, den = divide((node.quota, 1), items)
        for child, amount in zip(children, whole(node.quota, children, parts, den), strict=True):
            child.quota = amount
        for child in children:
            if child.kind != USER:
                self._quotas(child)

    def _settle(self, node: Node) -> bool:
        """need and cap from the leaves up; False if a need is above a limit."""
        fits = True
        if node.kind != USER:
            node.need_sum = node.cap_sum = 0
            for child in node.children:
                fits = self._settle(child) and fits
                node.need_sum += child.need
                node.cap_sum += child.cap
        node.settle()
        return fits and (node.limit is None or node.need <= node.limit)

    def _grow(self, user: Node, job: JobView) -> bool:
        """Admit ``job`` of ``user`` if every need stays within its limit and the needs
        within the group's capacity; update needs and caps up the path. What each node
        protects stays as admission within quotas left it: a job admitted here takes room
        nobody else needs, and its own user's and team's protection does not grow with it
        (so a job that fits in the free slots is never kept out by its own entitlement)."""
        changes: list[tuple[Node, int, int, int, int]] = []
        need, cap = job.min_workers, job.max_workers
        for node in user.path:
            need_sum, cap_sum = node.need_sum + need, node.cap_sum + cap
            cap_now = cap_sum if node.limit is None else min(node.limit, cap_sum)
            need_now = max(node.protect, need_sum)
            if node.limit is not None and need_now > node.limit:
                return False
            changes.append((node, need_sum, cap_sum, need_now, cap_now))
            need, cap = need_now - node.need, cap_now - node.cap
        if self.root.need + need > self.capacity:
            return False
        for node, need_sum, cap_sum, need_now, cap_now in changes:
            node.need_sum, node.cap_sum, node.need, node.cap = need_sum, cap_sum, need_now, cap_now
        user.admitted = [*user.admitted, job]
        return True

    # Division -----------------------------------------------------------------------------

    def divide(self) -> None:
        """Every node's whole ``amount``, top down (users' amounts go to their jobs in
        :mod:`scheduler.policies.fairshare`)."""
        self.root.amount = min(self.capacity, self.root.cap)
        self._divide(self.root)

    def _divide(self, node: Node) -> None:
        children = [child for child in node.children if child.cap]
        for child in node.children:
            child.amount = 0
        if not children or not node.amount:
            return
        # A claim is never above the child's need: its need protects the claim already
        # (need >= quota >= claim, as far as its jobs can use it), except where a job
        # admitted beyond quotas took room its sub-team could not use (see _grow).
        items = [
            (min(child.claim(child.cap), child.need), child.need, child.cap, child.weight)
            for child in children
        ]
        parts, den = divide((node.amount, 1), items)
        for child, amount in zip(children, whole(node.amount, children, parts, den), strict=True):
            child.amount = amount
        for child in children:
            if child.kind != USER:
                self._divide(child)

    # What pages read ----------------------------------------------------------------------

    def entitlements(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """(per team, per user by team then owner) exact entitlements as floats; "" the jobs
        of no team, present only when there are some."""
        teams = {key: _float(node.entitled) for key, node in self.teams.items() if key}
        users: dict[str, dict[str, float]] = {}
        for (team, owner), node in self.users.items():
            users.setdefault(team, {})[owner] = _float(node.entitled)
        if NO_TEAM in users:
            no_team = [u for (t, _), u in self.users.items() if t == NO_TEAM]
            teams[NO_TEAM] = sum(_float(u.entitled) for u in no_team)
        return teams, users


def _float(value: Exact) -> float:
    return value[0] / value[1]


def entitlements(snapshot: Snapshot) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each team's and each user's entitlement in ``snapshot``: the exact slots hierarchical
    fair share gives them for what their active jobs ask (guarantees up to demand, then by
    weight, then equally among a team's users), before minimums and whole slots. Returns
    ``(per team id, per team id then owner)``; the team "" (jobs of no team) is there only
    when such jobs are."""
    return Hierarchy(snapshot).entitlements()


def slots_by_team(snapshot: Snapshot, targets: Mapping[str, int]) -> dict[str, int]:
    """Slots per team in ``targets``, each team's counting its sub-teams' (the subtree), ""
    for the jobs of no team: what to chart against :func:`entitlements`."""
    parent = {team.id: team.parent for team in snapshot.teams}
    totals = dict.fromkeys(parent, 0)
    for job in snapshot.jobs:
        slots = targets.get(job.id, 0)
        if not slots:
            continue
        team = job.team
        if not team:
            totals[NO_TEAM] = totals.get(NO_TEAM, 0) + slots
        while team:
            totals[team] += slots
            team = parent[team]
    return totals
